"""The start every setup/build session shares: the GPU arch, the work dir, the shared env and one
Runner for the session's commands.

A real run needs the env that setup_env made and stops with one line naming that session. A dry
run needs nothing: with no conda manager, no env or no ROCm SDK it prints the whole plan, with
named placeholders for what setup_env would create, and runs no command (queries included).

The probe sessions (bench, backend_check, validate) are each the standalone script their name
names (scripts/rocmfa/probes/<session>.py, torch + stdlib only), run with the env's Python and
its full activation (our variables included, e.g. the AOTriton experimental flag): run_probe.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rocmfa.env import archs, condaenv
from rocmfa.env.condaenv import Manager, find_manager, no_manager_error
from rocmfa.plumbing import paths
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.datafiles import REPO_ROOT
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import EnvChoice, EnvOptions, Session

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


# --- the probe sessions ----------------------------------------------------------------------

UPSTREAM = "upstream_sdpa"


def run_env_script(where: EnvOptions, script: str, args: Sequence[str]) -> int:
    """The script with the env's Python, fully activated. With no env given (--prefix,
    --env-name, $ROCMFA_ENV_PREFIX, $ROCMFA_ENV_NAME) and none found, the Python running nox
    runs it when it has torch (a CPU machine without conda)."""
    workdir = getattr(where, "workdir", None)  # bench and backend_check take none
    location = locate(where.prefix, where.env_name, workdir).location
    prefix = location.prefix
    python = prefix / "bin" / "python" if prefix else None
    env = None
    if python is None or not python.exists():
        chosen = where.prefix or where.env_name  # $ROCMFA_ENV_* too: resolved with the settings
        if chosen or importlib.util.find_spec("torch") is None:
            if prefix is None:
                raise no_manager_error()
            raise UserError(
                f"no Python in env {prefix} ({location.how}); run: nox -s setup_env, or pass "
                f"--prefix ENV (an env with torch), or run: python scripts/rocmfa/probes/{script}"
            )
        print(
            f"note: no env found ({location.how}); running with {sys.executable}", file=sys.stderr
        )
        python = Path(sys.executable)
    else:
        assert prefix is not None
        if not (prefix / condaenv.ENV_STAMP).is_file():
            print(f"note: {prefix} was not set up by setup_env; using it as is", file=sys.stderr)
        env = condaenv.activated_environ(prefix)
    # The scripts read the arch from torch itself; --arch only matters to other sessions.
    argv = [str(python), str(REPO_ROOT / "scripts" / "rocmfa" / "probes" / script), *args]
    print("$ " + " ".join(argv), flush=True)
    return subprocess.run(argv, env=env, cwd=os.getcwd(), check=False).returncode


def probe_names(declared: Session) -> tuple[str, ...]:
    """The probe scripts a probe session runs: scripts/rocmfa/probes/<session name>.py, and for
    validate upstream_sdpa too (its --upstream)."""
    own = declared.name
    return (own, UPSTREAM) if hasattr(declared.options, "upstream") else (own,)


def probe_parsers(declared: Session) -> list[argparse.ArgumentParser]:
    """The probes' own parsers, imported here: the probes import torch only when they run, so
    --help and option routing need no env."""
    return [
        importlib.import_module(f"rocmfa.probes.{name}").build_parser()
        for name in probe_names(declared)
    ]


def flags_of(parsers: list[argparse.ArgumentParser]) -> frozenset[str]:
    """Every flag the parsers take (the probe's own, which go through to it)."""
    actions = [action for parser in parsers for action in parser._actions]
    return frozenset(flag for action in actions for flag in action.option_strings)


def run_probe(declared: Session, opts: EnvOptions, rest: Sequence[str]) -> int:
    """A probe session: its script in the env's Python with the arguments it did not declare
    (validate --upstream: PyTorch's own SDPA tests, scripts/rocmfa/probes/upstream_sdpa.py, which
    finds the test file through the work dir: source checkout, cache)."""
    if getattr(opts, "upstream", False):
        work = locate(opts.prefix, opts.env_name, getattr(opts, "workdir", None)).work
        return run_env_script(opts, f"{UPSTREAM}.py", ["--workdir", str(work), *rest])
    return run_env_script(opts, f"{probe_names(declared)[0]}.py", rest)
