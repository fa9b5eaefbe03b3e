"""`build_aotriton -- --workers tcp://HOST:8786`: every kernel job of Bare.compile as one task
on a Dask cluster (pure-Python wheels, the '.[cluster]' extra; the scheduler retries a dead
worker's tasks). A worker takes the job from the shared store or compiles it with its own
Triton and the client's Triton settings, puts the whole entry there in one write, and keeps
nothing: everything is under its Dask scratch folder, a job's files removed when it ends.
docs/kernel-check.md.
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

from rocmfa.builds import compile_cache, kernel_store
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError

CONNECT_TIMEOUT_S = 5.0


def require(url: str, cache: compile_cache.CacheSpec | str | None, *, dry_run: bool) -> None:
    """Everything --workers needs, each missing piece one line, before any work."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("tcp", "tls") or not parts.hostname:
        raise UserError(f"--workers {url!r}: expected a Dask scheduler address tcp://HOST:PORT")
    spec = compile_cache.as_spec(cache)
    if spec is None or spec.backend not in ("dir", "redis", "s3"):
        raise UserError("--workers needs a shared --cache (a directory every machine mounts, "
            "redis://, s3://): the workers compile into it and this build reads every kernel "
            "from it")  # fmt: skip
    if spec.read_only:
        raise UserError("--workers: the --cache store is read_only=1; workers could not write")
    try:
        import distributed  # noqa: F401
    except ImportError:
        hint = "pip install -e '.[cluster]'"
        raise UserError(f"--workers needs Dask distributed, the optional extra: {hint}") from None
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


def bundle_for(tree_src: Path, jobs: list[kernel_store.Job]) -> tuple[dict[str, bytes], str]:
    """python/compile.py and the sources' folders (what source_digests reads), by path
    relative to the tree, and their digest."""
    names = [tree_src / "python" / "compile.py"]
    for folder in {Path(job.source).parent for job in jobs}:
        names += [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts]
    files = {p.relative_to(tree_src).as_posix(): p.read_bytes() for p in names}
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return files, h.hexdigest()


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
        have = f"worker {platform.node()}: triton {have or 'not installed'}"
        raise RuntimeError(f"{have}, the keys name triton {identity} (install it, or set "
                           "ROCMFA_KERNEL_PYTHON on the worker)")  # fmt: skip
    return python


def remote_build(
    job: kernel_store.Job,
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
    if store is None or store.shared is None:
        raise RuntimeError(f"worker {platform.node()}: the kernel store {cache} is unreachable")
    store.local = None  # the shared store alone: nothing kept on the worker
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
    jobs: list[kernel_store.Job] | None = None,
) -> dict[str, int] | None:
    """Every job of the tree's Bare.compile (or jobs) through the cluster into the store."""
    bare = tree.build / "Bare.compile"
    if runner.dry_run:
        spec = compile_cache.as_spec(cache)
        runner.say(  # the store in words
            f"[dry-run] --workers {url}: send every job of {bare} to the Dask scheduler as one "
            f"task each; a worker fetches the job's key from the {spec and spec.place} or runs "
            f"python/compile.py with triton {tree.triton} and puts the entry there (a killed "
            "worker's task is retried by the scheduler)"
        )
        return None
    from distributed import Client, as_completed

    jobs = jobs if jobs is not None else kernel_store.read_jobs(bare)
    context = tree.key_context()
    sources = kernel_store.source_digests(jobs)
    bundle, digest = bundle_for(tree.src, jobs)
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
