"""conda-lock.yml: (re)generate it (rocmfa.env.rattler_env) and check offline that it matches
environment.yml with conda-lock's own content hash, without CUDA (a ROCm env must not be solved
against a fake __cuda). A fresh verdict is cached per (environment.yml, lock, conda-lock version).
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from rocmfa.plumbing import stamps
from rocmfa.plumbing.commands import Runner, runner_for
from rocmfa.plumbing.datafiles import REPO_ROOT
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import LockOptions

ENV_FILE = REPO_ROOT / "environment.yml"
LOCK_FILE = REPO_ROOT / "conda-lock.yml"
PLATFORM = "linux-64"
CUDA_CHOICE = ""  # "" = no __cuda virtual package (conda-lock's --without-cuda)


def check(env_file: Path = ENV_FILE, lock_file: Path = LOCK_FILE, *, cuda: str = CUDA_CHOICE,
          cache_file: Path | None = None) -> tuple[bool, str]:  # fmt: skip
    if not lock_file.is_file():
        raise UserError(f"{lock_file.name} is missing; run: nox -s lock")
    key = {"env": stamps.file_sha256(env_file), "lock": stamps.file_sha256(lock_file),
           "conda_lock": metadata.version("conda-lock"), "cuda": cuda}  # fmt: skip
    if cache_file is not None and stamps.is_current(cache_file, key):
        return True, "content hash matches (cached verdict)"
    from conda_lock.content_hash import backwards_compatible_content_hashes  # slow: pydantic
    from conda_lock.lockfile import parse_conda_lock_file

    from rocmfa.env.rattler_env import lock_spec

    try:
        lock = parse_conda_lock_file(lock_file)
    except Exception as e:  # conda-lock raises pydantic/yaml errors of many kinds
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{lock_file.name} is not a valid conda-lock file: {first}") from None
    platforms = list(lock.metadata.platforms)
    if PLATFORM not in platforms:
        return False, f"it has no {PLATFORM} platform"
    with lock_spec(env_file, platforms, cuda) as (spec, repodata, _mapping):
        for platform in platforms:
            expected = lock.metadata.content_hash.get(platform)
            if expected not in backwards_compatible_content_hashes(spec, repodata, platform):
                return False, f"its {platform} content hash does not match {env_file.name}"
    if cache_file is not None:
        stamps.write(cache_file, key)
    return True, "content hash matches"


VERDICT_CACHE = REPO_ROOT / ".nox" / "rocmfa-lock-check.json"


def require_fresh(env_file: Path = ENV_FILE, lock_file: Path = LOCK_FILE) -> str:
    fresh, reason = check(env_file, lock_file, cache_file=VERDICT_CACHE)
    if not fresh:
        raise UserError(
            f"{lock_file.name} is stale ({reason}): environment.yml changed since it was "
            "locked; run: nox -s lock"
        )
    return stamps.file_sha256(lock_file)


def lock(opts: LockOptions) -> None:
    write_lock(runner_for(opts), list(opts.channel))


def write_lock(runner: Runner, mirrors: list[str], env_file: Path = ENV_FILE,
               lock_file: Path = LOCK_FILE) -> None:  # fmt: skip
    from rocmfa.env.lock_records import records_path

    records = records_path(lock_file)
    where = ", ".join(mirrors) or "environment.yml's channels"
    runner.apply(_solve_and_verify, env_file, lock_file, mirrors, records,
                 say=f"solve {env_file.name} for {PLATFORM} with py-rattler against {where} and "
                 f"write {lock_file.name} and {records.name}")  # fmt: skip


def _solve_and_verify(env_file: Path, lock_file: Path, mirrors: list[str], records: Path) -> None:
    from rocmfa.env import rattler_env

    locked = rattler_env.solve_lock(env_file, lock_file, mirrors, CUDA_CHOICE,
                                    records_file=records)  # fmt: skip
    fresh, reason = check(env_file, lock_file)
    if not fresh:
        raise UserError(f"the lock written does not verify: {reason}")
    print(f"{lock_file.name}: {PLATFORM} locked, {len(locked)} packages; {reason}", flush=True)


def describe(lock_file: Path = LOCK_FILE) -> dict[str, object]:
    if not lock_file.is_file():
        return {"present": False}
    try:
        fresh, reason = check(lock_file=lock_file)
    except UserError as e:
        return {"present": True, "fresh": False, "reason": str(e)}
    return {"present": True, "fresh": fresh, "reason": reason}
