"""`nox -s install_wheels`: this run's or a team index's wheels, checked; docs/pytorch-and-ck.md."""

import email.parser
import functools
import hashlib
import io
import json
import re
import shlex
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import packaging.tags
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from wheel.wheelfile import WheelFile

from rocmfa.builds.build_pytorch import COMPONENTS, enabled_stages, install_argv, manifest_path
from rocmfa.env import archs, session_env
from rocmfa.plumbing import downloads, options, stamps, team_index
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import REPO_ROOT, InstallWheelsOptions

ROCM_IN_LOCAL = re.compile(r"(?:^|\.)(dev)?rocm(sdk)?(\d.*)$")  # torch checks it: ROCm/vllm#943
NEEDS_ROCM = {"torch", "torchaudio", "torchvision", "triton", "pytorch-triton-rocm"}
RUNTIME_REQUIREMENTS_NAME = "install_wheels-runtime-requirements.txt"
SCHEMA = "rocmfa-wheelset/1"
MANIFEST_PROJECT = "rocmfa-wheelset"
MANIFEST_DIST = "rocmfa_wheelset"
MANIFEST_MEMBER = f"{MANIFEST_DIST}/manifest.json"


def rocm_of(version: Version) -> str | None:
    """The ROCm version in a wheel's local version part (+rocmsdk<date> is a date: None)."""
    match = ROCM_IN_LOCAL.search(version.local or "")
    return match[3] if match and not match[2] else None


def check_wheel(record: dict[str, Any], python_tag: str, rocm_version: str) -> str:
    """'name version' of the recorded wheel, unchanged and fit for the env's Python and ROCm."""
    path = Path(record["file"])
    rebuild = "rebuild: nox -s build_pytorch -- --force"
    if not path.is_file():
        raise UserError(f"{path} is gone (recorded by build_pytorch); rerun: nox -s build_pytorch")
    if stamps.file_sha256(path) != record.get("sha256"):
        raise UserError(f"{path.name} changed since build_pytorch recorded it; {rebuild}")
    name, version, _build, tags = parse_wheel_filename(path.name)  # TheRock's, as recorded
    python = (int(python_tag[2]), int(python_tag[3:]))  # the env's, on this machine's platforms
    if not tags & {*packaging.tags.cpython_tags(python), *packaging.tags.compatible_tags(python)}:
        its = ", ".join(sorted(str(t) for t in tags))
        raise UserError(f"{path.name} is for {its}; the env's Python is {python_tag}; {rebuild}")
    built_for = rocm_of(version)
    if built_for is None and str(name) in NEEDS_ROCM:
        what = f"'+{version.local}'" if version.local else "no local version"
        raise UserError(f"{path.name} names no ROCm version ({what}), torch checks it; {rebuild}")
    if built_for is not None and not same_version(built_for, rocm_version):
        env_has = f"the env has ROCm {rocm_version} (rocm-sdk version)"
        raise UserError(f"{path.name} was built against ROCm {built_for}, but {env_has}; {rebuild}")
    return f"{name} {version}"


def load_manifest(work: Path) -> dict[str, Any]:
    manifest = stamps.read(manifest_path(work)) or {}
    if not manifest.get("wheels") or not isinstance(manifest["wheels"], list):
        what = f"no readable run manifest listing wheels at {manifest_path(work)}"
        raise UserError(f"{what}; run: nox -s build_pytorch")
    return manifest


def runtime_requirements(records: list[dict[str, Any]]) -> list[str] | None:
    """The wheels' Requires-Dist less the wheels and extras; None in a plan (not read yet)."""
    own = {canonicalize_name(r["project"]) for r in records}
    wanted: set[str] = set()
    for record in records:
        if record.get("requires") is None:
            return None
        for line in record["requires"]:
            try:
                requirement = Requirement(line)
            except InvalidRequirement as e:
                raise UserError(f"{record['file']} declares a malformed requirement: {e}") from None
            extra = requirement.marker and re.search(r"\bextra\b", str(requirement.marker))
            if canonicalize_name(requirement.name) not in own and not extra:  # unasked extras
                wanted.add(str(requirement))
    return sorted(wanted, key=str.lower)


def write_requirements(path: Path, lines: list[str], runner: Runner) -> Path:
    runner.apply(path.parent.mkdir, parents=True, exist_ok=True)
    runner.apply(path.write_text, "\n".join(lines) + "\n", say=f"write {path}: {' '.join(lines)}")
    return path


