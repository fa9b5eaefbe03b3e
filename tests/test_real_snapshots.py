"""Opt-in replays against real upstream git snapshots (outside the repository): our patch
engine, our checkout with the pinned submodule paths and the CMake option names we pass, run on
the real trees. Without the variables the tests skip, saying so.

    ROCMFA_AOTRITON_REAL_GIT  a git dir of ROCm/aotriton holding pins/aotriton.toml's commit
    ROCMFA_AITER_REAL_GIT     a git dir of ROCm/aiter (optional: the pinned aiter tag's commit)
    ROCMFA_PORT_REAL_GIT      a git dir of Jack31098/aotriton_gfx908 holding 60639c72 (the
                              retired 0.10b port: its submodule layout, which the resume tests
                              of tests/test_checkouts.py replay)

(e.g. `fetch` snapshots: /work/.mirror/<owner>+<name>/repo). Offline, a submodule fetch from
GitHub cannot succeed: GIT_ALLOW_PROTOCOL=file makes it fail at once, and the tests assert that
the checkout stopped there and exactly which submodule paths it had initialised (registered).
Such snapshots may lack their largest blobs (the port's gfx908_4_0.11.json; objects of
aotriton's history), so `git fetch` from them fails; the checkout directory therefore borrows
the snapshot's objects (objects/info/alternates, the commit is then present and our checkout
code skips its fetch) and leaves the absent paths out (sparse checkout).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
from pathlib import Path

import pytest

from rocmfa.builds import build_aotriton as ba
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError, load_toml
from rocmfa.plumbing.options import PINS_DIR
from rocmfa.sources import checkouts, update_pins
from rocmfa.sources.checkouts import ensure_checkout
from rocmfa.sources.pins import Pin
from tests.support import aotriton_port_standin as port
from tests.support import aotriton_standins as st
from tests.support.real_trees import borrow_snapshot

REPO_ROOT = Path(__file__).resolve().parent.parent
AOTRITON_GIT = os.environ.get("ROCMFA_AOTRITON_REAL_GIT")
PORT_GIT = os.environ.get("ROCMFA_PORT_REAL_GIT")
needs_aotriton = pytest.mark.skipif(
    not AOTRITON_GIT, reason="set ROCMFA_AOTRITON_REAL_GIT to a ROCm/aotriton git snapshot"
)
needs_port = pytest.mark.skipif(
    not PORT_GIT, reason="set ROCMFA_PORT_REAL_GIT to a Jack31098/aotriton_gfx908 git snapshot"
)
OPTION = re.compile(r"-D(AOTRITON_[A-Z0-9_]+|CCACHE_FOUND)=")


def upstream_pin() -> dict:
    return load_toml(PINS_DIR / "aotriton.toml", "pin")["aotriton"]


# The retired gfx908 port (docs/aotriton.md): main @ 2025-09-02, its three mapped submodules.
PORT = {
    "ref": "main",
    "commit": "60639c72e9fabf7ab34469e7876eb633623c5f0f",
    "submodules": list(port.PORT_SUBMODULES),
}


def real_pin(git_dir: str, table: dict) -> Pin:
    return Pin("aotriton", f"file://{git_dir}", table["ref"], table["commit"], "real", {})


def quiet() -> Runner:
    return Runner(out=io.StringIO())


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_ALLOW_PROTOCOL", "file")  # https submodule fetches fail at once


def registered(checkout: Path) -> list[str]:
    """Submodule paths `git submodule update --init` registered in .git/config."""
    result = subprocess.run(
        ["git", "config", "--get-regexp", r"^submodule\..*\.url$"],
        cwd=checkout,
        capture_output=True,
        text=True,
    )
    return sorted(
        line.split()[0][len("submodule.") : -len(".url")] for line in result.stdout.splitlines()
    )


def options_we_pass() -> set[str]:
    text = "".join(
        (REPO_ROOT / "scripts" / "rocmfa" / name).read_text()
        for name in ("builds/build_aotriton.py", "builds/tune_aotriton.py", "sources/checkouts.py")
    )
    return set(OPTION.findall(text))


def cmake_defines(git_dir: str, commit: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{commit}:CMakeLists.txt"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def defined(name: str, cmakelists: str) -> bool:
    return bool(
        re.search(rf"option\(\s*{name}\b", cmakelists)
        or re.search(rf"set\(\s*{name}\b[^)]*CACHE", cmakelists)
        or re.search(rf"find_program\(\s*{name}\b", cmakelists)
    )


# --- ROCm/aotriton at the pin ---------------------------------------------------------------


@needs_aotriton
def test_real_aotriton_submodules_are_the_pinned_paths() -> None:
    table = upstream_pin()
    mapped, unmapped = update_pins.read_tree_submodules(
        quiet(), Path(AOTRITON_GIT), table["commit"]
    )
    assert mapped == tuple(table["submodules"]) == ("third_party/triton",)
    assert unmapped == ()
    # the aiter tag its configure clones is the one pinned, and (with a ROCm/aiter snapshot) the
    # pinned commit is that tag's
    git = ["git", "--git-dir", AOTRITON_GIT, "show", f"{table['commit']}:third_party/aiter.txt"]
    tag = subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()
    assert tag == table["aiter"]["ref"]
    if aiter_git := os.environ.get("ROCMFA_AITER_REAL_GIT"):
        git = ["git", "--git-dir", aiter_git, "rev-parse", f"{tag}^{{commit}}"]
        peeled = subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()
        assert peeled == table["aiter"]["commit"]


@needs_aotriton
@pytest.mark.skipif(not os.environ.get("ROCMFA_AITER_REAL_GIT"), reason="no ROCm/aiter snapshot")
def test_real_aiter_clone_step_takes_our_pinned_checkout(tmp_path: Path) -> None:
    """The real clone step (v3src/CMakeLists.txt 89-131 at the pin, run by cmake with git
    allowed no transport) finds the session's aiter step's checkout and clones nothing."""
    table, aiter_git = upstream_pin(), os.environ["ROCMFA_AITER_REAL_GIT"]
    src = tmp_path / "src"
    for path in ("third_party/aiter.txt", "v3src/CMakeLists.txt"):
        shown = st.git(tmp_path, "--git-dir", AOTRITON_GIT, "show", f"{table['commit']}:{path}")
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_text(shown + "\n")
    step = "\n".join((src / "v3src" / "CMakeLists.txt").read_text().splitlines()[88:131])
    (src / "v3src" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(aiter_step NONE)\n"
        "cmake_path(GET CMAKE_CURRENT_SOURCE_DIR PARENT_PATH CMAKE_CURRENT_SOURCE_PARENT_DIR)\n"
        f'set(AOTRITON_V2_BUILD_DIR "${{CMAKE_CURRENT_BINARY_DIR}}")\n{step}\n'
    )
    pin = Pin("aotriton", "real", "0.13b", table["commit"], "real", dict(table))
    pin.data["aiter"] = {**table["aiter"], "url": f"file://{aiter_git}"}
    ba.place_aiter(pin, src, tmp_path / "build", tmp_path / "aiter", quiet(), False)
    argv = ["cmake", "-S", src / "v3src", "-B", tmp_path / "build" / "v3src"]
    env = {**os.environ, "GIT_ALLOW_PROTOCOL": "none"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert st.git(tmp_path / "aiter", "rev-parse", "HEAD") == table["aiter"]["commit"]


@needs_aotriton
def test_real_aotriton_checkout_initialises_exactly_the_pinned_paths(
    tmp_path: Path, offline
) -> None:
    table = upstream_pin()
    dest = tmp_path / "aotriton"
    borrow_snapshot(AOTRITON_GIT, dest, table["commit"])
    with pytest.raises(UserError, match=r"submodule update failed in .* for third_party/triton"):
        ensure_checkout(
            real_pin(AOTRITON_GIT, table), dest, quiet(), submodules=table["submodules"]
        )
    assert st.git(dest, "rev-parse", "HEAD") == table["commit"]
    assert registered(dest) == ["third_party/triton"]


@needs_aotriton
def test_real_aotriton_defines_every_option_we_pass() -> None:
    text = cmake_defines(AOTRITON_GIT, upstream_pin()["commit"])
    missing = {name for name in options_we_pass() if not defined(name, text)}
    assert "AOTRITON_TARGET_ARCH" in options_we_pass()
    assert missing == set(), missing


@needs_aotriton
def test_real_aotriton_patch_engine_all_or_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = upstream_pin()
    root = tmp_path / "patches"
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(root))
    borrow_snapshot(AOTRITON_GIT, tmp_path / "co", table["commit"])
    dest = ensure_checkout(real_pin(AOTRITON_GIT, table), tmp_path / "co", quiet())
    readme = (dest / "README.md").read_text()
    st.make_patch_set(
        root, "aotriton", table["commit"], dest, [{"README.md": readme + "\nrocmfa test\n"}]
    )
    checkouts.apply_patch_set("aotriton", table["commit"], dest, quiet())
    patched = st.git(dest, "rev-parse", "HEAD")
    assert patched != table["commit"] and (dest / "README.md").read_text().endswith("rocmfa test\n")
    # a second patch that conflicts: the tree goes back to the patched state it was in
    set_dir = root / "aotriton" / table["commit"]
    st.make_patch_set(root, "aotriton-x", table["commit"], dest, [{"CMakeLists.txt": "x\n"}])
    bad = next((root / "aotriton-x" / table["commit"]).glob("*.patch"))
    text = bad.read_text().replace("cmake_minimum_required", "cmake_maximum_required", 1)
    (set_dir / "0002-conflict.patch").write_text(text)
    st.write_manifest(set_dir)
    with pytest.raises(UserError, match=r"0002-conflict\.patch does not apply"):
        checkouts.apply_patch_set("aotriton", table["commit"], dest, quiet())
    assert st.git(dest, "rev-parse", "HEAD") == patched
    assert st.git(dest, "status", "--porcelain", "--untracked-files=no") == ""


# --- the retired gfx908 port ------------------------------------------------------------------


@needs_port
def test_real_port_submodules_and_the_unmapped_aiter_gitlink(tmp_path: Path, offline) -> None:
    table = PORT
    mapped, unmapped = update_pins.read_tree_submodules(quiet(), Path(PORT_GIT), table["commit"])
    assert mapped == tuple(table["submodules"])
    assert unmapped == ("third_party/aiter",)
    # what `submodules = true` ran: it stops at aiter and initialises nothing
    assert borrow_snapshot(PORT_GIT, tmp_path / "plain", table["commit"]) == ["gfx908_4_0.11.json"]
    plain = ensure_checkout(real_pin(PORT_GIT, table), tmp_path / "plain", quiet())
    port.assert_recursive_init_stops_at_aiter(plain)
    assert registered(plain) == []


THEROCK_GIT = os.environ.get("ROCMFA_THEROCK_REAL_GIT")


@pytest.mark.skipif(
    not THEROCK_GIT, reason="set ROCMFA_THEROCK_REAL_GIT to a ROCm/TheRock git snapshot"
)
def test_arch_families_agree_with_therock_at_the_pin() -> None:
    """arches.toml's legacy_family is one of the v2/<family>/ indexes TheRock's
    docs/packaging/legacy_per_family_releases.md lists at pins/therock.toml's commit, and the
    arch is in that family in cmake/therock_amdgpu_targets.cmake; an arch without one names its
    own cmake family (therock_family)."""
    from rocmfa.env import archs

    commit = load_toml(PINS_DIR / "therock.toml", "pin")["therock"]["commit"]

    def show(path: str) -> str:
        return subprocess.run(["git", "--git-dir", THEROCK_GIT, "show", f"{commit}:{path}"],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip

    listed = set(re.findall(r"/v2/([A-Za-z0-9-]+)/", show(
        "docs/packaging/legacy_per_family_releases.md")))  # fmt: skip
    families: dict[str, set[str]] = {}
    for target, names in re.findall(
        r'therock_add_amdgpu_target\((gfx\w+) "[^"]*" FAMILY ([^\n)]+)',
        show("cmake/therock_amdgpu_targets.cmake"),
    ):
        families[target] = set(names.split())
    assert "gfx90X-dcgpu" not in listed
    for name, arch in archs.load_arches().items():
        if arch.vendor != "amd":
            continue
        if arch.legacy_family:
            assert arch.legacy_family in listed, name
            assert arch.legacy_family in families[name] | {name}, name
        else:
            assert arch.therock_family in families[name], name
