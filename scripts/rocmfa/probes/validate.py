"""Validate SDPA forward and backward of every backend against the math backend in float64.

Exit status: 0 if every case that ran passed (and one ran at least), 1 if not, 2 on bad input.
Method: docs/attention-tools.md."""

from __future__ import annotations

import sys
import time
import warnings
from collections import Counter
from typing import Any, NamedTuple

import torch
from torch.nn.attention.bias import causal_lower_right

if __package__:
    from . import sdpa_common as common
else:  # run as `python scripts/rocmfa/probes/validate.py`
    import sdpa_common as common  # type: ignore[no-redef]

PROG = "validate.py"
SCHEMA = "sdpa-validate/1"
FWD_FACTOR = 2.0
BWD_FACTOR = 3.0
FLOOR = {"fp16": 2e-3, "bf16": 1.6e-2}  # absolute, times max(1, max|reference|)

CASES = common.load_table("sdpa_checks", "validate")  # the grid and the special cases
MASKED_ROWS = (0, 7, 64)  # rows of the masked-rows case that keep no key
# Dropout: q = 0 and v = the identity make out the mask itself times 1/(Sk (1 - p)); 65536
# draws, so the keep rate is within DROPOUT_TOL of 1 - p (over 6 standard deviations).
DROPOUT_P = 0.2
DROPOUT_TOL = 0.01


class Case(NamedTuple):
    shape: common.Shape
    dtype: str  # fp16, bf16
    causal: bool
    variant: str  # "" (the grid) or a special case's variant


def naive_attention(q: Any, k: Any, v: Any, mask: Any = None) -> Any:
    """Attention in q's precision (softmax in fp32); a row with no key gives 0."""
    k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
    scores = (q * (q.shape[-1] ** -0.5)) @ k.transpose(-2, -1)
    if mask is None:
        return scores.float().softmax(dim=-1).to(q.dtype) @ v
    empty = ~mask.any(-1, keepdim=True)
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(empty, 0.0)
    return scores.float().softmax(dim=-1).masked_fill(empty, 0.0).to(q.dtype) @ v


def run_case(device: Any, backend: str, case: Case, seed: int) -> dict[str, Any]:
    if case.variant == "dropout":
        return run_dropout(device, backend, case, seed)
    shape = case.shape
    mask = None  # the boolean keep-mask (Sq x Sk) the case means
    if case.variant == "masked-rows":
        keep = torch.rand(shape.seq_q, shape.kv_seq, generator=torch.Generator().manual_seed(7))
        mask = (keep < 0.5).to(device)
        mask[[r for r in MASKED_ROWS if r < shape.seq_q]] = False
    elif case.causal:
        offset = shape.kv_seq - shape.seq_q if case.variant == "bottom-right" else 0
        mask = torch.ones(shape.seq_q, shape.kv_seq, dtype=torch.bool, device=device).tril(offset)
    # The call a user makes: is_causal (top-left), causal_lower_right, or a boolean mask.
    attn_mask = mask if case.variant == "masked-rows" else None
    if case.variant == "bottom-right" and case.causal:
        with warnings.catch_warnings(action="ignore"):  # "NaNs when seq_len_q > seq_len_kv"
            attn_mask = causal_lower_right(shape.seq_q, shape.kv_seq)
    causal = case.causal and attn_mask is None
    gen = torch.Generator(device="cpu").manual_seed(seed)
    transposed = case.variant == "transposed"  # made as B,S,H,D: non-contiguous as B,H,S,D

    def make(kv: bool) -> Any:
        heads, seq = (shape.kv_heads, shape.kv_seq) if kv else (shape.q_heads, shape.seq_q)
        dims = (seq, heads) if transposed else (heads, seq)
        return torch.randn(shape.batch, *dims, shape.head_dim, generator=gen)

    base = [make(kv) for kv in (False, True, True, False)]  # q, k, v and the output gradient

    def run(dt: Any, call: Any) -> list[Any]:
        """out, dq, dk, dv (in B,H,S,D order) of call on leaves of dtype dt."""
        view = (lambda t: t.transpose(1, 2)) if transposed else (lambda t: t)
        *leaves, dout = [t.to(device=device, dtype=dt) for t in base]
        leaves = [t.requires_grad_(True) for t in leaves]
        out = call(*(view(t) for t in leaves))
        out.backward(view(dout))
        return [out.detach()] + [view(t.grad) for t in leaves]

    with common.backend_context("math", device):  # reference: math in float64
        ref = run(torch.float64, lambda q, k, v: common.sdpa(q, k, v, False, attn_mask=mask))
    dtype = common.torch_dtype(case.dtype)
    low = run(dtype, lambda q, k, v: naive_attention(q, k, v, mask))  # the error budget
    with warnings.catch_warnings(record=True, action="always") as caught:
        try:
            with common.backend_context(backend, device):
                got = run(dtype, lambda q, k, v: common.sdpa(q, k, v, causal, attn_mask=attn_mask))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except Exception as exc:
            if common.is_oom(exc):
                return {"status": "skipped", "reason": f"out of memory: {common.first_line(exc)}"}
            return {"status": "unsupported", "reason": common.reason_from(exc, caught)}
    return compare(case, mask, ref, low, got)


