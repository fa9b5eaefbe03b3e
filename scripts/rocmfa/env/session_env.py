"""The one shared conda env: where it is (a conda manager, when present, only decides where named
envs live) and its full activation for the commands nox runs (nox only prepends PATH).
The start every setup/build session shares (arch, work dir, env, one Runner), the probe sessions
(scripts/rocmfa/probes/<session>.py in the env), and `guarded`: the session's locks, one flock
per workdir and per env (the kernel drops it when its holder dies) on a file naming the holder;
the file stays (unlinking it races the next taker)."""

import argparse
import csv
import fcntl
import functools
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from rocmfa.env import archs
from rocmfa.plumbing import options, stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import REPO_ROOT, Session, origin
from rocmfa.plumbing.options import env_name as check_env_name

ENV_STAMP = Path("conda-meta") / "rocmfa-env.json"  # written last by setup_env


@dataclass(frozen=True)
class Manager:
    kind: str  # micromamba | mamba | conda
    exe: Path
    found_via: str


def find_manager() -> Manager | None:
    """$MAMBA_EXE, then $CONDA_EXE, then micromamba, mamba, conda on PATH. Never downloads."""
    for var in ("MAMBA_EXE", "CONDA_EXE"):
        value = os.environ.get(var)
        if value and os.access(value, os.X_OK):
            name = Path(value).name.lower()
            kind = next((k for k in ("micromamba", "mamba") if name.startswith(k)), "conda")
            return Manager(kind, Path(value), f"${var}")
    for name in ("micromamba", "mamba", "conda"):
        if found := shutil.which(name):
            return Manager(name, Path(found), "PATH")
    return None


@dataclass(frozen=True)
class EnvLocation:
    prefix: Path
    how: str


def resolve_prefix(
    prefix: str | None, env_name: str | None, manager: Manager | None
) -> EnvLocation:
    """prefix/env_name: the session's settings; the manager's own variables say where envs live."""
    environ = os.environ
    if prefix:
        return EnvLocation(Path(prefix).expanduser().resolve(), origin(prefix, "--prefix"))
    name = check_env_name(env_name or "therock")
    how = origin(env_name, "--env-name") if env_name else "default name"
    dirs = [Path(p) for p in environ.get("CONDA_ENVS_PATH", "").split(os.pathsep) if p]
    if manager is None:  # py-rattler still installs the env: into our own data dir
        data = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        dirs.append(Path(data) / "rocm-fa-workflow" / "envs")
    elif manager.kind == "micromamba":
        dirs.append(Path(environ.get("MAMBA_ROOT_PREFIX") or Path.home() / "micromamba") / "envs")
    else:  # <root>/{bin,condabin}/conda
        dirs.append(manager.exe.resolve().parent.parent / "envs")
    for envs_dir in dirs:
        if (envs_dir / name / "conda-meta").is_dir():
            return EnvLocation(envs_dir / name, f"{how} '{name}'")
    return EnvLocation(dirs[0] / name, f"{how} '{name}' (to be created)")


