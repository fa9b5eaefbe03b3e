"""The work directory (checkouts, builds, stamps, downloads) and the folders in it."""

from __future__ import annotations

import os
from pathlib import Path

from rocmfa.plumbing.datafiles import REPO_ROOT

WORKDIR_ENV = "ROCMFA_WORKDIR"


def workdir(requested: str | os.PathLike[str] | None) -> Path:
    """The session's --workdir (or $ROCMFA_WORKDIR, resolved with its settings), else ./work."""
    return Path(requested or REPO_ROOT / "work").expanduser().resolve()


def src_dir(work: Path, project: str) -> Path:
    return work / "src" / project


def build_dir(work: Path, project: str) -> Path:
    return work / "build" / project


def stamp_path(work: Path, name: str) -> Path:  # doctor lists them as 'what is built'
    return work / "stamps" / f"{name}.json"


def downloads_dir(work: Path) -> Path:
    return work / "downloads"


def cache_dir(work: Path) -> Path:
    return work / ".cache"
