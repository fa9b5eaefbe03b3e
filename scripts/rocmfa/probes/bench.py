"""Benchmark torch scaled_dot_product_attention per backend: forward, backward, forward+backward.

Also the one change rule (`--compare`; the results page uses it too) and `--learn`, which prints
its run-to-run floors (data/bench_noise.toml) from A/A runs. Method: docs/attention-tools.md."""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
import tomllib
import warnings
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

if __package__:
    from . import sdpa_common as common
else:  # run as a plain script: this file's folder is first on sys.path
    import sdpa_common as common  # type: ignore[no-redef]

PROG = "bench.py"
SCHEMA = "sdpa-bench/1"
FLOP_CONVENTION = (
    "flash-attention convention: fwd = 4*B*Hq*Sq*Sk*D (causal: x0.5), "
    "bwd = 2.5 x fwd, fwd+bwd = 3.5 x fwd"
)
BYTE_CONVENTION = (
    "minimum traffic: fwd reads q, k, v and writes o and logsumexp (fp32, B*Hq*Sq); bwd reads "
    "q, k, v, o, do, logsumexp and writes dq, dk, dv; fwd+bwd = fwd + bwd"
)
PASSES = ("fwd", "bwd", "fwdbwd")
SLOW_CALL_MS = 50.0
SETTLE_AFTER_SLOW_MS = 50.0  # warm-up of the row after a slow call (without: XLarge fwd moved 5.6%)
# GPU spin before each repeat (untimed, ~2 GHz): fwd, bwd (autograd's thread wakes late), max.
HEAD_START_CYCLES = 300_000
BACKWARD_HEAD_START_CYCLES = 1_000_000
MAX_HEAD_START_CYCLES = 2_000_000
NOISE_THRESHOLD = 0.10  # spread = (p75 - p25) / median above this: noisy
PROFILED_REPEATS = 3  # repeats timed again under torch.profiler for the kernel time
CASE_FIELDS = (*(f.name for f in fields(common.Shape)), "dtype", "causal", "backend", "pass")
CASE_HEAD = ("size", "B,H,S,D", "dtype", "causal", "backend", "pass")
TIMERS = {
    "cpu": "device: time.perf_counter per repeat, no cache flush (CPU)",
    "cuda": "device: torch.cuda.Event per repeat, 256 MiB L2 flush and a GPU spin "
    "(torch.cuda._sleep) queued before each repeat; host launch cost kept out",
}
# The original 05-attention-bench.py suite (B, H, S, D).
SIZES = {"Tiny": (1, 1, 128, 64), "Small": (2, 8, 512, 64), "Medium": (4, 8, 1024, 64),
         "Large": (8, 16, 2048, 64), "XLarge": (16, 16, 4096, 64)}  # fmt: skip
# The --suite llm shapes, and the variables that change which SDPA kernel runs or its timing.
BENCH_DATA = common.load_table("sdpa_checks", "bench")
DISPATCH_ENV_VARS = BENCH_DATA.get("dispatch_env_vars", [])
# The change rule: faster or slower only beyond --threshold-pct and the run-to-run floor of the
# row's class (bench_noise.toml, from `--learn`); launch-bound rows never change.
BUCKETS_MS = (0.05, 0.2, 1.0, 5.0)  # row classes by duration: short rows move most
FLOOR_MARGIN = 2.0  # a learned floor is this times the largest A/A change
VERDICTS = ("faster", "slower", "same", "noisy", "launch-bound")


def row_class(backend: str, pass_name: str, ms: float) -> str:
    bucket = next((f"<{edge:g}ms" for edge in BUCKETS_MS if ms < edge), f">={BUCKETS_MS[-1]:g}ms")
    return f"{backend}/{pass_name}/{bucket}"


def case_key(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) for k in CASE_FIELDS)


def load_floors() -> dict[str, Any]:
    """bench_noise.toml: {"floor": {class: fraction}, "default_floor": fraction, "source": text}."""
    return tomllib.loads(common.ARCHES_FILE.with_name("bench_noise.toml").read_text())


def floor_of(floors: dict[str, Any], backend: str, pass_name: str, ms: float) -> float:
    """The class's floor, else the largest of its pass and bucket, else the default."""
    cls = row_class(backend, pass_name, ms)
    same = [v for k, v in floors["floor"].items() if k.endswith(cls[len(backend) :])]
    return floors["floor"].get(cls, max(same, default=floors["default_floor"]))


def judge(a_rows: list[dict], b_rows: list[dict], threshold_pct: float, floors: dict) -> dict:
    """The verdict of one case: A's runs against B's runs (one row per run, status ok)."""
    a_ms, b_ms = [r["median_ms"] for r in a_rows], [r["median_ms"] for r in b_rows]
    a_med, b_med = statistics.median(a_ms), statistics.median(b_ms)
    speedup = a_med / b_med
    floor = floor_of(floors, a_rows[0]["backend"], a_rows[0]["pass"], min(a_med, b_med))
    ranges = (max(a_ms) - min(a_ms)) / a_med + (max(b_ms) - min(b_ms)) / b_med  # 0: one run
    allowance = max(threshold_pct / 100.0, floor, ranges)
    overlap = min(a_ms) <= max(b_ms) and min(b_ms) <= max(a_ms)  # one run a side: if equal
    if any(r.get("launch_bound") for r in (*a_rows, *b_rows)):
        verdict = "launch-bound"
    elif abs(speedup - 1.0) <= threshold_pct / 100.0:
        verdict = "same"
    elif overlap or abs(speedup - 1.0) <= allowance or any(r.get("noisy") for r in a_rows + b_rows):
        verdict = "noisy"
    else:
        verdict = "faster" if speedup > 1 else "slower"
    return {
        "a_ms": round(a_med, 5),
        "b_ms": round(b_med, 5),
        "speedup": round(speedup, 4),
        "allowance_pct": round(100 * allowance, 2),
        "verdict": verdict,
    }


