"""The start every setup/build session shares (arch, work dir, env, one Runner), the probe sessions
(scripts/rocmfa/probes/<session>.py in the env), and `guarded`: the session's locks, one flock
per workdir and per env (the kernel drops it when its holder dies) on a file naming the holder;
the file stays (unlinking it races the next taker)."""

import argparse
import fcntl
import functools
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmfa.env import archs, condaenv
from rocmfa.env.condaenv import Manager, find_manager
from rocmfa.plumbing import paths
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.datafiles import REPO_ROOT
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import EnvChoice, EnvOptions, Session, takes_locks

LOCK_NAME = ".rocmfa.lock"  # in the workdir
UPSTREAM = "upstream_sdpa"  # validate --upstream: PyTorch's own SDPA tests


@dataclass(frozen=True)
class SessionEnv:
    """`ready`: setup_env made the env, so commands run in its activation (setup_env: never)."""

    choice: archs.ArchChoice
    work: Path
    location: condaenv.EnvLocation
    manager: Manager | None
    prefix: Path
    ready: bool
    dry_run: bool

    @property
    def arch(self) -> archs.Arch:
        return self.choice.arch

    @property
    def arch_how(self) -> str:
        return self.choice.how

    @functools.cached_property
    def environ(self) -> dict[str, str]:
        """The env's full activation (on first use: a no-op rerun never needs it)."""
        return condaenv.activated_environ(self.prefix) if self.ready else dict(os.environ)

    @functools.cached_property
    def runner(self) -> Runner:
        return Runner(dry_run=self.dry_run, base_env=self.environ)

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"

    def describe(self) -> str:
        where = f"env {self.prefix} ({self.location.how}); work dir {self.work}"
        return f"arch {self.arch.name} ({self.arch_how}); {where}"

    def tool(self, program: str) -> Path:
        """A program of the env; on a dry run without it, where setup_env puts it."""
        path = self.environ.get("PATH", "")
        if self.ready and (found := shutil.which(program, path=path)):
            return Path(found)
        if not self.dry_run:
            raise UserError(f"{program} not found in the env (PATH={path})")
        return self.prefix / "bin" / program

    def ask(self, argv: Sequence[str | os.PathLike[str]], placeholder: str) -> str:
        """A read-only question, asked even on a dry run when the env and program are there."""
        if self.ready and Path(argv[0]).exists():
            return Runner(base_env=self.environ).run(argv, capture=True).stdout.strip()
        return self.runner.ask(argv, placeholder)


def open_env(where: EnvChoice, *, makes_env: bool = False) -> SessionEnv:
    """A set-up env (a dry run: placeholders for it); makes_env (setup_env): it need not exist."""
    dry_run = bool(getattr(where, "dry_run", False))
    choice = archs.resolve_arch(where.arch)
    manager = find_manager()
    work = paths.workdir(where.workdir)
    location = condaenv.resolve_prefix(where.prefix, where.env_name, manager)
    prefix = location.prefix
    ready = (prefix / condaenv.ENV_STAMP).is_file()
    if not makes_env and (ready or not dry_run):
        condaenv.require_env(prefix)  # stops a real run on an env that is not set up
    elif not makes_env:
        what = "the plan below shows what setup_env would create as placeholders"
        stop = "a real run stops here: run: nox -s setup_env"
        print(f"[dry-run] note: env {prefix} is not set up; {what} ({stop})", flush=True)
    ready = ready and not makes_env  # setup_env installs into it first
    return SessionEnv(choice, work, location, manager, prefix, ready, dry_run)


class OnSession:
    """A build's context holding its session: the arch, work dir, env and Runner read through."""

    session: SessionEnv

    def __getattr__(self, name: str) -> Any:
        if name in ("arch", "work", "prefix", "python", "runner"):
            return getattr(self.session, name)
        raise AttributeError(name)


