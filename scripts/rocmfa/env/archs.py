"""GPU archs: rocm-bootstrap detects GPUs and names families and device packages; data/arches.toml
holds the rest. HSA_OVERRIDE_GFX_VERSION changes what ROCr reports, not sysfs: reported only.
`nox -s matrix`: arch x AOTriton release x torch series (data/aotriton_matrix.toml), and the
check builds run before their first command."""

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rocm_bootstrap
from rocm_bootstrap import parse_gfx_target_version

from rocmfa.plumbing import pin_files
from rocmfa.plumbing.errors import UserError, load_toml, require
from rocmfa.plumbing.options import ARCHES_FILE, MatrixOptions, known_arch, origin

BOOTSTRAP_FORCE_ENV = "ROCM_BOOTSTRAP_FORCE_GFX_ARCH"
BOOTSTRAP_DISABLE_ENV = "ROCM_BOOTSTRAP_DISABLE_DETECTION"


def aotriton_version_key(version: str) -> tuple[int, ...]:
    """'0.11.2b' -> (0, 11, 2); '0.13b' -> (0, 13); '0.13.50tp' -> (0, 13, 50)."""
    match = re.fullmatch(r"v?(\d+(?:\.\d+)*)[a-z]*", version.strip())
    if not match:
        raise UserError(f"not an AOTriton version: {version!r} (expected e.g. 0.12b)")
    return tuple(int(p) for p in match.group(1).split("."))


@dataclass(frozen=True)
class Arch:
    name: str
    display_name: str
    vendor: str
    device_extra: str | None
    legacy_family: str | None
    aotriton_since: str | None
    aotriton_packs: tuple[tuple[str, str], ...]
    aotriton_experimental: tuple[tuple[str, str | None], ...]
    ck_mha: bool
    vllm_aiter: bool
    vllm_note: str
    limits: tuple[str, ...]
    therock_family: str | None  # TheRock's cmake family where no legacy index exists
    aotriton_patched: tuple[tuple[str, str], ...]  # (release, pack) our patch set adds it to
    therock_torch_flash: bool  # TheRock's prebuilt torch has flash attention for it

    def aotriton_supported(self, version: str | None = None) -> bool:
        if self.aotriton_since is None or version is None:
            return self.aotriton_since is not None
        return aotriton_version_key(version) >= aotriton_version_key(self.aotriton_since)

    def aotriton_pack(self, version: str) -> str | None:
        """Image pack directory name without 'amd-' for an AOTriton release, or None."""
        key = aotriton_version_key(version)
        packs = [p for since, p in self.aotriton_packs if key >= aotriton_version_key(since)]
        return packs[-1] if packs and self.aotriton_supported(version) else None

    def aotriton_patched_pack(self, version: str) -> str | None:
        """The pack our patch set builds on version's release line (None if upstream has it)."""
        if self.aotriton_supported(version):
            return None
        packs = {aotriton_version_key(rel)[:2]: pack for rel, pack in self.aotriton_patched}
        return packs.get(aotriton_version_key(version)[:2])

    def needs_experimental_flag(self, version: str) -> bool:
        key = aotriton_version_key(version)
        return any(
            key >= aotriton_version_key(since)
            and (until is None or key < aotriton_version_key(until))
            for since, until in self.aotriton_experimental
        )


def _bundles(name: str) -> list[Any]:
    """rocm-bootstrap's target -> sub-family -> family bundles; [] for a target it does not know."""
    try:
        return list(rocm_bootstrap.packaging_chain(name))
    except ValueError:
        return []


def packaging_chain(name: str) -> tuple[str, ...]:
    """('gfx1151', 'gfx115x', 'gfx11')."""
    return tuple(b.key for b in _bundles(name))


