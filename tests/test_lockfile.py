"""Lock staleness through conda-lock's own code, on real lock files and on one conda-lock's
own writer produces here for our environment.yml with our virtual-package choice."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from rocmfa.env import lockfile
from rocmfa.plumbing import stamps
from rocmfa.plumbing.errors import UserError

FIXTURES = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "conda-lock"
needs_fixtures = pytest.mark.skipif(
    not FIXTURES.is_dir(), reason="../shared/fixtures/conda-lock is not beside this checkout"
)


def write_lock_with_conda_lock(env_file: Path, lock_file: Path) -> None:
    """What `nox -s lock` would write, minus the solve: conda-lock's hash and writer."""
    from conda_lock.content_hash import compute_content_hashes
    from conda_lock.lockfile import write_conda_lock_file
    from conda_lock.lockfile.v2prelim.models import Lockfile, LockMeta
    from conda_lock.src_parser import make_lock_spec
    from conda_lock.virtual_package import default_virtual_package_repodata

    with tempfile.TemporaryDirectory() as tmp:
        mapping = Path(tmp) / "m.json"
        mapping.write_text("{}")
        spec = make_lock_spec(src_files=[env_file], mapping_url=str(mapping))
    repodata = default_virtual_package_repodata(lockfile.CUDA_CHOICE)  # same as --without-cuda
    with repodata:
        hashes = compute_content_hashes(spec, repodata)
    meta = LockMeta(content_hash=hashes, channels=spec.channels, platforms=spec.platforms,
                    sources=[env_file.name])  # fmt: skip
    write_conda_lock_file(Lockfile(package=[], metadata=meta), lock_file, metadata_choices=())


@needs_fixtures
@pytest.mark.parametrize("name", ["eon", "readcon"])
def test_real_public_locks_are_fresh_and_go_stale_on_edit(tmp_path: Path, name: str) -> None:
    src = FIXTURES / name
    fresh, reason = lockfile.check(src / "environment.yml", src / "conda-lock.yml", cuda="default")
    assert fresh, reason
    # The virtual-package choice is part of the hash: the wrong one reads as stale.
    assert not lockfile.check(src / "environment.yml", src / "conda-lock.yml", cuda="")[0]
    shutil.copy(src / "conda-lock.yml", tmp_path)
    edited = (src / "environment.yml").read_text().replace("  - ninja", "  - ninja>=1.12")
    (tmp_path / "environment.yml").write_text(edited)
    fresh, reason = lockfile.check(tmp_path / "environment.yml", tmp_path / "conda-lock.yml",
                                   cuda="default")  # fmt: skip
    assert not fresh and "content hash does not match" in reason


def test_our_environment_yml_locked_by_conda_lock_writer(tmp_path: Path) -> None:
    env_file = tmp_path / "environment.yml"
    shutil.copy(lockfile.ENV_FILE, env_file)
    lock = tmp_path / "conda-lock.yml"
    write_lock_with_conda_lock(env_file, lock)
    cache = tmp_path / "cache.json"
    assert lockfile.check(env_file, lock, cache=cache) == (True, "content hash matches")
    assert lockfile.check(env_file, lock, cache=cache)[1].endswith("(cached verdict)")
    env_file.write_text(env_file.read_text().replace("  - patchelf\n", ""))
    with pytest.raises(UserError) as error:
        lockfile.require_fresh(env_file, lock)
    assert "stale" in str(error.value) and "run: nox -s lock" in str(error.value)


def test_missing_and_malformed_locks(tmp_path: Path) -> None:
    env_file = tmp_path / "environment.yml"
    shutil.copy(lockfile.ENV_FILE, env_file)
    with pytest.raises(UserError, match="missing; run: nox -s lock"):
        lockfile.check(env_file, tmp_path / "conda-lock.yml")
    bad = tmp_path / "conda-lock.yml"
    bad.write_text("version: 1\nmetadata: {}\npackage: nope\n")
    with pytest.raises(UserError, match="not a valid conda-lock file"):
        lockfile.check(env_file, bad)


