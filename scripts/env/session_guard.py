"""What every session does around its work (noxfile `_call`): take the workdir and env locks
when it changes them, and first recover (or report) an interrupted change to the env's torch.

- Sessions that change the workdir or the env hold its lock (scripts/plumbing/locks.py); a
  second one says which session holds it and exits non-zero.
- A journal of an interrupted change (scripts/plumbing/transaction.py) is recovered by the next
  session of any kind that can take the env's lock; doctor and --dry-run only report it in one
  line, and a journal that no automatic step can repair (pip was killed) stops every session
  but its repair with one line naming that command.
- A journal that is unreadable or not confined to the env (transaction.check) is never acted
  on: it stops every session but `nox -s repair`, which sets it aside in
  <env>/.rocmfa/quarantine/ and says where.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from scripts.env import session_env
from scripts.plumbing import locks, paths, transaction
from scripts.plumbing.errors import UserError
from scripts.plumbing.options import Session


def env_lock(prefix: Path) -> Path:
    return transaction.state_dir(prefix) / "lock"


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


def resolved_prefix(where: Where) -> Path | None:
    found = located(where)
    return found.location.prefix if found else None


def report(prefix: Path | None) -> list[str]:
    """One line per interrupted change to the env (doctor, --dry-run)."""
    if prefix is None:
        return []
    lines = []
    for path, record in transaction.pending(prefix):
        holder = locks.holder(env_lock(prefix))
        if holder:
            lines.append(locks.busy_message(f"env {prefix}", env_lock(prefix), holder))
        else:
            lines.append(transaction.describe(path, record))
    return lines


def recover(prefix: Path, session: str, say=print) -> None:
    """Recover every journal of this env; the caller holds the env's lock. A journal that is
    unreadable or breaks a rule (transaction.check) stops every session but `repair`, which
    sets it aside."""
    for path, record in transaction.pending(prefix):
        if record is None or transaction.check(path, record):
            if session != "repair":
                raise UserError(transaction.describe(path, record))
            say(transaction.set_aside(path, record))
            continue
        if record.get("kind") == "opaque":
            if record.get("repaired_by") == session:
                continue  # this session is the repair: it redoes the step
            raise UserError(transaction.describe(path, record))
        say(transaction.recover(path, record))


@contextmanager
def guarded(declared: Session, opts: object, say=print) -> Iterator[None]:
    """Around one session: its locks (declared.changes_workdir / changes_env) and the recovery
    of the env's interrupted changes; doctor (reports_only) and a dry run only report."""
    session, where = declared.name, where_of(opts)
    found = located(where)
    prefix = found.location.prefix if found else None
    with ExitStack() as stack:
        if found is not None:  # the session sees the same env and work dir
            token = session_env.CURRENT.set(found)
            stack.callback(session_env.CURRENT.reset, token)
        if declared.reports_only or where.dry_run:
            for line in [] if declared.reports_only else report(prefix):
                say(f"WARNING: {line}")  # doctor shows these in its report
            yield
            return
        changes_env = declared.changes_env
        if declared.changes_workdir or (changes_env and not (prefix and prefix.is_dir())):
            work = found.work if found else paths.workdir(where.workdir)
            stack.enter_context(locks.hold(workdir_lock(work), f"workdir {work}", session))
        if prefix is not None and prefix.is_dir():
            if changes_env:
                stack.enter_context(locks.hold(env_lock(prefix), f"env {prefix}", session))
                recover(prefix, session, say)
            elif transaction.pending(prefix):
                # a reader recovers too, when nobody is changing the env right now
                with locks.hold(env_lock(prefix), f"env {prefix}", session):
                    recover(prefix, session, say)
        yield