def _parse_arch(name: str, raw: Any) -> Arch:
    where = f"{ARCHES_FILE.name} [arch.{name}]"
    if not isinstance(raw, dict):
        raise UserError(f"{where}: must be a table")

    def get(key: str, kind: type = str, default: Any = None) -> Any:
        return require(raw, key, kind, where) if key in raw else default

    def tables(key: str, *names: str) -> tuple[tuple[Any, ...], ...]:
        entries = get(key, list, [])
        if not all(isinstance(entry, dict) for entry in entries):
            raise UserError(f"{where}: {key} entries must be tables")
        return tuple(
            tuple(require(e, n, str, where) if n in e or n != "until" else None for n in names)
            for e in entries
        )

    packs = tables("aotriton_packs", "since", "pack")
    experimental = tables("aotriton_experimental", "since", "until")
    patched = tables("aotriton_patched", "release", "pack")
    since = get("aotriton_since")
    try:
        for entry in (*packs, *experimental, *patched, (since or "0",)):
            aotriton_version_key(entry[0])
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
    vendor = get("vendor", str, "amd")
    bundles = _bundles(name)
    # TheRock's multi-arch extra ('device-gfx1151'): rocm-bootstrap's device package naming
    extra = rocm_bootstrap.device_dist_name("device", bundles[0]) if bundles else None
    return Arch(
        name=name,
        display_name=require(raw, "name", str, where),
        vendor=vendor,
        device_extra=extra if vendor == "amd" else None,
        legacy_family=get("legacy_family"),
        aotriton_since=since,
        aotriton_packs=packs,
        aotriton_experimental=experimental,
        ck_mha=require(raw, "ck_mha", bool, where),
        vllm_aiter=require(raw, "vllm_aiter", bool, where),
        vllm_note=require(raw, "vllm_note", str, where),
        limits=tuple(get("limits", list, [])),
        therock_family=get("therock_family"),
        aotriton_patched=patched,
        therock_torch_flash=get("therock_torch_flash", bool, False),
    )


@functools.cache
def load_arches(path: Path = ARCHES_FILE) -> dict[str, Arch]:
    """The arch table, read and checked once per file."""
    table = load_toml(path, "arch data").get("arch")
    if not isinstance(table, dict) or not table:
        raise UserError(f"malformed arch data {path}: no [arch.<name>] tables")
    return {name: _parse_arch(name, raw) for name, raw in table.items()}


def get_arch(name: str) -> Arch:
    return load_arches()[known_arch(name).strip().split(":")[0]]


