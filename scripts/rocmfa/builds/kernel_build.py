"""AOTriton's own (unpatched) build's kernels through the kernel store: staged before ninja,
harvested after it through kernel_launcher.py; `--workers`: every job on a Dask cluster. The
whole path and its guarantees: docs/kernel-check.md."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocmfa.builds import compile_cache, kernel_store
from rocmfa.builds.kernel_launcher import STAGED
from rocmfa.plumbing import stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "kernel_launcher.py"
PROJECT_INCLUDE = HERE / "kernel_launcher.cmake"
BARE = Path("v3src") / "Bare.compile"  # v3src/CMakeLists.txt: AOTRITON_V2_BUILD_DIR
FORK = "third_party/triton"
ENV_FILE = "rocmfa-kernels-env.json"  # beside the log: kernel_launcher.py reads it
MANIFEST = "rocmfa-kernels-keys.json"  # -o path -> the key last staged or let compile there
THREADS = 8  # store requests in flight while staging / storing


def pypi_triton(commit: str) -> str:
    version = kernel_store.recorded_triton(commit)
    if version is None:
        raise UserError(f"--triton pypi: {kernel_store.no_triton(commit)}")
    return version


def fork_identity(src: Path, runner: Runner) -> str:
    """The fork the build pip-installs: the checked-out submodule's commit (a plan runs no git)."""
    head = runner.apply(_submodule_head, src) or "<the checked-out submodule's commit>"
    return f"fork {FORK}@{head}"


