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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.env import archs
from scripts.plumbing import stamps
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


def torch_dir(prefix: Path) -> Path:
    site = site_packages(prefix)
    torch = site / "torch"
    if not (torch / "__init__.py").is_file():
        raise UserError(
            f"no torch in the env ({site}); install it first: nox -s setup_env -- --with-torch, "
            "or nox -s build_pytorch install_wheels"
        )
    return torch


def torch_version(torch: Path) -> str:
    infos = sorted(torch.parent.glob("torch-*.dist-info"))
    if infos:
        return infos[-1].name[len("torch-") : -len(".dist-info")]
    text = (torch / "version.py").read_text() if (torch / "version.py").is_file() else ""
    match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
    return match.group(1) if match else "unknown"


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


def copy_entry(src: Path, dst: Path) -> None:
    if src.is_symlink():
        dst.symlink_to(os.readlink(src))
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst)


def remove_entry(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def backup_shipped(torch: Path, work: Path, runner: Runner) -> Path | None:
    """Copy what torch shipped (libaotriton_v2.so*, aotriton.images/, pyaotriton) out of the
    way once. Files we installed earlier (the marker says so) are not backed up again."""
    lib = torch / "lib"
    marker = read_marker(lib)
    if marker is not None:
        return Path(marker["backup"]) if marker.get("backup") else None
    shipped = AotritonInstall.read(lib, torch / "include")
    files = aotriton_files(lib)
    if not files:
        return None
    name = f"torch-{torch_version(torch)}-aotriton-{shipped.runtime or 'unknown'}"
    target = backup_root(work) / re.sub(r"[^A-Za-z0-9._+-]", "_", name)
    if (target / "backup.json").is_file():
        runner.say(f"backup of torch's AOTriton already at {target}")
        return target
    if runner.dry_run:
        runner.say(f"[dry-run] would back up {len(files)} AOTriton file(s) from {lib} to {target}")
        return target
    staging = target.with_name(target.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    for item in files:
        copy_entry(item, staging / item.name)
    record = {
        "torch_dir": str(torch),
        "torch_version": torch_version(torch),
        "runtime": shipped.runtime,
        "images": shipped.images,
        "files": [f.name for f in files],
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    stamps.write_text_atomic(staging / "backup.json", json.dumps(record, indent=1) + "\n")
    staging.rename(target)
    runner.say(f"backed up torch's AOTriton ({shipped.describe()}) to {target}")
    return target


def read_marker(lib: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((lib / MARKER).read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def install_into_torch(
    new: AotritonInstall,
    torch: Path,
    *,
    record: dict[str, Any],
    expected_soname: str | None,
    runner: Runner,
) -> list[str]:
    """Replace torch/lib's AOTriton with new (runtime + symlink, aotriton.images/, pyaotriton).
    Returns the installed names."""
    lib = torch / "lib"
    real = f"libaotriton_v2.so.{new.runtime}"
    if runner.dry_run:
        runner.say(
            f"[dry-run] would install {real}, libaotriton_v2.so, aotriton.images/ into {lib}"
        )
        return [real]
    staging = lib / ".aotriton-staging"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    shutil.copy2(new.lib / real, staging / real)
    (staging / "libaotriton_v2.so").symlink_to(real)
    names = [real, "libaotriton_v2.so"]
    if expected_soname and expected_soname not in names:
        # torch's libtorch_hip links the full-version soname it was built with.
        (staging / expected_soname).symlink_to(real)
        names.append(expected_soname)
    if (new.lib / "aotriton.images").is_dir():
        shutil.copytree(new.lib / "aotriton.images", staging / "aotriton.images", symlinks=True)
        names.append("aotriton.images")
    for py in new.pyaotriton:
        shutil.copy2(py, staging / py.name)
        names.append(py.name)
    for old in aotriton_files(lib):
        if old.name == "aotriton.images" and "aotriton.images" not in names:
            continue  # runtime-only install keeps the images next to it
        remove_entry(old)
    for name in names:
        os.replace(staging / name, lib / name)
    shutil.rmtree(staging)
    stamps.write_text_atomic(lib / MARKER, json.dumps(record, indent=1, default=str) + "\n")
    return names


def backup_info(backup: Path) -> dict[str, Any] | None:
    try:
        return json.loads((backup / "backup.json").read_text())
    except (OSError, ValueError):
        return None
