"""Shared fixtures: a loopback TheRock-like index and a provisioned stand-in env."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import pep503, standin_rocm

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class RocmIndex:
    url: str  # .../simple/
    pins_dir: Path  # holds rocm.toml pointing at url
    version: str


@pytest.fixture(scope="session")
def rocm_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RocmIndex]:
    root = tmp_path_factory.mktemp("rocm-index")
    wheels = standin_rocm.build_wheels(root / "wheels")
    pep503.write_index(wheels, root / "www")
    with pep503.serve(root / "www") as base:
        pins = root / "pins"
        standin_rocm.write_rocm_pin(pins, f"{base}/simple/")
        yield RocmIndex(f"{base}/simple/", pins, standin_rocm.VERSION)


@pytest.fixture(scope="session")
def provisioned_env(tmp_path_factory: pytest.TempPathFactory, rocm_index: RocmIndex) -> Path:
    """A real Python prefix (a venv standing in for the conda env) provisioned by
    setup_env's own post-conda code: stand-in ROCm SDK from the loopback index, activation
    scripts, env stamp. `rocm-sdk path ...` works and condaenv.require_env accepts it."""
    from scripts import archs, rocm_sdk, setup_env
    from scripts.commands import Runner

    prefix = tmp_path_factory.mktemp("env") / "therock"
    subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True)
    pin = rocm_sdk.load_pin(rocm_index.pins_dir / "rocm.toml")
    request = setup_env.Request(archs.get_arch("gfx1151"), pin, "multi-arch", False, ())
    runner = Runner(base_env=_venv_environ(prefix))
    setup_env.provision(prefix, request, runner, stamp_inputs=request.inputs("test-lock", None))
    return prefix


def _venv_environ(prefix: Path) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{prefix / 'bin'}:{env.get('PATH', '')}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env
