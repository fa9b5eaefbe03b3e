"""AOTriton's compiled kernels shared through `--cache`, and the one place a kernel is compiled.

build_kernel() looks the job's key (kernel_jobs.KeyContext) up in the store BEFORE any
Python/Triton process starts and runs AOTriton's python/compile.py only on a miss. Not Triton's
cache-manager interface: it is consulted inside compile.py after Triton's import (0.39 s of a
0.98 s job, measured), and its Redis backend fails in 3.5.1.

Stores from --cache (compile_cache.parse_cache): none: no store; not given, ccache, sccache,
http(s):// (WebDAV is sccache's alone): <work>/.cache/aotriton-kernels; a directory (an NFS
path), redis:// (redis-py) or s3:// (boto3), each over the local directory (?read_only=1 never
writes). An entry is one object: a header with the sha256 and length of the code object and its
metadata, then both; one that does not match is recompiled, never installed. An unreachable
store costs one warning line; the compile then happens locally. Entries are group-readable.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmfa.builds import compile_cache
from rocmfa.builds.kernel_jobs import COMPILE_ENV, Job, compile_argv
from rocmfa.plumbing import paths

MAGIC = b"ROCMFA-KERNEL/1\n"
LOCAL_DIR = "aotriton-kernels"


class Damaged(ValueError):
    """A store entry whose digests or lengths do not match."""


def pack(hsaco: bytes, meta: bytes) -> bytes:
    import hashlib

    meta = canonical_meta(meta)
    header = {
        "hsaco": [len(hsaco), hashlib.sha256(hsaco).hexdigest()],
        "meta": [len(meta), hashlib.sha256(meta).hexdigest()],
    }
    return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + hsaco + meta


def canonical_meta(meta: bytes) -> bytes:
    """compile.py's .json without the compiling venv's paths: extern_libs cut to triton/...,
    Triton's hash (taken over those paths) dropped. AOTriton reads only 'shared' from it
    (python/aks2.py @ 6e00ef3e)."""
    try:
        data = json.loads(meta)
    except ValueError:
        return meta
    if not isinstance(data, dict) or not ({"hash", "extern_libs"} & data.keys()):
        return meta
    data.pop("hash", None)
    libs = data.get("extern_libs") or []
    data["extern_libs"] = [[name, path[path.rfind("triton/") :]] for name, path in libs]
    return json.dumps(data, indent=2).encode()


def unpack(blob: bytes) -> tuple[bytes, bytes]:
    import hashlib

    if not blob.startswith(MAGIC):
        raise Damaged("not a kernel entry")
    head, sep, body = blob[len(MAGIC) :].partition(b"\n")
    try:
        header = json.loads(head) if sep else None
        (hlen, hsum), (mlen, msum) = header["hsaco"], header["meta"]
    except (ValueError, TypeError, KeyError):
        raise Damaged("unreadable header") from None
    if len(body) != hlen + mlen:
        raise Damaged(f"{len(body)} bytes, expected {hlen + mlen} (truncated?)")
    hsaco, meta = body[:hlen], body[hlen:]
    if hashlib.sha256(hsaco).hexdigest() != hsum or hashlib.sha256(meta).hexdigest() != msum:
        raise Damaged("sha256 mismatch")
    if not hsaco:
        raise Damaged("empty code object")
    return hsaco, meta


# --- backends: get(key) -> bytes | None, put(key, bytes) ----------------------------------


class DirBackend:
    def __init__(self, root: Path) -> None:
        self.root = root

    def describe(self) -> str:
        return f"directory {self.root}"

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.kernel"

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: str, data: bytes) -> None:
        from rocmfa.plumbing import stamps

        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        stamps.write_bytes_atomic(path, data)
        path.chmod(0o644)  # a team's shared directory: readable by the others


class RedisBackend:
    """GET / SET through redis-py (its connection pool serves the compile threads)."""

    def __init__(self, spec: compile_cache.CacheSpec, prefix: str) -> None:
        self.prefix = prefix
        self.client = compile_cache.redis_client(spec, compile_cache.PROBE_TIMEOUT_S * 10)

    def describe(self) -> str:
        kwargs = self.client.connection_pool.connection_kwargs
        return f"redis {kwargs.get('host')}:{kwargs.get('port')}"

    def get(self, key: str) -> bytes | None:
        return self.client.get(f"{self.prefix}/{key}")

    def put(self, key: str, data: bytes) -> None:
        self.client.set(f"{self.prefix}/{key}", data)


class S3Backend:
    """S3 through the team index's store (rocmfa.plumbing.team_index)."""

    def __init__(self, spec: compile_cache.CacheSpec, root: str) -> None:
        from rocmfa.plumbing import team_index

        self.store = team_index.S3Store(str(spec.bucket), root, spec.endpoint, spec.region)
        self.what = spec.place

    def describe(self) -> str:
        return self.what

    def get(self, key: str) -> bytes | None:
        return self.store.read(f"{key}.kernel")

    def put(self, key: str, data: bytes) -> None:
        self.store.put_bytes(f"{key}.kernel", data, "application/octet-stream")


Backend = DirBackend | RedisBackend | S3Backend
BACKENDS = {"dir": DirBackend, "redis": RedisBackend, "s3": S3Backend}

# --- the store a session uses ----------------------------------------------------------------


