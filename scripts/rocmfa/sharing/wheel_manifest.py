"""The wheel-set manifest (rocmfa-wheelset/1): wheels with Requires-Dist, arch and family, pins,
the torch wheel's AOTriton, report summaries; it travels as a tiny wheel `rocmfa-wheelset`
<YYYYMMDD.HHMMSS>+<python>.<set id> so every index form holds it. docs/pytorch-and-ck.md."""

from __future__ import annotations

import email.parser
import hashlib
import io
import json
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version
from wheel.wheelfile import WheelFile

from rocmfa.builds import aotriton_install, build_pytorch, kernel_check
from rocmfa.env import archs
from rocmfa.plumbing import paths, stamps, team_index
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
# What a summary keeps of a probe's report (the results page reads it back as that report).
SUMMARY_KEYS = ("schema", "identity", "device", "passed", "summary", "failures", "counts")
SUMMARY_KEYS += ("provenance", "settings", "wall_s")


def family_of(arch: archs.Arch) -> str:
    """TheRock's index folder v2/<family>/: legacy_family, therock_family, or the sub-family."""
    if arch.legacy_family or arch.therock_family:
        return arch.legacy_family or arch.therock_family
    chain = archs.packaging_chain(arch.name)
    return chain[1] if len(chain) > 1 else arch.name


def same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def requires_of(wheel: Path) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA."""
    try:
        with WheelFile(wheel) as wf:
            metadata = wf.read(f"{wf.dist_info_path}/METADATA")
    except (OSError, zipfile.BadZipFile, KeyError, ValueError) as e:  # WheelError: ValueError
        raise UserError(f"{wheel.name}: no readable METADATA ({e})") from None
    return email.parser.BytesHeaderParser().parsebytes(metadata).get_all("Requires-Dist") or []


# --- building (publish) -------------------------------------------------------------------


def aotriton_in_wheel(wheel: Path) -> dict[str, Any]:
    """{'runtime': 'X.Y.Z' | None, 'images': {pack: '0.13' | 'git-<sha12>'}} from torch/lib/."""
    runtimes, images = [], {}
    with zipfile.ZipFile(wheel) as zf:  # a wheel the build recorded (its sha256 checked)
        for name in (n for n in zf.namelist() if n.startswith("torch/lib/")):
            base = name.rsplit("/", 1)[-1]
            if match := aotriton_install.LIB_RE.fullmatch(base):
                runtimes.append(tuple(int(g) for g in match.groups()))
            elif name.startswith("torch/lib/aotriton.images/") and base == "__signature__":
                text = zf.read(name).decode(errors="replace")
                images[name.split("/")[3]] = aotriton_install.signature_of(text)
    runtime = ".".join(map(str, max(runtimes))) if runtimes else None
    return {"runtime": runtime, "images": images}


def aotriton_problem(found: Mapping[str, Any], pin: Mapping[str, Any]) -> str | None:
    """Why the runtime and images in a flash-attention torch wheel do not belong together."""
    runtime, images = found["runtime"], found["images"]
    if runtime is None:
        return "torch was built with flash attention but its wheel carries no libaotriton_v2.so"
    if not images:
        return f"the torch wheel has AOTriton runtime {runtime} but no aotriton.images/"
    mm, commit = aotriton_install.major_minor(runtime), str(pin.get("commit") or "")
    for pack, sig in sorted(images.items()):
        if sig.startswith("git-") and not commit.startswith(sig[4:]) and commit:
            return f"image pack {pack} comes from AOTriton {sig}, the runtime from {commit[:12]}"
        if not sig.startswith("git-") and aotriton_install.major_minor(sig) != mm:
            return f"AOTriton runtime {runtime} but image pack {pack} is version {sig}"
    if len(commits := sorted({s for s in images.values() if s.startswith("git-")})) > 1:
        return f"the image packs come from different AOTriton commits ({', '.join(commits)})"
    version = pin.get("version")
    if version and aotriton_install.major_minor(version) != mm:
        return f"torch pins AOTriton {version} but its wheel carries runtime {runtime}"
    return None


def aotriton_pin(work: Path, torch_stamp: Mapping[str, Any]) -> dict[str, Any]:
    """The AOTriton torch was built with: build_aotriton's, --aotriton-prefix, aotriton.cmake's."""
    config = (torch_stamp.get("inputs") or {}).get("config") or {}
    if prefix := (config.get("aotriton") or [None])[0]:
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


def summarize_report(path: Path, given_as: str = "--report") -> tuple[str, dict[str, Any]]:
    """(kind, summary) of a backend_check/validate/bench report or a kernel check summary.json:
    the report less its bulk (a bench's rows that ran stay: the results page draws them)."""
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
    summary = {k: doc[k] for k in SUMMARY_KEYS if k in doc}
    if kind == "bench":
        summary["results"] = [
            r for r in doc.get("results", []) if isinstance(r, dict) and r.get("status") == "ok"
        ]
    return kind, summary


def build(work: Path, run: Mapping[str, Any], reports: Sequence[Path]) -> dict[str, Any]:
    """The wheel-set manifest of run (wheels verified by the caller); UserError when the torch
    wheel's AOTriton runtime and images disagree."""
    arch = archs.get_arch(run["arch"])
    checkout = stamps.read(build_pytorch.stage_stamp(work, "checkout")) or {}
    torch_stamp = stamps.read(build_pytorch.stage_stamp(work, "torch")) or {}
    inputs, heads = checkout.get("inputs") or {}, checkout.get("heads") or {}
    flash = "--enable-pytorch-flash-attention" in (torch_stamp.get("argv") or [])
    torch_wheel = next((w for w in run["wheels"] if w["project"] == "torch"), None)
    found = aotriton_in_wheel(Path(torch_wheel["file"])) if torch_wheel else {}
    pin = aotriton_pin(work, torch_stamp) if torch_wheel else {}
    if flash and (problem := aotriton_problem(found, pin)):
        raise UserError(f"refusing to publish this wheel set: {problem}")
    summaries = dict(summarize_report(Path(report)) for report in reports)
    checked = kernel_check.summary_path(work, arch.name)  # build_aotriton's, of this AOTriton
    if "kernel_check" not in summaries and checked.is_file():
        kind, summary = summarize_report(checked, "the kernel check summary (nox -s kernel_check)")
        if summary.get("aotriton_commit") == pin.get("commit"):
            summaries[kind] = summary
    wheels = [
        {"file": Path(w["file"]).name, **{k: w[k] for k in ("project", "version", "size")},
         "sha256": w["sha256"], "requires": requires_of(Path(w["file"]))}
        for w in run["wheels"]
    ]  # fmt: skip
    lines = sorted(f"{w['file']} {w['sha256']}\n" for w in wheels)  # same set, same id
    origin, commit = inputs.get("pytorch") or [None, None]
    torch = {"version": torch_wheel and torch_wheel["version"], "origin": origin, "commit": commit}
    return {
        "schema": SCHEMA,
        "set_id": hashlib.sha256("".join(lines).encode()).hexdigest()[:16],
        "published": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
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
            "runtime_matches_images": True,
        },
        **components_and_patches(checkout),
        "reports": summaries,
    }


