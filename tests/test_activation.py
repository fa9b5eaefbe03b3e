"""Activation scripts sourced for real by bash (also under set -u) with hostile values."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rocmfa.env import activation, archs, session_env

HOSTILE = [
    {"name": "ROCM_PATH", "value": "/opt/my rocm/$HOME/`id`/\"q\"/'s'/back\\slash", "why": "x"},
    {"name": "PYTORCH_ROCM_ARCH", "value": "gfx1151", "why": "x"},
    {"name": "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "value": "1", "why": "x"},
]
DUMP = 'python3 -c "import json,os; print(json.dumps(dict(os.environ)))"'


def run_bash(script: str, env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run(["bash", "--norc", "-c", script], env=env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("nounset", ["", "set -u;"])
def test_activate_then_deactivate_restores_exactly(tmp_path: Path, nounset: str) -> None:
    activate, deactivate = activation.write_scripts(tmp_path, HOSTILE)
    outer = {
        "PATH": "/usr/bin:/bin",
        "ROCM_PATH": "/previous value with spaces",  # set before: must come back
        "PYTORCH_ROCM_ARCH": "",  # set but empty: must come back empty, not unset
    }  # TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL unset before: must be unset after
    before = run_bash(f"{nounset} {DUMP}", outer)
    during = run_bash(f'{nounset} . "{activate}"; {DUMP}', outer)
    after = run_bash(f'{nounset} . "{activate}"; . "{deactivate}"; {DUMP}', outer)
    for var in HOSTILE:
        assert during[var["name"]] == var["value"]
    assert after == before
    assert "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL" not in after
    assert after["PYTORCH_ROCM_ARCH"] == ""


def test_double_activation_keeps_the_original_backup(tmp_path: Path) -> None:
    activate, deactivate = activation.write_scripts(tmp_path, HOSTILE)
    outer = {"PATH": "/usr/bin:/bin", "ROCM_PATH": "/orig"}
    after = run_bash(f'set -u; . "{activate}"; . "{activate}"; . "{deactivate}"; {DUMP}', outer)
    assert after["ROCM_PATH"] == "/orig"
    assert not any(k.startswith("_ROCMFA") for k in after)


def test_activated_environ_sources_activate_d_like_conda(tmp_path: Path) -> None:
    activation.write_scripts(tmp_path, HOSTILE)
    # A compiler package's activation script that (like conda-forge's) is not set -u safe
    (tmp_path / "etc/conda/activate.d/activate-gcc.sh").write_text(
        'export CC="$CONDA_PREFIX/bin/gcc${CONDA_BACKUP_CC}"\n'
    )
    (tmp_path / "conda-meta").mkdir()
    (tmp_path / "conda-meta" / "state").write_text(json.dumps({"env_vars": {"from_state": "1"}}))
    env = session_env.activated_environ(tmp_path, {"PATH": "/usr/bin:/bin", "VIRTUAL_ENV": "/v"})
    assert env["CONDA_PREFIX"] == str(tmp_path)
    assert env["PATH"].split(":")[0] == str(tmp_path / "bin")
    assert env["CC"] == f"{tmp_path}/bin/gcc"
    assert env["FROM_STATE"] == "1"
    assert env["ROCM_PATH"] == HOSTILE[0]["value"]
    assert "VIRTUAL_ENV" not in env


def test_plan_sets_only_effective_variables() -> None:
    strix = archs.get_arch("gfx1151")
    old = activation.plan(strix, rocm_root="/r", aotriton_version="0.11.2b", profiles=["vllm"])
    names = {v["name"] for v in old["set"]}
    assert names == {"ROCM_PATH", "PYTORCH_ROCM_ARCH", "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"}
    refused = {s["name"]: s["why"] for s in old["not_set"]}
    never_set = (
        "TORCH_ROCM_AOTRITON_PREFER_DEFAULT",
        "HIP_ARCH",
        "LD_LIBRARY_PATH",
        "AMD_SERIALIZE_KERNEL",
        "VLLM_USE_TRITON_FLASH_ATTN",
        "VLLM_ROCM_USE_AITER",
    )
    for never in never_set:
        assert refused.get(never)
    new = activation.plan(strix, rocm_root="/r", aotriton_version="0.12b")
    assert "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL" not in {v["name"] for v in new["set"]}
    mi300 = activation.plan(archs.get_arch("gfx942"), rocm_root="/r", aotriton_version="0.13b",
                            profiles=["vllm"])  # fmt: skip
    assert "VLLM_ROCM_USE_AITER" in {v["name"] for v in mi300["set"]}
    mi100 = activation.plan(archs.get_arch("gfx908"), rocm_root="/r", aotriton_version="0.13b",
                            profiles=["vllm"])  # fmt: skip
    reasons = {s["name"]: s["why"] for s in mi100["not_set"]}
    assert "come from our patch set" in reasons["TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"]
    old = activation.plan(archs.get_arch("gfx908"), rocm_root="/r", aotriton_version="0.12b")
    assert (
        "no kernels for gfx908"
        in {s["name"]: s["why"] for s in old["not_set"]}["TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"]
    )
    assert "gfx908" in reasons["VLLM_ROCM_USE_AITER"]


def test_device_library_path_is_persisted_where_the_sdk_has_it(tmp_path: Path) -> None:
    """HIP_DEVICE_LIB_PATH beside ROCM_PATH, as TheRock's build_prod_wheels.py @ 89553ce3 sets it
    for its builds: only where the SDK has the folder; a dry run's placeholder root shows it."""
    strix = archs.get_arch("gfx1151")
    (tmp_path / "lib" / "llvm" / "amdgcn" / "bitcode").mkdir(parents=True)
    found = activation.plan(strix, rocm_root=str(tmp_path), aotriton_version="0.13b")
    values = {v["name"]: v["value"] for v in found["set"]}
    assert values["ROCM_PATH"] == str(tmp_path)
    assert values["HIP_DEVICE_LIB_PATH"] == f"{tmp_path}/lib/llvm/amdgcn/bitcode"
    missing = activation.plan(strix, rocm_root=str(tmp_path / "x"), aotriton_version="0.13b")
    assert "HIP_DEVICE_LIB_PATH" not in {v["name"] for v in missing["set"]}
    assert (
        "amdgcn/bitcode" in {s["name"]: s["why"] for s in missing["not_set"]}["HIP_DEVICE_LIB_PATH"]
    )
    planned = activation.plan(strix, rocm_root="$(rocm-sdk path --root)", aotriton_version=None)
    assert "HIP_DEVICE_LIB_PATH" in {v["name"] for v in planned["set"]}
    assert "HIP_CLANG_PATH" in {s["name"] for s in found["not_set"]}  # TheRock: Windows only