def probe_names(declared: Session) -> tuple[str, ...]:
    """scripts/rocmfa/probes/<session>.py, and upstream_sdpa for validate (its --upstream)."""
    return (declared.name, UPSTREAM)[: 1 + hasattr(declared.options, "upstream")]


def probe_parsers(declared: Session) -> list[argparse.ArgumentParser]:
    """The probes' own parsers (they import torch only when they run: --help needs no env)."""
    return [
        importlib.import_module(f"rocmfa.probes.{n}").build_parser() for n in probe_names(declared)
    ]


def flags_of(parsers: list[argparse.ArgumentParser]) -> frozenset[str]:
    """Every flag the parsers take (the probe's own, which go through to it)."""
    return frozenset(f for parser in parsers for a in parser._actions for f in a.option_strings)


def run_probe(declared: Session, opts: EnvOptions, rest: Sequence[str]) -> int:
    """A probe's script with the arguments it did not declare, in the env (none found: nox's
    Python, when it has torch). validate --upstream: PyTorch's own SDPA tests, via the work dir."""
    script, args = f"{probe_names(declared)[0]}.py", list(rest)
    if getattr(opts, "upstream", False):
        script = f"{UPSTREAM}.py"
        args = ["--workdir", str(paths.workdir(opts.workdir)), *rest]
    location = condaenv.resolve_prefix(opts.prefix, opts.env_name, find_manager())
    prefix = location.prefix
    env = None
    python = prefix / "bin" / "python"
    if not python.exists():
        if opts.prefix or opts.env_name or importlib.util.find_spec("torch") is None:
            raise UserError(
                f"no Python in env {prefix} ({location.how}); run: nox -s setup_env, or pass "
                f"--prefix ENV (an env with torch), or run: python scripts/rocmfa/probes/{script}"
            )
        note = f"note: no env found ({location.how}); running with {sys.executable}"
        print(note, file=sys.stderr)
        python = Path(sys.executable)
    else:
        if not (prefix / condaenv.ENV_STAMP).is_file():
            print(f"note: {prefix} was not set up by setup_env; using it as is", file=sys.stderr)
        env = condaenv.activated_environ(prefix)
    # The scripts read the arch from torch itself; --arch only matters to other sessions.
    argv = [str(python), str(REPO_ROOT / "scripts" / "rocmfa" / "probes" / script), *args]
    print("$ " + " ".join(argv), flush=True)
    return subprocess.run(argv, env=env, check=False).returncode


@contextmanager
def hold(path: Path, what: str, session: str) -> Iterator[None]:
    """Hold the lock at path for the block, or fail in one line naming the holder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            by: Any = {}  # the holder's record, as it wrote it below
            with suppress(OSError, ValueError, TypeError):
                by = dict(json.loads(os.pread(fd, 4096, 0)))
            raise UserError(
                f"{what} is in use by another session: nox -s {by.get('session', '?')} (pid "
                f"{by.get('pid', '?')}, since {by.get('since', '?')}; lock {path}); wait for it "
                "to finish or stop it, then rerun"
            ) from None
        me = {"pid": os.getpid(), "session": session, "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the flock


@contextmanager
def guarded(declared: Session, opts: Any) -> Iterator[None]:
    """Around one session: its locks (declared.changes_workdir / changes_env)."""
    if not takes_locks(declared, opts):
        yield
        return
    work = paths.workdir(getattr(opts, "workdir", None))
    env = None
    if declared.changes_env:
        with suppress(UserError):  # the session itself reports a bad --env-name
            env = condaenv.resolve_prefix(opts.prefix, opts.env_name, find_manager()).prefix
    env_there = env is not None and env.is_dir()
    with ExitStack() as stack:
        if declared.changes_workdir or (declared.changes_env and not env_there):
            workdir_lock = hold(work / LOCK_NAME, f"workdir {work}", declared.name)
            stack.enter_context(workdir_lock)
        if env_there:
            stack.enter_context(hold(env / ".rocmfa" / "lock", f"env {env}", declared.name))
        yield
