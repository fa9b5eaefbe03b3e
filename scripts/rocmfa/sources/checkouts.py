"""A project's source tree at its pin (docs/aotriton.md, docs/tuning.md): the checkout, which never
loses the user's work; its checksummed patch set, patches/<project>/<commit>/, chosen by the pin;
and a tuning database, <pins>/tuning/aotriton/<commit>/<arch>/ (or $ROCMFA_TUNING_DIR): a manifest
of sha256-checked files laid over the tree's modules/database."""

import contextlib
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmfa.plumbing import pin_files, stamps
from rocmfa.plumbing.commands import Runner, last_line
from rocmfa.plumbing.errors import TEXT, UserError, checked, filled, inside, load_toml
from rocmfa.plumbing.options import REPO_ROOT, environment
from rocmfa.plumbing.pin_files import HEX40, display
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


def patch_set_dir(project: str, commit: str = "") -> Path:
    """patches/<project>/<commit> (no commit: the project folder); $ROCMFA_PATCHES_DIR moves it."""
    root = Path(environment().patches_dir or REPO_ROOT / "patches").expanduser().resolve()
    return root / project / commit


def available_patch_sets(project: str) -> list[str]:
    return sorted(p.name for p in patch_set_dir(project).glob("*/") if HEX40.fullmatch(p.name))


def patch_set_for(project: str, commit: str, *, arch=None, tuning=False) -> PatchSet | None:
    """The verified set for commit, or None; arch: its patches (others: other_arches)."""
    directory = patch_set_dir(project, commit)
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
    checked(entry, here, ENTRY)  # reason and upstream too: for the reader of the manifest
    name = entry["file"].strip()
    sha256 = entry["sha256"].strip()
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
    return Patch(name, path, sha256, tuple(entry.get("arches", ())), entry.get("tuning", ""))


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
    for other in (c for c in available_patch_sets(project) if c != commit):
        ancestry = ["merge-base", "--is-ancestor", other, commit]
        if not can_ask or git(runner, checkout, *ancestry, check=False).returncode != 1:
            earlier.append(display(patch_set_dir(project, other)))
    if not earlier:
        return ""
    return (
        f"{project}: no patch set for the pinned commit {commit[:12]} (sets for earlier "
        f"commits: {', '.join(earlier)}); port one (nox -s update_pins -- --port-patches) or "
        f'write {display(patch_set_dir(project, commit))}/manifest.toml with none_needed = "why" '
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
    head = head_commit(runner, checkout) or commit  # none yet: a plan of a fresh checkout
    ours = patched_refs(runner, checkout, commit)
    changes = tracked_changes(runner, checkout)
    wanted = f"{REF_PREFIX}/patched/{commit}/{stamps.digest(found.shas)[:16]}"
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
    new_head = (head_commit(runner, checkout) or "")[:12]
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
    ours = (checkout / ".git").exists() and patched_refs(runner, checkout, commit)
    if not ours or head_commit(runner, checkout) == commit:
        return
    if tracked_changes(runner, checkout):
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


TUNING_MANIFEST = "manifest.toml"
TUNING_FILE = {"path": (lambda v: filled(v) and inside(v), "a relative path", True), "sha256": TEXT}


def tuning_dir(commit: str, arch: str) -> Path:
    chosen = environment().tuning_dir
    root = Path(chosen).expanduser().resolve() if chosen else pin_files.pins_dir() / "tuning"
    return root / "aotriton" / commit / arch


TUNING_HEADER = ("commit", "arch", "kind", "tuner")  # the manifest's [tuning] keys; the rest: meta


@dataclass(frozen=True)
class TuningDb:
    directory: Path
    commit: str
    arch: str
    kind: str
    tuner: str
    files: Mapping[str, str]  # relative path -> sha256
    meta: Mapping[str, Any]

    def digest(self) -> str:
        return stamps.digest({"commit": self.commit, "arch": self.arch, "files": dict(self.files)})

    def describe(self) -> str:
        tuned = ", ".join(f"{k}={v}" for k, v in self.meta.items() if k in ("head_dims", "dtypes"))
        return f"tuning database {self.directory} ({self.kind} by {self.tuner}; {tuned})"


def load_tuning(directory: Path) -> TuningDb:
    """The database in directory, every file checked against its manifest sha256."""
    where = str(directory / TUNING_MANIFEST)
    data = load_toml(directory / TUNING_MANIFEST, "tuning database manifest")
    table = data.get("tuning")
    entries = data.get("file")
    if not isinstance(table, dict) or not isinstance(entries, list) or not entries:
        raise UserError(f"{where}: needs a [tuning] table and at least one [[file]]")
    files: dict[str, str] = {}
    for i, entry in enumerate(entries, 1):
        checked(entry, f"{where}: file {i}", TUNING_FILE)
        name = entry["path"]
        expected = entry["sha256"]
        if not (directory / name).is_file():
            raise UserError(f"{where}: {name} is missing; refusing this tuning database")
        if (actual := stamps.file_sha256(directory / name)) != expected:
            raise UserError(
                f"{where}: {name} has sha256 {actual[:16]}..., manifest says {expected[:16]}...; "
                "refusing this tuning database (re-run nox -s tune_aotriton, or restore the file)"
            )
        files[name] = expected
    meta = {k: v for k, v in table.items() if k not in TUNING_HEADER}
    header = {k: str(table.get(k, "")) for k in TUNING_HEADER}
    return TuningDb(directory, files=files, meta=meta, **header)


def find_tuning(commit: str, arch: str) -> TuningDb | None:
    """The stored database for commit + arch, verified, or None."""
    directory = tuning_dir(commit, arch)
    if not (directory / TUNING_MANIFEST).is_file():
        return None
    found = load_tuning(directory)
    if (found.commit, found.arch) != (commit, arch):
        says = f"{directory / TUNING_MANIFEST}: says commit {found.commit[:12]} arch {found.arch}"
        raise UserError(f"{says}, but it lies under {commit[:12]}/{arch}; refusing")
    return found


@contextlib.contextmanager
def into_folder(out: Path) -> Iterator[Path]:
    """A folder beside out, put in out's place once written: a kill never leaves half of one."""
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    yield partial
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)


def write_tuning(directory: Path, files: Mapping[str, Path], *, commit, arch, kind, tuner, meta):
    import tomlkit

    with into_folder(directory) as staging:
        for name, source in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, staging / name)
        listed = [{"path": n, "sha256": stamps.file_sha256(staging / n)} for n in sorted(files)]
        header = {"commit": commit, "arch": arch, "kind": kind, "tuner": tuner, **meta}
        note = "# Written by nox -s tune_aotriton; data, verified by sha256 before any use.\n\n"
        manifest = note + tomlkit.dumps({"tuning": header, "file": listed})
        (staging / TUNING_MANIFEST).write_text(manifest)
    return load_tuning(directory)


def tuning_cmake_args(db: TuningDb, src: Path, scratch: Path, *, runner: Runner) -> list[str]:
    """-DAOTRITON_TUNING_DATABASE_ROOT: it REPLACES modules/database (v3src/CMakeLists.txt at
    6e00ef3e), so the root is the tree's database with db's shards laid over it in scratch."""
    runner.say(f"using {db.describe()}")
    runner.apply(compose_tuning_root, db, src, scratch, say=f"compose {scratch}")
    return [f"-DAOTRITON_TUNING_DATABASE_ROOT={scratch}"]


def compose_tuning_root(db: TuningDb, src: Path, scratch: Path) -> None:
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(src / "modules/database", scratch)  # the tree's own database at 0.13b
    for name in db.files:
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(db.directory / name, scratch / name)
