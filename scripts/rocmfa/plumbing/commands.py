"""Run external commands (no shell), or under --dry-run print each (argv, directory, variables)
and run none: every session's commands go through one Runner, so a plan shows what would run;
and how many compile jobs to run at once."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from rocmfa.plumbing.errors import UserError


def last_line(text: str) -> str:
    return next((x.strip() for x in reversed((text or "").splitlines()) if x.strip()), "")


def runner_for(opts: object) -> Runner:
    """The Runner of a session's settings: it plans (prints, runs nothing) under --dry-run."""
    return Runner(dry_run=bool(getattr(opts, "dry_run", False)))


class Runner:
    """Runs commands in base_env (default: ours) plus their own variables; dry_run: prints them."""

    def __init__(self, *, dry_run=False, base_env: Mapping[str, str] | None = None, out=None):
        self.dry_run = dry_run
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.out: TextIO = out or sys.stdout
        self.executed: list[tuple[str, ...]] = []  # the argv of each command run

    def say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    def apply(self, action: Callable[..., Any], *args: Any, say: str = "", **kw: Any) -> Any:
        """A change that is no command (files, stamps): said (if say) and made; a plan says it."""
        if say:
            self.say(("[dry-run] " if self.dry_run else "") + say)
        return None if self.dry_run else action(*args, **kw)

    def done(self, message: str) -> None:
        """A step's result; under dry run, what the commands printed above lead to."""
        self.say(f"[dry-run] then: {message}" if self.dry_run else message)

    def refuse(self, message: str) -> None:
        """A real run stops here with message; a dry run notes it and plans on."""
        if not self.dry_run:
            raise UserError(message)
        self.say(f"[dry-run] note: {message}; the real run stops here")

    def plan_line(self, message: str) -> str | None:
        """ "[dry-run] message" for a step a plan skips; None in a real run."""
        return f"[dry-run] {message}" if self.dry_run else None

    def raise_for_real(self, error: Exception) -> None:
        """A real run raises error; a dry run goes past it (its caller plans with a placeholder)."""
        if not self.dry_run:
            raise error

    def ask(self, argv: Sequence[str | os.PathLike[str]], placeholder: str) -> str:
        """A question's answer (its stdout, stripped); under dry run the named placeholder."""
        return self.run(argv, capture=True, dry_run_output=placeholder).stdout.strip()

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        cwd: Path | None = None,
        sets: Mapping[str, str] | None = None,
        capture: bool = False,
        check: bool = True,
        dry_run_output: str = "",
    ) -> subprocess.CompletedProcess[str]:
        """The completed process; under dry run a stand-in whose stdout is dry_run_output."""
        argv = tuple(str(a) for a in argv)
        cwd = Path(cwd or Path.cwd())
        sets = dict(sets or {})
        variables = [f"{k}={shlex.quote(v)}" for k, v in sorted(sets.items())]
        line = " ".join([f"(cd {shlex.quote(str(cwd))})", *variables, shlex.join(argv)])
        self.say(("[dry-run] " if self.dry_run else "$ ") + line)
        if self.dry_run:
            return subprocess.CompletedProcess(argv, 0, dry_run_output, "")
        self.executed.append(argv)
        env = {**self.base_env, **sets}
        try:
            result = subprocess.run(argv, cwd=cwd, env=env, text=True, capture_output=capture)
        except FileNotFoundError:
            raise UserError(f"{argv[0]}: command not found") from None
        except KeyboardInterrupt:  # subprocess.run has stopped the child (SIGKILL after 0.25 s)
            print(f"interrupted: {line}", file=sys.stderr, flush=True)
            raise
        if check and result.returncode != 0:
            why = f"command failed (exit {result.returncode}) in {cwd}: {shlex.join(argv)}"
            raise UserError(": ".join([why, *(result.stderr or "").strip().splitlines()[-1:]]))
        return result


MEMINFO = Path("/proc/meminfo")


def choose_jobs(requested: int | None, per_job_gib: float, *, meminfo=MEMINFO, cpus=None):
    """(jobs, one-line reason): --jobs (checked >= 1 by its option), else the CPUs capped by
    MemAvailable (a HIP translation unit takes GiBs; one job per core on little memory ends in
    `clang: error: ... Killed`, ROCm/TheRock#997)."""
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
