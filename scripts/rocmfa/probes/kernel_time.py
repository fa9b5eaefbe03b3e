"""Device time of timed calls from torch.profiler's kernel records, a second clock beside the
device events: what the GPU was busy with during each repeat.

A timed repeat is queued as [GPU spin (torch.cuda._sleep: `spin_kernel`), L2 flush (one fill
kernel), the call's kernels...]. The kernel records, in start order, are cut into repeats at
each spin kernel; the flush (the first kernel after the spin) is dropped; of the rest, `busy`
is the sum of kernel durations and `span` runs from the first kernel's start to the last one's
end (what an event pair around the call sees, less the event's own latency). busy / event time
far below 1 means the GPU idled through most of the timed interval waiting for the host's
launches: a launch-bound row, whose time says nothing about the kernels.

The profiler clears its records each cycle unless acc_events=True (torch warns so); one
profile() call is one cycle. torch + stdlib only.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

SPIN_KERNEL = "spin_kernel"  # at::cuda::sleep's kernel (aten/src/ATen/cuda/Sleep.cu), on ROCm too
# busy / event time below this: the GPU idled through most of the timed interval.
LAUNCH_BOUND_BUSY = 0.5

Kernel = tuple[str, float, float]  # name, start us, duration us


def profile(run: Callable[[], Any]) -> list[Kernel]:
    """Run `run` under torch.profiler (device activity) and return its kernel records in start
    order; [] when the profiler records no device activity (CPU, or no CUPTI/roctracer)."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    # Device activity only: the host-side records (every aten op) would cost more to collect
    # and parse than the few repeats take to run.
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return device_kernels(prof.events())


def device_kernels(events: Any) -> list[Kernel]:
    """(name, start us, duration us) of every device-side record, in start order."""
    out = []
    for e in events or []:
        if str(getattr(e, "device_type", "")).split(".")[-1] not in ("CUDA", "HIP", "PrivateUse1"):
            continue
        span = e.time_range
        out.append((str(e.name), float(span.start), float(span.end - span.start)))
    return sorted(out, key=lambda k: k[1])


def per_repeat(kernels: list[Kernel]) -> list[dict[str, float]]:
    """busy and span (us) and kernel count of each repeat: cut at spin kernels, flush dropped."""
    repeats: list[list[Kernel]] = []
    for kernel in kernels:
        if SPIN_KERNEL in kernel[0]:
            repeats.append([])
        elif repeats:
            repeats[-1].append(kernel)
    out = []
    for kernels_of_repeat in repeats:
        timed = kernels_of_repeat[1:]  # the first is the L2 flush
        if not timed:
            continue
        first = min(k[1] for k in timed)
        last = max(k[1] + k[2] for k in timed)
        out.append(
            {
                "busy_us": sum(k[2] for k in timed),
                "span_us": last - first,
                "kernels": float(len(timed)),
            }
        )
    return out


def summary(kernels: list[Kernel]) -> dict[str, float] | None:
    """Median busy and span (ms) over the repeats; None when no repeat was found."""
    rows = per_repeat(kernels)
    if not rows:
        return None
    return {
        "kernel_ms": round(statistics.median(r["busy_us"] for r in rows) / 1e3, 5),
        "kernel_span_ms": round(statistics.median(r["span_us"] for r in rows) / 1e3, 5),
        "kernels_per_call": statistics.median(r["kernels"] for r in rows),
        "profiled_repeats": len(rows),
    }


def busy_fields(kernel: dict[str, float] | None, event_ms: float | None) -> dict[str, Any]:
    """The row fields: kernel_ms, busy fraction (kernel time / event time), launch_bound."""
    if not kernel or not event_ms:
        return {"kernel_ms": None, "busy": None, "launch_bound": None}
    busy = kernel["kernel_ms"] / event_ms
    return {
        "kernel_ms": kernel["kernel_ms"],
        "busy": round(busy, 3),
        "launch_bound": busy < LAUNCH_BOUND_BUSY,
    }
