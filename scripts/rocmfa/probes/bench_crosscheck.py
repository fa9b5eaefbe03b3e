"""Cross-check of bench.py's timing against an independent harness, in the same process.

For every case, bench.py's own timer (bench_measure.Timer on bench's inputs) and a separate,
minimal harness (its own inputs and loops, no code shared with bench) take turns on the same
GPU, A-B then B-A (few long turns in device mode, many short ones in wall mode: --turns), so
both see the same clocks, power state and neighbours. A case's "diff %" is the median over
pairs of neighbouring turns of bench's turn median / the harness's - 1 ("pooled": of the
pooled medians). Exit 1 when any size's largest difference exceeds --tolerance-pct (default
5). Two separate processes would measure mostly the machine: wall timings of small cases
differed by up to 62 % between two runs of one harness a minute apart on an H100.

The harness, in bench's timing modes (--timing; default: --bench-json's, else device):
device: fp16 inputs, two warm-up calls, a 256 MiB L2 flush behind a GPU spin before each
repeat, one event pair per repeat, median (as triton's do_bench); wall: two warm-up calls and
25 ms back-to-back, then samples of N back-to-back calls on the host clock (also on a CPU).
Backward is timed alone (forward once, backward with retain_graph, grads reset per repeat).

Cases: every fp16 fwd/bwd case of --bench-json (its medians shown beside, for information),
else five sizes x flash/efficient/cudnn/math x causal and not (--sizes/--backends). In device
mode the cases of REFERENCE are also timed with 30 repeats ("sustained") next to the H100
reference figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

if __package__:
    from . import bench_measure as bench_timing
    from . import kernel_time
    from . import sdpa_common as common
else:  # run as a plain script: this file's folder is first on sys.path
    import bench_measure as bench_timing  # type: ignore[no-redef]
    import kernel_time  # type: ignore[no-redef]
    import sdpa_common as common  # type: ignore[no-redef]

# (turns, timed ms per side per turn). Wall time of host-bound calls drifts within seconds, so
# in wall mode the two sides take many short turns.
TURNS = {"device": (6, 20.0), "wall": (40, 5.0)}
SLOW_TURNS, SLOW_PER_TURN = 6, 3  # calls slower than bench's SLOW_CALL_MS vary well under 1 %
MAX_PER_TURN = 40
SPIN_CYCLES_PER_S = 2e9  # about an H100's or MI300's clock; a slower clock only spins longer
MIN_SPIN_CYCLES, MAX_SPIN_CYCLES = 1_000_000, 10_000_000
WARMUP_MS = 10.0
SUSTAINED_REPEATS = 30
SCHEMA = "sdpa-crosscheck/1"
PROFILED_REPEATS = 20  # device mode: the harness's repeats timed by events and the profiler at once
# Kept apart from bench_plan.SIZES on purpose: this harness must not inherit a wrong shape.
SIZES = {
    "Tiny": (1, 1, 128, 64),
    "Small": (2, 8, 512, 64),
    "Medium": (4, 8, 1024, 64),
    "Large": (8, 16, 2048, 64),
    "XLarge": (16, 16, 4096, 64),
}
BACKEND = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
# (size, backend, causal): reference fwd ms, bwd ms on an H100 80GB HBM3, torch 2.11.0+cu130,
# fp16, 100 repeats (docs/results/README.md, "Comparison with the reference figures").
REFERENCE = {
    ("Medium", "flash", True): (0.0385, 0.135),
    ("Medium", "flash", False): (0.0369, 0.143),
    ("Medium", "cudnn", False): (0.0269, 0.092),
    ("Large", "flash", True): (0.281, 1.081),
    ("Large", "flash", False): (0.472, 1.644),
    ("Large", "math", False): (9.33, 11.20),
    ("XLarge", "flash", True): (1.904, 6.325),
    ("XLarge", "flash", False): (3.710, 10.66),
    ("XLarge", "efficient", False): (8.097, 25.55),
    ("XLarge", "cudnn", False): (2.547, 7.039),
    ("XLarge", "math", False): (74.49, 85.85),
}


# --------------------------------------------------------------------------- the own harness


class Harness:
    """The independent timer: own inputs, own loops."""

    def __init__(self, size: str, causal: bool, timing: str, device: torch.device) -> None:
        b, h, s, d = SIZES[size]
        self.causal = causal
        self.timing = timing
        self.gpu = device.type == "cuda"
        torch.manual_seed(0)
        self.q, self.k, self.v = (
            torch.randn(b, h, s, d, device=device, dtype=torch.float16, requires_grad=True)
            for _ in range(3)
        )
        self.grad = torch.randn(b, h, s, d, device=device, dtype=torch.float16)
        self.flush = torch.empty(256 * 2**20, dtype=torch.int8, device=device) if self.gpu else None
        self.spin_cycles = MIN_SPIN_CYCLES

    def sync(self) -> None:
        if self.gpu:
            torch.cuda.synchronize()

    def reset(self) -> None:
        self.q.grad = self.k.grad = self.v.grad = None

    def callables(self, pass_name: str) -> tuple[Callable[[], object], Callable[[], None]]:
        q, k, v, causal = self.q, self.k, self.v, self.causal

        def fwd():
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        if pass_name == "fwd":
            return fwd, lambda: None
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return (lambda: out.backward(self.grad, retain_graph=True)), self.reset

    def time(
        self, backend: str, pass_name: str, repeats: int, calls: int, warm_up: bool = True
    ) -> list[float]:
        """Per-repeat ms (device) or per-call ms of each sample (wall)."""
        with sdpa_kernel(BACKEND[backend]):
            fn, before = self.callables(pass_name)
            if warm_up:
                for _ in range(2):
                    before()
                    fn()
                self.sync()
                before()
                t0 = time.perf_counter()
                fn()
                self.sync()
                # The spin must outlast the host's launch sequence (an autograd backward of the
                # math path launches for ~0.5 ms at Tiny), or the events time the host's gaps.
                host_cycles = (time.perf_counter() - t0) * 3 * SPIN_CYCLES_PER_S
                self.spin_cycles = int(min(MAX_SPIN_CYCLES, max(MIN_SPIN_CYCLES, host_cycles)))
                if self.timing == "wall":
                    self._settle(fn, before)
            self.sync()
            if self.timing == "wall":
                return self._wall(fn, before, repeats, calls)
            return self._device(fn, before, repeats)

    def _device(self, fn, before, repeats: int) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for start, end in zip(starts, ends, strict=True):
            before()
            torch.cuda._sleep(self.spin_cycles)  # queued GPU work: host launch cost not timed
            self.flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]

    def _settle(self, fn, before) -> None:
        settle_end = time.perf_counter() + 0.025  # 25 ms back-to-back first: GPU clocks up
        while time.perf_counter() < settle_end:
            before()
            fn()

    def _wall(self, fn, before, samples: int, calls: int) -> list[float]:
        per_call = []
        for _ in range(samples):
            self.sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                before()
                fn()
            self.sync()
            per_call.append((time.perf_counter() - t0) * 1e3 / calls)
        return per_call


# --------------------------------------------------------------------------- taking turns


def take_turns(
    turns: int, first: Callable[[int], list[float]], second: Callable[[int], list[float]]
) -> tuple[list[list[float]], list[list[float]]]:
    """Run both `turns` times, A-B then B-A (so neither always runs after the other), each
    called with the turn's index; return the times of each, turn by turn."""
    a: list[list[float]] = []
    b: list[list[float]] = []
    for index in range(turns):
        if index % 2 == 0:
            a.append(first(index))
            b.append(second(index))
        else:
            b.append(second(index))
            a.append(first(index))
    return a, b


