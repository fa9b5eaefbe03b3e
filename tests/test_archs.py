"""Arch data, and detection through rocm-bootstrap from KFD sysfs trees laid out like the real one.

rocm-bootstrap keeps all its I/O in rocm_bootstrap._platform so tests can fake sysfs; these tests
point its KFD_TOPOLOGY at a real directory tree (our fixtures) and set its variables with
monkeypatch, so its real parsing runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rocm_bootstrap import _platform

from rocmfa.env import archs
from rocmfa.plumbing import options
from rocmfa.plumbing.errors import UserError


@pytest.fixture(autouse=True)
def _clean_bootstrap_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        archs.BOOTSTRAP_FORCE_ENV,
        archs.BOOTSTRAP_DISABLE_ENV,
        "HSA_OVERRIDE_GFX_VERSION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_platform, "KFD_TOPOLOGY", tmp_path / "no-kfd")
    monkeypatch.setattr(_platform, "run_clinfo", lambda: "")  # Windows fallback: no clinfo here


CPU_NODE = "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\nvendor_id 4098\n"


def kfd_tree(root: Path, *targets: int) -> Path:
    """nodes/0 is a CPU; nodes/1.. are GPUs with the given gfx_target_version."""
    nodes = root / "nodes"
    (nodes / "0").mkdir(parents=True)
    (nodes / "0" / "properties").write_text(CPU_NODE)
    for i, target in enumerate(targets, start=1):
        (nodes / str(i)).mkdir()
        (nodes / str(i) / "properties").write_text(
            f"cpu_cores_count 0\nsimd_count 80\ngfx_target_version {target}\n"
            f"drm_render_minor {127 + i}\nvendor_id 4098\n"
        )
    _platform.KFD_TOPOLOGY = nodes  # undone by the autouse fixture's monkeypatch
    return nodes


@pytest.mark.parametrize(
    ("target", "arch"),
    [(110501, "gfx1151"), (110000, "gfx1100"), (90008, "gfx908"), (90402, "gfx942"),
     (90010, "gfx90a"), (120001, "gfx1201")],
)  # fmt: skip
def test_detects_single_gpu(tmp_path: Path, target: int, arch: str) -> None:
    kfd_tree(tmp_path, target)
    choice = archs.resolve_arch(None)
    assert choice.arch.name == arch
    assert "KFD sysfs" in choice.how


def test_multi_gpu_uses_first_in_node_order_and_says_so(tmp_path: Path) -> None:
    nodes = kfd_tree(tmp_path, 110000, 110501)
    # Node 10 must sort after node 2 (numeric, not lexical order).
    (nodes / "10").mkdir()
    (nodes / "10" / "properties").write_text("simd_count 304\ngfx_target_version 90402\n")
    detection = archs.detect_gpus()
    assert detection.gpus == ("gfx1100", "gfx1151", "gfx942")
    choice = archs.resolve_arch(None)
    assert choice.arch.name == "gfx1100"
    assert "several GPU archs" in choice.how


def test_cpu_only_machine_needs_explicit_arch(tmp_path: Path) -> None:
    kfd_tree(tmp_path)
    with pytest.raises(UserError, match=r"no AMD GPU detected.*--arch"):
        archs.resolve_arch(None)
    assert archs.resolve_arch("gfx1151").how == "--arch"


def test_no_kfd_at_all() -> None:
    detection = archs.detect_gpus()
    assert detection.gpus == () and "no AMD GPU found" in detection.source


def test_rocm_bootstrap_force_variable_and_hierarchy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kfd_tree(tmp_path, 110000)
    monkeypatch.setenv(archs.BOOTSTRAP_FORCE_ENV, "gfx1151")
    choice = archs.resolve_arch(None)
    assert choice.arch.name == "gfx1151" and "ROCM_BOOTSTRAP_FORCE_GFX_ARCH" in choice.how
    assert archs.packaging_chain(choice.arch.name) == ("gfx1151", "gfx115x", "gfx11")
    # ours ($ROCMFA_ARCH, resolved with the settings) wins over rocm-bootstrap's
    monkeypatch.setenv("ROCMFA_ARCH", "gfx942")
    choice = archs.resolve_arch(options.parse("build_ck", []).arch)
    assert choice.arch.name == "gfx942" and choice.how == "$ROCMFA_ARCH"
    monkeypatch.delenv("ROCMFA_ARCH")
    monkeypatch.setenv(archs.BOOTSTRAP_FORCE_ENV, "gfx9999")
    with pytest.raises(UserError, match=r"^GPU detection failed \(\$ROCM_BOOTSTRAP_FORCE"):
        archs.detect_gpus()
    monkeypatch.delenv(archs.BOOTSTRAP_FORCE_ENV)
    monkeypatch.setenv(archs.BOOTSTRAP_DISABLE_ENV, "1")
    assert "disabled" in archs.detect_gpus().source


def test_unknown_gfx_target_version_is_one_line(tmp_path: Path) -> None:
    kfd_tree(tmp_path, 130007)
    with pytest.raises(UserError, match=r"GPU detection failed \(KFD sysfs\).*130007"):
        archs.resolve_arch(None)


def test_device_extras_come_from_rocm_bootstrap() -> None:
    table = archs.load_arches()
    assert table["gfx1151"].device_extra == "device-gfx1151"
    assert table["gfx90a"].device_extra == "device-gfx90a"
    assert table["sm_90"].device_extra is None
    assert archs.packaging_chain("gfx908") == ("gfx908", "gfx9_0", "gfx9")


def test_arch_override_order(tmp_path: Path) -> None:
    kfd_tree(tmp_path, 110501)
    from_env = options.FromEnv("gfx942", "ROCMFA_ARCH")
    assert archs.resolve_arch(from_env).arch.name == "gfx942"
    assert archs.resolve_arch("gfx1100").arch.name == "gfx1100"
    # gcnArchName carries feature suffixes
    assert archs.get_arch("gfx90a:sramecc+:xnack-").name == "gfx90a"


def test_unknown_arch_lists_known_ones() -> None:
    with pytest.raises(UserError) as error:
        archs.get_arch("gfx9999")
    message = str(error.value)
    assert "unknown GPU arch 'gfx9999'" in message
    assert "gfx1151" in message and "gfx908" in message and "\n" not in message


def test_hsa_override_is_detected_and_explained(tmp_path: Path, monkeypatch) -> None:
    kfd_tree(tmp_path, 110501)
    assert archs.detect_gpus().override is None
    for value, said in [
        ("11.0.0", "report gfx1100 although the GPU is gfx1151"),
        ("11.5", "invalid"),
        ("11.5.1", "matches"),
    ]:
        monkeypatch.setenv("HSA_OVERRIDE_GFX_VERSION", value)
        detection = archs.detect_gpus()
        assert detection.gpus == ("gfx1151",)  # sysfs still shows the real arch
        assert said in detection.override


def test_capabilities_match_upstream_facts() -> None:
    table = archs.load_arches()
    mi100 = table["gfx908"]
    assert not mi100.aotriton_supported() and mi100.aotriton_pack("0.13b") is None
    # our patch set adds it to the 0.13 line only (0.13.1b too; not 0.12b)
    assert mi100.aotriton_patched_pack("0.13b") == "gfx908"
    assert mi100.aotriton_patched_pack("0.13.1b") == "gfx908"
    assert mi100.aotriton_patched_pack("0.12b") is None
    assert table["gfx90a"].aotriton_patched_pack("0.13b") is None  # upstream: no patch needed
    strix = table["gfx1151"]
    assert strix.aotriton_pack("0.11b") == "gfx11xx"
    assert strix.aotriton_pack("0.12.1b") == "gfx115x"
    assert strix.needs_experimental_flag("0.11.2b")
    assert not strix.needs_experimental_flag("0.12b")
    navi31 = table["gfx1100"]
    assert navi31.needs_experimental_flag("0.11b")
    assert not navi31.needs_experimental_flag("0.11.1b")
    assert not navi31.needs_experimental_flag("0.10b")
    assert table["gfx942"].ck_mha and not strix.ck_mha
    assert table["gfx942"].vllm_aiter and not strix.vllm_aiter and not table["gfx90a"].vllm_aiter
    assert table["gfx1201"].vllm_aiter  # RDNA4 path


def test_malformed_arch_data_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "arches.toml"
    broken.write_text("[arch.gfx1151\nname = 1\n")
    with pytest.raises(UserError, match="malformed arch data"):
        archs.load_arches(broken)
    broken.write_text('[arch.gfx1151]\nname = "x"\naotriton_packs = []\n')
    with pytest.raises(UserError, match="missing key 'ck_mha'"):
        archs.load_arches(broken)
    broken.write_text(
        '[arch.gfx1151]\nname = "x"\naotriton_packs = []\naotriton_experimental = []\n'
        'ck_mha = "no"\nvllm_aiter = false\nvllm_note = ""\n'
    )
    with pytest.raises(UserError, match="'ck_mha' must be bool"):
        archs.load_arches(broken)


def test_the_probes_read_the_same_arch_rules() -> None:
    """scripts/rocmfa/probes/sdpa_common.py (torch + stdlib, no rocmfa.env) reads arches.toml
    itself:
    for every arch it gives the same experimental-flag verdicts and version order."""
    from rocmfa.probes import sdpa_common

    assert sdpa_common.ARCHES_FILE.resolve() == archs.ARCHES_FILE.resolve()
    tables = sdpa_common.load_arches()
    typed = archs.load_arches()
    assert set(tables) == set(typed)
    versions = {"0.9b", "0.10b", "0.11b", "0.11.2b", "0.12b", "0.13b", "0.14b", "1.0b"}
    for arch in typed.values():
        versions |= {since for since, _ in arch.aotriton_experimental}
        versions |= {until for _, until in arch.aotriton_experimental if until}
    for name, arch in typed.items():
        table = tables[name]
        for version in sorted(versions):
            assert sdpa_common.version_key(version) == archs.aotriton_version_key(version)
            probe = sdpa_common.needs_experimental_flag(table, version)
            assert probe == arch.needs_experimental_flag(version), (name, version)
        limit = sdpa_common.head_dim_limit(table)
        assert limit is None or limit[1] in arch.limits, name
