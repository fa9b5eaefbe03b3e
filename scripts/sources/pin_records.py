"""Rewriting what update_pins records in pins/*.toml besides the commit (submodule paths, the
AOTriton a torch pin names), line by line so every comment stays."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from scripts.plumbing import stamps


def toml_value(value: str | Sequence[str]) -> str:
    """A TOML string or array of strings (JSON string escapes are valid TOML basic strings)."""
    if isinstance(value, str):
        return json.dumps(value)
    return "[" + ", ".join(json.dumps(v) for v in value) + "]"


def _header(line: str) -> str | None:
    stripped = line.strip()
    if stripped.startswith("[") and stripped.endswith("]") and not stripped.startswith("[["):
        return stripped[1:-1].strip()
    return None


def set_values(path: Path, table: str, values: Mapping[str, str | Sequence[str]]) -> bool:
    """Set keys of [table] (added after its last key when missing; the table is appended when
    absent). Returns True when the file changed."""
    lines = Path(path).read_text().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if _header(line) == table), None)
    if start is None:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines += ["\n", f"[{table}]\n"] + [f"{k} = {toml_value(v)}\n" for k, v in values.items()]
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if _header(lines[i]) is not None), len(lines)
        )
        last_key = start
        pending = dict(values)
        for i in range(start + 1, end):
            key = lines[i].split("=", 1)[0].strip() if "=" in lines[i] else ""
            if key and not lines[i].lstrip().startswith("#"):
                last_key = i
                if key in pending:
                    lines[i] = f"{key} = {toml_value(pending.pop(key))}\n"
        lines[last_key + 1 : last_key + 1] = [
            f"{k} = {toml_value(v)}\n" for k, v in pending.items()
        ]
    text = "".join(lines)
    if text == Path(path).read_text():
        return False
    stamps.write_text_atomic(Path(path), text)
    return True
