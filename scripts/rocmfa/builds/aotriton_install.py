"""AOTriton in the env's torch: read an install layout (runtime version, image signatures),
refuse versions torch was not built for, and install a new one as a wheel.

The new AOTriton goes in through pip, so torch's RECORD stays true and pip is the transaction:
the wheel torch was installed from is rebuilt from its installed files and RECORD (each file
checked against RECORD's sha256), repacked with the new runtime and images (`wheel unpack` /
`wheel pack`) and installed with `pip install --force-reinstall --no-deps`. Both wheels stay in
<work>/torch-wheels/, keyed by their inputs; `--restore` reinstalls the original. A run killed
while pip replaces torch is finished by the next run of the session (finish_interrupted), from
<env>/.rocmfa/pip-install.json (the wheel pip was installing).

Shared by build_aotriton (built from source) and aotriton_release (prebuilt), so neither
imports the other.
"""

from __future__ import annotations

import base64
import csv
import glob
import hashlib
import json
import re
import shutil
import sys
import urllib.parse
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmfa.env import archs, condaenv
from rocmfa.plumbing import stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError

MARKER = "aotriton.rocmfa.json"  # in torch/lib of our repacked wheel: what we installed
WHEELS = "torch-wheels"  # under the work dir
# Written by pip at install time, not part of the wheel (PEP 376/610/627).
PIP_WRITES = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
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


# --- torch as pip installed it ------------------------------------------------------------


def installed_fingerprint(lib: Path) -> str | None:
    """Which torch install lib belongs to: the sha256 of its RECORD, which pip rewrites on
    every install (None without one)."""
    record = condaenv.torch_record(lib.parent.parent)
    return stamps.file_sha256(record) if record is not None and record.is_file() else None


