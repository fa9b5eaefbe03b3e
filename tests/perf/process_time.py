"""Wall and CPU time of child processes: CPU time (user + sys of the children, from
getrusage) moves far less than wall time when the machine is busy, so before/after comparisons
of a no-op run report both."""

from __future__ import annotations

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
