"""Build flash-attention-enabled PyTorch for AMD GPUs from pinned sources, then prove it.

Every session shares ONE locked conda env (environment.yml + conda-lock.yml). Options go after
`--` and mean the same to every session of a run: `nox -s build_aotriton build_pytorch --
--arch gfx1100`. `nox -s <session> -- --help` lists a session's options.

Tags: env (lock, setup_env, doctor), build (expensive, default=False), check (bench,
backend_check, validate), dev (tests, lint).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

import nox

nox.needs_version = ">=2026.8.10"
nox.options.default_venv_backend = "none"
nox.options.error_on_external_run = False
# nox logs at debug level; our fetches (requests) say what they fetch themselves.
logging.getLogger("urllib3").setLevel(logging.WARNING)
# `nox -s build_aotriton build_pytorch`: a failed session stops the chain (README).
nox.options.stop_on_first_error = True

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _call(session: nox.Session, target: Callable[..., int | None], *, forward: bool = False):
    """Parse this session's options into its typed options object and call target(opts) - or
    target(opts, rest) for the probes, whose own options go through to the script."""
    from scripts.env.session_guard import guarded
    from scripts.plumbing import errors, options

    try:
        if forward:  # --help: ours, then the script's own (it goes through)
            helps = [a for a in session.posargs if a in ("-h", "--help")]
            opts, rest = options.parse_known(
                session.name, [a for a in session.posargs if a not in helps]
            )
            if helps:
                print(options.build_parser(session.name).format_help())
                rest = [*rest, "--help"]
            with guarded(session.name, opts):
                code = target(opts, rest)
        else:
            opts = options.parse(session.name, session.posargs)
            with guarded(session.name, opts):
                code = target(opts)
    except errors.UserError as error:
        session.error(str(error))
    except OSError as error:  # on the paths we own: permissions, space, read-only mounts
        session.error(errors.os_error_line(error))
    except UnicodeDecodeError as error:
        session.error(errors.decode_error_line(error))
    except SystemExit as done:  # --help
        if done.code not in (0, None):
            raise
        session.skip("help shown")
    else:
        if code:
            session.error(f"{session.name} exited with status {code}")


# Each session imports its function when it runs, so `nox -l` and a no-op rerun stay fast.


@nox.session(python=False, tags=["env"], default=False)
def lock(session: nox.Session) -> None:
    """Re-solve environment.yml into conda-lock.yml with py-rattler (channels or --channel)."""
    from scripts.env.lockfile import lock

    _call(session, lock)


@nox.session(python=False, tags=["env"], default=False)
def setup_env(session: nox.Session) -> None:
    """Create/update the shared env from the lock, add TheRock's ROCm SDK, write variables."""
    from scripts.env.setup_env import setup_env

    _call(session, setup_env)


@nox.session(python=False, tags=["env"])
def doctor(session: nox.Session) -> None:
    """One-screen report: arch, manager, env, lock, ROCm, torch, pins, builds, next step."""
    from scripts.env.doctor import doctor

    _call(session, doctor)


@nox.session(python=False, tags=["env"], default=False)
def repair(session: nox.Session) -> None:
    """Finish or roll back an interrupted install into the env's torch (any session does too)."""
    from scripts.env.session_guard import repair

    _call(session, repair)


@nox.session(python=False, tags=["env"], default=False)
def matrix(session: nox.Session) -> None:
    """Arch x AOTriton release: flash by default / experimental flag / community port / none."""
    from scripts.env.compat_matrix import main

    _call(session, main)


@nox.session(python=False, tags=["build"], default=False)
def update_pins(session: nox.Session) -> None:
    """Resolve pinned refs to commits, rewrite pins/, report whether patch sets still apply."""
    from scripts.sources.update_pins import update_pins

    _call(session, update_pins)


@nox.session(python=False, tags=["build"], default=False)
def build_aotriton(session: nox.Session) -> None:
    """Build (or --from-release fetch) AOTriton at its pin and install it into the env's torch."""
    from scripts.builds.build_aotriton import build_aotriton

    _call(session, build_aotriton)


@nox.session(python=False, tags=["build"], default=False)
def tune_aotriton(session: nox.Session) -> None:
    """Tune AOTriton on this GPU, store the database in pins/tuning, rebuild, validate, install."""
    from scripts.builds.tune_aotriton import tune_aotriton

    _call(session, tune_aotriton)


@nox.session(python=False, tags=["build"], default=False)
def build_pytorch(session: nox.Session) -> None:
    """Build torch, audio, vision and triton wheels through TheRock, resumable by stage."""
    from scripts.builds.build_pytorch import build_pytorch

    _call(session, build_pytorch)


@nox.session(python=False, tags=["build"], default=False)
def install_wheels(session: nox.Session) -> None:
    """Install the wheels of the last build_pytorch run into the env, then check the backend."""
    from scripts.builds.install_wheels import install_wheels

    _call(session, install_wheels)


@nox.session(python=False, tags=["build"], default=False)
def publish(session: nox.Session) -> None:
    """Publish this run's wheels and their manifest to a team index (one index per family)."""
    from scripts.builds.publish import publish

    _call(session, publish)


@nox.session(python=False, tags=["build"], default=False)
def build_ck(session: nox.Session) -> None:
    """Build and install composable_kernel (library only) for this arch into the env."""
    from scripts.builds.build_ck import build_ck

    _call(session, build_ck)


@nox.session(python=False, tags=["check"], default=False)
def bench(session: nox.Session) -> None:
    """Time SDPA backends forward/backward; TFLOP/s, % of peak, JSON/CSV/PNG, --compare."""
    from scripts.env.in_env import bench

    _call(session, bench, forward=True)


@nox.session(python=False, tags=["check"], default=False)
def backend_check(session: nox.Session) -> None:
    """Prove flash attention is compiled in, usable, actually used and correct."""
    from scripts.env.in_env import backend_check

    _call(session, backend_check, forward=True)


@nox.session(python=False, tags=["check"], default=False)
def validate(session: nox.Session) -> None:
    """Forward/backward correctness vs an fp32/fp64 reference across head dims and shapes."""
    from scripts.env.in_env import validate

    _call(session, validate, forward=True)


@nox.session(python=False, tags=["check"], default=False)
def report(session: nox.Session) -> None:
    """One self-contained HTML page (and merged JSON) from result sets: INPUT... --baseline."""
    from scripts.report.page import report

    _call(session, report, forward=True)


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
