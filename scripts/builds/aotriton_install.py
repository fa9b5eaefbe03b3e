"""AOTriton in the env's torch: read an install layout (runtime version, image signatures),
refuse versions torch was not built for, back up what torch shipped, and install a new one.

Shared by build_aotriton (built from source) and aotriton_release (prebuilt), so neither
imports the other.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.env import archs
from scripts.plumbing import stamps, transaction
from scripts.plumbing.commands import Runner
from scripts.plumbing.errors import UserError

MARKER = "aotriton.rocmfa.json"  # in torch/lib: what we installed there
LIB_RE = re.compile(r"libaotriton_v2\.so\.(\d+)\.(\d+)\.(\d+)")
SIG_RE = re.compile(r"aotriton\s*v?(\d+)\.(\d+)")


# --- the env's torch ----------------------------------------------------------------------


def site_packages(prefix: Path) -> Path:
    found = sorted(glob.glob(str(prefix / "lib" / "python3*" / "site-packages")))
    if not found:
        raise UserError(f"no site-packages under {prefix}/lib/python3*/ - is the env set up?")
    return Path(found[-1])


def find_torch(prefix: Path) -> Path | None:
    """<site-packages>/torch of the env, or None when no torch is installed there."""
    torch = site_packages(prefix) / "torch"
    return torch if (torch / "__init__.py").is_file() else None


def torch_dir(prefix: Path, why: str = "") -> Path:
    """The env's torch; UserError (one line, saying why it is needed) when there is none."""
    torch = find_torch(prefix)
    if torch is None:
        need = f" ({why})" if why else ""
        raise UserError(
            f"no torch in the env ({site_packages(prefix)}){need}; install it first: "
            "nox -s setup_env -- --with-torch, or nox -s build_pytorch install_wheels"
        )
    return torch


def torch_version(torch: Path) -> str:
    infos = sorted(torch.parent.glob("torch-*.dist-info"))
    if infos:
        return infos[-1].name[len("torch-") : -len(".dist-info")]
    text = (torch / "version.py").read_text() if (torch / "version.py").is_file() else ""
    match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
    return match.group(1) if match else "unknown"


def torch_identity(torch: Path) -> dict[str, str | None]:
    """Which torch install this is: its version and the sha256 of its dist-info RECORD. pip
    rewrites RECORD on every install of another wheel, and our swap never touches it, so a
    reinstalled torch is never taken for the one a marker or a backup was made for."""
    infos = sorted(torch.parent.glob("torch-*.dist-info"))
    record = infos[-1] / "RECORD" if infos else None
    digest = stamps.file_sha256(record) if record is not None and record.is_file() else None
    return {"version": torch_version(torch), "record_sha256": digest}


def describe_identity(identity: Any) -> str:
    if not isinstance(identity, dict):
        return "an unrecorded torch"
    digest = identity.get("record_sha256")
    return f"torch {identity.get('version')} (RECORD {str(digest)[:12] if digest else 'none'})"


def runtime_version_in(lib_dir: Path) -> str | None:
    """X.Y.Z of the real libaotriton_v2.so.X.Y.Z file in lib_dir (not a symlink)."""
    versions = []
    if lib_dir.is_dir():
        for item in lib_dir.iterdir():
            match = LIB_RE.fullmatch(item.name)
            if match and not item.is_symlink():
                versions.append(tuple(int(g) for g in match.groups()))
    if not versions:
        return None
    return ".".join(map(str, max(versions)))


def config_h_version(include_dir: Path) -> str | None:
    path = include_dir / "aotriton" / "config.h"
    try:
        text = path.read_text()
    except OSError:
        return None
    parts = []
    for name in ("MAJOR", "MINOR", "PATCH"):
        match = re.search(rf"#define\s+AOTRITON_VERSION_{name}\s+(\d+)", text)
        if not match:
            return None
        parts.append(match.group(1))
    return ".".join(parts)


