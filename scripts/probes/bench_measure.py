"""bench's measuring: the FLOP convention, the result row's fields, and timing one pass of
one case (device events with an L2 flush and a GPU spin ahead of each repeat; host clock on
CPU), with adaptive repeats and median/min/max/quartiles. torch + stdlib only."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

if __package__:
    from . import sdpa_common as common
else:  # run as a plain script: this file's folder is first on sys.path
    import sdpa_common as common  # type: ignore[no-redef]

FLOP_CONVENTION = (
    "flash-attention convention: fwd = 4*B*Hq*Sq*Sk*D (causal: x0.5), "
    "bwd = 2.5 x fwd, fwd+bwd = 3.5 x fwd"
)
PASSES = ("fwd", "bwd", "fwdbwd")
PASS_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}
FLUSH_BYTES = 256 * 2**20
SLOW_CALL_MS = 50.0
HEAD_START_CYCLES = 300_000  # GPU spin before each repeat, ~0.15 ms at 2 GHz (untimed)

# What identifies a timed case (--compare matches runs on it); the rest are its results.
CASE_FIELDS = (
    "batch",
    "q_heads",
    "kv_heads",
    "seq_q",
    "seq_k",
    "head_dim",
    "dtype",
    "causal",
    "backend",
    "pass",
)
RESULT_FIELDS = (
    "size",
    *CASE_FIELDS,
    "status",
    "reason",
    "median_ms",
    "min_ms",
    "max_ms",
    "p25_ms",
    "p75_ms",
    "repeats",
    "flops",
    "tflops",
    "pct_peak",
    "above_peak",
    "measured_tflops_above_peak",
    "peak_tflops",
    "host_s",
)


# --------------------------------------------------------------------------- FLOPs, memory


def attention_flops(shape: common.Shape, causal: bool, pass_name: str) -> float:
    forward = 4.0 * shape.batch * shape.q_heads * shape.seq * shape.seq * shape.head_dim
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
            # significant digits, not decimals: a tiny rate must still read as above the peak
            "measured_tflops_above_peak": float(f"{tflops:.4g}"),
        }
    return {
        "tflops": round(tflops, 3),
        "pct_peak": round(100.0 * tflops / peak, 2) if peak else None,
        "above_peak": False,
        "measured_tflops_above_peak": None,
    }


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
        self,
        fn: Callable[[], Any],
        before: Callable[[], Any],
        first_ms: float,
        warmup_ms: float,
        min_calls: int,
    ) -> float:
        """Warm up after a first (probe) call that took first_ms; returns the per-call estimate.

        The first call carries one-off costs (module load, cuDNN plan build, allocator growth),
        so the estimate comes from later calls. Calls slower than SLOW_CALL_MS (the math path
        at XLarge) are warm after one repeat; more warm-up would only add to the wall time.
        """
        times: list[float] = []
        spent = first_ms
        calls = 1
        if first_ms >= SLOW_CALL_MS:
            # Slow because of one-off costs (a cuDNN plan build) or slow for real? One more
            # call tells; only a call that is slow for real ends the warm-up here.
            times.append(self.call_once(fn, before))
            spent += times[-1]
            calls += 1
        slow = bool(times) and times[-1] >= SLOW_CALL_MS
        while calls < min_calls or (
            not slow and (len(times) < 2 or spent < warmup_ms) and calls < 1000
        ):
            elapsed = self.call_once(fn, before)
            times.append(elapsed)
            spent += elapsed
            calls += 1
        return statistics.median(times) if times else first_ms

    def measure(
        self, fn: Callable[[], Any], before: Callable[[], Any], repeats: int
    ) -> list[float]:
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
                self.gpu_sleep(HEAD_START_CYCLES)
            self.flush_buffer.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        self.sync()
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def summarize(times_ms: list[float]) -> dict[str, Any]:
    ordered = sorted(times_ms)
    if len(ordered) >= 2:
        q = statistics.quantiles(ordered, n=4, method="inclusive")
        p25, p75 = q[0], q[2]
    else:
        p25 = p75 = ordered[0]
    return {
        "median_ms": round(statistics.median(ordered), 5),
        "min_ms": round(ordered[0], 5),
        "max_ms": round(ordered[-1], 5),
        "p25_ms": round(p25, 5),
        "p75_ms": round(p75, 5),
        "repeats": len(ordered),
    }


# --------------------------------------------------------------------------- one case


class Tensors:
    """q, k, v (requiring grad) and the output gradient for one shape and dtype."""

    def __init__(self, shape: common.Shape, dtype: Any, device: Any) -> None:
        import torch

        # Generated on the device: CPU generation of the XLarge inputs alone takes seconds.
        gen = torch.Generator(device=device).manual_seed(0)

        def make(heads: int) -> Any:
            t = torch.randn(
                shape.batch, heads, shape.seq, shape.head_dim, generator=gen, device=device
            )
            return t.to(dtype).requires_grad_(True)

        self.q = make(shape.q_heads)
        self.k = make(shape.kv_heads)
        self.v = make(shape.kv_heads)
        self.dout = make(shape.q_heads).detach()

    def reset_grads(self) -> None:
        self.q.grad = self.k.grad = self.v.grad = None


def pass_callables(
    tensors: Tensors, causal: bool, pass_name: str
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(timed fn, untimed setup before each call) for one pass."""
    q, k, v, dout = tensors.q, tensors.k, tensors.v, tensors.dout
    if pass_name == "fwd":

        def forward() -> None:
            # Training forward (inputs require grad); the output is dropped at once so that
            # saved activations don't pile up across repeats.
            common.sdpa(q, k, v, causal)

        return forward, (lambda: None)
    if pass_name == "bwd":
        out = common.sdpa(q, k, v, causal)  # forward once; only backward is timed
        return (
            lambda: out.backward(dout, retain_graph=True),
            tensors.reset_grads,
        )
    return (lambda: common.sdpa(q, k, v, causal).backward(dout)), tensors.reset_grads


