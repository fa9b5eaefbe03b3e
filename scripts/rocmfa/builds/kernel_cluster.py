"""`build_aotriton -- --workers tcp://HOST:8786`: AOTriton's kernel compile jobs on a Dask cluster.

Dask distributed, not Ray: pure Python wheels (the '.[cluster]' extra), its scheduler retries
the tasks of a worker that dies (allowed-failures, default 3), and `dask scheduler` / `dask
worker tcp://HOST:8786` is the whole setup. The client runs AOTriton's generator, then sends
every job of Bare.compile as one task; compile.py and the kernel sources travel once to every
worker (scatter, broadcast). A worker takes the job from the shared store (a directory,
redis:// or s3://) or compiles it with its own Triton (pins/kernel_compiler.toml, the build the
keys name; $ROCMFA_KERNEL_PYTHON names another interpreter) and the client's Triton settings,
and puts the whole, digest-checked entry there in one write, so a killed worker leaves nothing
partial. Everything a worker writes is under its Dask scratch folder (the tree; a job's files,
Triton's cache included, removed when it ends): Dask removes a killed worker's folder when the
next worker starts there, and a clean one's when it stops. Workers need this repository
importable.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import platform
import shutil
import sys
import tempfile
import time
import urllib.parse
from dataclasses import replace
from pathlib import Path
from typing import Any

from rocmfa.builds import compile_cache, kernel_jobs, kernel_store
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError

EXTRA_HINT = "pip install -e '.[cluster]'"
CONNECT_TIMEOUT_S = 5.0


def require(url: str, cache: compile_cache.CacheSpec | str | None, *, dry_run: bool) -> None:
    """Everything --workers needs, each missing piece one line, before any work."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("tcp", "tls") or not parts.hostname:
        raise UserError(f"--workers {url!r}: expected a Dask scheduler address tcp://HOST:PORT")
    spec = compile_cache.as_spec(cache)
    if spec is None or spec.backend not in ("dir", "redis", "s3"):
        raise UserError(
            "--workers needs a shared --cache (a directory every machine mounts, redis://, "
            "s3://): the workers compile into it and this build reads every kernel from it"
        )
    if spec.read_only:
        raise UserError("--workers: the --cache store is read_only=1; workers could not write")
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise UserError(
            f"--workers needs Dask distributed, the optional extra: {EXTRA_HINT}"
        ) from None
    if dry_run:
        return
    from distributed.comm import connect

    async def reach() -> None:
        await (await connect(url, timeout=CONNECT_TIMEOUT_S)).close()

    try:
        asyncio.run(reach())
    except OSError as error:
        why = " ".join(str(error).split()) or type(error).__name__
        raise UserError(f"--workers {url}: Dask scheduler unreachable ({why})") from None


def bundle_for(tree_src: Path, jobs: list[kernel_jobs.Job]) -> dict[str, bytes]:
    """python/compile.py and every file that decides a kernel (the sources' folders, as
    kernel_jobs.source_digest reads them), by path relative to the tree."""
    files = {"python/compile.py": (tree_src / "python" / "compile.py").read_bytes()}
    for folder in {Path(job.source).parent for job in jobs}:
        for path in folder.rglob("*.py"):
            if "__pycache__" not in path.parts:
                files[path.relative_to(tree_src).as_posix()] = path.read_bytes()
    return files


