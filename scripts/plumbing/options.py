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

from scripts.plumbing.errors import UserError

SETUP = "setup_env"
BUILDS = ("build_aotriton", "build_pytorch", "install_wheels", "build_ck", "tune_aotriton")
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
        sessions=(*ENV_USERS, "update_pins", "matrix"),
        help="GPU arch, e.g. gfx1151 (default: $ROCMFA_ARCH, else rocm-bootstrap's detection: "
        "$ROCM_BOOTSTRAP_FORCE_GFX_ARCH or KFD sysfs)",
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
        help="redo even when up to date; replace or reset what would otherwise be refused "
        "(also a conflicting arch x AOTriton x torch combination, see nox -s matrix)",
    ),
    _opt(
        "--json", sessions=("doctor", "matrix"), action="store_true", help="machine-readable output"
    ),
    _opt(
        "--jobs",
        "-j",
        sessions=BUILDS,
        type=int,
        metavar="N",
        help="parallel build jobs (default: capped by CPU count and free memory)",
    ),
    _opt(
        "--channel",
        sessions=(SETUP, "lock"),
        action="append",
        default=[],
        metavar="URL",
        help="a mirror of environment.yml's channel (https://, file:// or a folder; NAME=URL "
        "when it has several): lock solves against it, setup_env downloads from it; the lock "
        "keeps the channel's own URLs",
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
    # --- builds: pins, patches, AOTriton, PyTorch, CK ---
    _opt(
        "--clean",
        sessions=("build_aotriton", "build_pytorch", "build_ck"),
        action="store_true",
        help="start the build over (empty the build dir; TheRock --clean); never the sources",
    ),
    _opt(
        "--no-images",
        sessions=("build_aotriton",),
        action="store_true",
        help="AOTRITON_NOIMAGE_MODE=ON: build only the runtime, keep torch's kernel images",
    ),
    _opt(
        "--timeout-min",
        sessions=("build_aotriton",),
        type=float,
        metavar="MIN",
        help="AOTRITON_GPU_BUILD_TIMEOUT per kernel, minutes (default 0 = no limit)",
    ),
    _opt(
        "--from-release",
        sessions=("build_aotriton",),
        action="store_true",
        help="install the prebuilt release runtime + this arch's image pack (minutes, not hours)",
    ),
    _opt(
        "--aotriton-source",
        sessions=("build_aotriton", "tune_aotriton"),
        metavar="SOURCE",
        help="'upstream' (ROCm/aotriton) or a variant of pins/aotriton_variants.toml "
        "(default: the variant for this arch, if any, else upstream)",
    ),
    _opt(
        "--tune-head-dims",
        sessions=("tune_aotriton",),
        metavar="LIST",
        help="head dims to tune, comma list (default: the arch's, e.g. 32,64 for gfx908)",
    ),
    _opt(
        "--tune-dtypes",
        sessions=("tune_aotriton",),
        metavar="LIST",
        help="dtypes to tune: float16,bfloat16 (default: the variant's, else float16,bfloat16)",
    ),
    _opt(
        "--tune-seqlens",
        sessions=("tune_aotriton",),
        metavar="LIST",
        help="sequence lengths to tune (q and k), comma list (default 16..4096, powers of 2)",
    ),
    _opt(
        "--restore",
        sessions=("build_aotriton",),
        action="store_true",
        help="put back the AOTriton files torch shipped (from the backup) and stop",
    ),
    _opt(
        "--project",
        sessions=("update_pins",),
        action="append",
        choices=["therock", "pytorch", "aotriton", "composable_kernel"],
        help="update only this project's pin (repeatable; default: all)",
    ),
    _opt(
        "--port-patches",
        sessions=("update_pins",),
        action="store_true",
        help="copy a patch set to the new commit when it still applies cleanly there",
    ),
    _opt(
        "--cache",
        sessions=("build_aotriton", "build_pytorch", "build_ck"),
        metavar="KIND|URL",
        help="compile cache: none, ccache, sccache (local), or a shared sccache at "
        "redis://HOST:PORT, http(s)://HOST/PATH (WebDAV), s3://BUCKET/PREFIX?endpoint=URL; "
        "add ?read_only=1 to only read; credentials only from the environment",
    ),
    # --- build_pytorch, install_wheels, build_ck (issue 4) ---
    _opt(
        "--from",
        dest="from_stage",
        sessions=("build_pytorch",),
        choices=["checkout", "triton", "torch", "audio", "vision", "apex"],
        metavar="STAGE",
        help="rerun STAGE and every stage after it: checkout, triton, torch, audio, vision, apex",
    ),
    _opt(
        "--only",
        sessions=("build_pytorch",),
        choices=["checkout", "triton", "torch", "audio", "vision", "apex"],
        metavar="STAGE",
        help="run just STAGE (the stages it builds on must be done)",
    ),
    _opt(
        "--skip",
        sessions=("build_pytorch",),
        action="append",
        choices=["triton", "audio", "vision"],
        default=[],
        metavar="STAGE",
        help="leave out triton, audio or vision (repeatable); leaving out triton is refused "
        "where torch would lose flash attention",
    ),
    _opt(
        "--with-apex",
        sessions=("build_pytorch",),
        action="store_true",
        help="also check out and build apex",
    ),
    _opt(
        "--ccache",
        sessions=("build_pytorch",),
        action="store_true",
        help="compile through ccache (TheRock --use-ccache)",
    ),
    _opt(
        "--sccache",
        sessions=("build_pytorch",),
        action="store_true",
        help="compile through sccache (TheRock --use-sccache)",
    ),
    _opt(
        "--aotriton-prefix",
        sessions=("build_pytorch",),
        metavar="DIR",
        help="AOTriton install prefix for torch (default: build_aotriton's install, if any)",
    ),
    _opt(
        "--no-backend-check",
        sessions=("install_wheels",),
        action="store_true",
        help="install only; do not run scripts/backend_check.py afterwards",
    ),
    _opt(
        "--with-tests",
        sessions=("build_ck",),
        action="store_true",
        help="also build CK's tests (slow: GPU_TARGETS instead of GPU_ARCHS)",
    ),
    _opt(
        "--with-examples",
        sessions=("build_ck",),
        action="store_true",
        help="also build CK's examples (slow: GPU_TARGETS instead of GPU_ARCHS)",
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
