"""The noxfile through real nox subprocesses: listing, tags, exit codes, doctor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocmfa.plumbing import options
from tests.support.project import REPO_ROOT, run_nox

ALL = {
    "lock", "setup_env", "doctor", "update_pins", "build_aotriton", "build_pytorch",
    "install_wheels", "build_ck", "bench", "backend_check", "validate", "tests", "lint",
}  # fmt: skip


def test_list_shows_every_session_with_a_docstring() -> None:
    result = run_nox(REPO_ROOT, "-l", "--json", "-s", *sorted(ALL))
    sessions = {s["name"]: s for s in json.loads(result.stdout)}
    assert set(sessions) == ALL
    # every nox session but tests/lint has its options declared, and nothing else is declared
    listed = {
        s["name"]
        for s in json.loads(
            run_nox(REPO_ROOT, "-l", "--json", "-s", *options.BY_NAME, "tests", "lint").stdout
        )
    }
    assert listed == {*options.BY_NAME, "tests", "lint"}
    assert all(s["description"] for s in sessions.values())
    assert "build" in sessions["build_pytorch"]["tags"]
    default = {s["name"] for s in json.loads(run_nox(REPO_ROOT, "-l", "--json").stdout)}
    assert default == {"doctor", "tests", "lint"}  # expensive sessions are opt-in


def test_doctor_reports_and_exits_zero_without_gpu_or_conda(tmp_path: Path) -> None:
    env = {"ROCMFA_WORKDIR": str(tmp_path / "w"), "PATH": "/usr/bin:/bin"}
    result = run_nox(REPO_ROOT, "-s", "doctor", env=env)
    assert result.returncode == 0, result.stderr
    assert "manager    none found" in result.stdout and "next " in result.stdout
    as_json = run_nox(REPO_ROOT, "-s", "doctor", "--", "--json", "--arch", "gfx908", env=env)
    report = json.loads(as_json.stdout)
    # gfx908: no upstream kernels, AOTriton 0.13b with our patch set (patches/aotriton/)
    rows = dict(report["rows"])  # the screen's rows, label -> text
    assert rows["arch"].startswith("gfx908 = ") and "AOTriton yes" in rows["arch"]
    assert rows["manager"].startswith("none found")
    assert report["next"] == "nox -s setup_env"  # py-rattler makes the env, no manager needed


def test_unknown_session_and_help() -> None:
    assert run_nox(REPO_ROOT, "-s", "no_such_session").returncode == 3
    helped = run_nox(REPO_ROOT, "-s", "setup_env", "--", "--help")
    assert helped.returncode == 0
    assert "--with-torch" in helped.stdout and "--from-release" not in helped.stdout
    assert helped.stdout.startswith("Create/update the shared env from the lock")
    # a probe's help: ours, then the script's own, with no env and no torch run
    probe = run_nox(REPO_ROOT, "-s", "bench", "--", "--help", env={"ROCMFA_ENV_PREFIX": "/nowhere"})
    assert probe.returncode == 0, probe.stderr
    assert (
        "--env-name" in probe.stdout and "--sizes" in probe.stdout and "--arch" not in probe.stdout
    )


def test_options_shared_between_sessions_of_one_run(tmp_path: Path) -> None:
    env = {"ROCMFA_WORKDIR": str(tmp_path / "w")}
    # --profile belongs to setup_env only; doctor must accept and ignore it in the same run.
    result = run_nox(REPO_ROOT, "-s", "doctor", "setup_env", "--", "--arch", "gfx1100",
                     "--dry-run", "--profile", "vllm", env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "arch       gfx1100" in result.stdout and "arch gfx1100 (--arch)" in result.stdout


@pytest.mark.slow
def test_bench_and_validate_run_through_nox_in_a_standin_env(tmp_path: Path) -> None:
    """The in-env sessions get the env's Python and activation; their own options pass
    through to the scripts, shared options (--arch) stay with nox."""
    import site
    import subprocess
    import sys
    import sysconfig

    prefix = tmp_path / "env"
    # A real Python prefix standing in for the conda env; torch comes from the site-packages of
    # the Python running the tests (a .pth file: --system-site-packages would reach only the
    # base interpreter's when the tests run in a venv); pip comes from there too.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    inner = sysconfig.get_path("purelib", vars={"base": str(prefix)})
    Path(inner, "outer-site.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    out = tmp_path / "results"
    env = {"ROCMFA_ENV_PREFIX": str(prefix), "ROCMFA_WORKDIR": str(tmp_path / "w")}
    bench = run_nox(REPO_ROOT, "-s", "bench", "--", "--arch", "gfx1151", "--sizes", "Tiny",
                    "--backends", "math", "--causal", "no", "--repeats", "2",
                    "--out-dir", str(out), env=env)  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    assert f"{prefix}/bin/python" in bench.stdout
    result = json.loads((out / "bench.json").read_text())
    assert result["results"] and result["identity"]["torch"]
    bad = run_nox(REPO_ROOT, "-s", "validate", "--", "--no-such-option", env=env)
    assert bad.returncode == 1 and "validate exited with status 2" in bad.stderr
    # --upstream: PyTorch's own tests; the work dir (nox's option) reaches the probe, and a
    # test file that cannot be had is one line, not a traceback.
    upstream = run_nox(REPO_ROOT, "-s", "validate", "--", "--upstream", env=env)
    assert upstream.returncode == 1 and "validate exited with status 2" in upstream.stderr
    assert f"upstream_sdpa.py --workdir {tmp_path / 'w'}" in upstream.stdout
    assert "cannot be had" in upstream.stderr and "Traceback" not in upstream.stderr


def test_a_bad_option_value_stops_before_any_plan_line(tmp_path: Path) -> None:
    env = {"ROCMFA_WORKDIR": str(tmp_path / "w")}
    result = run_nox(REPO_ROOT, "-s", "tune_aotriton", "--", "--dry-run", "--arch", "gfx908",
                     "--cache", "bogus", env=env)  # fmt: skip
    assert result.returncode == 1
    assert result.stdout.strip() == "" and "[dry-run]" not in result.stderr
    (line,) = [x for x in result.stderr.splitlines() if "aborted" in x]
    assert "tune_aotriton: --cache 'bogus'" in line