def this_runs_wheels(session: session_env.SessionEnv, target: tuple, checkable: bool) -> tuple:
    """(run manifest with each wheel's Requires-Dist, pip argv, None); in a plan, placeholders."""
    work = session.work
    runner = session.runner
    if not manifest_path(work).exists():
        first = "run nox -s build_pytorch first (or earlier in the same chain)"
        runner.refuse(f"no build_pytorch run manifest at {manifest_path(work)}: {first}")
        stages = enabled_stages((), with_apex=False)  # its default stages; triton: torch's call
        projects = [c.wheels[0] for c in COMPONENTS if c.stage in stages]
        runner.done(f"the wheels nox -s build_pytorch writes ({', '.join(projects)} by default)")
        made = f"written to {work / 'wheels'} by nox -s build_pytorch"
        wheels = [{"project": p, "file": f"<{p} wheel: {made}>", "sha256": ""} for p in projects]
        return {"wheels": wheels}, install_argv(session.python, [w["file"] for w in wheels]), None
    manifest = load_manifest(work)
    for record in manifest["wheels"] if checkable else []:  # a plan without the env: not checked
        what = check_wheel(record, *target)
        runner.say(f"ok: {what} ({target[0]}, ROCm {target[1]})")
        record["requires"] = requires_of(Path(record["file"]))
    argv = install_argv(session.python, [str(r["file"]) for r in manifest["wheels"]])
    return manifest, argv, None


def family_of(arch: archs.Arch) -> str:
    """TheRock's index folder v2/<family>/: legacy_family, therock_family, or the sub-family."""
    if arch.legacy_family or arch.therock_family:
        return arch.legacy_family or arch.therock_family
    chain = archs.packaging_chain(arch.name)
    return chain[1] if len(chain) > 1 else arch.name


def same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def requires_of(wheel: Path) -> list[str]:
    try:
        with WheelFile(wheel) as wf:
            metadata = wf.read(f"{wf.dist_info_path}/METADATA")
    except (OSError, zipfile.BadZipFile, KeyError, ValueError) as e:  # WheelError: ValueError
        raise UserError(f"{wheel.name}: no readable METADATA ({e})") from None
    return email.parser.BytesHeaderParser().parsebytes(metadata).get_all("Requires-Dist") or []


def listed_manifests(spec: team_index.IndexSpec, family: str):
    """(the family's manifest wheels newest first, their links, the S3 store if any)."""
    store = team_index.tree_store(spec, family) if spec.kind == "s3" else None
    links = team_index.read_project(spec, family, MANIFEST_PROJECT, store)
    names = sorted((n for n in links if n.startswith(MANIFEST_DIST + "-")), reverse=True)
    return names, links, store


