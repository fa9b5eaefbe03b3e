"""Opt-in: AOTriton's own configure at our pin, with exactly the cmake argv build_aotriton plans.

    ROCMFA_AOTRITON_REAL_GIT  a git dir of ROCm/aotriton holding pins/aotriton.toml's commit
                              (e.g. a `fetch` snapshot); without it the tests skip, saying so

The real tree (ROCm/aotriton 6e00ef3e = 0.13b) is checked out by our checkout code where the
session's plan puts it (<work>/src/aotriton). The argv is the one `build_aotriton --dry-run
--from-source --arch gfx1151` prints before setup_env (not retyped): only what that plan shows
as a placeholder or as a tool setup_env installs is filled in here - `$(rocm-sdk path --cmake)`
and `$(rocm-sdk path --root)` by a minimal `hip` CMake package (hip-config.cmake defining the
two targets v3src links, hip::host and hip::amdhip64) standing in for TheRock's SDK, and the
env's cmake and ninja by the ones on PATH. Python3 is found by CMake (the plan passes
Python3_EXECUTABLE only once the env exists); liblzma comes from pkg-config.

Every network step the configure takes (CMakeLists.txt and v3src/CMakeLists.txt at 6e00ef3e):
1. `pip install -r requirements.txt` into the build venv (<build>/venv; filelock iniconfig
   packaging pluggy numpy setuptools wheel pybind11 pandas pyyaml) - from the package index pip
   is configured with (PyPI);
2. `pip install <tree>` of the `aotriton` generator package, whose build isolation fetches
   setuptools>=64 - also from the index;
3. with AOTRITON_NOIMAGE_MODE=OFF (the session's image build), `git clone --depth 1 --branch
   <third_party/aiter.txt> https://github.com/ROCm/aiter.git` into <build>/v3src/aiter, skipped
   when a checkout there is already at that tag: the session's own aiter step links its pinned
   checkout there (here the pin points at a local repository: the only source that stands in).
The build (not the configure) then pip-installs third_party/triton (AOTriton's Triton fork,
which downloads its own LLVM) into the venv, and compiles the kernels.
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfa.builds import build_aotriton as ba
from rocmfa.plumbing import options
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError, load_toml
from rocmfa.plumbing.options import PINS_DIR
from rocmfa.sources.checkouts import ensure_checkout
from rocmfa.sources.pins import Pin
from tests.support import aotriton_standins as st
from tests.support.real_trees import borrow_snapshot

AOTRITON_GIT = os.environ.get("ROCMFA_AOTRITON_REAL_GIT")
pytestmark = [
    pytest.mark.skipif(
        not AOTRITON_GIT, reason="set ROCMFA_AOTRITON_REAL_GIT (a ROCm/aotriton git snapshot)"
    ),
    pytest.mark.slow,
]
HIP_CONFIG = """# stand-in for TheRock's hip CMake package: the targets AOTriton's v3src links
add_library(hip::host INTERFACE IMPORTED)
add_library(hip::amdhip64 INTERFACE IMPORTED)
set(hip_FOUND TRUE)
"""


def planned_configure(work: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict, list[str]]:
    """(variables, argv) of the cmake configure line build_aotriton's dry run prints."""
    argv = ["--dry-run", "--from-source", "--arch", "gfx1151", "--workdir", str(work)]
    argv += ["--prefix", str(work.parent / "no-env-yet")]
    capsys.readouterr()
    ba.build_aotriton(options.parse("build_aotriton", argv))
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if " -G Ninja " in line)
    words = shlex.split(line.removeprefix("[dry-run] "))
    assert words[:2] == ["(cd", f"{work / 'src' / 'aotriton'})"], line
    words = words[2:]
    sets = {}
    while "=" in words[0] and not words[0].startswith("-"):
        name, value = words.pop(0).split("=", 1)
        sets[name] = value
    return sets, words


def real_tree(work: Path) -> Path:
    """The pinned commit checked out by our own checkout code where the plan puts it."""
    table = load_toml(PINS_DIR / "aotriton.toml", "pin")["aotriton"]
    tree = work / "src" / "aotriton"
    borrow_snapshot(AOTRITON_GIT, tree, table["commit"])
    pin = Pin("aotriton", f"file://{AOTRITON_GIT}", table["ref"], table["commit"], "real", {})
    ensure_checkout(pin, tree, Runner(out=io.StringIO()), submodules=())
    return tree


