"""Every nox session's settings: one frozen dataclass per session, resolved once by parse():
the command line, else its $ROCMFA_* variable (a FromEnv value), else the default, every value
checked before the first command. This module is the one reader of our $ROCMFA_* variables
(the env-only ones too: Environment below).

An option is one field, declared with its flag, help, variable and check in the field's metadata:
`with_tests: bool = switch("--with-tests", help="also build CK's tests")`. switch(): a flag;
many(): repeatable; opt(): one value (type= converts, check= only checks, choices= a constant or
a function returning one, env= its $ROCMFA_* variable, aliases= old flags). An option several
sessions read is a partial of opt() below (arch_opt, ...); checks across fields go in the class's
check(self). A session is its @nox.session function in noxfile.py and its Session line in
SESSIONS. Nox hands the same posargs to every session of a run, so a session drops the options
other sessions declare; options nobody declares are an error.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from rocmfa.plumbing.cache_spec import parse_cache
from rocmfa.plumbing.datafiles import DATA_DIR, load_toml
from rocmfa.plumbing.errors import UserError, did_you_mean
from rocmfa.plumbing.paths import WORKDIR_ENV

ARCH_ENV = "ROCMFA_ARCH"
PREFIX_ENV = "ROCMFA_ENV_PREFIX"
NAME_ENV = "ROCMFA_ENV_NAME"
ARCHES_FILE = DATA_DIR / "arches.toml"


class FromEnv(str):
    """A setting taken from its $ROCMFA_* variable: the value, naming the variable, so that the
    session says where it came from (`arch gfx1100 ($ROCMFA_ARCH)`) without reading it again."""

    def __new__(cls, value: str, variable: str) -> FromEnv:
        made = super().__new__(cls, value)
        made.variable = variable
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        return (FromEnv, (str(self), self.variable))


def origin(value: object, flag: str) -> str:
    """Where a setting came from: its $ROCMFA_* variable, else its flag."""
    return f"${value.variable}" if isinstance(value, FromEnv) else flag


@dataclass(frozen=True)
class Environment:
    """What only a $ROCMFA_* variable sets, for every session alike (no flag): each field's
    variable is ROCMFA_<FIELD>; unset or empty is None."""

    pins_dir: str | None = None  # pins/ elsewhere
    pytorch_line: str | None = None  # release (default) or nightly (pin_files.LINES)
    conda_cache: str | None = None  # py-rattler's package cache
    ck_source: str | None = None  # sources/pins.py
    patches_dir: str | None = None  # sources/patches.py
    tuning_dir: str | None = None  # sources/tuning_db.py
    aotriton_base_url: str | None = None  # builds/aotriton_release.py
    kernel_python: str | None = None  # builds/kernel_check.py, kernel_cluster.py


def environment(environ: Mapping[str, str] | None = None) -> Environment:
    """The Environment of os.environ (or of environ, where a caller hands one down)."""
    environ = os.environ if environ is None else environ
    names = (f.name for f in dataclasses.fields(Environment))
    return Environment(**{n: environ.get(f"ROCMFA_{n.upper()}") or None for n in names})


# --- checks and choices: here, so that parsing imports no domain module ---------------------


def folder(text: str) -> str:
    """A folder we may create: refused when it exists as something else."""
    if Path(text).expanduser().exists() and not Path(text).expanduser().is_dir():
        raise UserError(f"{text} exists and is not a folder; fix: move it away, or name another")
    return text


def env_name(text: str) -> str:
    if "/" in text or text in (".", ".."):
        raise UserError(f"invalid env name {text!r}; use --prefix for a path")
    return text


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("expected a number of at least 1")
    return value


def minutes(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError("expected minutes >= 0 (0 = no limit)")
    return value


STAGES = ("checkout", "torch", "audio", "vision", "apex")  # build_pytorch's, in order
SKIPPABLE = ("triton", "audio", "vision")  # --skip's choices (triton: the torch call's)
TRITONS = ("fork", "pypi")  # what compiles AOTriton's kernels (kernel_build)
INDEX_KINDS = ("multi-arch", "legacy")  # TheRock's index kinds (rocm_sdk)
TUNE_DTYPES = ("float16", "bfloat16")  # tune_aotriton's
PROJECTS = ("therock", "pytorch", "aotriton", "composable_kernel")  # pins/<project>.toml


def unknown_arch(name: str, known: Iterable[str]) -> UserError:
    key = name.strip().split(":")[0]
    hint = did_you_mean(key, known, cutoff=0.85)  # gfx names differ by a digit
    return UserError(f"unknown GPU arch '{name}'{hint}; known: {', '.join(known)}")


def arch_data(path: Path = ARCHES_FILE) -> dict[str, Any]:
    """The arch data file: the option check here, scripts/rocmfa/env/archs.py parses it whole."""
    return load_toml(path, "arch data")


def known_arch(text: str) -> str:
    table = arch_data().get("arch")
    if not isinstance(table, dict) or not all(isinstance(t, dict) for t in table.values()):
        return text  # malformed: scripts/rocmfa/env/archs.py says where, in one line, when it loads
    if text.strip().split(":")[0] not in table:
        raise unknown_arch(
            text, [a for a in sorted(table) if table[a].get("vendor", "amd") == "amd"]
        )
    return text


def comma_ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError("expected a comma list of integers") from None
    if not values or any(v <= 0 for v in values):
        raise ValueError("expected positive integers")
    return values


def tune_dtypes(text: str) -> None:
    chosen = [t.strip() for t in text.split(",") if t.strip()]
    if not chosen or set(chosen) - set(TUNE_DTYPES):
        raise UserError(f"--tune-dtypes {text!r}: choose from {', '.join(TUNE_DTYPES)}")


def index_url(text: str) -> object:
    from rocmfa.plumbing.team_index import parse_index  # imported when an --index is given

    return parse_index(text)


def profiles() -> tuple[str, ...]:
    """setup_env --profile's choices: the [profile.NAME] tables of
    scripts/rocmfa/data/env_vars.toml."""
    return tuple(load_toml(DATA_DIR / "env_vars.toml", "variable data").get("profile", {}))


# --- declaring an option -------------------------------------------------------------------


@dataclass(frozen=True)
class Opt:
    """One option, as the metadata of its field (field name: name, default: default)."""

    flags: tuple[str, ...]
    help: str
    default: Any = None
    env: str | None = None
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None
    type: Callable[[str], Any] | None = None
    check: Callable[[str], Any] | None = None
    metavar: str | None = None
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)
    name: str = ""

    @property
    def kind(self) -> str:
        return "switch" if self.default is False else "list" if self.default == () else "value"

    def allowed(self) -> tuple[str, ...] | None:
        if self.choices is None:
            return None
        return tuple(self.choices() if callable(self.choices) else self.choices)

    def convert(self, session: str, text: str, where: str) -> Any:
        """The value of `text` given as `where` (a flag or $VARIABLE); a one-line UserError."""
        allowed = self.allowed()
        if allowed is not None and text not in allowed:
            raise UserError(f"{session}: {where}={text!r}: expected one of {', '.join(allowed)}")
        try:
            if self.check is not None:
                self.check(text)
            return text if self.type is None else self.type(text)
        except UserError as error:
            prefix = f"{where}={text!r}: " if where.startswith("$") else ""
            raise UserError(f"{session}: {prefix}{error}") from None
        except ValueError as error:
            raise UserError(f"{session}: {where} {text!r}: {error}") from None


def opt(*flags: str, help: str, default: Any = None, **more: Any) -> Any:
    """A settings field declaring its option (more: Opt's env, choices, type, check, metavar,
    aliases); typed Any so `x: int | None = opt(...)` type-checks."""
    return dataclasses.field(default=default, metadata={"opt": Opt(flags, help, default, **more)})


def switch(*flags: str, help: str) -> Any:
    return opt(*flags, help=help, default=False)


def many(*flags: str, **more: Any) -> Any:
    """A repeatable option: a tuple of values."""
    return opt(*flags, default=(), **more)


@functools.cache
def options_of(cls: type) -> tuple[Opt, ...]:
    """The class's options in field order, each named for its field."""
    return tuple(
        dataclasses.replace(f.metadata["opt"], name=f.name) for f in dataclasses.fields(cls)
    )


