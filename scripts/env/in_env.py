"""Run the standalone torch scripts (bench, backend_check, validate) with the env's Python.

The scripts depend on torch and the standard library only; this module just gives them the
shared env's full activation (our variables included, e.g. the AOTriton experimental flag).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from scripts.env import condaenv
from scripts.env.manager import no_manager_error
from scripts.plumbing import paths
from scripts.plumbing.datafiles import REPO_ROOT
from scripts.plumbing.errors import UserError
from scripts.plumbing.options import BackendCheckOptions, BenchOptions, EnvChoice, ValidateOptions


def run_env_script(where: EnvChoice, script: str, args: Sequence[str]) -> int:
    location = condaenv.locate(where.prefix, where.env_name)
    prefix = location.prefix
    if prefix is None:
        raise no_manager_error()
    python = prefix / "bin" / "python"
    if not python.exists():
        raise UserError(f"no Python in env {prefix} ({location.how}); run: nox -s setup_env")
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
    if UPSTREAM_FLAG in rest:
        return validate_upstream(opts, [a for a in rest if a != UPSTREAM_FLAG])
    return run_env_script(opts, "validate.py", rest)


# `validate -- --upstream`: PyTorch's own SDPA tests (scripts/probes/upstream_sdpa.py) instead
# of our grid; it finds the test file through the work dir (source checkout, cache).
UPSTREAM_FLAG = "--upstream"


def validate_upstream(opts: ValidateOptions, rest: Sequence[str]) -> int:
    work = paths.workdir(opts.workdir)
    return run_env_script(opts, "upstream_sdpa.py", ["--workdir", str(work), *rest])
