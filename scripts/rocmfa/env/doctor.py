"""`nox -s doctor`: one screen about this host and the shared env, and the next command. Every
section reports instead of raising; after the screen, non-zero when it shows damage (problems)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from rocmfa.env import archs, compat_matrix, condaenv, lockfile, rocm_sdk
from rocmfa.env.condaenv import find_manager
from rocmfa.plumbing import paths, pin_files, stamps
from rocmfa.plumbing.datafiles import load_toml
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import DoctorOptions, origin

# The README's main job after `pip install -e .` (tests/test_main_job.py holds it to them).
MAIN_JOB = (
    "nox -s setup_env",
    "nox -s build_aotriton build_pytorch",
    "nox -s install_wheels",
    "nox -s bench",
)
# The prebuilt fast path (arches.toml therock_torch_flash): TheRock's torch from the SDK's index.
FAST_PATH = ("nox -s setup_env -- --with-torch", "nox -s backend_check")
# One run of the env's Python: its torch (or why not) and its ROCm SDK distributions.
ENV_PROBE = """import json
from importlib import metadata
names = {(d.metadata["Name"] or "").lower(): d.version for d in metadata.distributions()}
try:
    import torch
    found = {"version": torch.__version__, "hip": torch.version.hip, "cuda": torch.version.cuda}
except Exception:
    found = {"error": "not importable"}