@functools.lru_cache(maxsize=8)
def _activated(prefix: str, outer_items: tuple[tuple[str, str], ...]) -> tuple:
    from rattler.shell import ActivationVariables, PathModificationBehavior, Shell, activate

    outer = {k: v for k, v in outer_items if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    path = [p for p in outer.get("PATH", "").split(os.pathsep) if p]
    variables = ActivationVariables(None, path, PathModificationBehavior.Replace)
    script = activate(Path(prefix), variables, Shell.bash).script
    # conda stops at an activate.d script that fails; compiler scripts are not `set -u` safe
    script = re.sub(r"^(\. .*)$", r"\1 || exit 97", script, flags=re.M) + "\nexec env -0\n"
    bash = shutil.which("bash", path=outer.get("PATH")) or "/bin/bash"
    result = subprocess.run(
        [bash, "--norc", "--noprofile", "-c", script], env=outer, capture_output=True, check=False
    )
    if result.returncode != 0:
        last = (result.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
        raise UserError(f"activating {prefix} failed: an activate.d script exited non-zero: {last}")
    pairs = (item.split("=", 1) for item in result.stdout.decode().split("\0") if "=" in item)
    return tuple(sorted((k, v) for k, v in pairs if k not in ("_", "SHLVL", "PWD", "OLDPWD")))


def activated_environ(prefix: Path, outer: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment `conda activate PREFIX` gives (py-rattler's activation script, in bash)."""
    outer = os.environ if outer is None else outer
    return dict(_activated(str(prefix), tuple(sorted(outer.items()))))


def require_env(prefix: Path) -> Path:
    if not (prefix / ENV_STAMP).is_file():
        state = "was not set up by us" if (prefix / "conda-meta").is_dir() else "is not a conda env"
        state = state if prefix.exists() else "does not exist"
        raise UserError(f"env {prefix} {state}; run: nox -s setup_env")
    from rocmfa.env import lockfile  # lazily: conda-lock's import is slow

    lockfile.require_fresh()
    return prefix


def env_identity(prefix: Path) -> str:
    """Changes whenever setup_env (re)makes the env: in the stamps of steps installing into it."""
    return (stamps.read(prefix / ENV_STAMP) or {}).get("inputs_digest", "")


def torch_record(site: Path) -> Path | None:
    infos = sorted(site.glob("torch-*.dist-info"))
    return infos[-1] / "RECORD" if infos else None


def record_rows(record: Path) -> list[list[str]]:
    """[path relative to site-packages, 'sha256=<urlsafe b64>' or '', size or ''] per line."""
    with open(record, newline="", encoding="utf-8") as f:
        return [row for row in csv.reader(f) if len(row) == 3]


def torch_incomplete(site: Path) -> str | None:
    """Why the env's torch is not a whole pip install (a pip run killed midway), or None."""
    if (record := torch_record(site)) is None:
        return "no torch-*.dist-info"
    if (files := metadata.Distribution.at(record.parent).files) is None:
        return f"{record.parent.name} has no RECORD"
    for file in files:
        try:
            if file.size and file.locate().stat().st_size != file.size:
                return f"{file} is not the size its RECORD says"
        except OSError:
            return f"{file} is missing"
    return None


def pip_pending_path(prefix: Path) -> Path:
    """The torch wheel build_aotriton has pip installing, until pip is done."""
    return prefix / ".rocmfa" / "pip-install.json"


UPSTREAM = "upstream_sdpa"  # validate --upstream: PyTorch's own SDPA tests


@dataclass(frozen=True)
class SessionEnv:
    """`ready`: setup_env made the env, so commands run in its activation (setup_env: never)."""

    choice: archs.ArchChoice
    work: Path
    location: EnvLocation
    manager: Manager | None
    prefix: Path
    ready: bool
    dry_run: bool

    @property
    def arch(self) -> archs.Arch:
        return self.choice.arch

    @functools.cached_property
    def environ(self) -> dict[str, str]:
        """The env's full activation (on first use: a no-op rerun never needs it)."""
        return activated_environ(self.prefix) if self.ready else dict(os.environ)

    @functools.cached_property
    def runner(self) -> Runner:
        return Runner(dry_run=self.dry_run, base_env=self.environ)

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"

    def describe(self) -> str:
        where = f"env {self.prefix} ({self.location.how}); work dir {self.work}"
        return f"arch {self.arch.name} ({self.choice.how}); {where}"

    def tool(self, program: str) -> Path:
        """A program of the env; on a dry run without it, where setup_env puts it."""
        path = self.environ.get("PATH", "")
        if self.ready and (found := shutil.which(program, path=path)):
            return Path(found)
        self.runner.raise_for_real(UserError(f"{program} not found in the env (PATH={path})"))
        return self.prefix / "bin" / program

    def ask(self, argv: Sequence[str | os.PathLike[str]], placeholder: str) -> str:
        """A read-only question, asked even on a dry run when the env and program are there."""
        if self.ready and Path(argv[0]).exists():
            return Runner(base_env=self.environ).run(argv, capture=True).stdout.strip()
        return self.runner.ask(argv, placeholder)


def open_env(where: Any, *, makes_env: bool = False) -> SessionEnv:
    """A set-up env (a dry run: placeholders for it); makes_env (setup_env): it need not exist."""
    dry_run = bool(getattr(where, "dry_run", False))
    choice = archs.resolve_arch(where.arch)
    manager = find_manager()
    work = options.workdir(where.workdir)
    location = resolve_prefix(where.prefix, where.env_name, manager)
    prefix = location.prefix
    ready = (prefix / ENV_STAMP).is_file()
    if not makes_env and (ready or not dry_run):
        require_env(prefix)  # stops a real run on an env that is not set up
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


def probe_parsers(declared: Session) -> list[argparse.ArgumentParser]:
    """The parsers of scripts/rocmfa/probes/<session>.py, and of upstream_sdpa for validate (its
    --upstream); they import torch only when they run: --help needs no env."""
    names = [declared.name, UPSTREAM] if hasattr(declared.options, "upstream") else [declared.name]
    return [importlib.import_module(f"rocmfa.probes.{n}").build_parser() for n in names]


def flags_of(parsers: list[argparse.ArgumentParser]) -> frozenset[str]:
    """Every flag the parsers take (the probe's own, which go through to it)."""
    return frozenset(flag for parser in parsers for flag in parser._option_string_actions)


def run_probe(declared: Session, opts: Any, rest: Sequence[str]) -> int:
    """A probe's script with the arguments it did not declare, in the env (none found: nox's
    Python, when it has torch). validate --upstream: PyTorch's own SDPA tests, via the work dir."""
    script = f"{declared.name}.py"
    args = list(rest)
    if getattr(opts, "upstream", False):
        script = f"{UPSTREAM}.py"
        args = ["--workdir", str(options.workdir(opts.workdir)), *rest]
    location = resolve_prefix(opts.prefix, opts.env_name, find_manager())
    prefix = location.prefix
    python = prefix / "bin" / "python"
    env = None
    if python.exists():
        if not (prefix / ENV_STAMP).is_file():
            print(f"note: {prefix} was not set up by setup_env; using it as is", file=sys.stderr)
        env = activated_environ(prefix)
    elif opts.prefix or opts.env_name or importlib.util.find_spec("torch") is None:
        raise UserError(
            f"no Python in env {prefix} ({location.how}); run: nox -s setup_env, or pass "
            f"--prefix ENV (an env with torch), or run: python scripts/rocmfa/probes/{script}"
        )
    else:
        note = f"note: no env found ({location.how}); running with {sys.executable}"
        print(note, file=sys.stderr)
        python = Path(sys.executable)
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
    """Around one session: its locks (declared.changes_workdir / changes_env), none on a dry run."""
    if getattr(opts, "dry_run", False):
        yield
        return
    work = options.workdir(getattr(opts, "workdir", None))
    env = None
    if declared.changes_env:
        with suppress(UserError):  # the session itself reports a bad --env-name
            env = resolve_prefix(opts.prefix, opts.env_name, find_manager()).prefix
    env_there = env is not None and env.is_dir()
    with ExitStack() as stack:
        if declared.changes_workdir or (declared.changes_env and not env_there):
            stack.enter_context(hold(work / ".rocmfa.lock", f"workdir {work}", declared.name))
        if env_there:
            stack.enter_context(hold(env / ".rocmfa" / "lock", f"env {env}", declared.name))
        yield
