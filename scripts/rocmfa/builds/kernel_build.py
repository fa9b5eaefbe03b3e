"""AOTriton's compile jobs (Bare.compile: ROCm/aotriton 6e00ef3e python/codegen/root.py): their
keys, the --cache store, the one place a kernel compiles, AOTriton's own build through the store
and `--workers` (a Dask cluster). What each part guarantees, and why: docs/kernel-check.md."""

import contextlib
import functools
import hashlib
import json
import operator
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections import namedtuple
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmfa.builds import compile_cache
from rocmfa.plumbing import options, pin_files, stamps
from rocmfa.plumbing.commands import Runner, last_line
from rocmfa.plumbing.errors import UserError, load_toml, network_error_line
from rocmfa.sources.checkouts import patch_set_digest

# Every compile's, whatever the environment: v3src/CMakeLists.txt's two, and no line info
# (it would embed the tree's and Triton's paths; .text is the same without it).
COMPILE_ENV = {
    "TRITON_F32_DEFAULT": "ieee",
    "TRITON_STORE_BINARY_ONLY": "1",
    "TRITON_DISABLE_LINE_INFO": "1",
}
KEY_VERSION = 3
MAGIC = b"ROCMFA-KERNEL/2\n"
LOCAL_DIR = "aotriton-kernels"
PINS_FILE = "kernel_compiler.toml"
NO_TRITON = "no Triton recorded for AOTriton {:.12} in pins/" + PINS_FILE
PYTHON_ENV = "ROCMFA_KERNEL_PYTHON"
VENV = "kernel-check/venv-triton-{}"  # the check's own, under the work dir
LAUNCHER = Path(__file__).resolve().with_name("kernel_launcher.py")  # run by path, -I -S
ENV_FILE = "rocmfa-kernels-env.json"  # in the build dir: the knobs to drop, the key's settings
BARE = Path("v3src") / "Bare.compile"  # v3src/CMakeLists.txt: AOTRITON_V2_BUILD_DIR
FORK = "third_party/triton"
MANIFEST = "rocmfa-kernels-keys.json"  # -o path -> the key last staged or let compile there
THREADS = 8  # store requests in flight while staging / storing
CONNECT_TIMEOUT = "5s"


# One line of Bare.compile (line: its number, from 1), and the combination the sample covers.
Job = namedtuple(
    "Job", "line venv python hsaco source kernel num_warps num_stages waves_per_eu target signature"
)
combo = operator.attrgetter("kernel", "num_warps", "num_stages", "waves_per_eu")


def read_jobs(path: Path) -> list[Job]:
    jobs = []
    for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = text.split(";")  # the signature holds ', ' but no ';'
        try:
            jobs += [Job(line, *fields[:5], *map(int, fields[5:8]), *fields[8:])] if text else []
        except (ValueError, TypeError):  # not 10 fields, or warps/stages/waves not numbers
            raise UserError(f"Bare.compile line {line}: not the generator's 10 fields") from None
    return jobs


def sample(jobs: Sequence[Job], size: int | None = None) -> list[Job]:
    """The first job of every combo; fewer: round-robin over the kernels; more: evenly spaced."""
    firsts = {combo(job): job for job in reversed(jobs)}  # the first job of each combo
    chosen = sorted(firsts.values(), key=lambda job: job.line)
    kernels = list(dict.fromkeys(job.kernel for job in jobs))
    if size is not None and size < len(kernels):
        raise UserError(f"--sample {size} is below the {len(kernels)} kernel families")
    if size is not None and size < len(chosen):
        groups = [[j for j in chosen if j.kernel == k] for k in kernels]
        depth = max(len(g) for g in groups)
        chosen = [g[d] for d in range(depth) for g in groups if d < len(g)][:size]
    elif size is not None and size > len(chosen):
        rest = [job for job in jobs if job not in firsts.values()]
        extra = min(size - len(chosen), len(rest))
        chosen += [rest[int(i * len(rest) / extra)] for i in range(extra)]
    return sorted(chosen, key=lambda job: job.line)


