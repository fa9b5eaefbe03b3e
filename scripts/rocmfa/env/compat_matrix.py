"""`nox -s matrix` (arch x AOTriton release x torch series, from data/arches.toml and
data/aotriton_matrix.toml) and the check builds run before their first command."""

import json
import re
from pathlib import Path
from typing import Any

from rocmfa.env import archs
from rocmfa.plumbing import pin_files
from rocmfa.plumbing.datafiles import DATA_DIR, load_toml, require
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import MatrixOptions

MATRIX_FILE = DATA_DIR / "aotriton_matrix.toml"
EXPERIMENTAL_ENV = "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"
LABELS = {
    "default": "flash by default",
    "experimental": f"needs {EXPERIMENTAL_ENV}",
    "patched": "flash with our patch set (patches/aotriton/, source build only)",
    "none": "none",
}
SHORT = {"default": "default", "experimental": "experimental*", "patched": "patched"}


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
    releases.sort(key=lambda r: archs.aotriton_version_key(r["version"]))
    torch = rows("torch", "torch", "tree", "aotriton", "source")
    torch.sort(key=lambda r: tuple(map(int, r["torch"].split("."))))
    retired = rows("retired", "name", "arch", "why", "source")
    return {"releases": releases, "torch": torch, "retired": retired}


def state(arch: archs.Arch, version: str) -> str:
    if arch.aotriton_supported(version):
        return "experimental" if arch.needs_experimental_flag(version) else "default"
    return "patched" if arch.aotriton_patched_pack(version) else "none"


def pack(arch: archs.Arch, version: str) -> str | None:
    """The image pack a build of version has for arch: upstream's or our patch set's."""
    return arch.aotriton_pack(version) or arch.aotriton_patched_pack(version)


def table() -> dict[str, Any]:
    data = load_matrix()
    rows = []
    for arch in (a for a in archs.load_arches().values() if a.vendor == "amd"):
        cells = {
            r["version"]: {"state": state(arch, r["version"])}
            | ({"pack": f"amd-{found}"} if (found := pack(arch, r["version"])) else {})
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
    return f"{SHORT.get(cell['state'], '-')} {cell.get('pack', '')}".strip()


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


def host_line(requested: str | None = None, choice: archs.ArchChoice | None = None) -> str:
    """One line for doctor/matrix: this host's arch and what the pinned AOTriton gives it."""
    try:
        choice = choice or archs.resolve_arch(requested)
    except UserError as e:
        return f"no arch ({e})"
    if not (version := pinned_aotriton_version()):
        return f"{choice.arch.name} ({choice.how}); AOTriton pin version unknown"
    found = f", image pack amd-{pack(choice.arch, version)}" if pack(choice.arch, version) else ""
    verdict = LABELS[state(choice.arch, version)]
    return f"{choice.arch.name} ({choice.how}) x AOTriton {version} (pinned): {verdict}{found}"


def pinned_aotriton_version() -> str | None:
    try:
        return pin_files.aotriton_version(pin_files.pins_dir())
    except UserError:
        return None


def check_combination(
    arch: archs.Arch, version: str, *, torch_version: str | None = None, force: bool = False
) -> list[str]:
    """Notes on arch x AOTriton x torch; a conflict raises (with force: a warning line)."""
    found = state(arch, version)
    both = f"{arch.name} x AOTriton {version}"
    problems = [f"{both}: no AOTriton support for {arch.name} (nox -s matrix)"] * (found == "none")
    notes = {
        "patched": f"note: {both}: no upstream kernels; built with this repository's patch set "
        f"(patches/aotriton/), image pack amd-{pack(arch, version)}",
        "experimental": f"note: {both}: PyTorch uses flash attention only with "
        f"{EXPERIMENTAL_ENV}=1 (setup_env sets it for this arch)",
    }
    notes = [notes[found]] if found in notes else []
    # "+git<sha>": a torch built from source, checked against its own aotriton.cmake (pins.py)
    series = re.match(r"\s*(\d+\.\d+)", torch_version or "")
    known = {t["torch"]: t for t in load_matrix()["torch"]}
    row = known.get(series[1]) if series and "+git" not in torch_version else None
    key = archs.aotriton_version_key  # 0.13b and 0.13.1b: one ABI line (the first two numbers)
    if row and key(row["aotriton"])[:2] != key(version)[:2]:
        torch = f"torch {series[1]}"
        expects = f"AOTriton {row['aotriton']} ({row['source']})"
        problems.append(f"{torch} x AOTriton {version}: {torch} expects {expects}")
    if problems and not force:
        raise UserError(problems[0] + "; --force to go on anyway")
    return [f"WARNING (--force): {p}" for p in problems] + notes


def matrix(opts: MatrixOptions) -> None:
    report = table() | {"host": host_line(opts.arch)}
    print(json.dumps(report, indent=2) + "\n" if opts.json else render_markdown(report), end="")
    # after the screen, what it shows broken: a bad arch value (not a missing GPU), a bad pin
    broken = [e for e in [report["pinned_build"].get("error")] if e]
    if opts.arch and report["host"].startswith("no arch ("):  # --arch or $ROCMFA_ARCH
        broken.insert(0, report["host"].removeprefix("no arch (").removesuffix(")"))
    if broken:
        raise UserError(f"matrix: {'; '.join(broken)}")
