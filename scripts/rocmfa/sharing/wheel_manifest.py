"""The wheel-set manifest (rocmfa-wheelset/1): wheels with Requires-Dist, arch and family, pins,
the torch wheel's AOTriton, report summaries; travels as a tiny wheel `rocmfa-wheelset`
<YYYYMMDD.HHMMSS>+<python>.<set id> so every index form reads it. docs/pytorch-and-ck.md."""

from __future__ import annotations

import base64
import email.parser
import hashlib
import io
import json
import re
import time
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from rocmfa.builds import aotriton_install, build_pytorch, kernel_check
from rocmfa.env import archs
from rocmfa.plumbing import paths, stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError

SCHEMA = "rocmfa-wheelset/1"
MANIFEST_PROJECT = "rocmfa-wheelset"
MANIFEST_DIST = "rocmfa_wheelset"
MANIFEST_MEMBER = f"{MANIFEST_DIST}/manifest.json"
REPORT_KINDS = {
    "sdpa-backend-check/1": "backend_check",
    "sdpa-validate/1": "validate",
    "sdpa-bench/1": "bench",
    kernel_check.SUMMARY_SCHEMA: "kernel_check",
}


def family_of(arch: archs.Arch) -> str:
    """TheRock's index folder v2/<family>/: legacy_family, therock_family, or the sub-family."""
    if arch.legacy_family or arch.therock_family:
        return arch.legacy_family or arch.therock_family
    chain = archs.packaging_chain(arch.name)
    return chain[1] if len(chain) > 1 else arch.name


def set_id(wheels: Iterable[Mapping[str, Any]]) -> str:
    """16 hex digits naming a wheel set by its files and their sha256 (same set, same id)."""
    lines = sorted(f"{Path(w['file']).name} {w['sha256']}\n" for w in wheels)
    return hashlib.sha256("".join(lines).encode()).hexdigest()[:16]


