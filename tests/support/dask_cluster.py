"""A real Dask cluster on loopback for the --workers tests and tests/perf: one scheduler and N
worker processes (each under its nanny, as `dask worker` runs them), started as the lab would
(`python -m distributed.cli.dask_scheduler` / `dask_worker`), this repository on their
PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.support.shared_cache import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


def _worker_count(url: str) -> int:
    from distributed import Client

    with Client(url, timeout="5s") as client:
        return len(client.scheduler_info().get("workers", {}))


@contextmanager
def dask_cluster(
    tmp: Path, workers: int, env: Mapping[str, str] | None = None, threads: int = 1
) -> Iterator[tuple[str, list[subprocess.Popen]]]:
    """Yields (scheduler URL, the worker nanny processes)."""
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    path = os.pathsep.join([str(REPO_ROOT / "scripts"), str(REPO_ROOT)])
    base = {**os.environ, "PYTHONPATH": path, **(env or {})}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": open(tmp / "dask.log", "ab")}  # noqa: SIM115
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
             "--port", str(port), "--no-dashboard"],
            env=base, cwd=tmp, **quiet,
        )
    ]  # fmt: skip
    try:
        for n in range(workers):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "distributed.cli.dask_worker", url, "--nthreads",
                     str(threads), "--no-dashboard", "--name", f"w{n}", "--local-directory",
                     str(tmp / f"w{n}")],
                    env=base, cwd=tmp, **quiet,
                )
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                if _worker_count(url) >= workers:
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"dask cluster did not start ({tmp / 'dask.log'})")
            time.sleep(0.5)
        yield url, procs[1:]
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        quiet["stderr"].close()
