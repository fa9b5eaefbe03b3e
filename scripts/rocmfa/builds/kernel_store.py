"""AOTriton's kernel compile jobs (Bare.compile, ROCm/aotriton 6e00ef3e python/codegen/root.py
write_hsaco), the key that decides each code object, the store behind --cache, and the one
place a kernel is compiled. What each part guarantees, and why: docs/kernel-check.md."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmfa.builds import compile_cache
from rocmfa.plumbing import paths, pin_files, stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.datafiles import load_toml
from rocmfa.plumbing.errors import UserError
from rocmfa.sources.patches import patch_set_digest

# Set for every compile, whatever the environment. v3src/CMakeLists.txt sets the first two;
# line info embeds the tree's and Triton's paths (.text is the same without it).
COMPILE_ENV = {"TRITON_F32_DEFAULT": "ieee", "TRITON_STORE_BINARY_ONLY": "1",
               "TRITON_DISABLE_LINE_INFO": "1"}  # fmt: skip
FIXED = {"TRITON_CACHE_DIR", *COMPILE_ENV}
KEY_VERSION = 2
MAGIC = b"ROCMFA-KERNEL/1\n"
LOCAL_DIR = "aotriton-kernels"
PINS_FILE = "kernel_compiler.toml"
PYTHON_ENV = "ROCMFA_KERNEL_PYTHON"


class JobListError(ValueError):
    """Bare.compile is not what the generator writes."""


@dataclass(frozen=True)
class Job:
    line: int  # 1-based line of Bare.compile
    venv: str
    python: str
    hsaco: str
    source: str
    kernel: str
    num_warps: int
    num_stages: int
    waves_per_eu: int
    target: str
    signature: str

    @property
    def combo(self) -> tuple[str, int, int, int]:
        return (self.kernel, self.num_warps, self.num_stages, self.waves_per_eu)

    def describe(self) -> str:
        return (f"{self.kernel} (Bare.compile line {self.line}: {Path(self.source).name}, "
                f"num_warps {self.num_warps}, num_stages {self.num_stages}, waves_per_eu "
                f"{self.waves_per_eu}, target {self.target})")  # fmt: skip


def parse_line(text: str, line: int) -> Job:
    fields = text.rstrip("\n").split(";")  # the signature holds ', ' but no ';'
    if len(fields) != 10:
        raise JobListError(f"Bare.compile line {line}: {len(fields)} fields, expected 10")
    venv, python, hsaco, source, kernel, warps, stages, waves, target, signature = fields
    try:
        numbers = int(warps), int(stages), int(waves)
    except ValueError:
        raise JobListError(f"Bare.compile line {line}: warps/stages/waves: not numbers") from None
    return Job(line, venv, python, hsaco, source, kernel, *numbers, target, signature)


def read_jobs(path: Path) -> list[Job]:
    text = path.read_text(encoding="utf-8")
    return [parse_line(t, n) for n, t in enumerate(text.splitlines(), 1) if t.strip()]


def sample(jobs: Sequence[Job], size: int | None = None) -> list[Job]:
    """The first job of every (kernel, num_warps, num_stages, waves_per_eu); a smaller size
    takes them round-robin over the kernels (each still once), a larger adds evenly spaced
    jobs. In Bare.compile's order."""
    firsts: dict[tuple[str, int, int, int], Job] = {}
    for job in jobs:
        firsts.setdefault(job.combo, job)
    chosen = list(firsts.values())
    kernels = list(dict.fromkeys(job.kernel for job in jobs))
    if size is not None and size < len(firsts):
        if size < len(kernels):
            raise ValueError(f"--sample {size} is below the {len(kernels)} kernel families "
                             "of this target")  # fmt: skip
        groups = [[j for j in chosen if j.kernel == k] for k in kernels]
        depth = max(len(g) for g in groups)
        chosen = [g[d] for d in range(depth) for g in groups if d < len(g)][:size]
    elif size is not None and size > len(firsts):
        rest = [job for job in jobs if job not in firsts.values()]
        extra = min(size - len(chosen), len(rest))
        chosen += [rest[int(i * len(rest) / extra)] for i in range(extra)]
    return sorted(chosen, key=lambda job: job.line)


