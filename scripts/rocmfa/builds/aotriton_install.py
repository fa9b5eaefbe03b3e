"""AOTriton in the env's torch: read an install layout, refuse versions torch was not built
for, and install a new one through pip as torch's own wheel repacked (RECORD stays true); a run
killed while pip replaces torch is finished by the next (finish_interrupted). docs/aotriton.md."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import shutil
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheel.wheelfile import WheelFile

from rocmfa.env import archs, session_env
from rocmfa.plumbing import stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError

MARKER = "aotriton.rocmfa.json"  # in torch/lib of our repacked wheel: what we installed
WHEELS = "torch-wheels"  # under the work dir
PIP_WRITES = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}  # not in the wheel
LIB_RE = re.compile(r"libaotriton_v2\.so\.(\d+)\.(\d+)\.(\d+)")
REINSTALL = "reinstall torch with pip (nox -s install_wheels), then rerun"


def site_packages(prefix: Path) -> Path:
    found = sorted((prefix / "lib").glob("python3*/site-packages"))
    if not found:
        raise UserError(f"no site-packages under {prefix}/lib/python3*/ - is the env set up?")
    return found[-1]


def find_torch(prefix: Path, needed: str | None = None) -> Path | None:
    """The env's torch; None, or when needed (why) a UserError, if there is none."""
    torch = site_packages(prefix) / "torch"
    if (torch / "__init__.py").is_file() or needed is None:
        return torch if (torch / "__init__.py").is_file() else None
    raise UserError(
        f"no torch in the env ({torch.parent}){needed}; install it first: nox -s setup_env -- "
        "--with-torch, or nox -s build_pytorch install_wheels"
    )


def dist_version(site: Path, name: str) -> str | None:
    infos = sorted(site.glob(f"{name}-*.dist-info"))
    return infos[-1].name[len(name) + 1 : -len(".dist-info")] if infos else None


def signature_of(text: str) -> str:
    """'X.Y' for a text signature, 'git-<sha1[:12]>' for 0.13b's JSON one, or 'unknown'."""
    if sha := re.search(r'"AOTRITON_GIT_SHA1"\s*:\s*"(\w+)"', text):
        return "git-" + sha[1][:12]
    match = re.search(r"aotriton\s*v?(\d+)\.(\d+)", text)
    return f"{match[1]}.{match[2]}" if match else "unknown"


def image_signatures(images: Path) -> dict[str, str]:  # {'amd-gfx115x': '0.13', ...}
    signatures = sorted(images.glob("*/__signature__")) if images.is_dir() else []
    return {sig.parent.name: signature_of(sig.read_text(errors="replace")) for sig in signatures}


@dataclass(frozen=True)
class AotritonInstall:
    """An AOTriton install layout: <root>/lib/libaotriton_v2.so.X.Y.Z, lib/aotriton.images/."""

    lib: Path
    runtime: str | None
    images: dict[str, str]
    pyaotriton: tuple[Path, ...]

    @classmethod
    def read(cls, lib: Path, include: Path | None = None) -> AotritonInstall:
        found = [p for p in lib.iterdir() if not p.is_symlink()] if lib.is_dir() else []
        versions = [tuple(map(int, m.groups())) for p in found if (m := LIB_RE.fullmatch(p.name))]
        runtime = ".".join(map(str, max(versions))) if versions else None
        config = include / "aotriton" / "config.h" if include else None  # else its headers say
        text = config.read_text() if config and config.is_file() else ""
        parts = re.findall(r"#define\s+AOTRITON_VERSION_(MAJOR|MINOR|PATCH)\s+(\d+)", text)
        if runtime is None and [p[0] for p in parts] == ["MAJOR", "MINOR", "PATCH"]:
            runtime = ".".join(p[1] for p in parts)
        py = tuple(sorted(lib.glob("pyaotriton*.so")))
        return cls(lib, runtime, image_signatures(lib / "aotriton.images"), py)

    def describe(self) -> str:
        images = ", ".join(f"{k}={v}" for k, v in self.images.items()) or "none"
        return f"runtime {self.runtime or 'none'}, images {images}"


def major_minor(version: str | None) -> tuple[int, ...] | None:
    try:
        return archs.aotriton_version_key(version)[:2] if version else None
    except UserError:
        return None


