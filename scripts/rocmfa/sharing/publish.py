"""`nox -s publish`: this run's wheels, then their manifest wheel, to a team index (README.md)."""

import hashlib
import json
import os
import re
import shlex
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from wheel.wheelfile import WheelFile

from rocmfa.builds import build_aotriton, build_pytorch, kernel_check
from rocmfa.env import archs
from rocmfa.plumbing import downloads, options, stamps, team_index
from rocmfa.plumbing.commands import Runner, runner_for
from rocmfa.plumbing.errors import UserError
from rocmfa.sharing import install_wheels
from rocmfa.sharing.install_wheels import MANIFEST_DIST, MANIFEST_MEMBER, MANIFEST_PROJECT
from rocmfa.sources import pins

REPORT_KINDS = {
    "sdpa-backend-check/1": "backend_check",
    "sdpa-validate/1": "validate",
    "sdpa-bench/1": "bench",
    kernel_check.SUMMARY_SCHEMA: "kernel_check",
}
# What a summary keeps of a probe's report (the results page reads it back as that report).
SUMMARY_KEYS = "schema identity device passed summary failures counts provenance settings wall_s"
WHEEL = "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"  # the manifest wheel's


def aotriton_problem(found: build_aotriton.AotritonInstall, pin: Mapping[str, Any]):
    """Why the runtime and images in a flash-attention torch wheel do not belong together."""
    if found.runtime is None or not found.images:
        return f"torch was built with flash attention but its wheel has {found.describe()}"
    commit = str(pin.get("commit") or "")
    for pack, sig in sorted(found.images.items()):
        if sig.startswith("git-") and commit and not commit.startswith(sig[4:]):
            return f"image pack {pack} comes from AOTriton {sig}, the runtime from {commit[:12]}"
    pinned = replace(found, runtime=pin["version"]) if pin.get("version") else found
    return next(iter(build_aotriton.check_compatible(found, pinned, force=True)), None)


def aotriton_pin(work: Path, torch_stamp: Mapping[str, Any]) -> dict[str, Any]:
    """The AOTriton torch was built with: build_aotriton's, --aotriton-prefix, aotriton.cmake's."""
    config = (torch_stamp.get("inputs") or {}).get("config") or {}
    if prefix := (config.get("aotriton") or [None])[0]:
        built = stamps.read(options.stamp_path(work, "aotriton-built")) or {}
        pin = (built.get("inputs") or {}).get("pin") or {}
        if built.get("install_prefix") == prefix and pin:
            return {"source": "build_aotriton", "prefix": prefix, **pin}
        return {"source": "--aotriton-prefix", "prefix": prefix}
    cmake = options.src_dir(work, "pytorch") / "cmake" / "External" / "aotriton.cmake"
    try:
        parsed = pins.parse_aotriton_cmake(cmake.read_text())
    except OSError:
        return {"source": "unknown (no cmake/External/aotriton.cmake in the torch checkout)"}
    commit = parsed.literals[0] if len(parsed.literals) == 1 else None
    return {"source": "pytorch aotriton.cmake", "commit": commit, "version": parsed.version}


def aotriton_of(work: Path, torch_stamp: Mapping, torch_wheel, flash: bool) -> dict[str, Any]:
    """The AOTriton in the torch wheel's torch/lib/, as installed (flash attention: checked)."""
    pin = aotriton_pin(work, torch_stamp) if torch_wheel else {}
    found = None
    if torch_wheel:  # a wheel the build recorded (its sha256 checked)
        with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(torch_wheel["file"]) as zf:
            lib = rf"torch/lib/(.*/)?({build_aotriton.LIB_RE.pattern}|__signature__)"
            zf.extractall(tmp, [n for n in zf.namelist() if re.fullmatch(lib, n)])
            found = build_aotriton.AotritonInstall.read(Path(tmp, "torch", "lib"))
    if flash and (problem := aotriton_problem(found, pin)):
        raise UserError(f"refusing to publish this wheel set: {problem}")
    return {
        **{k: pin.get(k) for k in ("commit", "version", "source")},
        "runtime": found and found.runtime,
        "images": found.images if found else {},
        "runtime_matches_images": True,
    }


