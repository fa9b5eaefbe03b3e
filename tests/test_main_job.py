"""The README's main job, end to end on the stand-ins: its lines are read out of README.md and
run verbatim and in order, in a copy of this project, from a machine with no conda manager and
an env without torch, through install_wheels and its backend check.

What stands in for what: the conda channel is a file:// channel of test-made packages (a
`python` whose prefix is a venv of the test Python without its site-packages, so the env has
no torch, and a `pip` that gives it the test Python's pip only; tests/support/conda_packages.py),
solved by py-rattler into the copy's conda-lock.yml; TheRock's ROCm SDK is the loopback PEP 503
index of tests/support/standin_rocm.py; AOTriton is the CMake project laid out like 0.13b
(tests/support/aotriton_standins.py), built with the real cmake and ninja; TheRock's PyTorch
scripts are tests/support/therock_files (at TheRock 89553ce3). Where the README's lines need
a choice the machine would make (the GPU arch, where the pins live), the environment gives it
($ROCMFA_ARCH, $ROCMFA_PINS_DIR), never an extra argument.

`pip install -e .` (the first line) is checked, not run: it installs this project's
dependencies into the Python that runs nox, and the test runs under that Python already; the
test asserts that every dependency pyproject.toml names is installed there (re-running pip
would need the network or a local build backend, for nothing). `nox -s bench` (the last line)
is not run: the stand-in torch has no SDPA to time. Both are parsed all the same, so the
README cannot gain or lose a line without this test seeing it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from rocmfa.builds import build_aotriton
from rocmfa.env import doctor, lockfile
from tests.conftest import RocmIndex
from tests.support import aotriton_standins as st
from tests.support import therock_standin
from tests.support.conda_packages import make_channel, pip_standin, python_standin
from tests.support.project import REPO_ROOT, copy_project

ARCH = "gfx1151"


def main_job_lines(readme: Path = REPO_ROOT / "README.md") -> list[str]:
    """The commands of the README's "## The main job" code block, comments dropped."""
    text = readme.read_text(encoding="utf-8")
    section = text.split("\n## The main job\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line]


def test_the_readme_names_the_commands_doctor_and_setup_env_name() -> None:
    """doctor.MAIN_JOB is what doctor's "next" and setup_env's "next:" line are made of (the
    main-job run below checks their output at each step)."""
    lines = main_job_lines()
    assert lines[0] == "pip install -e ."
    assert lines[1:] == list(doctor.MAIN_JOB)


@dataclass(frozen=True)
class Machine:
    project: Path
    env: dict[str, str]
    prefix: Path  # where setup_env puts the env (no conda manager)
    aotriton_commit: str

    def run(self, line: str, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
        """One README line as a user types it in the project root (nox through this Python,
        which `pip install -e .` made its home)."""
        argv = shlex.split(line)
        assert argv[0] == "nox"
        argv = [sys.executable, "-m", "nox", *argv[1:], *extra]
        result = subprocess.run(
            argv, cwd=self.project, env=self.env, capture_output=True, text=True, timeout=600
        )
        if check:
            assert result.returncode == 0, f"{line}:\n{result.stdout[-4000:]}\n{result.stderr}"
        return result

    def doctor_next(self) -> str:
        report = json.loads(self.run("nox -s doctor", "--", "--json").stdout)
        return report["next"]


def _no_manager_path() -> str:
    """PATH without any conda manager (micromamba, mamba, conda) on it."""
    keep = []
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if entry and not any(
            os.path.exists(os.path.join(entry, exe)) for exe in ("micromamba", "mamba", "conda")
        ):
            keep.append(entry)
    return os.pathsep.join(keep)


@pytest.fixture(scope="module")
def machine(
    tmp_path_factory: pytest.TempPathFactory, rocm_index: RocmIndex, torch_runtime_index: str
) -> Machine:
    root = tmp_path_factory.mktemp("main-job")
    project = copy_project(root / "project", with_lock=False)
    # The env: python (no site-packages of the test Python: no torch) and pip, from a file://
    # channel, locked by py-rattler as `nox -s lock` would against that channel.
    channel = make_channel(
        root / "channel", [python_standin(system_site_packages=False), pip_standin()]
    )
    (project / "environment.yml").write_text(
        f"name: therock\nchannels:\n  - {channel}\nplatforms:\n  - linux-64\n"
        "dependencies:\n  - python\n  - pip\n"
    )
    lockfile.solve_lock(
        project / "environment.yml",
        project / "conda-lock.yml",
        [],
        cache_dir=root / "cache" / "rattler",
    )
    # The pins: TheRock and PyTorch stand-ins, the AOTriton stand-in, the loopback ROCm index;
    # pins/pytorch.toml records the AOTriton its aotriton.cmake names (as update_pins writes it).
    upstreams = therock_standin.make_upstreams(root / "upstreams")
    pins = upstreams.pins_dir
    shutil.copy(rocm_index.pins_dir / "rocm.toml", pins / "rocm.toml")
    repo, commit = st.make_aotriton_upstream(root / "aotriton")
    st.pin_standin_release(pins, repo, commit)
    (root / "patches").mkdir()
    home = root / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ROCMFA_", "MAMBA_", "CONDA_", "PIP_", "VIRTUAL_ENV", "XDG_"))
    }
    env.update(
        PATH=_no_manager_path(),
        HOME=str(home),
        XDG_DATA_HOME=str(root / "data"),
        XDG_CACHE_HOME=str(root / "cache"),
        PIP_NO_CACHE_DIR="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        # torch's own requirements (install_wheels has pip resolve them) from a loopback index
        # standing in for PyPI; no pip.conf of this machine
        PIP_INDEX_URL=torch_runtime_index,
        PIP_CONFIG_FILE=os.devnull,
        ROCMFA_ARCH=ARCH,
        ROCMFA_PINS_DIR=str(pins),
        ROCMFA_PATCHES_DIR=str(root / "patches"),
        **st.FILE_PROTOCOL_ENV,
    )
    prefix = root / "data" / "rocm-fa-workflow" / "envs" / "therock"
    return Machine(project, env, prefix, commit)


@pytest.mark.slow
def test_the_main_job_runs_as_the_readme_writes_it(machine: Machine) -> None:
    pip_line, setup, build, install, bench = main_job_lines()
    assert pip_line == "pip install -e ."

    # pip install -e .: this Python has every dependency it would install
    deps = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        requirement = Requirement(dep)
        if requirement.marker is None or requirement.marker.evaluate():
            version = metadata.version(requirement.name)
            assert requirement.specifier.contains(version, prereleases=True), (dep, version)

    assert machine.doctor_next() == setup
    done = machine.run(setup)
    assert "no conda manager; installer py-rattler" in done.stdout
    assert f"env {machine.prefix} is ready; next: {build}" in done.stdout
    site = build_aotriton.site_packages(machine.prefix)
    assert build_aotriton.find_torch(machine.prefix) is None  # an env without torch
    assert machine.doctor_next() == build

    built = machine.run(build)
    out = built.stdout
    work = machine.project / "work"
    prefix = work / "build" / "aotriton" / "install"
    assert f"no torch in the env: AOTriton stays in {prefix}" in out
    assert f"AOTriton: {prefix} from build_aotriton -> AOTRITON_INSTALLED_PREFIX" in out
    assert "nox -s install_wheels" in out
    # TheRock's torch call pip-installed the torch it built into the env (README: "When torch
    # enters the env"); install_wheels is still next: the whole set, then the backend check
    torch = build_aotriton.find_torch(machine.prefix)
    assert torch is not None and torch.parent == site
    assert (
        f"AOTRITON_INSTALLED_PREFIX = {str(prefix)!r}" in (torch / "_standin_build.py").read_text()
    )
    assert machine.doctor_next() == install
    # The same line again: build_aotriton now finds that torch and swaps its build into it
    # (ninja install only, no kernel compiles); torch is not rebuilt because a torch appeared.
    again = machine.run(build).stdout
    assert f"installed into {torch / 'lib'}" in again and "every stage is up to date" in again
    quiet = machine.run(build).stdout  # nothing changed: nothing runs
    assert "build_aotriton: up to date" in quiet and "every stage is up to date" in quiet, quiet

    installed = machine.run(install, check=False)
    out = installed.stdout + installed.stderr
    torch = build_aotriton.find_torch(machine.prefix)
    assert torch is not None and torch.parent == site
    # the torch install_wheels put in the env was built against build_aotriton's prefix
    build_info = (torch / "_standin_build.py").read_text()
    assert f"AOTRITON_INSTALLED_PREFIX = {str(prefix)!r}" in build_info
    signature = json.loads(
        (torch / "lib" / "aotriton.images" / "amd-gfx115x" / "__signature__").read_text()
    )
    assert signature["AOTRITON_GIT_SHA1"] == machine.aotriton_commit
    # then its backend check ran with the env's Python on that torch and failed in one line:
    # the stand-in torch is a wheel of TheRock's shape without torch's API (on a machine with a
    # GPU and a real torch, this line is the flash-attention verdict)
    assert (
        f"{machine.prefix}/bin/python {machine.project}/scripts/rocmfa/probes/backend_check.py"
        in out
    )
    version = metadata.Distribution.at(next(site.glob("torch-*.dist-info"))).version
    assert f"backend_check.py: error: torch {version} ({torch}/__init__.py) is not a usable" in out
    assert "wheels installed, but the backend check failed (exit 2)" in out
    assert "Traceback" not in out
    assert installed.returncode == 1
    assert machine.doctor_next().startswith(bench)

    # The quick loop from here on: the same line now also swaps the build into the env's torch
    # (through pip: the wheel install_wheels put in, repacked), and does not rebuild torch
    # because a torch appeared.
    swapped = machine.run(build).stdout
    assert f"installed into {torch / 'lib'}" in swapped
    assert "every stage is up to date" in swapped
    marker = json.loads((torch / "lib" / build_aotriton.MARKER).read_text())
    assert build_aotriton.read_marker(torch) == marker  # its RECORD lists our marker
    assert Path(marker["original"]).is_file()
