"""Benchmark torch scaled_dot_product_attention per backend: forward, backward, forward+backward.

Timing: device events (torch.cuda.Event; the same API on ROCm) around each repeat, with a 256 MiB
buffer written before every repeat to flush the L2 and a short GPU spin (torch.cuda._sleep)
queued ahead of it so that launch latency stays out of the window, after a warm-up; median,
min/max and quartiles are reported. On CPU the host clock (time.perf_counter) is used and
there is no flush.
The number of repeats adapts to a time budget per measurement (--budget-ms, clamped to
--min-repeats..--max-repeats) unless --repeats fixes it.

FLOPs follow the flash-attention convention (say so when quoting the numbers):
forward 4*B*Hq*Sq*Sk*D, causal half of that, backward 2.5x forward, forward+backward 3.5x.
A rate above the device's peak is flagged ("!>peak", "above_peak": true), never shown as a
rate.

Run as `python scripts/bench.py [options]` with any Python that has torch (CPU, CUDA or ROCm).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__:
    from . import sdpa_common as common
else:  # run as `python scripts/bench.py`: this file's folder is first on sys.path
    import sdpa_common as common  # type: ignore[no-redef]

PROG = "bench.py"
SCHEMA = "sdpa-bench/1"
FLOP_CONVENTION = (
    "flash-attention convention: fwd = 4*B*Hq*Sq*Sk*D (causal: x0.5), "
    "bwd = 2.5 x fwd, fwd+bwd = 3.5 x fwd"
)
PASSES = ("fwd", "bwd", "fwdbwd")
PASS_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}
FLUSH_BYTES = 256 * 2**20
SLOW_CALL_MS = 50.0
HEAD_START_CYCLES = 300_000  # GPU spin before each repeat, ~0.15 ms at 2 GHz (untimed)

# The original 05-attention-bench.py suite (B, H, S, D).
SIZES = {
    "Tiny": (1, 1, 128, 64),
    "Small": (2, 8, 512, 64),
    "Medium": (4, 8, 1024, 64),
    "Large": (8, 16, 2048, 64),
    "XLarge": (16, 16, 4096, 64),
}

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
            "measured_tflops_above_peak": round(tflops, 3),
        }
    return {
        "tflops": round(tflops, 3),
        "pct_peak": round(100.0 * tflops / peak, 2) if peak else None,
        "above_peak": False,
        "measured_tflops_above_peak": None,
    }


def estimate_bytes(shape: common.Shape, backend: str, element_size: int) -> int:
    """Peak memory of one case: inputs, output, grads, plus what the backend materialises.

    q/out/dout/dq and k/v/dk/dv, one spare output. The math path upcasts fp16/bf16 to fp32 and
    materialises B*Hq*Sq*Sk scores: scores and softmax in forward, softmax kept for backward plus
    two score-sized gradients while it runs (3 fp32 score tensors at peak), and with grouped-query
    heads expanded fp32 copies of K and V.
    """
    n_q = shape.batch * shape.q_heads * shape.seq * shape.head_dim
    n_kv = shape.batch * shape.kv_heads * shape.seq * shape.head_dim
    total = (5 * n_q + 4 * n_kv) * element_size
    if backend == "math":
        scores = shape.batch * shape.q_heads * shape.seq * shape.seq
        total += 3 * scores * 4 + 8 * n_q * 4
    else:
        total += 2 * shape.batch * shape.q_heads * shape.seq * 4  # logsumexp and friends
    return total


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
        _release_cache(timer.device)
        return {"status": "skipped", "reason": f"out of memory: {common.first_line(exc)}"}
    status = "unavailable" if _is_unsupported(exc) else "error"
    return {"status": status, "reason": common.reason_from(exc, caught)}


def _is_unsupported(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, NotImplementedError) or any(
        s in text
        for s in ("No available kernel", "No viable backend", "not supported", "only on ROCm")
    )


def _release_cache(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- suite


def build_shapes(opts: Any) -> list[common.Shape]:
    shapes: list[common.Shape] = []
    if opts.sizes is not None or not opts.shape:
        wanted = opts.sizes or ",".join(SIZES)
        by_lower = {k.lower(): k for k in SIZES}
        for token in (t.strip() for t in wanted.split(",") if t.strip()):
            if token.lower() not in by_lower:
                raise common.UsageError(f"unknown size {token!r} (choose from {', '.join(SIZES)})")
            name = by_lower[token.lower()]
            b, h, s, d = SIZES[name]
            kv = opts.kv_heads or h
            if h % kv:
                raise common.UsageError(f"--kv-heads {kv} does not divide {name}'s {h} heads")
            shapes.append(common.Shape(name, b, h, kv, s, d))
    for text in opts.shape or []:
        shapes.append(common.parse_shape(text, opts.kv_heads))
    return shapes


def run_suite(opts: Any, device: Any, arch: str | None, arches: dict[str, Any]) -> list[dict]:
    import torch

    shapes = build_shapes(opts)
    dtypes = common.parse_dtypes(opts.dtypes)
    backends = common.parse_backends(opts.backends, device)
    causals = {"yes": [True], "no": [False], "both": [False, True]}[opts.causal]
    passes = [p.strip() for p in opts.passes.split(",") if p.strip()]
    bad = [p for p in passes if p not in PASSES]
    if bad or not passes:
        raise common.UsageError(f"unknown pass {','.join(bad)!r} (choose from fwd, bwd, fwdbwd)")

    timer = Timer(device)
    limit = opts.mem_limit_gib * 2**30 if opts.mem_limit_gib is not None else None
    total_cases = len(shapes) * len(dtypes) * len(causals) * len(backends)
    done = 0
    results: list[dict] = []
    for shape in shapes:
        for dtype_name in dtypes:
            peak, _ = common.peak_for(arch, dtype_name, opts.peak_tflops, arches)
            dtype = common.torch_dtype(dtype_name)
            tensors = None
            for causal in causals:
                for backend in backends:
                    done += 1
                    label = (
                        f"[{done}/{total_cases}] {shape.name} {dtype_name} "
                        f"{'causal' if causal else 'non-causal'} {backend}"
                    )
                    base = {
                        **shape.as_dict(),
                        "dtype": dtype_name,
                        "causal": causal,
                        "backend": backend,
                        "peak_tflops": peak,
                    }
                    skip = _memory_skip_reason(shape, backend, dtype, device, timer, limit)
                    if skip is None and tensors is None:
                        try:
                            tensors = Tensors(shape, dtype, device)
                        except Exception as exc:
                            if not common.is_oom(exc):
                                raise
                            _release_cache(device)
                            skip = f"out of memory allocating inputs: {common.first_line(exc)}"
                    row_status = []
                    estimates: dict[str, float] = {}
                    for pass_name in passes:
                        row = dict(base, **{"pass": pass_name})
                        known = None
                        if pass_name == "fwdbwd" and {"fwd", "bwd"} <= estimates.keys():
                            known = estimates["fwd"] + estimates["bwd"]
                        if skip is not None:
                            row.update(status="skipped", reason=skip)
                        else:
                            row.update(
                                run_pass(timer, tensors, causal, backend, pass_name, opts, known)
                            )
                            if row["status"] == "ok":
                                estimates[pass_name] = row["median_ms"]
                            if row["status"] == "ok":
                                flops = attention_flops(shape, causal, pass_name)
                                row["flops"] = flops
                                row.update(rate_fields(flops, row["median_ms"], peak))
                        results.append(_complete(row))
                        row_status.append(_progress_text(row))
                    _progress(f"{label}: " + ", ".join(row_status))
            # Cached blocks are reused by the next shape (free_memory_bytes counts them as free);
            # releasing them would only make the next case pay for cudaMalloc again.
            del tensors
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return results


def _memory_skip_reason(
    shape: common.Shape, backend: str, dtype: Any, device: Any, timer: Timer, limit: float | None
) -> str | None:
    import torch

    need = estimate_bytes(shape, backend, torch.empty((), dtype=dtype).element_size())
    free = common.free_memory_bytes(device)
    if limit is not None:
        free = min(free, limit) if free is not None else limit
    if free is None:
        return None
    if need > 0.95 * free:
        return (
            f"needs ~{need / 2**30:.2f} GiB ({backend} estimate), "
            f"{free / 2**30:.2f} GiB free on {device}"
        )
    return None


def _complete(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in RESULT_FIELDS}


def _progress_text(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['pass']} {row['status']}"
    rate = "!>peak" if row["above_peak"] else f"{format_rate(row)[0]} TF/s"
    return f"{row['pass']} {row['median_ms']:.4g} ms {rate}"


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- output


def format_rate(row: dict[str, Any]) -> tuple[str, str]:
    if row.get("above_peak"):
        return "!>peak", "!>peak"
    tflops = row.get("tflops")
    pct = row.get("pct_peak")
    return (
        (f"{tflops:.1f}" if tflops >= 10 else f"{tflops:.3g}") if tflops is not None else "-",
        f"{pct:.1f}" if pct is not None else "-",
    )


def render_table(results: list[dict], provenance: dict[str, Any]) -> str:
    header = (
        "size",
        "B,H,S,D",
        "dtype",
        "causal",
        "backend",
        "pass",
        "median ms",
        "min ms",
        "max ms",
        "TFLOP/s",
        "% peak",
        "status",
    )
    rows = []
    for r in results:
        shape = common.Shape(
            r["size"], r["batch"], r["q_heads"], r["kv_heads"], r["seq_q"], r["head_dim"]
        )
        if r["status"] == "ok":
            tflops, pct = format_rate(r)
            timing = (f"{r['median_ms']:.4f}", f"{r['min_ms']:.4f}", f"{r['max_ms']:.4f}")
            status = "ok" if not r["above_peak"] else "ABOVE PEAK (timing suspect)"
        else:
            tflops = pct = "-"
            timing = ("-", "-", "-")
            status = f"{r['status']}: {common.first_line(r['reason'] or '', 90)}"
        rows.append(
            (
                r["size"],
                shape.dims(),
                r["dtype"],
                "yes" if r["causal"] else "no",
                r["backend"],
                r["pass"],
                *timing,
                tflops,
                pct,
                status,
            )
        )
    lines = [
        f"SDPA benchmark on {provenance['device_name']} ({provenance['arch'] or 'cpu'}), "
        f"torch {provenance['torch']}",
        f"FLOPs: {FLOP_CONVENTION}",
        f"peak: {provenance.get('peak_note', '-')}",
        "",
        *common.text_table(header, rows),
    ]
    return "\n".join(lines)


def write_csv(path: Path, results: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=RESULT_FIELDS)
        writer.writeheader()
        for row in results:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})


def write_plot(path: Path, results: list[dict], title: str) -> str | None:
    """PNG of TFLOP/s per size: one panel per (dtype, causal) and pass. None or why skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed; plot skipped"
    ok = [r for r in results if r["status"] == "ok" and r["tflops"] is not None]
    if not ok:
        return "no rate to plot"
    columns = sorted({(r["dtype"], r["causal"]) for r in ok})
    passes = [p for p in PASSES if any(r["pass"] == p for r in ok)]
    sizes = list(dict.fromkeys(r["size"] for r in results))
    backends = list(dict.fromkeys(r["backend"] for r in ok))
    fig, axes = plt.subplots(
        len(passes),
        len(columns),
        figsize=(4.2 * len(columns), 3.2 * len(passes)),
        squeeze=False,
        sharex=True,
    )
    for i, pass_name in enumerate(passes):
        for j, (dtype, causal) in enumerate(columns):
            ax = axes[i][j]
            for backend in backends:
                points = [
                    (sizes.index(r["size"]), r["tflops"])
                    for r in ok
                    if (r["pass"], r["dtype"], r["causal"], r["backend"])
                    == (pass_name, dtype, causal, backend)
                ]
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot(xs, ys, marker="o", label=backend)
            ax.set_title(f"{pass_name} {dtype} {'causal' if causal else 'non-causal'}", fontsize=9)
            ax.set_xticks(range(len(sizes)))
            ax.set_xticklabels(sizes, rotation=30, fontsize=7)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("TFLOP/s")
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    fig.suptitle(title + "\n" + FLOP_CONVENTION, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# --------------------------------------------------------------------------- compare


def _load_results(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise common.UsageError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise common.UsageError(f"{path} is not JSON: {e.msg} (line {e.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise common.UsageError(f"{path} is not a bench.py result file (no 'results' list)")
    return data


def _case_key(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) for k in CASE_FIELDS)


def compare(path_a: str, path_b: str, threshold_pct: float) -> str:
    a, b = _load_results(path_a), _load_results(path_b)
    rows_b = {_case_key(r): r for r in b["results"] if r.get("status") == "ok"}
    lines = [
        f"A: {path_a} (torch {a.get('provenance', {}).get('torch')}, "
        f"{a.get('provenance', {}).get('device_name')})",
        f"B: {path_b} (torch {b.get('provenance', {}).get('torch')}, "
        f"{b.get('provenance', {}).get('device_name')})",
        f"speedup = A median / B median (>1: B faster); changes beyond {threshold_pct:g}% marked",
        "",
    ]
    header = ("size", "dtype", "causal", "backend", "pass", "A ms", "B ms", "speedup", "")
    table = []
    matched = regressions = improvements = 0
    for ra in a["results"]:
        if ra.get("status") != "ok":
            continue
        rb = rows_b.get(_case_key(ra))
        if rb is None:
            continue
        matched += 1
        speedup = ra["median_ms"] / rb["median_ms"]
        mark = ""
        if speedup < 1 - threshold_pct / 100:
            mark, regressions = "REGRESSION", regressions + 1
        elif speedup > 1 + threshold_pct / 100:
            mark, improvements = "faster", improvements + 1
        table.append(
            (
                ra.get("size", "?"),
                ra["dtype"],
                "yes" if ra["causal"] else "no",
                ra["backend"],
                ra["pass"],
                f"{ra['median_ms']:.4f}",
                f"{rb['median_ms']:.4f}",
                f"{speedup:.3f}x",
                mark,
            )
        )
    if not table:
        return "\n".join([*lines, "no matching successful cases in the two files"])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table, strict=True)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    for row in table:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip())
    speedups = [float(r[7][:-1]) for r in table]
    geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
    lines += [
        "",
        f"{matched} matching cases: {improvements} faster, {regressions} regressions, "
        f"geometric-mean speedup {geo:.3f}x",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI


def build_parser() -> common.OneLineArgumentParser:
    p = common.OneLineArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog=(
            "Default sizes (B,H,S,D): "
            + "; ".join(f"{k} {','.join(map(str, v))}" for k, v in SIZES.items())
            + f". FLOPs: {FLOP_CONVENTION}. Exit 0 when the run completed (cases that were "
            "unavailable or skipped are recorded, not errors), 2 on bad input."
        ),
        formatter_class=common.argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--sizes", help="comma list of named sizes (default: all when no --shape)")
    p.add_argument(
        "--shape",
        action="append",
        help="extra shape B,H,S,D or grouped-query B,Hq,Hkv,S,D, optionally NAME=...; repeatable",
    )
    p.add_argument("--kv-heads", type=int, help="KV heads for named sizes / 4-number shapes (GQA)")
    p.add_argument(
        "--dtypes",
        default="fp16",
        help="comma list of fp16, bf16 (default fp16, the dtype of the reference figures)",
    )
    p.add_argument(
        "--backends",
        default="all",
        help="comma list of flash, ck, efficient, cudnn, math (default: all on device)",
    )
    p.add_argument("--causal", choices=("yes", "no", "both"), default="both")
    p.add_argument("--passes", default="fwd,bwd,fwdbwd", help="comma list of fwd, bwd, fwdbwd")
    p.add_argument("--repeats", type=int, help="fixed repeat count (default: adaptive)")
    p.add_argument(
        "--budget-ms",
        type=float,
        default=6.0,
        help="adaptive mode: timed milliseconds per measurement (default 6)",
    )
    p.add_argument("--min-repeats", type=int, default=5, help="adaptive mode minimum (default 5)")
    p.add_argument(
        "--slow-min-repeats",
        type=int,
        default=2,
        help=f"adaptive mode minimum for calls slower than {SLOW_CALL_MS:g} ms (default 2)",
    )
    p.add_argument("--max-repeats", type=int, default=50, help="adaptive mode maximum (50)")
    p.add_argument("--warmup", type=int, default=1, help="minimum warm-up calls (default 1)")
    p.add_argument(
        "--warmup-ms",
        type=float,
        default=3.0,
        help="keep warming up until this many ms were spent (default 3)",
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (ROCm: cuda too)")
    p.add_argument("--peak-tflops", type=float, help="override the arch's peak TFLOP/s")
    p.add_argument(
        "--mem-limit-gib",
        type=float,
        help="treat at most this much memory as free (skips cases that need more)",
    )
    p.add_argument("--out-dir", help="write bench.json, bench.csv, bench.png here")
    p.add_argument("--json", dest="json_path", help="JSON result path")
    p.add_argument("--csv", dest="csv_path", help="CSV result path")
    p.add_argument("--plot", dest="plot_path", help="PNG plot path")
    p.add_argument("--replot", metavar="JSON", help="only draw --plot from an existing JSON")
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("A.json", "B.json"),
        help="print speedups/regressions of B against A for matching cases and exit",
    )
    p.add_argument(
        "--threshold-pct",
        type=float,
        default=5.0,
        help="--compare: change that counts as faster/regression (default 5)",
    )
    return p


def _check_options(opts: Any) -> None:
    for name in ("repeats", "min_repeats", "slow_min_repeats", "max_repeats", "kv_heads"):
        value = getattr(opts, name)
        if value is not None and value < 1:
            raise common.UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if opts.min_repeats > opts.max_repeats:
        raise common.UsageError("--min-repeats is larger than --max-repeats")
    if opts.peak_tflops is not None and opts.peak_tflops <= 0:
        raise common.UsageError("--peak-tflops must be positive")


def _output_paths(opts: Any) -> dict[str, Path | None]:
    out_dir = Path(opts.out_dir) if opts.out_dir else None
    paths: dict[str, Path | None] = {}
    for kind, explicit, default_name in (
        ("json", opts.json_path, "bench.json"),
        ("csv", opts.csv_path, "bench.csv"),
        ("plot", opts.plot_path, "bench.png"),
    ):
        if explicit:
            paths[kind] = Path(explicit)
        elif out_dir is not None:
            paths[kind] = out_dir / default_name
        else:
            paths[kind] = None
    for path in paths.values():
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise common.UsageError(f"cannot create {path.parent}: {e.strerror}") from None
    return paths


def _main(argv: list[str] | None) -> int:
    opts = build_parser().parse_args(argv)
    if opts.compare:
        print(compare(opts.compare[0], opts.compare[1], opts.threshold_pct))
        return 0
    if opts.replot:
        if not opts.plot_path:
            raise common.UsageError("--replot needs --plot PATH")
        data = _load_results(opts.replot)
        prov = data.get("provenance", {})
        note = write_plot(
            Path(opts.plot_path),
            data["results"],
            f"SDPA on {prov.get('device_name')} ({prov.get('arch')}), torch {prov.get('torch')}",
        )
        print(note or f"wrote {opts.plot_path}")
        return 0
    _check_options(opts)
    # Validate everything cheap before touching the device.
    device = common.resolve_device(opts.device)
    build_shapes(opts)
    common.parse_dtypes(opts.dtypes)
    common.parse_backends(opts.backends, device)
    paths = _output_paths(opts)

    started = time.perf_counter()
    arches = common.load_arches()
    arch, device_name = common.detect_arch(device)
    prov = common.provenance(device, arch, device_name)
    peaks = {d: common.peak_for(arch, d, opts.peak_tflops, arches) for d in ("fp16", "bf16")}
    prov["peak_tflops"] = {d: p for d, (p, _src) in peaks.items()}
    prov["peak_source"] = {d: src for d, (_p, src) in peaks.items()}
    prov["peak_note"] = (
        ", ".join(f"{d} {p:g} TFLOP/s" if p else f"{d} unknown" for d, (p, _s) in peaks.items())
        + f" ({peaks['fp16'][1]})"
    )
    if prov["env"].get("AMD_SERIALIZE_KERNEL", "0") not in ("", "0"):
        _progress("warning: AMD_SERIALIZE_KERNEL is set; launches are serialised, timings suffer")

    results = run_suite(opts, device, arch, arches)
    wall = time.perf_counter() - started
    print(render_table(results, prov))
    settings = {
        k: getattr(opts, k)
        for k in (
            "sizes",
            "shape",
            "kv_heads",
            "dtypes",
            "backends",
            "causal",
            "passes",
            "repeats",
            "budget_ms",
            "min_repeats",
            "slow_min_repeats",
            "max_repeats",
            "warmup",
            "warmup_ms",
            "mem_limit_gib",
        )
    }
    settings["timer"] = (
        "torch.cuda.Event per repeat, 256 MiB L2 flush and a GPU spin (torch.cuda._sleep) "
        "queued before each repeat"
        if device.type == "cuda"
        else "time.perf_counter per repeat, no cache flush (CPU)"
    )
    document = {
        "schema": SCHEMA,
        "flop_convention": FLOP_CONVENTION,
        "provenance": prov,
        "settings": settings,
        "wall_s": round(wall, 3),
        "results": results,
    }
    if paths["json"]:
        paths["json"].write_text(json.dumps(document, indent=1) + "\n")
        _progress(f"wrote {paths['json']}")
    if paths["csv"]:
        write_csv(paths["csv"], results)
        _progress(f"wrote {paths['csv']}")
    if paths["plot"]:
        note = write_plot(
            paths["plot"],
            results,
            f"SDPA on {device_name} ({arch or 'cpu'}), torch {prov['torch']}",
        )
        _progress(f"plot: {note}" if note else f"wrote {paths['plot']}")
    _progress(f"done in {wall:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.run_cli(PROG, lambda: _main(argv))


if __name__ == "__main__":
    sys.exit(main())
