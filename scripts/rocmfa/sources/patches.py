"""Checksummed patch sets, patches/<project>/<commit>/, chosen by the pin (docs/aotriton.md)."""

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rocmfa.plumbing import stamps
from rocmfa.plumbing.commands import Runner, last_line
from rocmfa.plumbing.datafiles import REPO_ROOT, TEXT, checked, load_toml
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import environment
from rocmfa.plumbing.pin_files import HEX40, display
from rocmfa.sources import checkouts
from rocmfa.sources.checkouts import git

PATCH_NAME = re.compile(r"\d{4}-[A-Za-z0-9._+-]+\.patch")
GFX_NAME = re.compile(r"gfx[0-9a-f]{3,4}")
FAILED = re.compile(
    r"error: (?:patch failed: (.+?):\d+|(.+?): (?:patch does not apply|does not "
    r"exist in index|No such file or directory|already exists in))"
)
# a fixed committer and date, no hooks: the same pin and patches always give the same HEAD
AM_ENV = {"GIT_COMMITTER_NAME": "rocmfa patches", "GIT_COMMITTER_EMAIL": "patches@rocmfa.invalid"}
AM_FLAGS = ["-q", "--no-3way", "--no-keep-cr", "--no-gpg-sign", "--whitespace=nowarn"]
AM = ["-c", "core.hooksPath=/dev/null", "am", *AM_FLAGS, "--committer-date-is-author-date"]


@dataclass(frozen=True)
class Patch:
    name: str
    path: Path
    sha256: str
    reason: str
    upstream: str
    arches: tuple[str, ...] = ()  # () = every arch
    tuning: str = ""  # "only": tuning builds only; "never": not in them; "": every build


@dataclass(frozen=True)
class PatchSet:
    directory: Path
    patches: tuple[Patch, ...]
    none_needed: str = ""  # manifest.toml `none_needed = "why"`
    other_arches: tuple[Patch, ...] = ()  # the set's patches for arches other than the build's

    @property
    def shas(self) -> list[str]:
        return [p.sha256 for p in self.patches]


def set_dir(project: str, commit: str = "") -> Path:
    """patches/<project>/<commit> (no commit: the project folder); $ROCMFA_PATCHES_DIR moves it."""
    root = Path(environment().patches_dir or REPO_ROOT / "patches").expanduser().resolve()
    return root / project / commit


def available_sets(project: str) -> list[str]:
    return sorted(p.name for p in set_dir(project).glob("*/") if HEX40.fullmatch(p.name))


def patch_set_for(project: str, commit: str, *, arch=None, tuning=False) -> PatchSet | None:
    """The verified set for commit, or None; arch: its patches (others: other_arches)."""
    directory = set_dir(project, commit)
    if not directory.is_dir():
        return None
    where = display(directory / "manifest.toml")
    data = load_toml(directory / "manifest.toml", "patch manifest")
    entries = data.get("patch", [])
    none_needed = data.get("none_needed", "")
    if not isinstance(entries, list):
        raise UserError(f"{where}: 'patch' must be an array of tables ([[patch]])")
    if not isinstance(none_needed, str) or ("none_needed" in data and not none_needed.strip()):
        raise UserError(f"{where}: 'none_needed' must say why no patches are needed")
    if none_needed and entries:
        raise UserError(f"{where}: says none_needed but lists patches; keep one of them")
    if not entries and not none_needed:
        raise UserError(f'{where}: lists no patches; say why none are needed: none_needed = "..."')
    patches = [_read_entry(e, f"{where}: patch {i}", directory) for i, e in enumerate(entries, 1)]
    if (names := [p.name for p in patches]) != sorted(set(names)):
        raise UserError(f"{where}: patches must be listed once each, in NNNN order")
    if unlisted := sorted({p.name for p in directory.glob("*.patch")} - set(names)):
        raise UserError(f"{where}: {unlisted[0]} is in the directory but not in the manifest")
    patches = [p for p in patches if p.tuning != ("never" if tuning else "only")]
    others = tuple(p for p in patches if arch and p.arches and arch not in p.arches)
    chosen = tuple(p for p in patches if p not in others)
    return PatchSet(directory, chosen, none_needed.strip(), others)


ENTRY = dict.fromkeys(("file", "sha256", "reason", "upstream"), TEXT) | {
    "arches": (
        lambda v: isinstance(v, list) and v and all(GFX_NAME.fullmatch(str(a)) for a in v),
        "a non-empty list of gfx arches",
        False,
    ),
    "tuning": (lambda v: v in ("", "only", "never"), '"only" or "never"', False),
}