def explain_override(value: str | None, real: str) -> str | None:
    """One sentence about HSA_OVERRIDE_GFX_VERSION ('11.0.0', all decimal), or None when unset."""
    if not value:
        return None
    said = f"HSA_OVERRIDE_GFX_VERSION={value}"
    if not (match := re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", value.strip())):
        return f"{said} is invalid: ROCr rejects it (format major.minor.stepping, decimal)"
    major, minor, step = (int(g) for g in match.groups())
    try:  # rocm-bootstrap's table; LLVM's spelling (stepping in hex) when it does not know it
        reported = parse_gfx_target_version(major * 10000 + minor * 100 + step).name
    except ValueError:
        reported = f"gfx{major}{minor}{step:x}"
    if reported == real:
        return f"{said} matches the real arch ({real})"
    return (
        f"{said} makes ROCr report {reported} although the GPU is {real}: kernels built for "
        f"{reported} run on {real}; builds here target the real arch (--arch chooses otherwise)"
    )


@dataclass(frozen=True)
class Detection:
    gpus: tuple[str, ...]
    source: str
    override: str | None = None  # explain_override's sentence


def detect_gpus() -> Detection:
    """GPUs as rocm-bootstrap sees them, in numeric KFD node order (HIP's)."""
    forced = os.environ.get(BOOTSTRAP_FORCE_ENV)  # rocm-bootstrap reads the process env
    try:
        found = sorted(rocm_bootstrap.detect_gpus(), key=lambda gpu: gpu.node_id)
    except ValueError as e:  # unknown gfx_target_version or forced name
        where = f"${BOOTSTRAP_FORCE_ENV}" if forced else "KFD sysfs"
        raise UserError(f"GPU detection failed ({where}): {e}") from None
    gpus = tuple(gpu.target.name for gpu in found)
    if os.environ.get(BOOTSTRAP_DISABLE_ENV) == "1":
        source = f"detection disabled (${BOOTSTRAP_DISABLE_ENV}=1)"
    elif forced:
        source = f"${BOOTSTRAP_FORCE_ENV}={forced} (rocm-bootstrap)"
    elif gpus:
        source = "KFD sysfs (rocm-bootstrap)"
    else:
        source = "no AMD GPU found by rocm-bootstrap (no KFD sysfs GPU node)"
    override = os.environ.get("HSA_OVERRIDE_GFX_VERSION")
    return Detection(gpus, source, explain_override(override, (*gpus, "unknown")[0]))


@dataclass(frozen=True)
class ArchChoice:
    arch: Arch
    how: str
    detection: Detection


def resolve_arch(given: str | None, *, detection: Detection | None = None) -> ArchChoice:
    """The session's --arch (or $ROCMFA_ARCH), else rocm-bootstrap's detection."""
    detection = detection or detect_gpus()
    if given:
        return ArchChoice(get_arch(given), origin(given, "--arch"), detection)
    if not detection.gpus:
        raise UserError(f"no AMD GPU detected ({detection.source}); pass --arch gfxNNNN")
    how = detection.source
    if len(set(detection.gpus)) > 1:
        how += f"; several GPU archs {', '.join(detection.gpus)}, using the first (node order)"
    return ArchChoice(get_arch(detection.gpus[0]), how, detection)


MATRIX_FILE = ARCHES_FILE.with_name("aotriton_matrix.toml")
EXPERIMENTAL_ENV = "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"
MATRIX_LABELS = {
    "default": "flash by default",
    "experimental": f"needs {EXPERIMENTAL_ENV}",
    "patched": "flash with our patch set (patches/aotriton/, source build only)",
    "none": "none",
}
MATRIX_SHORT = {"default": "default", "experimental": "experimental*", "patched": "patched"}


def load_matrix(path: Path = MATRIX_FILE) -> dict[str, list[dict[str, Any]]]:
    """The matrix data checked, as `--json` shows it: releases and torch series oldest first."""
    data = load_toml(path, "AOTriton matrix data")

    def rows(table: str, key: str, *keys: str) -> list[dict[str, Any]]:
        found = []
        for name, raw in (data.get(table) or {}).items():
            where = f"{path.name} [{table}.{name!r}]"
            row = {k: " ".join(require(raw, k, str, where).split()) for k in keys}
            if table == "aotriton":  # the archs its util.cc gates as experimental
                row["experimental"] = require(raw, "experimental", list, where)
            found.append({key: name} | row)
        return found

    releases = rows("aotriton", "version", "commit", "source")
    if not releases:
        raise UserError(f"malformed AOTriton matrix data {path}: no [aotriton.<version>] tables")
    releases.sort(key=lambda r: aotriton_version_key(r["version"]))
    torch = rows("torch", "torch", "tree", "aotriton", "source")
    torch.sort(key=lambda r: tuple(map(int, r["torch"].split("."))))
    retired = rows("retired", "name", "arch", "why", "source")
    return {"releases": releases, "torch": torch, "retired": retired}


def matrix_state(arch: Arch, version: str) -> str:
    if arch.aotriton_supported(version):
        return "experimental" if arch.needs_experimental_flag(version) else "default"
    return "patched" if arch.aotriton_patched_pack(version) else "none"


def matrix_pack(arch: Arch, version: str) -> str | None:
    """The image pack a build of version has for arch: upstream's or our patch set's."""
    return arch.aotriton_pack(version) or arch.aotriton_patched_pack(version)


def matrix_table() -> dict[str, Any]:
    data = load_matrix()
    rows = []
    for arch in (a for a in load_arches().values() if a.vendor == "amd"):
        cells = {
            r["version"]: {"state": matrix_state(arch, r["version"])}
            | ({"pack": f"amd-{found}"} if (found := matrix_pack(arch, r["version"])) else {})
            for r in data["releases"]
        }
        row = {"arch": arch.name, "name": arch.display_name, "cells": cells}
        retired = [r for r in data["retired"] if r["arch"] == arch.name]
        rows.append(row | {"retired": retired} if retired else row)
    try:  # the torch line build_pytorch builds and how its AOTriton agrees (pins/; no network)
        for project in ("pytorch", "aotriton"):
            pin_files.read_table(project, pin_files.pins_dir())
        built = {"line": pin_files.describe_line(pin_files.pins_dir())}
    except UserError as e:
        built = {"error": str(e)}
    return {**data, "pinned_build": built, "arches": rows}


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [f"| {' | '.join(cells)} |" for cells in [header, ["---"] * len(header), *rows]]


def _cell(cell: dict[str, str]) -> str:
    return f"{MATRIX_SHORT.get(cell['state'], '-')} {cell.get('pack', '')}".strip()


def render_markdown(report: dict[str, Any]) -> str:
    versions = [r["version"] for r in report["releases"]]
    lines = ["## Flash attention through AOTriton, by arch and AOTriton release", ""]
    rows = [
        [f"{r['arch']} ({r['name']})", *(_cell(r["cells"][v]) for v in versions)]
        for r in report["arches"]
    ]
    lines += markdown_table(["arch", *versions], rows)
    lines += [
        "",
        f"default: flash attention on by default; experimental*: only with {EXPERIMENTAL_ENV}=1;"
        " patched: no upstream kernels, built from source with this repository's patch set"
        " (patches/aotriton/<commit>/); -: none. amd-...: image pack"
        " (0.10b and older: one tarball with every arch's images).",
        "",
        "## AOTriton each torch series expects (the trees TheRock builds wheels from)",
        "",
    ]
    torch = [[t["torch"], t["tree"], t["aotriton"], t["source"]] for t in report["torch"]]
    lines += markdown_table(["torch", "tree", "AOTriton", "source"], torch)
    if "error" not in (built := report["pinned_build"]):
        lines += ["", "## The pinned source build (build_pytorch)", "", built["line"]]
    lines += ["", "## Sources", ""]
    lines += [
        f"- AOTriton {r['version']} ({r['commit'][:8]}): {r['source']}" for r in report["releases"]
    ]
    lines += [
        f"- {row['arch']}: {r['name']} is retired: {r['why']} ({r['source']})"
        for row in report["arches"]
        for r in row.get("retired", ())
    ]
    lines.append("- per-arch support and image packs: scripts/rocmfa/data/arches.toml")
    lines += ["", f"This host: {report['host']}"] if report.get("host") else []
    return "\n".join(lines) + "\n"


def host_line(requested: str | None = None, choice: ArchChoice | None = None) -> str:
    """One line for doctor/matrix: this host's arch and what the pinned AOTriton gives it."""
    try:
        choice = choice or resolve_arch(requested)
    except UserError as e:
        return f"no arch ({e})"
    if not (version := pinned_aotriton_version()):
        return f"{choice.arch.name} ({choice.how}); AOTriton pin version unknown"
    pack = matrix_pack(choice.arch, version)
    found = f", image pack amd-{pack}" if pack else ""
    verdict = MATRIX_LABELS[matrix_state(choice.arch, version)]
    return f"{choice.arch.name} ({choice.how}) x AOTriton {version} (pinned): {verdict}{found}"


def pinned_aotriton_version() -> str | None:
    try:
        return pin_files.aotriton_version(pin_files.pins_dir())
    except UserError:
        return None


def check_combination(
    arch: Arch, version: str, *, torch_version: str | None = None, force: bool = False
) -> list[str]:
    """Notes on arch x AOTriton x torch; a conflict raises (with force: a warning line)."""
    found = matrix_state(arch, version)
    both = f"{arch.name} x AOTriton {version}"
    problems = [f"{both}: no AOTriton support for {arch.name} (nox -s matrix)"] * (found == "none")
    notes = {
        "patched": f"note: {both}: no upstream kernels; built with this repository's patch set "
        f"(patches/aotriton/), image pack amd-{matrix_pack(arch, version)}",
        "experimental": f"note: {both}: PyTorch uses flash attention only with "
        f"{EXPERIMENTAL_ENV}=1 (setup_env sets it for this arch)",
    }
    notes = [notes[found]] if found in notes else []
    # "+git<sha>": a torch built from source, checked against its own aotriton.cmake (pins.py)
    series = re.match(r"\s*(\d+\.\d+)", torch_version or "")
    known = {t["torch"]: t for t in load_matrix()["torch"]}
    row = known.get(series[1]) if series and "+git" not in torch_version else None
    key = aotriton_version_key  # 0.13b and 0.13.1b: one ABI line (the first two numbers)
    if row and key(row["aotriton"])[:2] != key(version)[:2]:
        torch = f"torch {series[1]}"
        expects = f"AOTriton {row['aotriton']} ({row['source']})"
        problems.append(f"{torch} x AOTriton {version}: {torch} expects {expects}")
    if problems and not force:
        raise UserError(problems[0] + "; --force to go on anyway")
    return [f"WARNING (--force): {p}" for p in problems] + notes


def matrix(opts: MatrixOptions) -> None:
    report = matrix_table() | {"host": host_line(opts.arch)}
    print(json.dumps(report, indent=2) + "\n" if opts.json else render_markdown(report), end="")
    # after the screen, what it shows broken: a bad arch value (not a missing GPU), a bad pin
    broken = [e for e in [report["pinned_build"].get("error")] if e]
    if opts.arch and report["host"].startswith("no arch ("):  # --arch or $ROCMFA_ARCH
        broken.insert(0, report["host"].removeprefix("no arch (").removesuffix(")"))
    if broken:
        raise UserError(f"matrix: {'; '.join(broken)}")
