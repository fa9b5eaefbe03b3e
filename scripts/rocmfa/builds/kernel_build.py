"""AOTriton's own (unpatched) build's kernels through the kernel store: staged before ninja,
harvested after it through kernel_launcher.py; `--workers`: every job on a Dask cluster. The
whole path and its guarantees: docs/kernel-check.md."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import platform
import shlex
import shutil
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
from rocmfa.builds.kernel_launcher import ENV_FILE
from rocmfa.builds.kernel_store import read_or_none
from rocmfa.plumbing import stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "kernel_launcher.py"
PROJECT_INCLUDE = HERE / "kernel_launcher.cmake"
BARE = Path("v3src") / "Bare.compile"  # v3src/CMakeLists.txt: AOTRITON_V2_BUILD_DIR
FORK = "third_party/triton"
MANIFEST = "rocmfa-kernels-keys.json"  # -o path -> the key last staged or let compile there
THREADS = 8  # store requests in flight while staging / storing
CONNECT_TIMEOUT = "5s"


def pypi_triton(commit: str) -> str:
    version = kernel_store.recorded_triton(commit)
    if version is None:
        raise UserError(f"--triton pypi: {kernel_store.NO_TRITON.format(commit)}")
    return version


def fork_identity(src: Path, runner: Runner) -> str:
    """The fork the build pip-installs: the checked-out submodule's commit."""
    head = runner.ask(["git", "-C", src / FORK, "rev-parse", "HEAD"], "<the submodule's commit>")
    return f"fork {FORK}@{head}"


@dataclass
class KernelBuild:
    """One AOTriton build's kernel jobs through the store."""

    src: Path
    build: Path
    store: kernel_store.KernelStore
    identity: str  # what the keys say about Triton
    wheel: str | None  # AOTRITON_USE_LOCAL_TRITON_WHEEL (pypi)
    commit: str
    arch: str | None = None  # whose patches the tree carries (the patch digest in each key)
    keys: dict[str, str] = field(default_factory=dict)  # -o path -> key
    hits: set[str] = field(default_factory=set)  # -o paths staged from the store

    def launcher(self) -> str:
        compile_py = (self.src / "python" / "compile.py").resolve()
        argv = [sys.executable, "-I", "-S", LAUNCHER, compile_py, self.build / ENV_FILE]
        return shlex.join(map(str, argv))

    def cmake_args(self) -> list[str]:
        args = [f"-DCMAKE_PROJECT_INCLUDE={PROJECT_INCLUDE}"]
        args += [f"-DROCMFA_KERNEL_LAUNCHER={self.launcher()}"]
        return args + ([f"-DAOTRITON_USE_LOCAL_TRITON_WHEEL={self.wheel}"] if self.wheel else [])

    @property
    def python(self) -> str | None:
        """The check's Triton: the variables Triton reads; with pypi (the same version) also
        the build the keys name (the fork's keys name its commit)."""
        version = kernel_store.recorded_triton(self.commit)
        return kernel_store.known_python(self.src.parents[1], version) if version else None

    def key_context(self) -> kernel_store.KeyContext:
        return kernel_store.key_context(self.identity, self.commit, self.arch, self.src,
                                        self.python, bool(self.wheel))  # fmt: skip

    def stage(self, runner: Runner) -> None:
        """Before ninja: every job's key, the whole set looked up at once, hits put in place."""
        bare = self.build / BARE
        line = runner.plan_line(
            f"then look every job of {bare} up in the kernel store "
            f"({self.store.describe()}; keys name triton {self.identity}) and put each "
            f"hit at its -o path; ninja's custom commands run through {self.launcher()}: "
            "a job whose code object is there exits at once, any other compiles and is stored "
            "after ninja"
        )
        if line or not bare.is_file():
            return runner.say(line or f"kernel store: no {bare}; AOTriton's kernel jobs run as is")
        # Only the "default" venv's jobs: another (AOTRITON_ALT_TRITON_WHEEL_CONFIG_FILE, which
        # we never set) would compile with a Triton the key does not name.
        jobs = [job for job in kernel_store.read_jobs(bare) if job.venv == "default"]
        context, python = self.key_context(), self.python
        knobs = kernel_store.triton_info(python)["knobs"] if python else []
        given = {"knobs": knobs, "env": {**dict(context.env), **kernel_store.COMPILE_ENV}}
        stamps.write_text_atomic(self.build / ENV_FILE, json.dumps(given))
        sources = kernel_store.source_digests(jobs)
        self.keys = {job.hsaco: context.key(job, sources) for job in jobs}
        # Ninja keeps a code object built for another key (the jobs depend on neither their
        # sources nor Triton), and the launcher skips any job whose code object is there:
        # drop those.
        built_for = stamps.read(self.build / MANIFEST) or {}
        for out, key in self.keys.items():
            if built_for.get(out) != key:
                Path(out).with_suffix(".hsaco").unlink(missing_ok=True)
        stamps.write_text_atomic(self.build / MANIFEST, json.dumps(self.keys))
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            self.hits = set(pool.map(self._stage_one, jobs)) - {None}
        hits = len(self.hits)
        runner.say(f"kernel store: {hits} of {len(jobs)} kernel jobs of the build from "
                   f"{self.store.describe()} (triton {self.identity}); {len(jobs) - hits} to "
                   "compile")  # fmt: skip

    def _stage_one(self, job: kernel_store.Job) -> str | None:
        out, blob = Path(job.hsaco), self.store.get(self.keys[job.hsaco])
        if blob is not None:
            kernel_store.install_kernel(out, *kernel_store.unpack(blob))
        return None if blob is None else job.hsaco

    def harvest(self, runner: Runner) -> None:
        """After ninja (also a failed one): every code object the store did not give goes in."""
        if not self.keys:  # nothing staged (a plan stages nothing)
            return
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            stored = sum(pool.map(self._store_one, [o for o in self.keys if o not in self.hits]))
        where = self.store.describe()
        if self.store.shared is not None and self.store.read_only:
            where += f"; nothing written to {self.store.shared.what}"
        runner.say(f"kernel store: {len(self.hits)} kernels from the store, {stored} compiled by "
                   f"the build, stored in {where}")  # fmt: skip

    def _store_one(self, out: str) -> bool:
        hsaco = read_or_none(Path(out).with_suffix(".hsaco"))
        meta = read_or_none(Path(out).with_suffix(".json"))
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
    if build_options.triton == "pypi":
        version = pypi_triton(ctx.pin.commit)
        identity, wheel = version, f"triton=={version}"
    else:
        identity, wheel = fork_identity(src, runner), None
    return KernelBuild(src, build, store, identity, wheel, ctx.pin.commit, ctx.arch.name)


