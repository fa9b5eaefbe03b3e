"""UserError (bad input, failed preconditions), one-line forms of OS and decoding errors, and the
project's TOML data files loaded and their tables checked with them."""

from __future__ import annotations

import errno
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any


class UserError(Exception):
    """A problem the user can fix; reported as one line and a non-zero exit, no traceback."""


# read at import: an EMFILE or ENOSPC error could not open it later
FIXES = tomllib.loads(Path(__file__).parents[1].joinpath("data/os_fixes.toml").read_text())


def network_error_line(error: BaseException) -> str:
    """One line for a library's network error: its kind and, for requests, urllib3's reason."""
    reason = getattr(error.args[0], "reason", None) if error.args else None
    text = " ".join(str(error).split()) if reason is None else str(reason).rsplit(": ", 1)[-1]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def os_error_line(error: OSError) -> str:
    """'cannot use PATH: CAUSE; fix: ...' for an OSError from a path we own."""
    where = error.filename if error.filename is not None else "a file"
    if error.filename2 is not None:
        where = f"{where} -> {error.filename2}"
    cause = error.strerror or type(error).__name__
    fix = FIXES.get(errno.errorcode.get(error.errno or 0, ""), "check the path and its permissions")
    return f"cannot use {where}: {cause} (errno {error.errno}); fix: {fix}"


def decode_error_line(error: UnicodeDecodeError, path: object = None) -> str:
    where = f"{path} " if path is not None else "a data file "
    fix = "re-save it as UTF-8, or delete it when it is a record we wrote (stamps, run manifests)"
    return f"{where}is not UTF-8 text (byte {error.start}: {error.reason}); fix: {fix}"


def _swapped(a: str, b: str) -> bool:
    """b is a with two characters swapped (gfx1115 / gfx1151)."""
    diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    return len(diff) == 2 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """' (did you mean 'x'?)': same but case, two characters swapped (gfx1115), difflib; or ''."""
    import difflib  # only on an error path: every session imports this module

    options = sorted(choices)
    wanted = word.strip().lower()
    match = (
        [c for c in options if c.lower() == wanted]
        or [c for c in options if len(c) == len(wanted) and _swapped(wanted, c.lower())]
        or difflib.get_close_matches(wanted, options, n=1, cutoff=cutoff)
    )
    return f" (did you mean '{match[0]}'?)" if match else ""


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


Rule = tuple[Callable[[Any], Any], str, bool]  # ok(value), what a good value is, required


def require(table: Mapping[str, Any], key: str, rule: type | Rule, where: str) -> Any:
    """table[key] checked by rule (a type: present, of that type); one line naming where and key."""
    if isinstance(rule, type):
        kind = rule
        rule = (lambda value: isinstance(value, kind), kind.__name__, True)
    ok, good, required = rule
    if key not in table:
        if required:
            raise UserError(f"{where}: missing key '{key}'{did_you_mean(key, table)}")
        return None
    try:
        if not ok(table[key]):
            raise UserError(f"must be {good}, got {table[key]!r}")
    except UserError as e:  # ok() may raise its own kind and reason (Unresolved)
        raise type(e)(f"{where}: '{key}' {e}") from None
    return table[key]


def checked(table: object, where: str, rules: Mapping[str, Rule]) -> None:
    """Check table's keys by rules, unknown keys refused."""
    if not isinstance(table, Mapping):
        raise UserError(f"{where}: must be a table")
    if unknown := sorted(set(table) - set(rules)):
        raise UserError(f"{where}: unknown key '{unknown[0]}'{did_you_mean(unknown[0], rules)}")
    for key, rule in rules.items():
        require(table, key, rule, where)


def filled(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def inside(path: object) -> bool:
    """A relative path that stays inside its tree."""
    parts = PurePosixPath(path).parts if isinstance(path, str) else ("..",)
    return not str(path).startswith(("/", "-")) and ".." not in parts


TEXT: Rule = (filled, "a non-empty string", True)