def signature_of(text: str) -> str:
    """What one __signature__ says: 'X.Y' for a versioned text signature, 'git-<sha1[:12]>'
    for AOTriton's JSON form (0.13b write_image_signature: AOTRITON_GIT_SHA1, ..._TREESHA1,
    DB_SHA256, TRITON_VERSION; no version in it), else 'unknown'."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("AOTRITON_GIT_SHA1"), str):
        return "git-" + data["AOTRITON_GIT_SHA1"][:12]
    match = SIG_RE.search(text)
    return f"{match.group(1)}.{match.group(2)}" if match else "unknown"


def image_signatures(images: Path) -> dict[str, str]:
    """{'amd-gfx115x': '0.13' or 'git-<sha1>', ...} from each pack's __signature__."""
    found = {}
    if images.is_dir():
        for sig in sorted(images.glob("*/__signature__")):
            found[sig.parent.name] = signature_of(sig.read_text(errors="replace"))
    return found


@dataclass(frozen=True)
class AotritonInstall:
    """An AOTriton install layout: <root>/lib/libaotriton_v2.so.X.Y.Z, lib/aotriton.images/."""

    lib: Path
    runtime: str | None
    images: dict[str, str]
    pyaotriton: tuple[Path, ...]

    @classmethod
    def read(cls, lib: Path, include: Path | None = None) -> AotritonInstall:
        runtime = runtime_version_in(lib) or (config_h_version(include) if include else None)
        py = tuple(sorted(lib.glob("pyaotriton*.so")))
        return cls(lib, runtime, image_signatures(lib / "aotriton.images"), py)

    def describe(self) -> str:
        images = ", ".join(f"{k}={v}" for k, v in self.images.items()) or "none"
        return f"runtime {self.runtime or 'none'}, images {images}"


def major_minor(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    try:
        return archs.aotriton_version_key(version)[:2]
    except UserError:
        return None


def check_compatible(new: AotritonInstall, torch_shipped: AotritonInstall | None, force: bool):
    """Refuse runtime/image disagreement and a version torch was not built for (unless force).
    Returns the warnings that --force overrode."""
    problems = []
    if new.runtime is None:
        raise UserError(f"no libaotriton_v2.so.X.Y.Z in {new.lib}; the build did not install one")
    runtime = major_minor(new.runtime)
    built_from = {sig for sig in new.images.values() if sig.startswith("git-")}
    if len(built_from) > 1:
        commits = ", ".join(sorted(built_from))
        problems.append(f"the image packs come from different AOTriton commits ({commits})")
    for pack, sig in new.images.items():
        if sig.startswith("git-"):
            continue  # the JSON signature names a commit, not a version
        if major_minor(sig) != runtime:
            problems.append(
                f"runtime {new.runtime} but {pack}/__signature__ says {sig} (mismatched runtime "
                "and images give hipErrorInvalidValue / all-zero attention)"
            )
    if torch_shipped is None or torch_shipped.runtime is None:
        problems.append("the env's torch ships no AOTriton runtime (built without it?)")
    elif major_minor(torch_shipped.runtime) != runtime:
        problems.append(
            f"torch was built for AOTriton {torch_shipped.runtime} but this is {new.runtime}"
        )
    if problems and not force:
        raise UserError(f"refusing to install AOTriton: {problems[0]} (--force to install anyway)")
    return problems


def dist_version(site: Path, name: str) -> str | None:
    infos = sorted(site.glob(f"{name}-*.dist-info"))
    return infos[-1].name[len(name) + 1 : -len(".dist-info")] if infos else None


def installed_fingerprint(lib: Path) -> dict[str, Any]:
    """Cheap identity of what is in torch/lib now (names, sizes, mtimes)."""
    entries = {}
    candidates = [*lib.glob("libaotriton_v2.so*"), *lib.glob("pyaotriton*.so"), lib / MARKER]
    for path in sorted(candidates):
        try:
            st = path.lstat()
        except OSError:
            continue
        entries[path.name] = [st.st_size, st.st_mtime_ns]
    for sig in sorted((lib / "aotriton.images").glob("*/__signature__")):
        st = sig.stat()
        entries[f"images/{sig.parent.name}"] = [st.st_size, st.st_mtime_ns]
    return entries


# --- backup and install ------------------------------------------------------------------


def backup_root(work: Path) -> Path:
    return work / "backups" / "aotriton"


def aotriton_files(lib: Path) -> list[Path]:
    files = [*lib.glob("libaotriton_v2.so*"), *lib.glob("pyaotriton*.so")]
    if (lib / "aotriton.images").exists():
        files.append(lib / "aotriton.images")
    return sorted(files)


def shipped_files(torch: Path) -> list[Path]:
    """aotriton_files of torch/lib that torch's own RECORD lists: after pip reinstalled torch
    over an AOTriton we had swapped in, what pip did not know of (our pyaotriton, say) is still
    there and is not what this torch shipped. Without a RECORD, every AOTriton entry."""
    lib = torch / "lib"
    infos = sorted(torch.parent.glob("torch-*.dist-info"))
    try:
        lines = (infos[-1] / "RECORD").read_text(encoding="utf-8").splitlines() if infos else []
    except OSError:
        lines = []
    prefix = f"{torch.name}/lib/"
    listed = {
        line.split(",", 1)[0][len(prefix) :].split("/", 1)[0]
        for line in lines
        if line.startswith(prefix)
    }
    files = aotriton_files(lib)
    return [f for f in files if f.name in listed] if listed else files


def copy_entry(src: Path, dst: Path) -> None:
    if src.is_symlink():
        dst.symlink_to(os.readlink(src))
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst)


