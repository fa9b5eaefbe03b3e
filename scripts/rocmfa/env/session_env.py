"""The start every setup/build session shares: the GPU arch, the work dir, the shared env and one
Runner for the session's commands.

A real run needs the env that setup_env made and stops with one line naming that session. A dry
run needs nothing: with no conda manager, no env or no ROCm SDK it prints the whole plan, with
named placeholders for what setup_env would create, and runs no command (queries included).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rocmfa.env import archs, condaenv
from rocmfa.env.condaenv import Manager, find_manager
from rocmfa.plumbing import paths
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.options import EnvChoice

# What a dry run shows where setup_env has not made the env yet.
ENV_PLACEHOLDER = Path("<env prefix: created by nox -s setup_env>")


@dataclass(frozen=True)
class Located:
    """Where a session's options point: the conda manager, the env and the work dir."""

    manager: Manager | None
    location: condaenv.EnvLocation
    work: Path


def locate(prefix: str | None, env_name: str | None, workdir: str | None) -> Located:
    """A bad --env-name: the one-line UserError."""
    manager = find_manager()
    location = condaenv.resolve_prefix(prefix, env_name, manager)
    return Located(manager, location, paths.workdir(workdir))


@dataclass(frozen=True)
class SessionEnv:
    """One session's arch, work dir and env. `ready`: setup_env has made the env (a build's
    real run never starts without it; prefix is otherwise the env-to-be, or ENV_PLACEHOLDER).
    `in_env`: commands run in the env's activation (setup_env, which makes the env, sets
    runner.base_env itself once the env exists)."""

    choice: archs.ArchChoice
    work: Path
    location: condaenv.EnvLocation
    manager: Manager | None
    prefix: Path
    ready: bool
    dry_run: bool
    in_env: bool = True
    out: TextIO | None = None

    @property
    def arch(self) -> archs.Arch:
        return self.choice.arch

    @property
    def arch_how(self) -> str:
        return self.choice.how

    @functools.cached_property
    def environ(self) -> dict[str, str]:
        """The env's full activation (computed on first use: a no-op rerun never needs it)."""
        if self.ready and self.in_env:
            return condaenv.activated_environ(self.prefix)
        return dict(os.environ)

    @functools.cached_property
    def runner(self) -> Runner:
        """Runs (or under --dry-run prints) the session's commands, in the activated env."""
        return Runner(dry_run=self.dry_run, base_env=self.environ, out=self.out)

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"

    def say(self, message: str) -> None:
        print(message, file=self.out or sys.stdout, flush=True)

    def describe(self) -> str:
        return (
            f"arch {self.arch.name} ({self.arch_how}); env {self.prefix} ({self.location.how}); "
            f"work dir {self.work}"
        )

    def tool(self, program: str) -> Path:
        """A program of the env (rocm-sdk, cmake, ...). On a dry run without it: where setup_env
        puts it, so the plan still shows every command; a real run without it stops."""
        if self.ready:
            found = shutil.which(program, path=self.environ.get("PATH", ""))
            if found:
                return Path(found)
        if not self.dry_run:
            return condaenv.which_in_env(program, self.environ)  # the one-line error
        return self.prefix / "bin" / program

    def ask(self, argv: Sequence[str | os.PathLike[str]], placeholder: str) -> str:
        """A read-only question (rocm-sdk version, the env's Python tag): asked for real when
        the env and the program are there, even on a dry run; else printed, answer placeholder."""
        if self.ready and Path(argv[0]).exists():
            query = Runner(base_env=self.environ, out=self.out)
            return query.run(argv, capture=True).stdout.strip()
        return self.runner.ask(argv, placeholder)


def open_env(
    where: EnvChoice,
    *,
    dry_run: bool | None = None,
    out: TextIO | None = None,
    makes_env: bool = False,
    placeholder: Path = ENV_PLACEHOLDER,
) -> SessionEnv:
    """The start of a build session: a real run needs a set-up env (else the one-line
    "... run: nox -s setup_env"); a dry run goes on with placeholders and says so.
    makes_env (setup_env): the env need not exist; its checks are the session's own. This is the
    one place that names what setup_env would create, for a dry run."""
    dry_run = bool(getattr(where, "dry_run", False)) if dry_run is None else dry_run
    choice = archs.resolve_arch(where.arch)
    located = locate(where.prefix, where.env_name, where.workdir)
    work, manager, location = located.work, located.manager, located.location
    ready = location.prefix is not None and (location.prefix / condaenv.ENV_STAMP).is_file()
    if makes_env:
        prefix = location.prefix or placeholder
        return SessionEnv(choice, work, location, manager, prefix, ready, dry_run, False, out)
    if ready or not dry_run:
        prefix = condaenv.require_env(location.prefix)
        return SessionEnv(choice, work, location, manager, prefix, True, dry_run, True, out)
    prefix = location.prefix or placeholder
    session = SessionEnv(choice, work, location, manager, prefix, False, True, True, out)
    why = "no conda manager found" if location.prefix is None else f"env {prefix} is not set up"
    session.say(
        f"[dry-run] note: {why}; the plan below shows what setup_env would create as "
        "placeholders (a real run stops here: run: nox -s setup_env)"
    )
    return session


class OnSession:
    """For a build's context that holds its session: the arch, work dir, env and Runner read
    through, so each context declares only what is its own."""

    session: SessionEnv

    @property
    def arch(self) -> archs.Arch:
        return self.session.arch

    @property
    def work(self) -> Path:
        return self.session.work

    @property
    def prefix(self) -> Path:
        return self.session.prefix

    @property
    def python(self) -> Path:
        return self.session.python

    @property
    def runner(self) -> Runner:
        return self.session.runner