def compare_runs(a_runs: list, b_runs: list, threshold_pct: float, floors: dict) -> list:
    """Every case that ran in every run (a list of rows) of both sides: its fields and verdict."""
    maps = [
        {case_key(r): r for r in rows if r.get("status") == "ok" and r.get("median_ms")}
        for rows in (*a_runs, *b_runs)
    ]
    out = []
    for key, row in maps[0].items():
        if all(key in m for m in maps):
            runs = [m[key] for m in maps]
            verdict = judge(runs[: len(a_runs)], runs[len(a_runs) :], threshold_pct, floors)
            out.append({k: row.get(k) for k in CASE_FIELDS} | verdict)
    return out


def tally(rows: list[dict[str, Any]]) -> tuple[dict[str, int], float | None]:
    """Compared rows per verdict, and the geometric-mean speedup of those not launch-bound."""
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in VERDICTS}
    kernel = [r["speedup"] for r in rows if r["verdict"] != "launch-bound"]
    return counts, statistics.geometric_mean(kernel) if kernel else None


def learned_floors(sessions: list[list[str]]) -> str:
    """bench_noise.toml's text: per class, FLOOR_MARGIN x the largest change of an A/A pair."""
    if any(len(files) < 2 for files in sessions):
        raise common.UsageError("each --learn needs at least two runs of one build")
    seen: dict[str, float] = {}
    for files in sessions:
        runs = [common.read_results(f, "--learn run")["results"] for f in files]
        for a, b in itertools.combinations(runs, 2):
            for row in compare_runs([a], [b], 0.0, {"floor": {}, "default_floor": 0.0}):
                if row["verdict"] != "launch-bound":
                    cls = row_class(row["backend"], row["pass"], min(row["a_ms"], row["b_ms"]))
                    seen[cls] = max(seen.get(cls, 0.0), abs(row["speedup"] - 1.0))
    floors = {c: max(0.01, math.ceil(FLOOR_MARGIN * v * 100) / 100) for c, v in seen.items()}
    names = "; ".join(", ".join(Path(f).name for f in files) for files in sessions)
    lines = [f'source = "{names}"', "default_floor = 0.1", "[floor]"]  # 0.1: a class no run saw
    return "\n".join([*lines, *(f'"{cls}" = {value}' for cls, value in sorted(floors.items()))])