def compile_argv(job: Job, python: str, compile_py: Path, out: Path, *, timeout: str = "0"):
    """v3src/CMakeLists.txt's command (without cmake -E env); --timeout 0: a failure exits 1."""
    argv = [python, str(compile_py), job.source, "--kernel_name", job.kernel, "-o", str(out)]
    argv += ["-g", "1,1,1", "--num_warps", str(job.num_warps), "--num_stages", str(job.num_stages)]
    argv += ["--waves_per_eu", str(job.waves_per_eu), "--target", job.target]
    return [*argv, "--signature", job.signature, "--timeout", timeout]


def read_or_none(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def py_files(folder: Path) -> list[Path]:
    """What a kernel source imports from: its folder's .py files."""
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def settings(env: Mapping[str, str], knobs: Collection[str]) -> dict[str, str]:
    """The Triton settings env gives a compile: every knob Triton reads, and any TRITON_*."""
    fixed = {"TRITON_CACHE_DIR", *COMPILE_ENV}
    return {k: v for k, v in env.items() if (k in knobs or k[:7] == "TRITON_") and k not in fixed}


@dataclass(frozen=True)
class KeyContext:
    """What every job of one tree shares in its key."""

    triton: str  # version and wheel build (or the fork's commit)
    patches: str
    compiler: str  # sha256 of python/compile.py
    env: tuple[tuple[str, str], ...] = ()  # settings(), sorted
    knobs: tuple[str, ...] = ()  # what the Triton reads (dropped from a compile's environment)

    def keys(self, jobs: Sequence[Job]) -> list[str]:
        """Each job's key: its source folder (by relative path), job[5:] (kernel ... signature)."""
        digests = {}
        for root in {Path(job.source).parent for job in jobs}:
            h = hashlib.sha256()
            for path in py_files(root):
                h.update(path.relative_to(root).as_posix().encode() + b"\0")
                h.update(hashlib.sha256(path.read_bytes()).digest())
            digests[root] = h.hexdigest()
        env = sorted({**dict(self.env), **COMPILE_ENV}.items())
        shared = [self.triton, self.patches, env, self.compiler]
        parts = ([KEY_VERSION, digests[Path(j.source).parent], j[5:], *shared] for j in jobs)
        return [hashlib.sha256(json.dumps(p).encode()).hexdigest() for p in parts]


@dataclass(frozen=True)
class Tree:
    """A checked-out (patched) AOTriton tree and the Triton its keys name."""

    src: Path  # work/src/aotriton
    commit: str
    arch: str | None  # whose patch set the tree carries
    triton: str  # the version, or (AOTriton's own build) `fork third_party/triton@<commit>`

    @property
    def build(self) -> Path:  # the kernel check's
        return options.build_dir(self.src.parents[1], "kernel-check") / f"aotriton-{self.arch}"

    def key_context(self, python: str | None = None, build: Any = True) -> KeyContext:
        """The shared key part: python's Triton (default: the check's), its build, its settings."""
        python = python or known_python(self.src.parents[1], recorded_triton(self.commit) or "")
        info = triton_info(python) if python else {"build": None, "knobs": []}
        env = tuple(sorted(settings(os.environ, info["knobs"]).items()))
        named = f"{self.triton} ({info['build']})" if info["build"] and build else self.triton
        patches = patch_set_digest("aotriton", self.commit, arch=self.arch)
        compiler = hashlib.sha256((self.src / "python/compile.py").read_bytes()).hexdigest()
        return KeyContext(named, patches, compiler, env, tuple(info["knobs"]))


class Damaged(ValueError):
    """An entry (MAGIC, '<sha256 of the rest> <code object length>', code, .json) that is not."""


def pack(hsaco: bytes, meta: bytes) -> bytes:
    head = f"{hashlib.sha256(hsaco + meta).hexdigest()} {len(hsaco)}\n"
    return MAGIC + head.encode() + hsaco + meta


def unpack(blob: bytes) -> tuple[bytes, bytes]:
    head, _, body = blob.removeprefix(MAGIC).partition(b"\n")
    digest, _, size = head.decode("latin-1").partition(" ")
    if not blob.startswith(MAGIC) or not size.isdigit():
        raise Damaged("not a kernel entry")
    if hashlib.sha256(body).hexdigest() != digest:
        raise Damaged(f"sha256 mismatch over {len(body)} bytes (truncated?)")
    return body[: int(size)], body[int(size) :]


def packed(out: Path) -> bytes | None:
    """The entry of the code object at out and its metadata (None: either missing, or empty)."""
    hsaco = read_or_none(out.with_suffix(".hsaco"))
    meta = read_or_none(out.with_suffix(".json"))
    return pack(hsaco, meta) if hsaco and meta is not None else None


def install_kernel(out: Path, hsaco: bytes, meta: bytes) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    stamps.write_bytes_atomic(out.with_suffix(".json"), meta)
    stamps.write_bytes_atomic(out.with_suffix(".hsaco"), hsaco)


# Where entries are kept: what (in words), get(key) -> entry | None, put(key, entry).
Layer = namedtuple("Layer", "what get put")


def directory(root: Path) -> Layer:
    """Entries as files, written whole (temp file + rename), readable by a team's group."""

    def put(key: str, data: bytes) -> None:
        path = root / key[:2] / f"{key}.kernel"
        path.parent.mkdir(parents=True, exist_ok=True)
        stamps.write_bytes_atomic(path, data)
        path.chmod(0o644)

    return Layer(f"directory {root}", lambda k: read_or_none(root / k[:2] / f"{k}.kernel"), put)


def named(what: str, read: Callable, write: Callable, name: str) -> Layer:
    """A store that keeps key's entry as name.format(key): read(name), write(name, entry)."""
    return Layer(what, lambda k: read(name.format(k)), lambda k, v: write(name.format(k), v))


@dataclass
class KernelStore:
    """The local directory and a shared store over it (None: none, or gone: one warning line)."""

    local: Layer | None
    shared: Layer | None = None
    read_only: bool = False
    say: Any = print

    def describe(self) -> str:
        layers = " over ".join(b.what for b in (self.shared, self.local) if b is not None)
        return (layers or "none") + (" (read-only)" if self.read_only else "")

    def _lost(self, error: Exception) -> None:
        if self.shared is not None:
            why = str(error) or type(error).__name__
            self.say(f"WARNING: kernel store {self.shared.what}: {why}; compiling locally")
            self.shared = None

    def fetch(self, key: str, out: Path) -> bool:
        """key's code object and its .json put at out, if a layer has its entry whole."""
        for layer in [x for x in (self.local, self.shared) if x is not None]:
            try:
                blob = layer.get(key)
                code = None if blob is None else unpack(blob)
            except Damaged as error:  # only from an entry, so of a layer
                damaged = f"damaged entry {key[:16]} in {layer.what} ({error})"
                self.say(f"kernel store: {damaged}; recompiling")
                continue
            except Exception as error:
                self._lost(error)
                continue
            if code is not None and layer is self.shared and self.local is not None:
                self.local.put(key, blob)
            if code is not None:
                install_kernel(out, *code)
                return True
        return False

    def keep(self, key: str, out: Path) -> bool:
        if (blob := packed(out)) is not None:
            self.put(key, blob)
        return blob is not None

    def put(self, key: str, blob: bytes) -> None:
        if self.local is not None:
            self.local.put(key, blob)
        if self.shared is not None and not self.read_only:
            try:
                self.shared.put(key, blob)
            except Exception as error:
                self._lost(error)


def open_store(cache: Any, work: Path, arch: str, *, say=None, runner=None) -> KernelStore | None:
    """--cache's store (None: none): the local directory under a shared one that answers."""
    say = say or (runner.say if runner else print)
    spec = options.as_spec(cache)
    if spec is not None and spec.tool == "none":
        return None
    store = KernelStore(directory(options.cache_dir(work) / LOCAL_DIR / arch), say=say)
    if spec is None or not spec.remote:
        return store
    problem = runner.apply(compile_cache.probe, spec) if runner else compile_cache.probe(spec)
    if problem:
        say(f"WARNING: kernel store {spec.describe()}: {problem}; compiling locally")
        return store
    root = "/".join(p for p in (spec.prefix, "rocmfa-kernels", arch) if p)
    if spec.backend == "dir":
        store.shared = directory(Path(str(spec.endpoint)) / root)
    elif spec.backend == "redis":  # redis-py's connection pool serves the compile threads
        client = compile_cache.redis_client(spec, compile_cache.PROBE_TIMEOUT_S * 10)
        store.shared = named(spec.place, client.get, client.set, root + "/{}")
    else:  # boto3 through the team index's store: a 404 that is not NoSuchKey is an error
        from rocmfa.plumbing.team_index import S3Store

        s3 = S3Store(str(spec.bucket), root, spec.endpoint, spec.region)
        store.shared = named(spec.place, s3.read, s3.put_bytes, "{}.kernel")
    store.read_only = spec.read_only
    return store


TRITON_INFO = """
import importlib.metadata as m, inspect, json, re
info = {"build": None, "knobs": []}
try:
    d = m.distribution("triton")
    tags = [t[5:].strip() for t in (d.read_text("WHEEL") or "").splitlines() if t[:4] == "Tag:"]
    info["build"] = " ".join([d.version, *sorted(tags)])
    from triton import knobs
    from triton._C.libtriton import get_cache_invalidating_env_vars as invalidating
    names = re.findall(r'env_\\w+\\("([A-Z0-9_]+)"', inspect.getsource(knobs))
    info["knobs"] = sorted({*names, *invalidating()})
except Exception:  # no Triton, or one before triton.knobs (3.4): TRITON_* alone then
    pass
print(json.dumps(info))
"""


@functools.cache
def triton_info(python: str) -> dict[str, Any]:
    """{"build": "<version> <wheel tags>" | None, "knobs": the variables python's Triton reads}."""
    done = subprocess.run([python, "-I", "-c", TRITON_INFO], capture_output=True, text=True)
    return json.loads((done.stdout.splitlines() or ['{"build": null, "knobs": []}'])[-1])


def recorded_triton(commit: str) -> str | None:
    path = pin_files.pins_dir() / PINS_FILE
    table = load_toml(path, "kernel compiler pins").get("compiler", {}) if path.is_file() else {}
    entry = table.get(commit) if isinstance(table, dict) else None
    version = entry.get("triton") if isinstance(entry, dict) else entry
    if entry is not None and (not isinstance(version, str) or not version):
        raise UserError(f'{path}: [compiler.{commit}] needs triton = "X.Y.Z"')
    return version


def pypi_triton(commit: str) -> str:
    if (version := recorded_triton(commit)) is None:
        raise UserError(f"--triton pypi: {NO_TRITON.format(commit)}")
    return version


def known_python(work: Path, triton: str) -> str | None:
    python = work / VENV.format(triton) / "bin" / "python"
    return os.environ.get(PYTHON_ENV) or (str(python) if python.exists() else None)


# compile.py run by python with the key's Triton settings (the environment's own dropped).
Compiler = namedtuple("Compiler", "python compile_py settings", defaults=[{}])


class CompileFailed(Exception):
    """A job that did not compile: the kernel, the job and the compiler's last line."""


def build_kernel(job: Job, key: str, compiler: Compiler, store: KernelStore | None, out=None):
    """job's code object at out (default: its Bare.compile path): ('hit' | 'compiled', s)."""
    began = time.monotonic()
    out = Path(out or job.hsaco)
    store = store or KernelStore(None)
    if store.fetch(key, out):
        return "hit", time.monotonic() - began
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.stem[:40]}.", dir=out.parent) as scratch:
        given = {**compiler.settings, "TRITON_CACHE_DIR": f"{scratch}/triton", **COMPILE_ENV}
        env_file = Path(scratch) / ENV_FILE  # the launcher sets the job's environment from it
        knobs = triton_info(compiler.python)["knobs"]
        env_file.write_text(json.dumps({"knobs": knobs, "env": given}))
        target = Path(scratch) / out.name
        compile_py = Path(compiler.compile_py).resolve()
        argv = [sys.executable, "-I", "-S", LAUNCHER, compile_py, env_file]
        argv += compile_argv(job, compiler.python, compile_py, target)
        done = subprocess.run(list(map(str, argv)), capture_output=True, text=True)
        blob = packed(target)
    why = last_line(done.stderr or done.stdout) or "no output" if done.returncode else None
    if why or blob is None:
        where = f"Bare.compile line {job.line}: {Path(job.source).name}, num_warps {job.num_warps}"
        rest = f"num_stages {job.num_stages}, waves_per_eu {job.waves_per_eu}, target {job.target}"
        raise CompileFailed(f"{job.kernel} ({where}, {rest}): {why or 'compile.py left no kernel'}")
    store.put(key, blob)
    install_kernel(out, *unpack(blob))
    return "compiled", time.monotonic() - began


