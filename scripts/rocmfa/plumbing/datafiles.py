"""Load the project's TOML data files and check their tables, with one-line errors."""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from rocmfa.plumbing.errors import UserError, decode_error_line, did_you_mean, os_error_line

REPO_ROOT = Path(__file__).resolve().parents[3]
DATA_DIR = REPO_ROOT / "scripts" / "rocmfa" / "data"
PINS_DIR = REPO_ROOT / "pins"


def load_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"malformed {what} {path}: {e}") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{what}: {decode_error_line(e, path)}") from None
    except OSError as e:
        raise UserError(f"cannot read {what}: {os_error_line(e)}") from None


def require(table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """table[key], checked for presence and type; errors name the file and key."""
    if key not in table:
        raise UserError(f"{where}: missing key '{key}'")
    value = table[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise UserError(f"{where}: '{key}' must be {names}, got {value!r}")
    return value


Rule = tuple[Callable[[Any], Any], str, bool]  # ok(value), what a good value is, required


def checked(table: object, where: str, rules: Mapping[str, Rule]) -> None:
    """Check table's keys by rules, unknown keys refused; one line naming where and the key."""
    if not isinstance(table, Mapping):
        raise UserError(f"{where}: must be a table")
    if unknown := sorted(set(table) - set(rules)):
        raise UserError(f"{where}: unknown key '{unknown[0]}'{did_you_mean(unknown[0], rules)}")
    for key, (ok, good, required) in rules.items():
        if key not in table and required:
            raise UserError(f"{where}: missing key '{key}'{did_you_mean(key, table)}")
        try:
            if key in table and not ok(table[key]):
                raise UserError(f"must be {good}, got {table[key]!r}")
        except UserError as e:  # ok() may raise its own kind and reason (Unresolved)
            raise type(e)(f"{where}: '{key}' {e}") from None


def filled(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def inside(path: object) -> bool:
    """A relative path that stays inside its tree."""
    parts = PurePosixPath(path).parts if isinstance(path, str) else ("..",)
    return not str(path).startswith(("/", "-")) and ".." not in parts


TEXT: Rule = (filled, "a non-empty string", True)