def requires_of(wheel: Path) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            member = next(n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
            metadata = email.parser.BytesHeaderParser().parsebytes(zf.read(member))
    except (OSError, zipfile.BadZipFile, StopIteration) as e:
        raise UserError(
            f"{wheel.name}: no readable METADATA ({e or 'none in the wheel'})"
        ) from None
    return list(metadata.get_all("Requires-Dist") or [])


def write_lines(path: Path, lines: list[str], runner: Runner) -> Path:
    text = "\n".join(lines) + "\n"
    runner.apply(path.parent.mkdir, parents=True, exist_ok=True)
    runner.apply(stamps.write_text_atomic, path, text, say=f"write {path}: {' '.join(lines)}")
    return path


# --- AOTriton inside the torch wheel ----------------------------------------------------------


def aotriton_in_wheel(wheel: Path) -> dict[str, Any]:
    """{'runtime': 'X.Y.Z' | None, 'images': {pack: '0.13' | 'git-<sha12>'}} from torch/lib/."""
    runtime: tuple[int, ...] | None = None
    images: dict[str, str] = {}
    try:
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if not name.startswith("torch/lib/"):
                    continue
                base = name.rsplit("/", 1)[-1]
                match = aotriton_install.LIB_RE.fullmatch(base)
                if match:
                    version = tuple(int(g) for g in match.groups())
                    runtime = max(runtime or version, version)
                elif name.startswith("torch/lib/aotriton.images/") and base == "__signature__":
                    pack = name.split("/")[3]
                    text = zf.read(name).decode(errors="replace")
                    images[pack] = aotriton_install.signature_of(text)
    except (OSError, zipfile.BadZipFile) as e:
        raise UserError(f"{wheel.name}: not a readable wheel ({e})") from None
    return {"runtime": ".".join(map(str, runtime)) if runtime else None, "images": images}


def aotriton_problem(found: Mapping[str, Any], pin: Mapping[str, Any], flash: bool) -> str | None:
    """Why the runtime and images in the torch wheel do not belong together, or None."""
    runtime = found.get("runtime")
    images: Mapping[str, str] = found.get("images") or {}
    if not flash:
        return None
    if runtime is None:
        return "torch was built with flash attention but its wheel carries no libaotriton_v2.so"
    if not images:
        return f"the torch wheel has AOTriton runtime {runtime} but no aotriton.images/"
    mm = aotriton_install.major_minor(runtime)
    for pack, sig in sorted(images.items()):
        if sig.startswith("git-"):
            commit = str(pin.get("commit") or "")
            if commit and not commit.startswith(sig[4:]):
                return (
                    f"image pack {pack} comes from AOTriton {sig}, the runtime from {commit[:12]}"
                )
        elif aotriton_install.major_minor(sig) != mm:
            return f"AOTriton runtime {runtime} but image pack {pack} is version {sig}"
    commits = {sig for sig in images.values() if sig.startswith("git-")}
    if len(commits) > 1:
        return (
            f"the image packs come from different AOTriton commits ({', '.join(sorted(commits))})"
        )
    version = pin.get("version")
    if version and aotriton_install.major_minor(version) != mm:
        return f"torch pins AOTriton {version} but its wheel carries runtime {runtime}"
    return None


def aotriton_pin(work: Path, torch_stamp: Mapping[str, Any]) -> dict[str, Any]:
    """The AOTriton torch was built with: build_aotriton's, --aotriton-prefix, aotriton.cmake's."""
    config = (torch_stamp.get("inputs") or {}).get("config") or {}
    prefix = (config.get("aotriton") or [None])[0]
    if prefix:
        built = stamps.read(paths.stamp_path(work, "aotriton-built")) or {}
        pin = (built.get("inputs") or {}).get("pin") or {}
        if built.get("install_prefix") == prefix and pin:
            return {"source": "build_aotriton", "prefix": prefix, **pin}
        return {"source": "--aotriton-prefix", "prefix": prefix}
    from rocmfa.sources import pins

    cmake = paths.src_dir(work, "pytorch") / "cmake" / "External" / "aotriton.cmake"
    try:
        parsed = pins.parse_aotriton_cmake(cmake.read_text())
    except OSError:
        return {"source": "unknown (no cmake/External/aotriton.cmake in the torch checkout)"}
    commit = parsed.literals[0] if len(parsed.literals) == 1 else None
    return {"source": "pytorch aotriton.cmake", "commit": commit, "version": parsed.version}


# --- reports ----------------------------------------------------------------------------------


def summarize_report(path: Path, given_as: str = "--report") -> tuple[str, dict[str, Any]]:
    """(kind, summary) of a backend_check/validate/bench report or a kernel check summary.json."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{given_as} {path}: not a readable JSON report ({e})") from None
    kind = REPORT_KINDS.get(doc.get("schema")) if isinstance(doc, dict) else None
    if kind is None:
        known = ", ".join(sorted(REPORT_KINDS))
        raise UserError(f"{given_as} {path}: unknown report schema (expected one of {known})")
    if kind == "bench":
        # Whole rows: the results page (scripts/rocmfa/report) draws and compares them.
        rows = [
            r for r in doc.get("results", []) if isinstance(r, dict) and r.get("status") == "ok"
        ]
        return kind, {
            **{k: doc.get(k) for k in ("identity", "provenance", "settings", "wall_s")},
            "ok": rows,
        }
    if kind == "kernel_check":
        return kind, {k: v for k, v in doc.items() if k not in ("schema", "tree")}  # no local path
    summary = {k: doc.get(k) for k in ("passed", "summary", "failures", "counts") if k in doc}
    return kind, {**summary, "device": doc.get("device"), "identity": doc.get("identity")}


# --- the manifest -----------------------------------------------------------------------------


def wheel_records(run_wheels: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each wheel's record with its Requires-Dist (what install_wheels installs first)."""
    keys = ("project", "version", "size", "sha256")
    files = [Path(w["file"]) for w in run_wheels]
    return [
        {"file": f.name, **{k: w[k] for k in keys}, "requires": requires_of(f)}
        for f, w in zip(files, run_wheels, strict=True)
    ]


def components_and_patches(checkout: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each checked-out source's origin, commit and head; the patches applied to each."""
    heads, sources = checkout.get("heads") or {}, checkout.get("sources") or {}
    patch_inputs = (checkout.get("inputs") or {}).get("patches") or {}
    components, patches = {}, {}
    for key, source in sorted(sources.items()):
        commit = source.get("hashtag")
        components[key] = {"origin": source.get("origin"), "commit": commit, "head": heads.get(key)}
        if source.get("patches"):
            digest = (patch_inputs.get(key) or {}).get(commit)
            patches[key] = {"commit": commit, "files": source["patches"], "digest": digest}
    return components, patches


def report_summaries(
    work: Path, arch_name: str, reports: Sequence[Path], aotriton_commit: str | None
) -> dict[str, Any]:
    """The reports' summaries by kind (+ build_aotriton's kernel check of this AOTriton)."""
    summaries: dict[str, Any] = dict(summarize_report(Path(report)) for report in reports)
    checked = kernel_check.summary_path(work, arch_name)
    if "kernel_check" not in summaries and checked.is_file():
        kind, summary = summarize_report(checked, "the kernel check summary (nox -s kernel_check)")
        if summary.get("aotriton_commit") == aotriton_commit:
            summaries[kind] = summary
    return summaries


def build(
    work: Path, run: Mapping[str, Any], reports: Sequence[Path], *, published: float | None = None
) -> dict[str, Any]:
    """The wheel-set manifest of run (wheels verified by the caller); UserError when the torch
    wheel's AOTriton runtime and images disagree."""
    arch = archs.get_arch(run["arch"])
    wheels = wheel_records(run["wheels"])
    checkout = stamps.read(build_pytorch.stage_stamp(work, "checkout")) or {}
    torch_stamp = stamps.read(build_pytorch.stage_stamp(work, "torch")) or {}
    inputs, heads = checkout.get("inputs") or {}, checkout.get("heads") or {}
    versions = {w["project"]: w["version"] for w in wheels}
    components, patches = components_and_patches(checkout)
    flash = "--enable-pytorch-flash-attention" in (torch_stamp.get("argv") or [])
    torch_wheel = next((w for w in run["wheels"] if w["project"] == "torch"), None)
    found = aotriton_in_wheel(Path(torch_wheel["file"])) if torch_wheel else {}
    pin = aotriton_pin(work, torch_stamp) if torch_wheel else {}
    problem = aotriton_problem(found, pin, flash)
    if problem:
        raise UserError(f"refusing to publish this wheel set: {problem}")
    summaries = report_summaries(work, arch.name, reports, pin.get("commit"))
    stamp_time = time.gmtime(time.time() if published is None else published)
    origin, commit = inputs.get("pytorch") or [None, None]
    torch = {"version": versions.get("torch"), "origin": origin, "commit": commit}
    return {
        "schema": SCHEMA,
        "set_id": set_id(run["wheels"]),
        "published": time.strftime("%Y-%m-%dT%H:%M:%SZ", stamp_time),
        "arch": arch.name,
        "archs": [arch.name],
        "family": family_of(arch),
        "packaging_chain": list(archs.packaging_chain(arch.name)),
        "python": run["python_tag"],
        "rocm_sdk": run["rocm_version"],
        "flash_attention": flash,
        "wheels": wheels,
        "torch": {**torch, "head": heads.get("pytorch")},
        "therock": {"commit": inputs.get("therock"), "rocm_sdk": run["rocm_version"]},
        "aotriton": {
            **{k: pin.get(k) for k in ("commit", "version", "source")},
            "runtime": found.get("runtime"),
            "images": found.get("images") or {},
            "runtime_matches_images": problem is None,
        },
        "components": components,
        "patches": patches,
        "reports": summaries,
    }


# --- the manifest as a wheel ------------------------------------------------------------------


def manifest_version(manifest: Mapping[str, Any]) -> str:
    when = time.strptime(manifest["published"], "%Y-%m-%dT%H:%M:%SZ")
    return f"{time.strftime('%Y%m%d.%H%M%S', when)}+{manifest['python']}.{manifest['set_id']}"


def manifest_wheel_name(manifest: Mapping[str, Any]) -> str:
    return f"{MANIFEST_DIST}-{manifest_version(manifest)}-py3-none-any.whl"


def is_manifest_of(filename: str, set_id_: str) -> bool:
    return filename.startswith(MANIFEST_DIST + "-") and f".{set_id_}-py3-" in filename


def write_manifest_wheel(manifest: Mapping[str, Any], out_dir: Path) -> Path:
    """A valid wheel holding the manifest; same manifest, same bytes."""
    version = manifest_version(manifest)
    info = f"{MANIFEST_DIST}-{version}.dist-info"
    body = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    contents = {
        MANIFEST_MEMBER: body.encode(),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {MANIFEST_PROJECT}\nVersion: {version}\n"
            f"Summary: manifest of wheel set {manifest['set_id']} ({manifest['arch']}, "
            f"{manifest['python']}, ROCm {manifest['rocm_sdk']})\n"
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: rocmfa-publish\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / manifest_wheel_name(manifest)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in contents.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return target


def read_manifest_wheel(data: bytes, where: str) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            manifest = json.loads(zf.read(MANIFEST_MEMBER))
    except (zipfile.BadZipFile, KeyError, ValueError) as e:
        raise UserError(f"{where}: not a wheel-set manifest ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise UserError(f"{where}: manifest schema is not {SCHEMA}")
    for key in ("set_id", "arch", "family", "python", "rocm_sdk", "wheels"):
        if key not in manifest:
            raise UserError(f"{where}: manifest has no '{key}'")
    return manifest


def same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def manifest_sort_key(filename: str) -> Version:
    try:
        return parse_wheel_filename(filename)[1]
    except InvalidWheelFilename:
        return Version("0")


def mismatch(
    manifest: Mapping[str, Any], *, family: str, arch: str, python_tag: str | None,
    rocm_version: str | None,
) -> str | None:  # fmt: skip
    """One line naming how this wheel set does not fit this machine, or None."""
    who = f"wheel set {manifest['set_id']}"
    if manifest["family"] != family:
        return (
            f"{who} was built for arch family {manifest['family']} ({manifest['arch']}); this "
            f"machine is {arch} (family {family})"
        )
    if arch not in manifest.get("archs", [manifest["arch"]]):
        return f"{who} was built for {manifest['arch']} only; this machine is {arch}"
    if python_tag is not None and manifest["python"] != python_tag:
        return f"{who} was built for Python {manifest['python']}; the env has {python_tag}"
    if rocm_version is not None and not same_version(manifest["rocm_sdk"], rocm_version):
        return (
            f"{who} was built against ROCm SDK {manifest['rocm_sdk']}; the env has "
            f"{rocm_version} (rocm-sdk version)"
        )
    if not manifest.get("aotriton", {}).get("runtime_matches_images", True):
        return f"{who}: its AOTriton runtime and images do not match"
    return None
