"""Shared fixtures: a loopback TheRock-like index and a provisioned stand-in env."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import pep503, standin_rocm
from tests.support.wheels import torch_runtime_wheels

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
def torch_runtime_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A loopback PEP 503 index (its .../simple/ URL) of torch's run-time requirements, standing
    in for PyPI: install_wheels has pip resolve them (tests/support/wheels.py TORCH_RUNTIME)."""
    root = tmp_path_factory.mktemp("torch-runtime-index")
    pep503.write_index(torch_runtime_wheels(root / "wheels"), root / "www")
    with pep503.serve(root / "www") as base:
        yield f"{base}/simple/"


@pytest.fixture(scope="session")
def provisioned_env(tmp_path_factory: pytest.TempPathFactory, rocm_index: RocmIndex) -> Path:
    """A stand-in env provisioned by setup_env's own post-conda code (see
    standin_rocm.provision_env): `rocm-sdk path ...` works and require_env accepts it."""
    return standin_rocm.provision_env(
        tmp_path_factory.mktemp("env") / "therock", rocm_index.pins_dir
    )