# --- --workers: the jobs on a Dask cluster ------------------------------------------------


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
        from distributed import Client
    except ImportError:
        hint = "pip install -e '.[cluster]'"
        raise UserError(f"--workers needs Dask distributed, the optional extra: {hint}") from None
    try:
        runner.apply(lambda: Client(url, timeout=CONNECT_TIMEOUT).close())
    except OSError as error:
        why = " ".join(str(error).split()) or type(error).__name__
        raise UserError(f"--workers {url}: Dask scheduler unreachable ({why})") from None


def remote_build(job: kernel_store.Job, key: str, task: dict[str, Any]) -> tuple[str, float]:
    """On a worker: the job from the shared store, else compiled here (with the Triton the keys
    name) and put there; ('hit' | 'compiled', seconds)."""
    from distributed import get_worker

    worker, scratch = platform.node(), Path(get_worker().local_directory)  # removed with it
    store = kernel_store.open_store(task["cache"], scratch, task["arch"], say=print)
    if store is None or store.shared is None:
        raise RuntimeError(f"worker {worker}: the kernel store {task['cache']} is unreachable")
    store.local = None  # the shared store alone: nothing kept on the worker
    python = os.environ.get(kernel_store.PYTHON_ENV) or sys.executable
    have, triton = kernel_store.triton_info(python)["build"], task["triton"]
    if (f"{triton} ({have})" if have else triton) != task["identity"]:
        raise RuntimeError(f"worker {worker}: triton {have or 'not installed'}, the keys name "
            f"triton {task['identity']} (install it, or set ROCMFA_KERNEL_PYTHON)")  # fmt: skip
    root = scratch / f"kernel-tree-{task['digest'][:16]}"  # once per content, whole or absent
    if not root.exists():
        staging = Path(tempfile.mkdtemp(prefix=".kernel-tree-", dir=scratch))
        for name, data in task["files"].items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_bytes(data)
        with contextlib.suppress(OSError):  # another task of this worker got there first
            staging.rename(root)
        shutil.rmtree(staging, ignore_errors=True)
    compiler = kernel_store.Compiler(python, root / "python/compile.py", task["settings"])
    here = replace(job, source=str(root / Path(job.source).relative_to(task["src"])))
    with tempfile.TemporaryDirectory(dir=root) as out:
        result = kernel_store.build_kernel(here, key, compiler, store, Path(out) / "k.hsaco")
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
    from distributed import Client

    jobs = jobs if jobs is not None else kernel_store.read_jobs(bare)
    context, sources = tree.key_context(), kernel_store.source_digests(jobs)
    # python/compile.py and the sources' folders (what source_digests reads), sent once
    names = [tree.src / "python" / "compile.py"]
    for folder in {Path(job.source).parent for job in jobs}:
        names += [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts]
    files = {p.relative_to(tree.src).as_posix(): p.read_bytes() for p in names}
    digest = hashlib.sha256(pickle.dumps(sorted(files.items()))).hexdigest()
    task = {"files": files, "digest": digest, "src": str(tree.src), "cache": cache,
            "arch": tree.arch, "triton": tree.triton, "identity": context.triton,
            "settings": dict(context.env)}  # fmt: skip
    began, counts = time.monotonic(), {"hit": 0, "compiled": 0}
    with Client(url, timeout=CONNECT_TIMEOUT) as client:
        workers = len(client.scheduler_info().get("workers", {}))
        runner.say(f"--workers {url}: {len(jobs)} kernel jobs to {workers} worker(s)")
        [shared] = client.scatter([task], broadcast=True)
        keys = [context.key(job, sources) for job in jobs]
        try:  # the first failure; closing the client cancels the rest
            results = client.gather(client.map(remote_build, jobs, keys, task=shared, pure=False))
        except Exception as error:
            raise UserError(f"--workers: {type(error).__name__}: {error}".splitlines()[0]) from None
    for how, _ in results:
        counts[how] += 1
    runner.say(f"--workers: {counts['compiled']} compiled, {counts['hit']} already in the "
               f"store, {time.monotonic() - began:.1f} s")  # fmt: skip
    return counts
