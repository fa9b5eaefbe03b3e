"""AOTriton's kernel compile jobs: the generator's Bare.compile, a stratified sample of it, the
real compile.py command of one job, and the key that decides its result. Stdlib only: cluster
workers import it without the rest of the repository's dependencies.

Read at ROCm/aotriton 6e00ef3e (0.13b):
- python/codegen/root.py write_hsaco(): one job a line, fields separated by ';': venv name,
  python, output .hsaco, source .py, kernel name, num_warps, num_stages, waves_per_eu, target
  arch, Triton signature (the signature itself holds ', ' but no ';').
- v3src/CMakeLists.txt add_custom_command(OUTPUT ${HSACO}): the job runs as
  `cmake -E env TRITON_CACHE_DIR=<build>/triton-cache.<venv> TRITON_F32_DEFAULT=ieee
  TRITON_STORE_BINARY_ONLY=1 <python> python/compile.py SRC --kernel_name K -o HSACO -g 1,1,1
  --num_warps W --num_stages S --waves_per_eu E --target ARCH --signature SIG --timeout T`.
- python/compile.py: writes HSACO (the code object) and HSACO with suffix .json (metadata,
  compile_status "Complete"); with --timeout > 0 a failed compile still exits 0 and leaves an
  empty .hsaco (unless --error_when_timeout), so a check runs with --timeout 0 (a failure is a
  non-zero exit with Triton's error last) and also refuses an empty code object.
- triton/knobs.py (3.5.1) and libtriton's get_cache_invalidating_env_vars(): the variables
  Triton reads. Their values (and any TRITON_* set) go into every key and into the compile.
- Line info embeds the tree's and Triton's paths in the code object (.debug_line, .debug_str):
  TRITON_DISABLE_LINE_INFO=1 drops those sections only (.text identical, checked), so a kernel
  is the same bytes whichever directory or machine compiled it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

FIELDS = 10
COMPILE_ENV = {
    "TRITON_F32_DEFAULT": "ieee",
    "TRITON_STORE_BINARY_ONLY": "1",
    "TRITON_DISABLE_LINE_INFO": "1",
}
FIXED = {"TRITON_CACHE_DIR", *COMPILE_ENV}  # set for every compile, whatever the environment
KEY_VERSION = 2


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
    def family(self) -> str:
        return self.kernel

    @property
    def combo(self) -> tuple[str, int, int, int]:
        return (self.kernel, self.num_warps, self.num_stages, self.waves_per_eu)

    def describe(self) -> str:
        return (
            f"{self.kernel} (Bare.compile line {self.line}: {Path(self.source).name}, "
            f"num_warps {self.num_warps}, num_stages {self.num_stages}, waves_per_eu "
            f"{self.waves_per_eu}, target {self.target})"
        )


def parse_line(text: str, line: int) -> Job:
    fields = text.rstrip("\n").split(";")
    if len(fields) != FIELDS:
        raise JobListError(f"Bare.compile line {line}: {len(fields)} fields, expected {FIELDS}")
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
    """A stratified sample: the first job of every distinct (kernel, num_warps, num_stages,
    waves_per_eu), so every family and every distinct triple is compiled. size below that
    takes the combinations round-robin over the families (every family still once); above it,
    evenly spaced further jobs. Ordered as in Bare.compile."""
    firsts: dict[tuple[str, int, int, int], Job] = {}
    for job in jobs:
        firsts.setdefault(job.combo, job)
    families = list(dict.fromkeys(job.family for job in jobs))
    if size is None or size == len(firsts):
        chosen = list(firsts.values())
    elif size < len(firsts):
        if size < len(families):
            raise ValueError(
                f"--sample {size} is below the {len(families)} kernel families of this target"
            )
        per_family = [[j for j in firsts.values() if j.family == f] for f in families]
        chosen = []
        depth = 0
        while len(chosen) < size:
            chosen += [group[depth] for group in per_family if depth < len(group)]
            depth += 1
        chosen = chosen[:size]
    else:
        chosen = list(firsts.values())
        taken = {job.line for job in chosen}
        rest = [job for job in jobs if job.line not in taken]
        extra = min(size - len(chosen), len(rest))
        if extra:
            step = len(rest) / extra
            chosen += [rest[int(i * step)] for i in range(extra)]
    return sorted(chosen, key=lambda job: job.line)


def compile_argv(
    job: Job, python: str, compile_py: Path, out: Path, *, timeout: str = "0"
) -> list[str]:
    """The command v3src/CMakeLists.txt runs for one job (without the cmake -E env prefix)."""
    return [
        python, str(compile_py), job.source, "--kernel_name", job.kernel, "-o", str(out),
        "-g", "1,1,1", "--num_warps", str(job.num_warps), "--num_stages", str(job.num_stages),
        "--waves_per_eu", str(job.waves_per_eu), "--target", job.target,
        "--signature", job.signature, "--timeout", timeout,
    ]  # fmt: skip


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_digest(source: Path) -> str:
    """The kernel source and the modules beside it that it imports (every .py of its folder
    and below: modules/flash/kernel/*.py at 0.13b)."""
    h = hashlib.sha256()
    root = source.parent
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def settings(env: Mapping[str, str], knobs: Iterable[str]) -> dict[str, str]:
    """The Triton settings env gives a compile: every knob Triton reads, and any TRITON_*."""
    names = set(knobs)
    return {
        k: v for k, v in env.items() if (k in names or k.startswith("TRITON_")) and k not in FIXED
    }


@dataclass(frozen=True)
class KeyContext:
    """What every job of one tree shares: Triton (version and build), patch set, compile.py,
    the Triton settings from the environment."""

    triton: str
    patches: str
    compiler: str  # sha256 of python/compile.py
    env: tuple[tuple[str, str], ...] = ()  # settings(), sorted

    def key(self, job: Job, sources: dict[str, str]) -> str:
        """The store key: everything that decides the code object (sources: source path ->
        source_digest, computed once per file)."""
        blob = json.dumps(
            {
                "v": KEY_VERSION,
                "source": sources[job.source],
                "kernel": job.kernel,
                "signature": job.signature,
                "warps": job.num_warps,
                "stages": job.num_stages,
                "waves_per_eu": job.waves_per_eu,
                "target": job.target,
                "triton": self.triton,
                "patches": self.patches,
                "compiler": self.compiler,
                "env": {**dict(self.env), **COMPILE_ENV},
            },
            sort_keys=True,
        ).encode()
        return hashlib.sha256(blob).hexdigest()


def source_digests(jobs: Iterable[Job]) -> dict[str, str]:
    return {src: source_digest(Path(src)) for src in {job.source for job in jobs}}
