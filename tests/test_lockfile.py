"""Lock staleness through conda-lock's own code, on real lock files and on one conda-lock's
own writer produces here for our environment.yml with our virtual-package choice."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from scripts.env import lockfile
from scripts.plumbing import stamps
from scripts.plumbing.errors import UserError

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
    assert lockfile.check(env_file, lock, cache_file=cache) == (True, "content hash matches")
    assert lockfile.check(env_file, lock, cache_file=cache)[1].endswith("(cached verdict)")
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
    for needed in ("python=3.12", "cmake>=3.26", "ninja", "git", "pkg-config", "xz", "patchelf",
                   "gxx_linux-64", "platforms:", "linux-64"):  # fmt: skip
        assert needed in text
    assert "cuda" not in text.lower()
    assert stamps.file_sha256(lockfile.ENV_FILE)


def test_committed_lock_is_fresh_and_every_package_is_a_verified_conda_forge_record() -> None:
    from conda_lock.lockfile import parse_conda_lock_file

    assert lockfile.check(lockfile.ENV_FILE, lockfile.LOCK_FILE) == (True, "content hash matches")
    lock = parse_conda_lock_file(lockfile.LOCK_FILE)
    assert lock.metadata.platforms == ["linux-64"]
    names = {p.name for p in lock.package}
    assert {"python", "pip", "cmake", "ninja", "git", "pkg-config", "xz", "gcc_linux-64",
            "gxx_linux-64", "make", "patchelf"} <= names  # fmt: skip
    for package in lock.package:
        assert package.manager == "conda" and package.platform == "linux-64"
        assert package.url.startswith("https://conda.anaconda.org/conda-forge/"), package.url
        assert len(package.hash.sha256 or "") == 64 and len(package.hash.md5 or "") == 32
