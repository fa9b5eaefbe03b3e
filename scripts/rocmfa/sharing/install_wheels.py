"""`nox -s install_wheels`: build_pytorch's run manifest's wheels (or with --index a published
set) checked (sha256, Python tag, ROCm local version: ROCm/vllm#943), their runtime requirements
from pip's index, the wheels with --no-deps, then backend_check. docs/pytorch-and-ck.md."""

from __future__ import annotations

import json
import platform
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from rocmfa.builds.build_pytorch import (
    COMPONENTS,
    enabled_stages,
    install_argv,
    manifest_path,
)
from rocmfa.env import condaenv, session_env
from rocmfa.plumbing import paths, stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.datafiles import REPO_ROOT
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import InstallWheelsOptions
from rocmfa.sharing import wheel_manifest

if TYPE_CHECKING:  # imported when --index is given (it loads the index transports)
    from rocmfa.sharing.index_install import Chosen

ROCM_IN_LOCAL = re.compile(r"(?:^|\.)(dev)?rocm(sdk)?(\d.*)$")
NEEDS_ROCM = {"torch", "torchaudio", "torchvision", "triton", "pytorch-triton-rocm"}
RUNTIME_REQUIREMENTS_NAME = "install_wheels-runtime-requirements.txt"
PIP_SOURCES = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX")
EXTRA_MARKER = re.compile(r"\bextra\b")


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


def check_wheel(
    record: dict[str, Any], python_tag: str, rocm_version: str, machine: str
) -> tuple[Path, str]:
    """(path, one-line description) or UserError naming the wheel and the mismatch."""
    path = Path(record["file"])
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
    path = Path(filename)  # a name or a URL's last part
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
    if not wheel_manifest.same_version(built_for, rocm_version):
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


def runtime_requirements(records: Iterable[Mapping[str, Any]]) -> list[str] | None:
    """What the wheels declare they need at run time (each record's "requires": its
    Requires-Dist lines), less the wheels themselves and optional extras; None when a record
    does not say (a manifest published before they were recorded)."""
    records = list(records)
    own = {canonicalize_name(r["project"]) for r in records}
    wanted: dict[str, None] = {}
    for record in records:
        if record.get("requires") is None:
            return None
        for line in record["requires"]:
            try:
                requirement = Requirement(line)
            except InvalidRequirement as e:
                raise UserError(f"{record['file']} declares a malformed requirement: {e}") from None
            if canonicalize_name(requirement.name) in own:
                continue
            if requirement.marker and EXTRA_MARKER.search(str(requirement.marker)):
                continue  # only with an extra (torch[opt-einsum]) that nobody asked for
            wanted.setdefault(str(requirement), None)
    return sorted(wanted, key=str.lower)


def pip_source(session: session_env.SessionEnv, python: Path) -> str:
    """Where the env's pip looks (`pip config list`, before setup PIP_*), credentials left out."""
    settings: dict[str, str] = {}
    if session.ready and python.exists():
        query = Runner(base_env=session.environ, out=session.out)
        listed = query.run([python, "-m", "pip", "config", "list"], capture=True, check=False)
        for line in listed.stdout.splitlines():
            key, _, value = line.partition("=")
            settings[key.rsplit(".", 1)[-1]] = value.strip().strip("'\"")  # the last one wins
    else:
        for name in PIP_SOURCES:
            if session.environ.get(name):
                settings[name[4:].lower().replace("_", "-")] = session.environ[name]
    where = []
    if settings.get("no-index", "").lower() not in ("1", "true", "yes", "on"):
        where.append(f"index {settings.get('index-url', 'https://pypi.org/simple')}")
        if settings.get("extra-index-url"):
            where.append(f"extra index {settings['extra-index-url']}")
    if settings.get("find-links"):
        where.append(f"find-links {settings['find-links']}")
    how = "pip config list" if session.ready else "PIP_* variables; pip.conf may add more"
    where_ = re.sub(r"://[^/@\s]+@", "://", ", ".join(where) or "nowhere (no-index)")
    return f"{where_} ({how})"