def check_compatible(new: AotritonInstall, torch_shipped: AotritonInstall | None, force: bool):
    """Refuse runtime/image disagreement or a version torch was not built for; force: say them."""
    runtime = major_minor(new.runtime)
    problems = []
    built_from = sorted(sig for sig in new.images.values() if sig.startswith("git-"))
    if len(set(built_from)) > 1:
        commits = ", ".join(built_from)
        problems.append(f"the image packs come from different AOTriton commits ({commits})")
    for pack, sig in new.images.items():  # a JSON signature names a commit, not a version
        if not sig.startswith("git-") and major_minor(sig) != runtime:
            problems.append(
                f"runtime {new.runtime} but {pack}/__signature__ says {sig} (mismatched runtime "
                "and images give hipErrorInvalidValue / all-zero attention)"
            )
    shipped = torch_shipped.runtime if torch_shipped else None
    if shipped is None:
        problems.append("the env's torch ships no AOTriton runtime (built without it?)")
    elif major_minor(shipped) != runtime:
        problems.append(f"torch was built for AOTriton {shipped} but this is {new.runtime}")
    if problems and not force:
        raise UserError(f"refusing to install AOTriton: {problems[0]} (--force to install anyway)")
    return problems


def installed_fingerprint(lib: Path) -> str | None:
    """The sha256 of the RECORD of lib's torch (pip rewrites it on every install)."""
    record = session_env.torch_record(lib.parent.parent)
    return stamps.file_sha256(record) if record is not None and record.is_file() else None


def read_marker(torch: Path) -> dict[str, Any] | None:
    """Our marker, when torch's RECORD lists it (one a killed pip run left is not trusted)."""
    record = session_env.torch_record(torch.parent)
    rel = f"{torch.name}/lib/{MARKER}"
    rows = session_env.record_rows(record) if record is not None and record.is_file() else []
    return stamps.read(torch / "lib" / MARKER) if any(row[0] == rel for row in rows) else None


def wheel_in(folder: Path) -> Path | None:
    return min(folder.glob("*.whl"), default=None) if folder.is_dir() else None


@contextlib.contextmanager
def into_folder(out: Path, name: str) -> Iterator[Path]:
    """<out>.partial/name, renamed to out once written: a kill never leaves a half wheel in out."""
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    yield partial / name
    partial.rename(out)


def original_wheel(torch: Path, work: Path, runner: Runner) -> Path:
    """The wheel our marker names, else (once per RECORD) one rebuilt from torch's files."""
    marker = read_marker(torch)
    if marker is not None:
        wheel = Path(str(marker.get("original")))
        if not wheel.is_file():
            gone = f"{wheel}, torch's own wheel (the env's torch was repacked from it), is gone; "
            raise UserError(gone + REINSTALL)
        return wheel
    site = torch.parent
    if why := session_env.torch_incomplete(site):
        raise UserError(f"the env's torch is incomplete ({why}); {REINSTALL}")
    record = session_env.torch_record(site)
    assert record is not None  # torch_incomplete() said so
    out = work / WHEELS / f"original-{stamps.file_sha256(record)[:16]}"
    if wheel_in(out) is None:
        said = f"rebuild torch's own wheel from {site} and its RECORD in {out}"
        runner.apply(keep_original, site, record, out, say=said)
    return wheel_in(out) or out / "torch.whl"


def keep_original(site: Path, record: Path, out: Path) -> None:
    """The installed files RECORD lists, each checked against it, as a wheel (dist-info last)."""
    info = record.parent
    tag = re.search(r"^Tag: *(\S+)", (info / "WHEEL").read_text(), re.M)  # torch has one
    name = f"{info.name.removesuffix('.dist-info')}-{tag[1] if tag else 'py3-none-any'}.whl"
    rows = sorted(session_env.record_rows(record), key=lambda row: ".dist-info/" in row[0])
    with into_folder(out, name) as dest, WheelFile(dest, "w") as whl:  # it writes the RECORD
        for rel, digest, _size in rows:
            parts = Path(rel).parts  # what pip makes at install is not the wheel's
            made = parts[0] == info.name and parts[-1] in PIP_WRITES
            if made or ".." in parts or "__pycache__" in parts:
                continue
            data = (site / rel).read_bytes()
            sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if "sha256=" + sha != digest:
                raise UserError(
                    f"{site / rel} is not the file torch's RECORD lists (changed since pip "
                    f"installed it); {REINSTALL}"
                )
            whl.writestr(zipfile.ZipInfo.from_file(site / rel, rel), data, zipfile.ZIP_DEFLATED)


