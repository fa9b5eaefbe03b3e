"""Patch sets chosen by the pinned commit: patches/<project>/<commit>/NNNN-*.patch + manifest.

manifest.toml lists every patch in order with its sha256, why it exists and an upstream link:

    [[patch]]
    file = "0001-fix-something.patch"      # `git format-patch <commit>..HEAD` output
    sha256 = "<64 hex>"
    reason = "why the pinned upstream needs it"
    upstream = "https://github.com/<org>/<repo>/pull/<n>"
    arches = ["gfx908"]                     # optional: only builds for these GPU arches

A patch with `arches` (Spack's `patch(..., when=...)`) is applied only to a build for one of
them; without it, to every build. Every sha256 is verified before anything is applied.
Application is all or nothing: each patch is classified with two checks read together (`git
apply --check` and `git apply --reverse --check`: forward ok = apply, reverse ok only = already
contained, both fail = conflict), applied with `git am` under a fixed committer identity and
--committer-date-is-author-date (same pin + same patches = same HEAD), and on any failure the
checkout goes back to the state it was in (the pristine pin, or the patched state of the set
applied before) before the error names patch, file and commit. Edits made after patching are
never discarded here; a re-apply reports them.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from scripts.plumbing import stamps
from scripts.plumbing.commands import Runner
from scripts.plumbing.datafiles import REPO_ROOT, load_toml
from scripts.plumbing.errors import UserError
from scripts.sources import checkouts
from scripts.sources.checkouts import State, git, last_line

PATCHES_DIR_ENV = "ROCMFA_PATCHES_DIR"
PATCH_NAME = re.compile(r"\d{4}-[A-Za-z0-9._+-]+\.patch")
HEX40 = re.compile(r"[0-9a-f]{40}")
HEX64 = re.compile(r"[0-9a-f]{64}")
GFX_NAME = re.compile(r"gfx[0-9a-f]{3,4}")
AM_IDENTITY = {
    "GIT_COMMITTER_NAME": "rocmfa patches",
    "GIT_COMMITTER_EMAIL": "patches@rocmfa.invalid",
}
AM_CONFIG = (
    "-c",
    "user.name=rocmfa patches",
    "-c",
    "user.email=patches@rocmfa.invalid",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "am.threeWay=false",
    "-c",
    "am.keepcr=false",
)


def patches_root(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    chosen = environ.get(PATCHES_DIR_ENV) or REPO_ROOT / "patches"
    return Path(chosen).expanduser().resolve()


def _display(path: Path) -> str:
    try:
        return str(Path(path).relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class Patch:
    name: str
    path: Path
    sha256: str
    reason: str
    upstream: str
    arches: tuple[str, ...] = ()  # () = every arch

    def applies_to(self, arch: str | None) -> bool:
        return arch is None or not self.arches or arch in self.arches


@dataclass(frozen=True)
class PatchSet:
    project: str
    commit: str
    directory: Path
    patches: tuple[Patch, ...]
    none_needed: str = ""  # manifest.toml `none_needed = "why"`: this commit needs no patches

    # the set's patches that are for other arches than the one asked for (patch_set_for's arch)
    other_arches: tuple[Patch, ...] = ()

    @property
    def shas(self) -> list[str]:
        return [p.sha256 for p in self.patches]

    def for_arch(self, arch: str | None) -> PatchSet:
        """The patches a build for arch applies (arch None: all of them)."""
        mine = tuple(p for p in self.patches if p.applies_to(arch))
        others = tuple(p for p in self.patches if not p.applies_to(arch))
        return replace(self, patches=mine, other_arches=others)


def set_dir(project: str, commit: str, root: Path | None = None) -> Path:
    return (root or patches_root()) / project / commit


def available_sets(project: str, root: Path | None = None) -> list[str]:
    """Commits that have a patch set directory for project."""
    base = (root or patches_root()) / project
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if p.is_dir() and HEX40.fullmatch(p.name))


def patch_set_for(
    project: str, commit: str, *, root: Path | None = None, arch: str | None = None
) -> PatchSet | None:
    """The verified patch set for commit, or None when patches/<project>/<commit>/ is absent;
    with arch, only the patches for that arch (the others in other_arches)."""
    directory = set_dir(project, commit, root)
    if not directory.is_dir():
        return None
    manifest = directory / "manifest.toml"
    where = _display(manifest)
    data = load_toml(manifest, "patch manifest")
    entries = data.get("patch", [])
    if not isinstance(entries, list):
        raise UserError(f"{where}: 'patch' must be an array of tables ([[patch]])")
    none_needed = data.get("none_needed", "")
    if not isinstance(none_needed, str) or (("none_needed" in data) and not none_needed.strip()):
        raise UserError(f"{where}: 'none_needed' must say why no patches are needed")
    if none_needed and entries:
        raise UserError(f"{where}: says none_needed but lists patches; keep one of them")
    if not entries and not none_needed:
        raise UserError(f'{where}: lists no patches; say why none are needed: none_needed = "..."')
    patches: list[Patch] = []
    for index, entry in enumerate(entries, 1):
        here = f"{where}: patch {index}"
        if not isinstance(entry, dict):
            raise UserError(f"{here}: must be a table")
        values = {}
        for key in ("file", "sha256", "reason", "upstream"):
            value = entry.get(key)
            if not isinstance(value, str) or not value.strip():
                raise UserError(f"{here}: missing or empty key '{key}'")
            values[key] = value.strip()
        name = values["file"]
        if not PATCH_NAME.fullmatch(name):
            raise UserError(f"{here}: file {name!r} must be named NNNN-<slug>.patch")
        if not HEX64.fullmatch(values["sha256"]):
            raise UserError(f"{here}: 'sha256' must be 64 lowercase hex digits")
        path = directory / name
        if not path.is_file():
            raise UserError(f"{here}: {_display(path)} does not exist")
        actual = stamps.file_sha256(path)
        if actual != values["sha256"]:
            raise UserError(
                f"{_display(path)}: sha256 mismatch (manifest {values['sha256'][:12]}…, file "
                f"{actual[:12]}…): the patch changed since it was recorded; nothing applied"
            )
        head = path.read_bytes()[:4096]
        if not (head.startswith(b"From ") or b"\nSubject:" in head or head.startswith(b"Subject:")):
            raise UserError(f"{_display(path)}: not a `git format-patch` file (no mail header)")
        arches = entry.get("arches", [])
        if not isinstance(arches, list) or (not arches and "arches" in entry):
            raise UserError(f"{here}: 'arches' must be a non-empty list of GPU arches")
        for name_of_arch in arches:
            if not isinstance(name_of_arch, str) or not GFX_NAME.fullmatch(name_of_arch):
                raise UserError(f"{here}: 'arches' entry {name_of_arch!r} is not a gfx arch")
        patches.append(
            Patch(name, path, values["sha256"], values["reason"], values["upstream"], tuple(arches))
        )
    names = [p.name for p in patches]
    if names != sorted(names) or len(set(names)) != len(names):
        raise UserError(f"{where}: patches must be listed once each, in NNNN order")
    on_disk = sorted(p.name for p in directory.glob("*.patch"))
    unlisted = sorted(set(on_disk) - set(names))
    if unlisted:
        raise UserError(f"{where}: {unlisted[0]} is in the directory but not in the manifest")
    return PatchSet(project, commit, directory, tuple(patches), none_needed.strip()).for_arch(arch)


def patch_set_digest(
    project: str, commit: str, *, root: Path | None = None, arch: str | None = None
) -> str:
    """For stamps: changes whenever any patch of the set (for arch: any patch a build for arch
    applies), or the set's existence, changes."""
    found = patch_set_for(project, commit, root=root, arch=arch)
    if found is not None and found.none_needed:
        return stamps.digest({"commit": commit, "none_needed": found.none_needed})
    return stamps.digest({"commit": commit, "patches": found.shas if found else []})


