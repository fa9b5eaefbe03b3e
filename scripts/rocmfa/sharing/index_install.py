"""`install_wheels --index URL`: the newest published wheel set that fits this machine, as a
`name @ URL --hash=sha256:...` file for pip --require-hashes (docs/pytorch-and-ck.md)."""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from rocmfa.env import archs
from rocmfa.plumbing import paths, stamps, team_index
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.team_index import IndexSpec
from rocmfa.sharing import wheel_manifest

REQUIREMENTS_NAME = "install_wheels-requirements.txt"


@dataclass(frozen=True)
class Chosen:
    spec: IndexSpec
    family: str
    where: str
    manifest: dict[str, Any]
    store: team_index.TreeStore | None  # S3: read through the API, not plain GETs

    @property
    def set_id(self) -> str:
        return str(self.manifest["set_id"])

    def failure(self, code: int) -> str:
        return (
            f"pip could not install wheel set {self.set_id} from {self.where} (exit {code}); "
            "see pip's message above (--require-hashes refuses a wheel whose sha256 differs "
            "from the manifest's)"
        )


def listed_manifests(spec: team_index.IndexSpec, family: str):
    """The family's wheel-set manifests, newest first; their links; the S3 store if any."""
    store = team_index.tree_store(spec, family) if spec.kind == "s3" else None  # via its API
    links = team_index.read_project(spec, family, wheel_manifest.MANIFEST_PROJECT, store)
    names = [n for n in links if n.startswith(wheel_manifest.MANIFEST_DIST + "-")]
    return sorted(names, key=wheel_manifest.manifest_sort_key)[::-1], links, store


def choose(
    index: str, *, choice: archs.ArchChoice, wheel_set: str | None, python_tag: str | None,
    rocm_version: str | None, say,
) -> Chosen:  # fmt: skip
    """The wheel set to install (python_tag/rocm_version None: not compared)."""
    spec = team_index.parse_index(index)
    arch = choice.arch
    family = wheel_manifest.family_of(arch)
    where = spec.describe(family)
    say(f"team index: {where} (arch {arch.name} from {choice.how}, family {family})")
    names, links, store = listed_manifests(spec, family)
    if wheel_set:
        names = [n for n in names if wheel_manifest.is_manifest_of(n, wheel_set)]
        if not names:
            raise UserError(f"no wheel set {wheel_set} on {where}")
    if not names:
        raise UserError(
            f"no wheel set on {where}; publish one from the building machine: "
            f"nox -s publish -- --index {shlex.quote(index)}"
        )
    first_problem = None
    target = {"family": family, "arch": arch.name, "python_tag": python_tag}
    for name in names:
        manifest = read_manifest(name, links[name], store, where)
        problem = wheel_manifest.mismatch(manifest, **target, rocm_version=rocm_version)
        if problem is None:
            return Chosen(spec, family, where, manifest, store)
        archs_ = manifest.get("archs", [manifest["arch"]])
        if wheel_set or manifest["family"] != family or arch.name not in archs_:
            raise UserError(f"refusing to install from {where}: {problem}")
        first_problem = first_problem or problem
    raise UserError(
        f"refusing to install from {where}: {first_problem}, and no other wheel set there fits"
    )


def read_manifest(
    name: str, link: team_index.Link, store: team_index.TreeStore | None, where: str
) -> dict[str, Any]:
    """The manifest in wheel `name`, checked against its page's sha256 and its name."""
    rel = f"{wheel_manifest.MANIFEST_PROJECT}/{name}"
    data = store.read(rel) if store else team_index.fetch(link.url)
    if data is None:
        raise UserError(f"{name} is listed on {where} but cannot be downloaded")
    if link.sha256 and hashlib.sha256(data).hexdigest() != link.sha256:
        raise UserError(f"{name} on {where} does not match the sha256 its page lists")
    manifest = wheel_manifest.read_manifest_wheel(data, name)
    if not wheel_manifest.is_manifest_of(name, str(manifest["set_id"])):
        raise UserError(f"{name} on {where} holds the manifest of set {manifest['set_id']}")
    return manifest


def requirements(chosen: Chosen, downloads: Path, runner: Runner) -> list[str]:
    """`name @ URL --hash=sha256:...` per wheel of the set, URLs from the index's pages (from
    S3: the wheel downloaded into downloads/ first, through the API)."""
    pages: dict[str, dict[str, team_index.Link]] = {}
    lines = []
    for wheel in chosen.manifest["wheels"]:
        project = canonicalize_name(wheel["project"])
        if project not in pages:
            pages[project] = team_index.read_project(
                chosen.spec, chosen.family, project, chosen.store
            )
        link = pages[project].get(wheel["file"])
        if link is None:
            raise UserError(
                f"{wheel['file']} of wheel set {chosen.set_id} is not on {chosen.where}"
            )
        url, rel, target = link.url, f"{project}/{wheel['file']}", downloads / wheel["file"]
        if chosen.store is not None:  # kept as fetched: pip checks its hash
            said = f"download {chosen.store.target(rel)} -> {target}"
            runner.apply(fetch_into, chosen.store, rel, target, say=said)
            url = target.as_uri()
        lines.append(f"{project} @ {url} --hash=sha256:{wheel['sha256']}")
    return lines


def fetch_into(store: team_index.TreeStore, rel: str, target: Path) -> None:
    data = store.read(rel)
    if data is None:
        raise UserError(f"{store.target(rel)} is listed but cannot be downloaded")
    target.parent.mkdir(parents=True, exist_ok=True)
    stamps.write_bytes_atomic(target, data)


def pip_argv(python: Path, chosen: Chosen, work: Path, runner: Runner) -> list[str]:
    downloads = paths.downloads_dir(work) / "wheelsets" / chosen.set_id
    path = wheel_manifest.write_lines(
        work / REQUIREMENTS_NAME, requirements(chosen, downloads, runner), runner
    )
    return [
        str(python), "-m", "pip", "install", "--no-deps", "--force-reinstall",
        "--require-hashes", "-r", str(path),
    ]  # fmt: skip