def repack(
    original: Path, new: AotritonInstall, marker: dict, expected_soname: str | None, work: Path
) -> Path:
    """original with new's runtime, images (none: torch's stay), pyaotriton and our marker."""
    real = f"libaotriton_v2.so.{new.runtime}"
    # a wheel holds no links: the name torch's libtorch_hip was linked with is a copy too
    aliases = sorted({"libaotriton_v2.so", expected_soname or real} - {real})
    images = new.lib / "aotriton.images"
    sources = [new.lib / real, *new.pyaotriton]
    sources += sorted(p for p in images.rglob("*") if p.is_file())  # none without images
    files = {str(p.relative_to(new.lib)): stamps.file_sha256(p) for p in sources}
    key = stamps.digest([str(original), files, aliases, marker])
    out = work / WHEELS / f"aotriton-{key[:16]}"
    if (done := wheel_in(out)) is not None:
        return done
    adds = {f"torch/lib/{name}": new.lib / real for name in aliases}
    adds |= {f"torch/lib/{rel}": new.lib / rel for rel in files}
    gone = ("torch/lib/libaotriton_v2.so", "torch/lib/pyaotriton", f"torch/lib/{MARKER}")
    gone += ("torch/lib/aotriton.images/",) if images.is_dir() else ()
    text = json.dumps({**marker, "wheel": out.name}, indent=1, default=str) + "\n"
    with (
        into_folder(out, original.name) as dest,
        WheelFile(original) as old,  # its reads are checked against its RECORD
        WheelFile(dest, "w") as whl,
    ):
        for rel, path in adds.items():
            whl.write(path, rel)
        whl.writestr(f"torch/lib/{MARKER}", text)
        meta = old.dist_info_path + "/"  # last in the wheel, as pip writes it last
        for info in sorted(old.infolist(), key=lambda i: i.filename.startswith(meta)):
            if info.filename != old.record_path and not info.filename.startswith(gone):
                kept = zipfile.ZipInfo(info.filename, info.date_time)
                kept.external_attr = info.external_attr
                whl.writestr(kept, old.read(info), zipfile.ZIP_DEFLATED)
    return out / original.name


def pip_install(prefix: Path, wheel: Path, runner: Runner) -> None:
    """pip replaces torch with wheel; until done, a record names it (finish_interrupted)."""
    runner.apply(write_pending, prefix, wheel)
    pip = [prefix / "bin" / "python", "-m", "pip", "install", "--no-deps", "--force-reinstall"]
    runner.run([*pip, wheel])
    runner.apply(session_env.pip_pending_path(prefix).unlink)


def write_pending(prefix: Path, wheel: Path) -> None:
    site = site_packages(prefix)
    pending = session_env.pip_pending_path(prefix)
    replaced = pending.with_name("pip-replaced")
    record = session_env.torch_record(site)
    if record is not None and session_env.torch_incomplete(site) is None:
        shutil.rmtree(replaced, ignore_errors=True)
        shutil.copytree(record.parent, replaced / record.parent.name)
    text = json.dumps({"wheel": str(wheel), "replaced": str(replaced)}) + "\n"
    stamps.write_text_atomic(pending, text)


def finish_interrupted(prefix: Path, runner: Runner) -> None:
    """Finish a killed pip install of a torch wheel; a whole torch is kept as it is."""
    path = session_env.pip_pending_path(prefix)
    pending = session_env.pip_pending(prefix)
    if pending is None:
        return
    site = site_packages(prefix)
    if (why := session_env.torch_incomplete(site)) is None:
        return runner.apply(path.unlink, missing_ok=True)
    wheel = Path(str(pending.get("wheel")))
    if not wheel.is_file():
        why = f"the env's torch is incomplete ({why}) and {wheel}, whose install was killed"
        raise UserError(f"{why}, is gone; {REINSTALL}")
    runner.say(f"the env's torch is incomplete ({why}): finishing the killed install of {wheel}")
    record = session_env.torch_record(site)
    if record is None or not record.is_file():
        # pip was killed after moving the old torch's dist-info away: put it back, so that
        # pip removes what the old RECORD lists before it installs the wheel again
        for info in Path(str(pending.get("replaced"))).glob("torch-*.dist-info"):
            runner.apply(shutil.copytree, info, site / info.name, dirs_exist_ok=True)
    pip_install(prefix, wheel, runner)


def install_into_torch(
    new: AotritonInstall, torch: Path, marker: dict, expected_soname: str | None, work: Path, runner
) -> tuple[Path, Path]:
    """new into the env's torch through pip; (torch's own wheel, the one installed)."""
    original = original_wheel(torch, work, runner)
    marker = {**marker, "original": str(original)}
    wheel = repack(original, new, marker, expected_soname, work)
    if (read_marker(torch) or {}).get("wheel") == wheel.parent.name:
        runner.say(f"the env's torch is already {wheel}")
    else:
        pip_install(torch.parents[3], wheel, runner)  # <prefix>/lib/python3.X/site-packages/torch
    return original, wheel


def restore_torch(torch: Path, work: Path, runner: Runner) -> None:
    """Reinstall the wheel torch was repacked from (nothing when torch is not our repack)."""
    if read_marker(torch) is None:
        return runner.say(f"nothing to restore: {torch / 'lib'} holds torch's own AOTriton")
    pip_install(torch.parents[3], original_wheel(torch, work, runner), runner)
    runner.say(f"restored torch's own AOTriton ({AotritonInstall.read(torch / 'lib').runtime})")