def _walk(root: Path) -> Iterator[Path]:
    """root itself when it is a file or link, else every file and link below it."""
    if root.is_symlink() or not root.is_dir():
        yield root
        return
    for folder, dirs, files in os.walk(root):
        base = Path(folder)
        for name in sorted(files):
            yield base / name
        for name in sorted(dirs):
            if (base / name).is_symlink():
                yield base / name


def manifest_of(folder: Path, names: list[str], *, hashes: bool = True) -> dict[str, Any]:
    """{relative path: [size, sha256]} for files, {relative path: {'link': target}} for links
    (hashes=False: [size, None], a quick look)."""
    entries: dict[str, Any] = {}
    for name in names:
        for path in _walk(folder / name):
            rel = path.relative_to(folder).as_posix()
            if path.is_symlink():
                entries[rel] = {"link": os.readlink(path)}
            else:
                entries[rel] = [path.stat().st_size, stamps.file_sha256(path) if hashes else None]
    return entries


def verify_backup(backup: Path, *, force: bool = False, quick: bool = False) -> dict[str, Any]:
    """The backup's record, after checking every file against the manifest written with it;
    anything missing, extra, changed or unreadable is refused in one line. quick: sizes only
    (reusing a backup at install time; --restore reads every byte)."""
    record_path = backup / "backup.json"
    refuse = f"refusing to restore from {backup}; nothing was changed"
    try:
        info = json.loads(record_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"no backup record {record_path}: {refuse}") from None
    except UnicodeDecodeError:
        raise UserError(f"backup record {record_path} is not UTF-8 (damaged): {refuse}") from None
    except ValueError as e:
        raise UserError(f"backup record {record_path} is damaged ({e}): {refuse}") from None
    files = info.get("files") if isinstance(info, dict) else None
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        raise UserError(f"backup record {record_path} lists no files: {refuse}")
    manifest = info.get("manifest")
    if not isinstance(manifest, dict) or not manifest:
        if not force:
            raise UserError(
                f"backup record {record_path} has no manifest (an older backup), so it cannot be "
                f"verified: {refuse} (--force restores it unverified)"
            )
        missing = [f for f in files if not os.path.lexists(backup / f)]
        if missing:
            raise UserError(f"backup {backup} lacks {missing[0]}: {refuse}")
        return info
    try:
        found = manifest_of(backup, files, hashes=not quick)
    except OSError as e:
        why = f"{e.strerror}: {e.filename}"
        raise UserError(f"backup {backup} is unreadable ({why}): {refuse}") from None
    for rel, want in sorted(manifest.items()):
        if rel not in found:
            raise UserError(f"backup {backup} is incomplete: {rel} is missing: {refuse}")
        if quick and isinstance(want, list) and isinstance(found[rel], list):
            want = [want[0], None]
        if found[rel] != want:
            raise UserError(f"backup {backup} is damaged: {rel} is not what was saved: {refuse}")
    extra = sorted(set(found) - set(manifest))
    if extra:
        raise UserError(f"backup {backup} holds {extra[0]}, which its manifest lacks: {refuse}")
    return info


