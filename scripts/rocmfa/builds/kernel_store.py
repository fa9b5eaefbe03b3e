"""AOTriton's kernel compile jobs (Bare.compile, ROCm/aotriton 6e00ef3e python/codegen/root.py
write_hsaco), the key that decides each code object, the store behind --cache, and the one
place a kernel is compiled. What each part guarantees, and why: docs/kernel-check.md."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmfa.builds import compile_cache
from rocmfa.builds.kernel_launcher import job_environ
from rocmfa.plumbing import paths, pin_files, stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.datafiles import load_toml
from rocmfa.plumbing.errors import UserError
from rocmfa.sources.checkouts import last_line
from rocmfa.sources.patches import patch_set_digest

# Set for every compile, whatever the environment. v3src/CMakeLists.txt sets the first two;
# line info embeds the tree's and Triton's paths (.text is the same without it).
COMPILE_ENV = {"TRITON_F32_DEFAULT": "ieee", "TRITON_STORE_BINARY_ONLY": "1",
               "TRITON_DISABLE_LINE_INFO": "1"}  # fmt: skip
KEY_VERSION = 3
MAGIC = b"ROCMFA-KERNEL/2\n"
LOCAL_DIR = "aotriton-kernels"
PINS_FILE = "kernel_compiler.toml"
NO_TRITON = "no Triton recorded for AOTriton {:.12} in pins/" + PINS_FILE
PYTHON_ENV = "ROCMFA_KERNEL_PYTHON"


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


def parse_line(text: str, line: int) -> Job:
    try:  # the signature holds ', ' but no ';'
        venv, python, hsaco, source, kernel, warps, stages, waves, target, sig = text.split(";")
        numbers = int(warps), int(stages), int(waves)
    except ValueError:
        raise UserError(f"Bare.compile line {line}: not the generator's 10 fields") from None
    return Job(line, venv, python, hsaco, source, kernel, *numbers, target, sig)


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
    if size is not None and size < len(kernels):
        raise UserError(f"--sample {size} is below the {len(kernels)} kernel families of this "
                        "target")  # fmt: skip
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


def read_or_none(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


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
    names, fixed = set(knobs), {"TRITON_CACHE_DIR", *COMPILE_ENV}
    return {k: v for k, v in env.items() if (k in names or k[:7] == "TRITON_") and k not in fixed}


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


def key_context(
    triton: str, commit: str, arch: str | None, src: Path, python: str | None, build: bool = True
) -> KeyContext:
    """For the check, the build and --workers: with python's Triton, its build (unless the fork
    compiles) and the settings this environment gives the variables it reads."""
    info = triton_info(python) if python else {"build": None, "knobs": []}
    env = tuple(sorted(settings(os.environ, info["knobs"]).items()))
    named = f"{triton} ({info['build']})" if info["build"] and build else triton
    patches = patch_set_digest("aotriton", commit, arch=arch)
    return KeyContext(named, patches, file_digest(src / "python/compile.py"), env)


# --- an entry: MAGIC, "<sha256 of the rest> <code object length>\n", code object, .json -------


class Damaged(ValueError):
    """A store entry whose digest or layout does not match."""


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
    if not int(size):
        raise Damaged("empty code object")
    return body[: int(size)], body[int(size) :]


@dataclass
class Layer:
    """Where entries are kept: get(key) -> entry | None, put(key, entry); what, in words."""

    what: str
    get: Callable[[str], bytes | None]
    put: Callable[[str, bytes], Any]


def directory(root: Path) -> Layer:
    """Entries as files, written whole (temp file + rename), readable by a team's group."""

    def put(key: str, data: bytes) -> None:
        path = root / key[:2] / f"{key}.kernel"
        path.parent.mkdir(parents=True, exist_ok=True)
        stamps.write_bytes_atomic(path, data)
        path.chmod(0o644)

    return Layer(f"directory {root}", lambda k: read_or_none(root / k[:2] / f"{k}.kernel"), put)


