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
# nox logs at debug level; our fetches (requests) say what they fetch themselves.
logging.getLogger("urllib3").setLevel(logging.WARNING)
# nox looks for uv even with venv backend "none"; sessions here never use it.
logging.getLogger("nox").addFilter(lambda record: record.getMessage() != "uv binary not found.")
# `nox -s build_aotriton build_pytorch`: a failed session stops the chain (README).
nox.options.stop_on_first_error = True

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scripts.plumbing import option_fields, options  # noqa: E402
from scripts.plumbing.options import Session  # noqa: E402


def _call(session: nox.Session, declared: Session) -> None:
    """Parse this session's options into its typed options object (every value checked before
    any work), then call its function inside the guard (locks): function(opts), or
    with the undeclared arguments (_forward)."""
    from scripts.env.session_guard import guarded
    from scripts.plumbing import errors

    try:
        if declared.forward:
            code = _forward(session, declared)
        else:
            opts = options.parse(declared.name, session.posargs)
            if "build" in declared.tags:
                session.log(f"options: {option_fields.effective(opts)}")
            with guarded(declared, opts):
                code = declared.function()(opts)
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


def _forward(session: nox.Session, declared: Session) -> int:
    """A session whose undeclared arguments go through: to its function, or for a probe to its
    script in the env's Python. --help shows ours, then the probe's own (no env needed)."""
    from scripts.env import in_env
    from scripts.env.session_guard import guarded

    helps = [a for a in session.posargs if a in ("-h", "--help")]
    posargs = [a for a in session.posargs if a not in helps]
    probe_parsers = in_env.probe_parsers(declared) if declared.probe else []
    opts, rest = options.parse_known(declared.name, posargs, in_env.flags_of(probe_parsers))
    if helps:
        print(options.build_parser(declared.name).format_help())
        if not declared.probe:
            declared.function()(opts, ["--help"])  # its own part (report: INPUT...)
        for parser in probe_parsers:
            print(parser.format_help())
        session.skip("help shown")
    with guarded(declared, opts):
        if declared.probe:
            return in_env.run_probe(declared, opts, rest)
        return declared.function()(opts, rest)


def _register(declared: Session) -> None:
    def run(session: nox.Session) -> None:
        _call(session, declared)

    run.__doc__ = declared.doc
    run.__name__ = declared.name
    nox.session(name=declared.name, python=False, tags=list(declared.tags),
                default=declared.default)(run)  # fmt: skip


# The sessions and their options are declared once, in scripts/plumbing/options.py (SESSIONS);
# each imports its function when it runs, so `nox -l` and a no-op rerun stay fast.
for _declared in options.SESSIONS:
    _register(_declared)


def _dev_tool(session: nox.Session, module: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:  # README "Tests" installs the dev extras
        session.error(f"{module} is not installed; run: python3 -m pip install -e '.[dev,cluster]'")


@nox.session(python=False, tags=["dev"])
def tests(session: nox.Session) -> None:
    """Run the test suite (pytest) with this interpreter."""
    _dev_tool(session, "pytest")
    session.run(sys.executable, "-m", "pytest", *session.posargs)


@nox.session(python=False, tags=["dev"])
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    _dev_tool(session, "ruff")
    session.run(sys.executable, "-m", "ruff", "check", ".")
    session.run(sys.executable, "-m", "ruff", "format", "--check", ".")


if __name__ == "__main__":
    nox.main()
