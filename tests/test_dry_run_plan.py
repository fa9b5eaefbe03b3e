"""A plan before any setup: on a fresh copy of the project with no conda manager, no env and no
ROCMFA_*/CONDA_*/MAMBA_* variables, every build/setup session's --dry-run prints its whole plan
with the env setup_env would create (no manager needed: py-rattler installs it into our own
data dir), runs no command, and exits 0; a real run still stops with one line."""

from __future__ import annotations

import functools
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.project import copy_project, run_nox, standin_micromamba

PLANS = {
    # session + options: a line every full plan of it prints
    ("setup_env", "gfx1151"): "rocm[libraries,devel,device-gfx1151]",
    # gfx1151: the pinned 0.13b release pack (nothing of ours changes its kernels); gfx908: a
    # source build with patches/aotriton/6e00ef3e.../ (tested below)
    ("build_aotriton", "gfx1151"): "path: release pack amd-gfx115x: nothing of ours changes",
    ("build_aotriton", "gfx908"): "-DAOTRITON_TARGET_ARCH=gfx908",
    ("build_pytorch", "gfx1151"): "--enable-pytorch-flash-attention",
    # gfx908: AOTriton 0.13b + patches/aotriton/6e00ef3e.../, torch built against it with flash
    ("build_pytorch", "gfx908"): "--enable-pytorch-flash-attention",
    ("build_ck", "gfx1151"): "-DGPU_ARCHS=gfx1151",
}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("fresh")
    project = copy_project(root / "project", with_lock=False)
    home = root / "home"  # no ~/.conda/environments.txt, no ~/micromamba
    home.mkdir()
    return project, {"PATH": "/usr/bin:/bin", "HOME": str(home)}


@pytest.fixture(scope="module")
def plan(fresh) -> Callable[[str, str], subprocess.CompletedProcess[str]]:
    """`nox -s SESSION -- --dry-run --arch ARCH` on the fresh copy, run once for the tests that
    read the same plan (a dry run writes nothing, each test asserts it)."""
    project, env = fresh

    @functools.cache
    def run(session: str, arch: str) -> subprocess.CompletedProcess[str]:
        return run_nox(project, "-s", session, "--", "--dry-run", "--arch", arch, env=env)

    return run


def env_to_be(env: dict[str, str]) -> Path:
    """Where setup_env puts the default env when there is no conda manager."""
    return Path(env["HOME"]) / ".local" / "share" / "rocm-fa-workflow" / "envs" / "therock"


@pytest.mark.parametrize(("session", "arch"), sorted(PLANS))
def test_dry_run_prints_the_whole_plan_without_any_setup(
    fresh, plan, session: str, arch: str
) -> None:
    project, env = fresh
    result = plan(session, arch)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert PLANS[session, arch] in out, out
    lines = out.splitlines()
    assert not [line for line in lines if line.startswith("$ ")], "a command ran"
    assert any(line.startswith("[dry-run] ") for line in lines)
    if session == "setup_env":
        assert f"env {env_to_be(env)} (default name" in out
        assert "no conda manager; installer py-rattler" in out
    elif "path: release pack" not in out:  # a release plan runs none of the env's tools
        assert f"{env_to_be(env)}/bin/" in out  # the env's tools, where setup_env puts them
        assert "a real run stops here: run: nox -s setup_env" in out
    assert not (project / "work").exists() and not (project / "conda-lock.yml").exists()


def test_build_aotriton_plans_the_release_pack_or_the_patched_source_build(fresh, plan) -> None:
    """gfx1151 (and every arch the 0.13b packs cover): the pinned release pack, why, and its
    cost before any step, no checkout, patch or kernel compile; gfx908: the source build with
    the gfx908 set, its measured cost printed before the checkout."""
    project, _ = fresh
    plans = {arch: plan("build_aotriton", arch) for arch in ("gfx1151", "gfx908")}
    assert all(p.returncode == 0 for p in plans.values()), plans
    release, source = plans["gfx1151"].stdout, plans["gfx908"].stdout
    assert "aotriton-0.13b-images-amd-gfx115x.tar.gz" in release
    assert "-rocm7.15-shared.tar.gz" in release and "no kernel compiles" in release
    for absent in ("gfx908", "git ", "cmake", "ninja", "compile.py", ".patch", "git am"):
        assert absent not in release, absent
    assert "path: source build: upstream 0.13b has no gfx908 kernels" in source
    assert source.index("cost: 17,545 kernel compile jobs x 1.8 s") < source.index("git init")
    for patch in ("0001-gfx908-arch-tables.patch", "0002-gfx908-reuse-gfx90a-tuning.patch"):
        assert f"git apply --check {project}/patches/aotriton/" in source and patch in source
    assert "-DAOTRITON_NO_PYTHON=ON" in source


def test_a_real_run_still_stops_with_one_line(fresh, tmp_path: Path) -> None:
    project, env = fresh
    result = run_nox(project, "-s", "build_ck", "--", "--arch", "gfx1151", env=env)
    assert result.returncode == 1
    assert f"env {env_to_be(env)} does not exist; run: nox -s setup_env" in result.stderr
    with_manager = {**env, "MAMBA_EXE": str(standin_micromamba(tmp_path / "mm"))}
    for session in ("build_aotriton", "build_pytorch", "build_ck", "tune_aotriton"):
        result = run_nox(project, "-s", session, "--", "--arch", "gfx908", env=with_manager)
        assert result.returncode == 1, session
        assert "does not exist; run: nox -s setup_env" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    dry = run_nox(project, "-s", "build_ck", "--", "--dry-run", "--arch", "gfx1151",
                  env=with_manager)  # fmt: skip
    assert dry.returncode == 0 and "is not set up; the plan below" in dry.stdout


