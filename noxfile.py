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
from pathlib import Path

import nox

nox.needs_version = ">=2026.8.10"
nox.options.default_venv_backend = "none"
nox.options.error_on_external_run = False
# nox sets the root logger to DEBUG: every library's debug and info records (botocore's: hundreds
# per s3:// call) would reach the user. Only nox's own and warnings go through.
for _handler in logging.getLogger().handlers:
    _handler.addFilter(lambda r: r.levelno >= logging.WARNING or r.name.split(".")[0] == "nox")
# nox looks for uv even with venv backend "none"; sessions here never use it.
logging.getLogger("nox").addFilter(lambda record: record.getMessage() != "uv binary not found.")
# `nox -s build_aotriton build_pytorch`: a failed session stops the chain (README).
nox.options.stop_on_first_error = True

sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))  # the rocmfa package


def _run(session: nox.Session, function=None) -> None:
    """Parse the session's settings (scripts/rocmfa/plumbing/options.py: all checked before any
    work), print those not at their default, and call function(opts) inside the guard (locks);
    a forwarding session gets function(opts, rest), a probe (no function) runs its script."""
    from rocmfa.env.session_env import guarded
    from rocmfa.plumbing import errors, options  # here: `nox -l` builds no settings class

    declared = options.BY_NAME[session.name]
    if {"-h", "--help"} & set(session.posargs):  # what the session does, above its options
        print(nox.registry.get()[session.name].__doc__, end="\n\n")
    try:
        if declared.forward:
            code = _forward(session, declared, function)
        else:
            opts = options.parse(declared.name, session.posargs)
            session.log(f"options: {options.effective(opts)}")
            with guarded(declared, opts):
                code = function(opts)
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
            session.error(f"{declared.name} exited with status {code}")


def _forward(session: nox.Session, declared, function) -> int:
    """The undeclared arguments go to the function, or to the probe's script in the env's
    Python; --help shows ours, then the probe's own (no env needed)."""
    from rocmfa.env import session_env
    from rocmfa.env.session_env import guarded
    from rocmfa.plumbing import options

    helps = [a for a in session.posargs if a in ("-h", "--help")]
    posargs = [a for a in session.posargs if a not in helps]
    probe_parsers = session_env.probe_parsers(declared) if declared.probe else []
    opts, rest = options.parse_known(declared.name, posargs, session_env.flags_of(probe_parsers))
    if helps:
        print(options.build_parser(declared.name).format_help())
        if not declared.probe:
            function(opts, ["--help"])  # its own part (report: INPUT...)
        for parser in probe_parsers:
            print(parser.format_help())
        session.skip("help shown")
    session.log(f"options: {options.effective(opts)}")
    with guarded(declared, opts):
        if declared.probe:
            return session_env.run_probe(declared, opts, rest)
        return function(opts, rest)


# Each session calls one domain function, imported when it runs (`nox -l` stays fast).


@nox.session(python=False, tags=["env"], default=False)
def lock(session: nox.Session) -> None:
    """Re-solve environment.yml into conda-lock.yml with py-rattler (channels or --channel)."""
    from rocmfa.env import lockfile

    _run(session, lockfile.lock)


@nox.session(python=False, tags=["env"], default=False)
def setup_env(session: nox.Session) -> None:
    """Create/update the shared env from the lock, add TheRock's ROCm SDK, write variables."""
    from rocmfa.env import setup_env

    _run(session, setup_env.setup_env)


@nox.session(python=False, tags=["env"])
def doctor(session: nox.Session) -> None:
    """One-screen report: arch, manager, env, lock, ROCm, torch, pins, builds, next step."""
    from rocmfa.env import doctor

    _run(session, doctor.doctor)


@nox.session(python=False, tags=["env"], default=False)
def matrix(session: nox.Session) -> None:
    """Arch x AOTriton release: flash by default / experimental flag / community port / none."""
    from rocmfa.env import archs

    _run(session, archs.matrix)


@nox.session(python=False, tags=["build"], default=False)
def update_pins(session: nox.Session) -> None:
    """Resolve pinned refs to commits, rewrite pins/, report whether patch sets still apply."""
    from rocmfa.sources import update_pins

    _run(session, update_pins.update_pins)


