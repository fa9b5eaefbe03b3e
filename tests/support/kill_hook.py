"""Test hook: SIGKILL a whole run (its process group: our session and the pip it starts) at
the Nth change it makes under the watched folders. Changes are seen through Python's audit
events (PEP 578: a file opened for writing, rename, remove, rmdir, mkdir, chmod, rmtree), so
the real pip is killed between any two of its own steps without patching it.

Armed by ROCMFA_TEST_KILL_COUNT (a counter file shared by the processes of one run; each
change is appended to it), ROCMFA_TEST_KILL_UNDER (watched folders, ':'-separated) and
ROCMFA_TEST_KILL_AT (N; 0 or unset: count only). Every Python of the run imports it as the
sitecustomize of a folder on its PYTHONPATH (hook_dir()).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

CHANGES = {"os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.chmod", "shutil.rmtree"}


def hook_dir(folder: Path) -> Path:
    """A folder whose sitecustomize is this hook: put it on PYTHONPATH."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(__file__, folder / "sitecustomize.py")
    return folder


def run(
    argv: list, hooks: Path, under: list[Path], kill_at: int | None, env: dict[str, str]
) -> tuple[int, list[str]]:
    """(exit status, the changes made under the folders `under`) of argv run in its own process
    group with the hook folder hooks (hook_dir()) first on PYTHONPATH; kill_at: SIGKILL the
    group at that change (0: count only; None: the hook stays unarmed)."""
    counter = hooks / "changes.txt"
    counter.unlink(missing_ok=True)
    env = {**env, "PYTHONPATH": f"{hooks}:{env.get('PYTHONPATH', '')}"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the same changes on every run
    if kill_at is not None:
        env["ROCMFA_TEST_KILL_COUNT"] = str(counter)
        env["ROCMFA_TEST_KILL_UNDER"] = ":".join(map(str, under))
        env["ROCMFA_TEST_KILL_AT"] = str(kill_at)
    result = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=600, start_new_session=True
    )
    if kill_at is None and result.returncode != 0:
        raise AssertionError(result.stdout + result.stderr)
    return result.returncode, counter.read_text().splitlines() if counter.is_file() else []


def arm() -> None:
    counter = os.environ.get("ROCMFA_TEST_KILL_COUNT")
    if not counter:
        return
    roots = tuple(os.path.join(r, "") for r in os.environ["ROCMFA_TEST_KILL_UNDER"].split(":"))
    kill_at = int(os.environ.get("ROCMFA_TEST_KILL_AT") or 0)
    state = {"busy": False, "in_rmtree": False}

    def watched(path: object) -> bool:
        try:
            text = os.fsdecode(path)  # type: ignore[arg-type]
        except TypeError:
            return False
        return os.path.isabs(text) and os.path.abspath(text).startswith(roots)

    def changes(event: str, args: tuple) -> bool:
        if event == "open":
            path, mode, flags = args
            if isinstance(mode, str):
                writes = any(c in mode for c in "wax+")
            else:
                writes = bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            return writes and watched(path)
        if event == "shutil.rmtree":
            state["in_rmtree"] = watched(args[0])
            return state["in_rmtree"]
        if event not in CHANGES:
            return False
        if watched(args[0]):
            return True
        # rmtree removes by names relative to an open folder (dir_fd)
        return event in ("os.remove", "os.rmdir") and args[-1] is not None and state["in_rmtree"]

    def hook(event: str, args: tuple) -> None:
        if state["busy"] or not changes(event, args):
            return
        state["busy"] = True
        try:
            with open(counter, "a+", encoding="utf-8") as f:
                f.seek(0)
                n = len(f.read().splitlines()) + 1
                f.write(f"{event} {os.fsdecode(args[0]) if args else ''}\n")
        finally:
            state["busy"] = False
        if n == kill_at:
            os.killpg(os.getpgrp(), signal.SIGKILL)

    sys.addaudithook(hook)


arm()
