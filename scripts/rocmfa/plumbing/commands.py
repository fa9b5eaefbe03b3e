"""Run external commands, or under --dry-run print them (argv, working directory, variables).

Every build/setup session sends its external commands through one Runner, so --dry-run
shows exactly what a real run would execute and nothing else decides what runs.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from rocmfa.plumbing.errors import UserError

T = TypeVar("T")


@dataclass(frozen=True)
class Command:
    """One external command: argv, where it runs, and the variables it sets on top of env."""

    argv: tuple[str, ...]
    cwd: Path | None = None
    sets: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """A shell-quoted one-liner: `(cd DIR) VAR=value ... argv`."""
        parts = []
        if self.cwd is not None:
            parts.append(f"(cd {shlex.quote(str(self.cwd))})")
        parts.extend(f"{k}={shlex.quote(v)}" for k, v in sorted(self.sets.items()))
        parts.append(shlex.join(self.argv))
        return " ".join(parts)


def runner_for(opts: object, **kw: Any) -> Runner:
    """The Runner of a session's settings: it plans (prints, runs nothing) under --dry-run."""
    return Runner(dry_run=bool(getattr(opts, "dry_run", False)), **kw)


class Runner:
    """Executes commands, or only prints them when dry_run is set.

    base_env is the complete environment commands get (for commands "in the env": the
    activated environment from rocmfa.env.condaenv); Command.sets is layered on top.
    """

    def __init__(
        self,
        *,
        dry_run: bool = False,
        base_env: Mapping[str, str] | None = None,
        out: TextIO | None = None,
    ) -> None:
        self.dry_run = dry_run
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.out = out or sys.stdout
        self.executed: list[Command] = []

    def say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    def apply(self, action: Callable[..., T], *args: Any, say: str = "", **kw: Any) -> T | None:
        """A change that is no command (files, stamps): said when say is given and made, or
        under dry-run only said; callers need not know which."""
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
        """Under dry run, message as a line of the plan ("[dry-run] message") for a step the
        caller then skips; None in a real run, which takes the step."""
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
        """Run argv (no shell). Returns the completed process; under dry-run a stand-in
        whose stdout is dry_run_output, so callers can keep going with a placeholder."""
        command = Command(tuple(str(a) for a in argv), Path(cwd or Path.cwd()), dict(sets or {}))
        prefix = "[dry-run] " if self.dry_run else "$ "
        self.say(prefix + command.describe())
        if self.dry_run:
            return subprocess.CompletedProcess(command.argv, 0, dry_run_output, "")
        env = {**self.base_env, **command.sets}
        self.executed.append(command)
        try:
            result = subprocess.run(
                command.argv,
                cwd=command.cwd,
                env=env,
                text=True,
                stdout=subprocess.PIPE if capture else None,
                stderr=subprocess.PIPE if capture else None,
                check=False,
            )
        except FileNotFoundError:
            raise UserError(f"{command.argv[0]}: command not found") from None
        except KeyboardInterrupt:  # subprocess.run has stopped the child (SIGKILL after 0.25 s)
            print(f"interrupted: {command.describe()}", file=sys.stderr, flush=True)
            raise
        if check and result.returncode != 0:
            detail = ""
            if capture and result.stderr.strip():
                detail = ": " + result.stderr.strip().splitlines()[-1]
            where = f" in {command.cwd}" if command.cwd else ""
            raise UserError(
                f"command failed (exit {result.returncode}){where}: "
                f"{shlex.join(command.argv)}{detail}"
            )
        return result


# A dry run writes no stamp. What it would write is kept here, by path, for the later sessions
# of the same nox run, which run in this process: `nox -s build_aotriton build_pytorch --
# --dry-run` plans build_pytorch against the prefix build_aotriton is about to fill, as the real
# chain does.
_PLANNED: dict[str, dict[str, Any]] = {}


def plan(path: Path, **facts: Any) -> None:
    """Record what a dry run would have stamped at path (facts only: its inputs may be unknown)."""
    _PLANNED[str(Path(path))] = facts


def planned(path: Path) -> dict[str, Any] | None:
    """What an earlier dry run of this process would have stamped at path, or None."""
    return _PLANNED.get(str(Path(path)))
