"""Every nox session's options, declared once.

A session's options are its class below (one opt() field per option; shared options live in a
base class the sessions inherit); what a session changes is its Session line in SESSIONS.
noxfile.py holds each session's @nox.session function (docstring, tags, the domain function it
calls), scripts/env/session_guard.py reads what each one changes, and the argparse parser and
--help are generated from the classes (scripts/plumbing/option_fields.py).

Adding an option - one field, in the class of the session that reads it (or a base class
shared by the sessions that read it):

    class BuildCkOptions(CompileOptions):
        with_tests: bool = opt("--with-tests", help="also build CK's tests")

  The field's type says what the flag takes: bool -> a switch (default False); tuple[...] ->
  repeatable (default ()); anything else -> one value (default None unless default= says).
  type= turns the text into the typed value (int, a function, or "module:function"); check=
  only checks it; choices= names the domain constant ("scripts.builds.build_pytorch:STAGES":
  imported only when that session runs or shows --help), never a copy; env= is the $ROCMFA_*
  variable that is the default (checked at parse time with the same type/check/choices; the
  field stays None so the resolver can say where the value came from); aliases= maps an old
  flag to a value. Checks across fields go in the class's check(self). A session that needs
  an option of a shared class with one change (an alias, no check) takes
  `like(ThatClass, "name", aliases=...)`: still one declaration. A build session prints its
  effective options (option_fields.effective) before its first line.
  An old-style row `_opt("--x", sessions=(...), action=..., type=T, **kw)` + field `x: X = D`
  becomes `x: X = opt("--x", type=T, **kw)` in the class (drop sessions=, action= and the
  bool/tuple defaults; keep default= for other defaults).

Adding a session - its @nox.session function in noxfile.py (`_run(session, module.function)`),
one Session("name", NameOptions, changes=(W, E)) line in SESSIONS below (W/E: it changes the
work dir / the env; the guard takes their locks; a class with dry_run makes it dry-runnable),
its function in a module named for it taking the options object, and its row in README's
session table.

Nox hands the same posargs to every session of a run (`nox -s a b -- --arch gfx1100`), so a
session accepts and drops options declared by other sessions; options nobody declares are an
error. A session's --help lists only its own options and needs no env.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from scripts.plumbing import option_fields
from scripts.plumbing.errors import UserError
from scripts.plumbing.option_fields import SessionOptions, like, opt
from scripts.plumbing.paths import WORKDIR_ENV
from scripts.plumbing.pin_files import PROJECTS

ARCH_ENV = "ROCMFA_ARCH"
PREFIX_ENV = "ROCMFA_ENV_PREFIX"
NAME_ENV = "ROCMFA_ENV_NAME"

# --- values checked here (the domain's own checks are named as "module:function") -------------


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


# --- option groups several sessions share ------------------------------------------------------


class ArchOption(SessionOptions):
    arch: str | None = opt(
        "--arch",
        env=ARCH_ENV,
        check="scripts.env.archs:get_arch",
        help=f"GPU arch, e.g. gfx1151 (default: ${ARCH_ENV}, else rocm-bootstrap's detection: "
        "$ROCM_BOOTSTRAP_FORCE_GFX_ARCH or KFD sysfs)",
    )


class ReportedArchOption(SessionOptions):
    """doctor and matrix show a bad arch on their screen, then exit non-zero: not checked here."""

    arch: str | None = like(ArchOption, "arch", check=None)


class EnvOptions(SessionOptions):
    """Which shared env."""

    prefix: str | None = opt(
        "--prefix",
        env=PREFIX_ENV,
        type=folder,
        help=f"conda env prefix (default: ${PREFIX_ENV}, else the env named by --env-name)",
    )
    env_name: str | None = opt(
        "--env-name",
        env=NAME_ENV,
        type=env_name,
        help=f"conda env name (default: ${NAME_ENV}, else 'therock')",
    )


class WorkdirOption(SessionOptions):
    workdir: str | None = opt(
        "--workdir",
        env=WORKDIR_ENV,
        type=folder,
        help=f"checkouts, builds, stamps and downloads (default: ${WORKDIR_ENV}, else ./work)",
    )


class EnvChoice(ArchOption, EnvOptions, WorkdirOption):
    """Which GPU arch, shared env and work dir: the sessions that set up, build or report."""


class DryRunOption(SessionOptions):
    dry_run: bool = opt(
        "--dry-run", help="print every command with its working directory and variables; run none"
    )


class ForceOption(SessionOptions):
    force: bool = opt(
        "--force",
        help="redo even when up to date; replace what would otherwise be refused (also a "
        "conflicting arch x AOTriton x torch combination, see nox -s matrix)",
    )


class JsonOption(SessionOptions):
    json: bool = opt("--json", help="machine-readable output")


class ChannelOption(SessionOptions):
    channel: tuple[str, ...] = opt(
        "--channel",
        metavar="URL",
        help="a mirror of environment.yml's channel (https://, file:// or a folder; NAME=URL "
        "when it has several): lock solves against it, setup_env downloads from it; the lock "
        "keeps the channel's own URLs",
    )


class IndexOption(SessionOptions):
    index: str | None = opt(
        "--index",
        check="scripts.plumbing.team_index:parse_index",
        metavar="URL",
        help="team wheel index (publish writes this run's wheels and manifest to it, "
        "install_wheels installs a wheel set from it, report reads its manifests' report "
        "summaries): DIR (a shared disk or NFS path), s3://BUCKET/PREFIX?endpoint=URL, "
        "pypi+http(s)://HOST (upload API: pypiserver, devpi); one index per family: "
        "URL/v2/<family>/, or {family} in URL; credentials only from the environment",
    )


class BuildOptions(EnvChoice, DryRunOption, ForceOption):
    """What every build session takes."""


class CompileFields(SessionOptions):
    """What a compile takes: jobs, compile cache, checkouts it updates."""

    jobs: int | None = opt(
        "--jobs",
        "-j",
        type=positive_int,
        metavar="N",
        help="parallel build jobs (default: capped by CPU count and free memory)",
    )
    cache: Any = opt(
        "--cache",
        type="scripts.builds.compile_cache:parse_cache",
        metavar="KIND|URL",
        help="compile cache: none, ccache, sccache (local), or a shared sccache at "
        "redis://HOST:PORT, http(s)://HOST/PATH (WebDAV: compiles only; AOTriton's kernels "
        "stay local), s3://BUCKET/PREFIX?endpoint=URL; "
        "add ?read_only=1 to only read; credentials only from the environment",
    )
    discard_local_edits: bool = opt(
        "--discard-local-edits",
        help="let a source checkout be reset to its pin although it has local edits or extra "
        "commits (they are lost; without this flag the session stops and names them)",
    )


class CompileOptions(BuildOptions, CompileFields):
    """The build sessions that compile."""


# --- each session's options --------------------------------------------------------------------


class LockOptions(EnvOptions, DryRunOption, ChannelOption):
    pass


class SetupEnvOptions(EnvChoice, DryRunOption, ForceOption, ChannelOption):
    show: bool = opt(
        "--show", help="list the activation variables set in the env and why, then stop"
    )
    profile: tuple[str, ...] = opt(
        "--profile",
        choices="scripts.env.activation:profiles",
        help="add a variable profile (vllm: only the vLLM flags effective for this arch)",
    )
    with_torch: bool = opt(
        "--with-torch",
        help="also install TheRock's prebuilt torch for this arch from the same index",
    )
    rocm_index: str | None = opt(
        "--rocm-index",
        choices="scripts.env.rocm_sdk:INDEX_KINDS",
        help="TheRock index kind (default from pins/rocm.toml)",
    )


class DoctorOptions(ReportedArchOption, EnvChoice, JsonOption):
    pass


class MatrixOptions(ReportedArchOption, JsonOption):
    pass


class UpdatePinsOptions(WorkdirOption, DryRunOption):
    force: bool = opt(
        "--force", help="an inconsistent torch x AOTriton pin set: warn instead of refusing"
    )
    project: tuple[str, ...] = opt(
        "--project",
        choices=PROJECTS,
        help="update only this project's pin (repeatable; default: all)",
    )
    port_patches: bool = opt(
        "--port-patches",
        help="copy a patch set to the new commit when it still applies cleanly there",
    )


class AotritonSourceOptions(CompileOptions):
    """How AOTriton is built from source: build_aotriton and tune_aotriton's builds."""

    clean: bool = opt(
        "--clean", help="start the AOTriton build over (empty its build dir); never the sources"
    )
    timeout_min: float | None = opt(
        "--timeout-min",
        type=minutes,
        metavar="MIN",
        help="AOTRITON_GPU_BUILD_TIMEOUT per kernel, minutes (default 0 = no limit)",
    )


