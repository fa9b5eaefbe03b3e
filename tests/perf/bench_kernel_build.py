"""Measure AOTriton's own build through the kernel store (scripts/rocmfa/builds/kernel_build.py):

1. the launcher's cost per kernel job (kernel_launcher.py, started by Ninja for every custom
   command): a staged hit and a pass-through, against a bare `python -I -S -c pass`; and the
   session's staging of --stage-jobs hits (from the local directory, and from redis);
2. the stand-in AOTriton (tests/support: real cmake + ninja, one custom command per job of
   Bare.compile, compile.py a stand-in that takes ~50 ms) with --signatures N jobs per kernel
   combination: `build_aotriton --cache redis://...` on machine 1, then on machine 2 (fresh
   work dir): whole-session wall time, compile.py runs, and Ninja's own per-job time
   (.ninja_log) for the kernel jobs;
3. with --real-tree/--python: a few real gfx1151 jobs with the real Triton through the same
   session code and launcher: compiled (miss) on machine 1, staged and launched (hit) on
   machine 2.
Load (os.getloadavg) is recorded beside the figures: the machine is shared.

Run: python -m tests.perf.bench_kernel_build [--signatures 100] [--hits 200]
     [--real-tree AOTRITON_CHECKOUT --python PY_WITH_TRITON --real-jobs 4] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from rocmfa.builds import kernel_build  # noqa: E402
from rocmfa.builds import kernel_check as kc  # noqa: E402
from rocmfa.plumbing.commands import Runner  # noqa: E402
from tests.perf.bench_kernel_store import finish, load  # noqa: E402
from tests.support import aotriton_generator_standin as gen  # noqa: E402

CMAKE = shutil.which("cmake") or "cmake"


def v3src_command(job: kernel_build.Job, compile_py: Path, build: Path) -> list[str]:
    """The COMMAND of v3src/CMakeLists.txt @ 6e00ef3e for one job (after the shell)."""
    env = [f"TRITON_CACHE_DIR={build}/triton-cache.{job.venv}", "TRITON_F32_DEFAULT=ieee"]
    env.append("TRITON_STORE_BINARY_ONLY=1")
    argv = kernel_build.compile_argv(job, job.python, compile_py, Path(job.hsaco))
    return [CMAKE, "-E", "env", *env, *argv]


def launch(kernels: kernel_build.KernelBuild, command: list[str]) -> float:
    argv = [*shlex.split(kernels.launcher()), *command]  # as Ninja starts it
    began = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - began


def mean_ms(argv: list[str], n: int) -> float:
    times = []
    for _ in range(n):
        began = time.perf_counter()
        subprocess.run(argv, check=True)
        times.append(time.perf_counter() - began)
    return round(statistics.mean(times) * 1000, 2)


def launcher_cost(root: Path, n: int) -> dict[str, object]:
    """A staged hit and a pass-through, against bare Python and the stand-in compile.py."""
    tree = root / "tree"
    for name, text in gen.generator_files().items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    source = tree / "modules" / gen.KERNELS[0][0]
    out = root / "build" / "k.hsaco"
    job = kernel_build.Job(1, "default", sys.executable, str(out), str(source), "attn_fwd", 4, 1,
                          2, "gfx1151", "*fp16:16, fp32, i32, 16, False")  # fmt: skip
    bench = kernel_build.Tree(tree, "0" * 40, None, "bench")
    kernels = kernel_build.KernelBuild(bench, root / "build", kernel_build.KernelStore(None), None)
    command = v3src_command(job, tree / "python" / "compile.py", root / "build")
    out.parent.mkdir(parents=True)
    compile_ms = mean_ms(command, max(5, n // 10))  # the stand-in compile itself, a miss
    compile_py = (tree / "python" / "compile.py").resolve()  # its run above left k.hsaco: a hit
    launcher = [sys.executable, "-I", "-S", str(kernel_build.LAUNCHER), str(compile_py)]
    launcher.append(str(kernels.build / kernel_build.ENV_FILE))
    return {
        "python_I_S_pass_ms": mean_ms([sys.executable, "-I", "-S", "-c", "pass"], n),
        "launcher_staged_hit_ms": mean_ms([*launcher, *command], n),
        "launcher_pass_through_true_ms": mean_ms([*launcher, "true"], n),
        "true_ms": mean_ms(["true"], n),
        "standin_compile_ms": compile_ms,
        "runs": n,
        "load": load(),
    }


def staging_cost(root: Path, n: int) -> dict[str, object]:
    """The session's staging of n jobs (keys, one batch lookup, digest checks, files put in
    place), every one a hit: from the local directory layer, and from redis into an empty one.
    Code objects of 25 KB, the size of a real one."""
    from tests.support.shared_cache import redis_server

    tree = root / "tree"
    for name, text in gen.generator_files().items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    source = str(tree / "modules" / gen.KERNELS[0][0])
    result: dict[str, object] = {"jobs": n}
    with redis_server(root / "redis") as url:
        for name in ("filled_from_redis", "local_directory"):
            build = root / "build"
            jobs = [
                kernel_build.Job(i + 1, "default", sys.executable,
                                str(build / "v3src" / "k" / f"attn_fwd-{i}.hsaco"), source,
                                "attn_fwd", 4, 1, 2, "gfx1151", f"*fp16:16, i32, {i}")
                for i in range(n)
            ]  # fmt: skip
            (build / "v3src" / "k").mkdir(parents=True, exist_ok=True)
            (build / kernel_build.BARE).write_text("".join(_line(j) + "\n" for j in jobs))
            store = kernel_build.open_store(url, root / name, "gfx1151", say=print)
            assert store is not None
            standin = kernel_build.Tree(tree, "0" * 40, None, "3.5.1")
            kernels = kernel_build.KernelBuild(standin, build, store, None)
            if name == "filled_from_redis":  # machine 1 put every entry there
                context = standin.key_context(build=False)
                for key in context.keys(jobs):
                    blob = kernel_build.pack(os.urandom(25_000), b'{"num_warps": 4}')
                    store.put(key, blob)
                store = kernel_build.open_store(url, root / "empty", "gfx1151", say=print)
                assert store is not None
                kernels.store = store
            began = time.perf_counter()
            kernels.stage(Runner(out=io.StringIO()))
            wall = time.perf_counter() - began
            assert len(kernels.hits) == n, len(kernels.hits)
            kernels.harvest(Runner(out=io.StringIO()))
            shutil.rmtree(build)
            result[name] = {"wall_s": round(wall, 2), "per_job_ms": round(wall / n * 1000, 2)}
            result[name]["load"] = load()  # type: ignore[index]
    return result


def ninja_job_ms(build: Path) -> dict[str, float]:
    """Ninja's own wall time per kernel job (.ninja_log: start, end ms, mtime, output, command
    hash; one line per output, and CMake names each output twice: relative and absolute)."""
    edges: dict[str, int] = {}
    for line in (build / ".ninja_log").read_text().splitlines()[1:]:
        start, end, _, output, command = line.split("\t")
        if output.endswith(".hsaco"):
            edges[command] = int(end) - int(start)
    spans = list(edges.values())
    return {"jobs": len(spans), "mean_ms": round(statistics.mean(spans), 1) if spans else 0.0}


def standin_builds(root: Path, signatures: int) -> dict[str, object]:
    from rocmfa.builds import build_aotriton as ba
    from tests.support import pep503, standin_rocm
    from tests.support.aotriton_env import build_opts, provision_env
    from tests.support.shared_cache import redis_server
    from tests.test_kernel_check import make_tree

    wheels = standin_rocm.build_wheels(root / "wheels")
    pep503.write_index(wheels, root / "www")
    with pep503.serve(root / "www") as base:
        index_pins = root / "index-pins"
        standin_rocm.write_rocm_pin(index_pins, f"{base}/simple/")
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet):
            prefix = provision_env(root / "env" / "therock", index_pins)
    tree = make_tree(root, gen.generator_files(signatures))
    os.environ.update(tree.env())
    result: dict[str, object] = {"jobs": gen.combos() * signatures}
    with redis_server(root / "redis") as url:
        for name in ("machine_1", "machine_2"):
            work = root / name
            began = time.monotonic()
            with contextlib.redirect_stdout(io.StringIO()):
                ba.build_aotriton(build_opts(prefix, work, "--cache", url, "--jobs", "2"))
            wall = time.monotonic() - began
            build = work / "build" / "aotriton"
            log = build / "triton-cache.default" / "compile.log"
            result[name] = {
                "build_aotriton_wall_s": round(wall, 2),
                "compile_py_runs": len(log.read_text().splitlines()) if log.is_file() else 0,
                "ninja_per_kernel_job": ninja_job_ms(build),
                "load": load(),
            }
            print(name, result[name], flush=True)
    return result


def real_jobs(root: Path, tree_dir: Path, python: str, n: int) -> dict[str, object]:
    """n real jobs (stratified) with the real Triton: machine 1 compiles through the launcher,
    machine 2 gets them staged from the store and launches them."""
    src = root / "real" / "src" / "aotriton"
    src.parent.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", str(tree_dir), str(src)], check=True)
    commit = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    version = kernel_build.recorded_triton(commit) or ""
    tree = kc.Tree(src, commit, "gfx1151", version)
    began = time.monotonic()
    kc.generate(tree, python, Runner(out=io.StringIO()))
    generator_s = time.monotonic() - began
    chosen = kernel_build.sample(kernel_build.read_jobs(tree.build / "Bare.compile"), n)
    out: dict[str, object] = {"generator_s": round(generator_s, 1), "jobs": len(chosen)}
    store_dir = root / "real" / "store"
    for name in ("machine_1", "machine_2"):
        build = root / "real" / name
        jobs = [
            kernel_build.Job(j.line, j.venv, python, str(build / "v3src" / f"{j.line}.hsaco"),
                            j.source, j.kernel, j.num_warps, j.num_stages, j.waves_per_eu,
                            j.target, j.signature)
            for j in chosen
        ]  # fmt: skip
        bare = build / kernel_build.BARE
        bare.parent.mkdir(parents=True)
        bare.write_text("".join(_line(j) + "\n" for j in jobs))
        store = kernel_build.KernelStore(kernel_build.directory(store_dir))
        kernels = kernel_build.KernelBuild(
            kernel_build.Tree(src, commit, None, version), build, store, None
        )
        runner = Runner(out=io.StringIO())
        began = time.perf_counter()
        kernels.stage(runner)
        staging = time.perf_counter() - began
        compile_py = src / "python" / "compile.py"
        times = [launch(kernels, v3src_command(j, compile_py, build)) for j in jobs]
        began = time.perf_counter()
        kernels.harvest(runner)
        harvest = time.perf_counter() - began
        out[name] = {
            "staged": len(kernels.hits),
            "stage_s": round(staging, 3),
            "per_job_s": [round(t, 3) for t in times],
            "harvest_s": round(harvest, 3),
            "total_s": round(staging + sum(times) + harvest, 3),
            "load": load(),
        }
        print(name, out[name], flush=True)
    first, second = out["machine_1"]["total_s"], out["machine_2"]["total_s"]  # type: ignore[index]
    out["ratio"] = round(second / first, 4)
    return out


def _line(job: kernel_build.Job) -> str:
    fields = [job.venv, job.python, job.hsaco, job.source, job.kernel, job.num_warps,
              job.num_stages, job.waves_per_eu, job.target, job.signature]  # fmt: skip
    return ";".join(str(f) for f in fields)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--signatures", type=int, default=100, help="jobs per kernel combination")
    parser.add_argument("--hits", type=int, default=200, help="launcher runs to average")
    parser.add_argument("--real-tree", type=Path, help="a checkout of ROCm/aotriton at the pin")
    parser.add_argument("--python", help="a Python with the recorded triton (with --real-tree)")
    parser.add_argument("--real-jobs", type=int, default=4)
    parser.add_argument("--skip-standin", action="store_true")
    parser.add_argument("--stage-jobs", type=int, default=5000, help="jobs staged (0: none)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    out: dict[str, object] = {"cpus": os.cpu_count(), "start": load()}
    with tempfile.TemporaryDirectory(prefix="rocmfa-kernel-build-bench-") as tmp:
        root = Path(tmp)
        out["launcher"] = launcher_cost(root / "launcher", args.hits)
        print("launcher:", out["launcher"], flush=True)
        if args.stage_jobs:
            out["staging"] = staging_cost(root / "staging", args.stage_jobs)
            print("staging:", out["staging"], flush=True)
        if not args.skip_standin:
            out["standin_build"] = standin_builds(root / "standin", args.signatures)
        if args.real_tree and args.python:
            out["real_triton"] = real_jobs(root, args.real_tree, args.python, args.real_jobs)
    return finish(out, args.json)


if __name__ == "__main__":
    sys.exit(main())
