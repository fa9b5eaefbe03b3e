"""Every session's settings: a frozen dataclass that parse() fills from flags, else $ROCMFA_*,
else defaults. A new option: an OPTIONS entry; a session: a class, a SESSIONS row, a nox session.
Also where things are: the repository's data and pins, and the work directory's folders."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmfa.plumbing.errors import UserError, did_you_mean, load_toml

REPO_ROOT = Path(__file__).resolve().parents[3]
DATA_DIR = REPO_ROOT / "scripts" / "rocmfa" / "data"
PINS_DIR = REPO_ROOT / "pins"
WORKDIR_ENV = "ROCMFA_WORKDIR"


def workdir(requested: str | os.PathLike[str] | None) -> Path:
    """The session's --workdir (or $ROCMFA_WORKDIR, resolved with its settings), else ./work."""
    return Path(requested or REPO_ROOT / "work").expanduser().resolve()


def src_dir(work: Path, project: str) -> Path:
    return work / "src" / project


def build_dir(work: Path, project: str) -> Path:
    return work / "build" / project


def stamp_path(work: Path, name: str) -> Path:  # doctor lists them as 'what is built'
    return work / "stamps" / f"{name}.json"


def downloads_dir(work: Path) -> Path:
    return work / "downloads"


def cache_dir(work: Path) -> Path:
    return work / ".cache"


ARCH_ENV = "ROCMFA_ARCH"
PREFIX_ENV = "ROCMFA_ENV_PREFIX"
NAME_ENV = "ROCMFA_ENV_NAME"
ARCHES_FILE = DATA_DIR / "arches.toml"
STAGES = ("checkout", "torch", "audio", "vision", "apex")  # build_pytorch's, in order
SKIPPABLE = ("triton", "audio", "vision")  # --skip's choices (triton: the torch call's)
TRITONS = ("fork", "pypi")  # what compiles AOTriton's kernels (kernel_build)
INDEX_KINDS = ("multi-arch", "legacy")  # TheRock's index kinds (rocm_sdk)
TUNE_DTYPES = ("float16", "bfloat16")  # tune_aotriton's
PROJECTS = ("therock", "pytorch", "aotriton", "composable_kernel")  # pins/<project>.toml


class FromEnv(str):
    """A value taken from its $ROCMFA_* variable, naming it (`arch gfx1100 ($ROCMFA_ARCH)`)."""

    def __new__(cls, value: str, variable: str = "") -> FromEnv:  # "": unpickling sets it
        made = super().__new__(cls, value)
        made.variable = variable
        return made


def origin(value: object, flag: str) -> str:
    """Where a setting came from: its $ROCMFA_* variable, else its flag."""
    return f"${value.variable}" if isinstance(value, FromEnv) else flag


@dataclass(frozen=True)
class Environment:
    """What only a $ROCMFA_<FIELD> variable sets (no flag); unset or empty is None."""

    pins_dir: str | None = None  # pins/ elsewhere
    pytorch_line: str | None = None  # release (default) or nightly (pin_files.LINES)
    conda_cache: str | None = None  # py-rattler's package cache
    ck_source: str | None = None  # sources/pins.py
    patches_dir: str | None = None  # sources/checkouts.py
    tuning_dir: str | None = None  # sources/checkouts.py
    aotriton_base_url: str | None = None  # builds/aotriton_release.py
    kernel_python: str | None = None  # builds/kernel_check.py, kernel_build.py


def environment(environ: Mapping[str, str] | None = None) -> Environment:
    environ = os.environ if environ is None else environ
    names = (f.name for f in dataclasses.fields(Environment))
    return Environment(**{n: environ.get(f"ROCMFA_{n.upper()}") or None for n in names})


# --- checks: each takes the text and returns the value (ValueError or UserError: one line) ---
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
    if (number := int(text)) < 1:
        raise ValueError("expected a number of at least 1")
    return number


def minutes(text: str) -> float:
    if (number := float(text)) < 0:
        raise ValueError("expected minutes >= 0 (0 = no limit)")
    return number


