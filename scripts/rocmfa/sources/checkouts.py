"""Checkouts at a pinned commit that never lose the user's work (docs/aotriton.md)."""

from pathlib import Path

from rocmfa.plumbing.commands import Runner, last_line
from rocmfa.plumbing.errors import UserError
from rocmfa.sources.pins import Pin

REF_PREFIX = "refs/rocmfa"
STEP_KEY = "rocmfa.submodulestep"


def git(runner: Runner, repo: Path | None, *args: str, capture: bool = True, **kwargs):
    return runner.run(["git", *args], cwd=repo, capture=capture, **kwargs)


def head_commit(runner: Runner, checkout: Path) -> str | None:
    head = git(runner, checkout, "rev-parse", "--verify", "-q", "HEAD", check=False).stdout
    return head.strip() or None


def patched_refs(runner: Runner, checkout: Path, base: str) -> list[str]:
    listing = ["for-each-ref", "--format=%(refname)", "--points-at", "HEAD"]
    ours = git(runner, checkout, *listing, f"{REF_PREFIX}/patched/{base}/", check=False)
    return ours.stdout.split()


def tracked_changes(runner: Runner, checkout: Path) -> list[str]:
    result = git(runner, checkout, "status", "--porcelain", "--untracked-files=no")
    return [line for line in result.stdout.splitlines() if line.strip()]


def has_commit(runner: Runner, checkout: Path, commit: str) -> bool:
    found = git(runner, checkout, "cat-file", "-t", f"{commit}^{{commit}}", check=False)
    return found.stdout.strip() == "commit"


def fetch_commit(runner: Runner, checkout: Path, remote: str, commit: str, depth=None) -> str:
    """'' once checkout has commit (the one fetch, a dry run prints it too), else git's reason."""
    if has_commit(runner, checkout, commit):
        return ""
    args = ["fetch", "-q", "--no-tags", *([f"--depth={depth}"] if depth else []), remote, commit]
    fetched = git(runner, checkout, *args, check=False)
    return last_line(fetched.stderr) or "fetch failed" if fetched.returncode else ""


def ensure_checkout(pin: Pin, dest: Path, runner: Runner, *, force=False, submodules=None) -> Path:
    """dest: pin.url at pin.commit (or its patched state), the pinned submodule paths in."""
    dest, paths = Path(dest), tuple(submodules or ())
    if not (dest / ".git").exists():
        if dest.exists() and not (dest.is_dir() and not any(dest.iterdir())):  # not empty
            if not force:
                why = "move it away, or pass --discard-local-edits to replace it"
                runner.refuse(f"{dest} exists and is not a git checkout; {why}")
            else:
                runner.say(f"--discard-local-edits: removing {dest} (not a git checkout)")
                runner.run(["rm", "-rf", str(dest)])
        git(runner, None, "init", "-q", str(dest))
        git(runner, dest, "remote", "add", "origin", pin.url)
    elif _reuse_checkout(pin, dest, runner, force=force, paths=paths):
        return dest
    if first := fetch_commit(runner, dest, "origin", pin.commit, pin.data.get("depth")):
        # Servers that refuse fetching by commit id: fetch the ref and look for the commit.
        second = git(runner, dest, "fetch", "-q", "--no-tags", "origin", pin.ref, check=False)
        if second.returncode or not has_commit(runner, dest, pin.commit):
            detail = last_line(second.stderr) or (first if first != "fetch failed" else "")
            detail = detail or f"commit not found on ref {pin.ref}"
            where = f"{pin.project} {pin.commit[:12]} from {pin.url}"
            raise UserError(f"cannot fetch {where}: {detail}")
    git(runner, dest, "update-ref", f"{REF_PREFIX}/pin-{pin.commit}", pin.commit)
    detach = ["-c", "advice.detachedHead=false", "checkout", "-q", *(["-f"] if force else [])]
    git(runner, dest, *detach, "--detach", pin.commit, capture=False)
    _update_submodules(runner, dest, paths, force=force, head=pin.commit)
    runner.done(f"{pin.project}: checkout at {pin.commit[:12]} ({dest})")
    return dest


def _reuse_checkout(pin: Pin, dest: Path, runner: Runner, *, force: bool, paths) -> bool:
    """True when dest is (now) at the pin or its patched state; False: fetch and move it there."""
    head = head_commit(runner, dest)
    ours = head is not None and (head == pin.commit or bool(patched_refs(runner, dest, pin.commit)))
    changes = tracked_changes(runner, dest) if head else []
    step = git(runner, dest, "config", "--get", STEP_KEY, check=False).stdout if changes else ""
    resume = ours and step.strip() == head and all(line[3:].strip() in paths for line in changes)
    if resume or (ours and not changes):
        if resume:  # our own submodule step stopped part way at this HEAD: what it left is ours
            said = f"{pin.project}: resuming the submodule step that stopped part way"
            runner.say(f"{said} ({', '.join(paths)})")
        elif not paths or _submodules_ready(runner, dest, paths):
            runner.say(f"{pin.project}: checkout at {head[:12]} ({dest}) - up to date")
            return True
        # only the submodules are missing: fetched where they are (a reset drops the patches)
        _update_submodules(runner, dest, paths, force=force or resume, head=head)
        runner.say(f"{pin.project}: checkout at {head[:12]} ({dest}) - submodules added")
        return True
    if changes:
        if not force:
            raise UserError(
                f"{dest} has local edits ({len(changes)} path(s), e.g. '{changes[0].strip()}'); "
                "commit or stash them, or pass --discard-local-edits to discard them"
            )
        runner.say(f"--discard-local-edits: discarding local edits in {dest}")
        git(runner, dest, "reset", "-q", "--hard", capture=False)
    if head and head != pin.commit and not force:
        not_ours = ["--not", f"--glob={REF_PREFIX}", "--remotes"]  # upstream's or ours
        extra = git(runner, dest, "rev-list", "--max-count=100", "HEAD", *not_ours).stdout.split()
        if extra:
            raise UserError(
                f"{dest} has {len(extra)}{'+' if len(extra) >= 100 else ''} commit(s) that are"
                f" not upstream or ours (HEAD {head[:12]}); keep them on a branch, or pass "
                "--discard-local-edits to move HEAD to the pin"
            )
    git(runner, dest, "config", "remote.origin.url", pin.url)
    return False


def _submodules_ready(runner: Runner, checkout: Path, paths) -> bool:
    """Every pinned path initialised and at the commit the tree records (' ' status)."""
    result = git(runner, checkout, "submodule", "status", "--", *paths, check=False)
    lines = [x for x in result.stdout.splitlines() if x] if not result.returncode else []
    return len(lines) == len(paths) and all(x[:1] == " " for x in lines)


def _update_submodules(runner: Runner, dest: Path, paths, *, force: bool, head: str) -> None:
    if not paths:
        return
    git(runner, dest, "config", STEP_KEY, head)
    git(runner, dest, "submodule", "sync", "-q", "--", *paths, capture=False)
    update = ["submodule", "update", "-q", "--init", *(["--force"] if force else []), "--"]
    if (result := git(runner, dest, *update, *paths, check=False)).returncode != 0:
        why = f"{last_line(result.stderr) or 'see output'} (the next run resumes it)"
        raise UserError(f"submodule update failed in {dest} for {', '.join(paths)}: {why}")
    git(runner, dest, "config", "--unset", STEP_KEY)
