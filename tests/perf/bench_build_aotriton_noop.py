"""Benchmark: a no-change rerun of `nox -s build_aotriton` against the stand-ins.

Measures whole-process wall time of `python -m nox -s build_aotriton -- ...` for the first build
and for reruns with nothing changed, and counts the external build commands (git, cmake, ninja)
each run executes, through logging shims placed first on PATH. Not a timed test assertion:

    python -m tests.perf.bench_build_aotriton_noop [--reruns 5] [--json out.json]

Stand-ins: a loopback TheRock-like index and a provisioned venv standing in for the env, a
CMake project laid out like AOTriton in a file:// git repository (tests/support/).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.perf.process_time import (  # noqa: E402
    Timing,
    add_bytecode_option,
    bytecode_env,
    timed_children,
)
from tests.support import aotriton_standins as st  # noqa: E402
from tests.support import pep503, standin_rocm  # noqa: E402
from tests.support.aotriton_env import provision_env  # noqa: E402

TOOLS = ("git", "cmake", "ninja")


def make_shims(directory: Path, log: Path) -> None:
    directory.mkdir(parents=True)
    for tool in TOOLS:
        real = shutil.which(tool)
        if real is None:
            raise SystemExit(f"{tool} not found")
        shim = directory / tool
        shim.write_text(
            "#!/bin/sh\n"
            f'echo "{tool} $*" >> {shlex.quote(str(log))}\n'
            f'exec {shlex.quote(real)} "$@"\n'
        )
        shim.chmod(0o755)


def run_session(argv: list[str], env: dict[str, str], log: Path) -> tuple[Timing, list[str], str]:
    log.write_text("")
    with timed_children() as timing:
        result = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"build_aotriton failed:\n{result.stdout}\n{result.stderr}")
    return timing, log.read_text().splitlines(), result.stdout + result.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reruns", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    add_bytecode_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-aotriton-") as tmp:
        root = Path(tmp)
        wheels = standin_rocm.build_wheels(root / "wheels")
        pep503.write_index(wheels, root / "www")
        with pep503.serve(root / "www") as base:
            index_pins = root / "index-pins"
            standin_rocm.write_rocm_pin(index_pins, f"{base}/simple/")
            prefix = provision_env(root / "env" / "therock", index_pins)
        st.install_torch(prefix)
        repo, commit = st.make_aotriton_upstream(root)
        pins = root / "pins"
        pins.mkdir()
        st.pin_standin_release(pins, repo, commit)
        (root / "patches").mkdir()
        log = root / "commands.log"
        make_shims(root / "shims", log)
        env = {
            **os.environ,
            **st.FILE_PROTOCOL_ENV,
            "PATH": f"{root / 'shims'}{os.pathsep}{os.environ.get('PATH', '')}",
            "ROCMFA_PINS_DIR": str(pins),
            "ROCMFA_PATCHES_DIR": str(root / "patches"),
            **bytecode_env(args.no_bytecode_cache),
        }
        argv = [sys.executable, "-m", "nox", "-s", "build_aotriton", "--"]
        argv += ["--arch", "gfx1151", "--prefix", str(prefix), "--workdir", str(root / "work")]
        first_timing, first_cmds, _ = run_session(argv, env, log)
        reruns: list[float] = []
        rerun_cpu: list[float] = []
        rerun_cmds: list[str] = []
        for _ in range(args.reruns):
            timing, cmds, output = run_session(argv, env, log)
            reruns.append(timing.wall)
            rerun_cpu.append(timing.cpu)
            rerun_cmds += cmds
            if "up to date" not in output:
                raise SystemExit(f"rerun was not a no-op:\n{output}")
    median = statistics.median(reruns)
    first = first_timing.wall
    numbers = {
        "first_build_s": round(first, 3),
        "first_build_external_commands": len(first_cmds),
        "first_build_by_tool": {t: sum(c.startswith(t + " ") for c in first_cmds) for t in TOOLS},
        "rerun_s": [round(r, 3) for r in reruns],
        "rerun_median_s": round(median, 3),
        "rerun_min_s": round(min(reruns), 3),
        "rerun_cpu_median_s": round(statistics.median(rerun_cpu), 3),
        "rerun_cpu_min_s": round(min(rerun_cpu), 3),
        "rerun_external_commands": len(rerun_cmds),
        "ratio_rerun_to_first": round(median / first, 3),
    }
    print(json.dumps(numbers, indent=2))
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