def known_arch(text: str) -> str:
    """text, when the arch data names its arch (a gcnArchName may add ':sramecc+:xnack-')."""
    table = load_toml(ARCHES_FILE, "arch data").get("arch")
    if not isinstance(table, dict) or not all(isinstance(t, dict) for t in table.values()):
        return text  # malformed: scripts/rocmfa/env/archs.py says where, in one line, when it loads
    if (key := text.strip().split(":")[0]) not in table:
        amd = [a for a in sorted(table) if table[a].get("vendor", "amd") == "amd"]
        hint = did_you_mean(key, amd, cutoff=0.85)  # gfx names: a digit
        raise UserError(f"unknown GPU arch '{text}'{hint}; known: {', '.join(amd)}")
    return text


def comma_ints(text: str) -> str:
    values = [v.strip() for v in text.split(",") if v.strip()]
    if values and all(v.isdigit() and int(v) > 0 for v in values):
        return text
    raise ValueError("expected a comma list of integers, each at least 1")


def tune_dtypes(text: str) -> str:
    if {t.strip() for t in text.split(",")} - {""} <= set(TUNE_DTYPES) and text.strip(", "):
        return text
    raise ValueError(f"choose from {', '.join(TUNE_DTYPES)}")


def index_url(text: str) -> str:
    from rocmfa.plumbing.team_index import parse_index  # imported when an --index is given

    parse_index(text)
    return text


# --cache (builds/compile_cache.py): none | ccache | sccache | /SHARED/DIR | redis(s)://HOST:PORT
# [/DB] | s3://BUCKET/PREFIX[?endpoint=URL&region=R]; on any URL prefix=TEXT, read_only=1.
TOOLS = ("none", "ccache", "sccache")
FORMS = "none, ccache, sccache, a directory (/PATH), redis://HOST:PORT or s3://BUCKET/PREFIX"
QUERY_KEYS = {"prefix", "read_only", "endpoint", "region"}
FLAGS = {"1": True, "true": True, "0": False, "false": False}  # read_only=
CREDENTIAL_VARS = {
    "redis": "SCCACHE_REDIS_USERNAME/SCCACHE_REDIS_PASSWORD",
    "s3": "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
}


@dataclass(frozen=True)
class CacheSpec:
    """What --cache asked for. Holds no credentials (URLs with them are refused)."""

    tool: str  # none | ccache | sccache
    backend: str = "local"  # local | dir | redis | s3
    endpoint: str | None = None
    bucket: str | None = None
    prefix: str = ""
    region: str | None = None
    redis_db: str | None = None
    read_only: bool = False

    @property
    def remote(self) -> bool:
        return self.backend != "local"

    @property
    def place(self) -> str:  # where a shared store is, in words: 'directory /nfs/x', ...
        if self.backend == "s3":
            return f"s3 s3://{self.bucket}" + (f" at {self.endpoint}" if self.endpoint else "")
        return f"{'directory' if self.backend == 'dir' else self.backend} {self.endpoint}"

    def describe(self) -> str:
        if not self.remote:
            return self.tool
        return f"sccache on {self.place}" + (" (read-only)" if self.read_only else "")


def as_spec(value: CacheSpec | str | None) -> CacheSpec | None:
    """A --cache value already parsed with the options, or its text (tests, Dask workers)."""
    return value if value is None or isinstance(value, CacheSpec) else parse_cache(value)


def parse_cache(value: str | None) -> CacheSpec | None:
    """--cache VALUE -> CacheSpec; None when --cache was not given (each build's old default)."""
    text = (value or "").strip()
    if value is None or text in TOOLS:
        return None if value is None else CacheSpec(tool=text)
    if text.startswith(("/", "./", "../", "~")):  # a shared directory (an NFS path)
        return CacheSpec("sccache", "dir", os.path.abspath(os.path.expanduser(text)))
    parts = urllib.parse.urlsplit(text)
    backend = {"rediss": "redis"}.get(parts.scheme, parts.scheme)
    if backend not in CREDENTIAL_VARS or not parts.netloc:
        raise UserError(f"--cache {value!r}: expected {FORMS}")
    if parts.username or parts.password:
        raise UserError(
            "--cache: credentials do not belong in the URL (they would be printed and "
            f"recorded); set {CREDENTIAL_VARS[backend]} in the environment instead"
        )
    opt = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    if unknown := ", ".join(sorted(set(opt) - QUERY_KEYS)):
        known = ", ".join(sorted(QUERY_KEYS))
        raise UserError(f"--cache: unknown URL parameter(s) {unknown} (known: {known})")
    if (read_only := FLAGS.get(opt.get("read_only", "0").lower())) is None:
        raise UserError(f"--cache: read_only={opt['read_only']!r} must be 1/0 (true/false)")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise UserError(f"--cache {value!r}: bad port") from None
    prefix = opt.get("prefix", "").strip("/")
    if backend == "redis":
        if {"endpoint", "region"} & set(opt):
            raise UserError("--cache: endpoint= and region= are for s3:// URLs only")
        if (db := parts.path.strip("/")) and not db.isdigit():
            raise UserError(f"--cache {value!r}: redis path must be a database number")
        base = f"{parts.scheme}://{parts.netloc}"
        return CacheSpec("sccache", backend, base, None, prefix, None, db or None, read_only)
    endpoint = opt.get("endpoint")
    if endpoint and urllib.parse.urlsplit(endpoint).scheme not in ("http", "https"):
        raise UserError(f"--cache: s3 endpoint={endpoint!r} must be an http(s):// URL")
    key_prefix = "/".join(p for p in (parts.path.strip("/"), prefix) if p)
    region = opt.get("region")
    return CacheSpec("sccache", "s3", endpoint, parts.netloc, key_prefix, region, None, read_only)