def components_and_patches(checkout: Mapping[str, Any]) -> dict[str, Any]:
    """Each checked-out source's origin, commit and head; the patches applied to each."""
    heads, patch_inputs = checkout.get("heads") or {}, (checkout.get("inputs") or {}).get("patches")
    components, patches = {}, {}
    for key, source in sorted((checkout.get("sources") or {}).items()):
        commit = source.get("hashtag")
        components[key] = {"origin": source.get("origin"), "commit": commit, "head": heads.get(key)}
        if source.get("patches"):
            digest = ((patch_inputs or {}).get(key) or {}).get(commit)
            patches[key] = {"commit": commit, "files": source["patches"], "digest": digest}
    return {"components": components, "patches": patches}


def manifest_wheel_name(manifest: Mapping[str, Any]) -> str:
    when = time.strftime(
        "%Y%m%d.%H%M%S", time.strptime(manifest["published"], "%Y-%m-%dT%H:%M:%SZ")
    )
    return f"{MANIFEST_DIST}-{when}+{manifest['python']}.{manifest['set_id']}-py3-none-any.whl"


def write_manifest_wheel(manifest: Mapping[str, Any], out_dir: Path) -> Path:
    """A valid wheel holding the manifest (its RECORD written by the `wheel` library)."""
    target = out_dir / manifest_wheel_name(manifest)
    version = target.name.split("-")[1]
    info = f"{MANIFEST_DIST}-{version}.dist-info"
    out_dir.mkdir(parents=True, exist_ok=True)
    with WheelFile(target, "w") as wf:
        wf.writestr(MANIFEST_MEMBER, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        wf.writestr(f"{info}/METADATA", (
            f"Metadata-Version: 2.1\nName: {MANIFEST_PROJECT}\nVersion: {version}\n"
            f"Summary: manifest of wheel set {manifest['set_id']} ({manifest['arch']}, "
            f"{manifest['python']}, ROCm {manifest['rocm_sdk']})\n"
        ))  # fmt: skip
        wf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: rocmfa-publish\n"
                    "Root-Is-Purelib: true\nTag: py3-none-any\n")  # fmt: skip
    return target


# --- reading (install_wheels --index, report --index) ---------------------------------------


def is_manifest_of(filename: str, set_id: str) -> bool:
    return filename.startswith(MANIFEST_DIST + "-") and f".{set_id}-py3-" in filename


def listed_manifests(spec: team_index.IndexSpec, family: str):
    """The family's wheel-set manifests, newest first (the name starts with the date); their
    links; the S3 store they are read through, if any."""
    store = team_index.tree_store(spec, family) if spec.kind == "s3" else None
    links = team_index.read_project(spec, family, MANIFEST_PROJECT, store)
    return (
        sorted((n for n in links if n.startswith(MANIFEST_DIST + "-")), reverse=True),
        links,
        store,
    )


def read_manifest(name: str, link: team_index.Link, store, where: str) -> dict[str, Any]:
    """The manifest in wheel `name`, checked against its page's sha256."""
    data = store.read(f"{MANIFEST_PROJECT}/{name}") if store else team_index.fetch(link.url)
    if data is None:
        raise UserError(f"{name} is listed on {where} but cannot be downloaded")
    if link.sha256 and hashlib.sha256(data).hexdigest() != link.sha256:
        raise UserError(f"{name} on {where} does not match the sha256 its page lists")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            manifest = json.loads(zf.read(MANIFEST_MEMBER))
    except (zipfile.BadZipFile, KeyError, ValueError) as e:
        raise UserError(f"{name}: not a wheel-set manifest ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise UserError(f"{name}: manifest schema is not {SCHEMA}")
    if missing := {"set_id", "arch", "family", "python", "rocm_sdk", "wheels"} - set(manifest):
        raise UserError(f"{name}: manifest has no {', '.join(sorted(missing))}")
    return manifest


def mismatch(
    manifest: Mapping[str, Any], family: str, arch: str, python_tag=None, rocm_version=None
) -> str | None:
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
    return None
