"""bench's planning: the named sizes, which shapes x dtypes x causal x backends x passes to time,
which cases to skip for memory (estimate_bytes), and running the suite with progress on stderr.
torch + stdlib only."""

from __future__ import annotations

import sys
from typing import Any

if __package__:
    from . import bench_measure as measure
    from . import bench_report as report
    from . import sdpa_common as common
else:  # run as a plain script: this file's folder is first on sys.path
    import bench_measure as measure  # type: ignore[no-redef]
    import bench_report as report  # type: ignore[no-redef]
    import sdpa_common as common  # type: ignore[no-redef]

# The original 05-attention-bench.py suite (B, H, S, D).
SIZES = {
    "Tiny": (1, 1, 128, 64),
    "Small": (2, 8, 512, 64),
    "Medium": (4, 8, 1024, 64),
    "Large": (8, 16, 2048, 64),
    "XLarge": (16, 16, 4096, 64),
}
SUITES = ("default", "llm")

# --suite llm: the shapes models are run with. (name, B, Hq, Hkv, Sq, Sk, D, causal, passes).
# Prefill is causal with Sq = Sk. Decode (one new token against a cache) and a chunk of queries
# against a longer cache run non-causal: torch's is_causal aligns the mask top-left when
# Sq != Sk (the one query would see only the first key), and a decode step needs no mask.
PREFILL = ("fwd", "bwd", "fwdbwd")
LLM_SUITE = (
    *(
        (f"prefill-{s // 1024}k-d128", 1, 32, 8, s, s, 128, True, PREFILL)
        for s in (4096, 8192, 16384, 32768)
    ),
    *((f"prefill-{s // 1024}k-d64", 1, 32, 8, s, s, 64, True, PREFILL) for s in (4096, 16384)),
    ("chunk-512x8k-d128", 1, 32, 8, 512, 8192, 128, False, ("fwd", "bwd")),
    *(
        (f"decode-{s // 1024}k-d128", 8, 32, 8, 1, s, 128, False, ("fwd",))
        for s in (4096, 16384, 65536, 131072)
    ),
)


def estimate_bytes(shape: common.Shape, backend: str, element_size: int) -> int:
    """Peak memory of one case: inputs, output, grads, plus what the backend materialises.

    q/out/dout/dq and k/v/dk/dv, one spare output. The math path upcasts fp16/bf16 to fp32 and
    materialises B*Hq*Sq*Sk scores: scores and softmax in forward, softmax kept for backward plus
    two score-sized gradients while it runs (3 fp32 score tensors at peak), and with grouped-query
    heads expanded fp32 copies of K and V.
    """
    n_q = shape.batch * shape.q_heads * shape.seq * shape.head_dim
    n_kv = shape.batch * shape.kv_heads * shape.kv_seq * shape.head_dim
    total = (5 * n_q + 4 * n_kv) * element_size
    if backend == "math":
        scores = shape.batch * shape.q_heads * shape.seq * shape.kv_seq
        expanded_kv = shape.batch * shape.q_heads * shape.kv_seq * shape.head_dim
        total += 3 * scores * 4 + (4 * n_q + 4 * expanded_kv) * 4
    else:
        total += 2 * shape.batch * shape.q_heads * shape.seq * 4  # logsumexp and friends
    return total


# --------------------------------------------------------------------------- suite


def build_cases(opts: Any) -> list[tuple[common.Shape, list[bool], list[str]]]:
    """(shape, causal settings, passes) to time: the llm suite's own, else every shape with
    --causal and --passes."""
    passes = [p.strip() for p in opts.passes.split(",") if p.strip()]
    bad = [p for p in passes if p not in measure.PASSES]
    if bad or not passes:
        raise common.UsageError(f"unknown pass {','.join(bad)!r} (choose from fwd, bwd, fwdbwd)")
    if getattr(opts, "suite", "default") == "llm":
        if opts.sizes or opts.shape or opts.kv_heads:
            raise common.UsageError("--suite llm has its own shapes: drop --sizes/--shape")
        return [
            (
                common.Shape(name, b, hq, hkv, sq, d, sk),
                [causal],
                [p for p in suite_passes if p in passes],
            )
            for name, b, hq, hkv, sq, sk, d, causal, suite_passes in LLM_SUITE
        ]
    causals = {"yes": [True], "no": [False], "both": [False, True]}[opts.causal]
    return [(shape, causals, passes) for shape in build_shapes(opts)]


