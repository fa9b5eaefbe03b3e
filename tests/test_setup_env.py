"""setup_env: the real flow through nox, against a loopback TheRock-like index."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rocmfa.env import archs, rocm_sdk, session_env, setup_env
from rocmfa.plumbing import stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from tests.conftest import RocmIndex
from tests.support import pep503, standin_rocm
from tests.support.project import copy_project, run_nox, standin_micromamba


def test_provisioned_env_got_the_device_package_and_variables(provisioned_env: Path) -> None:
    site = next((provisioned_env / "lib").glob("python3*/site-packages"))
    assert (site / "_rocm_device_gfx1151").is_dir()  # rocm[...,device-gfx1151] resolved
    assert not (site / "_rocm_device_gfx1100").exists()
    stamp = stamps.read(provisioned_env / session_env.ENV_STAMP)
    assert stamp["rocm"]["version"] == "7.15.0a20260630"
    assert stamp["rocm"]["root"] == str(site / "_rocm_sdk_devel")
    assert session_env.require_env(provisioned_env) == provisioned_env
    env = session_env.activated_environ(provisioned_env)
    assert env["ROCM_PATH"] == str(site / "_rocm_sdk_devel")
    assert env["PYTORCH_ROCM_ARCH"] == "gfx1151"
    # beside ROCM_PATH, as TheRock's own builds set it (build_prod_wheels.py @ 89553ce3)
    assert env["HIP_DEVICE_LIB_PATH"] == str(site / "_rocm_sdk_devel/lib/llvm/amdgcn/bitcode")
    assert shutil.which("rocm-sdk", path=env["PATH"]) == str(provisioned_env / "bin" / "rocm-sdk")


def test_requirement_and_index_per_kind(rocm_index: RocmIndex) -> None:
    pin = rocm_sdk.load_pin(rocm_index.pins_dir / "rocm.toml")
    strix, navi = archs.get_arch("gfx1151"), archs.get_arch("gfx1100")
    assert pin.requirement(strix) == "rocm[libraries,devel,device-gfx1151]==7.15.0a20260630"
    assert pin.requirement(navi, "legacy") == "rocm[libraries,devel]==7.15.0a20260630"
    assert pin.index_url(navi, "legacy").endswith("/v2/gfx110X-all/")
    assert pin.torch_requirement(strix) == "torch[device-gfx1151]>=2.13,<2.14"


def test_malformed_rocm_pin(tmp_path: Path) -> None:
    (tmp_path / "rocm.toml").write_text('[rocm]\nindex = "nightly"\n')
    with pytest.raises(UserError, match="index must be one of multi-arch, legacy"):
        rocm_sdk.load_pin(tmp_path / "rocm.toml")
    (tmp_path / "rocm.toml").write_text("[rocm\n")
    with pytest.raises(UserError, match="malformed ROCm pin"):
        rocm_sdk.load_pin(tmp_path / "rocm.toml")


@pytest.fixture
def project_env(tmp_path: Path, rocm_index: RocmIndex):
    """A project copy + a venv prefix set up once through setup_env's own code with the
    copy's lock hash, so nox runs on it behave as on an env setup_env created."""
    project = copy_project(tmp_path / "project")
    prefix = standin_rocm.provision_env(
        tmp_path / "env", rocm_index.pins_dir,
        lock_sha256=stamps.file_sha256(project / "conda-lock.yml"),
    )  # fmt: skip
    env = {
        "MAMBA_EXE": str(standin_micromamba(tmp_path / "mm")),
        "ROCMFA_PINS_DIR": str(rocm_index.pins_dir),
        "ROCMFA_WORKDIR": str(tmp_path / "work"),
        "ROCMFA_ENV_PREFIX": str(prefix),
    }
    return project, prefix, env