def profiles() -> tuple[str, ...]:
    """setup_env --profile's choices: the [profile.NAME] tables of data/env_vars.toml."""
    return tuple(load_toml(DATA_DIR / "env_vars.toml", "variable data").get("profile", {}))


# --- the options: each declared once, by its field name (NAME:VARIANT: a session's own help) --
@dataclass(frozen=True)
class Opt:
    """One option; kind: switch (default False), list (()) or value (None); type: the check."""

    flags: tuple[str, ...]
    help: str
    kind: str = "value"
    env: str | None = None
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    name: str = ""

    def allowed(self) -> tuple[str, ...] | None:
        choices = self.choices() if callable(self.choices) else self.choices
        return None if choices is None else tuple(choices)

    def convert(self, session: str, text: str, where: str) -> Any:
        """The value of `text` given as `where` (a flag or $VARIABLE); a one-line UserError."""
        if (allowed := self.allowed()) is not None and text not in allowed:
            raise UserError(f"{session}: {where}={text!r}: expected one of {', '.join(allowed)}")
        try:
            return text if self.type is None else self.type(text)
        except UserError as error:
            prefix = f"{where}={text!r}: " if where.startswith("$") else ""
            raise UserError(f"{session}: {prefix}{error}") from None
        except ValueError as error:
            raise UserError(f"{session}: {where} {text!r}: {error}") from None


def switch(flag: str, help: str) -> Opt:
    return Opt((flag,), help, "switch")


def many(flag: str, help: str, **more: Any) -> Opt:  # repeatable: a tuple of values
    return Opt((flag,), help, "list", **more)


def value(flags: str, help: str, **more: Any) -> Opt:
    return Opt(tuple(flags.split()), help, **more)


