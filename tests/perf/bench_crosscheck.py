"""Cross-check of bench.py's timer against an independent harness, in the same process.

For every fp16 forward/backward case, bench's timer and a minimal harness (own inputs and loops)
take turns, A-B then B-A; "diff %" is the median over neighbouring turn pairs of bench's turn
median / the harness's - 1. On a GPU, the profiler's kernel time of the same repeats is set
beside the events ("profiler_*"). Exit 1 when a size differs by more than --tolerance-pct.
More: docs/attention-tools.md ("Checking the timer"). A measurement of bench, so it lives with
the timings: python -m tests.perf.bench_crosscheck [options], from the repository root, in any
Python that has torch (the probes are imported as the plain scripts they are when this project
is not installed there).
"""

from __future__ import annotations

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

try:
    from rocmfa.probes import bench
    from rocmfa.probes import sdpa_common as common
except ImportError:  # the target env: the probes folder, as bench.py runs there
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "rocmfa" / "probes"))
    import bench  # type: ignore[no-redef]
    import sdpa_common as common  # type: ignore[no-redef]

PROG, SCHEMA = "bench_crosscheck.py", "sdpa-crosscheck/1"
PROFILED_REPEATS = 20  # GPU: bench's repeats timed by events and the profiler at once
TURN_MS = 20.0  # timed milliseconds per side per turn
SPIN_CYCLES_PER_S = 2e9  # about an H100's or MI300's clock; a slower clock only spins longer
# Kept apart from bench.SIZES on purpose: this harness must not inherit a wrong shape.
SIZES = {"Tiny": (1, 1, 128, 64), "Small": (2, 8, 512, 64), "Medium": (4, 8, 1024, 64),
         "Large": (8, 16, 2048, 64), "XLarge": (16, 16, 4096, 64)}  # fmt: skip
BACKEND = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
           "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}  # fmt: skip


class Harness:
    """The independent timer: own inputs, own loops, own GPU spin (3x one call's host time)."""

    def __init__(self, size: str, causal: bool, device: torch.device) -> None:
        b, h, s, d = SIZES[size]
        self.causal, self.gpu, self.spin_cycles = causal, device.type == "cuda", 1_000_000
        torch.manual_seed(0)
        self.q, self.k, self.v, self.grad = (
            torch.randn(b, h, s, d, device=device, dtype=torch.float16) for _ in range(4)
        )
        for t in (self.q, self.k, self.v):
            t.requires_grad_(True)
        self.flush = torch.empty(256 * 2**20, dtype=torch.int8, device=device) if self.gpu else None

    def sync(self) -> None:
        if self.gpu:
            torch.cuda.synchronize()

    def reset(self) -> None:
        self.q.grad = self.k.grad = self.v.grad = None

    def time(self, backend: str, pass_name: str, repeats: int, warm_up: bool) -> list[float]:
        q, k, v, causal = self.q, self.k, self.v, self.causal
        with sdpa_kernel(BACKEND[backend]):
            if pass_name == "fwd":
                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
                before = lambda: None  # noqa: E731
            else:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                fn, before = (lambda: out.backward(self.grad, retain_graph=True)), self.reset
            if warm_up:
                for _ in range(2):
                    before()
                    fn()
                self.sync()
                before()
                t0 = time.perf_counter()
                fn()
                self.sync()
                # The spin must outlast the host's launch sequence, or events time its gaps.
                cycles = (time.perf_counter() - t0) * 3 * SPIN_CYCLES_PER_S
                self.spin_cycles = int(min(10_000_000, max(1_000_000, cycles)))
            self.sync()
            times = []
            if not self.gpu:
                for _ in range(repeats):
                    before()
                    t0 = time.perf_counter()
                    fn()
                    times.append((time.perf_counter() - t0) * 1e3)
                return times
            pairs = [[torch.cuda.Event(enable_timing=True) for _ in "se"] for _ in range(repeats)]
            for start, end in pairs:
                before()
                torch.cuda._sleep(self.spin_cycles)  # queued GPU work: host launch not timed
                self.flush.zero_()
                start.record()
                fn()
                end.record()
            torch.cuda.synchronize()
            return [s.elapsed_time(e) for s, e in pairs]