rocm = {n: v for n, v in names.items() if n.startswith("rocm")}
print(json.dumps({"torch": found, "rocm": rocm}))
"""


def torch_path(arch: archs.Arch, how: str, aotriton_version: str | None) -> dict[str, Any]:
    """Which way this arch gets a flash-attention torch, why, and the commands as written."""
    arch_flag = f" --arch {arch.name}" if how == "--arch" else ""
    given = f" --{arch_flag}" if arch_flag else ""
    build = MAIN_JOB[1] + given
    if arch.therock_torch_flash:
        return {
            "kind": "prebuilt",
            "commands": [FAST_PATH[0] + arch_flag, FAST_PATH[1]],
            "why": f"TheRock's torch for the pinned ROCm SDK is built with AOTriton flash "
            f"attention for {arch.name}, a flash torch in minutes",
            "build": f"{build} is for a change of ours (patches, tuning, another AOTriton)",
        }
    if aotriton_version and arch.aotriton_patched_pack(aotriton_version):
        return {
            "kind": "build",
            "commands": [build, MAIN_JOB[2] + given],
            "why": f"no prebuilt torch has flash attention for {arch.name} (TheRock builds "
            f"it only for gfx90a, gfx942, gfx950, gfx11*, gfx12*); AOTriton {aotriton_version}"
            f" with our {arch.name} patch set is built from source, then torch against it",
        }
    why = f"AOTriton has no kernels for {arch.name}: torch has no flash attention here"
    return {"kind": "none", "commands": [], "why": why}


def _arch_section(requested: str | None) -> dict[str, Any]:
    try:
        detection = archs.detect_gpus()
    except UserError as e:
        return {"detected": [], "detected_from": "rocm-bootstrap", "error": str(e)}
    section: dict[str, Any] = {
        "detected": list(detection.gpus),
        "detected_from": detection.source,
        "hsa_override": detection.override,
    }
    try:
        choice = archs.resolve_arch(requested, detection=detection)
    except UserError as e:
        section["error"] = str(e)
        if requested:  # a bad value (--arch or $ROCMFA_ARCH), not a missing GPU
            given = origin(requested, "--arch")
            section["bad_value"] = f"{given}{' ' if given == '--arch' else '='}{requested}"
        return section
    arch = choice.arch
    pinned = compat_matrix.pinned_aotriton_version()  # gfx908: kernels from our patch set
    section.update(
        arch=arch.name,
        how=choice.how,
        name=arch.display_name,
        aotriton=bool(arch.aotriton_supported() or (pinned and arch.aotriton_patched_pack(pinned))),
        ck_mha=arch.ck_mha,
        matrix=compat_matrix.host_line(choice=choice),
        path=torch_path(arch, choice.how, pinned),
    )
    return section


def _env_section(prefix: str | None, env_name: str | None) -> dict[str, Any]:
    manager = find_manager()
    found = manager and {"kind": manager.kind, "exe": str(manager.exe), "via": manager.found_via}
    section: dict[str, Any] = {"manager": found or None}
    try:
        location = condaenv.resolve_prefix(prefix, env_name, manager)
    except UserError as e:
        return section | {"error": str(e)}
    prefix = location.prefix
    stamp = stamps.read(prefix / condaenv.ENV_STAMP)
    section.update(prefix=str(prefix), how=location.how, exists=prefix.exists(),
                   conda_env=condaenv.is_conda_env(prefix), set_up=stamp is not None)  # fmt: skip
    if stamp:
        section["rocm_sdk"] = stamp.get("rocm", {})
        section["variables"] = stamp.get("variables", {}).get("set") or []
    python = prefix / "bin" / "python"
    if python.exists():
        try:
            env = condaenv.activated_environ(prefix)
            probe = subprocess.run([str(python), "-c", ENV_PROBE], capture_output=True, text=True,
                                   env=env, timeout=120, check=True)  # fmt: skip
            found = json.loads(probe.stdout)
            section.update(torch=found["torch"], rocm_dists=found["rocm"])
            section["mixed_sdk"] = rocm_sdk.mixed_sdk(found["rocm"])
        except (UserError, subprocess.SubprocessError, ValueError) as e:
            section["torch"] = {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    return section


def _pins_section() -> list[dict[str, Any]]:
    """Pin files that do not read or check as the builds check them (the pin line: the rest)."""
    found = []
    for path in sorted(pin_files.pins_dir().glob("*.toml")):
        try:
            load_toml(path, "pin")
            if path.stem in pin_files.PROJECTS:
                pin_files.check_file(path, path.stem)
        except UserError as e:
            found.append({"file": path.name, "error": str(e)})
    return found


def _builds_section(work: Path) -> list[dict[str, Any]]:
    return [{"step": path.stem, "stamp": str(path), "facts": {k: v for k, v in (
        stamps.read(path) or {}).items() if k not in ("inputs", "inputs_digest")}}
            for path in sorted((work / "stamps").glob("*.json"))]  # fmt: skip


def _next_step(report: dict[str, Any]) -> str:
    env, arch = report["env"], report["arch"]
    for line in report.get("interrupted", []):
        return line.rsplit("rerun: ", 1)[-1]
    if arch.get("bad_value"):
        return f"fix {arch['bad_value']}: {arch['error']}"
    if "error" in arch:
        return "pass --arch gfxNNNN (no AMD GPU detected), e.g. nox -s doctor -- --arch gfx1151"
    if not report["lock"].get("present"):
        return f"{MAIN_JOB[0]} (it generates conda-lock.yml first)"
    if not report["lock"].get("fresh"):
        return "nox -s lock"
    if not env.get("set_up"):
        return MAIN_JOB[0]
    if env.get("mixed_sdk"):
        return "nox -s setup_env -- --force (the ROCm SDK is mixed)"
    torch = env.get("torch") or {}
    # TheRock's call pip-installs its torch; install_wheels the run's whole set, then checks
    facts = {b["step"]: b["facts"] for b in report["builds"]}
    built = {w.get("file") for w in facts.get("build_pytorch-torch", {}).get("wheels", [])}
    if built and not built <= set(facts.get("install_wheels", {}).get("wheels", [])):
        return MAIN_JOB[2]
    if not torch.get("version"):
        unresolved = any("not resolved yet" in pin.get("error", "") for pin in report["pins"])
        return MAIN_JOB[1] + (" (its first run resolves and records the torch pin's commit)"
                              if unresolved else "")  # fmt: skip
    return f"{MAIN_JOB[3]} (nox -s backend_check first, if install_wheels did not run it)"


def half_installed(prefix: Path | None) -> list[str]:
    """One line when torch's RECORD (pip's list of its files) shows a pip run killed midway."""
    site = next(prefix.glob("lib/python3*/site-packages"), None) if prefix else None
    pending = condaenv.pip_pending(site.parents[2]) if site else None
    torch_there = site and ((site / "torch").is_dir() or any(site.glob("torch-*.dist-info")))
    if site is None or not (torch_there or pending):
        return []
    why = condaenv.torch_incomplete(site)
    if why is None:
        return []
    # build_aotriton finishes its own swap first thing; a killed install_wheels reinstalls
    rerun = "nox -s build_aotriton" if pending else "nox -s install_wheels"
    return [f"the env's torch is incomplete ({why}): pip was killed midway; rerun: {rerun}"]


def _pin_line() -> str:
    try:
        return pin_files.describe_line(pin_files.pins_dir())
    except UserError as e:
        return str(e)


def _lock_section() -> dict[str, Any]:
    try:
        return dict(zip(("fresh", "reason"), lockfile.check(), strict=True), present=True)
    except UserError as e:  # missing (not present) or not a conda-lock file (stale)
        return {"present": lockfile.LOCK_FILE.is_file(), "fresh": False, "reason": str(e)}


def gather(opts: DoctorOptions) -> dict[str, Any]:
    env = _env_section(opts.prefix, opts.env_name)
    prefix = Path(env["prefix"]) if env.get("prefix") else None
    report: dict[str, Any] = {
        "interrupted": half_installed(prefix),
        "arch": _arch_section(opts.arch),
        "env": env,
        "lock": _lock_section(),
        "pins": _pins_section(),
        "line": _pin_line(),
        "builds": _builds_section(paths.workdir(opts.workdir)),
    }
    report["next"] = _next_step(report)
    return report


def render(report: dict[str, Any]) -> str:
    """One row per fact, `label  text`; HALF-DONE first, the next step last."""
    rows = [("HALF-DONE", line) for line in report.get("interrupted", [])]
    rows += _arch_rows(report["arch"]) + _env_rows(report["env"], report["lock"])
    rows += [("pin", pin["error"]) for pin in report["pins"]]
    rows += [("pin line", report["line"])] if report.get("line") else []
    builds = [f"{b['step']} ({b['stamp']})" for b in report["builds"]] or ["nothing yet"]
    rows += [*(("built", build) for build in builds), ("", ""), ("next", report["next"])]
    return "\n".join(["rocm-fa-workflow doctor", "", *(f"{a:<10} {b}".rstrip() for a, b in rows)])


def _arch_rows(arch: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [("GPU", f"detected: {', '.join(arch['detected']) or 'none'} ({arch['detected_from']})")]
    rows += [("", arch["hsa_override"])] if arch.get("hsa_override") else []
    if "error" in arch:
        return [*rows, ("arch", arch["error"])]
    path = arch.get("path") or {"kind": "?", "why": "not reported", "commands": []}
    run = f"; run: {', then '.join(path['commands'])}" if path["commands"] else ""
    return [
        *rows,
        ("arch", f"{arch['arch']} = {arch['name']} ({arch['how']}); AOTriton "
         f"{'yes' if arch['aotriton'] else 'NO'}; CK MHA {'yes' if arch['ck_mha'] else 'no'}"),
        ("matrix", f"{arch['matrix']} (nox -s matrix)"),
        ("path", f"{path['kind']}: {path['why']}{run}"),
        *([("", path["build"])] if path.get("build") else []),
    ]  # fmt: skip


def _env_rows(env: dict[str, Any], lock: dict[str, Any]) -> list[tuple[str, str]]:
    manager, rocm, torch = env.get("manager"), env.get("rocm_sdk"), env.get("torch") or {}
    state = (
        "set up" if env.get("set_up") else "exists, not set up" if env.get("exists") else "absent"
    )
    return [
        ("manager", f"{manager['kind']} {manager['exe']} (via {manager['via']})" if manager
         else "none found ($MAMBA_EXE, $CONDA_EXE, micromamba/mamba/conda)"),
        ("env", f"{env.get('prefix') or '?'} ({env.get('how', env.get('error'))}): {state}"),
        ("lock", f"{'fresh' if lock.get('fresh') else 'STALE'}: {lock.get('reason')}"
         if lock.get("present") else "conda-lock.yml missing (setup_env generates it)"),
        ("ROCm SDK", f"{rocm.get('version')} at {rocm.get('root')}" if rocm else "-"),
        *([("ROCm SDK", env["mixed_sdk"])] if env.get("mixed_sdk") else []),
        ("torch", f"{torch['version']} (HIP {torch.get('hip')}, CUDA {torch.get('cuda')})"
         if torch.get("version") else torch.get("error", "not installed")),
        *(("variable", f"{v['name']}={v['value']}  - {v['why']}")
          for v in env.get("variables", [])),
    ]  # fmt: skip


def problems(report: dict[str, Any]) -> list[str]:
    """What the report shows broken (no GPU, no manager, no env yet are not)."""
    found = ["half-installed torch (see HALF-DONE)" for _line in report.get("interrupted", [])]
    if report["arch"].get("bad_value"):
        found.append(f"unknown arch ({report['arch']['bad_value']})")
    for pin in report["pins"]:  # a commit not resolved yet is a step to run, not damage
        if "error" in pin and "run: nox -s update_pins" not in pin["error"]:
            found.append(f"malformed pin file {pin['file']}")
    if report["lock"].get("present") and not report["lock"].get("fresh"):
        found.append("stale conda-lock.yml (nox -s lock)")
    return found


def doctor(opts: DoctorOptions) -> None:
    report = gather(opts)
    print(json.dumps(report, indent=2) if opts.json else render(report), flush=True)
    if broken := problems(report):
        raise UserError(f"doctor: {'; '.join(broken)} - see the report above")
