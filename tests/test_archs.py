"""Arch data and detection from KFD sysfs trees laid out like the real one."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.env import archs
from scripts.plumbing.errors import UserError

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
    return nodes


@pytest.mark.parametrize(
    ("target", "arch"),
    [(110501, "gfx1151"), (110000, "gfx1100"), (90008, "gfx908"), (90402, "gfx942"),
     (90010, "gfx90a"), (120001, "gfx1201")],
)  # fmt: skip
def test_detects_single_gpu(tmp_path: Path, target: int, arch: str) -> None:
    choice = archs.resolve_arch(None, nodes_dir=kfd_tree(tmp_path, target), environ={})
    assert choice.arch.name == arch
    assert "KFD sysfs" in choice.how


def test_multi_gpu_uses_first_in_node_order_and_says_so(tmp_path: Path) -> None:
    nodes = kfd_tree(tmp_path, 110000, 110501)
    # Node 10 must sort after node 2 (numeric, not lexical order).
    (nodes / "10").mkdir()
    (nodes / "10" / "properties").write_text("gfx_target_version 90402\n")
    detection = archs.detect_gpus(nodes, {})
    assert detection.gpus == ("gfx1100", "gfx1151", "gfx942")
    choice = archs.resolve_arch(None, nodes_dir=nodes, environ={})
    assert choice.arch.name == "gfx1100"
    assert "several GPU archs" in choice.how


def test_cpu_only_machine_needs_explicit_arch(tmp_path: Path) -> None:
    nodes = kfd_tree(tmp_path)
    with pytest.raises(UserError, match=r"no AMD GPU detected.*--arch"):
        archs.resolve_arch(None, nodes_dir=nodes, environ={})
    assert archs.resolve_arch("gfx1151", nodes_dir=nodes, environ={}).how == "--arch"


def test_no_kfd_at_all(tmp_path: Path) -> None:
    detection = archs.detect_gpus(tmp_path / "missing", {})
    assert detection.gpus == () and "no KFD sysfs" in detection.source


def test_arch_override_order(tmp_path: Path) -> None:
    nodes = kfd_tree(tmp_path, 110501)
    env = {"ROCMFA_ARCH": "gfx942"}
    assert archs.resolve_arch(None, nodes_dir=nodes, environ=env).arch.name == "gfx942"
    assert archs.resolve_arch("gfx1100", nodes_dir=nodes, environ=env).arch.name == "gfx1100"
    # gcnArchName carries feature suffixes
    assert archs.get_arch("gfx90a:sramecc+:xnack-").name == "gfx90a"


def test_unknown_arch_lists_known_ones() -> None:
    with pytest.raises(UserError) as error:
        archs.get_arch("gfx9999")
    message = str(error.value)
    assert "unknown GPU arch 'gfx9999'" in message
    assert "gfx1151" in message and "gfx908" in message and "\n" not in message


def test_hsa_override_is_detected_and_explained(tmp_path: Path) -> None:
    nodes = kfd_tree(tmp_path, 110501)
    detection = archs.detect_gpus(nodes, {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"})
    assert detection.gpus == ("gfx1151",)  # sysfs still shows the real arch
    assert detection.hsa_override_arch == "gfx1100"
    text = archs.explain_override(detection)
    assert "report gfx1100 although the GPU is gfx1151" in text
    bad = archs.detect_gpus(nodes, {"HSA_OVERRIDE_GFX_VERSION": "11.5"})
    assert "invalid" in archs.explain_override(bad)
    same = archs.detect_gpus(nodes, {"HSA_OVERRIDE_GFX_VERSION": "11.5.1"})
    assert "matches" in archs.explain_override(same)
    assert archs.explain_override(archs.detect_gpus(nodes, {})) is None


def test_capabilities_match_upstream_facts() -> None:
    table = archs.load_arches()
    mi100 = table["gfx908"]
    assert not mi100.aotriton_supported() and mi100.aotriton_pack("0.13b") is None
    assert mi100.peak_tflops == {"fp16": 184.6, "bf16": 92.3}
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
    with pytest.raises(UserError, match="missing key 'aotriton_experimental'"):
        archs.load_arches(broken)
    broken.write_text(
        '[arch.gfx1151]\nname = "x"\naotriton_packs = []\naotriton_experimental = []\n'
        'ck_mha = "no"\nvllm_aiter = false\nvllm_note = ""\n'
    )
    with pytest.raises(UserError, match="'ck_mha' must be bool"):
        archs.load_arches(broken)