def nearest_ancestor_set(
    project: str, commit: str, checkout: Path, runner: Runner, *, root: Path | None = None
) -> tuple[str, int] | None:
    """(set commit, commits between it and commit) of the nearest set for an ancestor."""
    best: tuple[str, int] | None = None
    for candidate in available_sets(project, root):
        if candidate == commit:
            continue
        check = git(runner, checkout, "merge-base", "--is-ancestor", candidate, commit, check=False)
        if check.returncode != 0:
            continue
        count = git(runner, checkout, "rev-list", "--count", f"{candidate}..{commit}", check=False)
        distance = int(count.stdout.strip() or 0) if count.returncode == 0 else 1 << 30
        if best is None or distance < best[1]:
            best = (candidate, distance)
    return best


def missing_set_problem(
    project: str, commit: str, checkout: Path | None, runner: Runner, *, root: Path | None = None
) -> str:
    """'' when commit may go unpatched (no project sets at all, or every other set's commit is
    provably not an ancestor), else one sentence: a pin moved past its patch set."""
    others = [c for c in available_sets(project, root) if c != commit]
    if not others:
        return ""
    can_ask = checkout is not None and (Path(checkout) / ".git").exists() and not runner.dry_run
    if can_ask:  # a shallow clone (TheRock's --depth 1) cuts the history: ancestry unknown
        shallow = git(runner, checkout, "rev-parse", "--is-shallow-repository", check=False)
        can_ask = shallow.stdout.strip() == "false"
    earlier = []
    for candidate in others:
        if can_ask:
            check = git(runner, checkout, "merge-base", "--is-ancestor", candidate, commit,
                        check=False)  # fmt: skip
            if check.returncode == 1:  # both known, not an ancestor: another line's set
                continue
        earlier.append(candidate)
    if not earlier:
        return ""
    nearest = (
        nearest_ancestor_set(project, commit, checkout, runner, root=root) if can_ask else None
    )
    hint = (
        f"nearest set for an ancestor: {_display(set_dir(project, nearest[0], root))} "
        f"({nearest[1]} commits older)"
        if nearest
        else f"sets exist for {', '.join(c[:12] for c in earlier)}"
    )
    return (
        f"{project}: no patch set for the pinned commit {commit[:12]} ({hint}); port it "
        "(nox -s update_pins -- --port-patches) or write "
        f"{_display(set_dir(project, commit, root))}/manifest.toml with "
        'none_needed = "why" - refusing to build it unpatched'
    )


