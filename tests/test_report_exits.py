"""doctor and matrix print their whole screen and then exit non-zero when what they show is
broken (a bad arch value, a malformed pin file, a stale lock, a half-done change); the arch
suggestion ranks two swapped digits first."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfa.env import doctor
from rocmfa.plumbing.errors import did_you_mean
from tests.support.project import run_nox

REPO_ROOT = Path(__file__).resolve().parent.parent
ARCHES = ["gfx1100", "gfx1101", "gfx1150", "gfx1151", "gfx1152", "gfx1153", "gfx908", "gfx90a"]


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("gfx1115", "gfx1151"), ("gfx1511", "gfx1151"), ("GFX1151", "gfx1151"), ("gfx9a0", "gfx90a")],
)
def test_arch_suggestion_ranks_swapped_digits_first(typed: str, meant: str) -> None:
    assert did_you_mean(typed, ARCHES) == f" (did you mean '{meant}'?)"


def test_doctor_and_matrix_exit_non_zero_for_an_unknown_arch(tmp_path: Path) -> None:
    env = {"ROCMFA_WORKDIR": str(tmp_path / "w")}
    for session in ("doctor", "matrix"):
        result = run_nox(REPO_ROOT, "-s", session, "--", "--arch", "gfx9999", env=env)
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        assert "uv binary not found" not in result.stderr  # nox's own chatter stays out
        (line,) = [x for x in result.stderr.splitlines() if "aborted" in x]
        assert "gfx9999" in line


def test_matrix_exits_non_zero_for_a_malformed_pin_file(tmp_path: Path) -> None:
    pins = tmp_path / "pins"
    shutil.copytree(REPO_ROOT / "pins", pins)
    with open(pins / "pytorch.toml", "a") as f:
        f.write("[pytorch\n")
    env = {"ROCMFA_WORKDIR": str(tmp_path / "w"), "ROCMFA_PINS_DIR": str(pins)}
    result = run_nox(REPO_ROOT, "-s", "matrix", "--", "--arch", "gfx1151", env=env)
    assert result.returncode == 1 and "pytorch.toml" in result.stderr, result.stderr
    assert "## Flash attention through AOTriton" in result.stdout


def test_doctor_problems_are_what_is_broken_not_what_is_missing() -> None:
    fine = {
        "arch": {"error": "no AMD GPU detected"},
        "env": {},
        "lock": {"present": False},
        "pins": [
            {"file": "rocm.toml", "project": "rocm"},
            {
                "file": "pytorch.toml",
                "error": "'commit' is not resolved yet; run: nox -s update_pins",
            },
        ],
    }
    assert doctor.problems(fine) == []  # no GPU, no manager, no env, no lock yet
    broken = {
        **fine,
        "interrupted": ["the env's torch is incomplete (...); rerun: nox -s install_wheels"],
        "arch": {"error": "unknown", "bad_value": "--arch gfx9999"},
        "lock": {"present": True, "fresh": False},
        "pins": [{"file": "pytorch.toml", "error": "malformed"}],
    }
    assert doctor.problems(broken) == [
        "half-installed torch (see HALF-DONE)",
        "unknown arch (--arch gfx9999)",
        "malformed pin file pytorch.toml",
        "stale conda-lock.yml (nox -s lock)",
    ]


@pytest.mark.parametrize("hidden", ["pytest", "torch"])
def test_nox_tests_without_the_dev_extras_is_one_line_naming_the_install(hidden: str) -> None:
    """What is missing, named, and the README's own install line for the tests (the extras AND
    torch, which test modules import: the extras alone leave collection errors)."""
    # None in sys.modules is how Python itself marks a module as not importable
    hide = f"import sys;sys.modules[{hidden!r}] = None; sys.argv[0] = 'nox'; import nox; nox.main()"
    result = subprocess.run(
        [sys.executable, "-c", hide, "-s", "tests"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    (line,) = [x for x in result.stderr.splitlines() if "aborted" in x]
    readme = (REPO_ROOT / "README.md").read_text().split("\n## Tests\n", 1)[1]
    test_line = readme.split("```sh\n", 1)[1].split("\n", 1)[0]
    install, _, run = test_line.partition(" && ")
    assert run == "python3 -m nox -s lint tests" and "torch==" in install
    assert line.endswith(f"{hidden} is not installed; run: {install}."), line
    assert "Traceback" not in result.stderr and "uv binary" not in result.stderr