# how every settings class is made; each has a docstring (its --help description; without one,
# dataclass would make one up with inspect.signature, a cost every nox run pays)
settings = dataclass(frozen=True, kw_only=True)

# --- options several sessions read (each declared once, here) ------------------------------


# arch_opt(check=None): doctor and matrix show a bad arch on their screen, then exit non-zero.
arch_opt = partial(
    opt,
    "--arch",
    env=ARCH_ENV,
    check=known_arch,
    help=f"GPU arch, e.g. gfx1151 (default: ${ARCH_ENV}, else rocm-bootstrap's detection: "
    "$ROCM_BOOTSTRAP_FORCE_GFX_ARCH or KFD sysfs)",
)
prefix_opt = partial(
    opt,
    "--prefix",
    env=PREFIX_ENV,
    type=folder,
    help=f"conda env prefix (default: ${PREFIX_ENV}, else the env named by --env-name)",
)
env_name_opt = partial(
    opt,
    "--env-name",
    env=NAME_ENV,
    type=env_name,
    help=f"conda env name (default: ${NAME_ENV}, else 'therock')",
)
workdir_opt = partial(
    opt,
    "--workdir",
    env=WORKDIR_ENV,
    type=folder,
    help=f"checkouts, builds, stamps and downloads (default: ${WORKDIR_ENV}, else ./work)",
)
dry_run_opt = partial(
    switch,
    "--dry-run",
    help="print every command with its working directory and variables; run none",
)
force_opt = partial(
    switch,
    "--force",
    help="redo even when up to date; replace what would otherwise be refused (also a "
    "conflicting arch x AOTriton x torch combination, see nox -s matrix)",
)
json_opt = partial(switch, "--json", help="machine-readable output")


