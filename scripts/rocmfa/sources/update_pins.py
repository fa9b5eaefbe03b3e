"""`nox -s update_pins` (docs/aotriton.md); resolve_for_build: the same for one unresolved pin."""

import contextlib
import io
import shutil
from pathlib import Path
from urllib.parse import urlparse

from rocmfa.plumbing import options, pin_files
from rocmfa.plumbing.commands import Runner, last_line, runner_for
from rocmfa.plumbing.errors import UserError, require
from rocmfa.sources import checkouts, pins

AITER_URL = "https://github.com/ROCm/aiter"  # cloned by tag by v3src/CMakeLists.txt (6e00ef3e)


def ls_remote(runner: Runner, url: str, ref: str) -> str:
    """The commit ref names at url (tags peeled); UserError when unreachable or unknown."""
    if pin_files.HEX40.fullmatch(ref):
        return ref
    result = runner.run(["git", "ls-remote", url, ref], capture=True, check=False)
    if result.returncode != 0:
        raise UserError(f"cannot reach {url}: {last_line(result.stderr) or result.returncode}")
    pairs = (line.split() for line in result.stdout.splitlines())
    refs = {pair[1]: pair[0] for pair in pairs if len(pair) == 2}
    for name in (f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}", f"refs/heads/{ref}", ref):
        if name in refs:
            return refs[name]
    raise UserError(f"{url} has no ref '{ref}' (branch or tag)")


def update_pins(opts: options.UpdatePinsOptions) -> None:
    runner = runner_for(opts)
    failures = {}
    pair = {"pytorch", "aotriton"}
    work = options.workdir(opts.workdir)
    directory = pin_files.pins_dir()
    chosen = opts.project or pin_files.PROJECTS
    for step in [*chosen, "pin set"]:  # the pin set: when the pair's pins have been updated
        try:
            if step != "pin set":
                _update_project(step, directory, work, runner, port=opts.port_patches)
            elif pair & set(chosen) and not pair & set(failures):
                say = "check the torch x AOTriton pin set"
                runner.apply(_check_pin_set, directory, work, runner, force=opts.force, say=say)
        except UserError as e:
            failures[step] = e
            runner.say(f"{step}: FAILED: {e}")
    if failures:
        step, error = next(iter(failures.items()))
        raise UserError(f"update_pins: {len(failures)} project(s) failed; first: {step}: {error}")


def resolve_for_build(project: str, runner: Runner, *, workdir: Path, force: bool) -> pins.Pin:
    """project's pin; an unresolved one resolved, checked and recorded as update_pins does."""
    directory = pin_files.pins_dir()
    with contextlib.suppress(pin_files.Unresolved):
        return pins.load_pin(project, directory, workdir=workdir)
    path, table = pin_files.read_table(project, directory)
    url = str(table.get("url"))
    ref = str(table.get("ref"))
    later = f"{project}: {ref} has no commit in {path}: the real run resolves, checks and records"
    if later := runner.plan_line(f"{later} it there first (as nox -s update_pins does)"):
        runner.say(later)
        planned = f"<commit of {url} {ref}: resolved, checked and recorded by the real run>"
        return pins.pin_of(project, {**table, "commit": planned}, pin_files.display(path))
    before = path.read_text()
    said = io.StringIO()
    quiet = Runner(out=said)  # update_pins' own lines; the build says one
    try:
        try:
            _update_project(project, directory, workdir, quiet, port=False)
        except UserError as e:
            raise UserError(
                f"{project}: cannot resolve {ref} of {url} ({e}); run nox -s update_pins where "
                f"{urlparse(url).hostname or url} is reachable, or point "
                "$ROCMFA_PINS_DIR at resolved pins"
            ) from None
        if project in ("pytorch", "aotriton"):
            _check_pin_set(directory, workdir, quiet, force=force)
    except UserError:
        path.write_text(before)  # never a recorded pin that was not checked
        raise
    pin = pins.load_pin(project, directory, workdir=workdir)
    done = f"{project}: resolved {ref} to {pin.commit[:12]}, checked it and recorded it in {path}"
    runner.say(f"{done} (as nox -s update_pins does)")
    for line in (x for x in said.getvalue().splitlines() if x.startswith("WARNING")):
        runner.say(line)
    return pin


