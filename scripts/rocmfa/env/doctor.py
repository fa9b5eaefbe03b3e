"""`nox -s doctor`: one screen about this host and the shared env, and the next command. Every
section reports instead of raising; after the screen, non-zero when it shows damage (problems)."""

import json
import subprocess
from pathlib import Path
from typing import Any

from rocmfa.env import archs, lockfile, rocm_sdk, session_env
from rocmfa.plumbing import options, pin_files, stamps
from rocmfa.plumbing.errors import UserError, load_toml

# The README's main job after `pip install -e .` (tests/test_main_job.py holds it to them).
MAIN_JOB = (
    "nox -s setup_env",
    "nox -s build_aotriton build_pytorch",
    "nox -s install_wheels",
    "nox -s bench",
)
# The prebuilt fast path (arches.toml therock_torch_flash): TheRock's torch from the SDK's index.
FAST_PATH = ("nox -s setup_env -- --with-torch", "nox -s backend_check")
Rows = list[tuple[str, str]]
# One run of the env's Python: its torch (or why not) and its distributions' versions.
ENV_PROBE = """import json
from importlib import metadata
dists = {d.metadata["Name"]: d.version for d in metadata.distributions()}
try:
    import torch
    found = {"version": torch.__version__, "hip": torch.version.hip, "cuda": torch.version.cuda}
except Exception:
    found = {"error": "not importable"}
print(json.dumps({"torch": found, "dists": dists}))
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


def _arch_section(requested: str | None, rows: Rows) -> dict[str, Any]:
    """The GPU and arch rows; the facts the next step reads (error, bad_value; the arch's path)."""
    try:
        detection = archs.detect_gpus()
    except UserError as e:
        rows += [("GPU", "detected: none (rocm-bootstrap)"), ("arch", str(e))]
        return {"error": str(e)}
    rows.append(("GPU", f"detected: {', '.join(detection.gpus) or 'none'} ({detection.source})"))
    rows += [("", detection.override)] if detection.override else []
    try:
        choice = archs.resolve_arch(requested, detection=detection)
    except UserError as e:
        rows.append(("arch", str(e)))
        if not requested:  # no GPU found; a bad value (--arch or $ROCMFA_ARCH) is broken
            return {"error": str(e)}
        given = options.origin(requested, "--arch")
        sep = " " if given == "--arch" else "="
        return {"error": str(e), "bad_value": f"{given}{sep}{requested}"}
    arch = choice.arch
    pinned = archs.pinned_aotriton_version()
    # gfx908: no upstream kernels, ours from the patch set
    aotriton = arch.aotriton_supported() or bool(pinned and arch.aotriton_patched_pack(pinned))
    path = torch_path(arch, choice.how, pinned)
    run = f"; run: {', then '.join(path['commands'])}" if path["commands"] else ""
    line = f"{arch.name} = {arch.display_name} ({choice.how}); AOTriton "
    line += f"{'yes' if aotriton else 'NO'}; CK MHA {'yes' if arch.ck_mha else 'no'}"
    rows += [
        ("arch", line),
        ("matrix", f"{archs.host_line(choice=choice)} (nox -s matrix)"),
        ("path", f"{path['kind']}: {path['why']}{run}"),
        *([("", path["build"])] if path.get("build") else []),
    ]
    return {"arch": arch.name, "path": path}


def _env_section(prefix: str | None, env_name: str | None, rows: Rows) -> dict[str, Any]:
    """The manager, env, ROCm SDK, torch and variable rows; the facts the next step reads."""
    manager = session_env.find_manager()
    found = f"{manager.kind} {manager.exe} (via {manager.found_via})" if manager else None
    rows.append(("manager", found or "none found ($MAMBA_EXE, $CONDA_EXE, micromamba/mamba/conda)"))
    try:
        location = session_env.resolve_prefix(prefix, env_name, manager)
    except UserError as e:
        rows.append(("env", str(e)))
        return {}
    env = location.prefix
    stamp = stamps.read(env / session_env.ENV_STAMP) or {}
    state = "set up" if stamp else "exists, not set up" if env.exists() else "absent"
    rocm = stamp.get("rocm")
    rows.append(("env", f"{env} ({location.how}): {state}"))
    rows.append(("ROCm SDK", f"{rocm.get('version')} at {rocm.get('root')}" if rocm else "-"))
    facts: dict[str, Any] = {"prefix": str(env), "set_up": bool(stamp), "torch": {}}
    if (python := env / "bin" / "python").exists():
        try:
            environ = session_env.activated_environ(env)
            argv = [python, "-c", ENV_PROBE]
            out = subprocess.check_output(argv, env=environ, stderr=subprocess.DEVNULL, timeout=120)
            found = json.loads(out)
            facts.update(torch=found["torch"], mixed_sdk=rocm_sdk.mixed_sdk(found["dists"]))
        except (UserError, subprocess.SubprocessError, ValueError) as e:
            facts["torch"] = {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    torch = facts["torch"]
    version = torch.get("version")
    rows += [("ROCm SDK", facts["mixed_sdk"])] if facts.get("mixed_sdk") else []
    shown = f"{version} (HIP {torch.get('hip')}, CUDA {torch.get('cuda')})" if version else None
    rows.append(("torch", shown or torch.get("error", "not installed")))
    variables = stamp.get("variables", {}).get("set") or []
    rows += [("variable", f"{v['name']}={v['value']}  - {v['why']}") for v in variables]
    return facts


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


def _next_step(report: dict[str, Any]) -> str:
    for line in report.get("interrupted", []):
        return line.rsplit("rerun: ", 1)[-1]
    if report["arch"].get("bad_value"):
        return f"fix {report['arch']['bad_value']}: {report['arch']['error']}"
    if "error" in report["arch"]:
        return "pass --arch gfxNNNN (no AMD GPU detected), e.g. nox -s doctor -- --arch gfx1151"
    if not report["lock"].get("present"):
        return f"{MAIN_JOB[0]} (it generates conda-lock.yml first)"
    if not report["lock"].get("fresh"):
        return "nox -s lock"
    if not report["env"].get("set_up"):
        return MAIN_JOB[0]
    if report["env"].get("mixed_sdk"):
        return "nox -s setup_env -- --force (the ROCm SDK is mixed)"
    # TheRock's call pip-installs its torch; install_wheels the run's whole set, then checks
    facts = {b["step"]: b["facts"] for b in report["builds"]}
    built = {w.get("file") for w in facts.get("build_pytorch-torch", {}).get("wheels", [])}
    if built and not built <= set(facts.get("install_wheels", {}).get("wheels", [])):
        return MAIN_JOB[2]
    if not (report["env"].get("torch") or {}).get("version"):
        if any("not resolved yet" in pin.get("error", "") for pin in report["pins"]):
            return f"{MAIN_JOB[1]} (its first run resolves and records the torch pin's commit)"
        return MAIN_JOB[1]
    return f"{MAIN_JOB[3]} (nox -s backend_check first, if install_wheels did not run it)"


def half_installed(prefix: Path | None) -> list[str]:
    """One line when torch's RECORD (pip's list of its files) shows a pip run killed midway."""
    site = next(prefix.glob("lib/python3*/site-packages"), None) if prefix else None
    pending = stamps.read(session_env.pip_pending_path(site.parents[2])) if site else None
    torch_there = site and ((site / "torch").is_dir() or any(site.glob("torch-*.dist-info")))
    if not (site and (torch_there or pending)) or not (why := session_env.torch_incomplete(site)):
        return []
    # build_aotriton finishes its own swap first thing; a killed install_wheels reinstalls
    rerun = "nox -s build_aotriton" if pending else "nox -s install_wheels"
    return [f"the env's torch is incomplete ({why}): pip was killed midway; rerun: {rerun}"]


def gather(opts: options.DoctorOptions) -> dict[str, Any]:
    """The screen's rows (`--json` prints them too), the facts the next step reads, and next."""
    arch_rows: Rows = []
    env_rows: Rows = []
    env = _env_section(opts.prefix, opts.env_name, env_rows)
    try:
        fresh, reason = lockfile.check()
        lock = {"present": True, "fresh": fresh, "reason": reason}
    except UserError as e:  # missing (not present) or not a conda-lock file (stale)
        lock = {"present": lockfile.LOCK_FILE.is_file(), "fresh": False, "reason": str(e)}
    try:
        pin_line = pin_files.describe_line(pin_files.pins_dir())
    except UserError as e:
        pin_line = str(e)
    builds = []  # what each build's stamp says (its inputs aside)
    for path in sorted((options.workdir(opts.workdir) / "stamps").glob("*.json")):
        facts = {k: v for k, v in (stamps.read(path) or {}).items() if not k.startswith("inputs")}
        builds.append({"step": path.stem, "stamp": str(path), "facts": facts})
    report: dict[str, Any] = {
        "interrupted": half_installed(Path(env["prefix"]) if env.get("prefix") else None),
        "arch": _arch_section(opts.arch, arch_rows),
        "env": env,
        "lock": lock,
        "pins": _pins_section(),
        "builds": builds,
    }
    built = [f"{b['step']} ({b['stamp']})" for b in builds] or ["nothing yet"]
    shown = f"{'fresh' if lock['fresh'] else 'STALE'}: {lock['reason']}"
    report["rows"] = [
        *(("HALF-DONE", line) for line in report["interrupted"]),
        *arch_rows,
        *env_rows,
        ("lock", shown if lock["present"] else "conda-lock.yml missing (setup_env generates it)"),
        *(("pin", pin["error"]) for pin in report["pins"]),
        ("pin line", pin_line),
        *(("built", line) for line in built),
    ]
    report["next"] = _next_step(report)
    return report


def render(report: dict[str, Any]) -> str:
    rows = [*report["rows"], ("", ""), ("next", report["next"])]
    return "\n".join(["rocm-fa-workflow doctor", "", *(f"{a:<10} {b}".rstrip() for a, b in rows)])


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


def doctor(opts: options.DoctorOptions) -> None:
    report = gather(opts)
    print(json.dumps(report, indent=2) if opts.json else render(report), flush=True)
    if broken := problems(report):
        raise UserError(f"doctor: {'; '.join(broken)} - see the report above")
