"""`nox -s install_wheels`: install the wheels of the last build_pytorch run into the env.

The wheels come from build_pytorch's run manifest (<work>/build_pytorch-manifest.json), never
from a directory listing, so old wheels next to them in the output dir are never picked up. Each
is checked before anything is installed: the file is the one the build recorded (sha256), its
Python tag fits the env's Python, and its ROCm local version (+rocmX.Y... / +devrocm...) is the
env's `rocm-sdk version` - torch's _rocm_init checks that at import time, and torch/vision/audio
built against different ROCm versions do not load together (ROCm/vllm#943: "operator
torchvision::nms does not exist"). Then `pip install --no-deps --force-reinstall` with the env's
Python, and scripts/probes/backend_check.py when it exists.

With --index URL the wheels are a set another machine published (scripts/sharing/publish.py):
scripts/sharing/index_install.py picks it and pip installs it with --require-hashes.
"""

from __future__ import annotations

import json
import platform
import re
from pathlib import Path
from typing import Any

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from scripts.builds.build_pytorch import install_argv, manifest_path
from scripts.env import condaenv, session_env
from scripts.plumbing import paths, stamps
from scripts.plumbing.commands import Runner
from scripts.plumbing.datafiles import REPO_ROOT
from scripts.plumbing.errors import UserError
from scripts.plumbing.options import InstallWheelsOptions

ROCM_IN_LOCAL = re.compile(r"(?:^|\.)(dev)?rocm(sdk)?(\d.*)$")
NEEDS_ROCM = {"torch", "torchaudio", "torchvision", "triton", "pytorch-triton-rocm"}


def python_fits(tags: frozenset[Tag], python_tag: str, machine: str) -> bool:
    """python_tag like 'cp312'. True when one of the wheel's tags can run on it."""
    major = python_tag[2:3]
    interpreters = {python_tag, f"py{major}", f"py{python_tag[2:]}"}
    for tag in tags:
        if tag.interpreter not in interpreters:
            continue
        if tag.abi not in (python_tag, "none", "abi3"):
            continue
        if tag.platform == "any" or tag.platform.endswith(machine):
            return True
    return False


def rocm_of(version: Version) -> tuple[str | None, str]:
    """(ROCm version the wheel was built against, how it is written), from the local part."""
    local = version.local or ""
    match = ROCM_IN_LOCAL.search(local)
    if not match:
        return None, local
    if match.group(2):  # +rocmsdk<date>: the 2025 suffix, a build date, not a ROCm version
        return None, f"rocmsdk{match.group(3)}"
    return match.group(3), f"{match.group(1) or ''}rocm{match.group(3)}"


def same_rocm(from_wheel: str, env_version: str) -> bool:
    try:
        return Version(from_wheel) == Version(env_version)
    except InvalidVersion:
        return from_wheel == env_version


def check_wheel(
    record: dict[str, Any], python_tag: str, rocm_version: str, machine: str
) -> tuple[Path, str]:
    """(path, one-line description) or UserError naming the wheel and the mismatch."""
    path = Path(record["file"])
    try:
        parse_wheel_filename(path.name)
    except InvalidWheelFilename as e:
        raise UserError(f"{path.name}: not a valid wheel file name ({e})") from None
    if not path.is_file():
        raise UserError(f"{path} is gone (recorded by build_pytorch); rerun: nox -s build_pytorch")
    if stamps.file_sha256(path) != record.get("sha256"):
        raise UserError(
            f"{path.name} changed since build_pytorch recorded it (sha256 differs); refusing "
            "to install it; rerun: nox -s build_pytorch"
        )
    return path, check_wheel_name(path.name, python_tag, rocm_version, machine)


def check_wheel_name(filename: str, python_tag: str, rocm_version: str, machine: str) -> str:
    """A wheel's tags and ROCm local version against the env: its description or UserError."""
    path = Path(filename)
    try:
        name, version, _build, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as e:
        raise UserError(f"{path.name}: not a valid wheel file name ({e})") from None
    if not python_fits(tags, python_tag, machine):
        wheel_tags = ", ".join(sorted(str(t) for t in tags))
        raise UserError(
            f"{path.name} is for {wheel_tags}, but the env's Python is {python_tag}; rebuild "
            "with this env (nox -s build_pytorch -- --force)"
        )
    built_for, written = rocm_of(version)
    if built_for is None:
        if str(name) in NEEDS_ROCM:
            what = f"'+{written}'" if written else "no local version"
            raise UserError(
                f"{path.name} names no ROCm version ({what}); the env has ROCm {rocm_version} "
                "and torch checks it at import; rebuild: nox -s build_pytorch -- --force"
            )
        return f"{name} {version}"
    if not same_rocm(built_for, rocm_version):
        raise UserError(
            f"{path.name} was built against ROCm {built_for}, but the env has ROCm "
            f"{rocm_version} (rocm-sdk version); rebuild: nox -s build_pytorch -- --force"
        )
    return f"{name} {version}"