def paired_diff_pct(a_turns: list[list[float]], b_turns: list[list[float]]) -> float:
    """How much slower A times than B, from neighbouring turns: the median over turns of
    median(A's turn) / median(B's turn), in %. The machine's slow drift (clocks, power, a
    neighbour) and a bimodal row's changing mix hit both turns of a pair alike and cancel."""
    ratios = [
        statistics.median(a) / statistics.median(b) for a, b in zip(a_turns, b_turns, strict=True)
    ]
    return 100.0 * (statistics.median(ratios) - 1.0)


def turn_plan(timing: str, sample_ms: float, turns: int | None = None) -> tuple[int, int]:
    """(turns, samples per side per turn) for a sample of `sample_ms`."""
    if sample_ms >= bench_timing.SLOW_CALL_MS:
        return turns or SLOW_TURNS, SLOW_PER_TURN
    default_turns, turn_ms = TURNS[timing]
    per_turn = max(1, min(MAX_PER_TURN, round(turn_ms / max(sample_ms, 1e-6))))
    return turns or default_turns, per_turn


def compare_pass(
    size: str,
    backend: str,
    causal: bool,
    pass_name: str,
    timing: str,
    device: torch.device,
    turns: int | None = None,
    sustained: bool = False,
) -> dict:
    """bench's timer and the own harness in turns on one pass of one case (each warms up in its
    first turn only; a backward's graph is rebuilt per turn: the math path's at XLarge is
    ~17 GB); with `sustained`, the harness alone with SUSTAINED_REPEATS (10 for XLarge math)."""
    b, h, s, d = SIZES[size]
    timer = bench_timing.Timer(device, timing)
    tensors = bench_timing.Tensors(common.Shape(size, b, h, h, s, d), torch.float16, device)
    harness = Harness(size, causal, timing, device)

    with common.backend_context(backend, device):
        fn, before = bench_timing.pass_callables(tensors, causal, pass_name)
        first_ms = timer.call_once(fn, before)
        estimate = timer.warmup(fn, before, first_ms, WARMUP_MS, 1)
        del fn, before
    calls = timer.calls_per_sample(estimate)
    timer.set_head_start(estimate, backward=pass_name != "fwd")
    turns, per_turn = turn_plan(timing, estimate * calls, turns)

    def bench_turn(index: int) -> list[float]:
        with common.backend_context(backend, device):
            fn, before = bench_timing.pass_callables(tensors, causal, pass_name)
            if timing == "wall" and index == 0:  # as bench's run_pass does before timing
                timer.run_for(fn, before, bench_timing.WALL_SETTLE_MS / 1e3)
            times = timer.measure(fn, before, per_turn, calls)
        tensors.reset_grads()
        return times

    def harness_turn(index: int) -> list[float]:
        times = harness.time(backend, pass_name, per_turn, calls, warm_up=index == 0)
        harness.reset()
        return times

    bench_turns, own_turns = take_turns(turns, bench_turn, harness_turn)
    profiled = None
    if timing == "device":
        slow = estimate >= bench_timing.SLOW_CALL_MS
        profiled = profile_harness(harness, backend, pass_name, slow)
    sustained_ms = None
    if sustained:
        many = 10 if backend == "math" and size == "XLarge" else SUSTAINED_REPEATS
        sustained_ms = statistics.median(harness.time(backend, pass_name, many, 1))
    return {
        "bench": bench_turns,
        "own": own_turns,
        "turns": turns,
        "calls_per_sample": calls,
        "sustained_ms": sustained_ms,
        "profiled": profiled,
    }


