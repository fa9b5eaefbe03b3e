"""Independent timing of a few SDPA cases, to cross-check bench.py's numbers.

A deliberately separate, minimal harness (it shares no code with bench.py): fp16 inputs that
require grad, two fixed warm-up calls, a 256 MiB L2 flush before every repeat behind a GPU spin
(torch.cuda._sleep, so the host's launch latency is not timed), one
torch.cuda.Event pair per repeat, one synchronize after all repeats (as triton's do_bench), a
fixed repeat count (30; 10 for XLarge math), median.
Backward is timed alone: forward once, then out.backward(grad, retain_graph=True) with the input
grads reset before each repeat.

With --bench-json it times each case with the repeat count bench.py used for it (so that both
see the GPU in the same power/clock state) and prints this harness's median next to bench.py's;
exit 1 if any forward or backward time differs by more than --tolerance-pct (default 5). It also
times every case with 30 repeats ("sustained"; 10 for XLarge math) and prints that next to the
reference H100 figures of benchmarking.md (measured with 100 repeats). Needs a CUDA or ROCm
device.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SUSTAINED_REPEATS = 30
SIZES = {"Medium": (4, 8, 1024, 64), "Large": (8, 16, 2048, 64), "XLarge": (16, 16, 4096, 64)}
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
    size: str, backend: str, causal: bool, flush: torch.Tensor, repeats: dict[str, int]
) -> dict[str, float]:
    """Median fwd and bwd ms with the given repeat counts, and with SUSTAINED_REPEATS each."""
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
        result["fwd"] = time_ms(fwd, lambda: None, repeats["fwd"], flush)
        result["fwd_sustained"] = time_ms(fwd, lambda: None, sustained, flush)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def bwd():
            out.backward(grad, retain_graph=True)

        result["bwd"] = time_ms(bwd, reset, repeats["bwd"], flush)
        result["bwd_sustained"] = time_ms(bwd, reset, sustained, flush)
    return result


def bench_lookup(path: str | None) -> dict:
    if not path:
        return {}
    data = json.loads(Path(path).read_text())
    table = {}
    for r in data["results"]:
        if r["status"] == "ok" and r["dtype"] == "fp16" and r["kv_heads"] == r["q_heads"]:
            key = (r["size"], r["backend"], r["causal"], r["pass"])
            table[key] = (r["median_ms"], r["repeats"])
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench-json", help="bench.py JSON from the same machine to compare against")
    p.add_argument("--tolerance-pct", type=float, default=5.0)
    p.add_argument("--json", help="write the comparison here")
    opts = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_crosscheck.py: error: needs a CUDA or ROCm device", file=sys.stderr)
        return 2
    bench = bench_lookup(opts.bench_json)
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    rows = []
    worst = 0.0
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, fp16")
    print(
        f"{'case':<28}{'pass':<5}{'this ms':>10}{'bench ms':>10}{'diff %':>8}{'reps':>5}"
        f"{'sustained':>10}{'ref ms':>9}{'sust/ref':>9}"
    )
    for (size, backend, causal), ref in REFERENCE.items():
        wanted = {
            p: bench.get((size, backend, causal, p), (None, SUSTAINED_REPEATS))[1]
            for p in ("fwd", "bwd")
        }
        times = measure(size, backend, causal, flush, wanted)
        torch.cuda.empty_cache()
        for pass_name, ref_ms in (("fwd", ref[0]), ("bwd", ref[1])):
            ms, sustained = times[pass_name], times[pass_name + "_sustained"]
            bench_ms = bench.get((size, backend, causal, pass_name), (None, None))[0]
            diff = None if bench_ms is None else 100.0 * (bench_ms - ms) / ms
            if diff is not None:
                worst = max(worst, abs(diff))
            label = f"{size} {backend} {'causal' if causal else 'non-causal'}"
            rows.append(
                {
                    "size": size,
                    "backend": backend,
                    "causal": causal,
                    "pass": pass_name,
                    "repeats": wanted[pass_name],
                    "crosscheck_ms": round(ms, 5),
                    "bench_ms": bench_ms,
                    "diff_pct": None if diff is None else round(diff, 2),
                    "sustained_ms": round(sustained, 5),
                    "reference_ms": ref_ms,
                    "sustained_vs_reference": round(sustained / ref_ms, 3),
                }
            )
            print(
                f"{label:<28}{pass_name:<5}{ms:>10.4f}"
                f"{bench_ms if bench_ms is not None else float('nan'):>10.4f}"
                f"{diff if diff is not None else float('nan'):>8.2f}{wanted[pass_name]:>5}"
                f"{sustained:>10.4f}{ref_ms:>9.4f}{sustained / ref_ms:>9.3f}"
            )
    compared = [r for r in rows if r["diff_pct"] is not None]
    ok = bool(compared) and worst <= opts.tolerance_pct
    summary = (
        f"{len(compared)} timings compared with bench.py, largest difference {worst:.2f}% "
        f"(limit {opts.tolerance_pct:g}%): {'AGREE' if ok else 'DISAGREE'}"
        if compared
        else "no bench.py timings to compare"
    )
    print(summary)
    if opts.json:
        Path(opts.json).write_text(
            json.dumps(
                {
                    "device": torch.cuda.get_device_name(),
                    "torch": torch.__version__,
                    "summary": summary,
                    "max_abs_diff_pct": round(worst, 2),
                    "rows": rows,
                },
                indent=1,
            )
        )
    return 0 if ok or not opts.bench_json else 1


if __name__ == "__main__":
    sys.exit(main())