def test_environment_yml_declares_what_builds_need() -> None:
    text = lockfile.ENV_FILE.read_text()
    for needed in ("python=3.12", "cmake>=3.26", "ninja", "git", "pkg-config", "liblzma-devel",
                   "ccache", "patchelf", "gxx_linux-64", "platforms:", "linux-64"):  # fmt: skip
        assert needed in text
    assert "cuda" not in text.lower()
    assert stamps.file_sha256(lockfile.ENV_FILE)


# The lock checked as a set, from its records file (docs/conda-lock.md).


def closed_channel(document: Mapping[str, Any], out: Path) -> str:
    """The records as a file:// channel (repodata.json per subdir); returns its URL."""
    from tests.support.channel_from_locks import write_channel as write

    entries = {tuple(url.rsplit("/", 2)[-2:]): e for url, e in document["records"].items()}
    write(entries, out, document["platform"], {})  # type: ignore[arg-type]
    return out.resolve().as_uri()


def _package_record(entry: Mapping[str, Any]) -> Any:
    import rattler

    return rattler.PackageRecord(
        name=entry["name"],
        version=entry["version"],
        build=rattler.BuildString(entry["build"]),
        build_number=entry["build_number"],
        subdir=entry["subdir"],
        depends=list(entry.get("depends", [])),
        constrains=list(entry.get("constrains", [])),
    )


def _virtual_record(spec: str, subdir: str) -> Any:
    import rattler

    name, version, build = [*spec.split("="), "0", "0"][:3]
    build_string = rattler.BuildString(build or "0")
    return rattler.PackageRecord(
        name=name, version=version, build=build_string, build_number=0, subdir=subdir
    )


def lock_problems(
    locked: Iterable[tuple[str, str, str, str]], document: Mapping[str, Any]
) -> list[str]:
    """What makes the lock not a set a solver could return. locked: (name, url, md5, sha256)
    per package of the lock. Empty when the lock is consistent with its records."""
    import rattler

    found: list[str] = []
    records = document["records"]
    names: dict[str, str] = {}
    urls = set()
    for name, url, md5, sha256 in locked:
        urls.add(url)
        if name in names:
            found.append(f"two records of {name}: {names[name]} and {url}")
        names[name] = url
        entry = records.get(url)
        if entry is None:
            found.append(f"{url}: no record in the records file")
        elif (entry["name"], entry.get("md5"), entry.get("sha256")) != (name, md5, sha256):
            found.append(f"{url}: name/md5/sha256 differ from its record")
    found += [f"{url}: a record with no package in the lock" for url in sorted(set(records) - urls)]
    pool = {url: _package_record(e) for url, e in records.items()}
    virtual = [_virtual_record(v, document["platform"]) for v in document["virtual_packages"]]
    by_name: dict[str, list[Any]] = {}
    for record in [*pool.values(), *virtual]:
        by_name.setdefault(record.name.normalized, []).append(record)
    for url, record in sorted(pool.items()):
        filename = url.rsplit("/", 1)[1]
        for dep in record.depends:
            spec = rattler.MatchSpec(dep)
            if not any(spec.matches(r) for r in by_name.get(spec.name.normalized, [])):
                found.append(f"{filename} depends on {dep}: nothing locked matches")
        for con in record.constrains:
            spec = rattler.MatchSpec(con)
            for other in by_name.get(spec.name.normalized, []):
                if not spec.matches(other):
                    have = f"{other.name.normalized} {other.version} {other.build}"
                    found.append(f"{filename} constrains {con}: the lock has {have}")
    return found


def committed() -> tuple[list[tuple[str, str, str, str]], dict]:
    from conda_lock.lockfile import parse_conda_lock_file

    lock = parse_conda_lock_file(lockfile.LOCK_FILE)
    locked = [(p.name, p.url, p.hash.md5, p.hash.sha256) for p in lock.package]
    return locked, lockfile.load(lockfile.records_path(lockfile.LOCK_FILE))


