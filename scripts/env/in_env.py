"""Run the standalone torch scripts (bench, backend_check, validate) with the env's Python.

The scripts depend on torch and the standard library only; this module just gives them the
shared env's full activation (our variables included, e.g. the AOTriton experimental flag).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from scripts.env import condaenv, session_env
from scripts.env.manager import no_manager_error
from scripts.plumbing.datafiles import REPO_ROOT
from scripts.plumbing.errors import UserError
from scripts.plumbing.options import BackendCheckOptions, BenchOptions, EnvOptions, ValidateOptions


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
        chosen = where.prefix or where.env_name
        chosen = chosen or os.environ.get(condaenv.PREFIX_ENV) or os.environ.get(condaenv.NAME_ENV)
        if chosen or importlib.util.find_spec("torch") is None:
            if prefix is None:
                raise no_manager_error()
            raise UserError(
                f"no Python in env {prefix} ({location.how}); run: nox -s setup_env, or pass "
                f"--prefix ENV (an env with torch), or run: python scripts/probes/{script}"
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
    argv = [str(python), str(REPO_ROOT / "scripts" / "probes" / script), *args]
    print("$ " + " ".join(argv), flush=True)
    return subprocess.run(argv, env=env, cwd=os.getcwd(), check=False).returncode


def bench(opts: BenchOptions, rest: Sequence[str]) -> int:
    return run_env_script(opts, "bench.py", rest)


def backend_check(opts: BackendCheckOptions, rest: Sequence[str]) -> int:
    return run_env_script(opts, "backend_check.py", rest)


def validate(opts: ValidateOptions, rest: Sequence[str]) -> int:
    if opts.upstream:
        return validate_upstream(opts, rest)
    return run_env_script(opts, "validate.py", rest)


# `validate -- --upstream`: PyTorch's own SDPA tests (scripts/probes/upstream_sdpa.py) instead
# of our grid; it finds the test file through the work dir (source checkout, cache).


def validate_upstream(opts: ValidateOptions, rest: Sequence[str]) -> int:
    work = session_env.locate(opts.prefix, opts.env_name, opts.workdir).work
    return run_env_script(opts, "upstream_sdpa.py", ["--workdir", str(work), *rest])