def read_manifest(name: str, link: team_index.Link, store, where: str) -> dict[str, Any]:
    """The manifest in wheel `name`, checked against its page's sha256."""
    rel = f"{MANIFEST_PROJECT}/{name}"
    data = store.read(rel) if store else downloads.get(link.url, missing=(403, 404))
    if data is None:
        raise UserError(f"{name} is listed on {where} but cannot be downloaded")
    if link.sha256 and hashlib.sha256(data).hexdigest() != link.sha256:
        raise UserError(f"{name} on {where} does not match the sha256 its page lists")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            manifest = json.loads(zf.read(MANIFEST_MEMBER))
    except (zipfile.BadZipFile, KeyError, ValueError) as e:
        raise UserError(f"{name}: not a wheel-set manifest ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise UserError(f"{name}: manifest schema is not {SCHEMA}")
    return manifest  # as publish wrote it


def mismatch(manifest: Mapping, family: str, arch: str, python_tag=None, rocm_version=None):
    """One line naming how this wheel set does not fit this machine, or None."""
    built = f"wheel set {manifest['set_id']} was built"
    sdk = manifest["rocm_sdk"]
    if (manifest["arch"], manifest["family"]) != (arch, family):  # one arch of its family
        theirs = f"{manifest['arch']} (family {manifest['family']})"
        return f"{built} for {theirs} only; this machine is {arch} (family {family})"
    if python_tag is not None and manifest["python"] != python_tag:
        return f"{built} for Python {manifest['python']}; the env has {python_tag}"
    if rocm_version is not None and not same_version(sdk, rocm_version):
        return f"{built} against ROCm SDK {sdk}; the env has {rocm_version} (rocm-sdk version)"
    return None


def from_index(opts: InstallWheelsOptions, session: session_env.SessionEnv, fits: dict) -> tuple:
    """(manifest, pip argv, what) of the newest set that fits: `name @ URL --hash=...` lines."""
    spec = team_index.parse_index(opts.index)
    arch = session.choice.arch
    runner = session.runner
    family = family_of(arch)
    where = spec.describe(family)
    runner.say(f"team index: {where} (arch {arch.name} from {session.choice.how}, family {family})")
    names, links, store = listed_manifests(spec, family)
    if opts.wheel_set and not (names := [n for n in names if f".{opts.wheel_set}-py3-" in n]):
        raise UserError(f"no wheel set {opts.wheel_set} on {where}")
    if not names:
        publish = f"nox -s publish -- --index {shlex.quote(opts.index)}"
        raise UserError(f"no wheel set on {where}; publish one on the building machine: {publish}")
    problems = []
    for manifest in (read_manifest(name, links[name], store, where) for name in names):
        if (problem := mismatch(manifest, family, arch.name, **fits)) is None:
            break
        if opts.wheel_set or mismatch(manifest, family, arch.name):  # another arch
            raise UserError(f"refusing to install from {where}: {problem}")
        problems.append(problem)
    else:
        raise UserError(f"refusing to install from {where}: {problems[0]}, and no other fits")
    set_id = manifest["set_id"]
    lines = []
    page_of = functools.cache(lambda project: team_index.read_project(spec, family, project, store))
    folder = options.downloads_dir(session.work) / "wheelsets" / set_id
    for wheel in manifest["wheels"]:
        project = canonicalize_name(wheel["project"])
        if (link := page_of(project).get(wheel["file"])) is None:
            raise UserError(f"{wheel['file']} of wheel set {set_id} is not on {where}")
        url = link.url
        if store is not None:  # S3: through its API into downloads/, kept as fetched (pip checks)
            local = folder / wheel["file"]
            rel = f"{project}/{wheel['file']}"
            runner.apply(fetch_into, store, rel, local, say=f"download {link.url} -> {local}")
            url = local.as_uri()
        lines.append(f"{project} @ {url} --hash=sha256:{wheel['sha256']}")
    path = write_requirements(session.work / "install_wheels-requirements.txt", lines, runner)
    argv = install_argv(session.python, ["--require-hashes", "-r", str(path)])
    return manifest, argv, f"wheel set {set_id} from {where}"


def fetch_into(store: team_index.S3Store, rel: str, target: Path) -> None:
    if (data := store.read(rel)) is None:
        raise UserError(f"{store.target(rel)} is listed but cannot be downloaded")
    target.parent.mkdir(parents=True, exist_ok=True)
    stamps.write_bytes_atomic(target, data)


def install_wheels(opts: InstallWheelsOptions) -> None:
    if opts.wheel_set and not opts.index:
        raise UserError(f"--wheel-set {opts.wheel_set}: a set on a team index; add --index URL")
    session = session_env.open_env(opts)
    python = session.python
    runner = session.runner
    rocm_sdk = session.tool("rocm-sdk")
    rocm_version = session.ask([rocm_sdk, "version"], "$(rocm-sdk version)")
    probe = "import sys; print('cp%d%d' % sys.version_info[:2])"
    python_tag = session.ask([python, "-c", probe], "$(python-tag)")
    checkable = session.ready and rocm_sdk.exists()  # else a plan without env or ROCm SDK
    if opts.index:
        fits = {"python_tag": python_tag, "rocm_version": rocm_version} if checkable else {}
        manifest, argv, where = from_index(opts, session, fits)
    else:
        manifest, argv, where = this_runs_wheels(session, (python_tag, rocm_version), checkable)
    install_unless_current(opts, session, manifest, argv, where)
    if opts.no_backend_check:
        runner.say("backend check skipped (--no-backend-check)")
        return
    check = runner.run([python, REPO_ROOT / "scripts/rocmfa/probes/backend_check.py"], check=False)
    if (code := check.returncode) != 0:
        raise UserError(f"wheels installed, but the backend check failed (exit {code}): see above")


def install_unless_current(opts, session, manifest: dict, argv: list, where: str | None) -> None:
    """Unless these wheels are in the env: their runtime requirements, then the wheels."""
    runner = session.runner
    work = session.work
    wheels = manifest["wheels"]
    stamp = options.stamp_path(work, "install_wheels")
    inputs = {"wheels": sorted(r["sha256"] for r in wheels)}  # and the env's versions: pip list
    if stamps.is_current(stamp, inputs) and not opts.force:
        pip_list = session.ask([session.python, "-m", "pip", "list", "--format", "json"], "[]")
        have = {canonicalize_name(d["name"]): Version(d["version"]) for d in json.loads(pip_list)}
        if all(have.get(canonicalize_name(r["project"])) == Version(r["version"]) for r in wheels):
            runner.say("these wheels are already installed in the env (--force to reinstall)")
            return
    if needs := runtime_requirements(wheels):
        listed = ", ".join(needs)
        runner.say(f"runtime requirements of these wheels: {listed} (pip adds what the env lacks)")
        path = write_requirements(work / RUNTIME_REQUIREMENTS_NAME, needs, runner)
        result = runner.run([session.python, "-m", "pip", "install", "-r", path], check=False)
        if (code := result.returncode) != 0:
            why = f"pip could not install the wheels' runtime requirements (exit {code})"
            raise UserError(f"{why}; see pip's message above; none of the wheels was installed")
    elif needs is None:
        pip = f"pip install -r {work / RUNTIME_REQUIREMENTS_NAME} (pip's own index)"
        runner.done(f"then the runtime requirements the wheels declare (Requires-Dist): {pip}")
    # first: a kill mid-install leaves a torch only a rerun finishes (doctor reads its RECORD)
    runner.apply(stamp.unlink, missing_ok=True)
    if (code := runner.run(argv, check=where is None).returncode) != 0:
        why = f"pip could not install {where} (exit {code}); see pip's message above"
        raise UserError(f"{why} (it refuses a wheel whose sha256 differs from the manifest's)")
    runner.apply(stamps.write, stamp, inputs, wheels=[r["file"] for r in wheels])
