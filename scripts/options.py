"""One option table for every session.

Nox hands the same posargs to every session of a run (`nox -s a b -- --arch gfx1100`), so an
option means the same thing to every session that takes it, and a session silently ignores
options that belong only to other sessions. Options nobody defines are an error. Each
session's --help lists only its own options.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scripts.errors import UserError

SETUP = "setup_env"
BUILDS = ("build_aotriton", "build_pytorch", "install_wheels", "build_ck")
ENV_USERS = (SETUP, "doctor", *BUILDS, "bench", "backend_check", "validate")


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    sessions: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


def _opt(*flags: str, sessions: Sequence[str], **kwargs: Any) -> Option:
    return Option(tuple(flags), tuple(sessions), kwargs)


OPTIONS: tuple[Option, ...] = (
    # Shared by every session that touches the env or builds.
    _opt(
        "--arch",
        sessions=(*ENV_USERS, "update_pins"),
        help="GPU arch, e.g. gfx1151 (default: $ROCMFA_ARCH, else detected from KFD sysfs)",
    ),
    _opt(
        "--prefix",
        sessions=(*ENV_USERS, "lock"),
        help="conda env prefix (default: $ROCMFA_ENV_PREFIX, else the env named by --env-name)",
    ),
    _opt(
        "--env-name",
        sessions=(*ENV_USERS, "lock"),
        help="conda env name (default: $ROCMFA_ENV_NAME, else 'therock')",
    ),
    _opt(
        "--workdir",
        sessions=(*ENV_USERS, "update_pins"),
        help="checkouts, builds, stamps and downloads (default: $ROCMFA_WORKDIR, else ./work)",
    ),
    _opt(
        "--dry-run",
        sessions=(SETUP, "lock", *BUILDS, "update_pins"),
        action="store_true",
        help="print every command with its working directory and variables; run none",
    ),
    _opt(
        "--force",
        sessions=(SETUP, *BUILDS),
        action="store_true",
        help="redo even when up to date; replace or reset what would otherwise be refused",
    ),
    _opt("--json", sessions=("doctor",), action="store_true", help="machine-readable output"),
    _opt(
        "--jobs",
        "-j",
        sessions=BUILDS,
        type=int,
        metavar="N",
        help="parallel build jobs (default: capped by CPU count and free memory)",
    ),
    # setup_env
    _opt(
        "--show",
        sessions=(SETUP,),
        action="store_true",
        help="list the activation variables set in the env and why, then stop",
    ),
    _opt(
        "--profile",
        sessions=(SETUP,),
        action="append",
        choices=["vllm"],
        default=[],
        help="add a variable profile (vllm: only the vLLM flags effective for this arch)",
    ),
    _opt(
        "--with-torch",
        sessions=(SETUP,),
        action="store_true",
        help="also install TheRock's prebuilt torch for this arch from the same index",
    ),
    _opt(
        "--rocm-index",
        sessions=(SETUP,),
        choices=["multi-arch", "legacy"],
        help="TheRock index kind (default from pins/rocm.toml)",
    ),
)


def build_parser(session: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"nox -s {session} --",
        add_help=True,
        allow_abbrev=False,
        description=f"Options of the {session} session.",
    )
    known = False
    for option in OPTIONS:
        kwargs = dict(option.kwargs)
        if session not in option.sessions:
            kwargs["help"] = argparse.SUPPRESS
        else:
            known = True
        parser.add_argument(*option.flags, **kwargs)
    if not known:
        raise ValueError(f"no options registered for session {session}")
    return parser


def parse(session: str, posargs: Sequence[str]) -> argparse.Namespace:
    """Parse posargs for session. Unknown options raise UserError; --help exits 0."""
    parser = build_parser(session)

    def fail(message: str) -> None:
        raise UserError(f"{session}: {message} (see: nox -s {session} -- --help)")

    parser.error = fail  # type: ignore[method-assign]
    return parser.parse_args(list(posargs))