def _update_project(project: str, directory: Path, work: Path, runner: Runner, *, port: bool):
    path, table = pin_files.read_table(project, directory)
    keys = [k for k, v in table.items() if isinstance(v, dict) and {"url", "ref", "commit"} <= {*v}]
    names = [project, *(f"{project}.{k}" for k in keys)]
    for name in (n for n in names if n != "aotriton.aiter"):  # aiter: record_submodules
        entry = table if name == project else table[name.partition(".")[2]]
        where = f"{path.name} [{name}]"
        url, ref = (require(entry, key, str, where).strip() for key in ("url", "ref"))
        old = entry.get("commit", "")
        aotriton_src = options.src_dir(work, "aotriton")
        follows = project == "aotriton" and old == pin_files.FROM_PYTORCH
        component = pin_files.COMPANIONS.get(name.removeprefix("pytorch."))  # torch's companion
        companion = component is not None and ref == pin_files.FROM_PYTORCH
        what = "the torch pin names" if follows or companion else f"{ref} resolves to"
        if plan := runner.plan_line(f"{name}: would record the commit {what} (and what it says)"):
            if not (follows or companion):  # nothing asked, nothing written
                runner.run(["git", "ls-remote", url, ref])
            runner.say(plan)
            continue
        if follows:
            pin = pins.load_pin("aotriton", directory, workdir=work)
            runner.say(f"{name}: follows PyTorch -> {pin.commit[:12]} ({pin.source})")
            record_submodules(path, name, url, pin.commit, aotriton_src, runner)
            _report_patches(project, None, pin.commit, work, runner, port=False)
            continue
        if companion:
            torch = pins.load_pin("pytorch", directory, workdir=work)
            origin, new, named_in = companion_from_torch(component.get("related"), torch, work)
            if new is None:
                raise UserError(f"{name}: {named_in} names no commit for it")
            if origin:  # TheRock's manifest takes the origin from there too
                pin_files.set_values(path, name, {"url": origin})
            runner.say(f"{name}: from {named_in}")
        else:
            new = ls_remote(runner, url, ref)
        if new == old:
            runner.say(f"{name}: {ref} is still {new[:12]} (unchanged)")
        else:
            pin_files.set_values(path, name, {"commit": new})
            shown = old[:12] if isinstance(old, str) and old else "unset"
            runner.say(f"{name}: {ref} {shown} -> {new[:12]} (rewrote {where})")
        if name == "aotriton":
            record_submodules(path, name, url, new, aotriton_src, runner)
        if name == "pytorch":  # [pytorch.aotriton]: what the new torch pin's aotriton.cmake names
            torch = pins.load_pin("pytorch", directory, workdir=work)
            named = pins.resolve_aotriton_from_pytorch(torch, workdir=work)  # no local override
            values = {
                "pytorch_commit": torch.commit,
                "version": named.version,
                "commit": named.commit,
                "source": named.source,
            }
            pin_files.set_values(path, "pytorch.aotriton", {k: v for k, v in values.items() if v})
            said = f"names AOTriton {named.version or '?'} {named.commit[:12]} ({named.source})"
            runner.say(f"pytorch: {torch.commit[:12]} {said}; recorded in [pytorch.aotriton]")
        old = old if isinstance(old, str) and pin_files.HEX40.fullmatch(old) else None
        patches = component["key"] if component else project  # patches/<its checkout's key>
        _report_patches(patches, old, new, work, runner, port=port)


def companion_from_torch(related: str | None, torch: pins.Pin, work: Path, *, checkout=False):
    """(origin, commit, where) torch names for a companion, as TheRock reads them: its entry in
    related_commits, else (triton) ci_commit_pins; in torch's checkout, else at the pin's commit."""
    path = "related_commits" if related else pin_files.TRITON_PIN
    where = f"torch {torch.commit[:12]} {path}"
    file = options.src_dir(work, "pytorch") / path
    if checkout:
        text = file.read_text() if file.is_file() else ""
    elif (text := pins.torch_file(torch, path, work)[0]) is None:
        raise UserError(f"{where} does not exist")
    # triton.txt holds the commit alone
    entries = pins.parse_related_commits(text, where) if related else {None: ("", text.strip())}
    origin, commit = entries.get(related, ("", ""))
    if commit and not pin_files.HEX40.fullmatch(commit.lower()):
        raise UserError(f"{where} names {commit!r}, not a 40-hex commit")
    return origin or None, commit.lower() or None, where


