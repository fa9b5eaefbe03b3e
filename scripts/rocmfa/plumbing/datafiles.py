"""Load the project's TOML data files with one-line errors instead of tracebacks."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from rocmfa.plumbing.errors import UserError, decode_error_line, os_error_line

REPO_ROOT = Path(__file__).resolve().parents[3]
DATA_DIR = REPO_ROOT / "scripts" / "rocmfa" / "data"
PINS_DIR = REPO_ROOT / "pins"


def load_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise UserError(f"{what} not found: {path}") from None
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