def summarize_report(path: Path, given_as: str = "--report") -> tuple[str, dict[str, Any]]:
    """(kind, summary): a probe's report less its bulk (a bench's rows that ran stay)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{given_as} {path}: not a readable JSON report ({e})") from None
    kind = REPORT_KINDS.get(doc.get("schema")) if isinstance(doc, dict) else None
    if kind is None:
        known = ", ".join(sorted(REPORT_KINDS))
        raise UserError(f"{given_as} {path}: unknown report schema (expected one of {known})")
    if kind == "kernel_check":
        return kind, {k: v for k, v in doc.items() if k != "tree"}  # no local path
    summary = {k: doc[k] for k in SUMMARY_KEYS.split() if k in doc}
    if kind == "bench":
        ran = [r for r in doc.get("results", []) if isinstance(r, dict) and r.get("status") == "ok"]
        summary["results"] = ran
    return kind, summary


def build_manifest(work: Path, run: Mapping[str, Any], reports: Sequence[Path]) -> dict[str, Any]:
    """The wheel-set manifest of run (wheels verified by the caller)."""
    arch = archs.get_arch(run["arch"])
    checkout = stamps.read(build_pytorch.stage_stamp(work, "checkout")) or {}
    torch_stamp = stamps.read(build_pytorch.stage_stamp(work, "torch")) or {}
    inputs = checkout.get("inputs") or {}
    heads = checkout.get("heads") or {}
    flash = "--enable-pytorch-flash-attention" in (torch_stamp.get("argv") or [])
    torch_wheel = next((w for w in run["wheels"] if w["project"] == "torch"), None)
    aot = aotriton_of(work, torch_stamp, torch_wheel, flash)
    summaries = dict(summarize_report(Path(report)) for report in reports)
    checked = kernel_check.summary_path(work, arch.name)  # build_aotriton's, of this AOTriton
    if "kernel_check" not in summaries and checked.is_file():
        kind, summary = summarize_report(checked, "the kernel check summary (nox -s kernel_check)")
        if summary.get("aotriton_commit") == aot["commit"]:
            summaries[kind] = summary
    wheels = []
    for w in run["wheels"]:
        path = Path(w["file"])
        kept = {k: w[k] for k in ("project", "version", "size", "sha256")}
        wheels.append({**kept, "file": path.name, "requires": install_wheels.requires_of(path)})
    repos = {}  # each checked-out source
    patches = {}  # the patches applied to each
    for key, source in sorted((checkout.get("sources") or {}).items()):
        commit = source.get("hashtag")
        repos[key] = {"origin": source.get("origin"), "commit": commit, "head": heads.get(key)}
        if source.get("patches"):
            digest = ((inputs.get("patches") or {}).get(key) or {}).get(commit)
            patches[key] = {"commit": commit, "files": source["patches"], "digest": digest}
    lines = sorted(f"{w['file']} {w['sha256']}\n" for w in wheels)  # same set, same id
    return {
        "schema": install_wheels.SCHEMA,
        "set_id": hashlib.sha256("".join(lines).encode()).hexdigest()[:16],
        "published": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "arch": arch.name,
        "family": install_wheels.family_of(arch),
        "python": run["python_tag"],
        "rocm_sdk": run["rocm_version"],
        "flash_attention": flash,
        "wheels": wheels,
        "torch": {"version": torch_wheel and torch_wheel["version"], **repos.get("pytorch", {})},
        "therock": {"commit": inputs.get("therock"), "rocm_sdk": run["rocm_version"]},
        "aotriton": aot,
        "components": repos,
        "patches": patches,
        "reports": summaries,
    }


def manifest_wheel_name(manifest: Mapping[str, Any]) -> str:
    when = re.sub(r"[-:Z]", "", manifest["published"]).replace("T", ".")  # YYYYMMDD.HHMMSS
    return f"{MANIFEST_DIST}-{when}+{manifest['python']}.{manifest['set_id']}-py3-none-any.whl"


def write_manifest_wheel(manifest: Mapping[str, Any], target: Path) -> str:
    """The manifest as a wheel at target; its sha256."""
    version = target.name.split("-")[1]
    info = f"{MANIFEST_DIST}-{version}.dist-info"
    target.parent.mkdir(parents=True, exist_ok=True)
    with WheelFile(target, "w") as wf:
        wf.writestr(MANIFEST_MEMBER, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        metadata = f"Metadata-Version: 2.1\nName: {MANIFEST_PROJECT}\nVersion: {version}\n"
        wf.writestr(f"{info}/METADATA", metadata)
        wf.writestr(f"{info}/WHEEL", WHEEL)
    return stamps.file_sha256(target)


def plan_uploads(spec, family: str, wheels: list[dict], store, say) -> tuple:
    """(the wheels not on the index yet, each project's page after); refuses a sha256 clash."""
    uploads = []
    links = {}
    pages = {}
    for record in wheels:
        project = canonicalize_name(record["project"])
        path = Path(record["file"])
        if project not in links:
            links[project] = team_index.read_project(spec, family, project, store)
            pages[project] = {n: link.sha256 for n, link in links[project].items()}
        pages[project][path.name] = record["sha256"]  # the page after publishing
        link = links[project].get(path.name)
        there = link and link.sha256
        if not there and (store is not None or link):  # an upload cut short, or no hash listed
            if store:
                data = store.read(f"{project}/{path.name}")
            else:
                data = downloads.get(link.url, missing=(403, 404))
            there = None if data is None else hashlib.sha256(data).hexdigest()
        if there is None:
            uploads.append((project, path))
        elif there == record["sha256"]:
            say(f"already there (same sha256): {path.name}")
        else:  # before any upload
            shas = f"index {there[:12]}…, this build {record['sha256'][:12]}…"
            raise UserError(
                f"refusing to publish to {spec.describe(family)}: {path.name} is already on the "
                f"index with another sha256 ({shas}); files on an index are never replaced - "
                "rebuild with another version, or remove it from the index by hand"
            )
    return uploads, pages


def publish(opts: options.PublishOptions) -> None:
    work = options.workdir(opts.workdir)
    spec = team_index.parse_index(opts.index)
    run = install_wheels.load_manifest(work)
    if opts.arch and opts.arch != run["arch"]:
        built_for = f"{run['arch']} ({install_wheels.manifest_path(work)})"
        raise UserError(f"--arch {opts.arch}: this run's wheels were built for {built_for}")
    for record in run["wheels"]:  # present, unchanged since the build, the run's Python/ROCm
        install_wheels.check_wheel(record, run["python_tag"], run["rocm_version"])
    manifest = build_manifest(work, run, [Path(p) for p in opts.report])
    family = manifest["family"]
    set_id = manifest["set_id"]
    runner = runner_for(opts)
    where = spec.describe(family)
    what = f"{len(run['wheels'])} wheels for {manifest['arch']} (family {family})"
    env = f"{run['python_tag']}, ROCm SDK {run['rocm_version']}"
    runner.say(f"wheel set {set_id}: {what}, {env} -> {where}")
    if (aot := manifest["aotriton"]).get("runtime"):
        images = ", ".join(f"{k}={v}" for k, v in sorted(aot["images"].items()))
        runner.say(f"AOTriton: runtime {aot['runtime']}, images {images} (they match)")
    store = None if spec.kind == "upload" else team_index.tree_store(spec, family)
    uploads, pages = plan_uploads(spec, family, run["wheels"], store, runner.say)
    listed = team_index.read_project(spec, family, MANIFEST_PROJECT, store)
    pages[MANIFEST_PROJECT] = {n: link.sha256 for n, link in listed.items()}
    set_present = any(f".{set_id}-py3-" in n for n in listed)  # <date>+<python>.<set id>
    if set_present and not uploads:
        runner.say(f"wheel set {set_id} is already published on {where}: nothing to do")
        return
    manifest_file = work / "publish" / manifest_wheel_name(manifest)
    sha256 = runner.apply(write_manifest_wheel, manifest, manifest_file)
    if not set_present:  # the manifest last: a set is listed once all its wheels are there
        uploads.append((MANIFEST_PROJECT, manifest_file))
        pages[MANIFEST_PROJECT][manifest_file.name] = sha256
    if store is None:  # twine reads TWINE_USERNAME/TWINE_PASSWORD; the manifest wheel last
        if not os.environ.get("TWINE_USERNAME"):
            runner.refuse("an upload API needs TWINE_USERNAME and TWINE_PASSWORD (any, if no auth)")
        twine = [sys.executable, "-m", "twine", "upload", "--non-interactive"]
        url = spec.family_root(family) + "/"
        files = [str(path) for _, path in uploads]
        runner.run([*twine, "--disable-progress-bar", "--repository-url", url, *files])
    else:
        upload_tree(runner, store, uploads, pages)
    install = f"nox -s setup_env install_wheels -- --index {shlex.quote(opts.index)}"
    done = f"published wheel set {set_id} ({len(uploads)} file(s) uploaded) to {where}"
    runner.done(f"{done}; install it on another machine of this family with: {install}")


def upload_tree(runner: Runner, store, uploads: list[tuple[str, Path]], pages: dict) -> None:
    """Each new file, never replaced; then the pages, the wheels' first and the root's last."""
    for project, path in uploads:
        rel = f"{project}/{path.name}"
        runner.apply(store.put_new, rel, path, say=f"upload {path} -> {store.target(rel)}")
    for project in [*sorted(p for p in pages if p != MANIFEST_PROJECT), MANIFEST_PROJECT]:
        rel = f"{project}/index.html"
        page = team_index.project_page(pages[project])
        runner.apply(store.put_page, rel, page, say=f"write page {store.target(rel)}")
    root = runner.apply(store.read, "index.html")
    known = set(team_index.parse_page((root or b"").decode(errors="replace"), "http://x.invalid/"))
    page = team_index.project_page(dict.fromkeys(known | set(pages)), "/")
    runner.apply(store.put_page, "index.html", page, say=f"write page {store.target('index.html')}")