URLS = "s3://BUCKET/PREFIX?endpoint=URL"
HELP = {  # those too long for a line of OPTIONS
    "arch": f"GPU arch, e.g. gfx1151 (default: ${ARCH_ENV}, else rocm-bootstrap's detection)",
    "prefix": f"conda env prefix (default: ${PREFIX_ENV})",
    "env_name": f"conda env name (default: ${NAME_ENV}, therock)",
    "workdir": f"checkouts, builds, downloads (default: ${WORKDIR_ENV}, ./work)",
    "cache": f"compile cache: none|ccache|sccache|/DIR|redis://HOST:PORT|{URLS}",
    "index": f"team wheel index: DIR|{URLS}|pypi+http(s)://HOST (v2/<family>/ or {{family}} in it)",
}
STAGE = {"choices": STAGES, "metavar": "STAGE"}
N = {"type": positive_int, "metavar": "N"}
LIST = {"type": comma_ints, "metavar": "LIST"}
OPTIONS = {
    "arch": value("--arch", HELP["arch"], env=ARCH_ENV, type=known_arch),
    "arch:shown": value("--arch", HELP["arch"], env=ARCH_ENV),  # doctor, matrix: shown, not refused
    "prefix": value("--prefix", HELP["prefix"], env=PREFIX_ENV, type=folder),
    "env_name": value("--env-name", HELP["env_name"], env=NAME_ENV, type=env_name),
    "workdir": value("--workdir", HELP["workdir"], env=WORKDIR_ENV, type=folder),
    "dry_run": switch("--dry-run", "print each command, its directory and variables; run none"),
    "force": switch("--force", "redo what is up to date; replace what would be refused"),
    "force:pins": switch("--force", "an inconsistent torch x AOTriton pin set: warn, not refuse"),
    "json": switch("--json", "machine-readable output"),
    "jobs": value("--jobs -j", "parallel jobs (default: by CPUs and memory)", **N),
    "cache": value("--cache", HELP["cache"], type=parse_cache, metavar="KIND|URL"),
    "discard_local_edits": switch("--discard-local-edits", "reset an edited checkout to its pin"),
    "channel": many("--channel", "a mirror of a channel (or NAME=URL)", metavar="URL"),
    "index": value("--index", HELP["index"], type=index_url, metavar="URL"),
    # setup_env
    "show": switch("--show", "list the env's activation variables and why, then stop"),
    "profile": many("--profile", "add a variable profile (vllm: its flags)", choices=profiles),
    "with_torch": switch("--with-torch", "also install TheRock's prebuilt torch for this arch"),
    "rocm_index": value("--rocm-index", "TheRock index kind (default: pins)", choices=INDEX_KINDS),
    # update_pins
    "project": many("--project", "update only this project's pin", choices=PROJECTS),
    "port_patches": switch("--port-patches", "copy a patch set that still applies to the new pin"),
    # build_aotriton, tune_aotriton, kernel_check
    "clean": switch("--clean", "empty the AOTriton build dir first (never the sources)"),
    "timeout_min": value("--timeout-min", "GPU build timeout", type=minutes, metavar="MIN"),
    "no_images": switch("--no-images", "AOTRITON_NOIMAGE_MODE=ON: keep torch's kernel images"),
    "from_release": switch("--from-release", "install the release runtime and image pack"),
    "from_source": switch("--from-source", "build from source even where a release pack would do"),
    "with_pyaotriton": switch("--with-pyaotriton", "also build AOTriton's python binding"),
    "restore": switch("--restore", "put back the AOTriton files torch shipped, then stop"),
    "workers": value("--workers", "compile on a Dask cluster (tcp://HOST:8786)", metavar="URL"),
    "triton": value("--triton", "what compiles the kernels (default: fork)", choices=TRITONS),
    "sample": value("--sample", "compile N of the generator's jobs (default: all)", **N),
    # tune_aotriton: Tuner v3.5's dispatch filters (default: every task)
    "tune_head_dims": value("--tune-head-dims", "head dims, e.g. 64,128 (--hdim)", **LIST),
    "tune_dtypes": value("--tune-dtypes", "float16,bfloat16", type=tune_dtypes, metavar="LIST"),
    "tune_seqlens": value("--tune-seqlens", "sequence lengths, e.g. 1024,4096", **LIST),
    # build_pytorch
    "clean:pytorch": switch("--clean", "start each stage's build over (TheRock --clean)"),
    "from_stage": value("--from", f"rerun STAGE ({', '.join(STAGES)}) and those after", **STAGE),
    "only": value("--only", "run just STAGE", **STAGE),
    "skip": many("--skip", "leave out triton, audio or vision", choices=SKIPPABLE, metavar="STAGE"),
    "with_apex": switch("--with-apex", "also check out and build apex"),
    "build_tests": switch("--build-tests", "also build PyTorch's C++ tests (BUILD_TEST=1)"),
    "aotriton_prefix": value("--aotriton-prefix", "AOTriton for torch", metavar="DIR"),
    # install_wheels, publish, report
    "no_backend_check": switch("--no-backend-check", "install only; no backend_check"),
    "wheel_set": value("--wheel-set", "with --index: this set, not the newest", metavar="ID"),
    "report": many("--report", "a probe's JSON for the manifest", metavar="JSON"),
    "baseline": value("--baseline", "a result set to compare the others with", metavar="INPUT"),
    "out": value("--out", "where the page goes (default: ./results-page)", metavar="DIR"),
    # build_ck
    "clean:ck": switch("--clean", "empty the CK build dir first (never the sources)"),
    "with_tests": switch("--with-tests", "also build CK's tests (slow: GPU_TARGETS)"),
    "with_examples": switch("--with-examples", "also build CK's examples (slow: GPU_TARGETS)"),
    # validate
    "upstream": switch("--upstream", "run PyTorch's own SDPA tests (probes/upstream_sdpa.py)"),
}
DEFAULTS = {"switch": False, "list": (), "value": None}
TAKES_VALUE = {flag: o.kind != "switch" for o in OPTIONS.values() for flag in o.flags}  # by flag