def rates(row: dict[str, Any], peak: float | None, roof: float | None) -> dict[str, Any]:
    """A timed row's FLOPs, bytes, TFLOP/s, % of peak, GB/s and its binding roof with % of it."""
    s = common.Shape.of_row(row)
    element_size = common.torch_dtype(row["dtype"]).itemsize
    work = s.batch * s.q_heads * s.seq_q * s.kv_seq * s.head_dim * (0.5 if row["causal"] else 1)
    flops = 4.0 * work * {"fwd": 1, "bwd": 2.5, "fwdbwd": 3.5}[row["pass"]]
    n_q = s.batch * s.q_heads * s.seq_q * s.head_dim
    n_kv = s.batch * s.kv_heads * s.kv_seq * s.head_dim
    lse = 4 * s.batch * s.q_heads * s.seq_q  # fp32 logsumexp
    fwd = (2 * n_q + 2 * n_kv) * element_size + lse
    bwd = (4 * n_q + 4 * n_kv) * element_size + lse
    nbytes = {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[row["pass"]]
    tflops = flops / row["median_ms"] / 1e9
    gbps = nbytes / row["median_ms"] / 1e6
    above = peak is not None and tflops > peak
    pct_peak = round(100.0 * tflops / peak, 2) if peak and not above else None
    memory_bound = bool(peak and roof) and flops / nbytes < peak * 1e3 / roof  # under the ridge
    bound = None if not (peak and roof) else "memory" if memory_bound else "compute"
    return {
        "flops": flops,
        "tflops": None if above else round(tflops, 3),
        "pct_peak": pct_peak,
        "above_peak": above,
        "measured_tflops_above_peak": float(f"{tflops:.4g}") if above else None,
        "bytes": nbytes,
        "intensity": round(flops / nbytes, 2),
        "bound": bound,
        "gbps": round(gbps, 2),
        "pct_roof": round(100.0 * gbps / roof, 2) if memory_bound else pct_peak,
    }


def estimate_bytes(shape: common.Shape, backend: str, element_size: int) -> int:
    """Peak memory of one case; the math path adds fp32 scores and fp32 input copies."""
    n_q = shape.batch * shape.q_heads * shape.seq_q * shape.head_dim
    n_kv = shape.batch * shape.kv_heads * shape.kv_seq * shape.head_dim
    total = (5 * n_q + 4 * n_kv) * element_size
    if backend == "math":
        scores = shape.batch * shape.q_heads * shape.seq_q * shape.kv_seq
        expanded_kv = shape.batch * shape.q_heads * shape.kv_seq * shape.head_dim
        return total + 3 * scores * 4 + (4 * n_q + 4 * expanded_kv) * 4
    return total + 2 * shape.batch * shape.q_heads * shape.seq_q * 4  # logsumexp and friends


class Timer:
    """Times a callable: device events + L2 flush + GPU spin on GPU, perf_counter on CPU."""

    def __init__(self, device: Any) -> None:
        import torch

        self.device = device
        self.gpu = device.type == "cuda"
        self.flush = torch.empty(256 * 2**20, dtype=torch.int8, device=device) if self.gpu else None
        self.head_start_cycles = HEAD_START_CYCLES
        self.launch_ms: list[float] = []  # host time of each timed call (GPU)
        self.settle_ms = 0.0  # the next warm-up's minimum (SETTLE_AFTER_SLOW_MS)
        self.sync = (lambda: torch.cuda.synchronize(device)) if self.gpu else (lambda: None)

    def set_head_start(self, estimate_ms: float, backward: bool = False) -> None:
        """Spin 1.5x as long as one synchronised call took on the host, at ~2 GHz."""
        floor = BACKWARD_HEAD_START_CYCLES if backward else HEAD_START_CYCLES
        self.head_start_cycles = max(floor, min(MAX_HEAD_START_CYCLES, int(estimate_ms * 3e6)))

    def call_once(self, fn: Callable[[], Any], before: Callable[[], Any]) -> float:
        """One synchronised call; its host-clock time in ms."""
        before()
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        return (time.perf_counter() - t0) * 1e3

    def warmup(
        self, fn: Callable, before: Callable, first_ms: float, warmup_ms: float, min_calls: int
    ) -> float:
        """Warm up after a first call of first_ms; the per-call estimate."""
        times = [self.call_once(fn, before)] if first_ms >= SLOW_CALL_MS else []
        slow = bool(times) and times[-1] >= SLOW_CALL_MS  # then warm after that second call
        while len(times) + 1 < min_calls or (
            not slow and (len(times) < 2 or first_ms + sum(times) < warmup_ms) and len(times) < 999
        ):
            times.append(self.call_once(fn, before))
        return statistics.median(times) if times else first_ms

    def measure(self, fn: Callable[[], Any], before: Callable[[], Any], repeats: int) -> list:
        import torch

        out = []
        pairs = []
        for _ in range(repeats):
            before()
            if self.gpu:
                # Queued GPU work ahead, so the events time the GPU, not the host's launches.
                torch.cuda._sleep(self.head_start_cycles)
                self.flush.zero_()
                pairs.append([torch.cuda.Event(enable_timing=True) for _ in "se"])
                pairs[-1][0].record()
            t0 = time.perf_counter()
            fn()
            (self.launch_ms if self.gpu else out).append((time.perf_counter() - t0) * 1e3)
            if self.gpu:
                pairs[-1][1].record()
        self.sync()
        return [s.elapsed_time(e) for s, e in pairs] if self.gpu else out


def summarize(times_ms: list[float], noise_threshold: float = NOISE_THRESHOLD) -> dict[str, Any]:
    ordered = sorted(times_ms)
    data = ordered if len(ordered) >= 2 else ordered * 2  # quantiles needs two points
    p25, median, p75 = statistics.quantiles(data, method="inclusive")  # quartiles
    spread = (p75 - p25) / median if median > 0 else 0.0
    figures = {"median": median, "min": ordered[0], "max": ordered[-1], "p25": p25, "p75": p75}
    return {
        **{f"{name}_ms": round(ms, 5) for name, ms in figures.items()},
        "repeats": len(ordered),
        "spread": round(spread, 4),
        "noisy": spread > noise_threshold,
    }


class Tensors:
    """q, k, v (requiring grad) and the output gradient, made on the device."""

    def __init__(self, shape: common.Shape, dtype: Any, device: Any) -> None:
        import torch

        gen = torch.Generator(device=device).manual_seed(0)

        def make(heads: int, seq: int) -> Any:
            t = torch.randn(shape.batch, heads, seq, shape.head_dim, generator=gen, device=device)
            return t.to(dtype).requires_grad_(True)

        self.q, self.k = make(shape.q_heads, shape.seq_q), make(shape.kv_heads, shape.kv_seq)
        self.v = make(shape.kv_heads, shape.kv_seq)
        self.dout = make(shape.q_heads, shape.seq_q).detach()

    def reset_grads(self) -> None:
        self.q.grad = self.k.grad = self.v.grad = None

    def callables(self, causal: bool, pass_name: str) -> tuple[Callable, Callable]:
        """(timed fn, untimed setup before each call); bwd: one forward, then backward alone."""
        forward = common.sdpa_call(self.q, self.k, self.v, causal)
        dout = self.dout
        if pass_name == "fwd":
            return forward, (lambda: None)
        if pass_name == "bwd":
            out = forward()
            return (lambda: out.backward(dout, retain_graph=True)), self.reset_grads
        return (lambda: forward().backward(dout)), self.reset_grads


def run_pass(timer: Timer, tensors: Tensors, row: dict, opts: Any, known_estimate=None) -> dict:
    """Time one row; a known_estimate (ms a call, warmed by earlier passes) skips the first call.
    A failure is a row too: skipped (out of memory), unavailable (torch refused) or error."""
    import torch

    started = time.perf_counter()
    caught: list[warnings.WarningMessage] = []
    try:
        with common.backend_context(row["backend"], timer.device):
            # torch's refusal reasons are warnings: recorded around the first call only.
            with warnings.catch_warnings(record=True, action="always") as caught:
                fn, before = tensors.callables(row["causal"], row["pass"])
                first_ms = None if known_estimate else timer.call_once(fn, before)
            estimate = known_estimate
            if first_ms is not None:
                warmup_ms = max(opts.warmup_ms, timer.settle_ms)
                estimate = timer.warmup(fn, before, first_ms, warmup_ms, opts.warmup)
            slow = estimate >= SLOW_CALL_MS
            timer.settle_ms = SETTLE_AFTER_SLOW_MS if slow and timer.gpu else 0.0
            timer.set_head_start(estimate, backward=row["pass"] != "fwd")
            # --repeats, else what fits --budget-ms within the bounds (slow calls: their own floor)
            floor = min(opts.min_repeats, opts.slow_min_repeats if slow else opts.min_repeats)
            fits = int(opts.budget_ms / max(estimate, 1e-6))
            timer.launch_ms = []
            repeats = opts.repeats or max(floor, min(opts.max_repeats, fits))
            summary = summarize(timer.measure(fn, before, repeats))
            launch = round(statistics.median(timer.launch_ms), 5) if timer.launch_ms else None
            busy = kernel_fields(timer, fn, before, summary["median_ms"], launch, opts)
        tensors.reset_grads()
        host_s = round(time.perf_counter() - started, 3)
        return dict(status="ok", reason=None, **summary, **busy, launch_ms=launch, host_s=host_s)
    except Exception as exc:  # torch raises RuntimeError/NotImplementedError/ValueError
        tensors.reset_grads()
        with contextlib.suppress(Exception):
            timer.sync()
        if common.is_oom(exc):
            torch.cuda.empty_cache()  # a no-op without CUDA
            return {"status": "skipped", "reason": f"out of memory: {common.first_line(exc)}"}
        refusals = ("No available kernel", "No viable backend", "not supported", "only on ROCm")
        unsupported = isinstance(exc, NotImplementedError) or any(s in str(exc) for s in refusals)
        status = "unavailable" if unsupported else "error"
        return {"status": status, "reason": common.reason_from(exc, caught)}


def profile(run: Callable[[], Any]) -> list[tuple[str, float, float]]:
    """(name, start us, duration us) of the device records while `run` runs, in order."""
    import torch

    # Device activity only: host records (every aten op) would cost more than the repeats.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
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
        if "spin_kernel" in name:  # torch.cuda._sleep's kernel (aten/src/ATen/cuda/Sleep.cu)
            repeats.append([])
        elif repeats:
            repeats[-1].append(duration)
    busy = [sum(r[1:]) for r in repeats if len(r) > 1]
    return round(statistics.median(busy) / 1e3, 5) if busy else None


def kernel_fields(timer: Timer, fn: Any, before: Any, ms: float, launch: Any, opts: Any) -> dict:
    """Kernel time, busy fraction, launch-bound (busy under half the time) of a row (median ms)."""
    none = {"kernel_ms": None, "busy": None, "launch_bound": None}
    if launch is None or not opts.kernel_time:
        return none
    if launch < 0.25 * ms:  # launch under a quarter of the event time: busy over half of it
        return {**none, "launch_bound": False}
    kernel = kernel_ms_per_repeat(profile(lambda: timer.measure(fn, before, PROFILED_REPEATS)))
    if not kernel:
        return none
    busy = kernel / ms
    return {"kernel_ms": kernel, "busy": round(busy, 3), "launch_bound": busy < 0.5}


def build_cases(opts: Any) -> list[tuple[common.Shape, list[bool], list[str]]]:
    """(shape, causal settings, passes): the llm suite's own, else shapes x --causal."""
    for name in ("repeats", "min_repeats", "slow_min_repeats", "max_repeats", "kv_heads"):
        if getattr(opts, name) is not None and getattr(opts, name) < 1:
            raise common.UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if opts.min_repeats > opts.max_repeats:
        raise common.UsageError("--min-repeats is larger than --max-repeats")
    if opts.peak_tflops is not None and opts.peak_tflops <= 0:
        raise common.UsageError("--peak-tflops must be positive")
    passes = common.parse_list(opts.passes, PASSES, "pass")
    if opts.suite == "llm":
        if opts.sizes or opts.shape or opts.kv_heads:
            raise common.UsageError("--suite llm has its own shapes: drop --sizes/--shape")
        return [
            (common.Shape(name, b, hq, hkv, sq, d, sk), [causal], [p for p in ps if p in passes])
            for name, b, hq, hkv, sq, sk, d, causal, ps in BENCH_DATA.get("llm_suite", [])
        ]
    causals = {"yes": [True], "no": [False], "both": [False, True]}[opts.causal]
    named = (opts.sizes or ",".join(SIZES)) if opts.sizes is not None or not opts.shape else ""
    shapes = []
    for name in common.parse_list(named, SIZES, "size") if named else []:
        b, h, s, d = SIZES[name]
        kv = opts.kv_heads or h
        if h % kv:
            raise common.UsageError(f"--kv-heads {kv} does not divide {name}'s {h} heads")
        shapes.append(common.Shape(name, b, h, kv, s, d))
    shapes += [common.parse_shape(text, opts.kv_heads) for text in opts.shape or []]
    return [(shape, causals, passes) for shape in shapes]


def run_suite(
    opts: Any, device: Any, cases: list, dtypes: list, backends: list, prov: dict
) -> list[dict]:
    """Time every case in every dtype and backend, one row per pass."""
    timer = Timer(device)
    total = sum(len(c) for _s, c, _p in cases) * len(dtypes) * len(backends)
    results = []
    done = 0
    for (shape, causals, passes), dtype in itertools.product(cases, dtypes):
        tensors = None  # made at the first case that fits; cached blocks count as free
        for causal, backend in itertools.product(causals, backends):
            done += 1
            tensors, skip = _fit(shape, backend, dtype, device, opts.mem_limit_gib, tensors)
            base = {**shape.as_dict(), "dtype": dtype, "causal": causal, "backend": backend}
            rows = [dict(base, **{"pass": p}, status="skipped", reason=skip) for p in passes]
            estimates = {}
            for row in [] if skip else rows:  # each row runs when the case fits
                # fwd+bwd after fwd and bwd: every kernel is warm, their sum is its estimate
                warm = row["pass"] == "fwdbwd" and len(estimates) == 2
                known = sum(estimates.values()) if warm else None
                row.update(run_pass(timer, tensors, row, opts, known))
                if row["status"] == "ok":
                    estimates[row["pass"]] = row["median_ms"]
                    row.update(rates(row, prov["peak_tflops"].get(dtype), prov["memory_roof_gbps"]))
            results += rows
            where = f"[{done}/{total}] {shape.size} {dtype} {'causal' if causal else 'non-causal'}"
            progress(f"{where} {backend}: {', '.join(progress_text(r) for r in rows)}")
    return results


def _fit(
    shape: common.Shape, backend: str, dtype: str, device: Any, limit_gib: Any, tensors: Any
) -> tuple[Any, str | None]:
    """(tensors, None), made once per shape and dtype; (tensors, why) when it would not fit."""
    import torch

    need = estimate_bytes(shape, backend, 2)  # fp16 and bf16 alike
    free = None
    if device.type == "cuda":  # free, and blocks torch's allocator caches unused
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        free = torch.cuda.mem_get_info(device)[0] + max(0, cached)
    with contextlib.suppress(OSError, TypeError):  # CPU: MemAvailable
        meminfo = Path("/proc/meminfo").read_text() if free is None else ""
        free = int(re.search(r"^MemAvailable:\s*(\d+)", meminfo, re.M)[1]) * 1024  # type: ignore
    if limit_gib is not None:
        free = limit_gib * 2**30 if free is None else min(free, limit_gib * 2**30)
    if free is not None and need > 0.95 * free:
        gib = f"needs ~{need / 2**30:.2f} GiB ({backend} estimate), {free / 2**30:.2f} GiB free"
        return tensors, gib
    try:
        return tensors or Tensors(shape, common.torch_dtype(dtype), device), None
    except Exception as exc:
        if not common.is_oom(exc):
            raise
        torch.cuda.empty_cache()  # a no-op without CUDA
        return None, f"out of memory allocating inputs: {common.first_line(exc)}"


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def progress_text(row: dict[str, Any]) -> str:
    median = f"{row['median_ms']:.4g} ms " if row["status"] == "ok" else ""
    return f"{row['pass']} {median}{status_text(row).split(':')[0]}"


def status_text(r: dict[str, Any]) -> str:
    if r["status"] != "ok":
        return f"{r['status']}: {common.first_line(r['reason'] or '', 90)}"
    if r["above_peak"]:
        return "ABOVE PEAK (timing suspect)"
    if r.get("bound") == "memory" and (r.get("pct_roof") or 0) > 100:
        return "ABOVE MEMORY ROOF (timing or roof suspect)"
    if r.get("launch_bound"):
        return f"launch-bound (GPU busy {100 * r['busy']:.0f}% of the time)"
    return "noisy" if r.get("noisy") else "ok"


TIMING_HEAD = ("median ms", "min ms", "max ms", "spread %", "reps")
RATE_HEAD = ("TFLOP/s", "GB/s", "bound", "% roof")


def case_cells(row: dict[str, Any]) -> tuple:
    dims = "-" if row.get("batch") is None else common.Shape.of_row(row).dims()
    causal = "yes" if row.get("causal") else "no"
    return (row.get("size"), dims, row.get("dtype"), causal, row.get("backend"), row.get("pass"))


def render_table(results: list[dict], ident: dict, prov: dict[str, Any], timer: str) -> str:
    """The table under the conventions; TFLOP/s and % roof above the peak read "!>peak"."""
    rows = []
    for r in results:
        head = case_cells(r)
        if r["status"] != "ok":
            rows.append((*head, *["-"] * len(TIMING_HEAD + RATE_HEAD), status_text(r)))
            continue
        tflops = r["tflops"]
        tf_text = "-" if tflops is None else f"{tflops:.1f}" if tflops >= 10 else f"{tflops:.3g}"
        pct_text = "-" if r["pct_roof"] is None else f"{r['pct_roof']:.1f}"
        if r["above_peak"]:
            tf_text = pct_text = "!>peak"
        ms = [f"{r[k]:.4f}" for k in ("median_ms", "min_ms", "max_ms")]
        timing = [*ms, f"{100 * r['spread']:.1f}", str(r["repeats"])]  # TIMING_HEAD
        gbps = f"{r['gbps']:.0f}" if r["gbps"] >= 100 else f"{r['gbps']:.3g}"
        rate_cells = [tf_text, gbps, r["bound"] or "-", pct_text]  # RATE_HEAD
        rows.append((*head, *timing, *rate_cells, status_text(r)))
    lines = [
        _title(ident),
        f"timing: {timer}",
        f"FLOPs: {FLOP_CONVENTION}",
        f"bytes: {BYTE_CONVENTION}; bound: memory when FLOP/byte is under peak / memory roof; % "
        "roof: of the memory roof (GB/s) for memory-bound rows, of the compute peak otherwise",
        f"peak: {prov.get('peak_note', '-')}",
        "",
        *common.text_table((*CASE_HEAD, *TIMING_HEAD, *RATE_HEAD, "status"), rows),
    ]
    if noisy := sum(1 for r in results if r.get("noisy")):
        why = f"spread (p75-p25)/median above {NOISE_THRESHOLD:.0%}"
        lines += ["", f"{noisy} row(s) noisy: {why}; treat those medians with care"]
    return "\n".join(lines)


def _title(ident: dict[str, Any]) -> str:
    where = f"{ident.get('gpu')} ({ident.get('arch') or 'cpu'})"
    return f"SDPA benchmark on {where}, torch {ident.get('torch')}"


def write_csv(path: Path, results: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in results for k in r)))
        writer.writeheader()
        writer.writerows(results)  # None, and a failed row's missing timing: empty cells


