"""Source checkouts at a pinned commit, without ever losing the user's work.

ensure_checkout() clones or fetches the pin's repository into the work directory and puts a
detached HEAD on exactly the pinned commit (submodules as the project needs). Every commit we
put HEAD on is recorded as a ref under refs/rocmfa/ (pin-<commit> for pins, patched-<commit>
for the HEAD that scripts.sources.patches made), so "extra commits" has a precise meaning: commits
reachable from HEAD that are neither upstream (remote refs) nor ours. A checkout with local
edits or extra commits is never reset, cleaned or deleted without force=True.

The submodule step is ours too: before it runs, .git/rocmfa-submodules.json records the HEAD and
the paths it initialises; it is removed when the step finishes. When the step stopped part way
(a later submodule's clone broke, or a fetched repository lacked the pinned commit), git leaves
the submodules it had cloned without a checkout or at another commit, which `git status` shows
as modified. The next run, at the same HEAD and with changes only under those paths, resumes the
step (`submodule update --init --force -- <paths>`) instead of calling them local edits; an edit
anywhere else is still refused.

Under a dry-run Runner nothing runs, not even read-only git queries: the commands a real run
may need are printed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts.plumbing.commands import Runner
from scripts.plumbing.errors import UserError
from scripts.sources.pins import Pin

REF_PREFIX = "refs/rocmfa"
STATE_FILE = "rocmfa-checkout.json"  # inside .git: {base, head, patches, set}
SUBMODULE_STEP_FILE = "rocmfa-submodules.json"  # inside .git: {head, paths} of an unfinished step


def pin_ref(commit: str) -> str:
    return f"{REF_PREFIX}/pin-{commit}"


def patched_ref(commit: str) -> str:
    return f"{REF_PREFIX}/patched-{commit}"


def git(
    runner: Runner,
    repo: Path,
    *args: str,
    capture: bool = True,
    check: bool = True,
    sets: dict[str, str] | None = None,
    dry_run_output: str = "",
) -> subprocess.CompletedProcess[str]:
    return runner.run(
        ["git", *args],
        cwd=repo,
        capture=capture,
        check=check,
        sets=sets,
        dry_run_output=dry_run_output,
    )


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


@dataclass(frozen=True)
class State:
    """What scripts.sources.patches recorded after applying a set: base (pinned commit), head."""

    base: str
    head: str
    patches: tuple[str, ...]
    set_dir: str


def read_state(checkout: Path) -> State | None:
    try:
        raw = json.loads((Path(checkout) / ".git" / STATE_FILE).read_text())
        return State(raw["base"], raw["head"], tuple(raw["patches"]), raw.get("set", ""))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_state(checkout: Path, state: State) -> None:
    from scripts.plumbing import stamps

    record = {
        "base": state.base,
        "head": state.head,
        "patches": list(state.patches),
        "set": state.set_dir,
    }
    stamps.write_text_atomic(Path(checkout) / ".git" / STATE_FILE, json.dumps(record, indent=1))


def head_commit(runner: Runner, checkout: Path) -> str | None:
    result = git(runner, checkout, "rev-parse", "--verify", "-q", "HEAD", check=False)
    return result.stdout.strip() or None if result.returncode == 0 else None


def tracked_changes(runner: Runner, checkout: Path) -> list[str]:
    """`git status --porcelain` lines for tracked files and submodules (untracked files are
    left alone by every step here, so they do not count)."""
    result = git(runner, checkout, "status", "--porcelain", "--untracked-files=no")
    return [line for line in result.stdout.splitlines() if line.strip()]


def unfinished_submodule_step(checkout: Path, head: str | None) -> tuple[str, ...]:
    """The paths of our submodule step that did not finish at this HEAD; () when none."""
    try:
        raw = json.loads((Path(checkout) / ".git" / SUBMODULE_STEP_FILE).read_text())
        paths = tuple(str(p) for p in raw["paths"])
    except (OSError, ValueError, KeyError, TypeError):
        return ()
    return paths if head and raw.get("head") == head else ()


def _only_under(changes: list[str], paths: Sequence[str]) -> bool:
    """Every `status --porcelain` line is one of paths (a submodule shows as its path)."""
    return bool(paths) and all(line[3:].strip() in paths for line in changes)


def has_commit(runner: Runner, checkout: Path, commit: str) -> bool:
    result = git(runner, checkout, "cat-file", "-e", f"{commit}^{{commit}}", check=False)
    return result.returncode == 0


def _submodule_paths(submodules: Sequence[str] | None) -> tuple[str, ...]:
    """The pinned submodule paths (scripts.sources.pin_submodules); none for a falsy value."""
    if not submodules:
        return ()
    if isinstance(submodules, str) or submodules is True:
        raise TypeError("submodules must be the pinned list of paths")
    return tuple(submodules)


def _submodules_ready(runner: Runner, checkout: Path, submodules: Sequence[str] | None) -> bool:
    """Every pinned path initialised and at the commit the tree records (' ' status)."""
    paths = _submodule_paths(submodules)
    if not paths:
        return True
    result = git(runner, checkout, "submodule", "status", "--", *paths, check=False)
    if result.returncode != 0:
        return False
    lines = [line for line in result.stdout.splitlines() if line]
    return len(lines) == len(paths) and all(line[:1] == " " for line in lines)


def ensure_checkout(
    pin: Pin,
    dest: Path,
    runner: Runner,
    *,
    force: bool = False,
    submodules: Sequence[str] | None = None,
) -> Path:
    """Make dest a checkout of pin.url at exactly pin.commit (or at the patched state that
    scripts.sources.patches recorded for it), with exactly the pinned submodule paths
    initialised (`git submodule update --init -- <paths>`). Returns dest."""
    dest = Path(dest)
    if runner.dry_run:
        _print_plan(pin, dest, runner, force=force, submodules=submodules)
        return dest
    _replace_non_checkout(dest, runner, force=force)
    if not (dest / ".git").exists():
        dest.mkdir(parents=True, exist_ok=True)
        git(runner, dest, "init", "-q")
        git(runner, dest, "remote", "add", "origin", pin.url)
    elif _reuse_checkout(pin, dest, runner, force=force, submodules=submodules):
        return dest
    _fetch(pin, dest, runner)
    git(runner, dest, "update-ref", pin_ref(pin.commit), pin.commit)
    git(
        runner,
        dest,
        "-c",
        "advice.detachedHead=false",
        "checkout",
        "-q",
        *(["-f"] if force else []),
        "--detach",
        pin.commit,
        capture=False,
    )
    _update_submodules(runner, dest, submodules, force=force, head=pin.commit)
    runner.say(f"{pin.project}: checkout at {pin.commit[:12]} ({dest})")
    return dest


def _replace_non_checkout(dest: Path, runner: Runner, *, force: bool) -> None:
    """An empty folder is used as it is; anything else that is not a git checkout is refused,
    or removed with --discard-local-edits."""
    if not dest.exists() or (dest / ".git").exists():
        return
    if dest.is_dir() and not any(dest.iterdir()):
        return
    if not force:
        raise UserError(
            f"{dest} exists and is not a git checkout; move it away, or pass "
            "--discard-local-edits to replace it"
        )
    runner.say(f"--discard-local-edits: removing {dest} (not a git checkout)")
    if dest.is_dir():
        shutil.rmtree(dest)
    else:
        dest.unlink()


def _reuse_checkout(
    pin: Pin,
    dest: Path,
    runner: Runner,
    *,
    force: bool,
    submodules: Sequence[str] | None,
) -> bool:
    """An existing checkout: True when it is (now) at the pin or our patched state with its
    submodules; False when it must be fetched and moved to the pin (local edits and commits
    that are not ours refused unless --discard-local-edits)."""
    head = head_commit(runner, dest)
    state = read_state(dest)
    ours = head == pin.commit or (
        state is not None and state.base == pin.commit and head == state.head
    )
    changes = tracked_changes(runner, dest) if head else []
    pending = unfinished_submodule_step(dest, head) if ours else ()
    if changes and _only_under(changes, pending):
        # Our own submodule step stopped part way at this HEAD: what it left is ours.
        runner.say(
            f"{pin.project}: resuming the submodule step that stopped part way "
            f"({', '.join(pending)})"
        )
        _update_submodules(runner, dest, submodules, force=True, head=head)
        runner.say(f"{pin.project}: checkout at {head[:12]} ({dest}) - submodules added")
        return True
    if ours and not changes:
        if _submodules_ready(runner, dest, submodules):
            runner.say(f"{pin.project}: checkout at {head[:12]} ({dest}) - up to date")
            return True
        # HEAD is the pin or our patched state: only the submodules are missing, so they
        # are fetched where they are; a reset would drop the applied patches.
        _update_submodules(runner, dest, submodules, force=force, head=head)
        runner.say(f"{pin.project}: checkout at {head[:12]} ({dest}) - submodules added")
        return True
    if changes:
        if not force:
            raise UserError(
                f"{dest} has local edits ({len(changes)} path(s), e.g. "
                f"'{changes[0].strip()}'); commit or stash them, or pass "
                "--discard-local-edits to discard them"
            )
        runner.say(f"--discard-local-edits: discarding local edits in {dest}")
        git(runner, dest, "reset", "-q", "--hard", capture=False)
    if head and head != pin.commit:
        _refuse_foreign_commits(dest, runner, head, force=force)
    _set_origin(runner, dest, pin.url)
    return False


def _refuse_foreign_commits(dest: Path, runner: Runner, head: str, *, force: bool) -> None:
    extra = git(
        runner,
        dest,
        "rev-list",
        "--max-count=100",
        "HEAD",
        "--not",
        f"--glob={REF_PREFIX}",
        "--remotes",
    ).stdout.split()
    if extra and not force:
        raise UserError(
            f"{dest} has {len(extra)}{'+' if len(extra) >= 100 else ''} commit(s) that are"
            f" not upstream or ours (HEAD {head[:12]}); keep them on a branch, or pass "
            "--discard-local-edits to move HEAD to the pin"
        )


def _set_origin(runner: Runner, dest: Path, url: str) -> None:
    current = git(runner, dest, "remote", "get-url", "origin", check=False)
    if current.returncode != 0:
        git(runner, dest, "remote", "add", "origin", url)
    elif current.stdout.strip() != url:
        git(runner, dest, "remote", "set-url", "origin", url)


def _fetch(pin: Pin, dest: Path, runner: Runner) -> None:
    if has_commit(runner, dest, pin.commit):
        return
    depth = pin.data.get("depth")
    depth_args = [f"--depth={int(depth)}"] if isinstance(depth, int) and depth > 0 else []
    first = git(
        runner, dest, "fetch", "-q", "--no-tags", *depth_args, "origin", pin.commit, check=False
    )
    detail = last_line(first.stderr)
    if first.returncode != 0 or not has_commit(runner, dest, pin.commit):
        # Servers that refuse fetching by commit id: fetch the ref and look for the commit.
        second = git(runner, dest, "fetch", "-q", "--no-tags", "origin", pin.ref, check=False)
        detail = last_line(second.stderr) or detail
        if second.returncode == 0 and has_commit(runner, dest, pin.commit):
            return
        raise UserError(
            f"cannot fetch {pin.project} {pin.commit[:12]} from {pin.url}"
            + (f": {detail}" if detail else f": commit not found on ref {pin.ref}")
        )


def _update_submodules(
    runner: Runner, dest: Path, submodules: Sequence[str] | None, *, force: bool, head: str
) -> None:
    paths = _submodule_paths(submodules)
    if not paths:
        return
    from scripts.plumbing import stamps

    step = dest / ".git" / SUBMODULE_STEP_FILE
    stamps.write_text_atomic(step, json.dumps({"head": head, "paths": list(paths)}))
    git(runner, dest, "submodule", "sync", "-q", "--", *paths, capture=False)
    result = git(
        runner,
        dest,
        "submodule",
        "update",
        "-q",
        "--init",
        *(["--force"] if force else []),
        "--",
        *paths,
        check=False,
    )
    if result.returncode != 0:
        raise UserError(
            f"submodule update failed in {dest} for {', '.join(paths)}: "
            f"{last_line(result.stderr) or 'see output'} (the next run resumes it)"
        )
    step.unlink(missing_ok=True)


def _print_plan(
    pin: Pin, dest: Path, runner: Runner, *, force: bool, submodules: Sequence[str] | None
) -> None:
    if not (dest / ".git").exists():
        git(runner, dest, "init", "-q")
        git(runner, dest, "remote", "add", "origin", pin.url)
    else:
        runner.say(f"[dry-run] existing checkout {dest}: checks HEAD and local edits first")
        git(runner, dest, "rev-parse", "--verify", "-q", "HEAD")
        git(runner, dest, "status", "--porcelain", "--untracked-files=no")
    git(runner, dest, "fetch", "-q", "--no-tags", "origin", pin.commit)
    git(runner, dest, "update-ref", pin_ref(pin.commit), pin.commit)
    git(runner, dest, "checkout", "-q", *(["-f"] if force else []), "--detach", pin.commit)
    paths = _submodule_paths(submodules)
    if paths:
        git(runner, dest, "submodule", "sync", "-q", "--", *paths)
        git(runner, dest, "submodule", "update", "-q", "--init", "--", *paths)