def channel_opt() -> Any:
    return many(
        "--channel",
        metavar="URL",
        help="a mirror of environment.yml's channel (https://, file:// or a folder; NAME=URL "
        "when it has several): lock solves against it, setup_env downloads from it; the lock "
        "keeps the channel's own URLs",
    )


index_opt = partial(
    opt,
    "--index",
    check=index_url,
    metavar="URL",
    help="team wheel index (publish writes this run's wheels and manifest to it, "
    "install_wheels installs a wheel set from it, report reads its manifests' report "
    "summaries): DIR (a shared disk or NFS path), s3://BUCKET/PREFIX?endpoint=URL, "
    "pypi+http(s)://HOST (upload API: pypiserver, devpi); one index per family: "
    "URL/v2/<family>/, or {family} in URL; credentials only from the environment",
)
jobs_opt = partial(
    opt,
    "--jobs",
    "-j",
    type=positive_int,
    metavar="N",
    help="parallel build jobs (default: capped by CPU count and free memory)",
)
cache_opt = partial(
    opt,
    "--cache",
    type=parse_cache,
    metavar="KIND|URL",
    help="compile cache: none, ccache, sccache (local), or a shared sccache at "
    "redis://HOST:PORT, http(s)://HOST/PATH (WebDAV: compiles only; AOTriton's kernels "
    "stay local), s3://BUCKET/PREFIX?endpoint=URL; "
    "add ?read_only=1 to only read; credentials only from the environment",
)
discard_local_edits_opt = partial(
    switch,
    "--discard-local-edits",
    help="let a source checkout be reset to its pin although it has local edits or extra "
    "commits (they are lost; without this flag the session stops and names them)",
)
timeout_min_opt = partial(
    opt,
    "--timeout-min",
    type=minutes,
    metavar="MIN",
    help="AOTRITON_GPU_BUILD_TIMEOUT per kernel, minutes (default 0 = no limit)",
)


