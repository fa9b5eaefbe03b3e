"""Reproduce py-rattler's exit-time crash; show that lockfile.run_rattler prevents it.

Each run is a fresh Python process with a cold package cache that solves one small test-made
package from a file:// channel, installs it, checks the prefix, and returns from main:
  naive   - `asyncio.run(...)` as rattler's docs show;
  guarded - the same calls through rocmfa.env.lockfile.run_rattler;
  ours    - what `nox -s lock` and setup_env call: lockfile.solve_lock + install_lock.
A run "crashes" when the process dies of a signal (SIGSEGV/SIGABRT) after printing that the
prefix was complete. The cause: docs/conda-lock.md.

Run: python -m tests.perf.rattler_exit_crash [--runs 100] [--mode naive|guarded|both]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from tests.support.conda_packages import Package, make_channel

REPO_ROOT = Path(__file__).resolve().parents[2]


def child(mode: str, root: Path) -> None:
    import rattler

    url = make_channel(
        root / "channel", [Package("hello", "1.0", files={"bin/hello": "#!/bin/sh\necho hi\n"})]
    )

    async def solve_and_install() -> None:
        records = await rattler.solve(
            sources=[rattler.Channel(url)], specs=["hello"], platforms=["linux-64", "noarch"]
        )
        await rattler.install(
            records, target_prefix=root / "env", cache_dir=root / "cache", show_progress=False
        )

    if mode == "naive":
        asyncio.run(solve_and_install())
    elif mode == "ours":
        from rocmfa.env import lockfile

        env_file = root / "environment.yml"
        env_file.write_text(f"channels: [{url}]\nplatforms: [linux-64]\ndependencies: [hello]\n")
        lock = root / "conda-lock.yml"
        lockfile.solve_lock(env_file, lock, [])
        lockfile.install_lock(lock, root / "env", cache_dir=root / "cache")
    else:
        from rocmfa.env import lockfile

        lockfile.run_rattler(solve_and_install())
    print("prefix complete:", (root / "env" / "bin" / "hello").is_file(), flush=True)


def loop(mode: str, runs: int) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            result = subprocess.run(
                [sys.executable, "-m", "tests.perf.rattler_exit_crash", "--child", mode, tmp],
                cwd=REPO_ROOT, capture_output=True, text=True, check=False, timeout=120,
            )  # fmt: skip
        complete = "prefix complete: True" in result.stdout
        if result.returncode < 0:
            outcomes[f"{signal.Signals(-result.returncode).name}{'' if complete else '*'}"] += 1
        elif result.returncode:
            outcomes[f"exit {result.returncode}"] += 1
        else:
            outcomes["ok" if complete else "ok-but-incomplete"] += 1
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--mode", choices=["naive", "guarded", "ours", "all"], default="all")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return 0
    import rattler

    print(f"py-rattler {rattler.__version__}, Python {sys.version.split()[0]}, cold cache")
    for mode in ("naive", "guarded", "ours") if args.mode == "all" else (args.mode,):
        outcomes = loop(mode, args.runs)
        crashed = sum(n for k, n in outcomes.items() if k.startswith("SIG"))
        detail = ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items()))
        print(f"{mode:8s} {crashed}/{args.runs} died of a signal ({detail})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