def test_rerun_is_a_noop_then_a_pin_change_updates_only_rocm(project_env, rocm_index) -> None:
    project, _, env = project_env
    first = run_nox(project, "-s", "setup_env", "--", "--arch", "gfx1151", env=env)
    assert first.returncode == 0, first.stderr
    assert "is up to date (nothing to do" in first.stdout
    assert "$ " not in first.stdout  # no command ran
    # A variable profile changes the inputs: conda is skipped, ROCm and variables redone.
    second = run_nox(project, "-s", "setup_env", "--", "--arch", "gfx1151", "--profile", "vllm",
                     env=env)  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert "conda packages match the lock" in second.stdout
    assert "py-rattler" in second.stdout and "conda packages:" not in second.stdout
    assert "pip install --index-url " + rocm_index.url in second.stdout
    shown = run_nox(project, "-s", "setup_env", "--", "--show", env=env)
    assert "PYTORCH_ROCM_ARCH=gfx1151" in shown.stdout
    assert "VLLM_ROCM_USE_AITER  - vLLM gates AITER" in shown.stdout


def test_stale_lock_is_one_line_naming_nox_lock(tmp_path: Path) -> None:
    """Checked before anything is installed: no env is needed to see it."""
    project = copy_project(tmp_path / "project")
    env = {"ROCMFA_WORKDIR": str(tmp_path / "work"), "ROCMFA_ENV_PREFIX": str(tmp_path / "env")}
    yml = project / "environment.yml"
    yml.write_text(yml.read_text().replace("  - patchelf\n", ""))
    result = run_nox(project, "-s", "setup_env", "--", "--arch", "gfx1151", env=env)
    assert result.returncode == 1
    assert "conda-lock.yml is stale" in result.stderr and "run: nox -s lock" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p", with_lock=False)
    base = {"ROCMFA_WORKDIR": str(tmp_path / "w")}
    cases = {
        ("--arch", "gfx9999"): "unknown GPU arch 'gfx9999'; known: ",
        ("--arch", "gfx1151", "--bogus"): "unrecognized arguments: --bogus",
    }
    for args, message in cases.items():
        result = run_nox(project, "-s", "setup_env", "--", *args, env=base)
        assert result.returncode == 1, args
        assert message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    (project / "pins" / "rocm.toml").write_text("[rocm]\nindex = 3\n")
    result = run_nox(project, "-s", "setup_env", "--", "--arch", "gfx1151", env=base)
    assert "rocm.toml [rocm]: 'index' must be str" in result.stderr


