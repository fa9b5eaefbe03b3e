"""Validate SDPA forward and backward of every backend against a high-precision reference.

For each backend available on the device, head_dim 32/64/128/256 (as the arch allows), fp16
and bf16, causal and not, and odd shapes (sequence lengths 1, 17, 127, 255, 1023; odd batch and
head counts; grouped-query heads), the backend's output and the gradients of q, k, v are
compared with a reference computed by the math backend in float64 on CPU or float32 on a GPU.

Tolerance (the flash-attention repository's rule of thumb): a backend's max abs error against
the reference may be at most FACTOR x the error of a naive attention computed in the same low
precision (matmuls in fp16/bf16, softmax in fp32), plus an absolute floor scaled by the
reference's magnitude. FACTOR is 2 for the output and 3 for the gradients; floors: fp16 2e-3,
bf16 1.6e-2 (also written to the JSON). A non-finite result always fails.

Cases the backend rejects ("No available kernel") are reported as unsupported; cases beyond a
known arch limit (arches.toml 'limits', e.g. head_dim > 256 on gfx11) are reported as
known-limit and not run. Exit 0 iff every case that ran passed (and at least one ran), 1
otherwise, 2 on bad input.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__:
    from . import sdpa_common as common
else:  # run as `python scripts/probes/validate.py`
    import sdpa_common as common  # type: ignore[no-redef]

PROG = "validate.py"
SCHEMA = "sdpa-validate/1"
FWD_FACTOR = 2.0
BWD_FACTOR = 3.0
# Absolute floor on the allowed error, times max(1, max|reference|).
FLOOR = {"fp16": 2e-3, "bf16": 1.6e-2}

HEAD_DIMS = (32, 64, 128, 256)
# (batch, q_heads, kv_heads, seq): odd lengths, odd batch/head counts, grouped-query heads.
FULL_SHAPES = (
    (1, 1, 1, 1),
    (3, 5, 5, 17),
    (2, 4, 2, 127),
    (1, 3, 3, 255),
    (2, 8, 2, 257),
    (1, 4, 1, 1023),
)
QUICK_SHAPES = ((1, 1, 1, 1), (3, 3, 3, 17), (2, 4, 2, 33))
QUICK_HEAD_DIMS = (32, 64)


def naive_attention(q: Any, k: Any, v: Any, causal: bool) -> Any:
    """Attention in the inputs' precision: matmuls in q.dtype, softmax in float32 (what an
    unfused low-precision implementation does)."""
    import torch

    if k.shape[1] != q.shape[1]:
        repeat = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
    scores = (q * (q.shape[-1] ** -0.5)) @ k.transpose(-2, -1)
    if causal:
        s_q, s_k = scores.shape[-2:]
        mask = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return probs @ v


def run_case(
    device: Any, backend: str, shape: common.Shape, dtype_name: str, causal: bool, seed: int
) -> dict[str, Any]:
    import torch

    dtype = common.torch_dtype(dtype_name)
    ref_dtype = torch.float32 if device.type == "cuda" else torch.float64
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def make(heads: int) -> Any:
        return torch.randn(shape.batch, heads, shape.seq, shape.head_dim, generator=gen)

    base = [make(shape.q_heads), make(shape.kv_heads), make(shape.kv_heads)]
    dout = make(shape.q_heads)

    def leaves(dt: Any) -> list[Any]:
        return [t.to(device=device, dtype=dt).requires_grad_(True) for t in base]

    # Reference: math backend in high precision.
    ref_in = leaves(ref_dtype)
    with common.backend_context("math", device):
        ref_out = common.sdpa(*ref_in, causal)
    ref_out.backward(dout.to(device=device, dtype=ref_dtype))
    ref = [ref_out.detach()] + [t.grad for t in ref_in]

    # Same-precision naive path: the error budget.
    low_in = leaves(dtype)
    low_out = naive_attention(*low_in, causal)
    low_out.backward(dout.to(device=device, dtype=dtype))
    low = [low_out.detach()] + [t.grad for t in low_in]

    test_in = leaves(dtype)
    with common.capture_warnings() as caught:
        try:
            with common.backend_context(backend, device):
                out = common.sdpa(*test_in, causal)
                out.backward(dout.to(device=device, dtype=dtype))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except Exception as exc:
            if common.is_oom(exc):
                return {"status": "skipped", "reason": f"out of memory: {common.first_line(exc)}"}
            return {"status": "unsupported", "reason": common.reason_from(exc, caught)}
    got = [out.detach()] + [t.grad for t in test_in]

    names = ("out", "dq", "dk", "dv")
    errors: dict[str, Any] = {}
    passed = True
    for i, name in enumerate(names):
        factor = FWD_FACTOR if i == 0 else BWD_FACTOR
        scale = max(1.0, ref[i].abs().max().item())
        err = _max_err(got[i], ref[i])
        budget = factor * _max_err(low[i], ref[i]) + FLOOR[dtype_name] * scale
        ok = err <= budget
        passed = passed and ok
        errors[name] = {"err": _round(err), "allowed": _round(budget), "ok": ok}
    return {"status": "pass" if passed else "FAIL", "reason": None, "errors": errors}


def _max_err(x: Any, ref: Any) -> float:
    import torch

    diff = (x.to(ref.dtype) - ref).abs()
    if not torch.isfinite(diff).all():
        return float("inf")
    return diff.max().item() if diff.numel() else 0.0


def _round(x: float) -> float | str:
    return "inf" if x == float("inf") else float(f"{x:.3g}")


def build_cases(opts: Any) -> list[tuple[common.Shape, str, bool]]:
    head_dims = (
        _int_list(opts.head_dims, "--head-dims")
        if opts.head_dims
        else (QUICK_HEAD_DIMS if opts.quick else HEAD_DIMS)
    )
    if opts.shape:
        dims_shapes = [common.parse_shape(s) for s in opts.shape]
    else:
        table = QUICK_SHAPES if opts.quick else FULL_SHAPES
        dims_shapes = [
            common.Shape(f"{b},{hq}/{hkv},{s},{d}", b, hq, hkv, s, d)
            for d in head_dims
            for (b, hq, hkv, s) in table
        ]
    dtypes = common.parse_dtypes(opts.dtypes)
    causals = {"yes": [True], "no": [False], "both": [False, True]}[opts.causal]
    return [(s, dt, c) for s in dims_shapes for dt in dtypes for c in causals]


def _int_list(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        values = ()
    if not values or any(v <= 0 for v in values):
        raise common.UsageError(f"{option} {text!r}: expected a comma list of positive integers")
    return values


def render(doc: dict[str, Any]) -> str:
    header = (
        "backend",
        "B,H,S,D",
        "dtype",
        "causal",
        "out err/allowed",
        "worst grad err/allowed",
        "status",
    )
    rows = []
    for r in doc["results"]:
        if r.get("errors"):
            e = r["errors"]
            fwd = f"{e['out']['err']}/{e['out']['allowed']}"
            worst = max(("dq", "dk", "dv"), key=lambda n: _ratio(e[n]))
            bwd = f"{worst} {e[worst]['err']}/{e[worst]['allowed']}"
        else:
            fwd = bwd = "-"
        status = r["status"] + (
            f": {common.first_line(r['reason'], 80)}" if r.get("reason") else ""
        )
        rows.append(
            (r["backend"], r["shape"], r["dtype"], "yes" if r["causal"] else "no", fwd, bwd, status)
        )
    lines = [
        f"SDPA validation on {doc['device']['name']} ({doc['device']['arch'] or 'cpu'}), torch "
        f"{doc['torch']}; reference: {doc['tolerance']['reference']}",
        f"tolerance: {doc['tolerance']['rule']}",
        "",
        *common.text_table(header, rows),
        "",
        doc["summary"],
    ]
    return "\n".join(lines)


def _ratio(e: dict[str, Any]) -> float:
    err, allowed = e["err"], e["allowed"]
    if err == "inf":
        return float("inf")
    return err / allowed if allowed else float("inf")


def build_parser() -> common.OneLineArgumentParser:
    p = common.OneLineArgumentParser(
        prog=PROG, description=__doc__, formatter_class=common.argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (ROCm: cuda too)")
    p.add_argument(
        "--backends",
        default="all",
        help="comma list of flash, ck, efficient, cudnn, math (default: all on device)",
    )
    p.add_argument("--dtypes", default="fp16,bf16", help="comma list of fp16, bf16")
    p.add_argument("--causal", choices=("yes", "no", "both"), default="both")
    p.add_argument("--head-dims", help="comma list (default 32,64,128,256; --quick: 32,64)")
    p.add_argument(
        "--shape",
        action="append",
        help="use this shape B,H,S,D or B,Hq,Hkv,S,D instead of the built-in set",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="small subset (head_dim 32/64, short odd sequences): seconds on a CPU",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="write results as JSON to PATH, or to stdout when no PATH is given",
    )
    return p


def _main(argv: list[str] | None) -> int:
    import torch

    opts = build_parser().parse_args(argv)
    device = common.resolve_device(opts.device)
    backends = common.parse_backends(opts.backends, device)
    cases = build_cases(opts)
    arches = common.load_arches()
    arch, device_name = common.detect_arch(device)
    limit = common.head_dim_limit(arches.get(arch or ""))
    started = time.perf_counter()
    results = []
    for backend in backends:
        for i, (shape, dtype_name, causal) in enumerate(cases):
            row: dict[str, Any] = {
                "backend": backend,
                "shape": shape.dims(),
                **shape.as_dict(),
                "dtype": dtype_name,
                "causal": causal,
            }
            if limit is not None and shape.head_dim > limit[0] and backend != "math":
                row.update(status="known-limit", reason=f"{arch}: {limit[1]}")
            else:
                row.update(run_case(device, backend, shape, dtype_name, causal, opts.seed + i))
            results.append(row)
            print(
                f"[{backend} {len(results)}/{len(cases) * len(backends)}] {row['shape']} "
                f"{dtype_name} causal={causal}: {row['status']}",
                file=sys.stderr,
                flush=True,
            )
    counts: dict[str, int] = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    failed = counts.get("FAIL", 0)
    passed = failed == 0 and counts.get("pass", 0) > 0
    summary = (
        f"{'PASS' if passed else 'FAIL'}: "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        + f" ({len(results)} cases, {time.perf_counter() - started:.1f} s)"
    )
    if counts.get("pass", 0) == 0:
        summary += "; no case ran"
    doc = {
        "schema": SCHEMA,
        "identity": common.identity(device, arch, device_name),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "device": {"type": device.type, "name": device_name, "arch": arch},
        "arch_limit": limit[1] if limit else None,
        "tolerance": {
            "reference": "math backend in "
            + ("float32 on the device" if device.type == "cuda" else "float64 on CPU"),
            "rule": (
                f"max|x-ref| <= factor x max|naive_same_precision - ref| + floor x "
                f"max(1, max|ref|); factor {FWD_FACTOR:g} (out), {BWD_FACTOR:g} (dq, dk, dv); "
                f"floor fp16 {FLOOR['fp16']:g}, bf16 {FLOOR['bf16']:g}"
            ),
            "fwd_factor": FWD_FACTOR,
            "bwd_factor": BWD_FACTOR,
            "floor": FLOOR,
        },
        "counts": counts,
        "passed": passed,
        "summary": summary,
        "results": results,
    }
    if opts.json is not None:
        text = json.dumps(doc, indent=1) + "\n"
        if opts.json == "-":
            sys.stdout.write(text)
            print(summary, file=sys.stderr)  # the verdict once, beside the JSON
        else:
            Path(opts.json).write_text(text)
            print(render(doc))
    else:
        print(render(doc))  # it ends with the verdict
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    return common.run_cli(PROG, lambda: _main(argv))


if __name__ == "__main__":
    sys.exit(main())
