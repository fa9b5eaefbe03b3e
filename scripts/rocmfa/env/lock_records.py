"""conda-lock.records.json: the whole repodata record of every package of conda-lock.yml.

conda-lock's format keeps name, version, url, md5/sha256 and dependencies as {name: version},
but no `constrains`, no build strings inside dependency specs and no build number
(conda_lock.lockfile.v2prelim.models.LockedDependency forbids extra fields). `nox -s lock`
writes this file beside the lock from the very records the solver returned, with the platform
and the virtual packages it solved for. It makes the lock checkable as a set
(tests/test_lockfile.py: one record per name, every `depends` met, no `constrains` violated;
the records as a closed channel solve back to exactly the committed lock).

host_requirements(), require_suited(): the platform and `__glibc` the lock was solved for, and
setup_env's check of this host against them, before it installs anything. The host is
read as conda reads it: its subdir from the OS and machine (CONDA_SUBDIR overrides it,
conda/base/context.py); glibc from os.confstr, else platform.libc_ver()
(conda/common/_os/linux.py linux_get_libc_version; CONDA_OVERRIDE_GLIBC overrides it, as it
does conda's and rattler's __glibc). The two variables are the test seam.
"""

from __future__ import annotations

import json
import os
import platform as host_platform
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmfa.plumbing.errors import UserError

FORMAT = 1


def records_path(lock_file: Path) -> Path:
    """conda-lock.yml -> conda-lock.records.json beside it."""
    return lock_file.with_suffix(".records.json")


def write(records: Iterable[Any], urls: Mapping[str, str], platform: str,
          virtual: Iterable[Any], content_hash: str, path: Path) -> None:  # fmt: skip
    """records: rattler RepoDataRecords; urls: file_name -> the url the lock names."""
    from rocmfa.env.channel_from_locks import repodata_entry

    entries = {urls[record.file_name]: repodata_entry(record) for record in records}
    document = {
        "format": FORMAT,
        "platform": platform,
        "virtual_packages": sorted(str(v) for v in virtual),
        "content_hash": content_hash,
        "records": dict(sorted(entries.items())),
    }
    path.write_text(json.dumps(document, indent=1) + "\n")


def load(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path.name} is missing; run: nox -s lock") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{path.name} is not readable: {e}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise UserError(f"{path.name} is not a records file of format {FORMAT}; run: nox -s lock")
    return document


@dataclass(frozen=True)
class HostNeeds:
    platforms: tuple[str, ...]
    glibc: str | None  # the __glibc version the lock was solved for


def host_requirements(path: Path, default_platform: str) -> HostNeeds:
    """What the lock assumes of the host; only the platform when there is no records file."""
    if not path.is_file():
        return HostNeeds((default_platform,), None)
    document = load(path)
    glibc = next((v.split("=")[1] for v in document["virtual_packages"]
                  if v.startswith("__glibc=")), None)  # fmt: skip
    return HostNeeds((document["platform"],), glibc)


def host_subdir(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    if environ.get("CONDA_SUBDIR"):
        return environ["CONDA_SUBDIR"]
    machine = host_platform.machine().lower()
    os_name = {"linux": "linux", "darwin": "osx", "win32": "win"}.get(sys.platform, sys.platform)
    if os_name == "osx":
        return "osx-arm64" if machine == "arm64" else "osx-64"
    bits = {"x86_64": "64", "amd64": "64", "i686": "32", "i386": "32"}.get(machine, machine)
    return f"{os_name}-{bits}"


def host_glibc(environ: Mapping[str, str] | None = None) -> str | None:
    """The glibc version, None when the C library is not glibc (or none is found)."""
    environ = os.environ if environ is None else environ
    if environ.get("CONDA_OVERRIDE_GLIBC"):
        return environ["CONDA_OVERRIDE_GLIBC"]
    for name in ("CS_GNU_LIBC_VERSION", "CS_GNU_LIBPTHREAD_VERSION"):
        try:
            family, _, version = (os.confstr(name) or "").strip().partition(" ")
        except (ValueError, OSError, AttributeError):
            continue
        if family in ("glibc", "NPTL") and version:
            return version
    family, version = host_platform.libc_ver()
    return version if family == "glibc" and version else None


def require_suited(needs: HostNeeds, lock_name: str,
                   environ: Mapping[str, str] | None = None) -> str:  # fmt: skip
    """A one-line description of the host, or a one-line UserError saying why the lock does not
    suit it (another platform, an older glibc)."""
    from packaging.version import Version

    subdir = host_subdir(environ)
    if subdir not in needs.platforms:
        raise UserError(f"{lock_name} is locked for {', '.join(needs.platforms)}; this host is "
                        f"{subdir}: its packages would not run here")  # fmt: skip
    if needs.glibc is None:
        return f"host {subdir}"
    have = host_glibc(environ)
    if have is None:
        raise UserError(
            f"{lock_name} needs glibc >= {needs.glibc}; this host's C library is not glibc (or "
            "its version is unknown; CONDA_OVERRIDE_GLIBC sets it)"
        )
    if Version(have) < Version(needs.glibc):
        raise UserError(f"{lock_name} needs glibc >= {needs.glibc} (its __glibc); this host has "
                        f"glibc {have}: its programs would not run here")  # fmt: skip
    return f"host {subdir}, glibc {have}"