SHELLS = [s for s in ("bash", "dash", "zsh", "ksh", "mksh") if shutil.which(s)]


@pytest.mark.parametrize("shell", SHELLS)
def test_shell_only_variable_comes_back_as_a_shell_variable(tmp_path: Path, shell: str) -> None:
    activate, deactivate = activation.write_scripts(tmp_path, HOSTILE)
    script = (
        f'ROCM_PATH="/shell only"; . "{activate}"; . "{deactivate}"; '
        'printf "%s|" "$ROCM_PATH"; sh -c \'printf "%s" "${ROCM_PATH-UNEXPORTED}"\''
    )
    out = subprocess.run([shell, "-c", script], env={"PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout == "/shell only|UNEXPORTED"


@pytest.mark.parametrize("shell", SHELLS)
def test_stacked_envs_inner_deactivate_restores_the_outer_values(
    tmp_path: Path, shell: str
) -> None:
    outer_env, inner_env = tmp_path / "outer", tmp_path / "inner"
    outer_a, outer_d = activation.write_scripts(
        outer_env, [{"name": "V", "value": "outer", "why": "x"}]
    )
    inner_a, inner_d = activation.write_scripts(
        inner_env, [{"name": "V", "value": "in ner", "why": "x"}]
    )
    script = (
        f'set -u; export V=orig; CONDA_PREFIX="{outer_env}"; . "{outer_a}"; '
        f'CONDA_PREFIX="{inner_env}"; . "{inner_a}"; printf "%s|" "$V"; '
        f'. "{inner_d}"; CONDA_PREFIX="{outer_env}"; printf "%s|" "$V"; '
        f'. "{outer_d}"; printf "%s|" "$V"; env | grep -c "^_ROCMFA" || true'
    )
    out = subprocess.run([shell, "-c", script], env={"PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "in ner|outer|orig|0"
