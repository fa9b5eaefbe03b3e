"""Opt-in evidence on the real ROCm/aotriton tree: the gfx908 patch set
(patches/aotriton/<pinned commit>/) applied by our own patch engine, AOTriton's own generator
run for gfx908 on CPU, and a sample of the real gfx908 kernels compiled with real Triton.

    ROCMFA_AOTRITON_REAL_GIT  a git dir of ROCm/aotriton holding pins/aotriton.toml's commit
    ROCMFA_TRITON_PYTHON      a python with triton==3.5.1, numpy, pandas and pyyaml (AOTriton's
                              requirements.txt); nothing of AOTriton needs to be installed
    ROCMFA_GFX908_SAMPLE      kernels to compile (default 56), ROCMFA_GFX908_JOBS processes
                              (default 2), ROCMFA_GFX908_REPORT a JSON file for the figures

The steps are the ones AOTriton's v3src/CMakeLists.txt runs (at 6e00ef3e): aotriton.gpu_targets
turns the arch into GPU ids, every modules/database/**/*.sqlite3.tar.xz is extracted and
composed by aotriton.database_compose, aotriton.generate writes Bare.compile (one kernel a line:
alt name; python; output; source; kernel; num_warps; num_stages; waves_per_eu; arch;
signature), and each job is python/compile.py with the variables the add_custom_command sets.
The python/ folder is the `aotriton` package (pyproject.toml there); a symlink on PYTHONPATH
stands in for `pip install -e`. Triton 3.5.1 from PyPI carries the AMD backend and compiles
without ROCm or a GPU (3.4.0 and 3.9.0 fail on the first attn_fwd job).
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import load_toml
from rocmfa.plumbing.options import PINS_DIR
from rocmfa.sources import checkouts
from rocmfa.sources.checkouts import ensure_checkout
from rocmfa.sources.pins import Pin
from tests.support.real_trees import borrow_snapshot

AOTRITON_GIT = os.environ.get("ROCMFA_AOTRITON_REAL_GIT")
TRITON_PYTHON = os.environ.get("ROCMFA_TRITON_PYTHON")
pytestmark = pytest.mark.skipif(
    not (AOTRITON_GIT and TRITON_PYTHON),
    reason="set ROCMFA_AOTRITON_REAL_GIT (a ROCm/aotriton git snapshot) and ROCMFA_TRITON_PYTHON "
    "(a python with triton==3.5.1, numpy, pandas, pyyaml)",
)
ARCH, GPU = "gfx908", "gfx908_mod0"
FIELDS = ("alt", "python", "out", "src", "kernel", "warps", "stages", "waves", "arch", "sig")


def sample(jobs: list[dict[str, str]], size: int) -> list[dict[str, str]]:
    """fp16 jobs only (what MI100 is validated for): one per distinct (kernel, num_warps,
    num_stages, waves_per_eu), then evenly spaced ones up to size."""
    fp16 = [j for j in jobs if j["sig"].startswith("*fp16")]
    chosen: dict[str, dict[str, str]] = {}
    for job in fp16:
        chosen.setdefault("|".join(job[k] for k in ("kernel", "warps", "stages", "waves")), job)
    picked = list(chosen.values())
    step = max(1, len(fp16) // max(1, size - len(picked)))
    for job in fp16[::step]:
        if len(picked) >= size:
            break
        if job not in picked:
            picked.append(job)
    return picked


def run_tool(tree: Path, pkg: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pkg)}
    return subprocess.run(
        [TRITON_PYTHON, "-X", "utf8", *argv], cwd=tree, env=env, capture_output=True, text=True
    )


def compile_job(tree: Path, pkg: Path, work: Path, job: dict[str, str]) -> tuple[bool, float, str]:
    out = work / "hsaco" / Path(job["out"]).name
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(pkg),
        "TRITON_CACHE_DIR": str(work / f"triton-cache.{job['alt']}"),
        "TRITON_F32_DEFAULT": "ieee",
        "TRITON_STORE_BINARY_ONLY": "1",
    }
    argv = [TRITON_PYTHON, str(tree / "python" / "compile.py"), job["src"]]
    argv += ["--kernel_name", job["kernel"], "-o", str(out), "-g", "1,1,1"]
    argv += ["--num_warps", job["warps"], "--num_stages", job["stages"]]
    argv += ["--waves_per_eu", job["waves"], "--target", job["arch"], "--signature", job["sig"]]
    argv += ["--timeout", "8.0"]
    start = time.monotonic()
    result = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    took = time.monotonic() - start
    ok = result.returncode == 0 and out.is_file() and out.stat().st_size > 0
    return ok, took, (result.stderr or result.stdout)[-400:]


@pytest.mark.slow
def test_gfx908_patch_set_generator_and_kernels_on_the_real_tree(tmp_path: Path) -> None:
    table = load_toml(PINS_DIR / "aotriton.toml", "pin")["aotriton"]
    commit = table["commit"]
    tree = tmp_path / "aotriton"
    borrow_snapshot(AOTRITON_GIT, tree, commit)
    pin = Pin("aotriton", f"file://{AOTRITON_GIT}", table["ref"], commit, "real", {})
    runner = Runner(out=open(os.devnull, "w"))  # noqa: SIM115 (closed with the process)
    ensure_checkout(pin, tree, runner)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "aotriton").symlink_to(tree / "python")
    report: dict[str, object] = {"aotriton_commit": commit, "arch": ARCH}

    unpatched = run_tool(tree, pkg, "-m", "aotriton.gpu_targets", "--target_arch", ARCH)
    assert GPU not in unpatched.stdout  # 0.13b itself has no gfx908
    applied = checkouts.apply_patch_set("aotriton", commit, tree, runner)
    assert len(applied) == len(checkouts.patch_set_for("aotriton", commit).patches) >= 1
    gpus = run_tool(tree, pkg, "-m", "aotriton.gpu_targets", "--target_arch", ARCH)
    assert gpus.stdout.split() == [GPU], gpus.stderr[-2000:]
    report["patches"] = [p.name for p in checkouts.patch_set_for("aotriton", commit).patches]

    build = tmp_path / "build"
    base = tree / "modules" / "database"
    for archive in sorted(base.rglob("*.sqlite3.tar.xz")):
        into = build / "database" / archive.parent.relative_to(base)
        into.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
    start = time.monotonic()
    composed = run_tool(
        tree,
        pkg,
        *("-m", "aotriton.database_compose"),
        *("--database_file", str(build / "database" / "tuning_database.sqlite3")),
        *("--decomposed", str(build / "database")),
    )
    assert composed.returncode == 0, composed.stderr[-2000:]
    generated = run_tool(
        tree,
        pkg,
        *("-m", "aotriton.generate", "--target_gpus", GPU),
        *("--build_dir", str(build), "--root_dir", str(tree)),
    )
    report["generator_s"] = round(time.monotonic() - start, 1)
    assert generated.returncode == 0, generated.stderr[-2000:]
    lines = (build / "Bare.compile").read_text().splitlines()
    jobs = [dict(zip(FIELDS, line.split(";", 9), strict=True)) for line in lines]
    assert jobs and {j["arch"] for j in jobs} == {ARCH}
    families = sorted({j["kernel"] for j in jobs})
    report["jobs"] = len(jobs)
    report["fp16_jobs"] = sum(j["sig"].startswith("*fp16") for j in jobs)
    report["jobs_by_family"] = {f: sum(j["kernel"] == f for j in jobs) for f in families}

    picked = sample(jobs, int(os.environ.get("ROCMFA_GFX908_SAMPLE", "56")))
    assert {j["kernel"] for j in picked} == set(families)
    workers = int(os.environ.get("ROCMFA_GFX908_JOBS", "2"))
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda j: compile_job(tree, pkg, tmp_path, j), picked))
    wall = time.monotonic() - start
    failed = [
        (j["kernel"], j["out"], why)
        for j, (ok, _t, why) in zip(picked, results, strict=True)
        if not ok
    ]
    report["sample"] = {
        "compiled": sum(ok for ok, _t, _w in results),
        "of": len(picked),
        "by_family": {f: sum(j["kernel"] == f for j in picked) for f in families},
        "processes": workers,
        "wall_s": round(wall, 1),
        "mean_job_s": round(sum(t for _ok, t, _w in results) / len(results), 2),
        "triton": run_tool(tree, pkg, "-c", "import triton; print(triton.__version__)").stdout,
    }
    if os.environ.get("ROCMFA_GFX908_REPORT"):
        Path(os.environ["ROCMFA_GFX908_REPORT"]).write_text(json.dumps(report, indent=1) + "\n")
    assert failed == [], failed[:3]
    assert len(picked) >= 50