def this_runs_manifest(work: Path, runner: Runner) -> dict[str, Any]:
    """build_pytorch's run manifest; in a plan before it exists, named placeholders."""
    if manifest_path(work).exists():
        return load_manifest(work)
    runner.refuse(
        f"no build_pytorch run manifest at {manifest_path(work)}: run nox -s build_pytorch "
        "first (or earlier in the same chain)"
    )
    stages = enabled_stages((), with_apex=False)  # its default stages; triton: torch's call
    projects = [c.wheels[0] for c in COMPONENTS if c.stage in stages]
    manifest = {"wheels": [{
        "file": f"<{p} wheel: written to {work / 'wheels'} by nox -s build_pytorch>",
        "project": p, "version": f"<{p} version>", "sha256": f"<sha256 of the {p} wheel>",
    } for p in projects], "planned": True}  # fmt: skip
    runner.done(
        f"the wheels nox -s build_pytorch writes ({', '.join(projects)} by default) are installed"
    )
    return manifest


def install_requirements(
    session: session_env.SessionEnv, needs: list[str] | None, chosen: Chosen | None
) -> None:
    """Step 1: the wheels' runtime requirements, by pip the ordinary way (no wheel touched yet)."""
    runner, python, work = session.runner, session.python, session.work
    source = pip_source(session, python)
    if needs:
        runner.say(
            f"runtime requirements of these wheels: {', '.join(needs)}; pip installs those "
            f"the env lacks from {source}, then the wheels themselves with --no-deps"
        )
        path = wheel_manifest.write_lines(work / RUNTIME_REQUIREMENTS_NAME, needs, runner)
        result = runner.run([python, "-m", "pip", "install", "-r", path], check=False)
        if result.returncode != 0:
            raise UserError(
                f"pip could not install the wheels' runtime requirements from {source} "
                f"(exit {result.returncode}); see pip's message above; none of the wheels "
                "was installed"
            )
    elif needs is None and chosen is not None:
        runner.say(
            f"note: the manifest of wheel set {chosen.set_id} records no runtime "
            "requirements (published before they were recorded): only its wheels are "
            "installed"
        )
    elif needs is None:
        runner.done(
            "then the runtime requirements the wheels declare (Requires-Dist), "
            f"from {source}: pip install -r {work / RUNTIME_REQUIREMENTS_NAME}"
        )


def install_wheels(opts: InstallWheelsOptions) -> None:
    if opts.wheel_set and not opts.index:
        raise UserError(f"--wheel-set {opts.wheel_set}: a set on a team index; add --index URL")
    session = session_env.open_env(opts)
    work, python = session.work, session.python
    runner = session.runner
    manifest = {} if opts.index else this_runs_manifest(work, runner)
    rocm_sdk = session.tool("rocm-sdk")
    rocm_version = session.ask([rocm_sdk, "version"], "$(rocm-sdk version)")
    probe = "import platform, sys; print('cp%d%d' % sys.version_info[:2], platform.machine())"
    answer = session.ask([python, "-c", probe], "$(python-tag) $(machine)")
    python_tag, machine = answer.split()  # each placeholder one word, as each answer is
    checkable = session.ready and rocm_sdk.exists()  # else a plan without env or ROCm SDK
    target = (python_tag, rocm_version, machine)
    chosen = None
    if opts.index:  # a wheel set published on a team index (index_install.py)
        chosen, argv = choose_from_index(opts, session, target, checkable)
        manifest = chosen.manifest
        records = manifest["wheels"]
    else:
        records, files = check_local_wheels(manifest, session, target, checkable)
        argv = install_argv(python, files)
    install_unless_current(opts, session, manifest, argv, runtime_requirements(records), chosen)
    if opts.no_backend_check:
        runner.say("backend check skipped (--no-backend-check)")
        return
    check = runner.run([python, REPO_ROOT / "scripts/rocmfa/probes/backend_check.py"], check=False)
    if check.returncode != 0:
        raise UserError(
            f"wheels installed, but the backend check failed (exit {check.returncode}): "
            "see its report above"
        )


