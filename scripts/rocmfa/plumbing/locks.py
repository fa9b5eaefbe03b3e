"""One flock per workdir and per env (the kernel drops it when its holder dies) on a file naming
the holder's pid, session and start; the file stays (unlinking it races the next taker)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rocmfa.plumbing.errors import UserError

LOCK_NAME = ".rocmfa.lock"


@contextlib.contextmanager
def hold(path: Path, what: str, session: str) -> Iterator[None]:
    """Hold the lock at path for the block, or fail in one line naming the holder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            by: Any = {}  # the holder's record, as it wrote it below
            with contextlib.suppress(OSError, ValueError, TypeError):
                by = dict(json.loads(os.pread(fd, 4096, 0)))
            raise UserError(
                f"{what} is in use by another session: nox -s {by.get('session', '?')} (pid "
                f"{by.get('pid', '?')}, since {by.get('since', '?')}; lock {path}); wait for it "
                "to finish or stop it, then rerun"
            ) from None
        me = {"pid": os.getpid(), "session": session, "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the flock