def _read_entry(entry: object, here: str, directory: Path) -> Patch:
    checked(entry, here, ENTRY)
    name, sha256, reason, upstream = (entry[k].strip() for k in list(ENTRY)[:4])
    path = directory / name
    if not PATCH_NAME.fullmatch(name):
        raise UserError(f"{here}: file {name!r} must be named NNNN-<slug>.patch")
    if not path.is_file():
        raise UserError(f"{here}: {display(path)} does not exist")
    if (actual := stamps.file_sha256(path)) != sha256:
        raise UserError(
            f"{display(path)}: sha256 mismatch (manifest {sha256[:12]}…, file {actual[:12]}…): "
            "the patch changed since it was recorded; nothing applied"
        )
    head = path.read_bytes()[:4096]
    if not (head.startswith((b"From ", b"Subject:")) or b"\nSubject:" in head):
        raise UserError(f"{display(path)}: not a `git format-patch` file (no mail header)")
    arches = tuple(entry.get("arches", ()))
    tuning = entry.get("tuning", "")
    return Patch(name, path, sha256, reason, upstream, arches, tuning)


def patch_set_digest(project: str, commit: str, *, arch=None, tuning=False) -> str:
    """For stamps: changes with any patch a build for arch applies, or the set's existence."""
    found = patch_set_for(project, commit, arch=arch, tuning=tuning)
    if found is not None and found.none_needed:
        return stamps.digest({"commit": commit, "none_needed": found.none_needed})
    return stamps.digest({"commit": commit, "patches": found.shas if found else []})


def missing_set_problem(project: str, commit: str, checkout, runner: Runner) -> str:
    """'' when commit may go unpatched (no set's commit may be an ancestor), else one sentence."""
    can_ask = checkout is not None and (Path(checkout) / ".git").exists()
    if can_ask:  # a shallow clone (TheRock's --depth 1) cuts the history: ancestry unknown
        shallow = git(runner, checkout, "rev-parse", "--is-shallow-repository", check=False)
        can_ask = shallow.stdout.strip() == "false"
    earlier = []  # a set of a commit git proves is no ancestor is another line's
    for other in (c for c in available_sets(project) if c != commit):
        ancestry = ["merge-base", "--is-ancestor", other, commit]
        if not can_ask or git(runner, checkout, *ancestry, check=False).returncode != 1:
            earlier.append(display(set_dir(project, other)))
    if not earlier:
        return ""
    return (
        f"{project}: no patch set for the pinned commit {commit[:12]} (sets for earlier "
        f"commits: {', '.join(earlier)}); port one (nox -s update_pins -- --port-patches) or "
        f'write {display(set_dir(project, commit))}/manifest.toml with none_needed = "why" '
        "- refusing to build it unpatched"
    )


def _try(runner: Runner, tree: Path, patch: Path) -> str:
    """'' when patch went in with git am, 'contained' when already in, else the failed file."""
    forward = git(runner, tree, "apply", "--check", str(patch), check=False)
    if forward.returncode != 0:
        reverse = git(runner, tree, "apply", "--reverse", "--check", str(patch), check=False)
        return "contained" if reverse.returncode == 0 else _failed_file(forward.stderr)
    result = git(runner, tree, *AM, str(patch), sets=AM_ENV, check=False)
    return f"git am: {_failed_file(result.stderr + result.stdout)}" if result.returncode else ""


def _failed_file(stderr: str) -> str:
    found = FAILED.search(stderr or "")
    return (found[1] or found[2]) if found else last_line(stderr) or "unknown file"


