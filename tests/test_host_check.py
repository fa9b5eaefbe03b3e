"""setup_env refuses, in one line, a host the lock does not suit. The host is faked with the
variables conda itself reads for it (CONDA_SUBDIR, CONDA_OVERRIDE_GLIBC): they are the test
seam, read by py-rattler (scripts/rocmfa/env/lockfile.py)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rocmfa.env import lockfile
from rocmfa.plumbing.errors import UserError
from tests.support.project import copy_project, run_nox


def test_committed_lock_names_its_platform_and_glibc() -> None:
    document = lockfile.load(lockfile.records_path(lockfile.LOCK_FILE))
    assert document["platform"] == "linux-64" and "__glibc=2.28=0" in document["virtual_packages"]


def test_this_host_suits_the_committed_lock() -> None:
    confstr = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36" on a glibc Linux
    assert lockfile.require_suited() == (f"host linux-64, glibc {confstr.split()[1]}")


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"CONDA_SUBDIR": "linux-aarch64"},
         "conda-lock.yml is locked for linux-64; this host is linux-aarch64"),
        ({"CONDA_OVERRIDE_GLIBC": "2.17"},
         "conda-lock.yml needs glibc >= 2.28 (its __glibc); this host has glibc 2.17"),
        ({"CONDA_OVERRIDE_GLIBC": "2.9"}, "(its __glibc); this host has glibc 2.9"),
        ({"CONDA_OVERRIDE_GLIBC": "2.28"}, None),
        ({"CONDA_OVERRIDE_GLIBC": "2.100"}, None),  # not a string compare
    ],
)  # fmt: skip
def test_hosts_read_as_conda_reads_them(environ, message, monkeypatch) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    if message is None:
        found = lockfile.require_suited()
        assert found == f"host linux-64, glibc {environ['CONDA_OVERRIDE_GLIBC']}"
        return
    with pytest.raises(UserError) as error:
        lockfile.require_suited()
    assert message in str(error.value) and "\n" not in str(error.value)


def test_setup_env_refuses_before_doing_anything(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p")
    shutil.copy(lockfile.records_path(lockfile.LOCK_FILE), project)
    prefix = tmp_path / "envs" / "therock"
    args = ["-s", "setup_env", "--", "--arch", "gfx1151", "--prefix", str(prefix)]
    base = {"ROCMFA_WORKDIR": str(tmp_path / "w")}
    for fake, message in (
        ({"CONDA_SUBDIR": "linux-aarch64"}, "is locked for linux-64; this host is linux-aarch64"),
        ({"CONDA_OVERRIDE_GLIBC": "2.17"}, "needs glibc >= 2.28 (its __glibc); this host has"),
    ):
        result = run_nox(project, *args, env={**base, **fake})
        assert result.returncode == 1, result.stdout + result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr
        assert not prefix.exists()
    # The records file decides: a lock solved for a newer glibc needs a newer host.
    records = project / "conda-lock.records.json"
    document = json.loads(records.read_text())
    document["virtual_packages"] = ["__glibc=9.0=0", "__unix=0=0"]
    records.write_text(json.dumps(document))
    result = run_nox(project, *args, "--dry-run", env=base)
    assert result.returncode == 1 and "needs glibc >= 9.0" in result.stderr
