"""bench's measuring: the FLOP convention, the result row's fields, and timing one pass of
one case, with adaptive repeats, median/min/max/quartiles and a spread figure (`noisy` when it
is high), and the kernel time of rows that can be launch-bound. torch + stdlib only.

Device events with an L2 flush and a GPU spin ahead of each repeat, so host launch cost stays
out; the host clock on CPU."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

if __package__:
    from . import bench_change as change
    from . import sdpa_common as common
else:  # run as a plain script: this file's folder is first on sys.path
    import bench_change as change  # type: ignore[no-redef]
    import sdpa_common as common  # type: ignore[no-redef]

FLOP_CONVENTION = (
    "flash-attention convention: fwd = 4*B*Hq*Sq*Sk*D (causal: x0.5), "
    "bwd = 2.5 x fwd, fwd+bwd = 3.5 x fwd"
)
# Bytes a fused kernel must move at least (element size of q/k/v/o; logsumexp is fp32); the
# math path moves far more (it materialises the scores), so its GB/s is a floor.
BYTE_CONVENTION = (
    "minimum traffic: fwd reads q, k, v and writes o and logsumexp (fp32, B*Hq*Sq); bwd reads "
    "q, k, v, o, do, logsumexp and writes dq, dk, dv; fwd+bwd = fwd + bwd"
)
PASSES = ("fwd", "bwd", "fwdbwd")
PASS_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}
FLUSH_BYTES = 256 * 2**20
SLOW_CALL_MS = 50.0
# The row after calls that slow (the math path at XLarge, the heaviest load of the suite) warms up
# at least this long: timed at once, XLarge causal flash forward moved 5.6 % between runs on an
# H200 (1.87-1.97 ms), against 1.4 % when a profiler pass used to sit in between.
SETTLE_AFTER_SLOW_MS = 50.0
HEAD_START_CYCLES = 300_000  # GPU spin before each repeat, ~0.15 ms at 2 GHz (untimed)
# A backward's kernels are launched by the autograd engine's device thread; its wake-up varies
# (a Medium flash backward read 0.12 ms, or 0.30 ms with a 3.4 ms tail, behind a 0.2 ms spin).
BACKWARD_HEAD_START_CYCLES = 1_000_000  # ~0.5 ms
MAX_HEAD_START_CYCLES = 2_000_000  # ~1 ms: longer than any host launch sequence we time
# Spread = (p75 - p25) / median; above this the row is marked noisy.
NOISE_THRESHOLD = 0.10

# What identifies a timed case (bench_change.CASE_FIELDS: --compare matches runs on it), then
# its results.
RESULT_FIELDS = (
    *change.CASE_FIELDS, "status", "reason",
    *("median_ms", "min_ms", "max_ms", "p25_ms", "p75_ms", "repeats", "spread", "noisy"),
    *("flops", "tflops", "pct_peak", "above_peak", "measured_tflops_above_peak", "peak_tflops"),
    *("bytes", "intensity", "mem_roof_gbps", "bound", "gbps", "pct_roof"),
    *("launch_ms", "kernel_ms", "busy", "launch_bound", "host_s"),
)  # fmt: skip
PROFILED_REPEATS = 3  # repeats timed again under torch.profiler for the kernel time
# GPU idle inside a timed repeat is at most the host's launch time of the call (once the host has
# queued the call, the GPU never waits), and gaps between queued kernels are ~1 us against >= 4 us
# of host launch per kernel; so a row whose launch time is under this fraction of its event time
# stays busy over half the time: not launch-bound, and it is not profiled.
PROFILE_LAUNCH_FRACTION = 0.25


# --------------------------------------------------------------------------- FLOPs, memory


def attention_flops(shape: common.Shape, causal: bool, pass_name: str) -> float:
    forward = 4.0 * shape.batch * shape.q_heads * shape.seq * shape.kv_seq * shape.head_dim
    if causal:
        forward *= 0.5
    return forward * PASS_FLOP_FACTOR[pass_name]


def rate_fields(flops: float, median_ms: float, peak: float | None) -> dict[str, Any]:
    """TFLOP/s and % of peak; a rate above peak is impossible, so it is flagged, not shown."""
    tflops = flops / (median_ms * 1e-3) / 1e12
    if peak is not None and tflops > peak:
        return {
            "tflops": None,
            "pct_peak": None,
            "above_peak": True,
            "measured_tflops_above_peak": float(f"{tflops:.4g}"),  # tiny rates stay > 0
        }
    return {
        "tflops": round(tflops, 3),
        "pct_peak": round(100.0 * tflops / peak, 2) if peak else None,
        "above_peak": False,
        "measured_tflops_above_peak": None,
    }


def attention_bytes(shape: common.Shape, pass_name: str, element_size: int) -> int:
    """BYTE_CONVENTION: q/o/do/dq are B*Hq*Sq*D, k/v/dk/dv B*Hkv*Sk*D, logsumexp B*Hq*Sq fp32."""
    n_q = shape.batch * shape.q_heads * shape.seq * shape.head_dim
    n_kv = shape.batch * shape.kv_heads * shape.kv_seq * shape.head_dim
    lse = 4 * shape.batch * shape.q_heads * shape.seq
    fwd = (2 * n_q + 2 * n_kv) * element_size + lse  # q, k, v in; o, lse out
    bwd = (4 * n_q + 4 * n_kv) * element_size + lse  # q, k, v, o, do, lse in; dq, dk, dv out
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[pass_name]


def roof_fields(
    flops: float,
    nbytes: int,
    median_ms: float,
    peak_tflops: float | None,
    roof_gbps: float | None,
    pct_peak: float | None,
) -> dict[str, Any]:
    """Arithmetic intensity, which roof binds (memory when the intensity is under the ridge
    point peak / roof), achieved GB/s and % of the binding roof (the compute % when
    compute-bound)."""
    intensity = flops / nbytes
    gbps = nbytes / (median_ms * 1e-3) / 1e9
    bound = None
    if peak_tflops and roof_gbps:
        bound = "memory" if intensity < peak_tflops * 1e3 / roof_gbps else "compute"
    pct = pct_peak if bound == "compute" else None
    if bound == "memory":
        pct = round(100.0 * gbps / roof_gbps, 2)
    return {
        "bytes": nbytes,
        "intensity": round(intensity, 2),
        "mem_roof_gbps": roof_gbps,
        "bound": bound,
        "gbps": round(gbps, 2),
        "pct_roof": pct,
    }


def rates(
    shape: common.Shape,
    causal: bool,
    pass_name: str,
    median_ms: float,
    roofs: tuple[float | None, float | None],
    element_size: int,
) -> dict[str, Any]:
    """A timed row's FLOPs, TFLOP/s and % of peak, bytes and roof fields; roofs: (peak
    TFLOP/s, memory GB/s)."""
    peak, roof_gbps = roofs
    flops = attention_flops(shape, causal, pass_name)
    fields = {"flops": flops, **rate_fields(flops, median_ms, peak)}
    nbytes = attention_bytes(shape, pass_name, element_size)
    return fields | roof_fields(flops, nbytes, median_ms, peak, roof_gbps, fields["pct_peak"])


# --------------------------------------------------------------------------- timing


class Timer:
    """Times a callable: device events + L2 flush on GPU, perf_counter on CPU."""

    def __init__(self, device: Any) -> None:
        import torch

        self.device = device
        self.gpu = device.type == "cuda"
        self.flush_buffer = (
            torch.empty(FLUSH_BYTES, dtype=torch.int8, device=device) if self.gpu else None
        )
        self.gpu_sleep = getattr(torch.cuda, "_sleep", None) if self.gpu else None
        self.head_start_cycles = HEAD_START_CYCLES
        self.launch_ms: list[float] = []  # host time of each timed call (GPU)
        self.settle_ms = 0.0  # the next warm-up's minimum (SETTLE_AFTER_SLOW_MS)

    def set_head_start(self, estimate_ms: float, backward: bool = False) -> None:
        """Spin at least as long as one synchronised call took on the host (an autograd
        backward at Tiny spends ~0.2 ms launching), at ~2 GHz, 1.5x for margin."""
        cycles = int(estimate_ms * 1e-3 * 2e9 * 1.5)
        floor = BACKWARD_HEAD_START_CYCLES if backward else HEAD_START_CYCLES
        self.head_start_cycles = max(floor, min(MAX_HEAD_START_CYCLES, cycles))

    def sync(self) -> None:
        import torch

        if self.gpu:
            torch.cuda.synchronize(self.device)

    def call_once(self, fn: Callable[[], Any], before: Callable[[], Any]) -> float:
        """One synchronised call; its host-clock time in ms."""
        before()
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        return (time.perf_counter() - t0) * 1e3

    def warmup(
        self, fn: Callable[[], Any], before: Callable[[], Any], first_ms: float, warmup_ms: float,
        min_calls: int,
    ) -> float:  # fmt: skip
        """Warm up after a first (probe) call that took first_ms; returns the per-call estimate.

        The first call carries one-off costs (module load, cuDNN plan build, allocator growth),
        so the estimate comes from later calls. A call slower than SLOW_CALL_MS gets one more
        call to tell one-off costs from a slow call; a slow call is warm after it.
        """
        times: list[float] = []
        spent, calls = first_ms, 1
        if first_ms >= SLOW_CALL_MS:
            times.append(self.call_once(fn, before))
            spent, calls = spent + times[-1], 2
        slow = bool(times) and times[-1] >= SLOW_CALL_MS
        while calls < min_calls or (
            not slow and (len(times) < 2 or spent < warmup_ms) and calls < 1000
        ):
            times.append(self.call_once(fn, before))
            spent, calls = spent + times[-1], calls + 1
        return statistics.median(times) if times else first_ms

    def measure(self, fn: Callable[[], Any], before: Callable[[], Any], repeats: int) -> list:
        import torch

        if not self.gpu:
            out = []
            for _ in range(repeats):
                before()
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e3)
            return out
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for i in range(repeats):
            before()
            if self.gpu_sleep is not None:
                # Give the host a head start: a backward's kernels take the autograd engine
                # ~0.1 ms to launch, as long as a Medium backward runs; without queued work
                # the events would time the host's launch gaps instead of the GPU.
                self.gpu_sleep(self.head_start_cycles)
            self.flush_buffer.zero_()
            starts[i].record()
            t0 = time.perf_counter()
            fn()
            self.launch_ms.append((time.perf_counter() - t0) * 1e3)
            ends[i].record()
        self.sync()
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def spread(times_ms: list[float]) -> float:
    """(p75 - p25) / median: 0.1 means the middle half of the repeats spans 10% of the median."""
    if len(times_ms) < 2:
        return 0.0
    q = statistics.quantiles(sorted(times_ms), n=4, method="inclusive")
    median = statistics.median(times_ms)
    return (q[2] - q[0]) / median if median > 0 else 0.0


def summarize(times_ms: list[float], noise_threshold: float = NOISE_THRESHOLD) -> dict[str, Any]:
    ordered = sorted(times_ms)
    q = statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) >= 2 else ordered * 3
    figure = spread(ordered)
    return {
        "spread": round(figure, 4),
        "noisy": figure > noise_threshold,
        "median_ms": round(statistics.median(ordered), 5),
        "min_ms": round(ordered[0], 5),
        "max_ms": round(ordered[-1], 5),
        "p25_ms": round(q[0], 5),
        "p75_ms": round(q[2], 5),
        "repeats": len(ordered),
    }


# --------------------------------------------------------------------------- one case


class Tensors:
    """q, k, v (requiring grad) and the output gradient for one shape and dtype."""

    def __init__(self, shape: common.Shape, dtype: Any, device: Any) -> None:
        import torch

        self.shape = shape
        # Generated on the device: CPU generation of the XLarge inputs alone takes seconds.
        gen = torch.Generator(device=device).manual_seed(0)

        def make(heads: int, seq: int) -> Any:
            t = torch.randn(shape.batch, heads, seq, shape.head_dim, generator=gen, device=device)
            return t.to(dtype).requires_grad_(True)

        self.q = make(shape.q_heads, shape.seq)
        self.k = make(shape.kv_heads, shape.kv_seq)
        self.v = make(shape.kv_heads, shape.kv_seq)
        self.dout = make(shape.q_heads, shape.seq).detach()

    def reset_grads(self) -> None:
        self.q.grad = self.k.grad = self.v.grad = None


def pass_callables(
    tensors: Tensors, causal: bool, pass_name: str
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(timed fn, untimed setup before each call) for one pass."""
    q, k, v, dout = tensors.q, tensors.k, tensors.v, tensors.dout
    forward = common.sdpa_call(q, k, v, causal)
    if pass_name == "fwd":
        # Training forward (inputs require grad); the timer drops the output at once so that
        # saved activations don't pile up across repeats.
        return forward, (lambda: None)
    if pass_name == "bwd":
        out = forward()  # forward once; only backward is timed
        return (lambda: out.backward(dout, retain_graph=True)), tensors.reset_grads
    return (lambda: forward().backward(dout)), tensors.reset_grads