def _rollback(runner: Runner, checkout: Path, commit: str) -> None:
    git(runner, checkout, "am", "--abort", check=False)
    git(runner, checkout, "reset", "-q", "--hard", commit)
    git(runner, checkout, "-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit)


def apply_patch_set(project, commit, checkout, runner: Runner, *, arch=None, tuning=False):
    """Apply commit's set (arch, tuning: as patch_set_for) to checkout; the applied sha256s."""
    checkout = Path(checkout)
    found = patch_set_for(project, commit, arch=arch, tuning=tuning)  # sha256s first
    if found is None or not found.patches:
        _nothing_to_apply(found, project, commit, checkout, runner, arch)
        return []
    label = display(found.directory)
    head = checkouts.head_commit(runner, checkout) or commit  # none yet: a plan of a fresh checkout
    ours = checkouts.patched_refs(runner, checkout, commit)
    changes = checkouts.tracked_changes(runner, checkout)
    wanted = f"{checkouts.REF_PREFIX}/patched/{commit}/{stamps.digest(found.shas)[:16]}"
    if wanted in ours:
        runner.say(f"{project}: patch set {label} already applied (HEAD {head[:12]})")
        if changes:  # kept (they are the user's), but the build is not of the patched pin alone
            runner.say(
                f"{project}: WARNING: {checkout} has {len(changes)} edit(s) made after the "
                f"patches were applied (e.g. '{changes[0].strip()}'); kept, and built as they are"
            )
        return found.shas
    if changes:
        raise UserError(
            f"{checkout} has local edits ('{changes[0].strip()}'); cannot apply {label} "
            "(pass --discard-local-edits to discard them)"
        )
    if head != commit and not ours:
        raise UserError(
            f"{checkout}: HEAD {head[:12]} is neither the pinned commit {commit[:12]} nor its "
            f"recorded patched state; cannot apply {label}"
        )
    # a failure goes back to head: the pin, or our commits of an older version of the set
    restored = "the pristine pin" if head == commit else f"its previous patched state {head[:12]}"
    if head != commit:  # the new set starts at the pin
        _rollback(runner, checkout, commit)
    skipped = 0
    for patch in found.patches:
        if (failed := _try(runner, checkout, patch.path)) == "contained":
            skipped += 1
            runner.say(f"{project}: {patch.name} is already contained at this commit; skipped")
        elif failed:
            _rollback(runner, checkout, head)
            raise UserError(
                f"patch {display(patch.path)} does not apply to {project} {commit[:12]}: "
                f"{failed} conflicts; checkout back at {restored}"
            )
    git(runner, checkout, "update-ref", wanted, "HEAD")
    new_head = (checkouts.head_commit(runner, checkout) or "")[:12]
    applied = f"{project}: applied {len(found.patches) - skipped} patch(es) from {label}"
    runner.done(applied + (f"; HEAD {new_head}" if new_head else ""))
    return found.shas


def _nothing_to_apply(found, project, commit, checkout, runner: Runner, arch) -> None:
    """Say why nothing applies (refuse a pin past its set); a patched checkout goes to the pin."""
    if found is not None and found.none_needed:
        runner.say(f"{project}: no patches needed at {commit[:12]}: {found.none_needed}")
    elif found is not None:
        others = ", ".join(sorted({a for p in found.other_arches for a in p.arches}))
        runner.say(
            f"{project}: {display(found.directory)} has no patch for {arch} (its "
            f"{len(found.other_arches)} patch(es) are for {others}); built as pinned"
        )
    elif problem := missing_set_problem(project, commit, checkout, runner):
        runner.refuse(problem)
    else:
        runner.say(f"{project}: no patches for {commit[:12]} (none needed)")
    ours = (checkout / ".git").exists() and checkouts.patched_refs(runner, checkout, commit)
    if not ours or checkouts.head_commit(runner, checkout) == commit:
        return
    if checkouts.tracked_changes(runner, checkout):
        raise UserError(f"{checkout} has local edits; cannot drop the old patches of {project}")
    _rollback(runner, checkout, commit)
    runner.say(f"{project}: no patch of the set is for this build; checkout back at {commit[:12]}")


def check_set_applies(found: PatchSet, new_commit: str, checkout: Path, runner: Runner):
    """(ok, detail): does the set apply at new_commit? Tried in a throwaway worktree."""
    with tempfile.TemporaryDirectory(prefix="rocmfa-port-") as tmp:
        tree = Path(tmp) / "tree"
        try:
            add = ["worktree", "add", "-q", "--detach", str(tree), new_commit]
            if (added := git(runner, checkout, *add, check=False)).returncode != 0:
                return False, f"cannot check out {new_commit[:12]}: {last_line(added.stderr)}"
            for patch in found.patches:
                if (failed := _try(runner, tree, patch.path)) == "contained":
                    return False, f"{patch.name} is already contained upstream (drop it)"
                if failed:
                    return False, f"{patch.name} conflicts in {failed}"
            return True, f"all {len(found.patches)} patch(es) apply cleanly"
        finally:
            git(runner, checkout, "worktree", "remove", "--force", str(tree), check=False)
            git(runner, checkout, "worktree", "prune", check=False)
