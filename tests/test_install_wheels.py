"""install_wheels: this run's wheels from the manifest into a real env; refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from rocmfa.builds import build_pytorch as bp
from rocmfa.plumbing import options
from rocmfa.plumbing.errors import UserError
from rocmfa.sharing import install_wheels as iw
from tests.support import pep503
from tests.support import therock_standin as standin
from tests.support.wheels import installed

ROCM = "7.15.0a20260630"
PYTAG = "cp{}{}".format(*sys.version_info[:2])


@pytest.fixture(scope="module")
def env_prefix(tmp_path_factory, rocm_index) -> Path:
    """Our own env: these tests install into it."""
    return standin.provision_private_env(tmp_path_factory.mktemp("iw-env"), rocm_index.pins_dir)


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory) -> standin.Upstreams:
    return standin.make_upstreams(tmp_path_factory.mktemp("iw-up"))


@pytest.fixture
def session(monkeypatch, env_prefix, upstreams, tmp_path, torch_runtime_index):
    pep503.pip_only_from(monkeypatch, torch_runtime_index)
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(upstreams.pins_dir))
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(tmp_path / "patches"))
    work = tmp_path / "work"
    common = ["--prefix", str(env_prefix), "--workdir", str(work), "--arch", "gfx1151"]

    def build(*args: str) -> None:
        argv = [*common, "--skip", "vision", *args]
        bp.build_pytorch(options.parse("build_pytorch", argv))

    def install(*args: str) -> None:
        iw.install_wheels(options.parse("install_wheels", [*common, *args]))

    return work, build, install


def test_installs_exactly_this_runs_wheels_then_checks(
    session, env_prefix, capfd, torch_runtime_index
):
    work, build, install = session
    build()
    # An older torch wheel lying next to the new one (not this run's) must not be installed.
    (work / "wheels" / f"torch-2.12.0+rocm{ROCM}-{PYTAG}-{PYTAG}-linux_x86_64.whl").write_bytes(
        b"not a wheel"
    )
    install("--no-backend-check")
    out = capfd.readouterr().out
    built = {
        w["project"]: w["version"]
        for w in json.loads((work / bp.MANIFEST_NAME).read_text())["wheels"]
    }
    assert installed(env_prefix, "torch") == built["torch"]
    assert built["torch"].startswith("2.13.0a0+rocmfa") and built["torch"].endswith(f".rocm{ROCM}")
    assert installed(env_prefix, "torchaudio") == built["torchaudio"]
    assert installed(env_prefix, "triton") is not None
    pip_line = next(line for line in out.splitlines() if " pip install --no-deps" in line)
    assert "--force-reinstall" in pip_line and "2.12.0" not in pip_line
    assert "backend check skipped" in out
    # torch's own requirements (its Requires-Dist; triton is one of the wheels) came first, by
    # pip from the index pip was given, and torch imports
    needs = next(line for line in out.splitlines() if line.startswith("runtime requirements"))
    assert "typing-extensions>=4.10.0, rocm[libraries]==" not in needs  # sorted, one each
    for requirement in ("filelock", "sympy>=1.13.3", f"rocm[libraries]=={ROCM}"):
        assert requirement in needs
    assert "triton" not in needs and "optree" not in needs
    assert f"Looking in indexes: {torch_runtime_index}" in out  # pip names where it looked
    assert installed(env_prefix, "typing_extensions") == "4.15.0"
    assert installed(env_prefix, "mpmath") == "1.3.0"  # sympy's own requirement
    imported = subprocess.run(
        [env_prefix / "bin" / "python", "-c", "import torch; print(torch.__version__)"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert imported.returncode == 0 and imported.stdout.strip() == built["torch"], imported.stderr

    install("--no-backend-check")
    assert "already installed" in capfd.readouterr().out

    # The backend check runs (here against a stand-in torch, so it fails) and says so.
    with pytest.raises(UserError, match=r"wheels installed, but the backend check failed") as e:
        install()
    assert "\n" not in str(e.value)
    assert "scripts/rocmfa/probes/backend_check.py" in capfd.readouterr().out


def test_refuses_wheels_for_another_python(session, monkeypatch, env_prefix):
    _work, build, install = session
    other = "cp312" if PYTAG != "cp312" else "cp313"
    monkeypatch.setenv("THEROCK_STANDIN_PYTAG", other)
    build("--skip", "audio")
    before = installed(env_prefix, "torch")
    with pytest.raises(UserError, match=rf"is for {other}-{other}-linux_x86_64; the env's Python "):
        install("--no-backend-check", "--force")
    assert installed(env_prefix, "torch") == before


def test_refuses_wheels_for_another_rocm(session, monkeypatch):
    work, build, install = session
    monkeypatch.setenv("THEROCK_STANDIN_ROCM_VERSION", "7.14.0a20260601")
    build("--skip", "audio")
    with pytest.raises(UserError, match=r"built against ROCm 7.14.0a20260601, but the env has "):
        install("--no-backend-check")
    # A wheel changed after the build is refused too.
    manifest = json.loads((work / bp.MANIFEST_NAME).read_text())
    Path(manifest["wheels"][0]["file"]).write_bytes(b"tampered")
    with pytest.raises(UserError, match="changed since build_pytorch recorded it"):
        install("--no-backend-check")


def test_no_manifest_is_one_clear_line(session):
    _work, _build, install = session
    with pytest.raises(
        UserError, match=r"no build_pytorch run manifest .*: run nox -s build_pytorch first"
    ):
        install()


@pytest.mark.parametrize(
    ("version", "rocm"),
    [
        ("2.13.0a0+rocm7.15.0a20260630", "7.15.0a20260630"),
        ("2.13.0a0+devrocm7.15.0.dev0", "7.15.0.dev0"),
        ("3.6.0+git12345678.rocm7.15.0a20260630", "7.15.0a20260630"),
        ("2.12.0a0+git1a2b3c4d.rocm7.10.0", "7.10.0"),
        ("2.9.0a0+rocmsdk20250831", None),
        ("2.9.0", None),
    ],
)
def test_rocm_version_from_local_part(version, rocm):
    assert iw.rocm_of(Version(version)) == rocm
