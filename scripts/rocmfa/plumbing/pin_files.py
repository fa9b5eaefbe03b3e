"""pins/<project>.toml: where, what a table may hold, the one reader (tomllib) and writer
(tomlkit: every other byte stays)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rocmfa.plumbing import stamps
from rocmfa.plumbing.datafiles import PINS_DIR, REPO_ROOT, load_toml
from rocmfa.plumbing.errors import UserError, did_you_mean
from rocmfa.plumbing.options import PROJECTS, environment  # noqa: F401 (PROJECTS: for sources/)

PINS_DIR_ENV = "ROCMFA_PINS_DIR"
FROM_PYTORCH = "from-pytorch"
LINE_ENV = "ROCMFA_PYTORCH_LINE"  # release (2.13 x AOTriton 0.13b) or nightly (AOTriton follows)
LINES = {"release": "pytorch.toml", "nightly": "pytorch-nightly.toml"}
HEX40 = re.compile(r"[0-9a-f]{40}")
COMMON = frozenset({"url", "ref", "commit", "depth"})
KNOWN = {  # the keys each project's table may hold; pytorch's companion tables: build_pytorch
    "therock": COMMON,
    "pytorch": COMMON | {"raw_url", "triton", "audio", "vision", "apex", "aotriton"},
    "aotriton": COMMON | {"version", "submodules", "tuner", "release", "aiter"},
    "composable_kernel": COMMON | {"use", "subdir", "legacy"},
}


class Unresolved(UserError):
    """A pin whose commit is not resolved yet."""


def line(environ: Mapping[str, str] | None = None) -> str:
    chosen = environment(environ).pytorch_line or "release"
    if chosen not in LINES:
        raise UserError(f"${LINE_ENV}={chosen!r}: known lines: release (default), nightly")
    return chosen


def pins_dir(requested: str | os.PathLike[str] | None = None, environ=None) -> Path:
    chosen = requested or environment(environ).pins_dir or PINS_DIR
    return Path(chosen).expanduser().resolve()


def display(path: Path) -> str:
    inside = Path(path).is_relative_to(REPO_ROOT)
    return str(Path(path).relative_to(REPO_ROOT) if inside else path)


def text(table: Mapping[str, Any], key: str, where: str, *, empty_ok: bool = False) -> str:
    """table[key] stripped: a string, non-empty unless empty_ok; else one line naming it."""
    if key not in table:
        raise UserError(f"{where}: missing key '{key}'{did_you_mean(key, table)}")
    value = table[key]
    if not isinstance(value, str) or (not empty_ok and not value.strip()):
        kind = "string" if empty_ok else "non-empty string"
        raise UserError(f"{where}: '{key}' must be a {kind}, got {value!r}")
    return value.strip()


def check_commit(value: object, where: str, *, allow_from_pytorch: bool = False) -> str:
    value = value.strip() if isinstance(value, str) else value
    if allow_from_pytorch and value == FROM_PYTORCH:
        return value
    if isinstance(value, str) and value.lower() in ("", "unknown", "todo", "none"):
        raise Unresolved(
            f"{where}: 'commit' is not resolved yet ({value!r}); the first real build resolves "
            "it, or run: nox -s update_pins"
        )
    if not isinstance(value, str) or not HEX40.fullmatch(value):
        extra = f' or "{FROM_PYTORCH}"' if allow_from_pytorch else ""
        raise UserError(
            f"{where}: 'commit' must be a string: full 40-hex lowercase{extra}, got {value!r}"
        )
    return value


def check_table(project: str, table: Mapping[str, Any], where: str) -> None:
    """Refuse unknown keys and a bad url/ref/commit, in one line naming the file and key."""
    checks, legacy = [(table, KNOWN.get(project, COMMON), where)], table.get("legacy")
    if project == "composable_kernel" and isinstance(legacy, Mapping):
        checks.append((legacy, COMMON | {"subdir"}, f"{where[:-1]}.legacy]"))
    for part, keys, at in checks:
        if unknown := sorted(set(part) - keys):
            raise UserError(f"{at}: unknown key '{unknown[0]}'{did_you_mean(unknown[0], keys)}")
    if len(checks) > 1 and "commit" in legacy:
        check_commit(legacy["commit"], checks[1][2])
    text(table, "url", where)
    text(table, "ref", where)
    if "commit" not in table:
        raise UserError(f"{where}: missing key 'commit'{did_you_mean('commit', table)}")
    check_commit(table["commit"], where, allow_from_pytorch=project == "aotriton")


def table_of(path: Path, project: str) -> dict[str, Any]:
    """The [project] table of path, unchecked; one line for a missing file or table."""
    data = load_toml(path, f"pin file for {project}")
    table = data.get(project)
    if not isinstance(table, dict):
        raise UserError(f"{display(path)}: missing table [{project}]{did_you_mean(project, data)}")
    return table


def read_table(project: str, directory: Path, environ=None) -> tuple[Path, dict[str, Any]]:
    """(file, [project] table) of project's pin in directory (pytorch: the line's), unchecked."""
    name = LINES[line(environ)] if project == "pytorch" else f"{project}.toml"
    return directory / name, table_of(directory / name, project)


def aotriton_version(directory: Path) -> str | None:
    """The AOTriton `version` in directory's aotriton.toml, or None."""
    path = directory / "aotriton.toml"
    version = table_of(path, "aotriton").get("version") if path.is_file() else None
    return version if isinstance(version, str) else None