@dataclass
class KernelStore:
    """The local directory, and a shared store over it (None when there is none or it went
    away: one warning line, then local compiles)."""

    local: DirBackend | None
    shared: Backend | None = None
    read_only: bool = False
    say: Callable[[str], None] = print

    def describe(self) -> str:
        layers = [b.describe() for b in (self.shared, self.local) if b is not None]
        ro = " (read-only)" if self.read_only else ""
        return (" over ".join(layers) + ro) if layers else "none"

    def _lost(self, error: Exception) -> None:
        if self.shared is not None:
            self.say(f"WARNING: kernel store {self.shared.describe()}: {error}; compiling locally")
            self.shared = None

    def get(self, key: str) -> bytes | None:
        for layer in (self.local, self.shared):
            if layer is None:
                continue
            try:
                blob = layer.get(key)
            except Exception as error:
                self._lost(_why(error))
                continue
            if blob is None or not self._whole(key, blob, layer):
                continue
            if layer is self.shared and self.local is not None:
                self.local.put(key, blob)
            return blob
        return None

    def _whole(self, key: str, blob: bytes, layer: Backend) -> bool:
        try:
            unpack(blob)
        except Damaged as error:
            self.say(
                f"kernel store: damaged entry {key[:16]} in {layer.describe()} ({error}); "
                "recompiling"
            )
            return False
        return True

    def put(self, key: str, blob: bytes) -> None:
        if self.local is not None:
            self.local.put(key, blob)
        if self.shared is not None and not self.read_only:
            try:
                self.shared.put(key, blob)
            except Exception as error:
                self._lost(_why(error))


def _why(error: Exception) -> Exception:
    return error if str(error) else Exception(type(error).__name__)


def open_store(
    cache: compile_cache.CacheSpec | str | None,
    work: Path,
    arch: str,
    *,
    say: Callable[[str], None],
    dry_run: bool = False,
) -> KernelStore | None:
    """The store for --cache (None: --cache none). A shared store that does not answer is one
    warning line and the local directory alone."""
    spec = compile_cache.as_spec(cache)
    if spec is not None and spec.tool == "none":
        return None
    local = DirBackend(paths.cache_dir(work) / LOCAL_DIR / arch)
    store = KernelStore(local, say=say)
    if spec is None or not spec.remote:
        return store
    if spec.backend == "webdav":
        say(f"kernel store: {local.root} (WebDAV is sccache's alone; a directory, redis:// and "
            "s3:// also share AOTriton's kernels)")  # fmt: skip
        return store
    root = "/".join(p for p in (spec.prefix, "rocmfa-kernels", arch) if p)
    problem = None if dry_run else compile_cache.probe(spec)
    if problem:
        say(f"WARNING: kernel store {spec.describe()}: {problem}; compiling locally")
        return store
    if spec.backend == "dir":
        store.shared = DirBackend(Path(str(spec.endpoint)) / root)
    else:
        store.shared = BACKENDS[spec.backend](spec, root)  # no connection before first use
    store.read_only = spec.read_only
    return store


# --- one job: from the store, else compiled --------------------------------------------------


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
    """{"build": "<version> <wheel tags>" | None, "knobs": the variables that Triton reads}
    from python's own Triton (triton/knobs.py, libtriton's cache-invalidating variables)."""
    done = subprocess.run(
        [python, "-I", "-c", TRITON_INFO], capture_output=True, text=True, check=False
    )
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"build": None, "knobs": []}


@dataclass(frozen=True)
class Compiler:
    """How compile.py runs: the Python with the recorded Triton, the tree's compile.py, and
    the Triton settings of the key (settings from the environment here are replaced by them).
    Triton's cache is per job (in its scratch folder), removed with it."""

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
    from rocmfa.plumbing import stamps

    out.parent.mkdir(parents=True, exist_ok=True)
    stamps.write_bytes_atomic(out.with_suffix(".json"), meta)
    stamps.write_bytes_atomic(out.with_suffix(".hsaco"), hsaco)


def build_kernel(
    job: Job, key: str, compiler: Compiler, store: KernelStore | None, out: Path | None = None
) -> tuple[str, float]:
    """Put job's code object at out (default: its Bare.compile path): ('hit' | 'compiled',
    seconds). CompileFailed names the kernel, the job and the compiler's last line."""
    began = time.monotonic()
    out = Path(out or job.hsaco)
    blob = store.get(key) if store is not None else None
    if blob is not None:
        install_kernel(out, *unpack(blob))
        return "hit", time.monotonic() - began
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.stem[:40]}.", dir=out.parent))
    try:
        target = scratch / out.name
        argv = compile_argv(job, compiler.python, compiler.compile_py, target)
        done = subprocess.run(
            argv,
            env=compiler.environ(scratch),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise CompileFailed(job, last_line(done.stderr or done.stdout))
        try:
            hsaco = target.with_suffix(".hsaco").read_bytes()
            meta = target.with_suffix(".json").read_bytes()
        except FileNotFoundError as missing:
            raise CompileFailed(job, f"compile.py wrote no {Path(missing.filename).name}") from None
        if not hsaco:
            raise CompileFailed(job, "empty code object (" + last_line(meta.decode()) + ")")
        blob = pack(hsaco, meta)
        if store is not None:
            store.put(key, blob)
        install_kernel(out, *unpack(blob))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return "compiled", time.monotonic() - began
