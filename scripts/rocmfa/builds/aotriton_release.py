"""build_aotriton's release path: AOTriton's runtime and this arch's image pack, checked against
the sha256 in pins/aotriton.toml or torch's aotriton.cmake ($ROCMFA_AOTRITON_BASE_URL: a mirror)."""

import functools
import os
import platform
import re
import shutil
import tarfile
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmfa.plumbing import downloads, options, stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.sources.pins import Pin

DEFAULT_BASE_URL = "https://github.com/ROCm/aotriton/releases/download/"
RUNTIME_NAME = "aotriton-{version}-{manylinux}_{hostarch}-rocm{rocm}-shared.tar.gz"
IMAGES_NAME = "aotriton-{version}-images-amd-{pack}.tar.gz"


@dataclass(frozen=True)
class Release:
    version: str
    base_url: str
    runtime_name: str
    images_name: str
    runtime: Mapping[str, tuple[str, str]]  # "7.15" -> (manylinux, sha256)
    images: Mapping[str, str]  # "gfx115x" -> sha256
    source: str


def release_info(pin: Pin, version: str) -> Release:
    table = pin.data.get("release")
    where = f"{pin.source} [aotriton.release]"
    runtime: dict[str, tuple[str, str]] = {}  # "7.15" -> (manylinux, sha256)
    if isinstance(table, dict) and table.get("version", version) == version:
        for rocm, entry in (table.get("runtime_sha256") or {}).items():
            pair = isinstance(entry, list) and len(entry) == 2
            if not (pair and all(isinstance(e, str) for e in entry)):
                raise UserError(f"{where}: runtime_sha256.{rocm} must be [manylinux, sha256]")
            runtime[str(rocm)] = (entry[0], entry[1].lower())
        images = {str(k): str(v).lower() for k, v in (table.get("image_sha256") or {}).items()}
        base = table.get("base_url", DEFAULT_BASE_URL)
        source = where
        names = (table.get("runtime", RUNTIME_NAME), table.get("images", IMAGES_NAME))
    else:
        resolved = pin.data.get("pytorch_cmake")
        if (cmake := getattr(resolved, "cmake", None)) is None or cmake.version != version:
            raise UserError(
                f"no release sums for AOTriton {version}: add an [aotriton.release] table with "
                "version, runtime_sha256 and image_sha256 to pins/aotriton.toml"
            )
        got = cmake.lists.get
        images = {}
        lists = (got(f"__AOTRITON_{n}_LIST", ()) for n in ("ROCM", "MANYLINUX", "SHA256"))
        for r, m, sha in zip(*lists, strict=False):  # list(FIND): the first of a ROCm twice
            runtime.setdefault(r.removeprefix("rocm"), (m, sha.lower()))
        image_names = got("__AOTRITON_IMAGE_LIST", ()) or got("__AOTRITON_IMAGE", ())
        image_sums = got("__AOTRITON_IMAGE_SHA256_LIST", ()) or got("__AOTRITON_IMAGE_SHA256", ())
        for name, sha in zip(image_names, image_sums, strict=False):
            images.setdefault(name.removeprefix("amd-"), sha.lower())
        z = (got("__AOTRITON_Z") or ("gz",))[0] or "gz"  # the archive suffix (old files: bz2)
        names = tuple(n.replace(".tar.gz", f".tar.{z}") for n in (RUNTIME_NAME, IMAGES_NAME))
        base = DEFAULT_BASE_URL
        source = resolved.source
    base = (options.environment().aotriton_base_url or base).rstrip("/") + "/"
    return Release(version, base, names[0], names[1], runtime, images, source)


