"""The default bench suite's whole run against the seed script's, on the same GPU, taking turns:
seed, bench, seed, bench, ... (each a fresh process: interpreter start, torch import, the run).
bench writes its JSON and prints its table (`scripts/rocmfa/probes/bench.py --json PATH`, what `nox
-s
bench -- --json PATH` runs); the seed (lhl/strix-halo-testing torch-therock/05-attention-bench.py,
not part of this repository: give its path) prints its tables. Prints both walls side by side,
and the bench JSON files stay for an A/A comparison (`bench.py --compare`).

The seed imports triton.testing.do_bench and tabulate; when tabulate is not installed a
two-line stand-in (rows joined with spaces) is put on its PYTHONPATH, and said so.

Run: python -m tests.perf.bench_vs_seed SEED.py [--runs 2] [--bench-runs 4] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABULATE_STAND_IN = (
    "def tabulate(rows, headers=(), **kw):\n"
    "    return '\\n'.join(' '.join(str(x) for x in r) for r in [list(headers), *rows])\n"
)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    if done.returncode:
        print(f"{argv[1]} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    return wall, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed", help="path of the seed's 05-attention-bench.py")
    parser.add_argument("--runs", type=int, default=2, help="seed runs (default 2)")
    parser.add_argument("--bench-runs", type=int, default=2, help="bench runs (default 2)")
    parser.add_argument("--out-dir", default=".", help="where bench's aaN.json go")
    opts = parser.parse_args()
    out = Path(opts.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as shim:
        if importlib.util.find_spec("tabulate") is None:
            Path(shim, "tabulate.py").write_text(TABULATE_STAND_IN)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (shim, env.get("PYTHONPATH")) if p)
            print("tabulate is not installed: the seed prints through a stand-in")
        seed_walls, bench_walls = [], []
        for i in range(max(opts.runs, opts.bench_runs)):
            if i < opts.runs:
                seed_walls.append(timed([sys.executable, opts.seed], env)[0])
            if i < opts.bench_runs:
                bench = [sys.executable, str(ROOT / "scripts/rocmfa/probes/bench.py")]
                bench_walls.append(timed([*bench, "--json", str(out / f"aa{i + 1}.json")], env)[0])
    print(f"{'run':<5}{'seed 05-attention-bench.py s':>30}{'bench.py --json s':>20}")
    for i in range(max(len(seed_walls), len(bench_walls))):
        seed = f"{seed_walls[i]:.2f}" if i < len(seed_walls) else "-"
        ours = f"{bench_walls[i]:.2f}" if i < len(bench_walls) else "-"
        print(f"{i + 1:<5}{seed:>30}{ours:>20}")
    print(
        f"best: seed {min(seed_walls):.2f} s, bench {min(bench_walls):.2f} s; "
        f"bench / seed = {min(bench_walls) / min(seed_walls):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