def compare(case: Case, mask: Any, ref: list, low: list, got: list) -> dict[str, Any]:
    """The verdict on out, dq, dk, dv: each within its budget, and all finite."""
    note = None
    if case.variant == "bottom-right" and mask is not None and not mask.any(-1).all():
        # Rows that see no key: torch's causal_lower_right warns they "will produce NaNs"
        # (Sq > Sk), so out and dq are compared on the rows that see a key.
        rows = mask.any(-1)
        for t in (ref, low, got):
            t[0], t[1] = t[0][..., rows, :], t[1][..., rows, :]
        note = "rows without a key not compared (torch: lower right causal bias produces NaNs)"
    errors: dict[str, Any] = {}
    for i, name in enumerate(("out", "dq", "dk", "dv")):
        err = common.max_error(got[i], ref[i])
        factor = FWD_FACTOR if i == 0 else BWD_FACTOR
        scale = max(1.0, ref[i].abs().max().item())
        budget = factor * common.max_error(low[i], ref[i]) + FLOOR[case.dtype] * scale
        errors[name] = {"err": _round(err), "allowed": _round(budget), "ok": err <= budget}
    bad = [n for n, t in zip(errors, got, strict=True) if not torch.isfinite(t).all()]
    over = [n for n, e in errors.items() if not e["ok"]]
    reason = f"NaN/Inf in {', '.join(bad)} at {case_text(case)}" if bad else None
    reason = reason or (f"{', '.join(over)} beyond the allowed error" if over else None)
    reason = "; ".join(r for r in (reason, note) if r) or None
    return {"status": "FAIL" if bad or over else "pass", "reason": reason, "errors": errors}


def run_dropout(device: Any, backend: str, case: Case, seed: int) -> dict[str, Any]:
    """DROPOUT_P through SDPA: keep rate, kept values, same seed same mask, new seed new mask."""
    shape = case.shape
    q = torch.zeros(shape.batch, shape.q_heads, shape.seq_q, shape.head_dim)
    k = torch.randn(shape.batch, shape.kv_heads, shape.kv_seq, shape.head_dim)
    v = torch.eye(shape.kv_seq, shape.head_dim).expand_as(k)
    q, k, v = (t.to(device, common.torch_dtype(case.dtype)) for t in (q, k, v))

    def once(s: int) -> Any:
        torch.manual_seed(s)
        return common.sdpa(q, k, v, False, dropout_p=DROPOUT_P).float().cpu()

    with warnings.catch_warnings(record=True, action="always") as caught:
        try:
            with common.backend_context(backend, device):
                first, again, other = once(seed), once(seed), once(seed + 1)
        except Exception as exc:
            return {"status": "unsupported", "reason": common.reason_from(exc, caught)}
    kept = first != 0
    keep = kept.float().mean().item()
    value = 1.0 / (shape.kv_seq * (1.0 - DROPOUT_P))
    checks = {
        "keep_rate": round(keep, 5),
        "keep_rate_expected": 1.0 - DROPOUT_P,
        "same_seed_same_mask": torch.equal(first, again),
        "kept_values_ok": bool(((first[kept] - value).abs() <= 0.01 * value).all()),
        "new_seed_new_mask": not torch.equal(kept, other != 0),
    }
    finite = bool(torch.isfinite(first).all())
    ok = finite and abs(keep - (1.0 - DROPOUT_P)) <= DROPOUT_TOL
    ok = ok and all(v for v in checks.values() if isinstance(v, bool))
    reason = None if finite else f"NaN/Inf in out at {case_text(case)}"
    if finite and not ok:
        reason = "dropout: " + ", ".join(f"{k} {v}" for k, v in checks.items())
    return {"status": "pass" if ok else "FAIL", "reason": reason, "dropout": checks}