def write_plot(path: Path, results: list[dict], title: str) -> str | None:
    """PNG of TFLOP/s per size, a panel per pass x (dtype, causal); None or why not."""
    try:
        from matplotlib.figure import Figure  # no pyplot: no GUI backend, nothing to close
    except ImportError:
        return "matplotlib is not installed; plot skipped"
    ok = [r for r in results if r["status"] == "ok" and r["tflops"] is not None]
    if not ok:
        return "no rate to plot"
    columns = sorted({(r["dtype"], r["causal"]) for r in ok})
    passes = [p for p in PASSES if any(r["pass"] == p for r in ok)]
    sizes = list(dict.fromkeys(r["size"] for r in results))
    fig = Figure(figsize=(4.2 * len(columns), 3.2 * len(passes)))
    axes = fig.subplots(len(passes), len(columns), squeeze=False, sharex=True)
    for (i, pass_name), (j, column) in itertools.product(enumerate(passes), enumerate(columns)):
        ax = axes[i][j]
        panel = [r for r in ok if (r["pass"], (r["dtype"], r["causal"])) == (pass_name, column)]
        for backend in dict.fromkeys(r["backend"] for r in panel):
            mine = [(sizes.index(r["size"]), r["tflops"]) for r in panel if r["backend"] == backend]
            ax.plot(*zip(*mine, strict=True), marker="o", label=backend)
        causal = "causal" if column[1] else "non-causal"
        ax.set_title(f"{pass_name} {column[0]} {causal}", fontsize=9)
        ax.set_xticks(range(len(sizes)), sizes, rotation=30, fontsize=7)
        ax.grid(alpha=0.3)
        ax.set_ylabel("TFLOP/s" if j == 0 else "")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{title}\n{FLOP_CONVENTION}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return None