class BuildAotritonOptions(AotritonSourceOptions):
    no_images: bool = opt(
        "--no-images",
        help="AOTRITON_NOIMAGE_MODE=ON: build only the runtime, keep torch's kernel images",
    )
    from_release: bool = opt(
        "--from-release",
        help="install the prebuilt release runtime + this arch's image pack (minutes, not hours; "
        "the default where nothing of ours changes the arch's kernels)",
    )
    from_source: bool = opt(
        "--from-source",
        help="build from source even where the pinned release pack would do (hours of compiles)",
    )
    with_pyaotriton: bool = opt(
        "--with-pyaotriton",
        help="also build AOTriton's python binding (AOTRITON_NO_PYTHON=OFF, needs pybind11 in "
        "the env); torch never uses it",
    )
    restore: bool = opt(
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
        choices="scripts.builds.kernel_build:TRITONS",
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


class KernelCheckOptions(ArchOption, WorkdirOption, DryRunOption, CompileFields):
    """kernel_check needs no env: AOTriton's generator and a pip Triton in their own venv."""

    sample: int | None = opt(
        "--sample",
        type=positive_int,
        metavar="N",
        help="compile N of the generator's jobs (default: one per kernel x warps x stages x "
        "waves_per_eu; fewer keeps every kernel family, more adds evenly spaced jobs)",
    )


class TuneAotritonOptions(AotritonSourceOptions):
    tune_head_dims: str | None = opt(
        "--tune-head-dims",
        check="scripts.builds.tune_aotriton:check_head_dims",
        metavar="LIST",
        help="head dims to tune, comma list (default 64,128)",
    )
    tune_dtypes: str | None = opt(
        "--tune-dtypes",
        check="scripts.builds.tune_aotriton:check_dtypes",
        metavar="LIST",
        help="dtypes to tune: float16,bfloat16 (default both)",
    )
    tune_seqlens: str | None = opt(
        "--tune-seqlens",
        check="scripts.builds.tune_aotriton:check_seqlens",
        metavar="LIST",
        help="sequence lengths to tune (q and k), comma list (default 16..4096, powers of 2)",
    )


class BuildPytorchOptions(CompileOptions):
    cache: Any = like(
        CompileFields, "cache", aliases={"--ccache": "ccache", "--sccache": "sccache"}
    )
    clean: bool = opt(
        "--clean",
        help="start each stage's build over (TheRock --clean: its build dir); never the sources",
    )
    from_stage: str | None = opt(
        "--from",
        choices="scripts.builds.build_pytorch:STAGES",
        metavar="STAGE",
        help="rerun STAGE and every stage after it: checkout, torch (triton with it), audio, "
        "vision, apex",
    )
    only: str | None = opt(
        "--only",
        choices="scripts.builds.build_pytorch:STAGES",
        metavar="STAGE",
        help="run just STAGE (the stages it builds on must be done)",
    )
    skip: tuple[str, ...] = opt(
        "--skip",
        choices="scripts.builds.build_pytorch:SKIPPABLE",
        metavar="STAGE",
        help="leave out triton, audio or vision (repeatable); leaving out triton is refused "
        "where torch would lose flash attention",
    )
    with_apex: bool = opt("--with-apex", help="also check out and build apex")
    build_tests: bool = opt(
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


class InstallWheelsOptions(BuildOptions, IndexOption):
    no_backend_check: bool = opt(
        "--no-backend-check",
        help="install only; do not run scripts/probes/backend_check.py afterwards",
    )
    wheel_set: str | None = opt(
        "--wheel-set",
        metavar="ID",
        help="with --index: install this wheel set (default: the newest that fits this env)",
    )


class PublishOptions(ArchOption, WorkdirOption, DryRunOption, IndexOption):
    """publish reads the build's run manifest (work dir), not the env."""

    report: tuple[str, ...] = opt(
        "--report",
        metavar="JSON",
        help="a backend_check / validate / bench JSON report of this build to summarize in the "
        "manifest (repeatable)",
    )


class BuildCkOptions(CompileOptions):
    clean: bool = opt(
        "--clean", help="start the CK build over (empty its build dir); never the sources"
    )
    with_tests: bool = opt(
        "--with-tests", help="also build CK's tests (slow: GPU_TARGETS instead of GPU_ARCHS)"
    )
    with_examples: bool = opt(
        "--with-examples", help="also build CK's examples (slow: GPU_TARGETS instead of GPU_ARCHS)"
    )


class BenchOptions(EnvOptions):
    """bench's own options go through to scripts/probes/bench.py."""


class BackendCheckOptions(EnvOptions):
    """backend_check's own options go through to scripts/probes/backend_check.py."""


class ValidateOptions(EnvOptions, WorkdirOption):
    """validate's own options go through to scripts/probes/validate.py."""

    upstream: bool = opt(
        "--upstream",
        help="run PyTorch's own SDPA tests (scripts/probes/upstream_sdpa.py, found through the "
        "work dir) instead of our grid",
    )


class ReportOptions(ArchOption, IndexOption):
    """report's INPUT... (folders or probe JSON files) go through as the rest; with --index
    the family comes from the URL, else from --arch."""

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


# --- the sessions ------------------------------------------------------------------------------


class Session:
    """What the guard and the parser need of one nox session (its nox function, docstring and
    tags are in noxfile.py). A plain class (a dataclass costs every nox run ~2 ms to create)."""

    def __init__(
        self,
        name: str,
        options: type[SessionOptions],
        *,
        changes: tuple[str, ...] = (),  # "workdir": holds its lock; "env": its lock + recovery
        reports_only: bool = False,  # never takes a lock nor recovers (doctor)
        forward: bool = False,  # the arguments it does not declare go through to its function
        # a probe is its script, scripts/probes/<name>.py (torch + stdlib only), run in the
        # env's Python (scripts/env/in_env.py) with the arguments it does not declare
        probe: bool = False,
    ) -> None:
        self.name, self.options, self.changes = name, options, changes
        self.reports_only, self.forward, self.probe = reports_only, forward or probe, probe

    def __repr__(self) -> str:
        return f"Session({self.name!r})"

    @property
    def changes_workdir(self) -> bool:
        return "workdir" in self.changes

    @property
    def changes_env(self) -> bool:
        return "env" in self.changes

    @property
    def dry_runnable(self) -> bool:
        return "dry_run" in self.options.field_names()


W, E = "workdir", "env"  # what a session changes: it holds that lock (see Session)
# publish holds the work dir: it reads the run's wheels, a build must not replace them
SESSIONS = (
    Session("lock", LockOptions),
    Session("setup_env", SetupEnvOptions, changes=(W, E)),
    Session("doctor", DoctorOptions, reports_only=True),
    Session("matrix", MatrixOptions),
    Session("update_pins", UpdatePinsOptions, changes=(W,)),
    Session("build_aotriton", BuildAotritonOptions, changes=(W, E)),
    Session("tune_aotriton", TuneAotritonOptions, changes=(W, E)),
    Session("kernel_check", KernelCheckOptions, changes=(W,)),
    Session("build_pytorch", BuildPytorchOptions, changes=(W,)),
    Session("install_wheels", InstallWheelsOptions, changes=(W, E)),
    Session("publish", PublishOptions, changes=(W,)),
    Session("build_ck", BuildCkOptions, changes=(W, E)),
    Session("bench", BenchOptions, probe=True),
    Session("backend_check", BackendCheckOptions, probe=True),
    Session("validate", ValidateOptions, probe=True),
    Session("report", ReportOptions, reports_only=True, forward=True),
)
BY_NAME = {s.name: s for s in SESSIONS}


def _classes() -> tuple[type[SessionOptions], ...]:
    return tuple(s.options for s in SESSIONS)


def build_parser(name: str) -> Any:
    return option_fields.build_parser(name, BY_NAME[name].options)


def parse(name: str, posargs: Sequence[str]) -> Any:
    """Session `name`'s options object from posargs (other sessions' options accepted and
    dropped; a bad option or value: one-line UserError; --help exits 0)."""
    return option_fields.parse(name, BY_NAME[name].options, posargs, _classes())


def parse_known(
    name: str, posargs: Sequence[str], passed: Iterable[str] = ()
) -> tuple[Any, list[str]]:
    """For the sessions that forward: (their options object, the rest for their function).
    passed: the flags the function itself takes (a probe's own), kept in the rest even where
    another session declares the same flag (bench's --json PATH is not doctor's --json)."""
    return option_fields.parse_known(name, BY_NAME[name].options, posargs, _classes(), passed)