def case_text(case: Case) -> str:
    """B,H,S,D dtype causal variant: names a case in a reason."""
    causal = ("causal " if case.causal else "") + (case.variant or "")
    return f"{case.shape.dims()} {case.dtype} {causal}".strip()


def _round(x: float) -> float | str:
    return "inf" if x == float("inf") else float(f"{x:.3g}")


def build_cases(opts: Any) -> list[Case]:
    """The grid and the special cases within its head dims; --shape: those only."""
    head_dims = CASES["quick_head_dims" if opts.quick else "head_dims"]
    if opts.head_dims:
        texts = [t.strip() for t in opts.head_dims.split(",") if t.strip()]
        head_dims = [int(t) for t in texts if t.isdigit() and int(t) > 0]
        if not head_dims or len(head_dims) < len(texts):
            raise common.UsageError(f"--head-dims {opts.head_dims!r}: expected positive integers")
    dtypes = common.parse_list(opts.dtypes, common.DTYPE_NAMES, "dtype")
    causals = {"yes": [True], "no": [False], "both": [False, True]}[opts.causal]
    table = CASES["quick_shapes" if opts.quick else "shapes"]
    grid = [common.Shape("grid", b, hq, hkv, s, d) for d in head_dims for b, hq, hkv, s in table]
    shapes = [common.parse_shape(s) for s in opts.shape or []] or grid
    cases = [Case(s, dt, c, "") for s in shapes for dt in dtypes for c in causals]
    special = [] if opts.shape else CASES["special_cases"]
    for variant, b, hq, hkv, s_q, s_k, d, full, quick in special:
        shape = common.Shape(variant or "special", b, hq, hkv, s_q, d, s_k)
        wanted = [c for c in (quick if opts.quick else full) if c in causals and d in head_dims]
        cases += [Case(shape, dt, c, variant) for dt in dtypes for c in wanted]
    return cases


def render(doc: dict[str, Any]) -> str:
    rows = []
    for r in doc["results"]:
        fwd = bwd = "-"
        if e := r.get("errors"):
            ratio = {n: float(e[n]["err"]) / float(e[n]["allowed"]) for n in ("dq", "dk", "dv")}
            worst = max(ratio, key=ratio.__getitem__)
            fwd = f"{e['out']['err']}/{e['out']['allowed']}"
            bwd = f"{worst} {e[worst]['err']}/{e[worst]['allowed']}"
        if drop := r.get("dropout"):
            fwd = f"keep {drop['keep_rate']}/{drop['keep_rate_expected']:g}"
        why = f": {common.first_line(r['reason'], 80)}" if r.get("reason") else ""
        status = r["status"] + why
        causal = ("yes" if r["causal"] else "no") + (f" {r['variant']}" if r.get("variant") else "")
        rows.append((r["backend"], r["shape"], r["dtype"], causal, fwd, bwd, status))
    header = ("backend", "B,H,S,D", "dtype", "causal", "out err/allowed", "worst grad", "status")
    ident = doc["identity"]
    lines = [
        f"SDPA validation on {ident['gpu']} ({ident['arch'] or 'cpu'}), torch {ident['torch']}; "
        f"reference: {doc['tolerance']['reference']}",
        f"tolerance: {doc['tolerance']['rule']}",
        "",
        *common.text_table(header, rows),
    ]
    return "\n".join([*lines, "", doc["summary"]])