def run_pass(
    timer: Timer, tensors: Tensors, causal: bool, backend: str, pass_name: str, opts: Any,
    known_estimate: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Time one pass; returns status fields plus timing fields when it ran.

    known_estimate: per-call ms when earlier passes of this case already warmed every kernel
    this pass runs (fwd+bwd after fwd and bwd); the probe call is then skipped.
    """
    started = time.perf_counter()
    try:
        with common.backend_context(backend, timer.device):
            # Torch explains a refusal in warnings; they are recorded only around the first call
            # so that the warning machinery stays out of the timed loop.
            with common.capture_warnings() as caught:
                try:
                    fn, before = pass_callables(tensors, causal, pass_name)
                    first_ms = None if known_estimate else timer.call_once(fn, before)
                except Exception as exc:
                    return _failure(timer, tensors, exc, caught)
            estimate = known_estimate
            if first_ms is not None:
                warmup_ms = max(opts.warmup_ms, timer.settle_ms if timer.gpu else 0.0)
                estimate = timer.warmup(fn, before, first_ms, warmup_ms, opts.warmup)
            timer.settle_ms = SETTLE_AFTER_SLOW_MS if estimate >= SLOW_CALL_MS else 0.0
            timer.set_head_start(estimate, backward=pass_name != "fwd")
            timer.launch_ms = []
            summary = summarize(timer.measure(fn, before, repeat_count(opts, estimate)))
            launch = statistics.median(timer.launch_ms) if timer.launch_ms else None
            busy = kernel_fields(timer, fn, before, summary["median_ms"], launch, opts)
        tensors.reset_grads()
        return {
            "status": "ok",
            "reason": None,
            **summary,
            **busy,
            "launch_ms": None if launch is None else round(launch, 5),
            "host_s": round(time.perf_counter() - started, 3),
        }
    except Exception as exc:  # torch raises RuntimeError/NotImplementedError/ValueError
        return _failure(timer, tensors, exc, [])


def repeat_count(opts: Any, estimate: float) -> int:
    """--repeats, else what fits --budget-ms, within --min-repeats..--max-repeats."""
    if opts.repeats:
        return opts.repeats
    floor = opts.min_repeats
    if estimate >= SLOW_CALL_MS:
        # Calls this slow (the math path at XLarge) vary by well under 1%; two samples bound
        # the spread and keep the default suite's wall time down.
        floor = min(floor, opts.slow_min_repeats)
    return max(floor, min(opts.max_repeats, int(opts.budget_ms / max(estimate, 1e-6))))


# --------------------------------------------------------------------------- kernel time
# A timed repeat is queued as [GPU spin (torch.cuda._sleep: `spin_kernel`, at::cuda::sleep in
# aten/src/ATen/cuda/Sleep.cu, on ROCm too), L2 flush (one fill kernel), the call's kernels].
# The profiler's kernel records, in start order, are cut into repeats at each spin kernel, the
# flush is dropped, and the rest is summed: what the GPU was busy with during the repeat.
SPIN_KERNEL = "spin_kernel"
LAUNCH_BOUND_BUSY = 0.5  # busy / event time below this: the GPU idled most of the interval


def profile(run: Callable[[], Any]) -> list[tuple[str, float, float]]:
    """(name, start us, duration us) of the device records while `run` runs, in start order;
    [] when the profiler records no device activity (CPU, or no CUPTI/roctracer)."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    # Device activity only: host records (every aten op) would cost more than the repeats.
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    out = []
    for e in prof.events() or []:
        if str(getattr(e, "device_type", "")).split(".")[-1] in ("CUDA", "HIP", "PrivateUse1"):
            out.append((str(e.name), float(e.time_range.start), float(e.time_range.elapsed_us())))
    return sorted(out, key=lambda k: k[1])


def kernel_ms_per_repeat(kernels: list[tuple[str, float, float]]) -> float | None:
    """Median busy time (ms) of the repeats: cut at spin kernels, the flush dropped."""
    repeats: list[list[float]] = []
    for name, _start, duration in kernels:
        if SPIN_KERNEL in name:
            repeats.append([])
        elif repeats:
            repeats[-1].append(duration)
    busy = [sum(r[1:]) for r in repeats if len(r) > 1]
    return round(statistics.median(busy) / 1e3, 5) if busy else None


def kernel_fields(
    timer: Timer, fn: Any, before: Any, median: float, launch: Any, opts: Any
) -> dict[str, Any]:
    """Kernel time, busy fraction and launch-bound label of a row that can be launch-bound
    (see PROFILE_LAUNCH_FRACTION), from PROFILED_REPEATS repeats under torch.profiler."""
    none = {"kernel_ms": None, "busy": None, "launch_bound": None}
    if launch is None or not getattr(opts, "kernel_time", True):
        return none
    if launch < PROFILE_LAUNCH_FRACTION * median:
        return {**none, "launch_bound": False}
    kernel = kernel_ms_per_repeat(profile(lambda: timer.measure(fn, before, PROFILED_REPEATS)))
    if not kernel:
        return none
    busy = kernel / median
    return {"kernel_ms": kernel, "busy": round(busy, 3), "launch_bound": busy < LAUNCH_BOUND_BUSY}


def _failure(timer: Timer, tensors: Tensors, exc: Exception, caught: list) -> dict[str, Any]:
    tensors.reset_grads()
    with contextlib.suppress(Exception):
        timer.sync()
    if common.is_oom(exc):
        release_cache(timer.device)
        return {"status": "skipped", "reason": f"out of memory: {common.first_line(exc)}"}
    text = str(exc)
    unsupported = isinstance(exc, NotImplementedError) or any(
        s in text
        for s in ("No available kernel", "No viable backend", "not supported", "only on ROCm")
    )
    return {
        "status": "unavailable" if unsupported else "error",
        "reason": common.reason_from(exc, caught),
    }


def release_cache(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()