def test_the_default_line_dry_run_names_the_line_and_every_source(fresh, plan) -> None:
    """build_pytorch --dry-run on the repository's own pins: the line and how its torch x
    AOTriton agreement is known, torch at a named placeholder until the real run resolves it
    (audio/vision/triton read from that commit); the nightly line has every source at a
    commit and AOTriton following torch."""
    project, env = fresh
    result = plan("build_pytorch", "gfx1151")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "line release: https://github.com/ROCm/pytorch release/2.13 (commit not resolved" in out
    assert "x AOTriton 0.13b 6e00ef3e335b: agreement known from a public record only" in out
    placeholder = (
        "<commit of https://github.com/ROCm/pytorch release/2.13: resolved, checked and recorded "
        "by the real run>"
    )
    assert f"--repo-hashtag '{placeholder}'" in out
    assert "the real run resolves, checks and records it there first" in out
    assert "--version-suffix '+rocmfa<identity: digest of the checkout" in out
    assert "TheRock's source-manifest form" in out
    nightly = run_nox(project, "-s", "build_pytorch", "--", "--dry-run", "--arch", "gfx1151",
                      env={**env, "ROCMFA_PYTORCH_LINE": "nightly"})  # fmt: skip
    assert nightly.returncode == 0, nightly.stderr
    text = nightly.stdout
    assert "line nightly: https://github.com/pytorch/pytorch nightly cac8bcf1ca69" in text
    assert "agree by construction" in text
    for commit in ("cac8bcf1ca69bff4364b793b570f850cf9e1faa1",
                   "c6473ed0a5d5254cef30295c4b24019c539007b2",
                   "97164178c67fc943ab7b3ecddd4454a3265b0f63",
                   "88b227e23f0445f3f695bad05bbf1a363b4f50e0"):  # fmt: skip
        assert f"--repo-hashtag {commit}" in text


def test_the_chained_dry_run_tells_the_real_chains_story(fresh) -> None:
    """`nox -s build_aotriton build_pytorch -- --dry-run` before setup_env: build_aotriton keeps
    its build in its install prefix (setup_env installs no torch), build_pytorch plans against
    that prefix as the real chain does, unknown values are named placeholders or the pinned
    values setup_env installs, and nothing is claimed from a placeholder."""
    project, env = fresh
    work = project / "work"
    before = sorted(work.rglob("*")) if work.exists() else []
    args = ("--", "--dry-run", "--arch", "gfx1151", "--cache", "sccache")
    result = run_nox(project, "-s", "build_aotriton", "build_pytorch", *args, env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    prefix = project / "work" / "build" / "aotriton" / "install"
    assert f"[dry-run] no torch in the env: AOTriton stays in {prefix}" in out
    assert (
        f"AOTriton: {prefix} from build_aotriton, which fills it earlier in this run "
        "-> AOTRITON_INSTALLED_PREFIX"
    ) in out
    torch_stage = next(line for line in out.splitlines() if "--pytorch-dir" in line)
    assert f"AOTRITON_INSTALLED_PREFIX={prefix} " in torch_stage
    assert "AOTriton: none built here" not in out
    rocm = tomllib.loads((project / "pins" / "rocm.toml").read_text())["rocm"]["version"]
    assert f"[dry-run] ROCm SDK {rocm}: pinned in pins/rocm.toml, setup_env installs it" in out
    keys = [line for line in out.splitlines() if "key prefix" in line]
    assert len(keys) >= 2  # build_aotriton's, then build_pytorch's per stage
    for line in keys:
        assert line.endswith(f"rocmfa/gfx1151/rocm-{rocm}-<digest of the env setup_env makes>")
    assert any("HIP_CLANG_LAUNCHER=" in line for line in out.splitlines())  # 7.15 >= 7.13
    for leak in ("unknown", "__rocm-sdk_version_", "predates", "000000000000"):
        assert leak not in out, leak
    assert (sorted(work.rglob("*")) if work.exists() else []) == before  # nothing written
    pins = run_nox(project, "-s", "update_pins", "--", "--dry-run", env=env)
    assert pins.returncode == 0, pins.stderr
    assert "000000000000" not in pins.stdout


def test_the_main_job_chained_dry_run_plans_to_the_end(fresh) -> None:
    """The README's main-job sessions as one chained dry run before setup_env: install_wheels
    plans the wheels build_pytorch writes (named placeholders), their runtime requirements and
    the backend check, and the chain exits 0 having run and written nothing."""
    project, env = fresh
    work = project / "work"
    before = sorted(work.rglob("*")) if work.exists() else []
    chain = ("setup_env", "build_aotriton", "build_pytorch", "install_wheels")
    result = run_nox(project, "-s", *chain, "--", "--dry-run", "--arch", "gfx1151", env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "Traceback" not in result.stderr
    out = result.stdout
    assert not [line for line in out.splitlines() if line.startswith("$ ")], "a command ran"
    wheels = work / "wheels"
    pip = next(line for line in out.splitlines() if " -m pip install --no-deps" in line)
    for name in ("triton", "torch", "torchaudio", "torchvision"):
        assert f"'<{name} wheel: written to {wheels} by nox -s build_pytorch>'" in pip
    assert "run nox -s build_pytorch first (or earlier in the same chain)" in out
    assert "then the runtime requirements the wheels declare (Requires-Dist)" in out
    assert out.rstrip().endswith("scripts/rocmfa/probes/backend_check.py")
    assert (sorted(work.rglob("*")) if work.exists() else []) == before  # nothing written
