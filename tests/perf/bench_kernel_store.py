"""Measure AOTriton's real kernel compiles on this CPU-only machine (docs/kernel-check.md):

1. `nox -s kernel_check -- --arch gfx1151 --cache none` end to end (generator + sample);
2. a sample of real jobs (kernel_build.sample, default 200) on "machine 1" (own work dir, 2
   threads) into a shared store (a real redis-server on loopback), then the same jobs on
   "machine 2" (another work dir) from that store: the ratio of their wall times;
3. a (smaller) sample through the Dask engine, cold: one worker process, then two (a fresh
   cluster, store and worker folders each, one thread per worker; Triton's cache is per job),
   and the disk each worker keeps after its run (and after it stops).
Load (os.getloadavg) is recorded beside every figure: the machine is shared. The temp tree goes
at the end.

Run: python -m tests.perf.bench_kernel_store --tree AOTRITON_CHECKOUT --python PY_WITH_TRITON
     [--arch gfx1151] [--sample 200] [--cluster-sample 40] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rocmfa.builds import kernel_build
from rocmfa.builds import kernel_check as kc
from rocmfa.plumbing.commands import Runner
from tests.support.shared_cache import redis_server

REPO_ROOT = Path(__file__).resolve().parents[2]


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def machine(
    name: str, root: Path, tree: kc.Tree, python: str, jobs, keys, url: str
) -> dict[str, object]:
    """All jobs on one 'machine': its own dirs and Triton cache, the shared store at url."""
    here = root / name
    store = kernel_build.open_store(url, here, tree.arch, say=print)
    assert store is not None and store.shared is not None
    compiler = kernel_build.Compiler(python, tree.src / "python" / "compile.py")  # cache per job
    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(
            pool.map(
                lambda job: kernel_build.build_kernel(
                    job, keys[job.line], compiler, store, here / "out" / f"{job.line}.hsaco"
                ),
                jobs,
            )
        )
    wall = time.monotonic() - began
    hits = sum(1 for how, _ in results if how == "hit")
    return {"wall_s": round(wall, 2), "jobs": len(jobs), "from_store": hits, "load": load()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True, help="AOTriton checkout at the pin")
    parser.add_argument("--python", required=True, help="a Python with the recorded triton")
    parser.add_argument("--arch", default="gfx1151")
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--cluster-sample", type=int, default=40)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--skip-check", action="store_true", help="leave out step 1")
    parser.add_argument(
        "--parts", default="store,engine", help="which of steps 2-4 to run: store,engine"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rocmfa-kernel-bench-") as tmp:
        return finish(measure(Path(tmp), args), args.json)


def measure(root: Path, args: argparse.Namespace) -> dict[str, object]:
    work = root / "work"
    src = work / "src" / "aotriton"
    src.parent.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", str(args.tree), str(src)], check=True)
    os.environ[kernel_build.PYTHON_ENV] = (
        args.python
    )  # the keys name its Triton build, as the workers'
    env = dict(os.environ)
    out: dict[str, object] = {"arch": args.arch, "cpus": os.cpu_count(), "start": load()}
    nox = [sys.executable, "-m", "nox", "-s", "kernel_check", "--", "--arch", args.arch]
    nox += ["--workdir", str(work), "--cache", "none"]
    if args.skip_check:
        commit = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        triton = kernel_build.recorded_triton(commit) or ""
        tree = kc.Tree(src, commit, args.arch, triton)
        kc.generate(tree, args.python, Runner())
    else:
        began = time.monotonic()
        subprocess.run(nox, cwd=REPO_ROOT, env=env, check=True)
        summary = json.loads(
            (work / "build" / "kernel-check" / f"aotriton-{args.arch}" / kc.SUMMARY).read_text()
        )
        out["kernel_check"] = {
            "wall_s": round(time.monotonic() - began, 2),
            "inner_wall_s": summary["wall_s"],
            "sampled": summary["sampled"],
            "jobs": summary["jobs"],
            "load": load(),
        }
        print("kernel_check:", out["kernel_check"], flush=True)
        commit = summary["aotriton_commit"]
        tree = kc.Tree(src, commit, args.arch, summary["triton"])
    jobs = kernel_build.read_jobs(tree.build / "Bare.compile")
    parts = args.parts.split(",")
    if "store" in parts:
        out["shared_store"] = shared_store(root, tree, args.python, jobs, args.sample)
    if "engine" in parts:
        out["engine"] = engine(root, tree, args.python, jobs, args.cluster_sample)
    return out


def finish(out: dict[str, object], path: Path | None) -> int:
    """The end load, then the figures on screen and (path) as JSON."""
    out["end"] = load()
    text = json.dumps(out, indent=2)
    print(text)
    if path:
        path.write_text(text + "\n")
    return 0


def shared_store(root: Path, tree: kc.Tree, python: str, jobs, size: int) -> dict[str, object]:
    chosen = kernel_build.sample(jobs, size)
    context = tree.key_context()
    keys = {job.line: key for job, key in zip(chosen, context.keys(chosen), strict=True)}
    with redis_server(root / "redis") as url:
        first = machine("machine-1", root, tree, python, chosen, keys, url)
        print("machine 1:", first, flush=True)
        second = machine("machine-2", root, tree, python, chosen, keys, url)
        print("machine 2:", second, flush=True)
    return {
        "first": first,
        "second": second,
        "ratio": round(second["wall_s"] / first["wall_s"], 4),  # type: ignore[operator]
    }


def disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def engine(root: Path, tree: kc.Tree, python: str, jobs, size: int) -> dict[str, object]:
    """The same jobs, cold, on one worker then on two; what each worker keeps afterwards."""
    from tests.support.dask_cluster import dask_cluster

    small = kernel_build.sample(jobs, size)
    result: dict[str, object] = {"jobs": len(small)}
    for workers in (1, 2):
        where = root / f"dask-{workers}"
        with (
            redis_server(root / f"redis-{workers}") as url,
            dask_cluster(where, workers, {kernel_build.PYTHON_ENV: python}) as (scheduler, _),
        ):
            began = time.monotonic()
            counts = kernel_build.fan_out(tree, scheduler, url, Runner(), jobs=small)
            wall = round(time.monotonic() - began, 2)
            kept = [disk(where / f"w{n}") for n in range(workers)]
        result[f"{workers}_worker"] = {
            "wall_s": wall,
            "counts": counts,
            "bytes_kept_per_worker_after_run": kept,
            "bytes_kept_per_worker_after_stop": [disk(where / f"w{n}") for n in range(workers)],
            "load": load(),
        }
        print(f"{workers} worker(s):", result[f"{workers}_worker"], flush=True)
    one = result["1_worker"]["wall_s"]  # type: ignore[index]
    result["speedup"] = round(one / result["2_worker"]["wall_s"], 3)  # type: ignore[index]
    return result


if __name__ == "__main__":
    sys.exit(main())
