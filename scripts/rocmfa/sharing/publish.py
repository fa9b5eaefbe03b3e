"""`nox -s publish`: this run's checked wheels, then their manifest wheel, then the pages, onto
the family index (team_index.py); same sha256: skipped, another: refused before any upload.
docs/pytorch-and-ck.md tells the whole story."""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import sys
from pathlib import Path

from packaging.utils import canonicalize_name

from rocmfa.plumbing import paths, stamps, team_index
from rocmfa.plumbing.commands import Runner, runner_for
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import PublishOptions
from rocmfa.sharing import install_wheels, wheel_manifest

MANIFESTS = wheel_manifest.MANIFEST_PROJECT


def sha256_of(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


def plan_uploads(spec, family: str, wheels: list[dict], store, say) -> tuple:
    """(the wheels not on the index yet as (project, file), each project's page entries after
    the upload); UserError naming a file there with another sha256, before any upload."""
    uploads, links, clashes = [], {}, []
    for record in wheels:
        project, path = canonicalize_name(record["project"]), Path(record["file"])
        if project not in links:
            links[project] = team_index.read_project(spec, family, project, store)
        rel, link = f"{project}/{path.name}", links[project].get(path.name)
        if store is not None and (link is None or link.sha256 is None):  # an upload cut short?
            there = sha256_of(store.read(rel))
        elif link is not None:  # a page without hashes: the file's
            there = link.sha256 or sha256_of(team_index.fetch(link.url))
        else:
            there = None
        if there is None:
            uploads.append((project, path))
        elif there == record["sha256"]:
            say(f"already there (same sha256): {path.name}")
        else:
            clashes.append(
                f"{path.name} is already on the index with another sha256 (index "
                f"{there[:12]}…, this build {record['sha256'][:12]}…)"
            )
    if clashes:
        more = f" (and {len(clashes) - 1} more)" if len(clashes) > 1 else ""
        raise UserError(
            f"refusing to publish to {spec.describe(family)}: {clashes[0]}{more}; files on an "
            "index are never replaced - rebuild with another version, or remove it from the "
            "index by hand"
        )
    pages = {p: {n: link.sha256 for n, link in got.items()} for p, got in links.items()}
    for record in wheels:
        pages[canonicalize_name(record["project"])][Path(record["file"]).name] = record["sha256"]
    return uploads, pages


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
    where = spec.describe(family)
    runner.say(
        f"wheel set {set_id}: {len(run['wheels'])} wheels for {manifest['arch']} (family "
        f"{family}), {manifest['python']}, ROCm SDK {manifest['rocm_sdk']} -> {where}"
    )
    if (aot := manifest["aotriton"]).get("runtime"):
        images = ", ".join(f"{k}={v}" for k, v in sorted(aot["images"].items()))
        runner.say(f"AOTriton: runtime {aot['runtime']}, images {images} (they match)")
    store = None if spec.kind == "upload" else team_index.tree_store(spec, family)
    uploads, pages = plan_uploads(spec, family, run["wheels"], store, runner.say)
    listed = team_index.read_project(spec, family, MANIFESTS, store)
    pages[MANIFESTS] = {n: link.sha256 for n, link in listed.items()}
    set_present = any(wheel_manifest.is_manifest_of(n, set_id) for n in listed)
    if set_present and not uploads:
        runner.say(f"wheel set {set_id} is already published on {where}: nothing to do")
        return
    runner.apply(wheel_manifest.write_manifest_wheel, manifest, work / "publish")
    manifest_file = work / "publish" / wheel_manifest.manifest_wheel_name(manifest)
    if not set_present:  # the manifest last: a set is listed once all its wheels are there
        uploads.append((MANIFESTS, manifest_file))
    if store is None:
        upload_api(runner, spec.family_root(family), [path for _project, path in uploads])
    else:
        upload_tree(runner, store, uploads, pages)
    runner.done(
        f"published wheel set {set_id} ({len(uploads)} file(s) uploaded) to {where}; install it "
        "on another machine of this family with: nox -s setup_env install_wheels "
        f"-- --index {shlex.quote(opts.index)}"
    )


def upload_api(runner: Runner, url: str, files: list[Path]) -> None:
    """twine (it reads TWINE_USERNAME/TWINE_PASSWORD); the manifest wheel last."""
    if not os.environ.get("TWINE_USERNAME"):
        runner.refuse(
            "publish to an upload API needs TWINE_USERNAME and TWINE_PASSWORD in the environment "
            "(twine reads them; any values for a server without authentication)"
        )
    argv = [sys.executable, "-m", "twine", "upload", "--non-interactive"]
    runner.run([*argv, "--disable-progress-bar", "--repository-url", url + "/", *map(str, files)])


def upload_tree(runner: Runner, store, uploads: list[tuple[str, Path]], pages: dict) -> None:
    """Each new file, created, never replaced; then the pages: the wheels' before the
    manifests', the manifests' before the root's."""
    for project, path in uploads:
        rel = f"{project}/{path.name}"
        runner.apply(put_new, store, rel, path, say=f"upload {path} -> {store.target(rel)}")
        if project == MANIFESTS:
            pages[project][path.name] = runner.apply(stamps.file_sha256, path)
    for project in [*sorted(p for p in pages if p != MANIFESTS), MANIFESTS]:
        rel, page = f"{project}/index.html", team_index.project_page(pages[project])
        runner.apply(store.put_page, rel, page, say=f"write page {store.target(rel)}")
    root = runner.apply(store.read, "index.html") or b""
    known = set(team_index.parse_page(root.decode(errors="replace"), "http://x.invalid/"))
    page = team_index.root_page(known | set(pages))
    runner.apply(store.put_page, "index.html", page, say=f"write page {store.target('index.html')}")


def put_new(store, rel: str, path: Path) -> None:
    try:
        store.put_new(rel, path)
    except team_index.Clash:
        raise UserError(
            f"{store.target(rel)} appeared while publishing (another publish?); refusing to "
            "replace it - run publish again"
        ) from None