def compare(pair: list[str], more: list[str], threshold_pct: float) -> str:
    """B's runs against A's (pair A B, more A2 B2 ...), judged by the change rule."""
    if threshold_pct < 0:
        raise common.UsageError(f"--threshold-pct {threshold_pct:g} must not be negative")
    if len(more) % 2:
        raise common.UsageError("--compare-runs takes pairs: A2.json B2.json ...")
    paths_a, paths_b = [pair[0], *more[0::2]], [pair[1], *more[1::2]]
    docs = [[common.read_results(p, "bench result") for p in paths] for paths in (paths_a, paths_b)]
    floors = load_floors()
    a_runs, b_runs = ([d["results"] for d in side] for side in docs)
    rows = compare_runs(a_runs, b_runs, threshold_pct, floors)
    if not rows:
        files = ", ".join(paths_a + paths_b)
        raise common.UsageError(f"nothing to compare: no case ran successfully in all of {files}")
    lines = []
    for label, side, paths in zip("AB", docs, (paths_a, paths_b), strict=True):
        ident = side[0].get("identity", {})
        runs = f"; {len(side)} runs" * (len(side) > 1)
        where = f"torch {ident.get('torch')}, {ident.get('gpu')}{runs}"
        lines.append(f"{label}: {', '.join(paths)} ({where})")
    header = (*CASE_HEAD, "A ms", "B ms", "speedup", "allowed", "verdict")
    table = []
    for r in rows:
        medians = (f"{r['a_ms']:.4f}", f"{r['b_ms']:.4f}")
        change = (f"{r['speedup']:.3f}x", f"{r['allowance_pct']:.0f}%")
        verdict = "" if r["verdict"] == "same" else r["verdict"]
        table.append((*case_cells(r), *medians, *change, verdict))
    counts, geo = tally(rows)
    beyond = f"{threshold_pct:g}% and the run-to-run allowance (floors: {floors['source']})"
    lines += [f"speedup = A median / B median (>1: B faster); faster/slower only beyond {beyond}"]
    tallied = ", ".join(f"{counts[v]} {v}" for v in VERDICTS)
    summary = (
        f"{len(rows)} matching cases: {tallied}; geometric-mean speedup {geo or 1.0:.3f}x "
        "(noisy: within run-to-run variation, rerun with more runs; launch-bound: GPU idle "
        "most of the interval, not a kernel change)"
    )
    return "\n".join([*lines, "", *common.text_table(header, table), "", summary])