def choose_from_index(
    opts: InstallWheelsOptions, session: session_env.SessionEnv, target: tuple, checkable: bool
) -> tuple[Chosen, list[str]]:
    from rocmfa.sharing import index_install

    python_tag, rocm_version, machine = target
    chosen = index_install.choose(
        opts.index, choice=session.choice, wheel_set=opts.wheel_set, say=session.runner.say,
        python_tag=python_tag if checkable else None,
        rocm_version=rocm_version if checkable else None,
    )  # fmt: skip
    for record in chosen.manifest["wheels"] if checkable else ():
        what = check_wheel_name(record["file"], python_tag, rocm_version, machine)
        session.runner.say(f"ok: {what} ({python_tag}, ROCm {rocm_version}), set {chosen.set_id}")
    return chosen, index_install.pip_argv(session.python, chosen, session.work, session.runner)


def check_local_wheels(
    manifest: dict[str, Any], session: session_env.SessionEnv, target: tuple, checkable: bool
) -> tuple[list[dict[str, Any]], list[str]]:
    python_tag, rocm_version, machine = target
    runner = session.runner
    if manifest.get("env_prefix") and Path(manifest["env_prefix"]) != session.prefix:
        runner.say(f"note: these wheels were built with env {manifest['env_prefix']}")
    files: list[str] = []
    records = []
    for record in manifest["wheels"]:
        if not checkable or manifest.get("planned"):
            runner.done(f"{record['file']} is checked against the env's Python and ROCm")
            files.append(str(record["file"]))
            records.append(record)  # its requirements are read once it exists
            continue
        path, what = check_wheel(record, python_tag, rocm_version, machine or platform.machine())
        runner.say(f"ok: {what} ({python_tag}, ROCm {rocm_version})")
        files.append(str(path))
        records.append({**record, "requires": wheel_manifest.requires_of(path)})
    return records, files


def install_unless_current(
    opts: InstallWheelsOptions, session: session_env.SessionEnv, manifest: dict[str, Any],
    argv: list[str], needs: list[str] | None, chosen: Chosen | None,
) -> None:  # fmt: skip
    runner, prefix = session.runner, session.prefix
    stamp = paths.stamp_path(session.work, "install_wheels")
    inputs = {
        "wheels": sorted(r["sha256"] for r in manifest["wheels"]),
        "env": condaenv.env_identity(prefix),
        "prefix": str(prefix),
    }
    if stamps.is_current(stamp, inputs) and not opts.force and installed_match(session, manifest):
        runner.say("these wheels are already installed in the env (--force to reinstall)")
        return
    install_requirements(session, needs, chosen)
    # first: pip refuses a bad wheel before changing anything, but a kill midway leaves
    # a torch that only a rerun finishes (doctor names it from torch's RECORD)
    runner.apply(stamps.remove, stamp)
    result = runner.run(argv, check=chosen is None)
    if result.returncode != 0 and chosen is not None:
        raise UserError(chosen.failure(result.returncode))
    runner.apply(stamps.write, stamp, inputs, wheels=[r["file"] for r in manifest["wheels"]])


def installed_match(session: session_env.SessionEnv, manifest: dict[str, Any]) -> bool:
    """The env still has exactly these versions (nobody pip-installed something else since)."""
    wanted = {r["project"]: r["version"] for r in manifest["wheels"]}
    program = (
        "import json, sys\nfrom importlib import metadata as m\nout = {}\n"
        "for n in sys.argv[1:]:\n    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: out[n] = None\nprint(json.dumps(out))\n"
    )
    if not session.ready:
        return False
    query = Runner(base_env=session.environ, out=session.out)
    result = query.run([session.python, "-c", program, *wanted], capture=True, check=False)
    try:
        have = json.loads(result.stdout)
    except ValueError:
        return False
    return all(
        have.get(name) is not None and Version(have[name]) == Version(version)
        for name, version in wanted.items()
    )
