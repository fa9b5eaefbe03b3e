"""`nox -s publish`: this run's checked wheels, then their manifest wheel, then the pages, onto
the family index (team_index.py); same sha256: skipped, another: refused before any upload.
docs/pytorch-and-ck.md tells the whole story."""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from rocmfa.plumbing import paths, team_index
from rocmfa.plumbing.commands import Runner, runner_for
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import PublishOptions
from rocmfa.plumbing.team_index import IndexSpec, Link
from rocmfa.sharing import install_wheels, wheel_manifest


@dataclass
class Plan:  # what publish has to do on one family index
    upload: list[tuple[str, Path]] = field(default_factory=list)  # (project, file)
    already: list[str] = field(default_factory=list)
    clashes: list[str] = field(default_factory=list)
    pages: dict[str, dict[str, str | None]] = field(default_factory=dict)  # project -> entries
    set_present: bool = False


def _sha256(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


def plan_publish(
    spec: IndexSpec,
    family: str,
    wheels: list[dict[str, Any]],
    set_id: str,
    store: team_index.TreeStore | None,
) -> Plan:
    plan = Plan()
    listed: dict[str, dict[str, Link]] = {}
    for record in wheels:
        project = canonicalize_name(record["project"])
        path = Path(record["file"])
        if project not in listed:
            listed[project] = team_index.read_project(spec, family, project, store)
            plan.pages[project] = {n: link.sha256 for n, link in listed[project].items()}
        link, rel = listed[project].get(path.name), f"{project}/{path.name}"
        there = link.sha256 if link is not None else None
        if link is not None and there is None:  # a page without hashes: look at the file
            there = _sha256(team_index.fetch(link.url) if store is None else store.read(rel))
        elif link is None and store is not None:
            there = _sha256(store.read(rel))  # left by an interrupted publish
        if there is None:
            plan.upload.append((project, path))
        elif there == record["sha256"]:
            plan.already.append(path.name)
        else:
            plan.clashes.append(
                f"{path.name} is already on the index with another sha256 (index "
                f"{there[:12]}…, this build {record['sha256'][:12]}…)"
            )
        plan.pages[project][path.name] = record["sha256"]
    manifests = team_index.read_project(spec, family, wheel_manifest.MANIFEST_PROJECT, store)
    plan.set_present = any(wheel_manifest.is_manifest_of(n, set_id) for n in manifests)
    plan.pages[wheel_manifest.MANIFEST_PROJECT] = {n: m.sha256 for n, m in manifests.items()}
    return plan


def publish(opts: PublishOptions) -> None:
    work = paths.workdir(opts.workdir)
    spec = team_index.parse_index(opts.index)
    run = install_wheels.load_manifest(work)
    if opts.arch and opts.arch != run["arch"]:
        raise UserError(
            f"--arch {opts.arch}: this run's wheels were built for {run['arch']} "
            f"({install_wheels.manifest_path(work)})"
        )
    for record in run["wheels"]:  # present, unchanged since the build, the run's Python/ROCm
        install_wheels.check_wheel(
            record, run["python_tag"], run["rocm_version"], platform.machine()
        )
    manifest = wheel_manifest.build(work, run, [Path(p) for p in opts.report])
    family, set_id = manifest["family"], manifest["set_id"]
    runner = runner_for(opts)
    say, where = runner.say, spec.describe(family)
    say(
        f"wheel set {set_id}: {len(run['wheels'])} wheels for {manifest['arch']} (family "
        f"{family}), {manifest['python']}, ROCm SDK {manifest['rocm_sdk']} -> {where}"
    )
    aot = manifest["aotriton"]
    if aot.get("runtime"):
        images = ", ".join(f"{k}={v}" for k, v in sorted(aot["images"].items()))
        say(f"AOTriton: runtime {aot['runtime']}, images {images} (they match)")
    store = None if spec.kind == "upload" else team_index.tree_store(spec, family)
    plan = plan_publish(spec, family, run["wheels"], set_id, store)
    if plan.clashes:
        more = f" (and {len(plan.clashes) - 1} more)" if len(plan.clashes) > 1 else ""
        raise UserError(
            f"refusing to publish to {where}: {plan.clashes[0]}{more}; files on an index are "
            "never replaced - rebuild with another version, or remove it from the index by hand"
        )
    for name in plan.already:
        say(f"already there (same sha256): {name}")
    if plan.set_present and not plan.upload:
        say(f"wheel set {set_id} is already published on {where}: nothing to do")
        return
    out = work / "publish"
    manifest_file = out / wheel_manifest.manifest_wheel_name(manifest)
    runner.apply(wheel_manifest.write_manifest_wheel, manifest, out)
    files = [path for _project, path in plan.upload]
    if not plan.set_present:
        files.append(manifest_file)
    if store is None:
        upload_api(runner, spec, family, files)
    else:
        upload_tree(runner, store, plan, files, manifest_file)
    runner.done(
        f"published wheel set {set_id} ({len(files)} file(s) uploaded) to {where}; install it "
        "on another machine of this family with: nox -s setup_env install_wheels "
        f"-- --index {shlex.quote(opts.index)}"
    )


def upload_api(runner: Runner, spec: IndexSpec, family: str, files: list[Path]) -> None:
    """twine (it reads TWINE_USERNAME/TWINE_PASSWORD); the manifest wheel last."""
    if not os.environ.get("TWINE_USERNAME"):
        runner.refuse(
            "publish to an upload API needs TWINE_USERNAME and TWINE_PASSWORD in the environment "
            "(twine reads them; any values for a server without authentication)"
        )
    argv = [sys.executable, "-m", "twine", "upload", "--non-interactive"]
    argv += ["--disable-progress-bar", "--repository-url", spec.family_root(family) + "/"]
    runner.run([*argv, *map(str, files)])


def upload_tree(runner: Runner, store: team_index.TreeStore, plan: Plan, files, manifest_file):
    uploads = list(plan.upload)
    if manifest_file in files:
        project = wheel_manifest.MANIFEST_PROJECT
        uploads.append((project, manifest_file))
        sha = runner.apply(lambda: _sha256(manifest_file.read_bytes()))
        plan.pages[project][manifest_file.name] = sha
    for project, path in uploads:
        rel = f"{project}/{path.name}"
        runner.apply(put_new, store, rel, path, say=f"upload {path} -> {store.target(rel)}")
    # Pages last: a wheel's page before the manifest's, the manifest's before the root's.
    order = sorted(p for p in plan.pages if p != wheel_manifest.MANIFEST_PROJECT)
    for project in [*order, wheel_manifest.MANIFEST_PROJECT]:
        rel, page = f"{project}/index.html", team_index.project_page(plan.pages[project])
        runner.apply(store.put_page, rel, page, say=f"write page {store.target(rel)}")
    root = runner.apply(store.read, "index.html")
    known = set(team_index.parse_page((root or b"").decode(errors="replace"), "http://x.invalid/"))
    page = team_index.project_page(dict.fromkeys(known | set(plan.pages)), "/")
    runner.apply(store.put_page, "index.html", page, say=f"write page {store.target('index.html')}")


def put_new(store: team_index.TreeStore, rel: str, path: Path) -> None:
    try:
        store.put_new(rel, path)
    except team_index.Clash:
        raise UserError(
            f"{store.target(rel)} appeared while publishing (another publish?); refusing to "
            "replace it - run publish again"
        ) from None