@dataclass
class KernelStore:
    """The local directory, and a shared store over it (None when there is none or it went
    away: one warning line, then local compiles)."""

    local: Layer | None
    shared: Layer | None = None
    read_only: bool = False
    say: Callable[[str], None] = print

    def describe(self) -> str:
        layers = " over ".join(b.what for b in (self.shared, self.local) if b is not None)
        return (layers or "none") + (" (read-only)" if self.read_only else "")

    def _lost(self, error: Exception) -> None:
        if self.shared is not None:
            why = str(error) or type(error).__name__
            self.say(f"WARNING: kernel store {self.shared.what}: {why}; compiling locally")
            self.shared = None

    def get(self, key: str) -> bytes | None:
        for layer in [x for x in (self.local, self.shared) if x is not None]:
            try:
                blob = layer.get(key)
                whole = blob is not None and bool(unpack(blob))
            except Damaged as error:  # only from an entry, so of a layer
                self.say(f"kernel store: damaged entry {key[:16]} in {layer.what} ({error}); "
                         "recompiling")  # fmt: skip
                continue
            except Exception as error:
                self._lost(error)
                continue
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
    """The store for --cache (None: --cache none): the local directory, under a shared one
    (keys below <prefix>/rocmfa-kernels/<arch>) unless that does not answer (one warning
    line). With a runner: its lines, and a plan probes nothing."""
    say = say or (runner.say if runner else print)
    spec = compile_cache.as_spec(cache)
    if spec is not None and spec.tool == "none":
        return None
    store = KernelStore(directory(paths.cache_dir(work) / LOCAL_DIR / arch), say=say)
    if spec is None or not spec.remote:
        return store
    if spec.backend == "webdav":
        say(f"kernel store: {store.describe()} (WebDAV is sccache's alone; a directory, "
            "redis:// and s3:// also share AOTriton's kernels)")  # fmt: skip
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
        store.shared = Layer(spec.place, lambda k: client.get(f"{root}/{k}"),
                             lambda k, v: client.set(f"{root}/{k}", v))  # fmt: skip
    else:  # boto3 through the team index's store: a 404 that is not NoSuchKey is an error
        from rocmfa.plumbing.team_index import S3Store

        s3 = S3Store(str(spec.bucket), root, spec.endpoint, spec.region)
        store.shared = Layer(spec.place, lambda k: s3.read(f"{k}.kernel"),
                             lambda k, v: s3.put_bytes(f"{k}.kernel", v))  # fmt: skip
    store.read_only = spec.read_only
    return store


# --- the Triton that compiles: recorded per AOTriton commit, its build and settings ----------

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
    """{"build": "<version> <wheel tags>" | None, "knobs": the variables python's Triton reads
    (triton/knobs.py, libtriton's cache-invalidating list)}."""
    done = subprocess.run([python, "-I", "-c", TRITON_INFO], capture_output=True, text=True)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"build": None, "knobs": []}


def recorded_triton(commit: str) -> str | None:
    """The Triton version pins/kernel_compiler.toml records for this AOTriton commit."""
    path = pin_files.pins_dir() / PINS_FILE
    table = load_toml(path, "kernel compiler pins").get("compiler", {}) if path.is_file() else {}
    entry = table.get(commit) if isinstance(table, dict) else None
    version = entry.get("triton") if isinstance(entry, dict) else entry
    if entry is not None and (not isinstance(version, str) or not version):
        raise UserError(f'{path}: [compiler.{commit}] needs triton = "X.Y.Z"')
    return version


def venv_dir(work: Path, triton: str) -> Path:
    return work / "kernel-check" / f"venv-triton-{triton}"


def known_python(work: Path, triton: str) -> str | None:
    """$ROCMFA_KERNEL_PYTHON, else the check's venv for this Triton once it exists."""
    python = venv_dir(work, triton) / "bin" / "python"
    return os.environ.get(PYTHON_ENV) or (str(python) if python.exists() else None)


# --- one job: from the store, else compiled ----------------------------------------------------


@dataclass(frozen=True)
class Compiler:
    """compile.py with python's Triton and the key's Triton settings (the environment's own
    dropped); Triton's cache is in the job's scratch folder, removed with it."""

    python: str
    compile_py: Path
    settings: Mapping[str, str] = field(default_factory=dict)


class CompileFailed(Exception):
    """A job that did not compile: the kernel, the job and the compiler's last line."""


def install_kernel(out: Path, hsaco: bytes, meta: bytes) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    stamps.write_bytes_atomic(out.with_suffix(".json"), meta)
    stamps.write_bytes_atomic(out.with_suffix(".hsaco"), hsaco)


def build_kernel(
    job: Job, key: str, compiler: Compiler, store: KernelStore | None, out: Path | None = None
) -> tuple[str, float]:
    """job's code object at out (default: its Bare.compile path): ('hit' | 'compiled', s)."""
    began, out = time.monotonic(), Path(out or job.hsaco)
    blob = store.get(key) if store is not None else None
    how = "compiled" if blob is None else "hit"
    if blob is None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{out.stem[:40]}.", dir=out.parent) as tmp:
            blob = _compile(job, compiler, Path(tmp), Path(tmp) / out.name)
        if store is not None:
            store.put(key, blob)
    install_kernel(out, *unpack(blob))
    return how, time.monotonic() - began


def _compile(job: Job, compiler: Compiler, scratch: Path, target: Path) -> bytes:
    given = {**compiler.settings, "TRITON_CACHE_DIR": str(scratch / "triton"), **COMPILE_ENV}
    env = job_environ(set(triton_info(compiler.python)["knobs"]), given)
    argv = compile_argv(job, compiler.python, compiler.compile_py, target)
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    hsaco = read_or_none(target.with_suffix(".hsaco"))
    meta = read_or_none(target.with_suffix(".json"))
    why = last_line(done.stderr or done.stdout) or "no output" if done.returncode else None
    if why is None and (not hsaco or meta is None):
        why = "compile.py left " + ("an empty code object" if hsaco == b"" else "no output file")
    if why is not None:
        raise CompileFailed(f"{job.kernel} (Bare.compile line {job.line}: {Path(job.source).name}, "
            f"num_warps {job.num_warps}, num_stages {job.num_stages}, waves_per_eu "
            f"{job.waves_per_eu}, target {job.target}): {why}")  # fmt: skip
    return pack(hsaco, meta)
