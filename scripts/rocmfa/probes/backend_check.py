"""Check that SDPA flash attention is usable, is used and is correct on this machine.

Exit status: 0 if it is, 1 if not (one line says why), 2 on bad input. docs/attention-tools.md"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any

if __package__:
    from . import sdpa_common as common
else:  # run as `python scripts/rocmfa/probes/backend_check.py`
    import sdpa_common as common  # type: ignore[no-redef]

PROG = "backend_check.py"
SCHEMA = "sdpa-backend-check/1"

TOLERANCE_RULE = "max|x - ref| / max(1, max|ref|), ref = math backend in float32"
TOLERANCE = {"fp16": {"fwd": 1e-2, "bwd": 2e-2}, "bf16": {"fwd": 3e-2, "bwd": 6e-2}}

# Kernel-name rules (first match wins) and operator names, each to the backend it means.
RULES = common.load_table("sdpa_checks", "backend_check")
KERNEL_RULES = RULES["kernel_rules"]
FUSED = {"flash", "ck", "efficient", "cudnn", "flash-cpu"}


def classify_kernel(name: str) -> str:
    lowered = name.lower()
    return next((f for f, needles in KERNEL_RULES if any(n in lowered for n in needles)), "other")


def classify_events(events: list[tuple[str, bool]]) -> dict[str, Any]:
    """events: (name, ran on the device) -> ops, kernel families and names, what ran."""
    ops: list[str] = []
    kernel_families: dict[str, dict[str, None]] = {}  # family -> its kernel names, each once
    for name, on_device in events:
        if on_device:
            kernel_families.setdefault(classify_kernel(name), {})[name] = None
        elif (family := RULES["ops"].get(name.removesuffix("_backward"))) and family not in ops:
            ops.append(family)
    # Device kernels are the ground truth on a GPU; the ops where none were recorded.
    seen = list(kernel_families) or ops
    ran = next((f for f in seen if f in FUSED), "math" if "math" in seen else "unknown")
    kernels = {f: list(names)[:6] for f, names in kernel_families.items()}
    return {"ops": ops, "kernel_families": sorted(kernel_families), "kernels": kernels, "ran": ran}


def profile_events(prof: Any) -> list[tuple[str, bool]]:
    gpu = ("CUDA", "HIP", "PrivateUse1")  # DeviceType.<kind> of an event that ran on a GPU
    return [(e.name, str(getattr(e, "device_type", "")).endswith(gpu)) for e in prof.events()]


def backend_flags(device: Any, dtype: Any, shape: common.Shape) -> dict[str, Any]:
    """Per backend: compiled in, enabled, can_use_* with torch's reasons (C++ warnings too)."""
    import torch

    cuda = torch.backends.cuda
    ask = common.ask
    q = torch.zeros(shape.batch, shape.q_heads, shape.seq_q, shape.head_dim).to(device, dtype)
    params = cuda.SDPAParams(q, q, q, None, 0.0, False, False)

    def flags(name: str, compiled: bool | None, enabled: bool) -> dict[str, Any]:
        error = None
        with common.capture_all_warnings() as reasons:
            try:
                ok = bool(getattr(cuda, f"can_use_{name}_attention")(params, debug=True))
            except Exception as exc:
                ok, error = False, common.first_line(str(exc))
        reasons += [error] if error is not None else []
        if not ok and not reasons:
            why = " (tensors on cpu; can_use_* only checks CUDA/ROCm tensors)"
            reasons.append("torch gave no reason" + why * (device.type == "cpu"))
        reasons = list(dict.fromkeys(reasons))
        return dict(compiled_in=compiled, enabled=enabled, can_use=ok, reasons=reasons)

    report = {
        "flash": flags("flash", ask(cuda.is_flash_attention_available), cuda.flash_sdp_enabled()),
        # torch has no public "is compiled in" query for the memory-efficient kernel.
        "efficient": flags("efficient", None, cuda.mem_efficient_sdp_enabled()),
        "math": dict(compiled_in=True, enabled=cuda.math_sdp_enabled(), can_use=True, reasons=[]),
    }
    if torch.version.hip:
        report["ck"] = {
            "compiled_in": ask(cuda.is_ck_sdpa_available),
            "enabled": None,
            "can_use": None,
            "reasons": ["selected via preferred_rocm_fa_library"],
        }
    else:
        compiled = False if device.type == "cpu" else ask(torch.backends.cudnn.is_available)
        report["cudnn"] = flags("cudnn", compiled, cuda.cudnn_sdp_enabled())
    return report


def rocm_report(arch: str | None, arches: dict[str, Any], lib_dir: Path) -> dict[str, Any]:
    """Experimental flag, preferred flash library, AOTriton versions (read on any platform)."""
    import torch

    aot = common.aotriton_versions(lib_dir)
    flag = os.environ.get("TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL")
    needs = common.needs_experimental_flag(arches.get(arch or ""), aot["runtime_version"])
    library = None
    with contextlib.suppress(Exception):  # None where torch cannot say
        library = torch.version.hip and torch.backends.cuda.preferred_rocm_fa_library()
    report = {
        "aotriton": aot,
        "experimental_flag": flag,
        "arch_needs_experimental_flag": needs,
        "preferred_rocm_fa_library": library and str(library),
    }
    if needs and flag != "1":
        now = f"it is {'unset' if flag is None else repr(flag)}; set it before the first SDPA call"
        report["flag_problem"] = (
            f"{arch} needs TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 with "
            f"AOTriton {aot['runtime_version']} ({now})"
        )
    return report


