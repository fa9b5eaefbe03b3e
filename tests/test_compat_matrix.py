"""`nox -s matrix` data and the combination check builds run before their first command."""

from __future__ import annotations

import json

import pytest

from rocmfa.env import archs
from rocmfa.plumbing.errors import UserError


def test_arches_toml_gating_agrees_with_util_cc_lists() -> None:
    """arches.toml's experimental ranges must say what AOTriton's util.cc says at each tag."""
    data = archs.load_matrix()
    for release in data["releases"]:
        for arch in archs.load_arches().values():
            version = release["version"]
            if arch.aotriton_supported(version):
                listed = arch.name in release["experimental"]
                assert arch.needs_experimental_flag(version) == listed, (arch.name, version)


def test_table_rows_match_upstream_facts() -> None:
    report = archs.matrix_table()
    rows = {row["arch"]: row["cells"] for row in report["arches"]}
    assert set(rows) == {a for a, x in archs.load_arches().items() if x.vendor == "amd"}
    state = {a: {v: c["state"] for v, c in cells.items()} for a, cells in rows.items()}
    assert state["gfx1151"]["0.11.2b"] == "experimental" and state["gfx1151"]["0.12b"] == "default"
    assert state["gfx1100"]["0.11b"] == "experimental" and state["gfx1100"]["0.11.1b"] == "default"
    for arch in ("gfx1200", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1152", "gfx1153"):
        assert state[arch]["0.13b"] == "experimental", arch
    for arch in ("gfx90a", "gfx942", "gfx950", "gfx1201"):
        assert set(state[arch].values()) == {"default"}, arch
    # gfx908: none upstream; 0.13b with our patch set (patches/aotriton/6e00ef3e.../)
    assert state["gfx908"].pop("0.13b") == "patched" and set(state["gfx908"].values()) == {"none"}
    assert rows["gfx908"]["0.13b"]["pack"] == "amd-gfx908"
    (retired,) = next(r for r in report["arches"] if r["arch"] == "gfx908")["retired"]
    assert retired["name"] == "gfx908-community" and "0.10b" in retired["why"]
    assert rows["gfx1151"]["0.13b"]["pack"] == "amd-gfx115x"
    assert rows["gfx1151"]["0.11b"]["pack"] == "amd-gfx11xx"
    assert {t["torch"]: t["aotriton"] for t in report["torch"]}["2.13"] == "0.13b"
    assert all(r["source"] and len(r["commit"]) == 40 for r in report["releases"])
    text = archs.render_markdown(report)
    assert "| gfx908 (Instinct MI100) | - | - | - | - | - | - | patched amd-gfx908 |" in text
    assert "- gfx908: gfx908-community is retired: the community port" in text
    assert "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1" in text
    json.dumps(report)


def test_patched_arches_have_a_patch_set_that_adds_them() -> None:
    """arches.toml aotriton_patched names a release: patches/aotriton/<its commit>/ exists and
    adds the arch to the tables the generator and the runtime read."""
    from rocmfa.sources import checkouts

    commits = {r["version"]: r["commit"] for r in archs.load_matrix()["releases"]}
    patched = [(a, r) for a in archs.load_arches().values() for r, _pack in a.aotriton_patched]
    assert ("gfx908", "0.13b") in [(a.name, r) for a, r in patched]
    for arch, release in patched:
        found = checkouts.patch_set_for("aotriton", commits[release])
        assert found is not None, (arch.name, release)
        text = "".join(p.path.read_text() for p in found.patches)
        for table in ("python/gpu_targets.py", "v3src/util.cc", "include/aotriton/util.h"):
            assert f"+++ b/{table}" in text, table
        assert f"'{arch.name}_mod0'" in text and f'"{arch.name}"' in text


def test_known_bad_combinations_are_one_line_and_force_warns() -> None:
    table = archs.load_arches()
    with pytest.raises(UserError) as error:
        archs.check_combination(table["gfx1151"], "0.13b", torch_version="2.11.0+rocm7.1")
    assert str(error.value).startswith("torch 2.11 x AOTriton 0.13b: torch 2.11 expects AOTriton")
    assert "\n" not in str(error.value) and "--force" in str(error.value)
    with pytest.raises(UserError, match=r"gfx1152 x AOTriton 0\.11b: no AOTriton support"):
        archs.check_combination(table["gfx1152"], "0.11b")
    with pytest.raises(UserError, match=r"gfx908 x AOTriton 0\.12b: no AOTriton support"):
        archs.check_combination(table["gfx908"], "0.12b")
    (patched,) = archs.check_combination(table["gfx908"], "0.13b", torch_version="2.13")
    assert "patch set (patches/aotriton/)" in patched and "amd-gfx908" in patched
    forced = archs.check_combination(table["gfx1151"], "0.13b", torch_version="2.11.0", force=True)
    assert forced[0].startswith("WARNING (--force): torch 2.11")
    notes = archs.check_combination(table["gfx1150"], "0.13b", torch_version="2.13.0")
    assert notes and "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1" in notes[0]
    assert archs.check_combination(table["gfx942"], "0.13.1b", torch_version="2.14") == []