def backup_shipped(torch: Path, work: Path, runner: Runner) -> Path | None:
    """Copy what torch shipped (libaotriton_v2.so*, aotriton.images/, pyaotriton) out of the
    way once, with a manifest (sizes, sha256) that --restore verifies first. Files we installed
    earlier (the marker says so) are not backed up again."""
    lib = torch / "lib"
    marker, stale = current_marker(torch)
    if marker is not None:
        return Path(marker["backup"]) if marker.get("backup") else None
    if stale:
        runner.say(f"{stale}: backing up this torch's own AOTriton")
    shipped = AotritonInstall.read(lib, torch / "include")
    files = shipped_files(torch)
    if not files:
        return None
    identity = torch_identity(torch)
    record_id = (identity["record_sha256"] or "no-record")[:12]
    name = f"torch-{identity['version']}-{record_id}-aotriton-{shipped.runtime or 'none'}"
    target = backup_root(work) / re.sub(r"[^A-Za-z0-9._+-]", "_", name)
    if (target / "backup.json").is_file():
        try:
            info = verify_backup(target, quick=True)
            if info.get("torch") != identity:
                made_for = describe_identity(info.get("torch"))
                raise UserError(f"backup {target} was made for {made_for}")
        except UserError as unusable:  # it must not stand in for torch's files: make it again
            runner.say(f"{unusable}; backing up torch's AOTriton again")
        else:
            runner.say(f"backup of torch's AOTriton already at {target}")
            return target
    if runner.dry_run:
        runner.say(f"[dry-run] would back up {len(files)} AOTriton file(s) from {lib} to {target}")
        return target
    staging = target.with_name(target.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    names = [f.name for f in files]
    for item in files:
        copy_entry(item, staging / item.name)
    record = {
        "torch_dir": str(torch),
        "torch_version": identity["version"],
        "torch": identity,
        "runtime": shipped.runtime,
        "images": shipped.images,
        "files": names,
        "manifest": manifest_of(lib, names),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    stamps.write_text_atomic(staging / "backup.json", json.dumps(record, indent=1) + "\n")
    verify_backup(staging)  # the copy is what the manifest says torch had
    if target.exists():
        shutil.rmtree(target)  # ours, and without a record: an unfinished older backup
    staging.rename(target)
    runner.say(f"backed up torch's AOTriton ({shipped.describe()}) to {target}")
    return target


def read_marker(lib: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((lib / MARKER).read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def current_marker(torch: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(our marker, None) when torch/lib holds an AOTriton we installed into this very torch;
    (None, why) when the marker was written for another torch install: pip reinstalled torch
    since (the marker is not in the wheel's RECORD, so pip leaves it behind), and torch/lib
    holds that torch's own AOTriton again; (None, None) without a marker."""
    lib = torch / "lib"
    marker = read_marker(lib)
    if marker is None:
        return None, None
    here = torch_identity(torch)
    recorded = marker.get("torch")
    if recorded is None:  # written before markers carried the identity: the version at least
        recorded = {"version": marker.get("torch_version"), "record_sha256": None}
        if recorded["version"] == here["version"]:
            return marker, None
    elif recorded == here:
        return marker, None
    return None, (
        f"{lib / MARKER} was written for {describe_identity(recorded)}, but the env's torch is "
        f"{describe_identity(here)} (reinstalled since)"
    )


def env_prefix_of(torch: Path) -> Path:
    """<prefix> of <prefix>/lib/python3.X/site-packages/torch (site_packages' layout)."""
    return torch.parents[3]


def replace_in_torch(
    torch: Path, *, what: str, session: str, remove: list[str], stage: Callable[[Path], list[str]]
) -> list[str]:
    """Swap AOTriton entries of torch/lib as one transaction (scripts.plumbing.transaction)."""
    return transaction.replace_entries(
        env_prefix_of(torch),
        torch / "lib",
        label="aotriton",
        what=what,
        session=session,
        remove=remove,
        stage=stage,
    )


def install_into_torch(
    new: AotritonInstall,
    torch: Path,
    *,
    record: dict[str, Any],
    expected_soname: str | None,
    runner: Runner,
    session: str = "build_aotriton",
) -> list[str]:
    """Replace torch/lib's AOTriton with new (runtime + symlink, aotriton.images/, pyaotriton,
    our marker) as one transaction. Returns the installed names."""
    lib = torch / "lib"
    real = f"libaotriton_v2.so.{new.runtime}"
    if runner.dry_run:
        runner.say(
            f"[dry-run] would install {real}, libaotriton_v2.so, aotriton.images/ into {lib}"
        )
        return [real]

    def stage(staging: Path) -> list[str]:
        shutil.copy2(new.lib / real, staging / real)
        (staging / "libaotriton_v2.so").symlink_to(real)
        names = [real, "libaotriton_v2.so"]
        if expected_soname and expected_soname not in names:
            # torch's libtorch_hip links the full-version soname it was built with.
            (staging / expected_soname).symlink_to(real)
            names.append(expected_soname)
        transaction.fault_point("staged:runtime")
        if (new.lib / "aotriton.images").is_dir():
            shutil.copytree(new.lib / "aotriton.images", staging / "aotriton.images", symlinks=True)
            names.append("aotriton.images")
        for py in new.pyaotriton:
            shutil.copy2(py, staging / py.name)
            names.append(py.name)
        text = json.dumps(record, indent=1, default=str) + "\n"
        (staging / MARKER).write_text(text, encoding="utf-8")
        return [*names, MARKER]

    old = [
        item.name
        for item in aotriton_files(lib)
        # a runtime-only install keeps the images next to it
        if item.name != "aotriton.images" or (new.lib / "aotriton.images").is_dir()
    ]
    names = replace_in_torch(
        torch,
        what=f"install of AOTriton {new.runtime} ({session})",
        session=session,
        remove=[*old, MARKER],
        stage=stage,
    )
    return names[:-1]


def restore_into_torch(torch: Path, backup: Path, info: dict[str, Any], session: str) -> None:
    """Put the verified backup's entries back in torch/lib, dropping ours (and our marker)."""
    lib = torch / "lib"

    def stage(staging: Path) -> list[str]:
        for name in info["files"]:
            copy_entry(backup / name, staging / name)
            transaction.fault_point(f"staged:{name}")
        if info.get("manifest") and manifest_of(staging, info["files"]) != info["manifest"]:
            raise UserError(f"copying {backup} to {staging} gave other files; nothing changed")
        return list(info["files"])

    replace_in_torch(
        torch,
        what=f"restore of AOTriton {info.get('runtime')} from {backup} ({session})",
        session=session,
        remove=[*(item.name for item in aotriton_files(lib)), MARKER],
        stage=stage,
    )


def backup_info(backup: Path) -> dict[str, Any] | None:
    try:
        return json.loads((backup / "backup.json").read_text())
    except (OSError, ValueError):
        return None