@nox.session(python=False, tags=["build"], default=False)
def build_aotriton(session: nox.Session) -> None:
    """Build (or --from-release fetch) AOTriton at its pin; swap it into the env's torch, if any."""
    from rocmfa.builds import build_aotriton

    _run(session, build_aotriton.build_aotriton)


@nox.session(python=False, tags=["build"], default=False)
def tune_aotriton(session: nox.Session) -> None:
    """Tune AOTriton with its own Tuner v3.5 (a local PostgreSQL), rebuild with it, install."""
    from rocmfa.builds import tune_aotriton

    _run(session, tune_aotriton.tune_aotriton)


@nox.session(python=False, tags=["build"], default=False)
def kernel_check(session: nox.Session) -> None:
    """Run AOTriton's generator and compile a sample of its real kernels on CPU (no ROCm)."""
    from rocmfa.builds import kernel_check

    _run(session, kernel_check.kernel_check)


@nox.session(python=False, tags=["build"], default=False)
def build_pytorch(session: nox.Session) -> None:
    """Build torch, audio, vision and triton wheels through TheRock, resumable by stage."""
    from rocmfa.builds import build_pytorch

    _run(session, build_pytorch.build_pytorch)


@nox.session(python=False, tags=["build"], default=False)
def install_wheels(session: nox.Session) -> None:
    """Install the wheels of the last build_pytorch run into the env, then check the backend."""
    from rocmfa.sharing import install_wheels

    _run(session, install_wheels.install_wheels)


@nox.session(python=False, tags=["build"], default=False)
def publish(session: nox.Session) -> None:
    """Publish this run's wheels and their manifest to a team index (one index per family)."""
    from rocmfa.sharing import publish

    _run(session, publish.publish)


@nox.session(python=False, tags=["build"], default=False)
def build_ck(session: nox.Session) -> None:
    """Build and install composable_kernel (library only) for this arch into the env."""
    from rocmfa.builds import build_ck

    _run(session, build_ck.build_ck)


@nox.session(python=False, tags=["check"], default=False)
def bench(session: nox.Session) -> None:
    """Time SDPA backends forward/backward; TFLOP/s, % of peak, JSON/CSV/PNG, --compare."""
    _run(session)  # scripts/rocmfa/probes/bench.py in the env's Python


@nox.session(python=False, tags=["check"], default=False)
def backend_check(session: nox.Session) -> None:
    """Prove flash attention is compiled in, usable, actually used and correct."""
    _run(session)  # scripts/rocmfa/probes/backend_check.py in the env's Python


@nox.session(python=False, tags=["check"], default=False)
def validate(session: nox.Session) -> None:
    """Forward/backward correctness vs an fp32/fp64 reference across head dims and shapes."""
    _run(session)  # scripts/rocmfa/probes/validate.py (--upstream: upstream_sdpa.py) in the env


@nox.session(python=False, tags=["check"], default=False)
def report(session: nox.Session) -> None:
    """One self-contained HTML page (and merged JSON) from result sets: INPUT... --baseline."""
    from rocmfa.report import page

    _run(session, page.report)


# README "Tests": the line that installs what tests and lint need (torch too: test modules import
# it); tests/test_report_exits.py keeps the two the same.
DEV_INSTALL = "python3 -m pip install -e '.[dev,cluster]' torch==2.13.0"


def _dev_tools(session: nox.Session, *modules: str) -> None:
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        are = "is" if len(missing) == 1 else "are"
        session.error(f"{' and '.join(missing)} {are} not installed; run: {DEV_INSTALL}")


@nox.session(python=False, tags=["dev"])
def tests(session: nox.Session) -> None:
    """Run the test suite (pytest) with this interpreter."""
    _dev_tools(session, "pytest", "torch")
    session.run(sys.executable, "-m", "pytest", *session.posargs)


@nox.session(python=False, tags=["dev"])
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    _dev_tools(session, "ruff")
    session.run(sys.executable, "-m", "ruff", "check", ".")
    session.run(sys.executable, "-m", "ruff", "format", "--check", ".")


if __name__ == "__main__":
    nox.main()
