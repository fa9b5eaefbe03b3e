"""What every session does around its work (noxfile `_run`): a session that changes the work dir
or the env holds its lock (scripts/rocmfa/plumbing/locks.py); a second one says which session
holds it and exits non-zero. Changes to the env's torch go through pip
(builds/aotriton_install.py): nothing here has a journal to recover."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from rocmfa.env import session_env
from rocmfa.plumbing import locks, paths
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import Session, takes_locks


@contextmanager
def guarded(declared: Session, opts: object) -> Iterator[None]:
    """Around one session: its locks (declared.changes_workdir / changes_env), where it takes
    any (options.takes_locks)."""
    if not takes_locks(declared, opts):
        yield
        return
    prefix, env_name, workdir = (getattr(opts, k, None) for k in ("prefix", "env_name", "workdir"))
    try:
        _, location, work = session_env.locate(prefix, env_name, workdir)
        env = location.prefix
    except UserError:  # the session itself reports a bad --env-name
        env, work = None, paths.workdir(workdir)
    with ExitStack() as stack:
        env_there = env is not None and env.is_dir()
        if declared.changes_workdir or (declared.changes_env and not env_there):
            lock = work / locks.LOCK_NAME
            stack.enter_context(locks.hold(lock, f"workdir {work}", declared.name))
        if declared.changes_env and env_there:
            lock = env / ".rocmfa" / "lock"
            stack.enter_context(locks.hold(lock, f"env {env}", declared.name))
        yield
