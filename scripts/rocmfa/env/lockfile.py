"""conda-lock.yml: solved and installed with py-rattler, written and checked by conda-lock, with
conda-lock.records.json beside it (the whole records, constrains included; docs/conda-lock.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import namedtuple
from collections.abc import Coroutine, Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmfa.plumbing import downloads, stamps
from rocmfa.plumbing.commands import runner_for
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import REPO_ROOT, LockOptions, SetupEnvOptions, environment

if TYPE_CHECKING:
    import rattler

PLATFORM = "linux-64"
RECORDS_FORMAT = 1  # conda-lock.records.json
ENV_FILE = REPO_ROOT / "environment.yml"
LOCK_FILE = REPO_ROOT / "conda-lock.yml"
VERDICT_CACHE = REPO_ROOT / ".nox" / "rocmfa-lock-check.json"
CUDA_CHOICE = ""  # "" = no __cuda virtual package (conda-lock's --without-cuda)
DOWNLOADS = 8  # at a time
MIRROR_FIX = "offline or blocked? pass a mirror of the channel: --channel URL (file:// too)"
# The repodata fields a solver and an installer read (not a lock writer's purls, run_exports, url)
RECORD_FIELDS = (  # noqa: SIM905 (one field list, in the order the records file keeps)
    "name version build build_number depends constrains track_features features noarch subdir md5"
    " sha256 size timestamp license license_family arch platform"
).split()


def default_cache_dir() -> Path:
    if chosen := environment().conda_cache:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "rocm-fa-workflow" / "conda"


def parse_mirrors(values: Iterable[str], channels: list[str]) -> dict[str, str]:
    """`--channel URL` (environment.yml's only channel) or `NAME=URL` -> {base: mirror base}."""
    import rattler

    bases = {rattler.Channel(c).base_url for c in channels}
    mirrors: dict[str, str] = {}
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or "://" in name:
            if len(channels) != 1:
                raise UserError(
                    f"--channel {value}: environment.yml has channels {', '.join(channels)}; "
                    "say which one it mirrors: --channel NAME=URL"
                )
            name, url = channels[0], value
        if (base := rattler.Channel(name).base_url) not in bases:
            raise UserError(f"--channel {value}: {name} is not a channel of environment.yml")
        if "://" not in url:
            url = Path(url).expanduser().resolve().as_uri()
        mirrors[base] = rattler.Channel(url).base_url
    return mirrors


def _swap_base(url: str, mapping: Mapping[str, str]) -> str:
    for old, new in mapping.items():
        if url.startswith(old):
            return new + url[len(old) :]
    return url


@contextlib.contextmanager
def lock_spec(env_file: Path, platforms: list[str], cuda: str):
    """conda-lock's spec and virtual packages; its PyPI mapping is empty (not downloaded)."""
    from conda_lock.src_parser import make_lock_spec
    from conda_lock.virtual_package import default_virtual_package_repodata

    logging.disable(logging.INFO)  # conda-lock logs its virtual packages on the root logger
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        stack.callback(logging.disable, logging.NOTSET)
        mapping = Path(tmp) / "mapping.json"
        mapping.write_text("{}")
        try:
            spec = make_lock_spec(
                src_files=[env_file], platform_overrides=platforms, mapping_url=str(mapping)
            )
        except Exception as e:
            raise UserError(f"cannot parse {env_file.name}: {e}") from None
        with (vpr := default_virtual_package_repodata(cuda)):  # its __enter__ returns None
            yield spec, vpr


def solve(
    specs: list[str], channels: list[str], virtual: list[Any], cache_dir: Path | None = None
) -> list[rattler.RepoDataRecord]:
    """rattler's solver (repodata cached in cache_dir/repodata); errors are one line."""
    import rattler
    from rattler.exceptions import FetchRepoDataError, GatewayError, SolverError

    solving = rattler.solve(
        sources=[rattler.Channel(url) for url in channels],
        specs=specs,
        gateway=rattler.Gateway(cache_dir=(cache_dir or default_cache_dir()) / "repodata"),
        platforms=[PLATFORM, "noarch"],
        virtual_packages=virtual,
    )
    try:
        return run_rattler(solving)
    except SolverError as error:
        raise UserError(f"cannot solve {', '.join(specs)}: {_one_line(error)}") from None
    except (GatewayError, FetchRepoDataError) as error:  # the channel, not the solver
        where = url[1] if (url := re.search(r"url \((\S+?)\)", str(error))) else channels[0]
        why = str(error).strip().splitlines()[-1].strip().removeprefix("Caused by: ")
        host = urllib.parse.urlsplit(where).netloc
        raise UserError(f"cannot reach {host} ({where}): {why}; {MIRROR_FIX}") from None
    except Exception as error:  # anything else from rattler
        raise UserError(f"rattler could not solve the env: {_one_line(error)}") from None


def _one_line(error: BaseException) -> str:
    """rattler's message (a heading, then a tree of why) as one line: the conflict lines."""
    text = " ".join([line.strip() for line in str(error).splitlines() if line.strip()][:8])
    return text if len(text) < 600 else text[:597] + "..."


def locked_dependencies(
    records: list[rattler.RepoDataRecord], canonical: dict[str, str]
) -> list[Any]:
    """conda-lock's LockedDependency per record, dependencies as conda-lock writes them."""
    from conda_lock.interfaces.vendored_conda import MatchSpec
    from conda_lock.lockfile.v2prelim.models import HashModel, LockedDependency

    locked = []
    for record in records:
        by_name: dict[str, list[Any]] = {}
        for dep in map(MatchSpec, record.depends):
            by_name.setdefault(dep.name, []).append(dep)
        merged = {name: MatchSpec.merge(specs)[0].version for name, specs in by_name.items()}
        if not record.sha256 or not record.md5:
            raise UserError(f"{record.file_name}: the channel gives no md5/sha256 for it")
        locked.append(
            LockedDependency(
                name=record.name.normalized,
                version=str(record.version),
                manager="conda",
                platform=PLATFORM,
                url=_swap_base(record.url, canonical),
                dependencies={n: v.spec_str if v is not None else "" for n, v in merged.items()},
                hash=HashModel(md5=record.md5.hex(), sha256=record.sha256.hex()),
                categories={"main"},  # environment.yml's only category
            )
        )
    return locked


def solve_lock(
    env_file: Path, lock_file: Path, mirrors: Iterable[str], cache_dir: Path | None = None
) -> list[Any]:
    """Solve env_file for linux-64 into lock_file and its records file (load() reads it)."""
    import rattler
    from conda_lock.conda_solver import _to_match_spec  # as conda-lock spells a spec
    from conda_lock.content_hash import compute_content_hashes
    from conda_lock.lockfile import write_conda_lock_file
    from conda_lock.lockfile.v2prelim.models import Lockfile, LockMeta

    with lock_spec(env_file, [PLATFORM], CUDA_CHOICE) as (spec, vpr):
        conda_deps = [d for d in spec.dependencies[PLATFORM] if d.manager == "conda"]
        if len(conda_deps) != len(spec.dependencies[PLATFORM]):
            raise UserError(f"{env_file.name}: pip dependencies are not supported; use conda's")
        channels = [c.url for c in spec.channels]
        mirror_of = parse_mirrors(mirrors, channels)
        sources = [_swap_base(rattler.Channel(c).base_url, mirror_of) for c in channels]
        specs = [_to_match_spec(d.name, d.version, d.build, d.conda_channel) for d in conda_deps]
        print(f"solving {len(specs)} specs for {PLATFORM} against {', '.join(sources)}")
        # conda-lock's virtual packages (the ones it hashes); rattler wants a build string, not 0
        virtual = [
            rattler.GenericVirtualPackage(
                rattler.PackageName(p.name),
                rattler.Version(p.version),
                rattler.BuildString(p.build_string or "0"),
            )
            for p, subdirs in vpr.packages_by_subdir.items()
            if PLATFORM in subdirs
        ]
        records = solve(specs, sources, virtual, cache_dir=cache_dir)
        hashes = compute_content_hashes(spec, vpr)
    canonical = {mirror: base for base, mirror in mirror_of.items()}
    locked = locked_dependencies(records, canonical)
    source = os.path.relpath(env_file, lock_file.parent)
    meta = LockMeta(
        content_hash=hashes, channels=list(spec.channels), platforms=[PLATFORM], sources=[source]
    )
    write_conda_lock_file(Lockfile(package=locked, metadata=meta), lock_file, metadata_choices=())
    entries = {_swap_base(r.url, canonical): repodata_entry(r) for r in records}
    document = {
        "format": RECORDS_FORMAT,
        "platform": PLATFORM,
        "virtual_packages": sorted(map(str, virtual)),
        "content_hash": hashes[PLATFORM],
        "records": dict(sorted(entries.items())),
    }
    records_path(lock_file).write_text(json.dumps(document, indent=1) + "\n")
    return locked


def repodata_entry(record: Any) -> dict[str, Any]:
    """A rattler RepoDataRecord as a channel entry: RECORD_FIELDS but empty ones (not depends)."""
    data = json.loads(record.to_json())
    entry = {k: data[k] for k in RECORD_FIELDS if data.get(k) not in (None, [], "")}
    return {**entry, "depends": entry.get("depends", [])}  # keeps RECORD_FIELDS' order


def locked_packages(lock_file: Path) -> list[Any]:
    from conda_lock.lockfile import parse_conda_lock_file

    return [p for p in parse_conda_lock_file(lock_file).package if p.platform == PLATFORM]


def fetch_all(packages: list[Any], archives: Path, mirrors: Mapping[str, str]) -> list[Path]:
    """Each package's sha256-checked archive, in daemon threads: Ctrl-C ends at once (an executor
    would join workers stuck on a silent mirror) and removes this run's partial files."""
    paths = [archives / package.url.rsplit("/", 1)[-1] for package in packages]
    failures: list[BaseException] = []
    todo = iter(zip(packages, paths, strict=True))  # next() on it is atomic under the GIL

    def work() -> None:
        while not failures and (item := next(todo, None)) is not None:
            package, dest = item
            url = _swap_base(package.url, mirrors)
            try:
                downloads.fetch_pinned(
                    url, dest, package.hash.sha256, fix=MIRROR_FIX, pinned_by="the lock's"
                )
            except BaseException as error:
                failures.append(error)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(DOWNLOADS)]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()  # interruptible: Ctrl-C raises here
    except KeyboardInterrupt:
        failures.append(KeyboardInterrupt())
        downloads.remove_partials(archives, ours=True)
        hosts = sorted({urllib.parse.urlsplit(_swap_base(p.url, mirrors)).netloc for p in packages})
        where = f"from {', '.join(hosts)} into {archives}; partial files removed"
        print(f"interrupted while downloading conda packages {where}", file=sys.stderr)
        raise
    if failures:
        raise failures[0]
    return paths


