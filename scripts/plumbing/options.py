"""One option table for every session, parsed once into a frozen, typed object per session.

Nox hands the same posargs to every session of a run (`nox -s a b -- --arch gfx1100`), so an
option means the same thing to every session that takes it, and a session silently ignores
options that belong only to other sessions. Options nobody defines are an error. Each
session's --help lists only its own options.

Adding an option: one row in OPTIONS (naming its sessions) and one field in the options class
of each of those sessions (SESSION_OPTIONS; shared fields live in a shared base class).
tests/test_options.py fails when a session's rows and its class's fields differ.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Sequence
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any, ClassVar, dataclass_transform

from scripts.plumbing.errors import UserError

SETUP = "setup_env"
BUILDS = ("build_aotriton", "build_pytorch", "install_wheels", "build_ck", "tune_aotriton")
ENV_USERS = (SETUP, "doctor", *BUILDS, "bench", "backend_check", "validate", "repair")


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    sessions: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def dest(self) -> str:
        """The attribute argparse stores it under: the field name in the options classes."""
        if "dest" in self.kwargs:
            return str(self.kwargs["dest"])
        long = next((f for f in self.flags if f.startswith("--")), self.flags[0])
        return long.lstrip("-").replace("-", "_")


def _opt(*flags: str, sessions: Sequence[str], **kwargs: Any) -> Option:
    return Option(tuple(flags), tuple(sessions), kwargs)


OPTIONS: tuple[Option, ...] = (
    # Shared by every session that touches the env or builds.
    _opt(
        "--arch",
        sessions=(*ENV_USERS, "update_pins", "matrix", "publish", "report"),
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
        sessions=(*ENV_USERS, "update_pins", "publish"),
        help="checkouts, builds, stamps and downloads (default: $ROCMFA_WORKDIR, else ./work)",
    ),
    _opt(
        "--dry-run",
        sessions=(SETUP, "lock", *BUILDS, "update_pins", "publish"),
        action="store_true",
        help="print every command with its working directory and variables; run none",
    ),
    _opt(
        "--force",
        sessions=(SETUP, *BUILDS, "update_pins"),
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
        sessions=("build_aotriton", "tune_aotriton", "build_pytorch", "build_ck"),
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
        sessions=("build_aotriton", "tune_aotriton"),
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
        sessions=("build_aotriton", "tune_aotriton", "build_pytorch", "build_ck"),
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
    # --- publish, install_wheels --index (issue 20) ---
    _opt(
        "--index",
        sessions=("publish", "install_wheels", "report"),
        metavar="URL",
        help="team wheel index (family index: URL/v2/<family>/, or {family} in URL): DIR, "
        "http(s)://HOST/PATH (WebDAV), s3://BUCKET/PREFIX?endpoint=URL, pypi+http(s)://HOST "
        "(upload API: pypiserver, devpi); credentials only from the environment",
    ),
    _opt(
        "--wheel-set",
        sessions=("install_wheels",),
        metavar="ID",
        help="with --index: install this wheel set (default: the newest that fits this env)",
    ),
    _opt(
        "--report",
        sessions=("publish",),
        action="append",
        default=[],
        metavar="JSON",
        help="a backend_check / validate / bench JSON report of this build to summarize in the "
        "manifest (repeatable)",
    ),
    # --- report (issue 32) ---
    _opt(
        "--baseline",
        sessions=("report",),
        metavar="INPUT",
        help="a result set (folder or JSON file) to compare the others with: speedup table and "
        "chart",
    ),
    _opt(
        "--out",
        sessions=("report",),
        metavar="DIR",
        help="where results.html and results.json go (default: ./results-page)",
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


# --- the typed options of each session (one field per row of OPTIONS above) ---------------


@dataclass_transform(kw_only_default=True, frozen_default=True)
class SessionOptions:
    """Base of the options classes: frozen, keyword-only, one field per annotated class
    attribute (its value is the default), equal by value - a dataclass to type checkers.
    Not @dataclass itself: that costs ~1 ms per class at import, which every nox run pays."""

    _fields: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names = [n for n in inspect.get_annotations(cls) if n != "_fields"]
        cls._fields = (*cls._fields, *(n for n in names if n not in cls._fields))

    def __init__(self, **values: Any) -> None:
        unknown = set(values) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__}: no option {', '.join(sorted(unknown))}")
        for name in self._fields:
            object.__setattr__(self, name, values.get(name, getattr(type(self), name)))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return cls._fields

    def _values(self) -> tuple[Any, ...]:
        return tuple(self.__dict__[name] for name in self._fields)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values() == self._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(self._fields, self._values(), strict=True))
        return f"{type(self).__name__}({shown})"


class EnvChoice(SessionOptions):
    """Which GPU arch, shared env and work dir: every session that uses the env."""

    arch: str | None = None
    prefix: str | None = None
    env_name: str | None = None
    workdir: str | None = None


class LockOptions(SessionOptions):
    prefix: str | None = None
    env_name: str | None = None
    dry_run: bool = False
    channel: tuple[str, ...] = ()


class SetupEnvOptions(EnvChoice):
    dry_run: bool = False
    force: bool = False
    channel: tuple[str, ...] = ()
    show: bool = False
    profile: tuple[str, ...] = ()
    with_torch: bool = False
    rocm_index: str | None = None


class DoctorOptions(EnvChoice):
    json: bool = False


class MatrixOptions(SessionOptions):
    arch: str | None = None
    json: bool = False


class UpdatePinsOptions(SessionOptions):
    arch: str | None = None
    workdir: str | None = None
    dry_run: bool = False
    force: bool = False  # an inconsistent torch x AOTriton pin set: warn instead of refusing
    project: tuple[str, ...] | None = None
    port_patches: bool = False


class BuildOptions(EnvChoice):
    """What every build session takes."""

    dry_run: bool = False
    force: bool = False
    jobs: int | None = None


class AotritonSourceOptions(BuildOptions):
    """How AOTriton is built from source: build_aotriton and tune_aotriton's builds."""

    clean: bool = False
    cache: str | None = None
    timeout_min: float | None = None
    aotriton_source: str | None = None


