"""build_aotriton's own cmake + `ninja install` through the kernel store: the stand-in AOTriton
(its CMakeLists.txt turns Bare.compile into one add_custom_command per job, as v3src/
CMakeLists.txt at 6e00ef3e does) built with the real cmake and ninja, every custom command
through our launcher (RULE_LAUNCH_CUSTOM); "machines" are separate work dirs; the stand-in
compile.py logs every run, so the tests count the compiles."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocmfa.builds import build_aotriton as ba
from rocmfa.builds import kernel_build
from rocmfa.plumbing.errors import UserError
from rocmfa.sources.checkouts import patch_set_digest
from tests.support import aotriton_generator_standin as gen
from tests.support.aotriton_env import build_opts, provision_env
from tests.support.shared_cache import REDIS, free_port, redis_server
from tests.test_kernel_check import Tree, make_tree

JOBS = sum(gen.jobs_per_family().values())


@dataclass
class Bed:
    tree: Tree
    prefix: Path


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory, rocm_index) -> Bed:
    root = tmp_path_factory.mktemp("kernel-build")
    prefix = provision_env(root / "env" / "therock", rocm_index.pins_dir)
    return Bed(make_tree(root), prefix)


@pytest.fixture(autouse=True)
def _env(bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in bed.tree.env().items():
        monkeypatch.setenv(key, value)


def build(bed: Bed, work: Path, capsys, *extra: str) -> str:
    capsys.readouterr()
    ba.build_aotriton(build_opts(bed.prefix, work, *extra))
    return capsys.readouterr().out


def compiles(work: Path) -> list[str]:
    """The stand-in compile.py runs of the build itself (not of its kernel check)."""
    log = work / "build" / "aotriton" / "triton-cache.default" / "compile.log"
    return log.read_text().splitlines() if log.is_file() else []


def image(work: Path) -> str:
    """The installed stand-in image: the sha256 of every code object the build packed."""
    pack = work / "build" / "aotriton" / "install" / "lib" / "aotriton.images" / "amd-gfx115x"
    return (pack / "kernels.aks2").read_text()


def installed_triton(work: Path) -> str:
    return (work / "build" / "aotriton" / "venv" / "triton-installed.txt").read_text().strip()


def build_keys(work: Path, commit: str) -> list[str]:
    """The keys of the build's jobs, with the fork the build compiled with."""
    src = work / "src" / "aotriton"
    jobs = kernel_build.read_jobs(work / "build" / "aotriton" / kernel_build.BARE)
    head = subprocess.run(["git", "-C", src / "third_party/triton", "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    context = kernel_build.KeyContext(
        f"fork third_party/triton@{head}",
        patch_set_digest("aotriton", commit),
        hashlib.sha256((src / "python" / "compile.py").read_bytes()).hexdigest(),
    )
    return context.keys(jobs)


def test_second_machine_gets_every_kernel_from_the_store_read_only_writes_nothing(
    bed: Bed, tmp_path: Path, capsys
) -> None:
    import redis

    if REDIS is None:
        pytest.skip("redis-server not installed")
    with redis_server(tmp_path / "redis") as url:
        first, second, third = tmp_path / "m1", tmp_path / "m2", tmp_path / "m3"
        out = build(bed, first, capsys, "--cache", url)
        assert len(compiles(first)) == JOBS, out
        assert "fork third_party/triton@" in out
        assert installed_triton(first).endswith("third_party/triton")
        assert len(image(first).splitlines()) == JOBS
        assert f"0 kernels from the store, {JOBS} compiled by the build, stored in" in out
        # the second machine: every kernel from the store, not one compile.py run
        out = build(bed, second, capsys, "--cache", url)
        assert compiles(second) == [], out
        assert f"kernel store: {JOBS} of {JOBS} kernel jobs of the build from" in out
        assert image(second) == image(first)
        # one entry damaged in redis, one gone; read_only=1: the damaged one is reported, both
        # compile, nothing is written (the damaged entry stays as it was)
        client, prefix = redis.Redis.from_url(url), "rocmfa-kernels/gfx1151"
        keys = build_keys(first, bed.tree.commit)
        bad = (client.get(f"{prefix}/{keys[2]}") or b"")[:-5]
        client.set(f"{prefix}/{keys[2]}", bad)
        client.delete(f"{prefix}/{keys[3]}")
        size = client.dbsize()
        out = build(bed, third, capsys, "--cache", url + "?read_only=1")
        assert len(compiles(third)) == 2 and image(third) == image(first), out
        assert out.count(f"kernel store: damaged entry {keys[2][:16]} in redis") == 1
        assert client.dbsize() == size
        assert client.get(f"{prefix}/{keys[2]}") == bad


def local_path(work: Path, key: str) -> Path:
    return work / ".cache" / kernel_build.LOCAL_DIR / "gfx1151" / key[:2] / f"{key}.kernel"


def test_damaged_entry_is_recompiled_never_installed(bed: Bed, tmp_path: Path, capsys) -> None:
    work = tmp_path / "m1"
    build(bed, work, capsys)  # the local directory store (no --cache)
    good = image(work)
    local = kernel_build.directory(work / ".cache" / kernel_build.LOCAL_DIR / "gfx1151")
    keys = build_keys(work, bed.tree.commit)
    flipped, cut = (local_path(work, keys[i]) for i in (0, 5))
    whole = flipped.read_bytes()
    flipped.write_bytes(whole[:-1] + bytes([whole[-1] ^ 1]))
    cut.write_bytes(cut.read_bytes()[:-9])
    out = build(bed, work, capsys, "--clean")
    assert len(compiles(work)) == 2, out
    assert out.count("kernel store: damaged entry") == 2
    assert image(work) == good
    assert local.get(keys[0]) == whole and kernel_build.unpack(local.get(keys[5]) or b"")


def test_another_triton_in_the_same_build_dir_rebuilds_every_kernel(
    bed: Bed, tmp_path: Path, capsys
) -> None:
    """AOTriton's kernel jobs depend on neither Triton nor their sources: ninja alone would keep
    the fork's code objects after a switch to --triton pypi. The key manifest drops them."""
    work = tmp_path / "m1"
    build(bed, work, capsys)
    fork = image(work)
    out = build(bed, work, capsys, "--triton", "pypi")
    assert installed_triton(work) == "triton==3.5.1"
    # the kernel check's sample (same Triton, same keys) comes from the store; the rest compile
    assert len(compiles(work)) == JOBS + JOBS - gen.combos(), out
    assert f"kernel store: {gen.combos()} of {JOBS} kernel jobs of the build from" in out
    assert image(work) == fork  # the stand-in's code objects do not depend on Triton


def test_unreachable_store_is_one_warning_and_a_local_build(
    bed: Bed, tmp_path: Path, capsys
) -> None:
    work = tmp_path / "m1"
    out = build(bed, work, capsys, "--cache", f"redis://127.0.0.1:{free_port()}")
    warnings = [line for line in out.splitlines() if line.startswith("WARNING: kernel store")]
    assert len(warnings) == 1, out
    assert len(compiles(work)) == JOBS and len(image(work).splitlines()) == JOBS


def test_cache_none_builds_without_the_launcher(bed: Bed, tmp_path: Path, capsys) -> None:
    work = tmp_path / "m1"
    out = build(bed, work, capsys, "--cache", "none")
    assert "CMAKE_PROJECT_INCLUDE" not in out and "kernel jobs of the build" not in out
    assert len(compiles(work)) == JOBS and len(image(work).splitlines()) == JOBS
    assert "RULE_LAUNCH_CUSTOM" not in (work / "build" / "aotriton" / "CMakeCache.txt").read_text()


def test_dry_run_shows_the_launcher_and_the_staging(bed: Bed, tmp_path: Path, capsys) -> None:
    work = tmp_path / "m1"
    redis = ["--cache", "redis://127.0.0.1:1"]  # a plan asks nothing of it
    plan = build(bed, work, capsys, "--dry-run", "--triton", "pypi", *redis)
    assert f"-DCMAKE_PROJECT_INCLUDE={kernel_build.LAUNCHER.with_suffix('.cmake')}" in plan
    assert "-DROCMFA_KERNEL_LAUNCHER=" in plan and "kernel_launcher.py" in plan
    assert "-DAOTRITON_USE_LOCAL_TRITON_WHEEL=triton==3.5.1" in plan
    assert "[dry-run] then look every job of" in plan and "keys name triton 3.5.1)," in plan
    assert "kernel store (redis redis://127.0.0.1:1 over directory " in plan
    assert "CacheSpec(" not in plan
    assert plan.index("[dry-run] then look every job") < plan.index(" install")
    plain = build(bed, work, capsys, "--dry-run", "--cache", "none")
    assert "CMAKE_PROJECT_INCLUDE" not in plain and "look every job" not in plain
    with pytest.raises(UserError, match="drop --triton fork"):
        build(bed, work, capsys, "--dry-run", "--triton", "fork", "--workers", "tcp://h:8786")


def test_workers_fill_the_store_and_the_build_compiles_nothing(
    bed: Bed, tmp_path: Path, capsys
) -> None:
    """Item 3: --workers (implying --triton pypi) compiles every job on a two-worker Dask
    cluster into redis; the local AOTriton build then finds every kernel there."""
    pytest.importorskip("distributed", reason="the optional extra: pip install -e '.[cluster]'")
    if REDIS is None:
        pytest.skip("redis-server not installed")
    from tests.support.dask_cluster import dask_cluster

    work = tmp_path / "m1"
    python = {"ROCMFA_KERNEL_PYTHON": os.environ["ROCMFA_KERNEL_PYTHON"]}
    with (
        redis_server(tmp_path / "redis") as url,
        dask_cluster(tmp_path / "dask", 2, python) as (scheduler, _),
    ):
        out = build(bed, work, capsys, "--cache", url, "--workers", scheduler)
    assert f"--workers: {JOBS - gen.combos()} compiled" in out, out
    assert compiles(work) == [], out
    assert installed_triton(work) == "triton==3.5.1"
    assert len(image(work).splitlines()) == JOBS


def _launch(tmp_path: Path, *command: str) -> int:
    compile_py = (tmp_path / "tree" / "python" / "compile.py").resolve()
    argv = [sys.executable, "-I", "-S", str(kernel_build.LAUNCHER), str(compile_py)]
    argv.append(str(tmp_path / kernel_build.ENV_FILE))
    return subprocess.run([*argv, *command], capture_output=True, check=False).returncode


def test_launcher_skips_a_job_whose_code_object_is_there_and_passes_others_through(
    tmp_path: Path,
) -> None:
    failing = gen.KERNEL_SOURCE.format(helper="helpers", kernel="bwd_kernel_dq")
    files = {
        **gen.generator_files(),
        "modules/flash/kernel/bwd_kernel_dq.py": failing + gen.FAILING_HOOK.format(warps=4),
    }
    for name, content in files.items():
        target = tmp_path / "tree" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert _launch(tmp_path, "sh", "-c", "exit 3") == 3  # not a kernel job: unchanged
    (tmp_path / "out").mkdir()  # the generator makes the image folders

    def job(kernel: str, source: str, timeout: str) -> list[str]:
        out = tmp_path / "out" / f"{kernel}-{timeout}.hsaco"
        src = tmp_path / "tree" / "modules" / "flash" / "kernel" / source
        one = kernel_build.Job(1, "default", sys.executable, str(out), str(src), kernel, 4, 1, 1,
                              "gfx1151", "*fp16:16, i32, 16")  # fmt: skip
        compile_py = tmp_path / "tree" / "python" / "compile.py"
        argv = kernel_build.compile_argv(one, sys.executable, compile_py, out, timeout=timeout)
        return ["cmake", "-E", "env", f"TRITON_CACHE_DIR={tmp_path}/tc", *argv]

    def runs() -> int:  # the stand-in compile.py logs each run
        log = tmp_path / "tc" / "compile.log"
        return len(log.read_text().splitlines()) if log.is_file() else 0

    assert _launch(tmp_path, *job("attn_fwd", "fwd_kernel.py", "0")) == 0 and runs() == 1
    assert (tmp_path / "out" / "attn_fwd-0.hsaco").stat().st_size > 0
    assert _launch(tmp_path, *job("attn_fwd", "fwd_kernel.py", "0")) == 0 and runs() == 1
    # compile.py --timeout > 0 exits 0 on a failed compile and leaves an empty code object,
    # which is no reason to skip the job
    assert _launch(tmp_path, *job("bwd_kernel_dq", "bwd_kernel_dq.py", "8.0")) == 0
    assert (tmp_path / "out" / "bwd_kernel_dq-8.0.hsaco").read_bytes() == b""
    assert _launch(tmp_path, *job("bwd_kernel_dq", "bwd_kernel_dq.py", "8.0")) == 0
    assert runs() == 3
    assert _launch(tmp_path, *job("bwd_kernel_dq", "bwd_kernel_dq.py", "0")) != 0


def test_launcher_gives_a_kernel_job_the_keys_triton_settings_only(
    tmp_path: Path, monkeypatch
) -> None:
    """Whatever ninja's environment holds, a compile sees the settings its key names."""
    import json

    compile_py = tmp_path / "tree" / "python" / "compile.py"
    compile_py.parent.mkdir(parents=True)
    dump = "json.dump(dict(os.environ), open(out[:-6] + '.json', 'w'))"
    compile_py.write_text(
        f"import json, os, sys\nout = sys.argv[-1]\nopen(out, 'w').write('x')\n{dump}\n"
    )
    given = {"knobs": ["AMDGCN_USE_BUFFER_OPS"], "env": {"TRITON_DEFAULT_FP_FUSION": "0"}}
    (tmp_path / kernel_build.ENV_FILE).write_text(json.dumps(given))
    monkeypatch.setenv("AMDGCN_USE_BUFFER_OPS", "1")
    monkeypatch.setenv("TRITON_SOMETHING", "1")
    out = tmp_path / "k.hsaco"
    assert _launch(tmp_path, sys.executable, str(compile_py), "-o", str(out)) == 0
    env = json.loads(out.with_suffix(".json").read_text())
    assert env["TRITON_DEFAULT_FP_FUSION"] == "0" and "PATH" in env
    assert "AMDGCN_USE_BUFFER_OPS" not in env and "TRITON_SOMETHING" not in env


REAL_TREE = os.environ.get("ROCMFA_REAL_AOTRITON_TREE")
REAL_PYTHON = os.environ.get("ROCMFA_KERNEL_PYTHON")  # read before the fixtures set a stand-in


@pytest.mark.skipif(
    not REAL_TREE or not REAL_PYTHON,
    reason="set ROCMFA_REAL_AOTRITON_TREE (a checkout of ROCm/aotriton at the pinned commit) and "
    "ROCMFA_KERNEL_PYTHON (a Python with the recorded triton) to run real kernels through the "
    "launcher",
)
def test_real_kernels_through_the_launcher(tmp_path: Path) -> None:
    """One job of every real kernel family, real Triton: compiled through the launcher on
    machine 1 and stored; staged on machine 2, where Triton never starts."""
    from tests.perf.bench_kernel_build import real_jobs

    out = real_jobs(tmp_path, Path(str(REAL_TREE)), str(REAL_PYTHON), 7)
    first, second = tmp_path / "real" / "machine_1", tmp_path / "real" / "machine_2"
    assert out["machine_1"]["staged"] == 0 and out["machine_2"]["staged"] == 7  # type: ignore[index]
    assert (first / "triton-cache.default").is_dir()
    assert not (second / "triton-cache.default").exists()
    made = sorted((first / "v3src").glob("*.hsaco"))
    assert len(made) == 7
    for hsaco in made:
        assert hsaco.stat().st_size > 0
        assert (second / "v3src" / hsaco.name).read_bytes() == hsaco.read_bytes()