@dataclass
class KernelBuild:
    tree: Tree  # its triton: what the keys say about Triton
    build: Path
    store: KernelStore
    wheel: str | None  # AOTRITON_USE_LOCAL_TRITON_WHEEL (pypi)
    keys: dict[str, str] = field(default_factory=dict)  # -o path -> key
    hits: set[str] = field(default_factory=set)  # -o paths staged from the store

    def launcher(self) -> str:
        compile_py = (self.tree.src / "python" / "compile.py").resolve()
        argv = [sys.executable, "-I", "-S", LAUNCHER, compile_py, self.build / ENV_FILE]
        return shlex.join(map(str, argv))

    def cmake_args(self) -> list[str]:
        args = [f"-DCMAKE_PROJECT_INCLUDE={LAUNCHER.with_suffix('.cmake')}"]
        args += [f"-DROCMFA_KERNEL_LAUNCHER={self.launcher()}"]
        return args + ([f"-DAOTRITON_USE_LOCAL_TRITON_WHEEL={self.wheel}"] if self.wheel else [])

    def stage(self, runner: Runner) -> None:
        """Before ninja: every job's key, the whole set looked up at once, hits put in place."""
        bare = self.build / BARE
        where = self.store.describe()
        line = runner.plan_line(
            f"then look every job of {bare} up in the kernel store ({where}; keys name triton "
            f"{self.tree.triton}), each hit at its -o path; ninja runs every custom command "
            f"through {self.launcher()}; what compiles is stored after ninja"
        )
        if line or not bare.is_file():
            return runner.say(line or f"kernel store: no {bare}; AOTriton's kernel jobs run as is")
        # Another venv's (AOTRITON_ALT_TRITON_WHEEL_CONFIG_FILE) Triton is not the keys'.
        jobs = [job for job in read_jobs(bare) if job.venv == "default"]
        context = self.tree.key_context(build=self.wheel)  # the fork's keys name no wheel build
        given = {"knobs": context.knobs, "env": {**dict(context.env), **COMPILE_ENV}}
        stamps.write_text_atomic(self.build / ENV_FILE, json.dumps(given))
        self.keys = dict(zip([job.hsaco for job in jobs], context.keys(jobs), strict=True))
        # Ninja and the launcher would keep a code object built for another key: drop it.
        built_for = stamps.read(self.build / MANIFEST) or {}
        for out, key in self.keys.items():
            if built_for.get(out) != key:
                Path(out).with_suffix(".hsaco").unlink(missing_ok=True)
        stamps.write_text_atomic(self.build / MANIFEST, json.dumps(self.keys))
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            found = pool.map(self.store.fetch, self.keys.values(), map(Path, self.keys))
            self.hits = {out for out, hit in zip(self.keys, found, strict=True) if hit}
        found = f"{len(self.hits)} of {len(jobs)} kernel jobs of the build from {where}"
        left = len(jobs) - len(self.hits)
        runner.say(f"kernel store: {found} (triton {self.tree.triton}); {left} to compile")

    def harvest(self, runner: Runner) -> None:
        """After ninja (also a failed one): every code object the store did not give goes in."""
        if not self.keys:  # nothing staged (a plan stages nothing)
            return
        left = [out for out in self.keys if out not in self.hits]  # each read in its thread
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            stored = sum(pool.map(self.store.keep, [self.keys[o] for o in left], map(Path, left)))
        got = f"kernel store: {len(self.hits)} kernels from the store"
        runner.say(f"{got}, {stored} compiled by the build, stored in {self.store.describe()}")


