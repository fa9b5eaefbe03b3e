"""Which path build_aotriton takes per arch (build_aotriton.choose_path, no options) on the
repository's own pins, patches and measured costs: the pinned release pack where nothing of ours
changes an arch's kernels, a source build where something does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocmfa.builds import build_aotriton as ba
from rocmfa.env import archs
from rocmfa.plumbing import options
from rocmfa.plumbing.options import PINS_DIR, REPO_ROOT
from rocmfa.sources import checkouts
from tests.support import aotriton_standins as st

COMMIT = "6e00ef3e335b45dfb49065259533b59c68995bfe"
GFX908_SET = ("0001-gfx908-arch-tables.patch", "0002-gfx908-reuse-gfx90a-tuning.patch")


@pytest.fixture(autouse=True)
def _own_data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("ROCMFA_PINS_DIR", "ROCMFA_PATCHES_DIR", "PYTORCH_AOTRITON_COMMIT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ROCMFA_TUNING_DIR", str(tmp_path / "no-tuning"))


def aotriton_path(arch: str) -> ba.AotritonPath:  # the pinned ROCm: no env
    return ba.choose_path(archs.get_arch(arch), options.workdir(None), Path("/nonexistent"))


COVERED = [
    ("gfx1151", "gfx115x"),
    ("gfx1100", "gfx110x"),
    ("gfx942", "gfx942"),
    ("gfx950", "gfx950"),
]


@pytest.mark.parametrize(("arch", "pack"), COVERED)
def test_archs_the_release_covers_take_the_pinned_pack(arch: str, pack: str) -> None:
    path = aotriton_path(arch)
    assert not path.source and path.pack == f"amd-{pack}" and path.patches == ()
    assert path.why == (
        f"nothing of ours changes {arch}'s kernels (no patch for it, no tuning database), and "
        f"the pinned 0.13b release ships amd-{pack} built from this commit (--from-source builds "
        "it anyway)"
    )
    assert path.cost == (
        "2 downloads, sha256-checked and cached: the runtime for ROCm 7.15 and the "
        f"amd-{pack} image pack (sizes as the server reports them when each starts); no kernel "
        "compiles"
    )


def test_gfx908_takes_the_source_build_with_its_patch_set_and_measured_cost() -> None:
    path = aotriton_path("gfx908")
    assert path.source and path.patches == GFX908_SET
    assert path.why.startswith("upstream 0.13b has no gfx908 kernels and no release has its")
    assert path.cost.startswith("17,545 kernel compile jobs x 1.8 s a job (docs/results/")
    assert "CPU-hours" in path.cost and "Triton fork (its own LLVM download)" in path.cost
    with_pypi = ba.source_cost(COMMIT, "gfx908", 2, fork=False)
    assert "Triton fork" not in with_pypi and with_pypi.endswith("plus the C++ runtime")


def test_the_gfx908_set_is_for_gfx908_only() -> None:
    for_1151 = checkouts.patch_set_for("aotriton", COMMIT, arch="gfx1151")
    assert for_1151 is not None and for_1151.patches == ()
    assert tuple(p.name for p in for_1151.other_arches) == GFX908_SET
    assert tuple(
        p.name for p in checkouts.patch_set_for("aotriton", COMMIT, arch="gfx908").patches
    ) == (GFX908_SET)


def test_a_patch_for_the_arch_makes_it_a_source_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real gfx908 patches re-declared for gfx1151 (their sums unchanged): gfx1151 then
    builds from source with them, and the cost line says what is measured for it."""
    real = REPO_ROOT / "patches" / "aotriton" / COMMIT
    mine = tmp_path / "patches" / "aotriton" / COMMIT
    shutil.copytree(real, mine)
    for tuning_only in set(p.name for p in mine.glob("*.patch")) - set(GFX908_SET):
        (mine / tuning_only).unlink()
    st.write_manifest(mine, arches=[["gfx1151"], ["gfx1151"]])
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(tmp_path / "patches"))
    path = aotriton_path("gfx1151")
    assert path.source and path.patches == GFX908_SET
    assert path.why == f"our patch set changes gfx1151's build ({', '.join(GFX908_SET)})"
    assert path.cost.startswith("19,187 kernel compile jobs x 2.2 s a job")
    assert not aotriton_path("gfx942").source  # the patches are for gfx1151 only
    assert ba.source_cost(COMMIT, "gfx942", 16).startswith(
        "kernel job count for gfx942 not measured at 6e00ef3e335b (gfx1151: 19,187 jobs x 2.2 s"
    )


def test_a_pin_off_the_release_commit_builds_from_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pins = tmp_path / "pins"
    shutil.copytree(PINS_DIR, pins)
    text = (pins / "aotriton.toml").read_text().replace(COMMIT, "1" * 40)
    (pins / "aotriton.toml").write_text(text)
    st.write_pytorch_pin(pins, aotriton_commit="1" * 40, aotriton_version="0.13b")
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins))
    path = aotriton_path("gfx1151")
    assert path.source
    assert path.why == (
        "the pin 111111111111 is not the commit the 0.13b release packs were built from "
        "(6e00ef3e335b)"
    )