def bundle_digest(bundle: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(bundle):
        h.update(name.encode() + b"\0" + hashlib.sha256(bundle[name]).digest())
    return h.hexdigest()


# --- on a worker ------------------------------------------------------------------------------


def _materialize(bundle: dict[str, bytes], digest: str, scratch: Path) -> Path:
    root = scratch / f"kernel-tree-{digest[:16]}"
    if (root / ".complete").exists():
        return root
    staging = Path(tempfile.mkdtemp(prefix=".kernel-tree-", dir=scratch))
    for name, data in bundle.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_bytes(data)
    (staging / ".complete").write_text(digest)
    try:
        staging.rename(root)
    except OSError:  # another task of this worker got there first
        shutil.rmtree(staging, ignore_errors=True)
    return root


def _worker_python(triton: str, identity: str) -> str:
    """This worker's Python, if its Triton (version and build) is the one the keys name."""
    python = os.environ.get("ROCMFA_KERNEL_PYTHON") or sys.executable
    have = kernel_store.triton_info(python)["build"]
    if (f"{triton} ({have})" if have else triton) != identity:
        raise RuntimeError(
            f"worker {platform.node()}: triton {have or 'not installed'}, the keys name "
            f"triton {identity} (install it, or set ROCMFA_KERNEL_PYTHON on the worker)"
        )
    return python


def remote_build(
    job: kernel_jobs.Job,
    key: str,
    rel_source: str,
    *,
    bundle: dict[str, bytes],
    digest: str,
    cache: compile_cache.CacheSpec | str,
    arch: str,
    triton: str,
    identity: str,
    settings: dict[str, str],
) -> tuple[str, float]:
    """One task: the job from the shared store, else compiled here and put there."""
    from distributed import get_worker

    scratch = Path(get_worker().local_directory)  # Dask's, removed with the worker
    root = _materialize(bundle, digest, scratch)
    store = kernel_store.open_store(cache, scratch, arch, say=print)
    assert store is not None
    store.local = None  # the shared store alone: nothing kept on the worker
    if store.shared is None:
        raise RuntimeError(f"worker {platform.node()}: the kernel store {cache} is unreachable")
    here = replace(job, source=str(root / rel_source))
    python = _worker_python(triton, identity)
    compiler = kernel_store.Compiler(python, root / "python" / "compile.py", settings)
    out = root / "out" / f"{key}.hsaco"
    try:
        result = kernel_store.build_kernel(here, key, compiler, store, out)
    finally:
        out.unlink(missing_ok=True)
        out.with_suffix(".json").unlink(missing_ok=True)
    if store.shared is None:
        raise RuntimeError(f"worker {platform.node()}: lost the kernel store {cache}")
    return result


# --- on the client ------------------------------------------------------------------------------


def fan_out(
    tree: Any,
    url: str,
    cache: compile_cache.CacheSpec | str | None,
    runner: Runner,
    jobs: list[kernel_jobs.Job] | None = None,
) -> dict[str, int] | None:
    """Every job of the tree's Bare.compile (or jobs) through the cluster into the store."""
    bare = tree.build / "Bare.compile"
    if runner.dry_run:
        spec = compile_cache.as_spec(cache)
        runner.say(
            f"[dry-run] --workers {url}: send every job of {bare} to the Dask scheduler as one "
            f"task each; a worker fetches the job's key from the {spec and spec.place} or runs "
            f"python/compile.py with triton {tree.triton} and puts the entry there (a killed "
            "worker's task is retried by the scheduler)"
        )
        return None
    from distributed import Client, as_completed

    jobs = jobs if jobs is not None else kernel_jobs.read_jobs(bare)
    context = tree.key_context()
    sources = kernel_jobs.source_digests(jobs)
    bundle = bundle_for(tree.src, jobs)
    digest = bundle_digest(bundle)
    began = time.monotonic()
    counts = {"hit": 0, "compiled": 0}
    with Client(url, timeout=f"{CONNECT_TIMEOUT_S:g}s") as client:
        workers = len(client.scheduler_info().get("workers", {}))
        runner.say(f"--workers {url}: {len(jobs)} kernel jobs to {workers} worker(s)")
        [shared] = client.scatter([bundle], broadcast=True)
        futures = client.map(
            remote_build,
            jobs,
            [context.key(job, sources) for job in jobs],
            [Path(job.source).relative_to(tree.src).as_posix() for job in jobs],
            bundle=shared,
            digest=digest,
            cache=cache,
            arch=tree.arch,
            triton=tree.triton,
            identity=context.triton,
            settings=dict(context.env),
            pure=False,
        )
        for future in as_completed(futures):
            error = future.exception()
            if error is not None:
                client.cancel(futures)
                raise UserError(f"--workers: {type(error).__name__}: {error}".splitlines()[0])
            how, _ = future.result()
            counts[how] += 1
    runner.say(
        f"--workers: {counts['compiled']} compiled, {counts['hit']} already in the store, "
        f"{time.monotonic() - began:.1f} s"
    )
    return counts