def profile_harness(harness: Harness, backend: str, pass_name: str, slow: bool) -> dict | None:
    """A second clock, not another loop: the same repeats timed by their event pairs and by
    the profiler's kernel records (scripts/rocmfa/probes/kernel_time.py)."""
    events: list[float] = []
    many = SLOW_PER_TURN if slow else PROFILED_REPEATS
    kernels = kernel_time.profile(
        lambda: events.extend(harness.time(backend, pass_name, many, 1, warm_up=False))
    )
    harness.reset()
    found = kernel_time.summary(kernels)
    return {"events_ms": statistics.median(events), **found} if found and events else None


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 5)


def _pct(events_ms: float | None, kernel_ms: float | None) -> float | None:
    """How much longer the event pair read than the profiler's kernel time, in %."""
    return None if not events_ms or not kernel_ms else round(diff_pct(events_ms, kernel_ms), 2)


def diff_pct(bench_ms: float, own_ms: float) -> float:
    return 100.0 * (bench_ms - own_ms) / own_ms


def verdict(
    rows: list[dict], tolerance_pct: float, field: str = "diff_pct"
) -> tuple[bool, dict[str, float]]:
    """(all sizes within tolerance, largest |difference| per size) over the compared rows."""
    worst: dict[str, float] = {}
    for row in rows:
        if row.get(field) is not None:
            worst[row["size"]] = max(worst.get(row["size"], 0.0), abs(row[field]))
    return bool(worst) and max(worst.values()) <= tolerance_pct, worst