def build_parser() -> common.OneLineArgumentParser:
    p = common.new_parser(PROG, f"{__doc__.splitlines()[0]} FLOPs: {FLOP_CONVENTION}.")
    add = p.add_argument
    add("--suite", choices=("default", "llm"), default="default", help="llm: the shapes models run")
    add("--sizes", help="comma list of named sizes (default: all when no --shape)")
    add("--shape", action="append", help="extra shape [NAME=]B,H,S,D or B,Hq,Hkv,S,D; repeatable")
    add("--kv-heads", type=int, help="KV heads for named sizes / 4-number shapes (GQA)")
    add("--dtypes", help="comma list of fp16, bf16 (default fp16; --suite llm: bf16,fp16)")
    add("--backends", default="all", help="comma list of flash, ck, efficient, cudnn, math")
    add("--causal", choices=("yes", "no", "both"), default="both")
    add("--passes", default="fwd,bwd,fwdbwd", help="comma list of fwd, bwd, fwdbwd")
    add("--repeats", type=int, help="fixed repeat count (default: adaptive)")
    add("--budget-ms", type=float, default=6.0, help="adaptive: timed ms per measurement (6)")
    add("--min-repeats", type=int, default=5, help="adaptive minimum (5)")
    add("--slow-min-repeats", type=int, default=2, help="minimum for calls over 50 ms (2)")
    add("--max-repeats", type=int, default=50, help="adaptive maximum (50)")
    add("--warmup", type=int, default=1, help="minimum warm-up calls (1)")
    add("--warmup-ms", type=float, default=3.0, help="keep warming up this many ms (3)")
    add("--no-kernel-time", dest="kernel_time", action="store_false", help="no profiled repeats")
    add("--peak-tflops", type=float, help="override the card's peak TFLOP/s")
    add("--mem-limit-gib", type=float, help="treat at most this much memory as free")
    add("--out-dir", help="write bench.json, bench.csv, bench.png here")
    add("--json", dest="json_path", help="JSON result path")
    add("--csv", dest="csv_path", help="CSV result path")
    add("--plot", dest="plot_path", help="PNG plot path")
    add("--replot", metavar="JSON", help="only draw --plot from an existing JSON")
    add("--compare", nargs=2, metavar=("A.json", "B.json"), help="B's speedups over A, then exit")
    add("--threshold-pct", type=float, default=5.0, help="--compare: least change that counts (5)")
    add("--compare-runs", nargs="+", metavar="JSON", help="more runs of A and B: A2 B2 ...")
    add("--learn", nargs="+", action="append", metavar="JSON", help="print floors from A/A runs")
    return p


