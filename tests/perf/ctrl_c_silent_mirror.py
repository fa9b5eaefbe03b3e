"""Measure how long `nox -s setup_env` and `nox -s lock` take to exit after SIGINT while they
wait on a mirror that accepts connections and never answers, and count the partial files
they leave in the package cache.

Run: python -m tests.perf.ctrl_c_silent_mirror [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support import loopback
from tests.support.conda_packages import Package, make_channel
from tests.support.project import copy_project, run_nox


def once(project: Path, root: Path, session: str, mirror: str) -> tuple[float, int]:
    cache = root / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    conda = cache / "rocm-fa-workflow" / "conda"
    args = ["--channel", mirror]
    if session == "setup_env":
        args += ["--arch", "gfx1151", "--prefix", str(root / "env")]
        ready = lambda: any((conda / "archives").glob(".*"))  # noqa: E731 - a download waits
    else:
        ready = (conda / "repodata").exists  # rattler is fetching
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMFA_", "CONDA_"))}
    run = subprocess.Popen(
        [sys.executable, "-m", "nox", "-f", str(project / "noxfile.py"), "-s", session, "--",
         *args],
        cwd=project, env={**full, "XDG_CACHE_HOME": str(cache)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    took, _out, _err = loopback.interrupt_when(run, ready)
    archives = conda / "archives"
    left = len(list(archives.iterdir())) if archives.is_dir() else 0
    return took, left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, loopback.silent() as mirror:
        root = Path(scratch)
        channel = make_channel(root / "channel", [
            Package(f"pkg{i}", "1.0", files={f"share/pkg{i}/f": "x\n"}) for i in range(20)
        ])  # fmt: skip
        project = copy_project(root / "project", with_lock=False)
        env_yml = ["name: t", "channels:", "  - conda-forge", "platforms:", "  - linux-64",
                   "dependencies:", *(f"  - pkg{i}" for i in range(20))]  # fmt: skip
        (project / "environment.yml").write_text("\n".join(env_yml) + "\n")
        solved = run_nox(project, "-s", "lock", "--", "--channel", channel,
                         env={"XDG_CACHE_HOME": str(root / "cache")})  # fmt: skip
        if solved.returncode != 0:
            sys.exit(f"lock failed: {solved.stderr.strip().splitlines()[-1]}")
        for session in ("setup_env", "lock"):
            runs = [once(project, root, session, mirror) for _ in range(args.repeats)]
            times = [t for t, _ in runs]
            print(
                f"nox -s {session}, SIGINT while waiting on a silent mirror: exit after median "
                f"{statistics.median(times):.2f} s (min {min(times):.2f}, max {max(times):.2f}, "
                f"n={len(times)}); files left in the package cache: {max(n for _, n in runs)}"
            )


if __name__ == "__main__":
    main()