def real_sum(sha256: str, what: str, source: str) -> str:
    """A published sha256, or UserError (all zeros: 0.14b's placeholder for an unpublished one)."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256 or ""):
        raise UserError(f"{source}: the sha256 of {what} is not 64 hex digits: {sha256!r}")
    if set(sha256) == {"0"}:
        raise UserError(
            f"{source}: the sha256 of {what} is a placeholder (all zeros), not a real release "
            "sum; that tarball is not published - build from source instead"
        )
    return sha256


def extract(archive: Path, target: Path) -> Path:
    """Extract into target (fresh); the install root: the archive's single top directory if any."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    try:
        shutil.unpack_archive(archive, target, filter="data")
    except (tarfile.TarError, OSError) as e:  # shutil.ReadError is an OSError
        raise UserError(f"cannot extract {archive}: {e}") from None
    entries = list(target.iterdir())
    one_top = len(entries) == 1 and entries[0].is_dir() and not (target / "lib").exists()
    return entries[0] if one_top else target


def fetch_release(ctx, runner: Runner, into: Path, rocm: str):
    """The runtime for ROCm `rocm` ('7.15') and this arch's pack, sha256-checked, into `into`."""
    info = release_info(ctx.pin, ctx.version)
    pack = ctx.pack.removeprefix("amd-")
    if pack not in info.images:
        raise UserError(f"AOTriton {info.version} has no image pack amd-{pack} ({info.source})")
    manylinux, runtime_sha = info.runtime.get(rocm) or ("", "")
    if not runtime_sha:
        raise UserError(
            f"AOTriton {info.version} has no prebuilt runtime for ROCm {rocm} (has "
            f"{', '.join(sorted(info.runtime)) or 'none'}); build from source instead"
        )
    runner.say(f"release sums from {info.source}")
    fields = dict(
        version=info.version, hostarch=platform.machine(), pack=pack, rocm=rocm, manylinux=manylinux
    )
    of = f"of AOTriton {info.version}"
    wanted = {  # both sums checked before any download
        info.runtime_name: real_sum(runtime_sha, f"the ROCm {rocm} runtime {of}", info.source),
        info.images_name: real_sum(info.images[pack], f"image pack amd-{pack} {of}", info.source),
    }
    cache = options.downloads_dir(ctx.work) / "aotriton" / info.version
    tars = []
    for name, sha in wanted.items():
        dest = cache / name.format(**fields)
        url = f"{info.base_url}{info.version}/{dest.name}"
        if not (dest.is_file() and stamps.file_sha256(dest) == sha):
            host = urllib.parse.urlsplit(url).netloc or url
            fix = f"{host} unreachable or offline? set $ROCMFA_AOTRITON_BASE_URL to a mirror of it"
            fetch = functools.partial(downloads.fetch_pinned, fix=fix, say=runner.say)
            runner.apply(fetch, url, dest, sha, say=f"download {url} (sha256 {sha[:12]}…)")
        tars.append(dest)
    staging = options.build_dir(ctx.work, "aotriton-release") / f"{info.version}-rocm{rocm}-{pack}"
    say = f"unpack the {info.version} runtime and amd-{pack} into {into}"
    runner.apply(unpack, *tars, pack, staging, into, say=say)


def unpack(runtime_tar: Path, images_tar: Path, pack: str, staging: Path, into: Path):
    """The runtime with this arch's images into `into` (replaced), through a staging dir."""
    root = extract(runtime_tar, staging / "runtime")
    pack_dir = extract(images_tar, staging / "images") / "lib" / "aotriton.images" / f"amd-{pack}"
    if not (pack_dir / "__signature__").is_file():
        raise UserError(f"{images_tar.name}: no lib/aotriton.images/amd-{pack}/__signature__")
    images_target = root / "lib" / "aotriton.images"
    shutil.rmtree(images_target, ignore_errors=True)  # the runtime's own, if any
    images_target.mkdir(parents=True)
    os.replace(pack_dir, images_target / f"amd-{pack}")
    shutil.rmtree(into, ignore_errors=True)
    into.parent.mkdir(parents=True, exist_ok=True)
    os.replace(root, into)  # both under <work>/build
    shutil.rmtree(staging)