@settings
class Compile:
    """The base of the sessions that compile (build_aotriton, tune_aotriton, build_pytorch,
    build_ck): which arch, env and work dir, and how to compile."""

    arch: str | None = arch_opt()
    prefix: str | None = prefix_opt()
    env_name: str | None = env_name_opt()
    workdir: str | None = workdir_opt()
    dry_run: bool = dry_run_opt()
    force: bool = force_opt()
    jobs: int | None = jobs_opt()
    cache: Any = cache_opt()
    discard_local_edits: bool = discard_local_edits_opt()


# --- each session's settings --------------------------------------------------------------


@settings
class LockOptions:
    """Solve environment.yml (channels, or a --channel mirror) into conda-lock.yml."""

    prefix: str | None = prefix_opt()
    env_name: str | None = env_name_opt()
    dry_run: bool = dry_run_opt()
    channel: tuple[str, ...] = channel_opt()


@settings
class SetupEnvOptions:
    """Create or update the shared env from the lock."""

    arch: str | None = arch_opt()
    prefix: str | None = prefix_opt()
    env_name: str | None = env_name_opt()
    workdir: str | None = workdir_opt()
    dry_run: bool = dry_run_opt()
    force: bool = force_opt()
    channel: tuple[str, ...] = channel_opt()
    show: bool = switch(
        "--show", help="list the activation variables set in the env and why, then stop"
    )
    profile: tuple[str, ...] = many(
        "--profile",
        choices=profiles,
        help="add a variable profile (vllm: only the vLLM flags effective for this arch)",
    )
    with_torch: bool = switch(
        "--with-torch",
        help="also install TheRock's prebuilt torch for this arch from the same index",
    )
    rocm_index: str | None = opt(
        "--rocm-index", choices=INDEX_KINDS, help="TheRock index kind (default from pins/rocm.toml)"
    )


@settings
class DoctorOptions:
    """What the report looks at (a bad --arch is shown on its screen, not refused)."""

    arch: str | None = arch_opt(check=None)
    prefix: str | None = prefix_opt()
    env_name: str | None = env_name_opt()
    workdir: str | None = workdir_opt()
    json: bool = json_opt()


@settings
class MatrixOptions:
    """The arch to show (a bad one is shown on the screen, not refused)."""

    arch: str | None = arch_opt(check=None)
    json: bool = json_opt()


@settings
class UpdatePinsOptions:
    """Which pins to resolve and rewrite."""

    workdir: str | None = workdir_opt()
    dry_run: bool = dry_run_opt()
    force: bool = switch(
        "--force", help="an inconsistent torch x AOTriton pin set: warn instead of refusing"
    )
    project: tuple[str, ...] = many(
        "--project",
        choices=PROJECTS,
        help="update only this project's pin (repeatable; default: all)",
    )
    port_patches: bool = switch(
        "--port-patches",
        help="copy a patch set to the new commit when it still applies cleanly there",
    )