@contextlib.contextmanager
def through_store(kernels: KernelBuild | None, build: Path, runner: Runner) -> Iterator[None]:
    if kernels is None:  # what the build compiles is for no known key
        runner.apply((build / MANIFEST).unlink, missing_ok=True)
        yield
        return
    kernels.stage(runner)
    try:
        yield
    finally:
        kernels.harvest(runner)


def plan(ctx: Any, build_options: Any, src: Path, build: Path, store: Any, runner: Runner):
    """The launcher and the Triton the build compiles with (None: no store, no launcher)."""
    if store is None:
        return None
    if build_options.triton == "pypi":
        identity = pypi_triton(ctx.pin.commit)
        wheel = f"triton=={identity}"
    else:  # the fork the build pip-installs: the checked-out submodule's commit
        head = runner.ask(["git", "-C", src / FORK, "rev-parse", "HEAD"], "<its commit>")
        identity = f"fork {FORK}@{head}"
        wheel = None
    return KernelBuild(Tree(src, ctx.pin.commit, ctx.arch.name, identity), build, store, wheel)


def require(url: str, cache: Any, runner: Runner) -> None:
    """What --workers (a Dask cluster) needs, each missing one a line (a plan: no scheduler)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("tcp", "tls") or not parts.hostname:
        raise UserError(f"--workers {url!r}: expected a Dask scheduler address tcp://HOST:PORT")
    spec = options.as_spec(cache)
    if spec is None or not spec.remote or spec.read_only:
        shared = "a directory every machine mounts, redis://, s3://"
        raise UserError(f"--workers needs a shared --cache, not read_only=1 ({shared})")
    try:
        from distributed import Client
    except ImportError:
        hint = "pip install -e '.[cluster]'"
        raise UserError(f"--workers needs Dask distributed, the optional extra: {hint}") from None
    try:
        runner.apply(lambda: Client(url, timeout=CONNECT_TIMEOUT).close())
    except OSError as error:
        why = network_error_line(error)
        raise UserError(f"--workers {url}: Dask scheduler unreachable ({why})") from None


def remote_build(job: Job, key: str, task: tuple) -> tuple[str, float]:
    """On a worker: the job from the shared store, else compiled here and put there."""
    from distributed import get_worker

    tree, context, cache, files = task  # Tree, KeyContext, --cache, the sources
    worker = get_worker()
    scratch = Path(worker.local_directory)
    store = open_store(cache, scratch, tree.arch, say=print)  # require(): a shared store
    if store.shared is None:
        raise RuntimeError(f"worker {worker.address}: the kernel store {cache} is unreachable")
    store.local = None  # the shared store alone: nothing kept on the worker
    python = os.environ.get(PYTHON_ENV) or sys.executable
    have = triton_info(python)["build"]
    if (f"{tree.triton} ({have})" if have else tree.triton) != context.triton:
        named = f"the keys name triton {context.triton} (install it, or set {PYTHON_ENV})"
        raise RuntimeError(f"worker {worker.address}: triton {have or 'not installed'}, {named}")
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:  # the sources, for this job alone
        for name, data in files.items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_bytes(data)
        compiler = Compiler(python, Path(tmp) / "python/compile.py", dict(context.env))
        here = job._replace(source=str(Path(tmp) / Path(job.source).relative_to(tree.src)))
        result = build_kernel(here, key, compiler, store, Path(tmp) / "k.hsaco")
    if store.shared is None:
        raise RuntimeError(f"worker {worker.address}: lost the kernel store {cache}")
    return result


def fan_out(tree: Any, url: str, cache: Any, runner: Runner, jobs: list[Job] | None = None):
    """Every job of the tree's Bare.compile (or jobs) through the cluster into the store."""
    bare = tree.build / "Bare.compile"
    line = runner.plan_line(
        f"--workers {url}: send every job of {bare} as a task; a worker gets its key from the "
        f"{options.as_spec(cache).place} or runs compile.py with triton {tree.triton} to store it"
    )
    if line:
        return runner.say(line)
    from distributed import Client

    jobs = read_jobs(bare) if jobs is None else jobs
    context = tree.key_context()
    # python/compile.py and the sources' folders (what the keys digest), sent once
    names = [tree.src / "python" / "compile.py"]
    for folder in {Path(job.source).parent for job in jobs}:
        names += py_files(folder)
    files = {p.relative_to(tree.src).as_posix(): p.read_bytes() for p in names}
    began = time.monotonic()
    with Client(url, timeout=CONNECT_TIMEOUT) as client:
        [task] = client.scatter([(tree, context, cache, files)], broadcast=True)
        built = client.map(remote_build, jobs, context.keys(jobs), task=task, pure=False)
        try:  # the first failure; closing the client cancels the rest
            how = [result[0] for result in client.gather(built)]
        except Exception as error:
            raise UserError(f"--workers: {type(error).__name__}: {error}".splitlines()[0]) from None
    counts = {name: how.count(name) for name in ("hit", "compiled")}
    took = f"{counts['hit']} already in the store, {time.monotonic() - began:.1f} s"
    runner.say(f"--workers: {counts['compiled']} compiled, {took}")
    return counts