InstallResult = namedtuple("InstallResult", "installed removed unchanged")  # names, names, count


def _prefix_packages(prefix: Path) -> set[str]:
    return {p.name[:-5] for p in (prefix / "conda-meta").glob("*-*-*.json")}


def install_lock(
    lock_file: Path,
    prefix: Path,
    *,
    cache_dir: Path,
    channel: Iterable[str] = (),
    reporter: Any = None,
) -> InstallResult:
    """The lock's packages into prefix; channel: `--channel` values, as `nox -s lock` takes them."""
    import rattler

    packages = locked_packages(lock_file)
    origins = [p.url.rsplit("/", 2)[0] for p in packages]  # each package's channel
    mirrors = parse_mirrors(channel, sorted(set(origins)))
    paths = fetch_all(packages, cache_dir / "archives", mirrors)
    before = _prefix_packages(prefix)

    async def install() -> None:
        wanted = []
        for path, origin in zip(paths, origins, strict=True):
            record = await rattler.RepoDataRecord.from_package_archive(path)
            # Linked from the verified archive; the origin stays in the channel field.
            record.url = path.resolve().as_uri()
            record.channel = origin
            wanted.append(record)
        await rattler.install(
            wanted,
            target_prefix=prefix,
            cache_dir=cache_dir / "pkgs",
            show_progress=False,
            execute_link_scripts=False,  # said, not left to rattler's default (None)
            reporter=reporter,
        )

    try:
        run_rattler(install())
    except Exception as error:
        raise UserError(f"rattler could not install into {prefix}: {_one_line(error)}") from None
    after = _prefix_packages(prefix)
    return InstallResult(sorted(after - before), sorted(before - after), len(after & before))