@settings
class BuildAotritonOptions(Compile):
    """How AOTriton is had: its release pack, or built from source."""

    clean: bool = switch(
        "--clean", help="start the AOTriton build over (empty its build dir); never the sources"
    )
    timeout_min: float | None = timeout_min_opt()
    no_images: bool = switch(
        "--no-images",
        help="AOTRITON_NOIMAGE_MODE=ON: build only the runtime, keep torch's kernel images",
    )
    from_release: bool = switch(
        "--from-release",
        help="install the prebuilt release runtime + this arch's image pack (minutes, not hours; "
        "the default where nothing of ours changes the arch's kernels)",
    )
    from_source: bool = switch(
        "--from-source",
        help="build from source even where the pinned release pack would do (hours of compiles)",
    )
    with_pyaotriton: bool = switch(
        "--with-pyaotriton",
        help="also build AOTriton's python binding (AOTRITON_NO_PYTHON=OFF, needs pybind11 in "
        "the env); torch never uses it",
    )
    restore: bool = switch(
        "--restore", help="put back the AOTriton files torch shipped (from the backup) and stop"
    )
    workers: str | None = opt(
        "--workers",
        metavar="URL",
        help="compile AOTriton's kernels on a Dask cluster (tcp://HOST:8786) into the --cache "
        "store first (pip install -e '.[cluster]')",
    )
    triton: str | None = opt(
        "--triton",
        choices=TRITONS,
        help="the Triton that compiles the kernels: fork (AOTriton's third_party/triton, the "
        "default) or pypi (the triton==X of pins/kernel_compiler.toml, as kernel_check and "
        "--workers, which implies it)",
    )

    def check(self) -> None:
        if self.from_release and self.from_source:
            raise UserError("--from-release and --from-source exclude each other: drop one")
        if self.triton == "fork" and self.workers:
            raise UserError(
                "--workers compiles with the PyPI Triton of pins/kernel_compiler.toml; a build "
                "with --triton fork would find none of those kernels: drop --triton fork"
            )

    @property
    def kernel_triton(self) -> str:
        """--triton, else pypi with --workers (the cluster compiles with the PyPI Triton), else
        AOTriton's own fork."""
        return self.triton or ("pypi" if self.workers else "fork")


@settings
class KernelCheckOptions:
    """kernel_check needs no env: AOTriton's generator and a pip Triton in their own venv."""

    arch: str | None = arch_opt()
    workdir: str | None = workdir_opt()
    dry_run: bool = dry_run_opt()
    jobs: int | None = jobs_opt()
    cache: Any = cache_opt()
    discard_local_edits: bool = discard_local_edits_opt()
    sample: int | None = opt(
        "--sample",
        type=positive_int,
        metavar="N",
        help="compile N of the generator's jobs (default: one per kernel x warps x stages x "
        "waves_per_eu; fewer keeps every kernel family, more adds evenly spaced jobs)",
    )


@settings
class TuneAotritonOptions(Compile):
    """What Tuner v3.5 tunes (its dispatch filters; none: every task); builds as build_aotriton."""

    clean: bool = switch(
        "--clean", help="start the AOTriton build over (empty its build dir); never the sources"
    )
    timeout_min: float | None = timeout_min_opt()
    tune_head_dims: str | None = opt(
        "--tune-head-dims",
        check=comma_ints,
        metavar="LIST",
        help="head dims to tune, comma list (dispatch --hdim; default all)",
    )
    tune_dtypes: str | None = opt(
        "--tune-dtypes",
        check=tune_dtypes,
        metavar="LIST",
        help="dtypes to tune: float16,bfloat16 (dispatch --dtype; default all)",
    )
    tune_seqlens: str | None = opt(
        "--tune-seqlens",
        check=comma_ints,
        metavar="LIST",
        help="sequence lengths to tune (q and k), comma list (dispatch --seqlen_q/_k; default all)",
    )


@settings
class BuildPytorchOptions(Compile):
    """Which stages of TheRock's PyTorch build run, and how."""

    cache: Any = cache_opt(aliases={"--ccache": "ccache", "--sccache": "sccache"})
    clean: bool = switch(
        "--clean",
        help="start each stage's build over (TheRock --clean: its build dir); never the sources",
    )
    from_stage: str | None = opt(
        "--from",
        choices=STAGES,
        metavar="STAGE",
        help="rerun STAGE and every stage after it: checkout, torch (triton with it), audio, "
        "vision, apex",
    )
    only: str | None = opt(
        "--only",
        choices=STAGES,
        metavar="STAGE",
        help="run just STAGE (the stages it builds on must be done)",
    )
    skip: tuple[str, ...] = many(
        "--skip",
        choices=SKIPPABLE,
        metavar="STAGE",
        help="leave out triton, audio or vision (repeatable); leaving out triton is refused "
        "where torch would lose flash attention",
    )
    with_apex: bool = switch("--with-apex", help="also check out and build apex")
    build_tests: bool = switch(
        "--build-tests", help="also build PyTorch's C++ test binaries (BUILD_TEST=1; default 0)"
    )
    aotriton_prefix: str | None = opt(
        "--aotriton-prefix",
        metavar="DIR",
        help="AOTriton install prefix for torch (default: build_aotriton's install, if any)",
    )

    def check(self) -> None:
        if self.from_stage and self.only:
            raise UserError("--from and --only exclude each other")