def _classify(runner: Runner, checkout: Path, patch: Path) -> tuple[str, str]:
    """('apply'|'applied'|'conflict', detail) from the forward and reverse checks together."""
    forward = git(runner, checkout, "apply", "--check", str(patch), check=False)
    if forward.returncode == 0:
        return "apply", ""
    reverse = git(runner, checkout, "apply", "--reverse", "--check", str(patch), check=False)
    if reverse.returncode == 0:
        return "applied", ""
    return "conflict", forward.stderr


def _failed_file(stderr: str) -> str:
    for pattern in (
        r"error: patch failed: (.+?):\d+",
        r"error: (.+?): patch does not apply",
        r"error: (.+?): does not exist in index",
        r"error: (.+?): No such file or directory",
        r"error: (.+?): already exists in (?:index|working directory)",
    ):
        match = re.search(pattern, stderr or "")
        if match:
            return match.group(1)
    return last_line(stderr) or "unknown file"


def _am(runner: Runner, checkout: Path, patch: Path, *, check: bool = True):
    return git(
        runner,
        checkout,
        *AM_CONFIG,
        "am",
        "-q",
        "--no-gpg-sign",
        "--committer-date-is-author-date",
        "--whitespace=nowarn",
        str(patch),
        sets=AM_IDENTITY,
        check=check,
    )


