"""setup_env refuses, in one line, a host the lock does not suit. The host is faked with the
variables conda itself reads for it (CONDA_SUBDIR, CONDA_OVERRIDE_GLIBC): they are the test
seam, documented in scripts/rocmfa/env/lock_records.py."""

from __future__ import annotations

import json
import os
import platform
import shutil
from pathlib import Path

import pytest

from rocmfa.env import lock_records, lockfile
from rocmfa.plumbing.errors import UserError
from tests.support.project import copy_project, run_nox


def test_committed_lock_names_its_platform_and_glibc() -> None:
    needs = lock_records.host_requirements(lock_records.records_path(lockfile.LOCK_FILE),
                                           lockfile.PLATFORM)  # fmt: skip
    assert needs == lock_records.HostNeeds(("linux-64",), "2.28")


def test_host_read_as_conda_reads_it() -> None:
    assert lock_records.host_subdir({}) == {"x86_64": "linux-64", "aarch64": "linux-aarch64"}.get(
        platform.machine(), lock_records.host_subdir({})
    )
    confstr = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36" on a glibc Linux
    assert lock_records.host_glibc({}) == confstr.split()[1]
    assert lock_records.host_subdir({"CONDA_SUBDIR": "linux-aarch64"}) == "linux-aarch64"
    assert lock_records.host_glibc({"CONDA_OVERRIDE_GLIBC": "2.17"}) == "2.17"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"CONDA_SUBDIR": "linux-aarch64"},
         "conda-lock.yml is locked for linux-64; this host is linux-aarch64"),
        ({"CONDA_SUBDIR": "linux-64", "CONDA_OVERRIDE_GLIBC": "2.17"},
         "conda-lock.yml needs glibc >= 2.28 (its __glibc); this host has glibc 2.17"),
        ({"CONDA_SUBDIR": "linux-64", "CONDA_OVERRIDE_GLIBC": "2.9"},
         "needs glibc >= 2.28 (its __glibc); this host has glibc 2.9"),
    ],
)  # fmt: skip
def test_unsuited_hosts_are_refused(environ: dict[str, str], message: str) -> None:
    with pytest.raises(UserError) as error:
        lock_records.require_suited(
            lock_records.HostNeeds(("linux-64",), "2.28"), "conda-lock.yml", environ
        )
    assert message in str(error.value) and "\n" not in str(error.value)


def test_suited_hosts_pass() -> None:
    ok = {"CONDA_SUBDIR": "linux-64", "CONDA_OVERRIDE_GLIBC": "2.28"}
    assert (
        lock_records.require_suited(lock_records.HostNeeds(("linux-64",), "2.28"), "l", ok)
        == "host linux-64, glibc 2.28"
    )
    newer = {"CONDA_SUBDIR": "linux-64", "CONDA_OVERRIDE_GLIBC": "2.100"}  # not a string compare
    assert lock_records.require_suited(
        lock_records.HostNeeds(("linux-64",), "2.28"), "l", newer
    ).endswith("glibc 2.100")
    assert lock_records.require_suited(
        lock_records.HostNeeds(("linux-64",), None), "l", {"CONDA_SUBDIR": "linux-64"}
    )


def test_setup_env_refuses_before_doing_anything(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p")
    shutil.copy(lock_records.records_path(lockfile.LOCK_FILE), project)
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