@settings
class InstallWheelsOptions:
    """Which wheels go into the env: the last build's, or a team index's set."""

    arch: str | None = arch_opt()
    prefix: str | None = prefix_opt()
    env_name: str | None = env_name_opt()
    workdir: str | None = workdir_opt()
    dry_run: bool = dry_run_opt()
    force: bool = force_opt()
    index: str | None = index_opt()
    no_backend_check: bool = switch(
        "--no-backend-check",
        help="install only; do not run scripts/rocmfa/probes/backend_check.py afterwards",
    )
    wheel_set: str | None = opt(
        "--wheel-set",
        metavar="ID",
        help="with --index: install this wheel set (default: the newest that fits this env)",
    )


@settings
class PublishOptions:
    """publish reads the build's run manifest (work dir), not the env."""

    arch: str | None = arch_opt()
    workdir: str | None = workdir_opt()
    dry_run: bool = dry_run_opt()
    index: str | None = index_opt()
    report: tuple[str, ...] = many(
        "--report",
        metavar="JSON",
        help="a backend_check / validate / bench JSON report of this build to summarize in the "
        "manifest (repeatable)",
    )


@settings
class BuildCkOptions(Compile):
    """What of composable_kernel is built."""

    clean: bool = switch(
        "--clean", help="start the CK build over (empty its build dir); never the sources"
    )
    with_tests: bool = switch(
        "--with-tests", help="also build CK's tests (slow: GPU_TARGETS instead of GPU_ARCHS)"
    )
    with_examples: bool = switch(
        "--with-examples", help="also build CK's examples (slow: GPU_TARGETS instead of GPU_ARCHS)"
    )


@settings
class ProbeOptions:
    """bench's and backend_check's own options go through to their scripts/rocmfa/probes/ script."""

    prefix: str | None = prefix_opt()
    env_name: str | None = env_name_opt()


BenchOptions = BackendCheckOptions = ProbeOptions


@settings
class ValidateOptions:
    """validate's own options go through to scripts/rocmfa/probes/validate.py."""

    prefix: str | None = prefix_opt()
    env_name: str | None = env_name_opt()
    workdir: str | None = workdir_opt()
    upstream: bool = switch(
        "--upstream",
        help="run PyTorch's own SDPA tests (scripts/rocmfa/probes/upstream_sdpa.py, found "
        "through the work dir) instead of our grid",
    )


@settings
class ReportOptions:
    """report's INPUT... (folders or probe JSON files) go through as the rest; with --index
    the family comes from the URL, else from --arch."""

    arch: str | None = arch_opt()
    index: str | None = index_opt()
    baseline: str | None = opt(
        "--baseline",
        metavar="INPUT",
        help="a result set (folder or JSON file) to compare the others with: speedup table and "
        "chart",
    )
    out: str | None = opt(
        "--out",
        metavar="DIR",
        help="where results.html and results.json go (default: ./results-page)",
    )


# Type names the domain modules annotate with: the sessions that read those fields.
AotritonSourceOptions = BuildAotritonOptions | TuneAotritonOptions
EnvChoice = SetupEnvOptions | DoctorOptions | Compile | InstallWheelsOptions
EnvOptions = BenchOptions | BackendCheckOptions | ValidateOptions | LockOptions