def take_turns(
    turns: int, first: Callable[[int], list[float]], second: Callable[[int], list[float]]
) -> tuple[list[list[float]], list[list[float]]]:
    """Run both `turns` times, A-B then B-A (so neither always runs after the other), each
    called with the turn's index; return the times of each, turn by turn."""
    a: list[list[float]] = []
    b: list[list[float]] = []
    for index in range(turns):
        for side, out in [(first, a), (second, b)][:: 1 if index % 2 == 0 else -1]:
            out.append(side(index))
    return a, b


def paired_diff_pct(a_turns: list[list[float]], b_turns: list[list[float]]) -> float:
    """How much slower A times than B, from neighbouring turns: the median over turns of
    median(A's turn) / median(B's turn), in %. The machine's slow drift (clocks, power, a
    neighbour) hits both turns of a pair alike and cancels."""
    pairs = zip(a_turns, b_turns, strict=True)
    ratios = [statistics.median(a) / statistics.median(b) for a, b in pairs]
    return 100.0 * (statistics.median(ratios) - 1.0)


def diff_pct(bench_ms: float, own_ms: float) -> float:
    return 100.0 * (bench_ms - own_ms) / own_ms


def verdict(rows: list[dict], field: str, tolerance_pct: float) -> tuple[bool, str, dict]:
    """(every size within tolerance, the verdict text, largest |field| per size)."""
    worst: dict[str, float] = {}
    for row in (r for r in rows if r.get(field) is not None):
        worst[row["size"]] = max(worst.get(row["size"], 0.0), abs(row[field]))
    if not worst:
        return False, "nothing was timed", worst
    agree = max(worst.values()) <= tolerance_pct
    per_size = ", ".join(f"{s} {w:.2f}%" for s, w in worst.items())
    text = f"largest difference {max(worst.values()):.2f}% (per size: {per_size}; limit "
    return agree, text + f"{tolerance_pct:g}%): " + ("AGREE" if agree else "DISAGREE"), worst


def compare_pass(case: tuple[str, str, bool, str], device: torch.device, turns: int) -> dict:
    """bench's timer and the harness in turns on one pass of one case; one row of the JSON."""
    size, backend, causal, pass_name = case
    b, h, s, d = SIZES[size]
    timer = bench.Timer(device)
    tensors = bench.Tensors(common.Shape(size, b, h, h, s, d), torch.float16, device)
    harness = Harness(size, causal, device)

    def bench_run(repeats: int) -> list[float]:
        with common.backend_context(backend, device):
            fn, before = tensors.callables(causal, pass_name)
            if not repeats:  # warm up: the per-call estimate
                return [timer.warmup(fn, before, timer.call_once(fn, before), 10.0, 1)]
            times = timer.measure(fn, before, repeats)
        tensors.reset_grads()
        return times

    (estimate,) = bench_run(0)
    timer.set_head_start(estimate, backward=pass_name != "fwd")
    per_turn = max(1, min(40, round(TURN_MS / max(estimate, 1e-6))))

    def harness_turn(index: int) -> list[float]:
        times = harness.time(backend, pass_name, per_turn, warm_up=index == 0)
        harness.reset()
        return times

    ours, theirs = take_turns(turns, lambda _index: bench_run(per_turn), harness_turn)
    events: list[float] = []
    kernel_ms = None
    if device.type == "cuda":  # a second clock: the same repeats' kernel records
        kernel_ms = bench.kernel_ms_per_repeat(
            bench.profile(lambda: events.extend(bench_run(PROFILED_REPEATS)))
        )
    bench_ms = statistics.median(x for t in ours for x in t)
    own_ms = statistics.median(x for t in theirs for x in t)
    return {
        **dict(zip(("size", "backend", "causal", "pass"), case, strict=True)), "turns": turns,
        "bench_ms": round(bench_ms, 5), "crosscheck_ms": round(own_ms, 5),
        "diff_pct": round(paired_diff_pct(ours, theirs), 2),
        "pooled_diff_pct": round(diff_pct(bench_ms, own_ms), 2), "profiler_kernel_ms": kernel_ms,
        "profiler_diff_pct":
            round(diff_pct(statistics.median(events), kernel_ms), 2) if kernel_ms else None,
        "bench_turns_ms": [[round(x, 5) for x in t] for t in ours],
        "crosscheck_turns_ms": [[round(x, 5) for x in t] for t in theirs],
    }  # fmt: skip