def compare_learn_or_replot(opts: Any) -> int:
    if opts.compare:
        print(compare(opts.compare, opts.compare_runs or [], opts.threshold_pct))
    elif opts.learn:
        print(learned_floors(opts.learn))
    elif not opts.plot_path:
        raise common.UsageError("--replot needs --plot PATH")
    else:
        data = common.read_results(opts.replot, "--replot")
        title = _title(data.get("identity", {}))
        print(write_plot(Path(opts.plot_path), data["results"], title) or f"wrote {opts.plot_path}")
    return 0


def peak_from_device(arch: Any, dtype: str, override: Any, info: dict) -> tuple[float | None, str]:
    """(peak TFLOP/s, source): --peak-tflops, else CUs x clock x rate, else table."""
    if override is not None:
        return override, "--peak-tflops"
    rate = common.load_table("peak_rates", "rate").get(arch or "")
    units = info.get("compute_units")
    mhz = info.get("max_clock_mhz")
    per_clock = (rate or {}).get(dtype)
    if units and mhz and isinstance(per_clock, int | float):
        return round(units * mhz * 1e6 * per_clock / 1e12, 1), (
            f"computed: {units} CUs x {mhz:g} MHz ({info.get('clock_source')}) x "
            f"{per_clock} FLOP/CU/clock (peak_rates.toml [rate.{arch}])"
        )
    why = f"table fallback ({'no per-CU rate' if rate is None else 'no engine clock'})"
    peak = common.load_arches().get(arch or "", {}).get(f"peak_tflops_{dtype}")
    if not isinstance(peak, int | float):
        return None, f"{why}: unknown for {arch or 'cpu'} (not in arches.toml)"
    return float(peak), f"{why}: arches.toml [arch.{arch}] peak_tflops_{dtype}"


def memory_roof(arch: Any, info: dict) -> tuple[float | None, str]:
    """(GB/s, source): the device's memory clock x bus width, else the arch table's."""
    entry = common.load_table("peak_rates", "memory").get(arch or "", {})
    table = entry.get("gbps")
    khz = info.get("memory_clock_khz")
    bits = info.get("memory_bus_bits")
    if khz and bits and not info.get("integrated"):
        also = f"; table [memory.{arch}]: {table:g} GB/s" if table is not None else ""
        return round(khz * 1e3 * bits * 2 / 8 / 1e9, 1), (
            f"computed: memory_clock_rate {khz} kHz x memory_bus_width {bits} bits x 2 / 8 "
            f"(torch device properties){also}"
        )
    why = "integrated GPU" if info.get("integrated") else "no memory clock/bus width"
    if table is None:
        return None, f"unknown ({why}; {arch or 'cpu'} not in peak_rates.toml [memory])"
    return float(table), f"table ({why}): peak_rates.toml [memory.{arch}]: {entry.get('source')}"