def load_manifest(work: Path) -> dict[str, Any]:
    path = manifest_path(work)
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"no build_pytorch run manifest at {path}; run: nox -s build_pytorch"
        ) from None
    except (OSError, ValueError) as e:
        raise UserError(f"unreadable run manifest {path}: {e}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("wheels"), list):
        raise UserError(f"malformed run manifest {path}: no 'wheels' list")
    if not manifest["wheels"]:
        raise UserError(f"run manifest {path} lists no wheels; run: nox -s build_pytorch")
    return manifest


def install_wheels(opts: InstallWheelsOptions) -> None:
    session = session_env.open_env(opts, dry_run=opts.dry_run)
    work, prefix, python = session.work, session.prefix, session.python
    runner = session.runner
    manifest = load_manifest(work) if not opts.index else {}
    rocm_sdk = session.tool("rocm-sdk")
    rocm_version = session.ask([rocm_sdk, "version"], "$(rocm-sdk version)")
    probe = "import platform, sys; print('cp%d%d' % sys.version_info[:2], platform.machine())"
    python_tag, machine = session.ask([python, "-c", probe], "$(python tag) $(machine)").split()
    checkable = session.ready and rocm_sdk.exists()  # else a dry run without env or ROCm SDK
    chosen = None
    if opts.index:  # a wheel set published on a team index (scripts/sharing/index_install.py)
        from scripts.sharing import index_install

        chosen = index_install.choose(
            opts.index,
            choice=session.choice,
            wheel_set=opts.wheel_set,
            python_tag=python_tag if checkable else None,
            rocm_version=rocm_version if checkable else None,
            say=runner.say,
        )
        manifest = chosen.manifest
        for record in manifest["wheels"] if checkable else ():
            what = check_wheel_name(record["file"], python_tag, rocm_version, machine)
            runner.say(f"ok: {what} ({python_tag}, ROCm {rocm_version}), set {chosen.set_id}")
        argv = index_install.pip_argv(python, chosen, work, runner)
    else:
        if manifest.get("env_prefix") and Path(manifest["env_prefix"]) != prefix:
            runner.say(f"note: these wheels were built with env {manifest['env_prefix']}")
        files: list[str] = []
        for record in manifest["wheels"]:
            if not checkable:
                runner.say(
                    f"[dry-run] would check {record['file']} against the env's Python and ROCm"
                )
                files.append(str(record["file"]))
                continue
            path, what = check_wheel(
                record, python_tag, rocm_version, machine or platform.machine()
            )
            runner.say(f"ok: {what} ({python_tag}, ROCm {rocm_version})")
            files.append(str(path))
        argv = install_argv(python, files)
    stamp = paths.stamp_path(work, "install_wheels")
    inputs = {
        "wheels": sorted(r["sha256"] for r in manifest["wheels"]),
        "env": condaenv.env_identity(prefix),
        "prefix": str(prefix),
    }
    if (
        stamps.is_current(stamp, inputs)
        and not opts.force
        and installed_match(session, python, manifest)
    ):
        runner.say("these wheels are already installed in the env (--force to reinstall)")
    else:
        if opts.dry_run:
            runner.run(argv, check=chosen is None)
        else:
            # first: pip refuses a bad wheel before changing anything, but a kill midway leaves
            # a torch that only a rerun finishes (doctor names it from torch's RECORD)
            stamps.remove(stamp)
            result = runner.run(argv, check=chosen is None)
            if result.returncode != 0 and chosen is not None:
                raise UserError(chosen.failure(result.returncode))
            stamps.write(stamp, inputs, wheels=[r["file"] for r in manifest["wheels"]])
    check = REPO_ROOT / "scripts" / "probes" / "backend_check.py"
    if opts.no_backend_check:
        runner.say("backend check skipped (--no-backend-check)")
    elif not check.is_file():
        runner.say(f"no {check.name} in this checkout; skipping the backend check")
    else:
        result = runner.run([python, check], check=False)
        if result.returncode != 0:
            raise UserError(
                f"wheels installed, but the backend check failed (exit {result.returncode}): "
                "see its report above"
            )


def installed_match(
    session: session_env.SessionEnv, python: Path, manifest: dict[str, Any]
) -> bool:
    """The env still has exactly these versions installed (someone may have pip-installed
    something else since)."""
    wanted = {r["project"]: r["version"] for r in manifest["wheels"]}
    program = (
        "import json, sys\nfrom importlib import metadata\nout = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try: out[name] = metadata.version(name)\n"
        "    except metadata.PackageNotFoundError: out[name] = None\n"
        "print(json.dumps(out))\n"
    )
    if not session.ready:
        return False
    query = Runner(base_env=session.environ, out=session.out)
    result = query.run([python, "-c", program, *wanted], capture=True, check=False)
    try:
        have = json.loads(result.stdout)
    except ValueError:
        return False
    return all(
        have.get(name) is not None and Version(have[name]) == Version(version)
        for name, version in wanted.items()
    )