def run_profiled(device: Any, backend: str | None, inputs: tuple) -> tuple[Any, dict[str, Any]]:
    """SDPA fwd+bwd under the profiler, forced to backend (None: default dispatch)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    q, k, v, dout = inputs
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    for t in (q, k, v):
        t.grad = None
    forced = common.backend_context(backend, device) if backend else contextlib.nullcontext()
    error = None
    with common.capture_all_warnings() as reasons:
        try:
            with profile(activities=activities) as prof:
                with forced:
                    out = common.sdpa(q, k, v, True)
                out.backward(dout)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            # A deferred HIP error (pitfall: it surfaces at the next checked op) lands here.
            torch.zeros(1, device=device).add_(1).item()
        except Exception as exc:
            error = common.first_line(str(exc)) or type(exc).__name__
    if error is not None:
        return None, {"ran": None, "error": error, "reasons": reasons}
    grads = [t.grad.detach().clone() for t in (q, k, v)]
    return (out.detach(), grads), {**classify_events(profile_events(prof)), "reasons": reasons}


def truth_run(device: Any, dtype_name: str, shape: common.Shape) -> dict[str, Any]:
    """Force flash, profile it, compare with float32 math; profile the default dispatch too."""
    import torch

    dtype = common.torch_dtype(dtype_name)
    gen = torch.Generator(device="cpu").manual_seed(0)

    def make(heads: int) -> Any:
        t = torch.randn(shape.batch, heads, shape.seq_q, shape.head_dim, generator=gen)
        return t.to(device=device, dtype=dtype)

    q, k, v = (make(h).requires_grad_(True) for h in (shape.q_heads, *[shape.kv_heads] * 2))
    inputs = (q, k, v, make(shape.q_heads))
    flash_result, flash_profile = run_profiled(device, "flash", inputs)
    _default_result, default_profile = run_profiled(device, None, inputs)
    q32, k32, v32 = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    with common.backend_context("math", device):  # the float32 reference on the same device
        ref = common.sdpa(q32, k32, v32, True)
    ref.backward(inputs[3].float())
    tol = TOLERANCE[dtype_name]
    report = {
        "shape": shape.dims(),
        "dtype": dtype_name,
        "causal": True,
        "forced_flash": flash_profile,
        "default_dispatch": default_profile,
        "tolerance": {"rule": TOLERANCE_RULE, **tol},
        "errors": None,
        "correct": None,
    }
    if flash_result is not None:
        out, grads = flash_result
        fwd_err = _scaled_error(out, ref.detach())
        bwd_err = max(_scaled_error(g, r.grad) for g, r in zip(grads, (q32, k32, v32), strict=True))
        report["errors"] = {"fwd": fwd_err, "bwd": bwd_err}
        report["correct"] = fwd_err <= tol["fwd"] and bwd_err <= tol["bwd"]
    return report


def _scaled_error(x: Any, ref: Any) -> float:
    return round(common.max_error(x.float(), ref) / max(1.0, ref.abs().max().item()), 6)


def verdict(report: dict[str, Any]) -> tuple[bool, list[str]]:
    """(passed, failures): flash usable, used (forced and by default) and correct."""
    where = report["identity"]["platform"]  # cpu, rocm or cuda
    rocm = report.get("rocm") or {}
    flash = report["backends"]["flash"]
    truth = report["truth"]
    forced = truth.get("forced_flash") or {}
    default = truth.get("default_dispatch") or {}
    failures = [rocm.get("aotriton", {}).get("mismatch"), rocm.get("flag_problem")]
    if not flash.get("can_use"):
        reasons = "; ".join(flash.get("reasons") or []) or "torch gave no reason"
        failures.append(f"flash attention not usable on {where}: {reasons}")
    if forced.get("error"):  # torch's reasons for refusing flash are quoted above already
        extra = [r for r in forced.get("reasons") or [] if r not in (flash.get("reasons") or [])]
        why = "; ".join([*extra, forced["error"]])
        failures.append(f"SDPA forced to flash failed on {where}: {why}")
    elif where != "cpu" and forced.get("ran") not in ("flash", "ck"):
        kernels = forced.get("kernel_families")
        failures.append(f"SDPA forced to flash ran no flash kernel on {where} (kernels: {kernels})")
    if where != "cpu" and default.get("ran") == "math":
        failures.append(f"default SDPA dispatch silently fell back to the math path on {where}")
    if truth.get("correct") is False:
        beyond = f"{truth['errors']} > {truth['tolerance']}"
        failures.append(f"flash output differs from float32 math beyond tolerance: {beyond}")
    return not any(failures), [f for f in failures if f]


def render(report: dict[str, Any]) -> str:
    d = report["identity"]
    rocm = report.get("rocm")
    truth = report["truth"]
    yn = {True: "yes", False: "no", None: "?"}.get
    rows = [
        (n, *(yn(b[f]) for f in ("compiled_in", "enabled", "can_use")), "; ".join(b["reasons"]))
        for n, b in report["backends"].items()
    ]
    lines = [
        f"device: {d['gpu']} ({d['arch'] or 'no GPU arch'}) on {d['platform']}, "
        f"torch {d['torch']} (cuda {d['cuda']}, hip {d['rocm']})",
        "",
        *common.text_table(("backend", "compiled", "enabled", "can_use", "reasons"), rows),
    ]
    if rocm:
        aot = rocm["aotriton"]
        images = ", ".join(f"{k} {v.get('version')}" for k, v in aot["images"].items()) or "none"
        lines += [
            "",
            f"preferred ROCm FA library: {rocm['preferred_rocm_fa_library']}",
            f"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL={rocm['experimental_flag']}; arch needs it: "
            f"{yn(rocm['arch_needs_experimental_flag'])}",
            f"AOTriton {aot['runtime_version']} ({aot['runtime_source']}); images: {images}",
            *([f"MISMATCH: {aot['mismatch']}"] if aot["mismatch"] else []),
        ]
    lines.append("")
    shown = {r for b in report["backends"].values() for r in b["reasons"]}
    for key, label in (("forced_flash", "forced flash"), ("default_dispatch", "default")):
        p = truth[key]
        kernels = "; ".join(
            f"{f}: {', '.join(dict.fromkeys(short_kernel_name(x) for x in n[:3]))}"
            for f, n in p.get("kernels", {}).items()
        )
        ran = f"ran {p['ran']} (ops {p.get('ops')}; kernels {kernels or '-'})"
        lines.append(f"{label}: " + (f"failed: {p['error']}" if p.get("error") else ran))
        if new := [r for r in p["reasons"] if r not in shown]:
            lines.append(f"  torch said: {'; '.join(new)}")
    if err := truth["errors"]:
        tol = f"(tolerance fwd {truth['tolerance']['fwd']}, bwd {truth['tolerance']['bwd']})"
        lines.append(f"vs float32 math: fwd {err['fwd']:.2e}, bwd {err['bwd']:.2e} {tol}")
    return "\n".join([*lines, "", report["summary"]])


def short_kernel_name(name: str) -> str:
    """'void ns::f<T<64>>(P)' -> 'f': templates, parameters, namespaces dropped."""
    short = name
    while (shorter := re.sub(r"<[^<>]*>|\([^()]*\)", "", short)) != short:
        short = shorter
    return (short.split() or [name])[-1].split("::")[-1] or name


def build_parser() -> common.OneLineArgumentParser:
    p = common.new_parser(PROG, __doc__, json_option=True)
    p.add_argument("--dtype", choices=common.DTYPE_NAMES, default="fp16")
    p.add_argument("--shape", default="1,4,256,64", help="B,H,S,D or B,Hq,Hkv,S,D (1,4,256,64)")
    p.add_argument("--torch-lib-dir", type=Path, help="torch/lib to read AOTriton files from")
    return p


@common.cli(PROG)
def main(argv: list[str] | None) -> int:
    opts = build_parser().parse_args(argv)
    try:  # a broken or partial torch install gives no verdict: one line saying why
        import torch

        torch.device, torch.version, torch.nn.functional  # noqa: B018 - the API this reads
    except (ImportError, AttributeError) as e:
        where = getattr(sys.modules.get("torch"), "__file__", None) or "the env's torch"
        version = getattr(sys.modules.get("torch"), "__version__", "?")
        raise common.UsageError(f"torch {version} ({where}) is not a usable build: {e}") from None
    shape = common.parse_shape(opts.shape)
    device = common.resolve_device(opts.device)
    lib_dir = opts.torch_lib_dir or Path(torch.__file__).resolve().parent / "lib"
    if opts.torch_lib_dir is not None and not lib_dir.is_dir():
        raise common.UsageError(f"--torch-lib-dir {lib_dir} is not a folder")
    if opts.dry_run:
        what = (
            f"each backend on {shape.dims()} {opts.dtype}: availability, a forced flash run "
            "under the profiler (kernel names), and its error against fp32 math"
        )
        return common.dry_run(PROG, device, [what, f"AOTriton files read from {lib_dir}"])
    report, arch, device_name = common.provenance(SCHEMA, device)
    report["backends"] = backend_flags(device, common.torch_dtype(opts.dtype), shape)
    if torch.version.hip or opts.torch_lib_dir is not None:
        report["rocm"] = rocm_report(arch, common.load_arches(), lib_dir)
    report["truth"] = truth_run(device, opts.dtype, shape)
    passed, failures = verdict(report)
    report |= {"passed": passed, "failures": failures}
    ok = f"PASS: flash attention is usable, used and correct on {device_name} ({arch})"
    report["summary"] = ok if passed else f"FAIL: {failures[0]}"
    common.emit(opts.json, report, render(report))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