def _rollback(runner: Runner, checkout: Path, commit: str) -> None:
    if (checkout / ".git" / "rebase-apply").exists():
        git(runner, checkout, "am", "--abort", check=False)
    git(runner, checkout, "reset", "-q", "--hard", commit)
    git(runner, checkout, "-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit)


def _drop_our_patches(project: str, commit: str, checkout: Path, runner: Runner) -> None:
    """The set was removed, or has no patch for this build: a checkout at our recorded patched
    state goes back to the pin."""
    state = checkouts.read_state(checkout)
    if state is None or state.base != commit or state.head == commit:
        return
    if checkouts.head_commit(runner, checkout) != state.head:
        return
    if checkouts.tracked_changes(runner, checkout):
        raise UserError(f"{checkout} has local edits; cannot drop the old patches of {project}")
    _rollback(runner, checkout, commit)
    checkouts.write_state(checkout, State(commit, commit, (), ""))
    runner.say(
        f"{project}: no patch of the set is for this build; checkout back at the pristine "
        f"pin {commit[:12]}"
    )


def apply_patch_set(
    project: str,
    commit: str,
    checkout: Path,
    runner: Runner,
    *,
    root: Path | None = None,
    arch: str | None = None,
) -> list[str]:
    """Apply patches/<project>/<commit>/ to checkout (at commit); with arch, only the patches
    for that arch. Returns the applied patch sha256s; [] when there is none to apply."""
    checkout = Path(checkout)
    found = patch_set_for(project, commit, root=root, arch=arch)  # verifies every sha256 first
    if found is None or found.none_needed or not found.patches:
        if found is not None and found.none_needed:
            runner.say(f"{project}: no patches needed at {commit[:12]}: {found.none_needed}")
        elif found is not None:
            others = ", ".join(sorted({a for p in found.other_arches for a in p.arches}))
            runner.say(
                f"{project}: {_display(found.directory)} has no patch for {arch} (its "
                f"{len(found.other_arches)} patch(es) are for {others}); built as pinned"
            )
        elif problem := missing_set_problem(project, commit, checkout, runner, root=root):
            if not runner.dry_run:
                raise UserError(problem)
            runner.say(f"[dry-run] note: {problem}; the real run stops here")
        else:
            runner.say(f"{project}: no patches for {commit[:12]} (none needed)")
        if not runner.dry_run and (checkout / ".git").exists():
            _drop_our_patches(project, commit, checkout, runner)
        return []
    label = _display(found.directory)
    if runner.dry_run:
        for patch in found.patches:
            git(runner, checkout, "apply", "--check", str(patch.path))
            _am(runner, checkout, patch.path)
        return found.shas
    head = checkouts.head_commit(runner, checkout)
    state = checkouts.read_state(checkout)
    ours = state is not None and state.base == commit and head == state.head
    changes = checkouts.tracked_changes(runner, checkout)
    if ours and state.patches == tuple(found.shas):
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
    # Where a failure goes back to: the state the tree was in (the pin, or the patched state
    # of the previous set), never further.
    restore_to, restored = commit, "the pristine pin"
    if head != commit:
        if not ours:
            raise UserError(
                f"{checkout}: HEAD {head[:12] if head else 'none'} is neither the pinned commit "
                f"{commit[:12]} nor its recorded patched state; cannot apply {label}"
            )
        # Our own commits from an older version of the set: the new set starts at the pin.
        restore_to, restored = head, f"its previous patched state {head[:12]}"
        _rollback(runner, checkout, commit)
    skipped = []
    for patch in found.patches:
        verdict, detail = _classify(runner, checkout, patch.path)
        if verdict == "applied":
            skipped.append(patch.name)
            runner.say(f"{project}: {patch.name} is already contained at this commit; skipped")
            continue
        if verdict == "conflict":
            _rollback(runner, checkout, restore_to)
            raise UserError(
                f"patch {_display(patch.path)} does not apply to {project} {commit[:12]}: "
                f"{_failed_file(detail)} conflicts; checkout back at {restored}"
            )
        result = _am(runner, checkout, patch.path, check=False)
        if result.returncode != 0:
            _rollback(runner, checkout, restore_to)
            raise UserError(
                f"patch {_display(patch.path)} failed in git am on {project} {commit[:12]}: "
                f"{_failed_file(result.stderr + result.stdout)}; checkout back at {restored}"
            )
    new_head = checkouts.head_commit(runner, checkout) or commit
    git(runner, checkout, "update-ref", checkouts.patched_ref(new_head), new_head)
    checkouts.write_state(checkout, State(commit, new_head, tuple(found.shas), str(label)))
    runner.say(
        f"{project}: applied {len(found.patches) - len(skipped)} patch(es) from {label}; "
        f"HEAD {new_head[:12]}"
    )
    return found.shas


def check_set_applies(
    found: PatchSet, new_commit: str, checkout: Path, runner: Runner
) -> tuple[bool, str]:
    """Does this set apply at new_commit? Tried in a throwaway worktree of checkout, which is
    left untouched. Returns (ok, detail)."""
    tmp = Path(tempfile.mkdtemp(prefix="rocmfa-port-"))
    tree = tmp / "tree"
    try:
        added = git(
            runner,
            checkout,
            "worktree",
            "add",
            "-q",
            "--detach",
            str(tree),
            new_commit,
            check=False,
        )
        if added.returncode != 0:
            return False, f"cannot check out {new_commit[:12]}: {last_line(added.stderr)}"
        for patch in found.patches:
            verdict, detail = _classify(runner, tree, patch.path)
            if verdict == "applied":
                return False, f"{patch.name} is already contained upstream (drop it)"
            if verdict == "conflict":
                return False, f"{patch.name} conflicts in {_failed_file(detail)}"
            result = _am(runner, tree, patch.path, check=False)
            if result.returncode != 0:
                return False, f"{patch.name} fails in git am: {_failed_file(result.stderr)}"
        return True, f"all {len(found.patches)} patch(es) apply cleanly"
    finally:
        git(runner, checkout, "worktree", "remove", "--force", str(tree), check=False)
        shutil.rmtree(tmp, ignore_errors=True)
        git(runner, checkout, "worktree", "prune", check=False)


def port_set(found: PatchSet, new_commit: str, *, root: Path | None = None) -> Path:
    """Copy a set that applies cleanly to patches/<project>/<new_commit>/ (same files, same
    sha256s). Refuses to overwrite an existing set."""
    target = set_dir(found.project, new_commit, root)
    if target.exists():
        raise UserError(f"{_display(target)} already exists; not overwriting it")
    target.mkdir(parents=True)
    for patch in found.patches:
        shutil.copy2(patch.path, target / patch.name)
    text = (found.directory / "manifest.toml").read_text()
    note = f"# Ported by update_pins from {found.commit} (applied cleanly at {new_commit}).\n"
    stamps.write_text_atomic(target / "manifest.toml", note + text)
    return target