def suite_dtypes(opts: Any) -> list[str]:
    """--dtypes, else fp16 (the reference figures' dtype), bf16 and fp16 for --suite llm."""
    default = "bf16,fp16" if getattr(opts, "suite", "default") == "llm" else "fp16"
    return common.parse_dtypes(opts.dtypes or default)


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


def run_suite(
    opts: Any, device: Any, peaks: dict[str, float | None], roof_gbps: float | None = None
) -> list[dict]:
    """Time every case; peaks: dtype -> the peak TFLOP/s % of peak is taken against;
    roof_gbps: the memory roof of memory-bound rows."""
    import torch

    cases = build_cases(opts)
    dtypes = suite_dtypes(opts)
    backends = common.parse_backends(opts.backends, device)
    timer = measure.Timer(device)
    limit = opts.mem_limit_gib * 2**30 if opts.mem_limit_gib is not None else None
    total_cases = sum(len(c) for _s, c, _p in cases) * len(dtypes) * len(backends)
    done = 0
    results: list[dict] = []
    for shape, causals, passes in cases:
        for dtype_name in dtypes:
            dtype = common.torch_dtype(dtype_name)
            tensors = None
            for causal, backend in ((c, b) for c in causals for b in backends):
                done += 1
                skip = _memory_skip_reason(shape, backend, dtype, device, timer, limit)
                if skip is None and tensors is None:
                    tensors, skip = _allocate(shape, dtype, device)
                base = {
                    **shape.as_dict(),
                    "dtype": dtype_name,
                    "causal": causal,
                    "backend": backend,
                    "peak_tflops": peaks.get(dtype_name),
                }
                rows = time_case(timer, tensors, base, passes, skip, opts, roof_gbps)
                results += [complete_row(r) for r in rows]
                progress(
                    f"[{done}/{total_cases}] {shape.name} {dtype_name} "
                    f"{'causal' if causal else 'non-causal'} {backend}: "
                    + ", ".join(progress_text(r) for r in rows)
                )
            # Cached blocks are reused by the next shape (free_memory_bytes counts them as free);
            # releasing them would only make the next case pay for cudaMalloc again.
            del tensors
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return results


def _allocate(shape: common.Shape, dtype: Any, device: Any) -> tuple[Any, str | None]:
    try:
        return measure.Tensors(shape, dtype, device), None
    except Exception as exc:
        if not common.is_oom(exc):
            raise
        measure.release_cache(device)
        return None, f"out of memory allocating inputs: {common.first_line(exc)}"


def time_case(
    timer: Any, tensors: Any, base: dict, passes: list[str], skip: str | None, opts: Any, roof: Any
) -> list[dict]:
    """One row per pass of one case (shape, dtype, causal, backend), with its rates."""
    rows = []
    estimates: dict[str, float] = {}
    for pass_name in passes:
        row = dict(base, **{"pass": pass_name})
        rows.append(row)
        if skip is not None:
            row.update(status="skipped", reason=skip)
            continue
        known = None
        if pass_name == "fwdbwd" and {"fwd", "bwd"} <= estimates.keys():
            known = estimates["fwd"] + estimates["bwd"]
        causal, backend = base["causal"], base["backend"]
        row.update(measure.run_pass(timer, tensors, causal, backend, pass_name, opts, known))
        if row["status"] == "ok":
            estimates[pass_name] = row["median_ms"]
            bounds = (base["peak_tflops"], roof)
            size = tensors.q.element_size()
            row.update(
                measure.rates(tensors.shape, causal, pass_name, row["median_ms"], bounds, size)
            )
    return rows


def _memory_skip_reason(
    shape: common.Shape,
    backend: str,
    dtype: Any,
    device: Any,
    timer: measure.Timer,
    limit: float | None,
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


def complete_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in measure.RESULT_FIELDS}


def progress_text(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['pass']} {row['status']}"
    tflops, gbps, bound, pct = report.format_rate(row)
    rate = "!>peak" if row["above_peak"] else f"{tflops} TF/s"
    if bound == "memory":
        rate = f"{gbps} GB/s ({pct}% of the memory roof)"
    noisy = f" NOISY (spread {100 * row['spread']:.0f}%)" if row.get("noisy") else ""
    return f"{row['pass']} {row['median_ms']:.4g} ms {rate}{noisy}"


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