def check_file(path: Path, project: str) -> dict[str, Any]:
    check_table(project, table := table_of(path, project), f"{display(path)} [{project}]")
    return table


def set_values(path: Path, table: str, values: Mapping[str, str | Sequence[str]]) -> bool:
    """Set keys of [table] ("pytorch.aotriton") in path, every other byte kept; True if changed."""
    import tomlkit

    load_toml(path, "pin file")  # a missing or malformed file: the readers' one line
    before = Path(path).read_text()
    node = document = tomlkit.parse(before)
    for part in table.split("."):
        node = node.setdefault(part, tomlkit.table())
        if not isinstance(node, dict):
            raise UserError(f"{display(path)}: [{table}] is not a table")
    for key, value in values.items():
        wanted = value if isinstance(value, str) else list(value)
        if node.get(key) != wanted:
            node[key] = wanted
    if (after := document.as_string()) == before:
        return False
    stamps.write_text_atomic(Path(path), after)
    return True


def describe_line(pins_dir: Path, environ: Mapping[str, str] | None = None) -> str:
    """One line from the pin files (nothing fetched): the torch line, how AOTriton agrees."""
    name = line(environ)
    try:
        path, torch = read_table("pytorch", pins_dir, environ)
        aotriton = read_table("aotriton", pins_dir, environ)[1]
    except UserError as e:
        return f"line {name}: {e}"
    commit, cmake = str(torch.get("commit") or ""), "cmake/External/aotriton.cmake"
    at = commit[:12] if HEX40.fullmatch(commit) else "(commit not resolved yet)"
    head = f"line {name}: {torch.get('url')} {torch.get('ref')} {at} ({path.name})"
    pinned = f"AOTriton {aotriton.get('version')} {str(aotriton.get('commit'))[:12]}"
    record = torch.get("aotriton") if isinstance(torch.get("aotriton"), Mapping) else {}
    source = f"[{record.get('source')}]"
    if name == "nightly" or aotriton.get("commit") == FROM_PYTORCH:
        pinned = "AOTriton from-pytorch"
        how = f"agree by construction (AOTriton is read from that torch's {cmake})"
    elif record and record.get("pytorch_commit") == commit and HEX40.fullmatch(commit):
        how = f"the torch names {record.get('version')} {source}"
    elif record and not record.get("pytorch_commit"):
        how = f"agreement known from a public record only {source}; the first real build (or "
        how += "nox -s update_pins) reads torch's file at its commit and checks it"
    else:
        how = f"not recorded at this torch commit; each build reads its {cmake} before the first "
        how += "command (nox -s update_pins records it)"
    return f"{head} x {pinned}: {how}"