def test_committed_lock_is_fresh_and_its_records_are_a_consistent_set() -> None:
    """Fresh; one record per name; every url/md5/sha256 equal to its channel record's (the
    records file holds them whole, with depends and constrains); every depends met by a locked
    record or a virtual package; no constrains violated."""
    from conda_lock.lockfile import parse_conda_lock_file

    assert lockfile.check(lockfile.ENV_FILE, lockfile.LOCK_FILE) == (True, "content hash matches")
    lock = parse_conda_lock_file(lockfile.LOCK_FILE)
    assert lock.metadata.platforms == ["linux-64"]
    locked, document = committed()
    assert document["content_hash"] == lock.metadata.content_hash["linux-64"]
    assert document["platform"] == "linux-64" and "__glibc=2.28=0" in document["virtual_packages"]
    assert lock_problems(locked, document) == []
    names = {name for name, *_ in locked}
    assert {"python", "pip", "cmake", "ninja", "git", "pkg-config", "liblzma-devel", "ccache",
            "gcc_linux-64", "gxx_linux-64", "make", "patchelf"} <= names  # fmt: skip
    # The pair the issue was about: libgcc's run_constrained pins libgomp exactly.
    libgcc = next(e for u, e in document["records"].items() if e["name"] == "libgcc")
    libgomp = next(e for u, e in document["records"].items() if e["name"] == "libgomp")
    assert f"libgomp {libgomp['version']} {libgomp['build']}" in libgcc["constrains"]


def test_committed_lock_is_what_its_own_records_solve_to(tmp_path: Path) -> None:
    """Closed world: the lock's records alone, as a channel, solve environment.yml back to the
    committed conda-lock.yml and records file, byte for byte."""
    from rocmfa.env import lockfile

    _, document = committed()
    channel = closed_channel(document, tmp_path / "closed")
    shutil.copy(lockfile.ENV_FILE, tmp_path / "environment.yml")
    lock = tmp_path / "conda-lock.yml"
    lockfile.solve_lock(tmp_path / "environment.yml", lock, [channel], tmp_path / "cache")
    assert lock.read_text() == lockfile.LOCK_FILE.read_text()
    records = lockfile.records_path(lockfile.LOCK_FILE)
    assert lockfile.records_path(lock).read_text() == records.read_text()


def with_libgomp_build(document: dict, build: str) -> tuple[dict, str]:
    """The records with libgomp swapped for another build of it (same depends)."""
    document = json.loads(json.dumps(document))
    url = next(u for u, e in document["records"].items() if e["name"] == "libgomp")
    entry = document["records"].pop(url)
    new_url = url.replace(entry["build"], build)
    entry.update(build=build, build_number=int(build.rsplit("_", 1)[1]))
    document["records"][new_url] = entry
    return document, new_url


def test_a_libgomp_that_libgcc_constrains_away_is_caught(tmp_path: Path) -> None:
    """What the lock held before: libgomp he0feb66_19 beside libgcc he0feb66_18."""
    from rocmfa.env import lockfile

    locked, document = committed()
    bad, url = with_libgomp_build(document, "he0feb66_19")
    locked = [(n, url if n == "libgomp" else u, m, s) for n, u, m, s in locked]
    found = lock_problems(locked, bad)
    assert found == ["libgcc-15.2.0-he0feb66_18.conda constrains libgomp 15.2.0 he0feb66_18: "
                     "the lock has libgomp 15.2.0 he0feb66_19"]  # fmt: skip
    channel = closed_channel(bad, tmp_path / "closed")
    shutil.copy(lockfile.ENV_FILE, tmp_path / "environment.yml")
    with pytest.raises(UserError, match="cannot solve"):
        lockfile.solve_lock(tmp_path / "environment.yml", tmp_path / "l.yml", [channel], tmp_path)


def test_duplicates_hash_mismatches_and_unmet_depends_are_caught() -> None:
    locked, document = committed()
    name, url, md5, sha256 = locked[0]
    assert lock_problems([*locked, (name, url, md5, sha256)], document)[0].startswith(
        f"two records of {name}: "
    )
    wrong = [(name, url, md5, "0" * 64), *locked[1:]]
    assert lock_problems(wrong, document) == [f"{url}: name/md5/sha256 differ from its record"]
    git = next(u for u, e in document["records"].items() if e["name"] == "git")
    pcre2 = next(u for u, e in document["records"].items() if e["name"] == "pcre2")
    fewer = json.loads(json.dumps(document))
    del fewer["records"][pcre2]
    found = lock_problems([p for p in locked if p[1] != pcre2], fewer)
    assert any(f.startswith(git.rsplit("/", 1)[1] + " depends on pcre2 ") for f in found), found