def settings(*groups: str) -> Callable[[type], type]:
    """A frozen dataclass, one field per OPTIONS key named in groups."""

    def make(cls: type) -> type:
        names = " ".join(groups).split()
        opts = [dataclasses.replace(OPTIONS[n], name=n.split(":")[0]) for n in names]
        cls.__annotations__ = {o.name: "Any" for o in opts}
        for o in opts:
            setattr(cls, o.name, dataclasses.field(default=DEFAULTS[o.kind], metadata={"opt": o}))
        return dataclass(frozen=True, kw_only=True)(cls)

    return make


def plain(name: str, *groups: str) -> type:
    """A settings class with no methods of its own."""
    return settings(*groups)(type(name, (), {"__module__": __name__}))


@functools.cache
def options_of(cls: type) -> tuple[Opt, ...]:  # in field order
    return tuple(f.metadata["opt"] for f in dataclasses.fields(cls))


WHERE = "arch prefix env_name workdir"
CHANGE = f"{WHERE} dry_run force"
COMPILE = f"{CHANGE} jobs cache discard_local_edits"
LockOptions = plain("LockOptions", "prefix env_name dry_run channel")
SetupEnvOptions = plain("SetupEnvOptions", CHANGE, "channel show profile with_torch rocm_index")
DoctorOptions = plain("DoctorOptions", "arch:shown prefix env_name workdir json")
MatrixOptions = plain("MatrixOptions", "arch:shown json")
UpdatePinsOptions = plain("UpdatePinsOptions", "workdir dry_run force:pins project port_patches")


@settings(
    COMPILE,
    "clean timeout_min no_images from_release from_source",
    "with_pyaotriton restore workers triton",
)
class BuildAotritonOptions:
    def check(self) -> None:
        if self.from_release and self.from_source:
            raise UserError("--from-release and --from-source exclude each other: drop one")
        if self.triton == "fork" and self.workers:
            why = "--workers compiles with the PyPI Triton of pins/kernel_compiler.toml"
            raise UserError(f"{why}, not AOTriton's fork: drop --triton fork")

    @property
    def kernel_triton(self) -> str:
        """--triton, else pypi with --workers (the cluster's Triton), else AOTriton's fork."""
        return self.triton or ("pypi" if self.workers else "fork")


@settings(COMPILE, "clean:pytorch from_stage only skip with_apex build_tests aotriton_prefix")
class BuildPytorchOptions:
    def check(self) -> None:
        if self.from_stage and self.only:
            raise UserError("--from and --only exclude each other")


KernelCheckOptions = plain(
    "KernelCheckOptions", "arch workdir dry_run jobs cache discard_local_edits sample"
)
TuneAotritonOptions = plain(
    "TuneAotritonOptions", COMPILE, "clean timeout_min tune_head_dims tune_dtypes tune_seqlens"
)
InstallWheelsOptions = plain("InstallWheelsOptions", CHANGE, "index no_backend_check wheel_set")
PublishOptions = plain("PublishOptions", "arch workdir dry_run index report")
BuildCkOptions = plain("BuildCkOptions", COMPILE, "clean:ck with_tests with_examples")
# bench's, backend_check's, validate's and report's own options go through to them
ProbeOptions = BenchOptions = BackendCheckOptions = plain("ProbeOptions", "prefix env_name")
ValidateOptions = plain("ValidateOptions", "prefix env_name workdir upstream")
ReportOptions = plain("ReportOptions", "arch index baseline out")  # --index: the URL's family


# --- the sessions ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Session:
    """What the guard and the parser need of one nox session (its function: noxfile.py)."""

    name: str
    options: type
    changes_workdir: bool = False  # holds the work dir's lock
    changes_env: bool = False  # holds the env's lock
    forward: bool = False  # the arguments it does not declare go through to its function
    probe: bool = False  # it is scripts/rocmfa/probes/<name>.py, run in the env's Python