# --- the sessions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Session:
    """What the guard and the parser need of one nox session (its nox function, docstring and
    tags are in noxfile.py)."""

    name: str
    options: type
    changes_workdir: bool = False  # holds the work dir's lock
    changes_env: bool = False  # holds the env's lock
    reports_only: bool = False  # never takes a lock (doctor)
    forward: bool = False  # the arguments it does not declare go through to its function
    # a probe is its script, scripts/rocmfa/probes/<name>.py (torch + stdlib only), run in the
    # env's Python (scripts/rocmfa/env/session_env.py) with the arguments it does not declare
    probe: bool = False


def takes_locks(declared: Session, opts: object) -> bool:
    """A session takes its locks unless it only reports (doctor) or only plans (--dry-run)."""
    return not (declared.reports_only or getattr(opts, "dry_run", False))


# W: changes the work dir, WE: the work dir and the env (they hold those locks). publish holds
# the work dir: it reads the run's wheels, a build must not replace them.
W, WE = {"changes_workdir": True}, {"changes_workdir": True, "changes_env": True}
SESSIONS = (
    Session("lock", LockOptions),
    Session("setup_env", SetupEnvOptions, **WE),
    Session("doctor", DoctorOptions, reports_only=True),
    Session("matrix", MatrixOptions),
    Session("update_pins", UpdatePinsOptions, **W),
    Session("build_aotriton", BuildAotritonOptions, **WE),
    Session("tune_aotriton", TuneAotritonOptions, **WE),
    Session("kernel_check", KernelCheckOptions, **W),
    Session("build_pytorch", BuildPytorchOptions, **W),
    Session("install_wheels", InstallWheelsOptions, **WE),
    Session("publish", PublishOptions, **W),
    Session("build_ck", BuildCkOptions, **WE),
    Session("bench", BenchOptions, forward=True, probe=True),
    Session("backend_check", BackendCheckOptions, forward=True, probe=True),
    Session("validate", ValidateOptions, forward=True, probe=True),
    Session("report", ReportOptions, reports_only=True, forward=True),
)
BY_NAME = {s.name: s for s in SESSIONS}

# --- the resolver ----------------------------------------------------------------------------


@functools.cache
def _declared() -> dict[str, bool]:
    """Every session's flags: whether each takes a value (an alias never does)."""
    found = {}
    for session in SESSIONS:
        for o in options_of(session.options):
            found.update({f: o.kind != "switch" for f in o.flags} | dict.fromkeys(o.aliases, False))
    return found


def build_parser(
    name: str, *, for_help: bool = True, posargs: Sequence[str] = (), passed: Iterable[str] = ()
) -> argparse.ArgumentParser:
    """Session `name`'s parser and --help: its own options. To parse (for_help=False): also
    the other sessions' flags found in posargs, hidden, taken and dropped (nox hands all sessions
    of a run the same posargs), a bad argument a one-line UserError, and no choices (checked
    after parsing, as the $ROCMFA_* values are). passed: a probe's own flags."""
    cls = BY_NAME[name].options
    parser = argparse.ArgumentParser(
        prog=f"nox -s {name} --",
        allow_abbrev=False,
        description=f"Options of the {name} session. {cls.__doc__}",
    )
    own = options_of(cls)
    for o in own:
        if o.kind == "switch":
            parser.add_argument(*o.flags, dest=o.name, action="store_true", help=o.help)
        else:
            action = "append" if o.kind == "list" else "store"
            choices = o.allowed() if for_help else None
            parser.add_argument(
                *o.flags,
                dest=o.name,
                action=action,
                choices=choices,
                metavar=o.metavar,
                help=o.help,
            )
        for alias, value in o.aliases.items():
            help = f"the same as {o.flags[0]} {value} (kept for old command lines)"
            parser.add_argument(
                alias, dest=f"{o.name}.alias", action="append_const", const=value, help=help
            )
    if for_help:
        return parser
    taken = {flag for o in own for flag in (*o.flags, *o.aliases)} | set(passed)
    for flag in {a.split("=", 1)[0] for a in posargs} | {a[:2] for a in posargs}:
        if flag in _declared() and flag not in taken:  # another session's: taken, dropped
            takes_value = _declared()[flag]
            action = "store" if takes_value else "store_true"
            parser.add_argument(flag, dest="other", action=action, help=argparse.SUPPRESS)
            taken.add(flag)

    def fail(message: str) -> None:
        raise UserError(f"{name}: {message} (see: nox -s {name} -- --help)")

    parser.error = fail  # type: ignore[method-assign]
    return parser


