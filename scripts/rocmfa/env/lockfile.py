"""conda-lock.yml: (re)generate it (rocmfa.env.rattler_env) and check offline that it matches
environment.yml with conda-lock's own content hash, without CUDA (a ROCm env must not be solved
against a fake __cuda). A fresh verdict is cached per (environment.yml, lock, conda-lock version).

conda-lock.records.json beside it keeps the whole repodata record of every package: conda-lock's
format keeps no `constrains`, no build strings inside dependency specs and no build number, which
the closed-world check of the lock needs (tests/test_lockfile.py). `nox -s lock` writes it from
the records the solver returned, with the platform and virtual packages it solved for; setup_env
checks this host against them (require_suited) before it installs anything. The host is read by
py-rattler as conda reads it: CONDA_SUBDIR and CONDA_OVERRIDE_GLIBC override it (the test seam).
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from rocmfa.env import rattler_env
from rocmfa.env.rattler_env import PLATFORM, RECORDS_FORMAT
from rocmfa.plumbing import stamps
from rocmfa.plumbing.commands import Runner, runner_for
from rocmfa.plumbing.datafiles import REPO_ROOT
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import LockOptions

ENV_FILE = REPO_ROOT / "environment.yml"
LOCK_FILE = REPO_ROOT / "conda-lock.yml"
CUDA_CHOICE = ""  # "" = no __cuda virtual package (conda-lock's --without-cuda)


def records_path(lock_file: Path) -> Path:
    return lock_file.with_suffix(".records.json")


def load(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path.name} is missing; run: nox -s lock") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{path.name} is not readable: {e}") from None
    if not isinstance(document, dict) or document.get("format") != RECORDS_FORMAT:
        raise UserError(
            f"{path.name} is not a records file of format {RECORDS_FORMAT}; run: nox -s lock"
        )
    return document


def require_suited(lock_file: Path, platform: str) -> str:
    """'host SUBDIR, glibc V', or a one-line UserError saying why the lock (solved for the
    records file's platform and __glibc; platform alone without one) does not suit this host."""
    import rattler
    from packaging.version import Version

    path = records_path(lock_file)
    document = load(path) if path.is_file() else {"platform": platform, "virtual_packages": []}
    needs = next((v.split("=")[1] for v in document["virtual_packages"]
                  if v.startswith("__glibc=")), None)  # fmt: skip
    subdir = os.environ.get("CONDA_SUBDIR") or str(rattler.Subdir.current())
    if subdir != document["platform"]:
        raise UserError(f"{lock_file.name} is locked for {document['platform']}; this host is "
                        f"{subdir}: its packages would not run here")  # fmt: skip
    if needs is None:
        return f"host {subdir}"
    found = rattler.VirtualPackage.detect(rattler.VirtualPackageOverrides.from_env())
    have = next((str(g.version) for g in (v.into_generic() for v in found)
                 if g.name.normalized == "__glibc"), None)  # fmt: skip
    if have is None:
        why = "not glibc (or of unknown version; CONDA_OVERRIDE_GLIBC sets it)"
        raise UserError(f"{lock_file.name} needs glibc >= {needs}; this host's C library is {why}")
    if Version(have) < Version(needs):
        raise UserError(f"{lock_file.name} needs glibc >= {needs} (its __glibc); this host has "
                        f"glibc {have}: its programs would not run here")  # fmt: skip
    return f"host {subdir}, glibc {have}"


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

    try:
        lock = parse_conda_lock_file(lock_file)
    except Exception as e:  # conda-lock raises pydantic/yaml errors of many kinds
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{lock_file.name} is not a valid conda-lock file: {first}") from None
    platforms = list(lock.metadata.platforms)
    if PLATFORM not in platforms:
        return False, f"it has no {PLATFORM} platform"
    with rattler_env.lock_spec(env_file, platforms, cuda) as (spec, repodata, _mapping):
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
    records = records_path(lock_file)
    where = ", ".join(mirrors) or "environment.yml's channels"
    runner.apply(_solve_and_verify, env_file, lock_file, mirrors, records,
                 say=f"solve {env_file.name} for {PLATFORM} with py-rattler against {where} and "
                 f"write {lock_file.name} and {records.name}")  # fmt: skip


def _solve_and_verify(env_file: Path, lock_file: Path, mirrors: list[str], records: Path) -> None:
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