# --------------------------------------------------------------------------- inputs


def bench_lookup(path: str | None) -> tuple[dict, str | None]:
    """bench.py's fp16 fwd/bwd rows: (size, backend, causal, pass) -> (median, repeats,
    calls per sample, noisy); and the timing mode of that run."""
    if not path:
        return {}, None
    data = json.loads(Path(path).read_text())
    table = {}
    for r in data["results"]:
        if (
            r["status"] == "ok"
            and r["dtype"] == "fp16"
            and r["kv_heads"] == r["q_heads"]
            and r["size"] in SIZES
            and r["pass"] in ("fwd", "bwd")
        ):
            key = (r["size"], r["backend"], r["causal"], r["pass"])
            table[key] = (
                r["median_ms"],
                r["repeats"],
                r.get("calls_per_sample"),
                bool(r.get("noisy")),
            )
    return table, (data.get("settings") or {}).get("timing", "device")


def default_cases(device: torch.device | None = None) -> list[tuple[str, str, bool]]:
    """Every size x backend x causal; on a CPU only math, on ROCm no cuDNN."""
    if device is not None and device.type == "cpu":
        backends = ["math"]
    else:
        backends = [b for b in BACKEND if b != "cudnn" or not torch.version.hip]
    return [(s, b, c) for s in SIZES for b in backends for c in (False, True)]


def pick_cases(bench: dict, device, sizes: str | None, backends: str | None) -> list[tuple]:
    cases = {(k[0], k[1], k[2]) for k in bench} or set(default_cases(device))
    for text, index, known in ((sizes, 0, SIZES), (backends, 1, BACKEND)):
        if text:
            wanted = {t.strip() for t in text.split(",") if t.strip()}
            unknown = wanted - set(known)
            if unknown:
                raise common.UsageError(
                    f"unknown {'size' if index == 0 else 'backend'} {','.join(sorted(unknown))!r}"
                    f" (choose from {', '.join(known)})"
                )
            cases = {c for c in cases if c[index] in wanted}
    return sorted(cases, key=lambda c: (list(SIZES).index(c[0]), list(BACKEND).index(c[1]), c[2]))


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench-json", help="bench.py JSON: its cases, timing mode and medians")
    p.add_argument("--timing", choices=("device", "wall"), help="default: the bench JSON's")
    p.add_argument("--sizes", help=f"comma list of {', '.join(SIZES)} (default: all)")
    p.add_argument("--backends", help=f"comma list of {', '.join(BACKEND)} (default: all)")
    p.add_argument(
        "--turns",
        type=int,
        help=f"turns each side takes (default: device {TURNS['device'][0]}, wall "
        f"{TURNS['wall'][0]}; {SLOW_TURNS} for calls over {bench_timing.SLOW_CALL_MS:g} ms)",
    )
    p.add_argument("--tolerance-pct", type=float, default=5.0)
    p.add_argument("--device", default="cuda", help="cuda (ROCm too), or cpu for --timing wall")
    p.add_argument("--json", help="write the comparison here")
    return p.parse_args(argv)