def test_dry_run_prints_everything_and_runs_nothing(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p", with_lock=False)
    prefix = tmp_path / "envs" / "therock"
    args = ["--dry-run", "--arch", "gfx1151", "--prefix", str(prefix)]
    result = run_nox(project, "-s", "setup_env", "--", *args,
                     env={"ROCMFA_WORKDIR": str(tmp_path / "w")})  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "conda-lock.yml is missing: solving it first" in out
    assert "[dry-run] solve environment.yml for linux-64 with py-rattler" in out
    assert f"[dry-run] install conda-lock.yml (linux-64) into {prefix} with py-rattler" in out
    assert "'rocm[libraries,devel,device-gfx1151]==7.15.0a20260630'" in out
    assert "rocm-sdk path --cmake" in out and "PYTORCH_ROCM_ARCH=gfx1151" in out
    assert f"CONDA_PREFIX={prefix}" in out
    assert not (project / "conda-lock.yml").exists() and not prefix.exists()
    assert not (tmp_path / "w").exists()


def test_refuses_to_replace_what_it_did_not_make(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    (foreign / "conda-meta").mkdir(parents=True)
    with pytest.raises(UserError, match=r"was not created by setup_env.*--force"):
        setup_env.check_prefix_usable(foreign, force=False)
    setup_env.check_prefix_usable(foreign, force=True)
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "thesis.tex").write_text("mine")
    with pytest.raises(UserError, match="not a conda env; choose another --prefix"):
        setup_env.check_prefix_usable(folder, force=True)
    assert (folder / "thesis.tex").read_text() == "mine"


def test_unwritable_prefix(tmp_path: Path) -> None:
    readonly = Path("/proc/sys/rocmfa-env")  # a read-only mount even for root
    with pytest.raises(UserError, match="not writable"):
        setup_env.check_prefix_usable(readonly, force=False)


def _dists(prefix: Path) -> dict[str, str]:
    probe = "import json; from importlib import metadata as m; print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"  # noqa: E501
    out = subprocess.run([str(prefix / "bin" / "python"), "-c", probe], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return json.loads(out)


def test_with_torch_is_one_resolve_that_keeps_the_sdk_at_the_pin(tmp_path: Path) -> None:
    """A newer torch on the index requires a newer SDK: one resolve picks the torch built for
    the pinned SDK (a mixed SDK, as two pip calls would leave, is named by doctor's check); with
    no torch for the pin the run refuses in one line and installs nothing."""
    pinned, newer = standin_rocm.VERSION, "7.15.0a20260701"
    wheels = tmp_path / "wheels"
    standin_rocm.build_wheels(wheels, pinned)
    standin_rocm.build_wheels(wheels, newer)
    standin_rocm.build_torch_wheel(wheels, f"2.13.0+rocm{pinned}", pinned, "gfx1151")
    standin_rocm.build_torch_wheel(wheels, f"2.13.1+rocm{newer}", newer, "gfx1151")
    pep503.write_index(wheels, tmp_path / "www")
    with pep503.serve(tmp_path / "www") as base:
        pin = rocm_sdk.load_pin(standin_rocm.write_rocm_pin(tmp_path / "pins", f"{base}/simple/"))
        arch = archs.get_arch("gfx1151")
        prefix = tmp_path / "env"
        standin_rocm.make_venv(prefix)
        # only the newer torch fits the spec: refused in one line, nothing installed
        only_newer = setup_env.Request(
            arch, dataclasses.replace(pin, torch_spec="==2.13.1+rocm" + newer), "multi-arch",
            True, (),
        )  # fmt: skip
        runner = Runner(base_env=standin_rocm.venv_environ(prefix), out=io.StringIO())
        with pytest.raises(UserError, match=r"pip found no torch\[device-gfx1151\]==2.13.1") as e:
            setup_env.provision(prefix, only_newer, runner, stamp_inputs={})
        assert "\n" not in str(e.value)
        assert "rocm-sdk-core" not in _dists(prefix)

        # the same env, the pinned spec: one resolve picks the torch built for the pinned SDK
        request = setup_env.Request(arch, pin, "multi-arch", True, ())
        runner = Runner(base_env=standin_rocm.venv_environ(prefix), out=io.StringIO())
        setup_env.provision(prefix, request, runner, stamp_inputs=request.inputs("t", None))
        pips = [argv for argv in runner.executed if argv[1:3] == ("-m", "pip")]
        assert len(pips) == 1 and pips[0][-2:] == (
            f"rocm[libraries,devel,device-gfx1151]=={pinned}", "torch[device-gfx1151]>=2.13,<2.14"
        )  # fmt: skip
        dists = _dists(prefix)
        assert dists["torch"] == f"2.13.0+rocm{pinned}"
        assert {dists[d] for d in rocm_sdk.SDK_DISTS} == {pinned}
        assert rocm_sdk.mixed_sdk(dists) == ""

        # a second pip call for torch alone would move core/libraries, not devel: named
        moved = {**dists, "rocm-sdk-core": newer, "rocm_sdk_libraries": newer}
        mixed = rocm_sdk.mixed_sdk(moved)
        assert mixed.startswith("mixed ROCm SDK: ") and f"rocm-sdk-devel {pinned}" in mixed
        assert f"rocm-sdk-libraries {newer}" in mixed and "setup_env -- --force" in mixed


def test_dry_run_with_torch_shows_one_resolve(rocm_index: RocmIndex, tmp_path: Path) -> None:
    pin = rocm_sdk.load_pin(rocm_index.pins_dir / "rocm.toml")
    request = setup_env.Request(archs.get_arch("gfx908"), pin, "legacy", True, ())
    out = io.StringIO()
    setup_env.provision(tmp_path / "p", request, Runner(dry_run=True, out=out), stamp_inputs={})
    text = out.getvalue()
    pips = [line for line in text.splitlines() if " -m pip install " in line]
    assert len(pips) == 1, text
    assert pips[0].endswith(
        f"'rocm[libraries,devel,device-gfx908]=={rocm_index.version}' "
        "'torch[device-gfx908]>=2.13,<2.14'"
    ), pips[0]
    assert rocm_index.url in pips[0]  # gfx908 has no legacy family index: the multi-arch one
    assert "gfx908: TheRock has no legacy per-family index" in text
    assert "in one pip resolve" in text
