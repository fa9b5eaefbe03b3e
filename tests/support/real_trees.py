"""Helpers for the opt-in tests against real upstream git snapshots (tests/test_real_*.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support import aotriton_standins as st


def borrow_snapshot(git_dir: str, dest: Path, commit: str) -> list[str]:
    """dest: an empty repository that sees git_dir's objects and will not check out the paths
    whose blobs the snapshot lacks. Returns those paths."""
    dest.mkdir(parents=True)
    st.git(dest, "init", "-q")
    alternates = dest / ".git" / "objects" / "info" / "alternates"
    alternates.write_text(str(Path(git_dir).resolve() / "objects") + "\n")
    tree = st.git(dest, "ls-tree", "-r", "--full-tree", commit).splitlines()
    blobs = [(line.split()[2], line.split("\t", 1)[1]) for line in tree if " blob " in line]
    check = subprocess.run(
        ["git", "cat-file", "--batch-check"],
        cwd=dest,
        input="".join(f"{sha}\n" for sha, _ in blobs),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    absent = [path for (sha, path), line in zip(blobs, check, strict=True) if "missing" in line]
    if absent:
        st.git(dest, "sparse-checkout", "set", "--no-cone", "/*", *(f"!/{p}" for p in absent))
    return absent