def run_pass(
    timer: Timer,
    tensors: Tensors,
    causal: bool,
    backend: str,
    pass_name: str,
    opts: Any,
    known_estimate: float | None = None,
) -> dict[str, Any]:
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
            if first_ms is None:
                estimate = known_estimate
            else:
                estimate = timer.warmup(fn, before, first_ms, opts.warmup_ms, opts.warmup)
            if opts.repeats:
                repeats = opts.repeats
            else:
                wanted = int(opts.budget_ms / max(estimate, 1e-6))
                floor = opts.min_repeats
                if estimate >= SLOW_CALL_MS:
                    # Calls this slow (the math path at XLarge) vary by well under 1%; two
                    # samples bound the spread and keep the default suite's wall time down.
                    floor = min(floor, opts.slow_min_repeats)
                repeats = max(floor, min(opts.max_repeats, wanted))
            times = timer.measure(fn, before, repeats)
        tensors.reset_grads()
        return {
            "status": "ok",
            "reason": None,
            **summarize(times),
            "host_s": round(time.perf_counter() - started, 3),
        }
    except Exception as exc:  # torch raises RuntimeError/NotImplementedError/ValueError
        return _failure(timer, tensors, exc, [])


def _failure(timer: Timer, tensors: Tensors, exc: Exception, caught: list) -> dict[str, Any]:
    tensors.reset_grads()
    with contextlib.suppress(Exception):
        timer.sync()
    if common.is_oom(exc):
        release_cache(timer.device)
        return {"status": "skipped", "reason": f"out of memory: {common.first_line(exc)}"}
    status = "unavailable" if _is_unsupported(exc) else "error"
    return {"status": status, "reason": common.reason_from(exc, caught)}


def _is_unsupported(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, NotImplementedError) or any(
        s in text
        for s in ("No available kernel", "No viable backend", "not supported", "only on ROCm")
    )


def release_cache(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()
