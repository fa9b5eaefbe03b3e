"""A provisioned stand-in env of our own for the build_aotriton tests (they install into its
torch, so they do not share the lead's provisioned_env), plus option namespaces."""

from __future__ import annotations

import os
from pathlib import Path

from rocmfa.plumbing import options
from tests.support import standin_rocm


def provision_env(prefix: Path, rocm_index_pins: Path) -> Path:
    with open(os.devnull, "w") as quiet:
        return standin_rocm.provision_env(prefix, rocm_index_pins, out=quiet)


def build_opts(prefix: Path, work: Path, *extra: str, arch: str = "gfx1151"):
    argv = ["--arch", arch, "--prefix", str(prefix), "--workdir", str(work), *extra]
    return options.parse("build_aotriton", argv)


def command_lines(text: str) -> list[str]:
    """The external commands a Runner printed ('$ ...' lines)."""
    return [line for line in text.splitlines() if line.startswith("$ ")]