def compile_argv(job: Job, python: str, compile_py: Path, out: Path, *, timeout: str = "0"):
    """v3src/CMakeLists.txt's command for one job (without cmake -E env). --timeout 0: a failed
    compile exits non-zero (> 0 exits 0 with an empty .hsaco)."""
    return [
        python, str(compile_py), job.source, "--kernel_name", job.kernel, "-o", str(out),
        "-g", "1,1,1", "--num_warps", str(job.num_warps), "--num_stages", str(job.num_stages),
        "--waves_per_eu", str(job.waves_per_eu), "--target", job.target,
        "--signature", job.signature, "--timeout", timeout,
    ]  # fmt: skip


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_digests(jobs: Iterable[Job]) -> dict[str, str]:
    """Per source: its folder's .py files (a kernel imports its siblings), by relative path."""
    digests = {}
    for source in {job.source for job in jobs}:
        h, root = hashlib.sha256(), Path(source).parent
        for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
            h.update(path.relative_to(root).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
        digests[source] = h.hexdigest()
    return digests


def settings(env: Mapping[str, str], knobs: Iterable[str]) -> dict[str, str]:
    """The Triton settings env gives a compile: every knob Triton reads, and any TRITON_*."""
    names = set(knobs)
    return {k: v for k, v in env.items() if (k in names or k[:7] == "TRITON_") and k not in FIXED}


@dataclass(frozen=True)
class KeyContext:
    """What every job of one tree shares in its key."""

    triton: str  # version and wheel build (or the fork's commit)
    patches: str
    compiler: str  # sha256 of python/compile.py
    env: tuple[tuple[str, str], ...] = ()  # settings(), sorted

    def key(self, job: Job, sources: dict[str, str]) -> str:
        fields = {
            "v": KEY_VERSION, "source": sources[job.source], "kernel": job.kernel,
            "signature": job.signature, "warps": job.num_warps, "stages": job.num_stages,
            "waves_per_eu": job.waves_per_eu, "target": job.target, "triton": self.triton,
            "patches": self.patches, "compiler": self.compiler,
            "env": {**dict(self.env), **COMPILE_ENV},
        }  # fmt: skip
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


# --- entries: a header with length and sha256 of both parts, then the code object and .json --


class Damaged(ValueError):
    """A store entry whose digests or lengths do not match."""


def _sums(*parts: bytes) -> list[list[Any]]:
    return [[len(p), hashlib.sha256(p).hexdigest()] for p in parts]


def pack(hsaco: bytes, meta: bytes) -> bytes:
    """The entry; compile.py's .json without the compiling venv's paths (extern_libs cut to
    triton/..., Triton's hash over them dropped): AOTriton reads only 'shared' (python/aks2.py)."""
    try:
        data = json.loads(meta)
    except ValueError:
        data = None
    if isinstance(data, dict) and {"hash", "extern_libs"} & data.keys():
        data.pop("hash", None)
        libs = data.get("extern_libs") or []
        data["extern_libs"] = [[name, path[path.rfind("triton/") :]] for name, path in libs]
        meta = json.dumps(data, indent=2).encode()
    (h, m) = _sums(hsaco, meta)
    header = json.dumps({"hsaco": h, "meta": m}, sort_keys=True)
    return MAGIC + header.encode() + b"\n" + hsaco + meta


def unpack(blob: bytes) -> tuple[bytes, bytes]:
    if not blob.startswith(MAGIC):
        raise Damaged("not a kernel entry")
    head, sep, body = blob[len(MAGIC) :].partition(b"\n")
    try:
        header = json.loads(head) if sep else None
        wanted = [header["hsaco"], header["meta"]]
        (hlen, _), (mlen, _) = wanted
    except (ValueError, TypeError, KeyError):
        raise Damaged("unreadable header") from None
    if len(body) != hlen + mlen:
        raise Damaged(f"{len(body)} bytes, expected {hlen + mlen} (truncated?)")
    hsaco, meta = body[:hlen], body[hlen:]
    if _sums(hsaco, meta) != wanted:
        raise Damaged("sha256 mismatch")
    if not hsaco:
        raise Damaged("empty code object")
    return hsaco, meta


# --- transports: get(key) -> bytes | None, put(key, bytes), .what in words ---------------------


class DirBackend:
    def __init__(self, root: Path) -> None:
        self.root, self.what = root, f"directory {root}"

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.kernel"

    def get(self, key: str) -> bytes | None:
        path = self._path(key)
        return path.read_bytes() if path.is_file() else None

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        stamps.write_bytes_atomic(path, data)
        path.chmod(0o644)  # a team's shared directory: readable by the others


class RedisBackend:
    """redis-py (its connection pool serves the compile threads)."""

    def __init__(self, spec: compile_cache.CacheSpec, prefix: str) -> None:
        self.prefix = prefix
        self.client = compile_cache.redis_client(spec, compile_cache.PROBE_TIMEOUT_S * 10)
        kwargs = self.client.connection_pool.connection_kwargs
        self.what = f"redis {kwargs.get('host')}:{kwargs.get('port')}"

    def get(self, key: str) -> bytes | None:
        return self.client.get(f"{self.prefix}/{key}")

    def put(self, key: str, data: bytes) -> None:
        self.client.set(f"{self.prefix}/{key}", data)


class S3Backend:
    """boto3, through the team index's S3 store (a 404 that is not NoSuchKey is an error)."""

    def __init__(self, spec: compile_cache.CacheSpec, root: str) -> None:
        from rocmfa.plumbing import team_index

        self.store = team_index.S3Store(str(spec.bucket), root, spec.endpoint, spec.region)
        self.what = spec.place

    def get(self, key: str) -> bytes | None:
        return self.store.read(f"{key}.kernel")

    def put(self, key: str, data: bytes) -> None:
        self.store.put_bytes(f"{key}.kernel", data, "application/octet-stream")


@dataclass
class KernelStore:
    """The local directory, and a shared store over it (None when there is none or it went
    away: one warning line, then local compiles)."""

    local: DirBackend | None
    shared: DirBackend | RedisBackend | S3Backend | None = None
    read_only: bool = False
    say: Callable[[str], None] = print

    def describe(self) -> str:
        layers = [b.what for b in (self.shared, self.local) if b is not None]
        return " over ".join(layers) + (" (read-only)" if self.read_only else "") or "none"

    def _lost(self, error: Exception) -> None:
        if self.shared is not None:
            why = str(error) or type(error).__name__
            self.say(f"WARNING: kernel store {self.shared.what}: {why}; compiling locally")
            self.shared = None

    def get(self, key: str) -> bytes | None:
        for layer in (self.local, self.shared):
            try:
                blob = layer.get(key) if layer is not None else None
                whole = blob is not None and bool(unpack(blob))
            except Damaged as error:  # only from an entry, so of a layer
                self.say(f"kernel store: damaged entry {key[:16]} in {layer.what} ({error}); "
                         "recompiling")  # fmt: skip
                whole = False
            except Exception as error:
                self._lost(error)
                whole = False
            if whole and layer is self.shared and self.local is not None:
                self.local.put(key, blob)
            if whole:
                return blob
        return None

    def put(self, key: str, blob: bytes) -> None:
        if self.local is not None:
            self.local.put(key, blob)
        if self.shared is not None and not self.read_only:
            try:
                self.shared.put(key, blob)
            except Exception as error:
                self._lost(error)


def open_store(cache: Any, work: Path, arch: str, *, say: Callable[[str], None] | None = None,
               runner: Runner | None = None) -> KernelStore | None:  # fmt: skip
    """The store for --cache (None: --cache none); a shared one that does not answer is one
    warning line and the local directory alone. With a runner: its lines, and a plan probes
    nothing."""
    say = say or (runner.say if runner else print)
    spec = compile_cache.as_spec(cache)
    if spec is not None and spec.tool == "none":
        return None
    store = KernelStore(DirBackend(paths.cache_dir(work) / LOCAL_DIR / arch), say=say)
    if spec is None or not spec.remote:
        return store
    if spec.backend == "webdav":
        say(f"kernel store: {store.describe()} (WebDAV is sccache's alone; a directory, "
            "redis:// and s3:// also share AOTriton's kernels)")  # fmt: skip
        return store
    root = "/".join(p for p in (spec.prefix, "rocmfa-kernels", arch) if p)
    problem = runner.apply(compile_cache.probe, spec) if runner else compile_cache.probe(spec)
    if problem:
        say(f"WARNING: kernel store {spec.describe()}: {problem}; compiling locally")
    elif spec.backend == "dir":
        store.shared = DirBackend(Path(str(spec.endpoint)) / root)
    else:  # no connection before first use
        store.shared = (RedisBackend if spec.backend == "redis" else S3Backend)(spec, root)
    store.read_only = spec.read_only and store.shared is not None
    return store


# --- one job: from the store, else compiled ----------------------------------------------------

TRITON_INFO = """
import importlib.metadata as m, json
info = {"build": None, "knobs": []}
try:
    d = m.distribution("triton")
    tags = [t[5:].strip() for t in (d.read_text("WHEEL") or "").splitlines() if t[:4] == "Tag:"]
    info["build"] = " ".join([d.version, *sorted(tags)])
    import inspect, re
    from triton import knobs
    from triton._C.libtriton import get_cache_invalidating_env_vars as invalidating
    groups = [g for g in vars(knobs).values() if isinstance(g, knobs.base_knobs)]
    names = {d.key for g in groups for d in g.knob_descriptors.values()}
    names |= set(re.findall(r'env_\\w+\\("([A-Z0-9_]+)"', inspect.getsource(knobs)))  # TRITON_DEBUG
    info["knobs"] = sorted(names | set(invalidating()))
except Exception:  # no Triton, or one before triton.knobs (3.4): TRITON_* alone then
    pass
print(json.dumps(info))
"""


@functools.cache
def triton_info(python: str) -> dict[str, Any]:
    """{"build": "<version> <wheel tags>" | None, "knobs": the variables python's Triton reads
    (triton/knobs.py, libtriton's cache-invalidating list)}."""
    done = subprocess.run([python, "-I", "-c", TRITON_INFO], capture_output=True, text=True)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"build": None, "knobs": []}


