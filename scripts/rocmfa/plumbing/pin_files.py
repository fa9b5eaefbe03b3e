"""pins/<project>.toml: where, what a table may hold, the one reader and writer (tomlkit)."""

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rocmfa.plumbing import stamps
from rocmfa.plumbing.errors import TEXT, UserError, checked, did_you_mean, filled, inside, load_toml
from rocmfa.plumbing.options import DATA_DIR, PINS_DIR, PROJECTS, REPO_ROOT, environment  # noqa: F401 (PROJECTS: for sources/)

FROM_PYTORCH = "from-pytorch"
LINES = {"release": "pytorch.toml", "nightly": "pytorch-nightly.toml"}  # nightly: AOTriton follows
HEX40 = re.compile(r"[0-9a-f]{40}")
COMPONENTS = load_toml(DATA_DIR / "pytorch_components.toml", "components")["component"]
COMPANIONS = {c["pin_key"]: c for c in COMPONENTS if c["pin_key"]}  # [pytorch.<pin_key>] tables
TRITON_PIN = ".ci/docker/ci_commit_pins/triton.txt"  # in torch: the triton commit it builds with


class Unresolved(UserError):
    """A pin whose commit is not resolved yet."""


def line(environ: Mapping[str, str] | None = None) -> str:
    chosen = environment(environ).pytorch_line or "release"
    if chosen not in LINES:
        raise UserError(f"$ROCMFA_PYTORCH_LINE={chosen!r}: known lines: release (default), nightly")
    return chosen


def pins_dir(requested: str | os.PathLike[str] | None = None, environ=None) -> Path:
    chosen = requested or environment(environ).pins_dir or PINS_DIR
    return Path(chosen).expanduser().resolve()


def display(path: Path) -> str:
    inside = Path(path).is_relative_to(REPO_ROOT)
    return str(Path(path).relative_to(REPO_ROOT) if inside else path)


def resolved(value: object) -> bool:
    """A full 40-hex commit; Unresolved for a placeholder."""
    if isinstance(value, str) and value.strip().lower() in ("", "unknown", "todo", "none"):
        why = "the first real build resolves it, or run: nox -s update_pins"
        raise Unresolved(f"is not resolved yet ({value.strip()!r}); {why}")
    return isinstance(value, str) and bool(HEX40.fullmatch(value.strip()))


HEX = "a string: full 40-hex lowercase"
ANY = (lambda _: True, "", False)
TABLE = (lambda v: isinstance(v, Mapping), "a table", False)
STRING = (lambda v: isinstance(v, str), "a string", False)
COMMON = {
    "url": TEXT,
    "ref": TEXT,
    "commit": (resolved, HEX, True),
    "depth": (lambda v: type(v) is int and v > 0, "a positive integer (fetch --depth=N)", False),
}
CK = COMMON | {"subdir": (inside, "a relative path", False)}
RULES = {  # what each project's table, and each [<project>.<key>] table, may hold
    "therock": COMMON,
    "pytorch": COMMON
    | dict.fromkeys((*COMPANIONS, "aotriton"), TABLE)
    | {
        "raw_url": (
            lambda v: isinstance(v, str) and "{commit}" in v and "{path}" in v,
            "a string containing {commit} and {path}",
            False,
        ),
    },
    **{f"pytorch.{name}": dict.fromkeys(("url", "ref", "commit"), STRING) for name in COMPANIONS},
    # what the torch pin's own aotriton.cmake names (update_pins records it)
    "pytorch.aotriton": {"version": STRING}
    | dict.fromkeys(("pytorch_commit", "commit", "source"), (STRING[0], "a string", True)),
    "aotriton": COMMON
    | {"tuner": ANY, "release": TABLE, "aiter": TABLE}  # release: aotriton_release.release_info
    | {
        "commit": (lambda v: v == FROM_PYTORCH or resolved(v), f'{HEX} or "{FROM_PYTORCH}"', True),
        "version": (filled, "a non-empty string", False),
        "submodules": (
            lambda v: isinstance(v, list) and all(filled(p) and inside(p) for p in v),
            "a list of paths inside the tree (not true: it fails on an unmapped "
            "gitlink; list the paths instead (nox -s update_pins records them))",
            False,
        ),
    },
    "aotriton.aiter": COMMON,
    "composable_kernel": CK | {"use": ANY, "legacy": TABLE},
    "composable_kernel.legacy": {k: (ok, good, False) for k, (ok, good, _) in CK.items()},
}


def check_table(project: str, table: Mapping[str, Any], where: str) -> None:
    """Refuse an unknown or bad key, in one line naming the file and key; its sub-tables too."""
    checked(table, where, RULES.get(project, COMMON))
    for key in (k for k in table if f"{project}.{k}" in RULES):
        inner = where.replace(f"[{project}]", f"[{project}.{key}]")
        checked(table[key], inner, RULES[f"{project}.{key}"])


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


def aotriton_version(directory: Path) -> str | None:  # in directory's aotriton.toml
    path = directory / "aotriton.toml"
    version = table_of(path, "aotriton").get("version") if path.is_file() else None
    return version if isinstance(version, str) else None


def check_file(path: Path, project: str) -> None:
    check_table(project, table_of(path, project), f"{display(path)} [{project}]")


def set_values(path: Path, table: str, values: Mapping[str, str | list[str]]) -> bool:
    """Set keys of [table] ("pytorch.aotriton") in path, every other byte kept; True if changed."""
    import tomlkit

    load_toml(path, "pin file")  # a missing or malformed file: the readers' one line
    before = Path(path).read_text()
    node = document = tomlkit.parse(before)
    for part in table.split("."):
        node = node.setdefault(part, tomlkit.table())
        if not isinstance(node, dict):
            raise UserError(f"{display(path)}: [{table}] is not a table")
    node.update({key: value for key, value in values.items() if node.get(key) != value})
    if (after := document.as_string()) != before:
        stamps.write_text_atomic(Path(path), after)
    return after != before


def describe_line(pins_dir: Path, environ: Mapping[str, str] | None = None) -> str:
    """One line from the pin files (nothing fetched): the torch line, how AOTriton agrees."""
    name = line(environ)
    try:
        path, torch = read_table("pytorch", pins_dir, environ)
        aotriton = read_table("aotriton", pins_dir, environ)[1]
    except UserError as e:
        return f"line {name}: {e}"
    commit = str(torch.get("commit") or "")
    cmake = "cmake/External/aotriton.cmake"
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
