"""What every session does around its work (noxfile `_call`): sessions that change the workdir
or the env hold its lock (scripts/rocmfa/plumbing/locks.py); a second one says which session holds
it
and exits non-zero. Changes to the env's torch go through pip (builds/aotriton_install.py):
nothing here has a journal to recover."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from rocmfa.env import session_env
from rocmfa.plumbing import locks, paths
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import Session


def env_lock(prefix: Path) -> Path:
    return prefix / ".rocmfa" / "lock"


def workdir_lock(work: Path) -> Path:
    return work / locks.LOCK_NAME


@dataclass(frozen=True)
class Where:
    """What the guard needs from a session's options."""

    prefix: str | None = None
    env_name: str | None = None
    workdir: str | None = None
    dry_run: bool = False


def where_of(opts: object) -> Where:
    """The env/work dir options of any session's typed options (those it does not take: None)."""
    return Where(
        getattr(opts, "prefix", None),
        getattr(opts, "env_name", None),
        getattr(opts, "workdir", None),
        bool(getattr(opts, "dry_run", False)),
    )


def located(where: Where) -> session_env.Located | None:
    try:
        return session_env.locate(where.prefix, where.env_name, where.workdir)
    except UserError:
        return None  # the session itself reports a bad --env-name


@contextmanager
def guarded(declared: Session, opts: object) -> Iterator[None]:
    """Around one session: its locks (declared.changes_workdir / changes_env); doctor
    (reports_only) and a dry run take none."""
    session, where = declared.name, where_of(opts)
    found = located(where)
    prefix = found.location.prefix if found else None
    with ExitStack() as stack:
        if found is not None:  # the session sees the same env and work dir
            token = session_env.CURRENT.set(found)
            stack.callback(session_env.CURRENT.reset, token)
        if declared.reports_only or where.dry_run:
            yield
            return
        changes_env = declared.changes_env
        if declared.changes_workdir or (changes_env and not (prefix and prefix.is_dir())):
            work = found.work if found else paths.workdir(where.workdir)
            stack.enter_context(locks.hold(workdir_lock(work), f"workdir {work}", session))
        if changes_env and prefix is not None and prefix.is_dir():
            stack.enter_context(locks.hold(env_lock(prefix), f"env {prefix}", session))
        yield