# --- the Triton that compiles: recorded per AOTriton commit, and its settings ---------------


def recorded_triton(commit: str) -> str | None:
    """The Triton version pins/kernel_compiler.toml records for this AOTriton commit."""
    path = pin_files.pins_dir() / PINS_FILE
    table = load_toml(path, "kernel compiler pins").get("compiler", {}) if path.is_file() else {}
    entry = table.get(commit) if isinstance(table, dict) else None
    version = entry.get("triton") if isinstance(entry, dict) else entry
    if entry is not None and (not isinstance(version, str) or not version):
        raise UserError(f'{path}: [compiler.{commit}] needs triton = "X.Y.Z"')
    return version


def no_triton(commit: str) -> str:
    return f"no Triton recorded for AOTriton {commit[:12]} in pins/{PINS_FILE}"


def venv_dir(work: Path, triton: str) -> Path:
    return work / "kernel-check" / f"venv-triton-{triton}"


def key_context(
    triton: str, commit: str, arch: str | None, src: Path, python: str | None, build: bool = True
) -> KeyContext:
    """What every job of a tree shares in its key (the check, the build, --workers): with
    python's Triton, its build (unless the fork compiles) and the settings this environment
    gives the variables it reads."""
    patches = patch_set_digest("aotriton", commit, arch=arch)
    info = triton_info(python) if python else {"build": None, "knobs": []}
    env = tuple(sorted(settings(os.environ, info["knobs"]).items()))
    named = f"{triton} ({info['build']})" if info["build"] and build else triton
    return KeyContext(named, patches, file_digest(src / "python/compile.py"), env)