def read_marker(torch: Path) -> dict[str, Any] | None:
    """Our marker, when the env's torch is a wheel we repacked: its RECORD lists the marker
    (one a killed pip run left behind is not ours to trust)."""
    record = condaenv.torch_record(torch.parent)
    rel = f"{torch.name}/lib/{MARKER}"
    if record is None or not record.is_file():
        return None
    if all(row[0] != rel for row in condaenv.record_rows(record)):
        return None
    try:
        data = json.loads((torch / "lib" / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def env_prefix_of(torch: Path) -> Path:
    """<prefix> of <prefix>/lib/python3.X/site-packages/torch (site_packages' layout)."""
    return torch.parents[3]


# --- the wheels: torch's own, rebuilt from its RECORD, and ours with the new AOTriton --------


def wheel_in(folder: Path) -> Path | None:
    found = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    return found[0] if found else None


def pack(tree: Path, out: Path, runner: Runner) -> Path:
    """`wheel pack` the unpacked wheel at tree into the folder out: a kill leaves only
    out.partial (redone by the next run), never a half wheel in out."""
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    runner.run([sys.executable, "-m", "wheel", "pack", "--dest-dir", partial, tree])
    partial.rename(out)
    return wheel_in(out) or out


def copy_checked(src: Path, dst: Path, digest: str) -> bool:
    """Copy src to dst; True when its sha256 is the RECORD digest ('sha256=<urlsafe b64>')."""
    sha = hashlib.sha256()
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(1 << 20):
            sha.update(chunk)
            fout.write(chunk)
    shutil.copymode(src, dst)
    b64 = base64.urlsafe_b64encode(sha.digest()).rstrip(b"=").decode()
    return digest == f"sha256={b64}"


def wheel_files(info: str, rows: list[list[str]]) -> dict[str, str]:
    """{path: RECORD digest} of what a wheel itself holds: pip makes console scripts, .pyc and
    its own dist-info files at install time (info: the dist-info folder's name)."""
    kept = {}
    for rel, digest, _size in rows:
        parts = Path(rel).parts
        pip_made = parts[0] == info and parts[-1] in PIP_WRITES
        if not (pip_made or ".." in parts or "__pycache__" in parts):
            kept[rel] = digest
    return kept


def installed_from(record: Path, files: dict[str, str]) -> Path | None:
    """The wheel file pip installed torch from (its direct_url.json), when it is still there
    and holds exactly the files RECORD lists; None when torch came from an index."""
    try:
        url = json.loads((record.parent / "direct_url.json").read_text(encoding="utf-8"))["url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    wheel = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
    if not (url.startswith("file:") and wheel.suffix == ".whl" and wheel.is_file()):
        return None
    try:
        with zipfile.ZipFile(wheel) as whl:
            text = whl.read(f"{record.parent.name}/RECORD").decode("utf-8")
    except (OSError, KeyError, UnicodeDecodeError, zipfile.BadZipFile):
        return None
    rows = [row for row in csv.reader(text.splitlines()) if len(row) == 3]
    return wheel if wheel_files(record.parent.name, rows) == files else None


def original_wheel(torch: Path, work: Path, runner: Runner) -> Path:
    """The wheel the env's torch was installed from: the one our marker names when torch is
    our repack; else, kept once per RECORD in the work dir, the wheel file pip installed it
    from, or (torch came from an index) one rebuilt from torch's installed files, each checked
    against the sha256 its RECORD lists."""
    marker = read_marker(torch)
    if marker is not None:
        wheel = Path(str(marker.get("original")))
        if not wheel.is_file():
            raise UserError(
                f"{wheel}, torch's own wheel (the env's torch was repacked from it), is gone; "
                "reinstall torch with pip (nox -s install_wheels), then rerun"
            )
        return wheel
    site = torch.parent
    why = condaenv.torch_incomplete(site)
    if why:
        raise UserError(
            f"the env's torch is incomplete ({why}); reinstall it with pip "
            "(nox -s install_wheels), then rerun"
        )
    record = condaenv.torch_record(site)
    assert record is not None  # torch_incomplete() said so
    out = work / WHEELS / f"original-{stamps.file_sha256(record)[:16]}"
    found = wheel_in(out)
    if found is not None:
        return found
    files = wheel_files(record.parent.name, condaenv.record_rows(record))
    source = installed_from(record, files)
    how = f"the wheel pip installed it from, {source}" if source else f"{site} and its RECORD"
    if runner.dry_run:
        runner.say(f"[dry-run] would keep torch's own wheel (from {how}) in {out}")
        return out / "torch.whl"
    if source is not None:
        partial = out.with_name(out.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        shutil.copy2(source, partial / source.name)
        partial.rename(out)
        return out / source.name
    tree = out.with_name(out.name + ".tree")
    shutil.rmtree(tree, ignore_errors=True)
    for rel, digest in files.items():
        if not copy_checked(site / rel, tree / rel, digest):
            raise UserError(
                f"{site / rel} is not the file torch's RECORD lists (changed since pip installed "
                "it); reinstall torch with pip (nox -s install_wheels), then rerun"
            )
    wheel = pack(tree, out, runner)
    shutil.rmtree(tree)
    runner.say(f"torch's own wheel, rebuilt from {how}: {wheel}")
    return wheel


def repack(
    original: Path,
    new: AotritonInstall,
    marker: dict[str, Any],
    expected_soname: str | None,
    work: Path,
    runner: Runner,
) -> Path:
    """original with new's runtime, images (without any, torch's stay), pyaotriton and our
    marker in torch/lib; made once per inputs (<work>/torch-wheels/aotriton-<key>/)."""
    real = f"libaotriton_v2.so.{new.runtime}"
    # torch's libtorch_hip links the full-version soname it was built with; a wheel holds no
    # links, so each name is a copy
    aliases = sorted({"libaotriton_v2.so", expected_soname or real} - {real})
    images = new.lib / "aotriton.images"
    sources = [new.lib / real, *new.pyaotriton]
    sources += sorted(p for p in images.rglob("*") if p.is_file()) if images.is_dir() else []
    key_inputs = {
        "original": str(original),
        "files": {str(p.relative_to(new.lib)): stamps.file_sha256(p) for p in sources},
        "aliases": aliases,
        "marker": marker,
    }
    key = hashlib.sha256(json.dumps(key_inputs, sort_keys=True, default=str).encode())
    out = work / WHEELS / f"aotriton-{key.hexdigest()[:16]}"
    found = wheel_in(out)
    if found is not None:
        return found
    tree = out.with_name(out.name + ".tree")
    shutil.rmtree(tree, ignore_errors=True)
    runner.run([sys.executable, "-m", "wheel", "unpack", "--dest", tree, original])
    (root,) = tree.iterdir()
    lib = root / "torch" / "lib"
    for old in [*lib.glob("libaotriton_v2.so*"), *lib.glob("pyaotriton*.so"), lib / MARKER]:
        old.unlink(missing_ok=True)
    if images.is_dir():
        shutil.rmtree(lib / "aotriton.images", ignore_errors=True)
        shutil.copytree(images, lib / "aotriton.images")
    for name in [real, *aliases]:
        shutil.copy2(new.lib / real, lib / name)
    for py in new.pyaotriton:
        shutil.copy2(py, lib / py.name)
    text = json.dumps({**marker, "wheel": out.name}, indent=1, default=str) + "\n"
    (lib / MARKER).write_text(text, encoding="utf-8")
    wheel = pack(root, out, runner)
    shutil.rmtree(tree)
    return wheel


# --- pip installs them --------------------------------------------------------------------


def pip_install(python: Path, wheel: Path, prefix: Path, runner: Runner) -> None:
    """pip replaces the env's torch with wheel. Until pip is done, the env's state folder
    names the wheel and keeps the dist-info of the torch it replaces, so the next run can
    finish a run killed meanwhile (finish_interrupted)."""
    if not runner.dry_run:
        site, pending = site_packages(prefix), condaenv.pip_pending_path(prefix)
        replaced = pending.with_name("pip-replaced")
        record = condaenv.torch_record(site)
        if record is not None and condaenv.torch_incomplete(site) is None:
            shutil.rmtree(replaced, ignore_errors=True)
            shutil.copytree(record.parent, replaced / record.parent.name)
        text = json.dumps({"wheel": str(wheel), "replaced": str(replaced)}) + "\n"
        stamps.write_text_atomic(pending, text)
    runner.run([python, "-m", "pip", "install", "--no-deps", "--force-reinstall", wheel])
    if not runner.dry_run:
        condaenv.pip_pending_path(prefix).unlink()


def finish_interrupted(python: Path, prefix: Path, runner: Runner) -> None:
    """Finish the pip install of a torch wheel that a killed run left undone. A whole torch
    (pip was done, or torch was reinstalled by hand since) is kept as pip installed it."""
    path, pending = condaenv.pip_pending_path(prefix), condaenv.pip_pending(prefix)
    if pending is None:
        return
    site = site_packages(prefix)
    why = condaenv.torch_incomplete(site)
    if why is None:
        if not runner.dry_run:
            path.unlink(missing_ok=True)
        return
    wheel = Path(str(pending.get("wheel")))
    if not wheel.is_file():
        raise UserError(
            f"the env's torch is incomplete ({why}) and {wheel}, whose install was killed, is "
            "gone; reinstall torch with pip (nox -s install_wheels)"
        )
    runner.say(f"the env's torch is incomplete ({why}): finishing the killed install of {wheel}")
    record = condaenv.torch_record(site)
    if not runner.dry_run and (record is None or not record.is_file()):
        # pip was killed after moving the old torch's dist-info away: put it back, so that
        # pip removes what the old RECORD lists before it installs the wheel again
        for info in Path(str(pending.get("replaced"))).glob("torch-*.dist-info"):
            shutil.copytree(info, site / info.name, dirs_exist_ok=True)
    pip_install(python, wheel, prefix, runner)


def install_into_torch(
    new: AotritonInstall,
    torch: Path,
    *,
    marker: dict[str, Any],
    expected_soname: str | None,
    python: Path,
    work: Path,
    runner: Runner,
) -> tuple[Path, Path]:
    """Install new into the env's torch as a repacked torch wheel, through pip. Returns
    (torch's own wheel, the one installed)."""
    original = original_wheel(torch, work, runner)
    marker = {**marker, "original": str(original)}
    wheel = repack(original, new, marker, expected_soname, work, runner)
    if (read_marker(torch) or {}).get("wheel") == wheel.parent.name:
        runner.say(f"the env's torch is already {wheel}")
    else:
        pip_install(python, wheel, env_prefix_of(torch), runner)
    return original, wheel


def restore_torch(torch: Path, python: Path, work: Path, runner: Runner) -> None:
    """Put torch's own AOTriton back: reinstall the wheel torch was repacked from (none
    needed when torch is not our repack: a rerun after a killed restore, or no swap yet)."""
    if read_marker(torch) is None:
        runner.say(f"nothing to restore: {torch / 'lib'} holds torch's own AOTriton")
        return
    original = original_wheel(torch, work, runner)
    pip_install(python, original, env_prefix_of(torch), runner)
    runner.say(f"restored torch's own AOTriton ({AotritonInstall.read(torch / 'lib').runtime})")
