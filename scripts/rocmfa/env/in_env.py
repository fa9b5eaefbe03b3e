"""Run the probe sessions (bench, backend_check, validate): each is the standalone script its
name names (scripts/rocmfa/probes/<session>.py), run with the env's Python.

The scripts depend on torch and the standard library only; this module just gives them the
shared env's full activation (our variables included, e.g. the AOTriton experimental flag).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from rocmfa.env import condaenv, session_env
from rocmfa.env.condaenv import no_manager_error
from rocmfa.plumbing.datafiles import REPO_ROOT
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import EnvOptions, Session

UPSTREAM = "upstream_sdpa"


def run_env_script(where: EnvOptions, script: str, args: Sequence[str]) -> int:
    """The script with the env's Python, fully activated. With no env given (--prefix,
    --env-name, $ROCMFA_ENV_PREFIX, $ROCMFA_ENV_NAME) and none found, the Python running nox
    runs it when it has torch (a CPU machine without conda)."""
    workdir = getattr(where, "workdir", None)  # bench and backend_check take none
    location = session_env.locate(where.prefix, where.env_name, workdir).location
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
        work = session_env.locate(opts.prefix, opts.env_name, getattr(opts, "workdir", None)).work
        return run_env_script(opts, f"{UPSTREAM}.py", ["--workdir", str(work), *rest])
    return run_env_script(opts, f"{probe_names(declared)[0]}.py", rest)
