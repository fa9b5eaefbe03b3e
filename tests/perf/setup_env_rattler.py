"""Time the py-rattler path of the env on test-made conda packages (file:// channel used as a
mirror of conda-forge, loopback stand-in TheRock index): `nox -s lock`, the conda step of an
install with a cold and a warm package cache, a whole first `nox -s setup_env`, and no-op
reruns of the whole `nox -s setup_env` process.

Run: python -m tests.perf.setup_env_rattler [--repeats N] [--packages N]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

from rocmfa.env import lockfile
from tests.perf.process_time import Series
from tests.perf.setup_env_noop import noop_line, timed_nox
from tests.support import pep503, standin_rocm
from tests.support.conda_packages import Package, make_channel, python_standin
from tests.support.project import copy_project


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--packages", type=int, default=60, help="test-made packages in the env")
    args = parser.parse_args()
    payload = "x" * 200_000  # ~200 kB of files per package, compressed by bzip2
    packages = [
        Package(f"pkg{i}", "1.0", files={f"share/pkg{i}/data": f"{i}{payload}"})
        for i in range(args.packages)
    ]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        mirror = make_channel(root / "mirror", [*packages, python_standin()])
        pep503.write_index(standin_rocm.build_wheels(root / "wheels"), root / "www")
        base = stack.enter_context(pep503.serve(root / "www"))
        standin_rocm.write_rocm_pin(root / "pins", f"{base}/simple/")
        project = copy_project(root / "project", with_lock=False)
        specs = ["python", *(p.name for p in packages)]
        (project / "environment.yml").write_text(
            "channels: [conda-forge]\nplatforms: [linux-64]\ndependencies:\n"
            + "".join(f"  - {s}\n" for s in specs)
        )
        env = {
            "ROCMFA_WORKDIR": str(root / "work"),
            "ROCMFA_PINS_DIR": str(root / "pins"),
            "XDG_CACHE_HOME": str(root / "cache"),
            "XDG_DATA_HOME": str(root / "data"),
        }
        lock_s, _ = timed_nox(project, env, "-s", "lock", "--", "--channel", mirror)
        lock = project / "conda-lock.yml"
        mirrors = [mirror]  # the --channel values
        start = time.perf_counter()
        lockfile.install_lock(lock, root / "cold", cache_dir=root / "c1", channel=mirrors)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        lockfile.install_lock(lock, root / "warm", cache_dir=root / "c1", channel=mirrors)
        warm = time.perf_counter() - start
        start = time.perf_counter()
        lockfile.install_lock(lock, root / "warm", cache_dir=root / "c1", channel=mirrors)
        same = time.perf_counter() - start
        setup = ["-s", "setup_env", "--", "--arch", "gfx1151", "--channel", mirror]
        first, out = timed_nox(project, env, *setup)
        assert "installed, 0 removed" in out, out
        noop = Series()
        for _ in range(args.repeats):
            timing, out = timed_nox(project, env, *setup)
            assert "up to date" in out and "$ " not in out, out
            noop.timings.append(timing)
    n = args.packages + 1
    print(f"nox -s lock (solve {n} packages, whole process):        {lock_s.wall:.2f} s")
    print(f"conda step, cold package cache ({n} packages):            {cold:.2f} s")
    print(f"conda step, warm cache, new prefix:                       {warm:.2f} s")
    print(f"conda step, nothing to change (rattler's own diff):        {same:.2f} s")
    print(f"first nox -s setup_env (conda + pip ROCm + variables):    {first.wall:.2f} s")
    print(noop_line(noop))
    return 0


if __name__ == "__main__":
    sys.exit(main())
