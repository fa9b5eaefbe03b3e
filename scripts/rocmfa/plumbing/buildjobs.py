"""Parallel compile jobs: CPUs, capped by MemAvailable (a HIP translation unit takes GiBs; one
job per core on little memory ends in `clang: error: ... Killed`, ROCm/TheRock#997)."""

import os
from pathlib import Path

MEMINFO = Path("/proc/meminfo")


def choose_jobs(requested: int | None, per_job_gib: float, *, meminfo=MEMINFO, cpus=None):
    """(jobs, one-line reason); requested is --jobs, checked >= 1 by its option."""
    if requested is not None:
        return requested, f"{requested} jobs (--jobs)"
    cpus = cpus or os.cpu_count() or 1
    try:
        line = next(x for x in meminfo.read_text().splitlines() if x.startswith("MemAvailable:"))
        available = int(line.split()[1]) / (1024 * 1024)  # kB -> GiB
    except (OSError, ValueError, IndexError, StopIteration):
        return cpus, f"{cpus} jobs (one per CPU; MemAvailable unknown; --jobs to override)"
    by_memory = max(1, int(available // per_job_gib))
    jobs = min(cpus, by_memory)
    why = "memory" if by_memory < cpus else "CPUs"
    at = f"MemAvailable {available:.1f} GiB at ~{per_job_gib:g} GiB per job"
    return jobs, f"{jobs} jobs (limited by {why}: {cpus} CPUs, {at}; --jobs to override)"