def pick_cases(opts: Any, device: torch.device) -> list[tuple[str, str, bool]]:
    """The fp16 cases of --bench-json, else every size x backend x causal (CPU: math only; ROCm:
    no cuDNN), narrowed by --sizes and --backends."""
    if opts.bench_json:
        rows = common.read_results(opts.bench_json, "--bench-json")["results"]
        cases = {
            (r["size"], r["backend"], r["causal"])
            for r in rows
            if r["status"] == "ok" and r["dtype"] == "fp16" and r["size"] in SIZES
        }
    else:
        backends = [b for b in BACKEND if b != "cudnn" or not torch.version.hip]
        backends = ["math"] if device.type == "cpu" else backends
        cases = {(s, b, c) for s in SIZES for b in backends for c in (False, True)}
    for text, index, known in ((opts.sizes, 0, SIZES), (opts.backends, 1, BACKEND)):
        wanted = common.parse_list(text, known, ("size", "backend")[index]) if text else known
        cases = {c for c in cases if c[index] in wanted}
    return sorted(cases, key=lambda c: (list(SIZES).index(c[0]), list(BACKEND).index(c[1]), c[2]))


def build_parser() -> common.OneLineArgumentParser:
    p = common.OneLineArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--bench-json", help="bench.py JSON: time its fp16 cases")
    p.add_argument("--sizes", help=f"comma list of {', '.join(SIZES)} (default: all)")
    p.add_argument("--backends", help=f"comma list of {', '.join(BACKEND)} (default: all)")
    p.add_argument("--turns", type=int, default=6, help="turns each side takes (default 6)")
    p.add_argument("--tolerance-pct", type=float, default=5.0)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda (ROCm too)")
    p.add_argument("--json", help="write the comparison here")
    return p


@common.cli(PROG)
def main(argv: list[str] | None) -> int:
    opts = build_parser().parse_args(argv)
    if opts.turns < 1:
        raise common.UsageError(f"--turns {opts.turns}: at least 1")
    device = common.resolve_device(opts.device)
    cases = pick_cases(opts, device)
    name = common.detect_arch(device)[1]
    clock = "device events" if device.type == "cuda" else "host clock"
    print(f"device: {name}, torch {torch.__version__}, fp16, {clock}")
    print("bench.py's timer and this harness take turns on each case")
    rows: list[dict[str, Any]] = []
    for (size, backend, causal), pass_name in ((c, p) for c in cases for p in ("fwd", "bwd")):
        label = f"{size} {backend} {'causal' if causal else 'non-causal'} {pass_name}"
        try:
            row = compare_pass((size, backend, causal, pass_name), device, opts.turns)
        except RuntimeError as exc:  # a backend that refuses this case on this device
            print(f"{label}: not run ({common.first_line(str(exc), 80)})")
            continue
        finally:
            torch.cuda.empty_cache()  # a no-op without CUDA
        rows.append(row)
        prof = row["profiler_diff_pct"]
        print(
            f"{label:<34}bench {row['bench_ms']:.4f} ms  harness {row['crosscheck_ms']:.4f} "
            f"ms  diff {row['diff_pct']:+.2f}%  pooled {row['pooled_diff_pct']:+.2f}%"
            + (f"  profiler {prof:+.2f}%" if prof is not None else "")
        )
    agree, summary, worst = verdict(rows, "diff_pct", opts.tolerance_pct)
    _, prof_summary, prof_worst = verdict(rows, "profiler_diff_pct", opts.tolerance_pct)
    summary = f"{len(rows)} timings, bench.py's timer vs this harness in turns, {summary}"
    prof_summary = (
        f"event timer vs profiler kernel time (same repeats): {prof_summary}"
        if prof_worst
        else "no profiler kernel records (CPU, or the profiler saw no device activity)"
    )
    print(f"{summary}\n{prof_summary}")
    if opts.json:
        doc = {
            **common.provenance(SCHEMA, device)[0], "summary": summary,
            "agree": agree, "profiler_summary": prof_summary,
            "max_abs_diff_pct_by_size": {k: round(v, 2) for k, v in worst.items()}, "rows": rows,
        }  # fmt: skip
        Path(opts.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
