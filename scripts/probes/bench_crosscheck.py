"""Independent timing of SDPA cases, to cross-check bench.py's numbers.

A deliberately separate, minimal harness (it shares no code with bench.py), in either of bench's
two timing modes (--timing; default: the mode of --bench-json, else device):

- device: fp16 inputs that require grad, two fixed warm-up calls, a 256 MiB L2 flush before
  every repeat behind a GPU spin (torch.cuda._sleep, so the host's launch latency is not
  timed), one torch.cuda.Event pair per repeat, one synchronize after all repeats (as triton's
  do_bench), median.
- wall: two warm-up calls and 25 ms of back-to-back calls, then samples of N back-to-back
  calls on the host clock with one synchronize per sample (host launch cost included), median
  of the per-call times.

Backward is timed alone: forward once, then out.backward(grad, retain_graph=True) with the input
grads reset before each repeat.

Cases: every fp16 forward/backward case of --bench-json (all sizes, Tiny to XLarge), else all
five sizes x flash/efficient/cudnn/math x causal and not. With --bench-json it times each case
with the repeat count (and, in wall mode, the calls per sample) bench.py used, so that both see
the GPU in the same power/clock state, prints this harness's median next to bench.py's and the
largest difference per size; exit 1 if any differs by more than --tolerance-pct (default 5).
In device mode it also times the cases of benchmarking.md's reference table with 30 repeats
("sustained"; 10 for XLarge math) and prints them next to the reference H100 figures (measured
with 100 repeats). Needs a CUDA or ROCm device.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SUSTAINED_REPEATS = 30
WALL_SAMPLE_MS = 2.0
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
# fp16 (shared/reference/benchmarking.md).
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


def time_wall_ms(fn, before, samples: int, calls: int | None) -> float:
    """Median per-call host time of `calls` back-to-back calls (own estimate when None)."""
    for _ in range(2):  # warm-up
        before()
        fn()
    torch.cuda.synchronize()
    settle_end = time.perf_counter() + 0.025  # 25 ms back-to-back first: GPU clocks up
    while time.perf_counter() < settle_end:
        before()
        fn()
    torch.cuda.synchronize()
    if calls is None:
        t0 = time.perf_counter()
        before()
        fn()
        torch.cuda.synchronize()
        one = (time.perf_counter() - t0) * 1e3
        calls = max(1, min(200, round(WALL_SAMPLE_MS / max(one, 1e-3))))
    per_call = []
    for _ in range(samples):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            before()
            fn()
        torch.cuda.synchronize()
        per_call.append((time.perf_counter() - t0) * 1e3 / calls)
    return statistics.median(per_call)


def time_ms(fn, before, repeats: int, flush: torch.Tensor) -> float:
    for _ in range(2):  # warm-up
        before()
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for start, end in zip(starts, ends, strict=True):
        before()
        torch.cuda._sleep(1_000_000)  # queue GPU work so host launch latency is not timed
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median([s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)])


def measure(
    size: str,
    backend: str,
    causal: bool,
    flush: torch.Tensor,
    repeats: dict[str, int],
    timing: str = "device",
    calls: dict[str, int | None] | None = None,
    sustained_too: bool = False,
) -> dict[str, float]:
    """Median fwd and bwd ms with the given repeat counts (and SUSTAINED_REPEATS each when
    sustained_too, device timing)."""
    calls = calls or {}

    def timed(fn, before, pass_name):
        if timing == "wall":
            return time_wall_ms(fn, before, repeats[pass_name], calls.get(pass_name))
        return time_ms(fn, before, repeats[pass_name], flush)

    b, h, s, d = SIZES[size]
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.float16, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn(b, h, s, d, device="cuda", dtype=torch.float16)

    def reset():
        q.grad = k.grad = v.grad = None

    def fwd():
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    sustained = 10 if backend == "math" and size == "XLarge" else SUSTAINED_REPEATS
    result = {}
    with sdpa_kernel(BACKEND[backend]):
        result["fwd"] = timed(fwd, lambda: None, "fwd")
        if sustained_too:
            result["fwd_sustained"] = time_ms(fwd, lambda: None, sustained, flush)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def bwd():
            out.backward(grad, retain_graph=True)

        result["bwd"] = timed(bwd, reset, "bwd")
        if sustained_too:
            result["bwd_sustained"] = time_ms(bwd, reset, sustained, flush)
    return result


def bench_lookup(path: str | None) -> tuple[dict, str | None]:
    """bench.py's fp16 fwd/bwd rows: (size, backend, causal, pass) -> (median, repeats,
    calls per sample); and the timing mode of that run."""
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


def default_cases() -> list[tuple[str, str, bool]]:
    backends = [b for b in BACKEND if b != "cudnn" or not torch.version.hip]
    return [(s, b, c) for s in SIZES for b in backends for c in (False, True)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench-json", help="bench.py JSON from the same machine to compare against")
    p.add_argument("--timing", choices=("device", "wall"), help="default: the bench JSON's")
    p.add_argument("--tolerance-pct", type=float, default=5.0)
    p.add_argument("--json", help="write the comparison here")
    opts = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_crosscheck.py: error: needs a CUDA or ROCm device", file=sys.stderr)
        return 2
    bench, bench_timing = bench_lookup(opts.bench_json)
    timing = opts.timing or bench_timing or "device"
    if bench_timing and bench_timing != timing:
        print(
            f"bench_crosscheck.py: error: {opts.bench_json} was timed in {bench_timing} mode, "
            f"not {timing}; compare like with like",
            file=sys.stderr,
        )
        return 2
    cases = sorted(
        {(k[0], k[1], k[2]) for k in bench} or set(default_cases()),
        key=lambda c: (list(SIZES).index(c[0]), c[1], c[2]),
    )
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    rows = []
    worst_by_size: dict[str, float] = {}
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, fp16")
    print(f"timing: {timing}")
    print(
        f"{'case':<28}{'pass':<5}{'this ms':>10}{'bench ms':>10}{'diff %':>8}{'reps':>5}"
        f"{'sustained':>10}{'ref ms':>9}{'sust/ref':>9}"
    )
    nan = float("nan")
    for size, backend, causal in cases:
        ref = REFERENCE.get((size, backend, causal))
        wanted = {
            p: bench.get((size, backend, causal, p), (None, SUSTAINED_REPEATS))[1]
            for p in ("fwd", "bwd")
        }
        calls = {p: bench.get((size, backend, causal, p), (None,) * 3)[2] for p in wanted}
        try:
            times = measure(
                size,
                backend,
                causal,
                flush,
                wanted,
                timing,
                calls,
                sustained_too=ref is not None and timing == "device",
            )
        except RuntimeError as exc:  # a backend that refuses this case on this device
            print(f"{size} {backend} causal={causal}: not run ({str(exc).splitlines()[0][:80]})")
            torch.cuda.empty_cache()
            continue
        torch.cuda.empty_cache()
        for index, pass_name in enumerate(("fwd", "bwd")):
            ms = times[pass_name]
            sustained = times.get(pass_name + "_sustained")
            ref_ms = ref[index] if ref else None
            bench_ms, _reps, _calls, noisy = bench.get(
                (size, backend, causal, pass_name), (None, None, None, False)
            )
            diff = None if bench_ms is None else 100.0 * (bench_ms - ms) / ms
            if diff is not None:
                worst_by_size[size] = max(worst_by_size.get(size, 0.0), abs(diff))
            label = f"{size} {backend} {'causal' if causal else 'non-causal'}"
            ratio = sustained / ref_ms if sustained is not None and ref_ms else None
            rows.append(
                {
                    "size": size,
                    "backend": backend,
                    "causal": causal,
                    "pass": pass_name,
                    "repeats": wanted[pass_name],
                    "crosscheck_ms": round(ms, 5),
                    "bench_ms": bench_ms,
                    "bench_noisy": noisy,
                    "diff_pct": None if diff is None else round(diff, 2),
                    "sustained_ms": None if sustained is None else round(sustained, 5),
                    "reference_ms": ref_ms,
                    "sustained_vs_reference": None if ratio is None else round(ratio, 3),
                }
            )
            print(
                f"{label:<28}{pass_name:<5}{ms:>10.4f}"
                f"{bench_ms if bench_ms is not None else nan:>10.4f}"
                f"{diff if diff is not None else nan:>8.2f}{wanted[pass_name]:>5}"
                f"{sustained if sustained is not None else nan:>10.4f}"
                f"{ref_ms if ref_ms is not None else nan:>9.4f}"
                f"{ratio if ratio is not None else nan:>9.3f}"
                + ("  (bench: noisy)" if noisy else "")
            )
    compared = [r for r in rows if r["diff_pct"] is not None]
    worst = max(worst_by_size.values(), default=0.0)
    ok = bool(compared) and worst <= opts.tolerance_pct
    per_size = ", ".join(f"{s} {w:.2f}%" for s, w in worst_by_size.items())
    summary = (
        f"{timing} timing: {len(compared)} timings compared with bench.py, largest difference "
        f"{worst:.2f}% (per size: {per_size}; limit {opts.tolerance_pct:g}%): "
        f"{'AGREE' if ok else 'DISAGREE'}"
        if compared
        else "no bench.py timings to compare"
    )
    steady = [abs(r["diff_pct"]) for r in compared if not r["bench_noisy"]]
    if len(steady) < len(compared):
        summary += (
            f"; {len(compared) - len(steady)} of them were marked noisy by bench.py, the largest "
            f"difference among the others is {max(steady, default=0.0):.2f}%"
        )
    print(summary)
    if opts.json:
        Path(opts.json).write_text(
            json.dumps(
                {
                    "device": torch.cuda.get_device_name(),
                    "torch": torch.__version__,
                    "timing": timing,
                    "summary": summary,
                    "max_abs_diff_pct": round(worst, 2),
                    "max_abs_diff_pct_by_size": {k: round(v, 2) for k, v in worst_by_size.items()},
                    "rows": rows,
                },
                indent=1,
            )
        )
    return 0 if ok or not opts.bench_json else 1


if __name__ == "__main__":
    sys.exit(main())
