"""Find the conda manager (micromamba, mamba or conda) that creates and updates the env.

Nothing is ever downloaded in its place: a missing manager is a one-line error.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmfa.plumbing.errors import UserError


@dataclass(frozen=True)
class Manager:
    kind: str  # micromamba | mamba | conda
    exe: Path
    found_via: str


def _kind_of(exe: Path) -> str:
    name = exe.name.lower()
    for kind in ("micromamba", "mamba", "conda"):
        if name.startswith(kind):
            return kind
    return "conda"


def find_manager(environ: Mapping[str, str] | None = None) -> Manager | None:
    """$MAMBA_EXE, then $CONDA_EXE, then micromamba, mamba, conda on PATH. Never downloads."""
    environ = os.environ if environ is None else environ
    for var in ("MAMBA_EXE", "CONDA_EXE"):
        value = environ.get(var)
        if value and os.access(value, os.X_OK):
            exe = Path(value)
            return Manager(_kind_of(exe), exe, f"${var}")
    for name in ("micromamba", "mamba", "conda"):
        found = shutil.which(name, path=environ.get("PATH", ""))
        if found:
            return Manager(name, Path(found), "PATH")
    return None


def no_manager_error() -> UserError:
    return UserError(
        "no conda manager found (looked at $MAMBA_EXE, $CONDA_EXE, and micromamba, mamba, "
        "conda on PATH); install micromamba or miniforge, or set MAMBA_EXE"
    )
