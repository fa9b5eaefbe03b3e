"""Does this host suit the lock? setup_env asks before it installs anything.

The lock is solved for one platform and a `__glibc` virtual package (conda-lock's default,
2.28, recorded in conda-lock.records.json); its programs do not run on another platform or an
older glibc. The host is read as conda reads it:
- platform: conda's subdir from the OS and the machine (x86_64 -> linux-64, aarch64 ->
  linux-aarch64, ...); `CONDA_SUBDIR` overrides it, as in conda (conda/base/context.py);
- glibc: os.confstr("CS_GNU_LIBC_VERSION"), else CS_GNU_LIBPTHREAD_VERSION, else
  platform.libc_ver() (conda/common/_os/linux.py linux_get_libc_version);
  `CONDA_OVERRIDE_GLIBC` overrides it, as it does conda's and rattler's `__glibc`.
The two override variables are also the test seam (tests/test_host_check.py fakes an aarch64
host and an old glibc with them).
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

from rocmfa.plumbing.errors import UserError

SUBDIR_VAR = "CONDA_SUBDIR"
GLIBC_VAR = "CONDA_OVERRIDE_GLIBC"


def host_subdir(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    if environ.get(SUBDIR_VAR):
        return environ[SUBDIR_VAR]
    machine = platform.machine().lower()
    os_name = {"linux": "linux", "darwin": "osx", "win32": "win"}.get(sys.platform, sys.platform)
    if os_name == "osx":
        return "osx-arm64" if machine == "arm64" else "osx-64"
    bits = {"x86_64": "64", "amd64": "64", "i686": "32", "i386": "32"}.get(machine, machine)
    return f"{os_name}-{bits}"


def host_glibc(environ: Mapping[str, str] | None = None) -> str | None:
    """The glibc version, None when the C library is not glibc (or none is found)."""
    environ = os.environ if environ is None else environ
    if environ.get(GLIBC_VAR):
        return environ[GLIBC_VAR]
    for name in ("CS_GNU_LIBC_VERSION", "CS_GNU_LIBPTHREAD_VERSION"):
        try:
            value = os.confstr(name)
        except (ValueError, OSError, AttributeError):
            continue
        family, _, version = (value or "").strip().partition(" ")
        if family in ("glibc", "NPTL") and version:
            return version
    family, version = platform.libc_ver()
    return version if family == "glibc" and version else None


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def require_suited(platforms: tuple[str, ...], glibc: str | None, lock_name: str,
                   environ: Mapping[str, str] | None = None) -> str:  # fmt: skip
    """A one-line description of the host, or a one-line UserError saying why the lock (for
    platforms, built against glibc `glibc`) does not suit it."""
    subdir = host_subdir(environ)
    if subdir not in platforms:
        raise UserError(f"{lock_name} is locked for {', '.join(platforms)}; this host is "
                        f"{subdir}: its packages would not run here")  # fmt: skip
    if glibc is None:
        return f"host {subdir}"
    have = host_glibc(environ)
    if have is None:
        raise UserError(f"{lock_name} needs glibc >= {glibc}; this host's C library is not "
                        f"glibc (or its version is unknown; {GLIBC_VAR} sets it)")  # fmt: skip
    if _version_key(have) < _version_key(glibc):
        raise UserError(f"{lock_name} needs glibc >= {glibc} (its __glibc); this host has "
                        f"glibc {have}: its programs would not run here")  # fmt: skip
    return f"host {subdir}, glibc {have}"