def build_parser() -> common.OneLineArgumentParser:
    p = common.new_parser(PROG, __doc__, json_option=True)
    add = p.add_argument
    add("--backends", default="all", help="comma list of flash, ck, efficient, cudnn, math")
    add("--dtypes", default="fp16,bf16", help="comma list of fp16, bf16")
    add("--causal", choices=("yes", "no", "both"), default="both")
    add("--head-dims", help=f"comma list (default {','.join(map(str, CASES['head_dims']))})")
    add("--shape", action="append", help="only this shape B,H,S,D or B,Hq,Hkv,S,D; repeatable")
    add("--quick", action="store_true", help="a small subset: seconds on a CPU")
    add("--seed", type=int, default=0)
    return p


TOLERANCE_RULE = (
    f"max|x-ref| <= factor x max|naive_same_precision - ref| + floor x "
    f"max(1, max|ref|); factor {FWD_FACTOR:g} (out), {BWD_FACTOR:g} (dq, dk, dv); "
    f"floor fp16 {FLOOR['fp16']:g}, bf16 {FLOOR['bf16']:g}; NaN/Inf anywhere fails; "
    f"dropout p={DROPOUT_P:g}: keep rate within {DROPOUT_TOL:g} of {1 - DROPOUT_P:g}, "
    "kept values within 1 %, same seed same mask, new seed new mask"
)


@common.cli(PROG)
def main(argv: list[str] | None) -> int:
    opts = build_parser().parse_args(argv)
    device = common.resolve_device(opts.device)
    backends = common.parse_backends(opts.backends, device)
    cases = build_cases(opts)
    if opts.dry_run:
        variants = ", ".join(sorted({c.variant or "grid" for c in cases}))
        head_dims = ",".join(str(d) for d in sorted({c.shape.head_dim for c in cases}))
        plan = [f"{len(cases)} cases x {','.join(backends)}: {variants}; head dims {head_dims}"]
        plan += [case_text(c) for c in cases if c.variant or c.shape.seq_q >= 4096]
        return common.dry_run(PROG, device, plan)
    doc, arch, _device_name = common.provenance(SCHEMA, device)
    limit = common.head_dim_limit(common.load_arches().get(arch or ""))
    started = time.perf_counter()
    results = []
    for backend in backends:
        for i, case in enumerate(cases):
            row = {
                **case._asdict(),
                **case.shape.as_dict(),
                "shape": case.shape.dims(),
                "variant": case.variant or None,
                "backend": backend,
            }
            if limit and case.shape.head_dim > limit[0] and backend != "math":
                row.update(status="known-limit", reason=f"{arch}: {limit[1]}")
            else:
                row.update(run_case(device, backend, case, opts.seed + i))
            results.append(row)
            status = row["status"] + (f" ({row['reason']})" if row["status"] == "FAIL" else "")
            where = f"{backend} {len(results)}/{len(cases) * len(backends)}"
            print(f"[{where}] {case_text(case)}: {status}", file=sys.stderr, flush=True)
    counts = dict(Counter(r["status"] for r in results))
    passed = counts.get("FAIL", 0) == 0 and counts.get("pass", 0) > 0
    tallied = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    none_ran = "" if counts.get("pass") else "; no case ran"
    wall = f"{len(results)} cases, {time.perf_counter() - started:.1f} s"
    summary = f"{'PASS' if passed else 'FAIL'}: {tallied} ({wall}){none_ran}"
    reference = f"math backend in float64 on {device.type}"
    doc |= {
        "tolerance": {"reference": reference, "rule": TOLERANCE_RULE},
        "counts": counts,
        "passed": passed,
        "summary": summary,
        "results": results,
    }
    common.emit(opts.json, doc, render(doc))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