def _report_patches(project: str, old, new: str, work: Path, runner: Runner, *, port: bool):
    if (present := checkouts.patch_set_for(project, new)) is not None:
        what = f"no patches needed ({present.none_needed})" if present.none_needed else "patch set"
        return runner.say(f"{project}: {what} present for {new[:12]}")
    if not (sets := checkouts.available_patch_sets(project)):
        return runner.say(f"{project}: no patches")
    runner.say(
        f"{project}: no patch set for {new[:12]} while sets exist for "
        f"{', '.join(c[:12] for c in sets)}: the build refuses it until one is ported "
        f"(--port-patches) or patches/{project}/{new}/manifest.toml says none_needed"
    )
    source = old if old in sets else sets[-1]
    found = checkouts.patch_set_for(project, source)
    checkout = options.src_dir(work, project)
    if found is None or not (checkout / ".git").exists():
        why = f"no checkout at {checkout} (build once, then rerun update_pins)"
        return runner.say(f"{project}: patch set {source[:12]} not checked at {new[:12]}: {why}")
    if problem := checkouts.fetch_commit(runner, checkout, "origin", new):
        return runner.say(f"{project}: cannot fetch {new[:12]}: {problem}")
    ok, detail = checkouts.check_set_applies(found, new, checkout, runner)
    verdict = "still applies" if ok else "does NOT apply"
    runner.say(f"{project}: patch set {source[:12]} {verdict} at {new[:12]}: {detail}")
    if ok and port:  # a copy under the new commit (none there: patch_set_for found none)
        target = checkouts.patch_set_dir(project, new)
        shutil.copytree(found.directory, target)
        manifest = target / "manifest.toml"
        note = f"# Ported by update_pins from {source} (applied cleanly at {new}).\n"
        manifest.write_text(note + manifest.read_text())
        runner.say(f"{project}: ported the set to {target}")
    elif ok:
        runner.say(f"{project}: port it with: nox -s update_pins -- --port-patches")


def record_submodules(path: Path, table: str, url: str, commit: str, checkout: Path, runner):
    """Record `submodules` (what commit's tree can initialise) and [table.aiter] (at its commit)."""
    if not (checkout / ".git").exists():
        why = f"no checkout at {checkout} (build once, then rerun update_pins); the list is kept"
        return runner.say(f"{table}: submodule paths not re-read at {commit[:12]}: {why}")
    if problem := checkouts.fetch_commit(runner, checkout, url, commit):
        raise UserError(f"{table}: cannot fetch {commit[:12]} to read its submodules: {problem}")
    paths, unmapped = read_tree_submodules(runner, checkout, commit)
    changed = pin_files.set_values(path, table, {"submodules": list(paths)})
    show = checkouts.git(runner, checkout, "show", f"{commit}:third_party/aiter.txt", check=False)
    if tag := show.stdout.strip():  # its configure clones aiter by tag: pinned at a commit here
        aiter_url = (pin_files.table_of(path, table).get("aiter") or {}).get("url", AITER_URL)
        new = {"url": aiter_url, "ref": tag, "commit": ls_remote(runner, aiter_url, tag)}
        changed = pin_files.set_values(path, f"{table}.aiter", new) or changed
        runner.say(f"{table}.aiter: configure clones aiter {tag} = {new['commit'][:12]}")
    said = f"{table}: submodules at {commit[:12]}: {', '.join(paths) or 'none'}"
    if unmapped:
        said += f"; gitlinks without a .gitmodules entry, not initialised: {', '.join(unmapped)}"
    runner.say(said + (f" (rewrote {path.name})" if changed else ""))


def _check_pin_set(directory: Path, work: Path, runner: Runner, *, force: bool) -> None:
    aotriton = pins.load_pin("aotriton", directory, workdir=work)
    version = str(aotriton.data.get("version") or "")
    for line in pins.check_pin_set(aotriton, version, force=force, workdir=work):
        runner.say(line)


def read_tree_submodules(runner: Runner, repo: Path, commit: str):
    """(gitlinks at commit that .gitmodules maps: initialisable, those it does not) (read-only)."""
    tree = checkouts.git(runner, repo, "ls-tree", "-r", "--full-tree", commit).stdout.splitlines()
    gitlinks = sorted(line.partition("\t")[2] for line in tree if line.startswith("160000 "))
    keys = ["--get-regexp", r"^submodule\..*\.path$"]
    config = checkouts.git(
        runner, repo, "config", "--blob", f"{commit}:.gitmodules", *keys, check=False
    )
    mapped = {line.split(" ", 1)[1] for line in config.stdout.splitlines() if " " in line}
    return tuple(p for p in gitlinks if p in mapped), tuple(p for p in gitlinks if p not in mapped)