SESSIONS = (
    Session("lock", LockOptions),
    Session("setup_env", SetupEnvOptions, changes_workdir=True, changes_env=True),
    Session("doctor", DoctorOptions),
    Session("matrix", MatrixOptions),
    Session("update_pins", UpdatePinsOptions, changes_workdir=True),
    Session("build_aotriton", BuildAotritonOptions, changes_workdir=True, changes_env=True),
    Session("tune_aotriton", TuneAotritonOptions, changes_workdir=True, changes_env=True),
    Session("kernel_check", KernelCheckOptions, changes_workdir=True),
    Session("build_pytorch", BuildPytorchOptions, changes_workdir=True),
    Session("install_wheels", InstallWheelsOptions, changes_workdir=True, changes_env=True),
    Session("publish", PublishOptions, changes_workdir=True),  # no build replaces its wheels
    Session("build_ck", BuildCkOptions, changes_workdir=True, changes_env=True),
    Session("bench", BenchOptions, forward=True, probe=True),
    Session("backend_check", BackendCheckOptions, forward=True, probe=True),
    Session("validate", ValidateOptions, forward=True, probe=True),
    Session("report", ReportOptions, forward=True),
)
BY_NAME = {s.name: s for s in SESSIONS}


# --- the resolver ----------------------------------------------------------------------------
def build_parser(name: str, *, posargs: Sequence[str] = (), passed: Iterable[str] = ()):
    """Session `name`'s parser; other sessions' flags in posargs are dropped; passed: a probe's."""
    parser = argparse.ArgumentParser(prog=f"nox -s {name} --", allow_abbrev=False)
    own = options_of(BY_NAME[name].options)
    for o in own:
        action = {"switch": "store_true", "list": "append", "value": "store"}[o.kind]
        more = {} if o.kind == "switch" else {"metavar": o.metavar, "choices": o.allowed()}
        parser.add_argument(*o.flags, dest=o.name, action=action, help=o.help, **more)
    taken = {flag for o in own for flag in o.flags} | set(passed)
    for flag in {a.split("=", 1)[0] for a in posargs} | {a[:2] for a in posargs}:
        if flag in TAKES_VALUE and flag not in taken:  # another session's: taken, dropped
            action = "store" if TAKES_VALUE[flag] else "store_true"
            parser.add_argument(flag, dest="other", action=action, help=argparse.SUPPRESS)
            taken.add(flag)

    def fail(message: str) -> None:
        raise UserError(f"{name}: {message} (see: nox -s {name} -- --help)")

    parser.error = fail  # type: ignore[method-assign]
    return parser


def parse_known(name: str, posargs: Sequence[str], passed: Iterable[str] = ()) -> tuple:
    """(settings, the rest): flag, else $ROCMFA_* (a FromEnv), else default; passed: in rest."""
    parsed, rest = build_parser(name, posargs=posargs, passed=passed).parse_known_args(posargs)
    values: dict[str, Any] = {}
    for option in options_of(BY_NAME[name].options):
        raw = getattr(parsed, option.name)
        flag = option.flags[0]
        if option.kind == "list" and raw:
            values[option.name] = tuple(option.convert(name, r, flag) for r in raw)
        elif option.kind == "value" and raw is not None:
            values[option.name] = option.convert(name, raw, flag)
        elif raw:
            values[option.name] = raw
        elif option.env and (text := os.environ.get(option.env)):  # the one reader of $ROCMFA_*
            values[option.name] = FromEnv(option.convert(name, text, f"${option.env}"), option.env)
    resolved = BY_NAME[name].options(**values)
    try:
        getattr(resolved, "check", lambda: None)()
    except UserError as error:
        raise UserError(f"{name}: {error}") from None
    return resolved, rest


def parse(name: str, posargs: Sequence[str]) -> Any:
    """Session `name`'s settings from posargs; an argument no session declares is an error."""
    opts, rest = parse_known(name, posargs)
    if rest:
        build_parser(name).error(f"unrecognized arguments: {' '.join(rest)}")
    return opts


def effective(opts: Any) -> str:
    """The settings not at their default, and from where: `--arch gfx1151 ($ROCMFA_ARCH), -j 4`."""
    shown = []
    for option, field in zip(options_of(type(opts)), dataclasses.fields(opts), strict=True):
        got = getattr(opts, option.name)
        if got == field.default:
            continue
        where = f" (${got.variable})" if isinstance(got, FromEnv) else ""
        values = got if isinstance(got, tuple) else (got,)
        text = ",".join(getattr(v, "describe", v.__str__)() for v in values)
        shown.append(option.flags[0] + ("" if option.kind == "switch" else f" {text}{where}"))
    return ", ".join(shown) or "defaults"