def make_row(
    case: tuple[str, str, bool, str],
    result: dict[str, Any],
    json_ms: float | None,
    ref_ms: float | None,
) -> dict[str, Any]:
    """One timing row of the JSON: both timers' turns, their differences, the references."""
    size, backend, causal, pass_name = case
    bench_all = [x for turn in result["bench"] for x in turn]
    own_all = [x for turn in result["own"] for x in turn]
    bench_ms = statistics.median(bench_all)
    own_ms = statistics.median(own_all)
    sustained = result["sustained_ms"]
    prof = result["profiled"] or {}
    row = {
        "size": size,
        "backend": backend,
        "causal": causal,
        "pass": pass_name,
        "turns": result["turns"],
        "samples": len(own_all),
        "calls_per_sample": result["calls_per_sample"],
        "bench_ms": round(bench_ms, 5),
        "crosscheck_ms": round(own_ms, 5),
        "diff_pct": round(paired_diff_pct(result["bench"], result["own"]), 2),
        "pooled_diff_pct": round(diff_pct(bench_ms, own_ms), 2),
        "bench_spread": round(bench_timing.spread(bench_all), 4),
        "crosscheck_spread": round(bench_timing.spread(own_all), 4),
        "bench_json_ms": json_ms,
        "bench_json_diff_pct": None if json_ms is None else round(diff_pct(json_ms, own_ms), 2),
        "sustained_ms": None if sustained is None else round(sustained, 5),
        "reference_ms": ref_ms,
        "profiler_events_ms": _r(prof.get("events_ms")),
        "profiler_kernel_ms": prof.get("kernel_ms"),
        "profiler_span_ms": prof.get("kernel_span_ms"),
        "profiler_kernels_per_call": prof.get("kernels_per_call"),
        "profiler_diff_pct": _pct(prof.get("events_ms"), prof.get("kernel_ms")),
        "profiler_span_diff_pct": _pct(prof.get("events_ms"), prof.get("kernel_span_ms")),
        "bench_turns_ms": [[round(x, 5) for x in turn] for turn in result["bench"]],
        "crosscheck_turns_ms": [[round(x, 5) for x in turn] for turn in result["own"]],
    }
    return row


def usage_problem(opts: argparse.Namespace, bench_mode: str | None, timing: str) -> str | None:
    """Why these options cannot run here, or None."""
    device = torch.device(opts.device)
    if bench_mode and bench_mode != timing:
        return f"{opts.bench_json} was timed in {bench_mode} mode, not {timing}"
    if device.type == "cuda" and not torch.cuda.is_available():
        return "no CUDA or ROCm device (on a CPU: --device cpu --timing wall)"
    if device.type == "cpu" and timing == "device":
        return "device timing needs a CUDA or ROCm device; on a CPU use --timing wall"
    if device.type not in ("cuda", "cpu"):
        return f"--device {opts.device}: choose cuda or cpu"
    if opts.turns is not None and opts.turns < 1:
        return f"--turns {opts.turns}: at least 1"
    return None


def print_header(name: str, timing: str) -> None:
    print(f"device: {name}, torch {torch.__version__}, fp16")
    print(f"timing: {timing}; bench.py's timer and this harness take turns on each case")
    print(
        f"{'case':<28}{'pass':<5}{'bench ms':>10}{'this ms':>10}{'diff %':>8}{'pooled':>8}{'n':>5}"
        f"{'json ms':>10}{'sustained':>10}{'ref ms':>9}"
    )


def print_row(label: str, row: dict[str, Any]) -> None:
    """One table line: both timers, their difference, the JSON's, sustained and reference."""
    nan = float("nan")
    json_ms, sustained, ref_ms = row["bench_json_ms"], row["sustained_ms"], row["reference_ms"]
    print(
        f"{label:<28}{row['pass']:<5}{row['bench_ms']:>10.4f}{row['crosscheck_ms']:>10.4f}"
        f"{row['diff_pct']:>8.2f}{row['pooled_diff_pct']:>8.2f}{row['samples']:>5}"
        f"{json_ms if json_ms is not None else nan:>10.4f}"
        f"{sustained if sustained is not None else nan:>10.4f}"
        f"{ref_ms if ref_ms is not None else nan:>9.4f}"
        + (
            f"  profiler {row['profiler_kernel_ms']:.4f} ms ({row['profiler_diff_pct']:+.2f}%)"
            if row["profiler_kernel_ms"] is not None
            else ""
        )
    )