def device_info(device: Any) -> dict[str, Any]:
    """A GPU's CUs, peak engine clock with its source, memory clock and bus width."""
    import torch

    props = torch.cuda.get_device_properties(device)
    khz = getattr(props, "clock_rate", None)
    clock = (khz / 1000.0, "torch clock_rate property") if khz else (None, None)
    with contextlib.suppress(Exception):  # no sysfs file or nvidia-smi: torch's figure
        if torch.version.hip:
            pci = f"{props.pci_domain_id or 0:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}"
            sclk = Path(f"/sys/bus/pci/devices/{pci}.0/pp_dpm_sclk")
            levels = re.findall(r"(\d+)\s*Mhz", sclk.read_text(), re.IGNORECASE)
            clock = max(float(x) for x in levels), "amdgpu sysfs pp_dpm_sclk"
        else:
            index = device.index if device.index is not None else torch.cuda.current_device()
            query = f"nvidia-smi -i {index} --query-gpu=clocks.max.sm --format=csv,noheader,nounits"
            out = subprocess.run(query.split(), capture_output=True, text=True, timeout=10)
            clock = float(out.stdout.split()[0]), "nvidia-smi clocks.max.sm"
    return {
        "compute_units": getattr(props, "multi_processor_count", None),
        "max_clock_mhz": clock[0],
        "clock_source": clock[1],
        "memory_clock_khz": getattr(props, "memory_clock_rate", None),
        "memory_bus_bits": getattr(props, "memory_bus_width", None),
        "integrated": bool(getattr(props, "is_integrated", False)),
    }


def provenance(device: Any, arch: str | None, override: Any) -> dict[str, Any]:
    """What the identity lacks: cuDNN, dispatch variables, FA library, peaks and memory roof."""
    import torch

    cudnn = library = None
    with contextlib.suppress(Exception):
        cudnn = torch.backends.cudnn.version() if torch.version.cuda else None
        if device.type == "cuda" and torch.version.hip:
            library = str(torch.backends.cuda.preferred_rocm_fa_library())
    info = device_info(device) if device.type == "cuda" else {}
    peaks = {d: peak_from_device(arch, d, override, info) for d in common.DTYPE_NAMES}
    roof, roof_source = memory_roof(arch, info)
    rated = ", ".join(f"{d} {p:g} TFLOP/s" if p else f"{d} unknown" for d, (p, _) in peaks.items())
    memory = f"{roof:g} GB/s" if roof else "unknown"
    return {
        "cudnn": cudnn,
        "env": {k: os.environ[k] for k in DISPATCH_ENV_VARS if k in os.environ},
        "preferred_rocm_fa_library": library,
        "device_info": info,
        "peak_tflops": {d: p for d, (p, _) in peaks.items()},
        "peak_source": {d: src for d, (_, src) in peaks.items()},
        "memory_roof_gbps": roof,
        "memory_roof_source": roof_source,
        "peak_note": f"{rated} ({peaks['fp16'][1]}); memory {memory} ({roof_source})",
    }


@common.cli(PROG)
def main(argv: list[str] | None) -> int:
    opts = build_parser().parse_args(argv)
    if opts.compare or opts.learn or opts.replot:
        return compare_learn_or_replot(opts)
    cases = build_cases(opts)  # everything cheap is checked before the device is touched
    default_dtypes = "bf16,fp16" if opts.suite == "llm" else "fp16"
    dtypes = common.parse_list(opts.dtypes or default_dtypes, common.DTYPE_NAMES, "dtype")
    device = common.resolve_device(opts.device)
    backends = common.parse_backends(opts.backends, device)
    outputs = {"json": opts.json_path, "csv": opts.csv_path, "png": opts.plot_path}
    if opts.out_dir:
        outputs = {k: v or f"{opts.out_dir}/bench.{k}" for k, v in outputs.items()}
    if opts.dry_run:
        timings = sum(len(c) * len(p) for _s, c, p in cases) * len(dtypes) * len(backends)
        plan = f"{timings} timings: {len(cases)} shapes x {','.join(dtypes)} x {','.join(backends)}"
        shapes = [f"{s.size} {s.dims()}: causal {c}, {','.join(p)}" for s, c, p in cases]
        wrote = ", ".join(o for o in outputs.values() if o) or "the table only"
        return common.dry_run(PROG, device, [plan, *shapes, f"outputs: {wrote}"])
    paths = {k: Path(v) for k, v in outputs.items() if v}
    for path in paths.values():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise common.UsageError(f"cannot create {path.parent}: {e.strerror}") from None
    started = time.perf_counter()
    head, arch, _device_name = common.provenance(SCHEMA, device)
    ident = head["identity"]
    prov = provenance(device, arch, opts.peak_tflops)
    if prov["env"].get("AMD_SERIALIZE_KERNEL", "0") not in ("", "0"):
        progress("warning: AMD_SERIALIZE_KERNEL is set; launches are serialised, timings suffer")
    results = run_suite(opts, device, cases, dtypes, backends, prov)
    wall = time.perf_counter() - started
    print(render_table(results, ident, prov, TIMERS[device.type]))
    document = {
        **head,
        "flop_convention": FLOP_CONVENTION,
        "byte_convention": BYTE_CONVENTION,
        "provenance": prov,
        "settings": {**vars(opts), "timer": TIMERS[device.type]},
        "wall_s": round(wall, 3),
        "results": results,
    }
    if "json" in paths:
        paths["json"].write_text(json.dumps(document, indent=1) + "\n")
    if "csv" in paths:
        write_csv(paths["csv"], results)
    skipped = write_plot(paths["png"], results, _title(ident)) if "png" in paths else None
    for kind, path in paths.items():
        progress(f"plot: {skipped}" if kind == "png" and skipped else f"wrote {path}")
    progress(f"done in {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
