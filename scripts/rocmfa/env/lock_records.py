"""conda-lock.records.json: the whole repodata record of every package of conda-lock.yml.

conda-lock's format keeps no `constrains`, no build strings inside dependency specs and no build
number (its LockedDependency forbids extra fields), which the closed-world check of the lock
needs (tests/test_lockfile.py). `nox -s lock` writes this file beside the lock from the records
the solver returned, with the platform and virtual packages it solved for; setup_env checks this
host against them (require_suited) before it installs anything. The host is read by py-rattler
as conda reads it: CONDA_SUBDIR and CONDA_OVERRIDE_GLIBC override it (the test seam).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rocmfa.plumbing.errors import UserError

FORMAT = 1


def records_path(lock_file: Path) -> Path:
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
