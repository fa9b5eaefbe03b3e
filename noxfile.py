"""Build flash-attention-enabled PyTorch for AMD GPUs from pinned sources, then prove it.

Every session shares ONE locked conda env (environment.yml + conda-lock.yml). Options go after
`--` and mean the same to every session of a run: `nox -s build_aotriton build_pytorch --
--arch gfx1100`. `nox -s <session> -- --help` lists a session's options.

Tags: env (lock, setup_env, doctor), build (expensive, default=False), check (bench,
backend_check, validate), dev (tests, lint).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

nox.needs_version = ">=2026.8.10"
nox.options.default_venv_backend = "none"
nox.options.error_on_external_run = False

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _call(session: nox.Session, module: str, function: str, *, forward: bool = False) -> None:
    """Parse this session's options and call scripts.<module>.<function>(opts[, rest])."""
    import importlib

    from scripts import options
    from scripts.errors import UserError

    try:
        if forward:  # bench/backend_check/validate: their own options go to the script
            opts, rest = options.build_parser(session.name).parse_known_args(session.posargs)
            args = (opts, rest)
        else:
            args = (options.parse(session.name, session.posargs),)
        target = getattr(importlib.import_module(f"scripts.{module}"), function)
        code = target(*args)
    except UserError as error:
        session.error(str(error))
    except SystemExit as done:  # --help
        if done.code not in (0, None):
            raise
        session.skip("help shown")
    else:
        if code:
            session.error(f"{session.name} exited with status {code}")


@nox.session(python=False, tags=["env"], default=False)
def lock(session: nox.Session) -> None:
    """Re-solve environment.yml into conda-lock.yml (needs a conda manager and channels)."""
    _call(session, "lockfile", "lock")


@nox.session(python=False, tags=["env"], default=False)
def setup_env(session: nox.Session) -> None:
    """Create/update the shared env from the lock, add TheRock's ROCm SDK, write variables."""
    _call(session, "setup_env", "setup_env")


@nox.session(python=False, tags=["env"])
def doctor(session: nox.Session) -> None:
    """One-screen report: arch, manager, env, lock, ROCm, torch, pins, builds, next step."""
    _call(session, "doctor", "doctor")


@nox.session(python=False, tags=["build"], default=False)
def update_pins(session: nox.Session) -> None:
    """Resolve pinned refs to commits, rewrite pins/, report whether patch sets still apply."""
    _call(session, "update_pins", "update_pins")


@nox.session(python=False, tags=["build"], default=False)
def build_aotriton(session: nox.Session) -> None:
    """Build (or --from-release fetch) AOTriton at its pin and install it into the env's torch."""
    _call(session, "build_aotriton", "build_aotriton")


@nox.session(python=False, tags=["build"], default=False)
def build_pytorch(session: nox.Session) -> None:
    """Build torch, audio, vision and triton wheels through TheRock, resumable by stage."""
    _call(session, "build_pytorch", "build_pytorch")


@nox.session(python=False, tags=["build"], default=False)
def install_wheels(session: nox.Session) -> None:
    """Install the wheels of the last build_pytorch run into the env, then check the backend."""
    _call(session, "install_wheels", "install_wheels")


@nox.session(python=False, tags=["build"], default=False)
def build_ck(session: nox.Session) -> None:
    """Build and install composable_kernel (library only) for this arch into the env."""
    _call(session, "build_ck", "build_ck")


@nox.session(python=False, tags=["check"], default=False)
def bench(session: nox.Session) -> None:
    """Time SDPA backends forward/backward; TFLOP/s, % of peak, JSON/CSV/PNG, --compare."""
    _call(session, "in_env", "bench", forward=True)


@nox.session(python=False, tags=["check"], default=False)
def backend_check(session: nox.Session) -> None:
    """Prove flash attention is compiled in, usable, actually used and correct."""
    _call(session, "in_env", "backend_check", forward=True)


@nox.session(python=False, tags=["check"], default=False)
def validate(session: nox.Session) -> None:
    """Forward/backward correctness vs an fp32/fp64 reference across head dims and shapes."""
    _call(session, "in_env", "validate", forward=True)


@nox.session(python=False, tags=["dev"])
def tests(session: nox.Session) -> None:
    """Run the test suite (pytest) with this interpreter."""
    session.run(sys.executable, "-m", "pytest", *session.posargs)


@nox.session(python=False, tags=["dev"])
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.run(sys.executable, "-m", "ruff", "check", ".")
    session.run(sys.executable, "-m", "ruff", "format", "--check", ".")


if __name__ == "__main__":
    nox.main()
