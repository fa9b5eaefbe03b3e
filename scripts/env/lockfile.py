"""conda-lock.yml: (re)generate it, and check offline that it still matches environment.yml.

The check is conda-lock's own content-hash code (conda_lock/content_hash.py, conda-lock 4.0.3)
with the same virtual-package choice as `lock` (conda-lock's defaults without CUDA: a ROCm env
must not be solved against a fake __cuda). Its verdict is cached per (environment.yml,
conda-lock.yml, conda-lock version) so a no-op setup_env does not pay conda-lock's import and
parse again.
"""

from __future__ import annotations

import sys
import tempfile
from importlib import metadata
from pathlib import Path

from scripts.env.manager import find_manager, no_manager_error
from scripts.plumbing import stamps
from scripts.plumbing.commands import Runner
from scripts.plumbing.datafiles import REPO_ROOT
from scripts.plumbing.errors import UserError
from scripts.plumbing.options import LockOptions

ENV_FILE = REPO_ROOT / "environment.yml"
LOCK_FILE = REPO_ROOT / "conda-lock.yml"
PLATFORM = "linux-64"
CUDA_CHOICE = ""  # "" = no __cuda virtual package; the lock command passes --without-cuda


def lock_argv(conda_exe: Path | str, env_file: Path = ENV_FILE, lock_file: Path = LOCK_FILE):
    """conda-lock with an explicit executable: it would otherwise download micromamba."""
    return [
        sys.executable, "-m", "conda_lock", "lock",
        "--file", str(env_file), "--lockfile", str(lock_file),
        "--platform", PLATFORM, "--conda", str(conda_exe), "--without-cuda",
    ]  # fmt: skip


def install_argv(conda_exe: Path | str, prefix: Path, lock_file: Path = LOCK_FILE):
    return [
        sys.executable, "-m", "conda_lock", "install",
        "--conda", str(conda_exe), "--prefix", str(prefix), str(lock_file),
    ]  # fmt: skip


def _content_hash_matches(env_file: Path, lock_file: Path, cuda: str) -> tuple[bool, str]:
    # Imported here: conda-lock pulls in pydantic and friends; most runs hit the cache.
    from conda_lock.content_hash import backwards_compatible_content_hashes
    from conda_lock.lockfile import parse_conda_lock_file
    from conda_lock.src_parser import make_lock_spec
    from conda_lock.virtual_package import default_virtual_package_repodata

    try:
        lock = parse_conda_lock_file(lock_file)
    except Exception as e:  # conda-lock raises pydantic/yaml errors of many kinds
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{lock_file.name} is not a valid conda-lock file: {first}") from None
    platforms = list(lock.metadata.platforms)
    if PLATFORM not in platforms:
        return False, f"it has no {PLATFORM} platform"
    with tempfile.TemporaryDirectory() as tmp:
        # A local, empty PyPI->conda mapping: the default one is downloaded from GitHub.
        mapping = Path(tmp) / "mapping.json"
        mapping.write_text("{}")
        try:
            spec = make_lock_spec(
                src_files=[env_file], platform_overrides=platforms, mapping_url=str(mapping)
            )
        except Exception as e:
            raise UserError(f"cannot parse {env_file.name}: {e}") from None
        repodata = default_virtual_package_repodata(cuda)
        with repodata:
            for platform in platforms:
                expected = lock.metadata.content_hash.get(platform)
                allowed = backwards_compatible_content_hashes(spec, repodata, platform)
                if expected not in allowed:
                    return False, f"its {platform} content hash does not match {env_file.name}"
    return True, "content hash matches"


def check(
    env_file: Path = ENV_FILE,
    lock_file: Path = LOCK_FILE,
    *,
    cuda: str = CUDA_CHOICE,
    cache_file: Path | None = None,
) -> tuple[bool, str]:
    """(fresh, reason). Raises UserError when the lock is missing or unreadable."""
    if not lock_file.is_file():
        raise UserError(f"{lock_file.name} is missing; run: nox -s lock")
    key = {
        "env": stamps.file_sha256(env_file),
        "lock": stamps.file_sha256(lock_file),
        "conda_lock": metadata.version("conda-lock"),
        "cuda": cuda,
    }
    if cache_file is not None and stamps.is_current(cache_file, key):
        return True, "content hash matches (cached verdict)"
    fresh, reason = _content_hash_matches(env_file, lock_file, cuda)
    if fresh and cache_file is not None:
        stamps.write(cache_file, key)
    return fresh, reason


VERDICT_CACHE = REPO_ROOT / ".nox" / "rocmfa-lock-check.json"


def require_fresh(env_file: Path = ENV_FILE, lock_file: Path = LOCK_FILE) -> str:
    """sha256 of a lock that matches environment.yml, or a one-line error naming `nox -s lock`."""
    fresh, reason = check(env_file, lock_file, cache_file=VERDICT_CACHE)
    if not fresh:
        raise UserError(
            f"{lock_file.name} is stale ({reason}): environment.yml changed since it was "
            "locked; run: nox -s lock"
        )
    return stamps.file_sha256(lock_file)


def lock(opts: LockOptions) -> None:
    """`nox -s lock`: solve environment.yml for linux-64 into conda-lock.yml."""
    runner = Runner(dry_run=opts.dry_run)
    manager = find_manager()
    if manager is None:
        if not opts.dry_run:
            raise no_manager_error()
        runner.say("note: no conda manager found; a real run stops here")
        exe: Path | str = "micromamba"
    else:
        exe = manager.exe
    runner.run(lock_argv(exe))
    if not opts.dry_run:
        fresh, reason = check()
        if not fresh:
            raise UserError(f"conda-lock wrote a lock that does not verify: {reason}")
        runner.say(f"{LOCK_FILE.name}: {PLATFORM} locked; {reason}")


def describe(lock_file: Path = LOCK_FILE) -> dict[str, object]:
    """Facts for doctor, without raising."""
    if not lock_file.is_file():
        return {"present": False}
    try:
        fresh, reason = check(lock_file=lock_file)
    except UserError as e:
        return {"present": True, "fresh": False, "reason": str(e)}
    return {"present": True, "fresh": fresh, "reason": reason}
