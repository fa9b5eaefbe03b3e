"""Stamps: a finished step's inputs as JSON, written last, atomically; equal digests: up to date."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def digest(inputs: Any) -> str:
    """sha256 over a canonical JSON form of inputs (dicts, lists, strings, numbers)."""
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read(path: Path) -> dict[str, Any] | None:
    """The stamp's content, or None when missing or unreadable (treated as not done)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_current(path: Path, inputs: Any) -> bool:
    return (read(path) or {}).get("inputs_digest") == digest(inputs)


def write(path: Path, inputs: Any, **extra: Any) -> None:
    """Record inputs (and extra facts, e.g. versions) atomically at path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"inputs_digest": digest(inputs), "inputs": inputs, **extra}
    write_text_atomic(path, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")


def write_text_atomic(path: Path, data: str | bytes) -> None:
    """path holds data or what it held before, never part of data (temp file + rename)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


write_bytes_atomic = write_text_atomic


# What a plan would stamp, by path, for the later sessions of the same nox run (this process):
# a chained plan of build_aotriton and build_pytorch plans torch against the AOTriton to be.
_PLANNED: dict[str, dict[str, Any]] = {}


def plan(path: Path, **facts: Any) -> None:  # facts only: a plan's inputs may be unknown
    _PLANNED[str(Path(path))] = facts


def planned(path: Path) -> dict[str, Any] | None:
    return _PLANNED.get(str(Path(path)))
