"""Wall and CPU time of child processes: CPU time (user + sys of the children, from
getrusage) moves far less than wall time when the machine is busy, so before/after comparisons
of a no-op run report both. And the .pyc question: a user's nox run imports our modules from
their bytecode cache (Python writes __pycache__ by default), while a machine with
PYTHONDONTWRITEBYTECODE set compiles every imported module from source on every run, which
makes a no-op's time mostly a measure of how many lines it imports."""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Timing:
    wall: float = 0.0
    cpu: float = 0.0


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def timed_children() -> Iterator[Timing]:
    """Times the block: wall clock, and the CPU time of the child processes it waited for."""
    timing = Timing()
    wall, cpu = time.perf_counter(), _children_cpu()
    try:
        yield timing
    finally:
        timing.wall = time.perf_counter() - wall
        timing.cpu = _children_cpu() - cpu


@dataclass
class Series:
    timings: list[Timing] = field(default_factory=list)

    def line(self, what: str) -> str:
        walls = [t.wall for t in self.timings]
        cpus = [t.cpu for t in self.timings]
        return (
            f"{what}: wall median {statistics.median(walls):.3f} s (min {min(walls):.3f}, max "
            f"{max(walls):.3f}), CPU median {statistics.median(cpus):.3f} s (min "
            f"{min(cpus):.3f}), n={len(walls)}"
        )


def add_bytecode_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE as the environment has it (default: the timed nox "
        "runs write and use __pycache__, as on a user's machine)",
    )


def bytecode_env(keep_environment: bool) -> dict[str, str]:
    """Extra environment for the timed runs: an empty PYTHONDONTWRITEBYTECODE lets Python write
    and read .pyc files (the first, untimed run writes them)."""
    return {} if keep_environment else {"PYTHONDONTWRITEBYTECODE": ""}
