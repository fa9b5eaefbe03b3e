"""A copy of this project in a temp dir, with its own conda-lock.yml written by conda-lock's
writer for the copy's environment.yml, so tests can run real `nox` against it."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def copy_project(dest: Path, *, with_lock: bool = True) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "noxfile.py", dest)
    shutil.copy(REPO_ROOT / "environment.yml", dest)
    shutil.copytree(REPO_ROOT / "scripts", dest / "scripts",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copytree(REPO_ROOT / "pins", dest / "pins")
    shutil.copytree(REPO_ROOT / "patches", dest / "patches")  # gfx908's kernels come from one
    if with_lock:
        shutil.copy(repo_lock(), dest / "conda-lock.yml")
    return dest


@functools.cache
def repo_lock() -> Path:
    """The conda-lock.yml conda-lock's writer makes for this repository's environment.yml,
    written once a test run (seconds each time) and copied into every project copy."""
    from tests.test_lockfile import write_lock_with_conda_lock

    lock = Path(tempfile.mkdtemp(prefix="rocmfa-lock-")) / "conda-lock.yml"
    atexit.register(shutil.rmtree, lock.parent, True)
    write_lock_with_conda_lock(REPO_ROOT / "environment.yml", lock)
    return lock


def standin_micromamba(bin_dir: Path) -> Path:
    """Only answers --version: the tests never reach a solve or an install through it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "micromamba"
    exe.write_text('#!/bin/sh\n[ "$1" = "--version" ] && { echo 2.5.0; exit 0; }\nexit 99\n')
    exe.chmod(0o755)
    return exe


def run_nox(project: Path, *args: str, env: dict[str, str] | None = None):
    full = {
        k: v for k, v in os.environ.items() if not k.startswith(("ROCMFA_", "MAMBA_", "CONDA_"))
    }
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(project / "noxfile.py"), *args],
        cwd=project, env=full, capture_output=True, text=True, check=False,
    )  # fmt: skip


@functools.cache
def results_dir() -> Path:
    """docs/results as measured: a copy with raw.tar.xz unpacked beside its README (the raw
    JSON and logs are kept compressed, docs/results/README.md)."""
    copy = Path(tempfile.mkdtemp(prefix="rocmfa-results-")) / "results"
    atexit.register(shutil.rmtree, copy.parent, True)
    shutil.copytree(REPO_ROOT / "docs" / "results", copy)
    with tarfile.open(copy / "raw.tar.xz") as archive:
        archive.extractall(copy, filter="data")
    return copy
