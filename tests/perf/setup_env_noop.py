"""Measure `nox -s setup_env` whole-process wall time when nothing changed (and, for scale,
when only the ROCm/variables step must be redone), against the stand-in TheRock index.

Run: python -m tests.perf.setup_env_noop [--repeats N]
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rocmfa.env import archs, rocm_sdk, setup_env
from rocmfa.plumbing import stamps
from rocmfa.plumbing.commands import Runner
from tests.perf.process_time import (
    Series,
    Timing,
    add_bytecode_option,
    bytecode_env,
    timed_children,
)
from tests.support import pep503, standin_rocm
from tests.support.project import copy_project, run_nox, standin_micromamba


def timed_nox(project: Path, env: dict[str, str], *args: str) -> tuple[Timing, str]:
    """Whole-process wall and CPU time and stdout of one `nox ARGS` run; exits on failure."""
    with timed_children() as timing:
        result = run_nox(project, *args, env=env)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed: {result.stderr.strip().splitlines()[-1]}")
    return timing, result.stdout


def noop_line(noop: Series) -> str:
    return noop.line("no-op rerun, whole `nox -s setup_env` process") + "; commands run: 0"


def timed(project: Path, env: dict[str, str], *args: str) -> tuple[Timing, str]:
    return timed_nox(project, env, "-s", "setup_env", "--", *args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    add_bytecode_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        pep503.write_index(standin_rocm.build_wheels(root / "wheels"), root / "www")
        base = stack.enter_context(pep503.serve(root / "www"))
        pins = root / "pins"
        standin_rocm.write_rocm_pin(pins, f"{base}/simple/")
        project = copy_project(root / "project")
        prefix = root / "env"
        subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True)
        request = setup_env.Request(
            archs.get_arch("gfx1151"), rocm_sdk.load_pin(pins / "rocm.toml"), "multi-arch",
            False, (),
        )  # fmt: skip
        inputs = request.inputs(stamps.file_sha256(project / "conda-lock.yml"), None)
        start = time.perf_counter()
        runner = Runner(base_env=standin_rocm.venv_environ(prefix), out=sys.stderr)
        setup_env.provision(prefix, request, runner, stamp_inputs=inputs)
        first = time.perf_counter() - start
        env = {
            "MAMBA_EXE": str(standin_micromamba(root / "mm")),
            "ROCMFA_PINS_DIR": str(pins),
            "ROCMFA_WORKDIR": str(root / "work"),
            "ROCMFA_ENV_PREFIX": str(prefix),
            **bytecode_env(args.no_bytecode_cache),
        }
        timed(project, env, "--arch", "gfx1151")  # warms the lock verdict and the .pyc files
        noop = Series()
        for _ in range(args.repeats):
            timing, out = timed(project, env, "--arch", "gfx1151")
            assert "up to date" in out and "$ " not in out, out
            noop.timings.append(timing)
        update, _ = timed(project, env, "--arch", "gfx1151", "--profile", "vllm")
    print(f"ROCm SDK + variables step (pip from loopback index): {first:.2f} s")
    print(f"update after a profile change (pip + variables):     {update.wall:.2f} s")
    print(noop_line(noop))
    return 0


if __name__ == "__main__":
    sys.exit(main())