class BuildAotritonOptions(AotritonSourceOptions):
    no_images: bool = False
    from_release: bool = False
    restore: bool = False


class TuneAotritonOptions(AotritonSourceOptions):
    tune_head_dims: str | None = None
    tune_dtypes: str | None = None
    tune_seqlens: str | None = None


class BuildPytorchOptions(BuildOptions):
    clean: bool = False
    cache: str | None = None
    from_stage: str | None = None
    only: str | None = None
    skip: tuple[str, ...] = ()
    with_apex: bool = False
    ccache: bool = False
    sccache: bool = False
    aotriton_prefix: str | None = None


class InstallWheelsOptions(BuildOptions):
    no_backend_check: bool = False
    index: str | None = None
    wheel_set: str | None = None


class PublishOptions(SessionOptions):
    """publish reads the build's run manifest (work dir), not the env."""

    arch: str | None = None
    workdir: str | None = None
    dry_run: bool = False
    index: str | None = None
    report: tuple[str, ...] = ()


class BuildCkOptions(BuildOptions):
    clean: bool = False
    cache: str | None = None
    with_tests: bool = False
    with_examples: bool = False


class BenchOptions(EnvChoice):
    """bench's own options go through to scripts/probes/bench.py."""


class BackendCheckOptions(EnvChoice):
    """backend_check's own options go through to scripts/probes/backend_check.py."""


class ValidateOptions(EnvChoice):
    """validate's own options go through to scripts/probes/validate.py (with --upstream:
    scripts/probes/upstream_sdpa.py, PyTorch's own SDPA tests; see scripts.env.in_env)."""


class ReportOptions(SessionOptions):
    """report: INPUT... (folders or probe JSON files) go through as the rest."""

    arch: str | None = None
    index: str | None = None
    baseline: str | None = None
    out: str | None = None


class RepairOptions(EnvChoice):
    """repair: the env (and work dir) whose interrupted install to finish or roll back."""


SESSION_OPTIONS: dict[str, type[SessionOptions]] = {
    "lock": LockOptions,
    "setup_env": SetupEnvOptions,
    "doctor": DoctorOptions,
    "matrix": MatrixOptions,
    "update_pins": UpdatePinsOptions,
    "build_aotriton": BuildAotritonOptions,
    "tune_aotriton": TuneAotritonOptions,
    "build_pytorch": BuildPytorchOptions,
    "install_wheels": InstallWheelsOptions,
    "publish": PublishOptions,
    "build_ck": BuildCkOptions,
    "bench": BenchOptions,
    "backend_check": BackendCheckOptions,
    "validate": ValidateOptions,
    "repair": RepairOptions,
    "report": ReportOptions,
}


def session_rows(session: str) -> list[Option]:
    return [option for option in OPTIONS if session in option.sessions]


def _typed(session: str, parsed: argparse.Namespace) -> Any:
    """The session's frozen options object from argparse's result (lists become tuples)."""
    cls = SESSION_OPTIONS[session]
    values = vars(parsed)
    chosen = {}
    for name in cls.field_names():
        value = values[name]
        chosen[name] = tuple(value) if isinstance(value, list) else value
    return cls(**chosen)


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


def parse(session: str, posargs: Sequence[str]) -> Any:
    """The session's options object (SESSION_OPTIONS) from posargs. Unknown options raise
    UserError; --help exits 0."""
    parser = build_parser(session)

    def fail(message: str) -> None:
        raise UserError(f"{session}: {message} (see: nox -s {session} -- --help)")

    parser.error = fail  # type: ignore[method-assign]
    return _typed(session, parser.parse_args(list(posargs)))


def parse_known(session: str, posargs: Sequence[str]) -> tuple[Any, list[str]]:
    """For the probe sessions: (their options object, the rest for the probe script)."""
    parsed, rest = build_parser(session).parse_known_args(list(posargs))
    return _typed(session, parsed), rest