def _submodule_head(src: Path) -> str:
    argv = ["git", "-C", str(src / FORK), "rev-parse", "HEAD"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise UserError(f"{src / FORK}: not a checkout of AOTriton's Triton fork (the submodule)")
    return done.stdout.strip()


@dataclass
class KernelBuild:
    """One AOTriton build's kernel jobs through the store."""

    src: Path
    build: Path
    store: kernel_store.KernelStore
    triton: str  # fork | pypi
    identity: str  # what the keys say about Triton
    wheel: str | None  # AOTRITON_USE_LOCAL_TRITON_WHEEL (pypi)
    commit: str
    keys: dict[str, str] = field(default_factory=dict)  # -o path -> key
    staged: int = 0
    earlier: list[str] = field(default_factory=list)  # compiled by an interrupted build
    arch: str | None = None  # whose patches the tree carries (the patch digest in each key)

    @property
    def bare(self) -> Path:
        return self.build / BARE

    @property
    def log(self) -> Path:
        return self.build / "rocmfa-kernels-compiled.log"

    @property
    def compile_py(self) -> Path:
        return (self.src / "python" / "compile.py").resolve()

    def launcher(self) -> str:
        argv = [sys.executable, "-I", "-S", str(LAUNCHER), str(self.compile_py), str(self.log)]
        return shlex.join(argv)

    def cmake_args(self) -> list[str]:
        args = [f"-DCMAKE_PROJECT_INCLUDE={PROJECT_INCLUDE}"]
        args += [f"-DROCMFA_KERNEL_LAUNCHER={self.launcher()}"]
        return args + ([f"-DAOTRITON_USE_LOCAL_TRITON_WHEEL={self.wheel}"] if self.wheel else [])

    @property
    def python(self) -> str | None:
        """The check's Triton: the variables Triton reads; with pypi (the same version) also
        the build the keys name."""
        version = kernel_store.recorded_triton(self.commit)
        return kernel_store.known_python(self.src.parents[1], version) if version else None

    def key_context(self) -> kernel_store.KeyContext:
        named_build = bool(self.wheel)  # the fork's keys name its commit, not a wheel build
        return kernel_store.key_context(self.identity, self.commit, self.arch, self.src,
                                        self.python, named_build)  # fmt: skip

    def write_env(self, context: kernel_store.KeyContext) -> None:
        """What the launcher gives each compile: the key's settings, the others dropped."""
        knobs = kernel_store.triton_info(self.python)["knobs"] if self.python else []
        env = {**dict(context.env), **kernel_store.COMPILE_ENV}
        stamps.write_text_atomic(self.build / ENV_FILE, json.dumps({"knobs": knobs, "env": env}))

    def stage(self, runner: Runner) -> None:
        """Before ninja: every job's key, the whole set looked up at once, hits put in place."""
        line = runner.plan_line(
            f"then look every job of {self.bare} up in the kernel store "
            f"({self.store.describe()}; keys name triton {self.identity}) and put each "
            f"hit at its -o path; ninja's custom commands run through {self.launcher()}: "
            "a staged job exits at once, any other compiles and is stored after ninja"
        )
        if line:
            return runner.say(line)
        logged = self._logged()
        self.log.unlink(missing_ok=True)
        if not self.bare.is_file():
            return runner.say(f"kernel store: no {self.bare}; AOTriton's kernel jobs run unchanged")
        # Only the "default" venv's jobs: another (AOTRITON_ALT_TRITON_WHEEL_CONFIG_FILE, which
        # we never set) would compile with a Triton the key does not name.
        jobs = [job for job in kernel_store.read_jobs(self.bare) if job.venv == "default"]
        context = self.key_context()
        self.write_env(context)
        sources = kernel_store.source_digests(jobs)
        self.keys = {job.hsaco: context.key(job, sources) for job in jobs}
        built_for = stamps.read(self.build / MANIFEST) or {}
        # Ninja keeps a code object built for another key (the jobs depend on neither their
        # sources nor Triton): drop it.
        for out, key in self.keys.items():
            if built_for.get(out) != key:
                Path(out).with_suffix(".hsaco").unlink(missing_ok=True)
        stamps.write_text_atomic(self.build / MANIFEST, json.dumps(self.keys))
        # an interrupted build's compiles of these keys (ninja will not run them again)
        self.earlier = [out for out in logged if built_for.get(out) == self.keys.get(out)]
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            self.staged = sum(pool.map(self._stage_one, jobs))
        runner.say(f"kernel store: {self.staged} of {len(jobs)} kernel jobs of the build from "
                   f"{self.store.describe()} (triton {self.identity}); {len(jobs) - self.staged} "
                   "to compile")  # fmt: skip

    def _stage_one(self, job: kernel_store.Job) -> bool:
        out = Path(job.hsaco)
        marker = out.with_suffix(STAGED)
        marker.unlink(missing_ok=True)
        blob = self.store.get(self.keys[job.hsaco])
        if blob is None:
            return False
        hsaco, meta = kernel_store.unpack(blob)
        if _read(out.with_suffix(".hsaco")) != hsaco or _read(out.with_suffix(".json")) != meta:
            kernel_store.install_kernel(out, hsaco, meta)
        marker.touch()
        return True

    def harvest(self, runner: Runner) -> None:
        """After ninja (also a failed one): what the launcher compiled goes into the store."""
        if not self.keys:  # nothing staged (a plan stages nothing)
            return
        compiled = [out for out in dict.fromkeys(self._logged()) if out in self.keys]
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            stored = sum(pool.map(self._store_one, dict.fromkeys(compiled + self.earlier)))
        for out in self.keys:
            Path(out).with_suffix(STAGED).unlink(missing_ok=True)
        where = self.store.describe()
        if self.store.shared is not None and self.store.read_only:
            where += f"; nothing written to {self.store.shared.what}"
        runner.say(f"kernel store: {self.staged} kernels from the store, {len(compiled)} "
                   f"compiled by the build, {stored} stored in {where}")  # fmt: skip

    def _logged(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.is_file() else []

    def _store_one(self, out: str) -> bool:
        hsaco, meta = _read(Path(out).with_suffix(".hsaco")), _read(Path(out).with_suffix(".json"))
        if hsaco and meta is not None:
            self.store.put(self.keys[out], kernel_store.pack(hsaco, meta))
        return bool(hsaco and meta is not None)


@contextlib.contextmanager
def through_store(kernels: KernelBuild | None, build: Path, runner: Runner) -> Iterator[None]:
    """Around `ninja install`: stage before, harvest after (also after a failure). Without
    the launcher (--cache none) what the build compiles is for no known key: the key
    manifest goes."""
    if kernels is None:
        runner.apply((build / MANIFEST).unlink, missing_ok=True)
        yield
        return
    kernels.stage(runner)
    try:
        yield
    finally:
        kernels.harvest(runner)


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def open_for_build(ctx: Any, build_options: Any, runner: Runner) -> kernel_store.KernelStore | None:
    """The kernel store of this build (None: --cache none, or --no-images compiles no kernel),
    opened once for the kernel check and the build: an unreachable store is one line."""
    if build_options.no_images:
        return None
    return kernel_store.open_store(build_options.cache, ctx.work, ctx.arch.name, runner=runner)


def plan(ctx: Any, build_options: Any, src: Path, build: Path,
         store: kernel_store.KernelStore | None, runner: Runner) -> KernelBuild | None:  # fmt: skip
    """The launcher and the Triton the build compiles with (None: no store, no launcher)."""
    if store is None:
        return None
    triton = build_options.triton
    if triton == "pypi":
        identity = pypi_triton(ctx.pin.commit)
        wheel: str | None = f"triton=={identity}"
    else:
        identity, wheel = fork_identity(src, runner), None
    return KernelBuild(
        src, build, store, triton, identity, wheel, ctx.pin.commit, arch=ctx.arch.name
    )


# --- --workers: the jobs on a Dask cluster ------------------------------------------------

CONNECT_TIMEOUT_S = 5.0


def require(url: str, cache: compile_cache.CacheSpec | str | None, runner: Runner) -> None:
    """Everything --workers needs, each missing piece one line, before any work (a plan does
    not reach for the scheduler)."""
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
    runner.apply(_reach, url)


def _reach(url: str) -> None:
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


def _materialize(files: dict[str, bytes], digest: str, scratch: Path) -> Path:
    root = scratch / f"kernel-tree-{digest[:16]}"
    if (root / ".complete").exists():
        return root
    staging = Path(tempfile.mkdtemp(prefix=".kernel-tree-", dir=scratch))
    for name, data in files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_bytes(data)
    (staging / ".complete").write_text(digest)
    try:
        staging.rename(root)
    except OSError:  # another task of this worker got there first
        shutil.rmtree(staging, ignore_errors=True)
    return root


def remote_build(job: kernel_store.Job, key: str, rel_source: str, task: dict[str, Any]):
    """On a worker: the job from the shared store, else compiled here (with the Triton the keys
    name) and put there; ('hit' | 'compiled', seconds)."""
    from distributed import get_worker

    scratch = Path(get_worker().local_directory)  # Dask's, removed with the worker
    root, worker = _materialize(task["files"], task["digest"], scratch), platform.node()
    store = kernel_store.open_store(task["cache"], scratch, task["arch"], say=print)
    if store is None or store.shared is None:
        raise RuntimeError(f"worker {worker}: the kernel store {task['cache']} is unreachable")
    store.local = None  # the shared store alone: nothing kept on the worker
    python = os.environ.get("ROCMFA_KERNEL_PYTHON") or sys.executable
    have, triton = kernel_store.triton_info(python)["build"], task["triton"]
    if (f"{triton} ({have})" if have else triton) != task["identity"]:
        raise RuntimeError(f"worker {worker}: triton {have or 'not installed'}, the keys name "
            f"triton {task['identity']} (install it, or set ROCMFA_KERNEL_PYTHON)")  # fmt: skip
    compiler = kernel_store.Compiler(python, root / "python/compile.py", task["settings"])
    out = root / "out" / f"{key}.hsaco"
    try:
        here = replace(job, source=str(root / rel_source))
        result = kernel_store.build_kernel(here, key, compiler, store, out)
    finally:
        out.unlink(missing_ok=True)
        out.with_suffix(".json").unlink(missing_ok=True)
    if store.shared is None:
        raise RuntimeError(f"worker {worker}: lost the kernel store {task['cache']}")
    return result


def fan_out(
    tree: Any, url: str, cache: Any, runner: Runner, jobs: list[kernel_store.Job] | None = None
) -> dict[str, int] | None:
    """Every job of the tree's Bare.compile (or jobs) through the cluster into the store."""
    bare = tree.build / "Bare.compile"
    spec = compile_cache.as_spec(cache)
    line = runner.plan_line(
        f"--workers {url}: send every job of {bare} to the Dask scheduler as one "
        f"task each; a worker fetches the job's key from the {spec and spec.place} or runs "
        f"python/compile.py with triton {tree.triton} and puts the entry there (a killed "
        "worker's task is retried by the scheduler)"
    )
    if line:
        return runner.say(line)
    from distributed import Client, as_completed

    jobs = jobs if jobs is not None else kernel_store.read_jobs(bare)
    context, sources = tree.key_context(), kernel_store.source_digests(jobs)
    files, digest = bundle_for(tree.src, jobs)
    task = {"files": files, "digest": digest, "cache": cache, "arch": tree.arch, "triton":
            tree.triton, "identity": context.triton, "settings": dict(context.env)}  # fmt: skip
    began, counts = time.monotonic(), {"hit": 0, "compiled": 0}
    with Client(url, timeout=f"{CONNECT_TIMEOUT_S:g}s") as client:
        workers = len(client.scheduler_info().get("workers", {}))
        runner.say(f"--workers {url}: {len(jobs)} kernel jobs to {workers} worker(s)")
        [shared] = client.scatter([task], broadcast=True)
        keys = [context.key(job, sources) for job in jobs]
        rels = [Path(job.source).relative_to(tree.src).as_posix() for job in jobs]
        futures = client.map(remote_build, jobs, keys, rels, task=shared, pure=False)
        for future in as_completed(futures):
            if future.exception() is not None:
                client.cancel(futures)
                error = future.exception()
                raise UserError(f"--workers: {type(error).__name__}: {error}".splitlines()[0])
            counts[future.result()[0]] += 1
    runner.say(f"--workers: {counts['compiled']} compiled, {counts['hit']} already in the "
               f"store, {time.monotonic() - began:.1f} s")  # fmt: skip
    return counts