def _given(name: str, option: Opt, parsed: argparse.Namespace) -> Any:
    """The option's text as given: by its flag, or by one of its aliases (not both)."""
    raw = getattr(parsed, option.name)
    aliased = getattr(parsed, option.name + ".alias", None) or ()
    given = [a for a, v in option.aliases.items() if v in aliased]
    if len(given) > 1:
        raise UserError(f"{name}: {' and '.join(given)} exclude each other")
    if given and raw is not None:
        flag = option.flags[0]
        raise UserError(f"{name}: {flag} replaces {'/'.join(option.aliases)}; pass only {flag}")
    return option.aliases[given[0]] if given else raw


def _resolve(name: str, parsed: argparse.Namespace) -> Any:
    """The settings object: the command line, then $ROCMFA_* (a FromEnv value), then the
    defaults; every value checked."""
    values: dict[str, Any] = {}
    for option in options_of(BY_NAME[name].options):
        raw, flag = _given(name, option, parsed), option.flags[0]
        if option.kind == "list" and raw:
            values[option.name] = tuple(option.convert(name, r, flag) for r in raw)
        elif option.kind == "value" and raw is not None:
            values[option.name] = option.convert(name, raw, flag)
        elif raw:
            values[option.name] = raw
        elif option.env and os.environ.get(option.env):  # settings: the one reader of $ROCMFA_*
            text = os.environ[option.env]
            values[option.name] = FromEnv(option.convert(name, text, f"${option.env}"), option.env)
    resolved = BY_NAME[name].options(**values)
    try:
        getattr(resolved, "check", lambda: None)()
    except UserError as error:
        raise UserError(f"{name}: {error}") from None
    return resolved


def parse(name: str, posargs: Sequence[str]) -> Any:
    """Session `name`'s settings from posargs (other sessions' options accepted and dropped; a
    bad option or value: one-line UserError; --help exits 0)."""
    parser = build_parser(name, for_help=False, posargs=posargs)
    return _resolve(name, parser.parse_args(posargs))


def parse_known(
    name: str, posargs: Sequence[str], passed: Iterable[str] = ()
) -> tuple[Any, list[str]]:
    """For the sessions that forward: (their settings, the rest for their function). passed:
    the flags the function itself takes (a probe's own), kept in the rest even where another
    session declares the same flag (bench's --json PATH is not doctor's --json)."""
    parser = build_parser(name, for_help=False, posargs=posargs, passed=passed)
    parsed, rest = parser.parse_known_args(posargs)
    return _resolve(name, parsed), rest


def effective(opts: Any) -> str:
    """The settings a session runs with, other than defaults, and where each came from
    (cibuildwheel prints its effective options first): `--arch gfx1151 ($ROCMFA_ARCH), -j 4`."""
    shown = []
    for option in options_of(type(opts)):
        value = getattr(opts, option.name)
        where = f" (${value.variable})" if isinstance(value, FromEnv) else ""
        if value == option.default:
            continue
        if option.kind == "switch":
            shown.append(option.flags[0])
            continue
        values = value if isinstance(value, tuple) else (value,)
        text = ",".join(v.describe() if hasattr(v, "describe") else str(v) for v in values)
        shown.append(f"{option.flags[0]} {text}{where}")
    return ", ".join(shown) or "defaults"