def time_cases(
    cases: list[tuple[str, str, bool]],
    bench: dict[Any, Any],
    timing: str,
    device: torch.device,
    turns: int | None,
) -> list[dict[str, Any]]:
    """Time every case's fwd and bwd with both timers; print and return the rows."""
    rows = []
    for size, backend, causal in cases:
        label = f"{size} {backend} {'causal' if causal else 'non-causal'}"
        ref = REFERENCE.get((size, backend, causal)) if timing == "device" else None
        for index, pass_name in enumerate(("fwd", "bwd")):
            try:
                result = compare_pass(
                    size, backend, causal, pass_name, timing, device, turns, bool(ref)
                )
            except RuntimeError as exc:  # a backend that refuses this case on this device
                print(f"{label} {pass_name}: not run ({common.first_line(str(exc), 80)})")
                result = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
            if result is None:
                continue
            json_ms = bench.get((size, backend, causal, pass_name), (None,))[0]
            ref_ms = ref[index] if ref else None
            row = make_row((size, backend, causal, pass_name), result, json_ms, ref_ms)
            rows.append(row)
            print_row(label, row)
    return rows


def summaries(rows: list[dict[str, Any]], timing: str, tolerance_pct: float) -> dict[str, Any]:
    """The verdicts, keyed as in the JSON: bench.py's timer vs this harness, events vs profiler."""
    ok, worst = verdict(rows, tolerance_pct)
    prof_ok, prof_worst = verdict(rows, tolerance_pct, "profiler_diff_pct")

    def line(what: str, ok: bool, worst: dict[str, float], limit: str = "") -> str:
        per_size = ", ".join(f"{s} {w:.2f}%" for s, w in worst.items())
        return (
            f"{what} largest difference {max(worst.values()):.2f}% (per size: {per_size}"
            f"{limit}): {'AGREE' if ok else 'DISAGREE'}"
        )

    summary = "nothing was timed"
    if rows:
        what = f"{timing} timing: {len(rows)} timings, bench.py's timer vs this harness in turns,"
        summary = line(what, ok, worst, f"; limit {tolerance_pct:g}%")
    prof_summary = (
        "no profiler kernel records (wall timing, or the profiler saw no device activity)"
    )
    if prof_worst:
        what = "event timer vs profiler kernel time (same repeats):"
        prof_summary = line(what, prof_ok, prof_worst)
    return {
        "summary": summary,
        "agree": ok,
        "profiler_summary": prof_summary,
        "profiler_agree": prof_ok if prof_worst else None,
        "profiler_max_abs_diff_pct_by_size": {k: round(v, 2) for k, v in prof_worst.items()},
        "max_abs_diff_pct": round(max(worst.values(), default=0.0), 2),
        "max_abs_diff_pct_by_size": {k: round(v, 2) for k, v in worst.items()},
    }


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    prog = "bench_crosscheck.py"
    bench, bench_mode = bench_lookup(opts.bench_json)
    timing = opts.timing or bench_mode or "device"
    device = torch.device(opts.device)
    problem = usage_problem(opts, bench_mode, timing)
    try:
        cases = [] if problem else pick_cases(bench, device, opts.sizes, opts.backends)
    except common.UsageError as exc:
        problem = str(exc)
    if problem:
        print(f"{prog}: error: {problem}", file=sys.stderr)
        return 2

    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print_header(name, timing)
    rows = time_cases(cases, bench, timing, device, opts.turns)
    verdicts = summaries(rows, timing, opts.tolerance_pct)
    print(verdicts["summary"])
    print(verdicts["profiler_summary"])
    if opts.json:
        Path(opts.json).write_text(
            json.dumps(
                {
                    "schema": SCHEMA,
                    "device": name,
                    "torch": torch.__version__,
                    "timing": timing,
                    "identity": common.identity(device, *common.detect_arch(device)),
                    **verdicts,
                    "rows": rows,
                },
                indent=1,
            )
        )
    return 0 if verdicts["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