def run_rattler(work: Coroutine) -> Any:
    """work on an event loop of ours, returning once rattler's thread let go of the loop, else
    it may crash interpreter exit (docs/conda-lock.md, "exit-time crash")."""

    async def settled() -> tuple[bool, Any]:
        try:  # caught in the loop: an escaping exception's frames would hold the loop
            return True, await work
        except BaseException as error:
            return False, error

    loop = asyncio.new_event_loop()
    baseline = sys.getrefcount(loop)
    try:
        ok, outcome = loop.run_until_complete(settled())
    except BaseException:  # interrupted (Ctrl-C): nothing left worth waiting for
        loop.close()
        raise
    # Excess over `baseline` is rattler's; a reference it dropped waits for a call into pyo3
    import rattler

    deadline = time.monotonic() + 10  # rattler lets go within microseconds: a bound on a surprise
    while sys.getrefcount(loop) > baseline and time.monotonic() < deadline:
        rattler.Version("0")
        time.sleep(0.0002)  # releases the GIL so rattler's thread can finish with it
    loop.close()
    if not ok:
        raise outcome
    return outcome


def records_path(lock_file: Path) -> Path:
    return lock_file.with_suffix(".records.json")


def load(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{path.name} is not readable ({e}); run: nox -s lock") from None
    if not isinstance(document, dict) or document.get("format") != RECORDS_FORMAT:
        raise UserError(f"{path.name} is not of format {RECORDS_FORMAT}; run: nox -s lock")
    return document


def require_suited() -> str:
    """'host SUBDIR, glibc V', or why the lock (the records file's __glibc) does not suit it."""
    import rattler
    from packaging.version import Version

    path = records_path(LOCK_FILE)
    virtual = load(path)["virtual_packages"] if path.is_file() else []
    needs = next((v.split("=")[1] for v in virtual if v.startswith("__glibc=")), None)
    if (subdir := os.environ.get("CONDA_SUBDIR") or str(rattler.Subdir.current())) != PLATFORM:
        why = "its packages would not run here"
        raise UserError(f"{LOCK_FILE.name} is locked for {PLATFORM}; this host is {subdir}: {why}")
    if needs is None:
        return f"host {subdir}"
    found = rattler.VirtualPackage.detect(rattler.VirtualPackageOverrides.from_env())
    generic = (v.into_generic() for v in found)
    if (have := {g.name.normalized: str(g.version) for g in generic}.get("__glibc")) is None:
        why = "not glibc (or of unknown version; CONDA_OVERRIDE_GLIBC sets it)"
        raise UserError(f"{LOCK_FILE.name} needs glibc >= {needs}; this host's C library is {why}")
    if Version(have) < Version(needs):
        why = f"this host has glibc {have}: its programs would not run here"
        raise UserError(f"{LOCK_FILE.name} needs glibc >= {needs} (its __glibc); {why}")
    return f"host {subdir}, glibc {have}"


def check(
    env_file: Path = ENV_FILE, lock_file: Path = LOCK_FILE, *, cuda: str = CUDA_CHOICE, cache=None
) -> tuple[bool, str]:
    """conda-lock's content-hash verdict on lock_file; cache: a stamp file keeping a fresh one."""
    if not lock_file.is_file():
        raise UserError(f"{lock_file.name} is missing; run: nox -s lock")
    key = {
        "env": stamps.file_sha256(env_file),
        "lock": stamps.file_sha256(lock_file),
        "conda_lock": metadata.version("conda-lock"),
        "cuda": cuda,
    }
    if cache is not None and stamps.is_current(cache, key):
        return True, "content hash matches (cached verdict)"
    from conda_lock.content_hash import backwards_compatible_content_hashes  # slow: pydantic
    from conda_lock.lockfile import parse_conda_lock_file

    try:
        lock = parse_conda_lock_file(lock_file)
    except Exception as e:  # conda-lock raises pydantic/yaml errors of many kinds
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{lock_file.name} is not a valid conda-lock file: {first}") from None
    platforms = list(lock.metadata.platforms)
    if PLATFORM not in platforms:
        return False, f"it has no {PLATFORM} platform"
    with lock_spec(env_file, platforms, cuda) as (spec, repodata):
        for platform in platforms:
            expected = lock.metadata.content_hash.get(platform)
            if expected not in backwards_compatible_content_hashes(spec, repodata, platform):
                return False, f"its {platform} content hash does not match {env_file.name}"
    if cache is not None:
        stamps.write(cache, key)
    return True, "content hash matches"


def require_fresh(env_file: Path = ENV_FILE, lock_file: Path = LOCK_FILE) -> str:
    fresh, reason = check(env_file, lock_file, cache=VERDICT_CACHE)
    if not fresh:
        why = "environment.yml changed since it was locked"
        raise UserError(f"{lock_file.name} is stale ({reason}): {why}; run: nox -s lock")
    return stamps.file_sha256(lock_file)


def lock(opts: LockOptions | SetupEnvOptions) -> None:
    """`nox -s lock`, and setup_env's first step while there is no lock."""

    def solve_and_verify() -> None:
        locked = solve_lock(ENV_FILE, LOCK_FILE, opts.channel)
        fresh, reason = check(ENV_FILE, LOCK_FILE)
        if not fresh:
            raise UserError(f"the lock written does not verify: {reason}")
        print(f"{LOCK_FILE.name}: {PLATFORM} locked, {len(locked)} packages; {reason}", flush=True)

    where = ", ".join(opts.channel) or "environment.yml's channels"
    say = f"solve {ENV_FILE.name} for {PLATFORM} with py-rattler against {where}"
    also = records_path(LOCK_FILE).name
    runner_for(opts).apply(solve_and_verify, say=f"{say} and write {LOCK_FILE.name} and {also}")