def configure(argv: list[str], sets: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, **sets}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)


def fill_placeholders(argv: list[str], sets: dict[str, str], hip: Path) -> list[str]:
    tools = {"cmake": shutil.which("cmake"), "ninja": shutil.which("ninja")}
    assert all(tools.values()), tools
    filled = [tools["cmake"]]
    for arg in argv[1:]:
        arg = arg.replace("$(rocm-sdk path --cmake)", str(hip / "lib" / "cmake"))
        if arg.startswith("-DCMAKE_MAKE_PROGRAM="):
            arg = f"-DCMAKE_MAKE_PROGRAM={tools['ninja']}"
        filled.append(arg)
    sets["ROCM_PATH"] = str(hip)
    return filled


def test_the_real_configure_passes_with_the_sessions_argv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    sets, argv = planned_configure(work, capsys)
    assert "-DAOTRITON_NO_PYTHON=ON" in argv and "-DAOTRITON_NOIMAGE_MODE=OFF" in argv
    tree = real_tree(work)
    hip = tmp_path / "hip"
    (hip / "lib" / "cmake" / "hip").mkdir(parents=True)
    (hip / "lib" / "cmake" / "hip" / "hip-config.cmake").write_text(HIP_CONFIG)
    build = Path(argv[argv.index("-B") + 1])
    # the aiter step of the session (its pin pointed at a local stand-in), then the configure
    tag = (tree / "third_party" / "aiter.txt").read_text().strip()
    upstream = tmp_path / "aiter-upstream"
    commit = st.make_repo(upstream, {"README": "stand-in for github.com/ROCm/aiter\n"})
    aiter = {"url": f"file://{upstream}", "ref": tag, "commit": commit, "depth": 1}
    pin = Pin(
        "aotriton", "real", "0.13b", st.git(tree, "rev-parse", "HEAD"), "real", {"aiter": aiter}
    )
    ba.place_aiter(pin, tree, build, work / "src" / "aiter", Runner(out=io.StringIO()), False)
    result = configure(fill_placeholders(argv, sets, hip), sets, tree)
    text = result.stdout + result.stderr
    print("\n".join(text.splitlines()[-12:]))  # the closing lines, for the record
    assert result.returncode == 0, text[-4000:]
    assert f"[AOTriton] Use SHA1 {st.git(tree, 'rev-parse', 'HEAD')}." in text
    assert "EFFECTIVE_TARGET_GPUS gfx1151_mod0" in text
    assert "Bare.compile 19187 rules read" in text  # docs/kernel-check.md's count
    assert "[rocm-fa-workflow] custom commands run through: " in text  # our launcher include
    assert "No module named 'pybind11'" not in text  # NO_PYTHON=ON: no binding requirement
    assert (build / "build.ninja").is_file()


def test_the_binding_without_pybind11_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-DAOTRITON_NO_PYTHON=OFF with a python that has no pybind11: the real configure stops
    at its pybind11 lookup (CMakeLists.txt lines 131-143); our session refuses it first."""
    work = tmp_path / "work"
    sets, argv = planned_configure(work, capsys)
    tree = real_tree(work)
    hip = tmp_path / "hip"
    (hip / "lib" / "cmake" / "hip").mkdir(parents=True)
    (hip / "lib" / "cmake" / "hip" / "hip-config.cmake").write_text(HIP_CONFIG)
    venv = tmp_path / "no-pybind11"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    argv = [a.replace("-DAOTRITON_NO_PYTHON=ON", "-DAOTRITON_NO_PYTHON=OFF") for a in argv]
    argv.append(f"-DPython3_EXECUTABLE={venv / 'bin' / 'python'}")
    result = configure(fill_placeholders(argv, sets, hip), sets, tree)
    text = result.stdout + result.stderr
    print("\n".join(line for line in text.splitlines() if "pybind11" in line))
    assert result.returncode != 0
    assert "ModuleNotFoundError: No module named 'pybind11'" in text
    assert 'Could not find a package configuration file provided by "pybind11"' in text
    plan = ["--dry-run", "--with-pyaotriton", "--arch", "gfx1151", "--workdir", str(work)]
    plan += ["--prefix", str(tmp_path / "no-env-yet")]
    with pytest.raises(UserError, match="needs pybind11") as error:
        ba.build_aotriton(options.parse("build_aotriton", plan))
    print(error.value)
