"""Changes to the env's files as transactions: after a kill at any point, the target holds the
old entries or the new ones, or a journal says what was interrupted and how to repair it.

replace_entries() swaps named entries of one directory (e.g. AOTriton in torch/lib):
  1. journal "staging" (fsync'd) before the first change, then the new entries are copied into
     <dir>/.rocmfa-<label>.new (same filesystem);
  2. journal "swapping" with the exact old and new names, then, with SIGINT/SIGTERM deferred,
     each old entry is renamed aside into <dir>/.rocmfa-<label>.old and each new one renamed in
     (a directory such as aotriton.images moves as one rename, whatever it holds);
  3. journal "committed", then the aside and staging folders are removed and the journal last.
Nothing old is deleted before every new entry is in place. recover() rolls an interrupted
"staging"/"swapping" back (each name is in exactly one place, rename is atomic; "rolled-back" is
journalled before the cleanup) and finishes a "committed" one; it is idempotent, so a kill
during recovery is recovered the next time (tests/test_faults.py kills it at every step).

recorded() journals a step we cannot undo ourselves (pip replacing torch): the journal names the
one command that repairs it and is removed when the step finished.

Journals live in <env prefix>/.rocmfa/journal/, next to the env's lock; every session looks
there first (scripts/env/session_guard.py). A journal is confined before anything acts on it
(check()): its target lies inside that env, its staging and aside folders are the names
replace_entries() writes for its label, every entry is a plain name. A journal that is not
readable or breaks a rule is never acted on; `nox -s repair` moves it to
<env prefix>/.rocmfa/quarantine/ (set_aside()), so a damaged or hand-edited file costs one
repair and can never turn recovery into a move or delete outside the env.

Test hook: ROCMFA_FAULT_AT=<n or step name> SIGKILLs the process at the n-th fault_point() of
the run (or at the step of that name), so the tests kill every step deterministically;
ROCMFA_FAULT_SIGNAL=SIGSTOP stops it there instead. Not for users.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scripts.plumbing.errors import UserError

FAULT_ENV = "ROCMFA_FAULT_AT"
STATE_DIR = ".rocmfa"
JOURNAL_VERSION = 1
REPAIR = "nox -s repair"
PHASES = ("staging", "swapping", "rolled-back", "committed")
_faults_passed = 0


def fault_point(step: str) -> None:
    """Test hook (see the module docstring); costs one environment lookup otherwise."""
    global _faults_passed
    wanted = os.environ.get(FAULT_ENV)
    if not wanted:
        return
    _faults_passed += 1
    if wanted in (step, str(_faults_passed)):
        # ROCMFA_FAULT_SIGNAL=SIGSTOP pauses there instead (a run that holds its locks)
        os.kill(os.getpid(), signal.Signals[os.environ.get("ROCMFA_FAULT_SIGNAL", "SIGKILL")])


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT/SIGTERM wait until the block is done, then act as they would have."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: caught.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            signal.raise_signal(caught[0])


def state_dir(prefix: Path) -> Path:
    return prefix / STATE_DIR


def journal_dir(prefix: Path) -> Path:
    return state_dir(prefix) / "journal"


def quarantine_dir(prefix: Path) -> Path:
    return state_dir(prefix) / "quarantine"


def env_of(journal: Path) -> Path:
    """<prefix> of <prefix>/.rocmfa/journal/<label>.json."""
    return journal.parents[2]


def staging_name(label: str) -> str:
    return f".rocmfa-{label}.new"


def aside_name(label: str) -> str:
    return f".rocmfa-{label}.old"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_journal(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(record, indent=1) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _remove_journal(path: Path) -> None:
    path.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def pending(prefix: Path) -> list[tuple[Path, dict[str, Any] | None]]:
    """Journals of interrupted changes to this env: (path, record or None when unreadable)."""
    folder = journal_dir(prefix)
    try:
        names = sorted(p for p in folder.iterdir() if p.suffix == ".json")
    except FileNotFoundError:
        return []
    return [(path, read_journal(path)) for path in names]


def read_journal(path: Path) -> dict[str, Any] | None:
    """The journal's record, or None when it is unreadable (garbage, not UTF-8, not JSON)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def describe(path: Path, record: dict[str, Any] | None) -> str:
    """One line: what is half-done and the one command that repairs it."""
    if record is None:
        return describe_refused(path, "not readable JSON")
    why = check(path, record)
    if why:
        return describe_refused(path, why)
    where = record.get("target", "?")
    return (
        f"{where} is half-installed: {record.get('what', '?')} was interrupted "
        f"({record.get('phase', '?')}; {record.get('session', '?')} pid {record.get('pid', '?')} "
        f"at {record.get('started', '?')}); repair: {record.get('repair', REPAIR)}"
    )


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _confined(target: str, prefix: Path) -> bool:
    """target lies inside prefix, as written (no '..') and once symlinks are resolved."""
    path = Path(target)
    if ".." in path.parts or not _inside(path, prefix):
        return False
    try:
        return _inside(path.resolve(), prefix.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        return False


def _plain_name(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name


def check(path: Path, record: dict[str, Any]) -> str | None:
    """Why this journal must not be acted on, or None. A journal is confined to its env:
    the target lies inside <prefix> (as written and once symlinks are resolved), staging and
    aside are the names replace_entries() writes for the journal's label, entries are plain
    names, an opaque journal's repair is a nox session."""
    kind = record.get("kind")
    if kind == "opaque":
        repair, by = record.get("repair"), record.get("repaired_by")
        if not (isinstance(repair, str) and repair.startswith("nox -s ") and _plain_name(by)):
            return "its repair is not a nox session"
        if any(ord(c) < 32 for c in repair):
            return "its repair is not one line"
        return None
    if kind != "replace":
        return f"unknown kind {kind!r}"
    prefix = env_of(path)
    target = record.get("target")
    if not isinstance(target, str) or not os.path.isabs(target):
        return f"target {target!r} is not an absolute path"
    if not _confined(target, prefix):
        return f"target {target} is outside the env {prefix}"
    label = path.stem
    if record.get("staging") != staging_name(label) or record.get("aside") != aside_name(label):
        return f"staging/aside are not {staging_name(label)}/{aside_name(label)}"
    for key in ("old", "new"):
        names = record.get(key, [])
        if not isinstance(names, list) or not all(_plain_name(n) for n in names):
            return f"{key!r} is not a list of plain names"
    if record.get("phase") not in PHASES:
        return f"unknown phase {record.get('phase')!r}"
    for name in (staging_name(label), aside_name(label)):
        folder = Path(target) / name  # a symlink here would carry a rename out of the env
        if folder.is_symlink() or (os.path.lexists(folder) and not folder.is_dir()):
            return f"{folder} is not a folder of ours"
    return None


def _entries(record: dict[str, Any]) -> tuple[Path, Path, Path, list[str], list[str]]:
    """A checked journal's folders and names."""
    target = Path(record["target"])
    staging, aside = target / record["staging"], target / record["aside"]
    return target, staging, aside, list(record.get("old", [])), list(record.get("new", []))


def describe_refused(path: Path, why: str) -> str:
    return (
        f"refused journal {path} ({why}); nothing was done; the repair sets it aside in "
        f"{quarantine_dir(env_of(path))}; repair: {REPAIR}"
    )


def set_aside(path: Path, record: dict[str, Any] | None) -> str:
    """`nox -s repair` on a refused journal: say what its target holds (touching nothing),
    then move the journal into the env's quarantine folder. One line."""
    why = "not readable JSON" if record is None else check(path, record)
    found = "it names no target"
    target = record.get("target") if record is not None else None
    if isinstance(target, str) and os.path.isabs(target):
        if not _confined(target, env_of(path)):
            found = f"{target} is outside the env and was left untouched"
        elif not os.path.isdir(target):
            found = f"{target} is not a folder"
        else:
            ours = sorted(p.name for p in Path(target).glob(".rocmfa-*"))
            found = f"{target} holds " + (", ".join(ours) if ours else "no leftovers of ours")
    folder = quarantine_dir(env_of(path))
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / f"{time.strftime('%Y%m%dT%H%M%S')}-{path.name}"
    n = 1
    while os.path.lexists(dest):
        n += 1
        dest = folder / f"{time.strftime('%Y%m%dT%H%M%S')}-{n}-{path.name}"
    os.rename(path, dest)
    fault_point("quarantined")
    _fsync_dir(folder)
    _fsync_dir(path.parent)
    return (
        f"refused journal {path.name} ({why}): {found}; nothing in the env was changed; "
        f"the journal is set aside as {dest}"
    )


def quarantined(prefix: Path) -> list[Path]:
    """Journals that repair set aside (doctor names them)."""
    folder = quarantine_dir(prefix)
    return sorted(folder.iterdir()) if folder.is_dir() else []


def _remove_tree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def recover(path: Path, record: dict[str, Any] | None) -> str:
    """Roll an interrupted replace_entries back (or finish a committed one); idempotent.
    Returns what was done, in one line. The caller holds the env's lock."""
    if record is None or check(path, record) or record.get("kind") != "replace":
        raise UserError(describe(path, record))
    target, staging, aside, old, new = _entries(record)
    phase = record.get("phase")
    with signals_deferred():
        if phase == "swapping":
            for name in new:  # moved in -> back to staging
                if not os.path.lexists(staging / name) and os.path.lexists(target / name):
                    os.rename(target / name, staging / name)
                    fault_point(f"recover:out:{name}")
            for name in old:  # aside -> back in place
                if os.path.lexists(aside / name):
                    if os.path.lexists(target / name):
                        _remove_tree(target / name)
                    os.rename(aside / name, target / name)
                    fault_point(f"recover:back:{name}")
            _fsync_dir(target)
            # before the cleanup: once staging is gone, the loops above could no longer tell
            # a restored old entry from a new one of the same name
            _write_journal(path, {**record, "phase": "rolled-back"})
            fault_point("recover:rolled-back")
            done = "rolled back to what was there before"
        elif phase == "rolled-back":
            done = "rolled back to what was there before"
        else:
            done = "finished" if phase == "committed" else "nothing had changed; cleaned up"
        _remove_tree(staging)
        _remove_tree(aside)
        fault_point("recover:cleaned")
        _remove_journal(path)
    return f"recovered the interrupted {record.get('what', 'change')} in {target}: {done}"


def _record(what: str, target: Path, session: str, repair: str) -> dict[str, Any]:
    return {
        "version": JOURNAL_VERSION,
        "what": what,
        "target": str(target),
        "session": session,
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "repair": repair,
    }


def replace_entries(
    prefix: Path,
    target: Path,
    *,
    label: str,
    what: str,
    session: str,
    remove: list[str],
    stage: Callable[[Path], list[str]],
) -> list[str]:
    """Replace the entries `remove` of target by what stage(folder) puts into folder (it
    returns the names it made). See the module docstring for the steps."""
    journal = journal_dir(prefix) / f"{label}.json"
    if journal.exists():
        recover(journal, read_journal(journal))
    staging = target / staging_name(label)
    aside = target / aside_name(label)
    record = {
        **_record(what, target, session, REPAIR),
        "kind": "replace",
        "staging": staging.name,
        "aside": aside.name,
        "phase": "staging",
        "old": [],
        "new": [],
    }
    _write_journal(journal, record)
    fault_point("journal:staging")
    try:
        _remove_tree(staging)
        _remove_tree(aside)
        staging.mkdir()
        names = stage(staging)
        fault_point("staged")
        old = sorted(set(remove) | {n for n in names if os.path.lexists(target / n)})
        old = [n for n in old if os.path.lexists(target / n)]
        _write_journal(journal, {**record, "phase": "swapping", "old": old, "new": names})
        fault_point("journal:swapping")
        with signals_deferred():
            aside.mkdir()
            for name in old:
                os.rename(target / name, aside / name)
                fault_point(f"aside:{name}")
            for name in names:
                os.rename(staging / name, target / name)
                fault_point(f"in:{name}")
            _fsync_dir(target)
            _write_journal(journal, {**record, "phase": "committed", "old": old, "new": names})
            fault_point("journal:committed")
    except BaseException:
        # a failed or interrupted step: put back what was there (if that fails too, the
        # journal stays and the next session recovers)
        with contextlib.suppress(Exception):
            recover(journal, read_journal(journal))
        raise
    _remove_tree(aside)
    _remove_tree(staging)
    fault_point("cleaned")
    _remove_journal(journal)
    return names


@contextmanager
def recorded(
    prefix: Path, *, label: str, what: str, target: Path, session: str, repair: str
) -> Iterator[None]:
    """Journal a step we cannot undo (pip replacing torch): while the block runs, and after it
    failed or was killed, every session but `session` (the repair) names `repair`. Removed
    when the block finished."""
    journal = journal_dir(prefix) / f"{label}.json"
    record = {**_record(what, target, session, repair), "kind": "opaque"}
    _write_journal(journal, {**record, "phase": "running", "repaired_by": session})
    fault_point(f"journal:{label}")
    yield
    fault_point(f"done:{label}")
    _remove_journal(journal)
