"""A provisioned stand-in env of our own for the build_aotriton tests (they install into its
torch, so they do not share the lead's provisioned_env), plus option namespaces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from scripts import options


def provision_env(prefix: Path, rocm_index_pins: Path) -> Path:
    """setup_env's own post-conda code against the loopback TheRock index (as conftest)."""
    from scripts import archs, rocm_sdk, setup_env
    from scripts.commands import Runner

    subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{prefix / 'bin'}:{env.get('PATH', '')}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    pin = rocm_sdk.load_pin(rocm_index_pins / "rocm.toml")
    request = setup_env.Request(archs.get_arch("gfx1151"), pin, "multi-arch", False, ())
    runner = Runner(base_env=env, out=open(os.devnull, "w"))  # noqa: SIM115
    setup_env.provision(prefix, request, runner, stamp_inputs=request.inputs("test-lock", None))
    return prefix


def build_opts(prefix: Path, work: Path, *extra: str, arch: str = "gfx1151"):
    argv = ["--arch", arch, "--prefix", str(prefix), "--workdir", str(work), *extra]
    return options.parse("build_aotriton", argv)


def command_lines(text: str) -> list[str]:
    """The external commands a Runner printed ('$ ...' lines)."""
    return [line for line in text.splitlines() if line.startswith("$ ")]