def known_python(work: Path, triton: str) -> str | None:
    """$ROCMFA_KERNEL_PYTHON, else the check's venv for this Triton once it exists."""
    python = venv_dir(work, triton) / "bin" / "python"
    return os.environ.get(PYTHON_ENV) or (str(python) if python.exists() else None)


@dataclass(frozen=True)
class Compiler:
    """compile.py with python's Triton and the key's Triton settings (the environment's own
    dropped); Triton's cache is in the job's scratch folder, removed with it."""

    python: str
    compile_py: Path
    settings: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def environ(self, scratch: Path) -> dict[str, str]:
        knobs = set(triton_info(self.python)["knobs"])
        base = {k: v for k, v in self.env.items() if k not in knobs and k[:7] != "TRITON_"}
        return {**base, **self.settings, "TRITON_CACHE_DIR": str(scratch / "triton"), **COMPILE_ENV}


class CompileFailed(Exception):
    def __init__(self, job: Job, message: str) -> None:
        super().__init__(f"{job.describe()}: {message}")
        self.job, self.message = job, message

    def __reduce__(self):  # travels back from a cluster worker
        return (CompileFailed, (self.job, self.message))


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def install_kernel(out: Path, hsaco: bytes, meta: bytes) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    stamps.write_bytes_atomic(out.with_suffix(".json"), meta)
    stamps.write_bytes_atomic(out.with_suffix(".hsaco"), hsaco)


def build_kernel(
    job: Job, key: str, compiler: Compiler, store: KernelStore | None, out: Path | None = None
) -> tuple[str, float]:
    """job's code object at out (default: its Bare.compile path): ('hit' | 'compiled', s).
    CompileFailed names the kernel, the job and the compiler's last line."""
    began, out, how = time.monotonic(), Path(out or job.hsaco), "hit"
    blob = store.get(key) if store is not None else None
    if blob is None:
        how = "compiled"
        out.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{out.stem[:40]}.", dir=out.parent))
        try:
            blob = _compile(job, compiler, scratch, scratch / out.name)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if store is not None:
            store.put(key, blob)
    install_kernel(out, *unpack(blob))
    return how, time.monotonic() - began


def _compile(job: Job, compiler: Compiler, scratch: Path, target: Path) -> bytes:
    argv = compile_argv(job, compiler.python, compiler.compile_py, target)
    done = subprocess.run(argv, env=compiler.environ(scratch), capture_output=True, text=True)
    if done.returncode != 0:
        raise CompileFailed(job, last_line(done.stderr or done.stdout))
    try:
        hsaco = target.with_suffix(".hsaco").read_bytes()
        meta = target.with_suffix(".json").read_bytes()
    except FileNotFoundError as missing:
        raise CompileFailed(job, f"compile.py wrote no {Path(missing.filename).name}") from None
    if not hsaco:
        raise CompileFailed(job, "empty code object (" + last_line(meta.decode()) + ")")
    return pack(hsaco, meta)
