"""--workers: AOTriton's kernel jobs on a real two-worker Dask cluster on loopback, into a real
redis-server; a worker killed mid-job; an unreachable scheduler; the missing extra."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rocmfa.builds import kernel_build
from rocmfa.builds import kernel_check as kc
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from tests.support import aotriton_generator_standin as gen
from tests.support.shared_cache import REDIS, free_port, redis_server
from tests.test_kernel_check import make_tree

pytest.importorskip("distributed", reason="the optional extra: pip install -e '.[cluster]'")

# On the first attempt anywhere, the attn_fwd compile records its worker (compile.py's parent)
# and hangs, so the test can kill that worker mid-job; a retry finds the record and goes on.
HANG_HOOK = """

import os, time
def compile_hook(kernel, num_warps, num_stages, waves_per_eu, target):
    hang_dir = os.environ.get("STANDIN_HANG_DIR")
    if not hang_dir:
        return
    try:  # the first job anywhere claims the hang (two workers run attn_fwd jobs at once)
        os.close(os.open(os.path.join(hang_dir, "claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return  # another job hangs (or hung: the retry after the kill compiles)
    tmp = os.path.join(hang_dir, "worker.pid.tmp")
    with open(tmp, "w") as f:
        f.write(str(os.getppid()))
    os.rename(tmp, os.path.join(hang_dir, "worker.pid"))
    time.sleep(120)
"""


def _generated_tree(tmp_path: Path, monkeypatch, extra=None) -> kc.Tree:
    made = make_tree(tmp_path, extra)
    for key, value in made.env().items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    tree = kc.Tree(work / "src" / "aotriton", made.commit, "gfx1151", "3.5.1")
    runner = Runner()
    kc.ensure_checkout(kc.pins.load_pin("aotriton", workdir=work), tree.src, runner)
    kc.generate(tree, sys.executable, runner)
    return tree


def _all_entries_whole(tree: kc.Tree, url: str, tmp: Path) -> int:
    store = kernel_build.open_store(url, tmp, "gfx1151", say=print)
    assert store is not None and store.shared is not None
    jobs = kernel_build.read_jobs(tree.build / "Bare.compile")
    whole = 0
    for job, key in zip(jobs, tree.key_context().keys(jobs), strict=True):
        blob = store.shared.get(key)
        assert blob is not None, job.line
        kernel_build.unpack(blob)  # raises on a partial entry
        whole += 1
    return whole


def _kept(dask: Path) -> list[Path]:
    """What the workers keep beyond the kernel sources: job outputs and scratch folders (with
    Triton's cache), kernel entries."""
    kept = [p for p in dask.rglob("*") if p.suffix in (".hsaco", ".kernel")]
    return kept + [p for p in dask.rglob("out/.*")]


@pytest.mark.skipif(REDIS is None, reason="redis-server not installed")
def test_two_workers_compile_every_job_into_the_store(tmp_path: Path, monkeypatch) -> None:
    from tests.support.dask_cluster import dask_cluster

    tree = _generated_tree(tmp_path, monkeypatch)
    env = {kernel_build.PYTHON_ENV: sys.executable}
    with (
        redis_server(tmp_path / "redis") as store_url,
        dask_cluster(tmp_path / "dask", 2, env) as (
            url,
            _,
        ),
    ):
        runner = Runner()
        counts = kernel_build.fan_out(tree, url, store_url, runner)
        assert counts == {"compiled": sum(gen.jobs_per_family().values()), "hit": 0}
        assert _all_entries_whole(tree, store_url, tmp_path / "reader") == counts["compiled"]
        again = kernel_build.fan_out(tree, url, store_url, runner)
        assert again == {"compiled": 0, "hit": counts["compiled"]}
        assert _kept(tmp_path / "dask") == []


@pytest.mark.skipif(REDIS is None, reason="redis-server not installed")
def test_killed_worker_job_is_retried_and_leaves_nothing_partial(
    tmp_path: Path, monkeypatch
) -> None:
    from tests.support.dask_cluster import dask_cluster

    hanging = gen.KERNEL_SOURCE.format(helper="helpers", kernel="attn_fwd") + HANG_HOOK
    tree = _generated_tree(tmp_path, monkeypatch, {"modules/flash/kernel/fwd_kernel.py": hanging})
    hang = tmp_path / "hang"
    hang.mkdir()
    env = {kernel_build.PYTHON_ENV: sys.executable, "STANDIN_HANG_DIR": str(hang)}
    with (
        redis_server(tmp_path / "redis") as store_url,
        dask_cluster(tmp_path / "dask", 2, env) as (
            url,
            _,
        ),
    ):
        result: dict[str, object] = {}

        def run() -> None:
            try:
                result["counts"] = kernel_build.fan_out(tree, url, store_url, Runner())
            except BaseException as error:
                result["error"] = error

        thread = threading.Thread(target=run)
        thread.start()
        marker = hang / "worker.pid"
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline, "no job started hanging"
            time.sleep(0.1)
        os.kill(int(marker.read_text()), signal.SIGKILL)  # the worker process, mid-job
        thread.join(timeout=120)
        assert not thread.is_alive()
        assert "error" not in result, result.get("error")
        total = sum(gen.jobs_per_family().values())
        assert result["counts"] == {"compiled": total, "hit": 0}
        assert _all_entries_whole(tree, store_url, tmp_path / "reader") == total
        assert _kept(tmp_path / "dask") == []  # the killed worker's folder went too


def test_unreachable_scheduler_is_one_line_before_any_work(tmp_path: Path) -> None:
    if REDIS is None:
        pytest.skip("redis-server not installed")
    with redis_server(tmp_path / "redis") as store_url, pytest.raises(UserError) as failed:
        kernel_build.require(f"tcp://127.0.0.1:{free_port()}", store_url, Runner())
    assert "Dask scheduler unreachable" in str(failed.value) and "\n" not in str(failed.value)


def test_workers_need_a_shared_writable_store() -> None:
    plan = Runner(dry_run=True)  # the checks before any work, no scheduler reached
    with pytest.raises(UserError, match="needs a shared --cache"):
        kernel_build.require("tcp://127.0.0.1:8786", None, plan)
    with pytest.raises(UserError, match=r"needs a shared --cache, not read_only=1 \(a directory"):
        kernel_build.require("tcp://h:1", "sccache", plan)  # this machine's own
    with pytest.raises(UserError, match="read_only=1"):
        kernel_build.require("tcp://h:1", "redis://h:1?read_only=1", plan)
    with pytest.raises(UserError, match="tcp://HOST:PORT"):
        kernel_build.require("h:8786", "redis://h:1", plan)


def test_missing_extra_is_one_line_naming_it() -> None:
    code = (
        "import sys; sys.modules['distributed'] = None\n"
        "from rocmfa.builds import kernel_build\n"
        "from rocmfa.plumbing.commands import Runner\n"
        "try:\n"
        "    kernel_build.require('tcp://127.0.0.1:1', 'redis://127.0.0.1:1', Runner())\n"
        "except Exception as e:\n"
        "    print(e)\n"
    )
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root / "scripts")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == (
        "--workers needs Dask distributed, the optional extra: pip install -e '.[cluster]'"
    )
