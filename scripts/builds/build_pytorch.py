"""`nox -s build_pytorch`: torch, triton, audio and vision wheels through TheRock, by stage.

TheRock is checked out at its pin; PyTorch and its companions are checked out by TheRock's own
external-builds/pytorch/pytorch_*_repo.py scripts with their current flags (those scripts and
repo_management.py at TheRock 89553ce3, docs/upstream-interfaces.md: --checkout-dir,
--repo-hashtag, --gitrepo-origin, --depth, --jobs, --hipify; the --patch/--patchset/--repo flags
of 2025 are gone); our patch sets are applied by commit after checkout; then
`build_prod_wheels.py build` (same commit) builds one stage per call:

    checkout -> torch (triton with it) -> audio, vision (-> apex with --with-apex)

Each stage leaves a stamp in <work>/stamps/build_pytorch-<stage>.json, written last; a rerun
resumes at the first stage that is not done. `--from STAGE` reruns STAGE and everything after
it, `--only STAGE` just that one. Builds are incremental (--no-clean) unless --clean.

Triton is built once, in the torch stage's call: TheRock (build_prod_wheels.py @ 89553ce3,
validate_build_args and do_build_pytorch) turns flash attention off on Linux when triton is not
built in the same call, rejects --enable-pytorch-flash-attention without it, and puts the
triton it built into torch's requirements (PYTORCH_EXTRA_INSTALL_REQUIREMENTS), so a call of
its own would only build triton a second time. The torch call passes the flash flag
explicitly; options that would build torch without flash attention for an arch that has
AOTriton stop with the reason. That call also pip-installs the triton and torch it built into
the Python running it (do_build_pytorch ~1302-1305), which is the env's: torch is in the env
from the torch stage on.

TheRock's env dict overrides CXXFLAGS, USE_FLASH_ATTENTION, PYTORCH_ROCM_ARCH, ... so nothing
here is passed that way; what it leaves alone on Linux passes through: MAX_JOBS, BUILD_TEST=0
(TheRock sets it on Windows only; PyTorch's tools/build_pytorch_libs.py builds its C++ tests
unless it is 0; --build-tests for 1)
and AOTRITON_INSTALLED_PREFIX (build_aotriton's install, when there is one).

The wheels of a stage are exactly the files that appeared or changed in the output dir while
that stage ran (listing before/after, names parsed with packaging); the run manifest
<work>/build_pytorch-manifest.json lists them for install_wheels.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from scripts.builds import compile_cache
from scripts.env import archs, compat_matrix, condaenv, rocm_sdk
from scripts.env.session_env import OnSession, SessionEnv, open_env
from scripts.plumbing import buildjobs, paths, pin_files, stamps
from scripts.plumbing.errors import UserError
from scripts.plumbing.options import STAGES, BuildPytorchOptions
from scripts.sources import pins, update_pins
from scripts.sources.pins import Pin

SCRIPTS_SUBDIR = Path("external-builds") / "pytorch"
BUILD_SCRIPT = "build_prod_wheels.py"
MANIFEST_NAME = "build_pytorch-manifest.json"
SOURCE_MANIFEST_NAME = "build_pytorch-sources.json"
STAMP_PREFIX = "build_pytorch-"
CHECKOUT_DEPTH = "1"
CHECKOUT_JOBS = "10"
TORCH_GIB_PER_JOB = 3.0  # HIP translation units of PyTorch; MAX_JOBS otherwise = CPU count
DEFAULT_TRITON_ORIGIN = "https://github.com/ROCm/triton.git"


@dataclass(frozen=True)
class Component:
    key: str  # checkout dir name under <work>/src and patches/<key>/
    stage: str  # the stage whose build_prod_wheels call builds it (triton: torch's)
    script: str  # TheRock checkout script
    pin_key: str  # optional [pytorch.<pin_key>] table in pins/pytorch.toml
    related: str | None  # project name in PyTorch's related_commits
    hipify_subcommand: bool  # TheRock hipifies this checkout (apex: no, as its script and CI)
    dir_flag: str  # build_prod_wheels --*-dir
    build_flag: str | None  # build_prod_wheels --build-*/--no-build-*
    wheels: tuple[str, ...]  # canonical distribution names this stage must produce


COMPONENTS = (
    Component(
        "pytorch", "torch", "pytorch_torch_repo.py", "", None, True, "--pytorch-dir", None,
        ("torch",),
    ),
    Component(
        "triton", "torch", "pytorch_triton_repo.py", "triton", None, False, "--triton-dir",
        "triton", ("triton", "pytorch-triton-rocm"),
    ),
    Component(
        "pytorch_audio", "audio", "pytorch_audio_repo.py", "audio", "torchaudio", True,
        "--pytorch-audio-dir", "pytorch-audio", ("torchaudio",),
    ),
    Component(
        "pytorch_vision", "vision", "pytorch_vision_repo.py", "vision", "torchvision", True,
        "--pytorch-vision-dir", "pytorch-vision", ("torchvision",),
    ),
    Component(
        "apex", "apex", "pytorch_apex_repo.py", "apex", "apex", False, "--apex-dir", "apex",
        ("apex",),
    ),
)  # fmt: skip
BY_STAGE = {c.stage: c for c in COMPONENTS if c.key != "triton"}
NO_BUILD_FLAGS = ("pytorch-audio", "pytorch-vision", "apex")


def manifest_path(work: Path) -> Path:
    return work / MANIFEST_NAME


def output_dir(work: Path) -> Path:
    return work / "wheels"


def stage_stamp(work: Path, stage: str) -> Path:
    return paths.stamp_path(work, STAMP_PREFIX + stage)


# --- which stages run ---------------------------------------------------------------------


def enabled_stages(skip: Sequence[str], with_apex: bool) -> list[str]:
    stages = [s for s in STAGES if s not in set(skip)]  # triton is no stage: the torch call's
    if not with_apex:
        stages.remove("apex")
    return stages


def dependency(stage: str, enabled: list[str]) -> str | None:
    """The stage whose result this one builds on (the stamp chain)."""
    if stage == "checkout":
        return None
    return "checkout" if stage == "torch" else "torch"


def flash_attention_problem(arch: archs.Arch, argv: list[str], flash: bool) -> str | None:
    """Why this build_prod_wheels call would build torch without flash attention although the
    arch has AOTriton kernels (flash), or None."""
    if "--pytorch-dir" not in argv or not flash:
        return None
    if "--build-triton" not in argv:
        return (
            f"this would build torch for {arch.name} without flash attention: TheRock's "
            f"{BUILD_SCRIPT} turns flash attention off on Linux when triton is not built in the "
            "same call (and rejects --enable-pytorch-flash-attention without it)"
        )
    if "--enable-pytorch-flash-attention" not in argv:
        return f"this would build torch for {arch.name} without --enable-pytorch-flash-attention"
    return None


# --- wheels -------------------------------------------------------------------------------


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """name -> (size, mtime_ns) of the wheel files in directory."""
    if not directory.is_dir():
        return {}
    result = {}
    for entry in directory.iterdir():
        if entry.name.endswith(".whl") and entry.is_file():
            st = entry.stat()
            result[entry.name] = (st.st_size, st.st_mtime_ns)
    return result


def wheel_record(path: Path, stage: str) -> dict[str, Any]:
    try:
        name, version, _build, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as e:
        raise UserError(f"{path}: not a valid wheel file name ({e})") from None
    return {
        "project": str(name),
        "version": str(version),
        "tags": sorted(str(t) for t in tags),
        "file": str(path),
        "sha256": stamps.file_sha256(path),
        "size": path.stat().st_size,
        "stage": stage,
    }


def produced_wheels(
    out: Path, before: Mapping[str, tuple[int, int]], stage: str
) -> list[dict[str, Any]]:
    after = snapshot(out)
    names = sorted(n for n, st in after.items() if before.get(n) != st)
    records = [wheel_record(out / n, stage) for n in names]
    wanted = set(BY_STAGE[stage].wheels) if stage in BY_STAGE else set()
    if wanted and not any(r["project"] in wanted for r in records):
        raise UserError(
            f"stage {stage} finished but no {'/'.join(sorted(wanted))} wheel appeared in {out}"
        )
    return records


def stage_wheels_ok(stamp: Mapping[str, Any]) -> bool:
    """The wheels a stamp recorded are still there, unchanged in size."""
    for record in stamp.get("wheels", []):
        path = Path(record["file"])
        try:
            if path.stat().st_size != record["size"]:
                return False
        except OSError:
            return False
    return True


# --- sources ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    origin: str | None
    hashtag: str | None
    how: str

    @property
    def commit(self) -> str | None:
        h = self.hashtag or ""
        return h if len(h) == 40 and all(c in "0123456789abcdef" for c in h) else None


def read_related_commits(torch_dir: Path, project: str) -> tuple[str, str] | None:
    """(origin, commit) of project from <torch>/related_commits (os 'ubuntu', as TheRock)."""
    try:
        text = (torch_dir / "related_commits").read_text()
    except OSError:
        return None
    return pins.parse_related_commits(text, str(torch_dir / "related_commits")).get(project)


def resolve_source(component: Component, pytorch_pin: Pin, torch_dir: Path) -> Source:
    """Where a companion comes from: an explicit [pytorch.<x>] pin, else what the pinned
    PyTorch declares (related_commits / ci_commit_pins/triton.txt), passed explicitly."""
    if component.key == "pytorch":
        return Source(pytorch_pin.url, pytorch_pin.commit, pytorch_pin.source)
    table = pytorch_pin.data.get(component.pin_key)
    table = table if isinstance(table, dict) else {}
    where = f"pins/pytorch.toml [pytorch.{component.pin_key}]"
    for key in ("url", "ref", "commit"):
        if key in table:
            pin_files.text(table, key, where, empty_ok=True)
    ref = table.get("ref") if table.get("ref") != pin_files.FROM_PYTORCH else None
    if table.get("commit") or ref:  # a commit, else a tag or branch
        return Source(table.get("url"), table.get("commit") or ref, where)
    at = f"pytorch {pytorch_pin.commit[:12]}"
    if component.key == "triton":
        origin = table.get("url") or DEFAULT_TRITON_ORIGIN
        pin_file = torch_dir / ".ci" / "docker" / "ci_commit_pins" / "triton.txt"
        try:
            commit = pin_file.read_text().strip()
        except OSError:
            return Source(
                origin, None, f"{at} .ci/docker/ci_commit_pins/triton.txt (after checkout)"
            )
        return Source(origin, commit, f"{at} ci_commit_pins/triton.txt")
    if not (torch_dir / ".git").exists():
        return Source(table.get("url"), None, f"{at} related_commits (after checkout)")
    found = read_related_commits(torch_dir, component.related or "")
    if found is None:
        return Source(
            table.get("url"), None, f"TheRock's default ({at} has no related_commits entry)"
        )
    return Source(table.get("url") or found[0], found[1], f"{at} related_commits")


def read_head(checkout: Path) -> str | None:
    """HEAD's commit read from .git without running git (detached or on a branch)."""
    git_dir = checkout / ".git"
    try:
        head = (git_dir / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            ref = head[5:]
            ref_file = git_dir / ref
            if ref_file.is_file():
                return ref_file.read_text().strip()
            for line in (git_dir / "packed-refs").read_text().splitlines():
                if line.endswith(" " + ref):
                    return line.split()[0]
            return None
        return head
    except OSError:
        return None


# --- the build ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Context(OnSession):
    session: SessionEnv
    therock_pin: Pin
    pytorch_pin: Pin
    therock_dir: Path
    scripts_dir: Path
    out: Path
    enabled: list[str]
    rocm_version: str
    python_tag: str
    env_identity: str
    aotriton: Path | None
    aotriton_digest: str
    max_jobs: int
    build_triton: bool = True  # in the torch call (--skip triton: not at all)
    build_tests: bool = False  # PyTorch's C++ tests (BUILD_TEST)
    force: bool = False
    discard_local_edits: bool = False
    clean: bool = False
    from_stage: str | None = None
    only: str | None = None
    cache: compile_cache.CachePlan | None = None
    # torch gets flash attention: the arch has AOTriton kernels upstream or from our patch set
    flash_attention: bool = False


def find_aotriton_prefix(
    requested: str | None, work: Path, *, dry_run: bool = False
) -> tuple[Path | None, str, str]:
    """(prefix, how, digest of what built it) for AOTRITON_INSTALLED_PREFIX. A dry run after
    build_aotriton's dry run in the same nox run takes the prefix that one is about to fill."""

    # PyTorch's cmake/External/aotriton.cmake installs $PREFIX/lib and $PREFIX/include and
    # links $PREFIX/lib/libaotriton_v2.so (the unversioned name) - all three must be there.
    def has_lib(prefix: Path) -> bool:
        return (prefix / "lib" / "libaotriton_v2.so").is_file() and (prefix / "include").is_dir()

    if requested:
        prefix = Path(requested).expanduser().resolve()
        if not has_lib(prefix):
            raise UserError(
                f"--aotriton-prefix {prefix}: PyTorch's aotriton.cmake needs "
                "lib/libaotriton_v2.so and include/ there"
            )
        return prefix, "--aotriton-prefix", str(prefix)
    # build_aotriton (scripts/builds/build_aotriton.py) installs into <work>/build/aotriton/install
    # and stamps <work>/stamps/aotriton.json; a rebuild there changes the digest here.
    stamp = stamps.read(paths.stamp_path(work, "aotriton")) or {}
    digest = str(stamp.get("inputs_digest", ""))
    built = stamps.read(paths.stamp_path(work, "aotriton-built")) or {}
    if built.get("install_prefix") and has_lib(Path(built["install_prefix"])):
        # the last build_aotriton source build (gfx908: the patched one torch needs)
        return Path(built["install_prefix"]), "build_aotriton", str(built.get("inputs_digest"))
    for candidate in (
        paths.build_dir(work, "aotriton") / "install",
        paths.build_dir(work, "aotriton") / "install_dir",
    ):
        if has_lib(candidate):
            return candidate, "build_aotriton", digest or str(candidate)
    planned = stamps.planned(paths.stamp_path(work, "aotriton-built")) if dry_run else None
    if planned and planned.get("install_prefix"):
        how = "build_aotriton, which fills it earlier in this run"
        return Path(planned["install_prefix"]), how, "<digest of build_aotriton's build to come>"
    return None, "", ""


def make_context(opts: BuildPytorchOptions, out: TextIO | None = None) -> Context:
    session = open_env(opts, dry_run=opts.dry_run, out=out)
    arch, work, prefix = session.arch, session.work, session.prefix
    if arch.vendor != "amd":
        raise UserError(f"build_pytorch builds for AMD GPUs; {arch.name} is not one")
    runner = session.runner
    runner.say(session.describe())
    therock_pin = pins.load_pin("therock", workdir=work)
    update_pins.resolve_for_build("pytorch", runner, workdir=work, force=opts.force)
    runner.say(pin_files.describe_line(pin_files.pins_dir()))
    pytorch_pin = pins.load_pin_for_plan("pytorch", dry_run=opts.dry_run, workdir=work)
    runner.say(f"pins: {therock_pin.describe()}; {pytorch_pin.describe()}")
    if session.ready:
        rocm_version = session.ask([session.tool("rocm-sdk"), "version"], "$(rocm-sdk version)")
    else:  # a dry run before setup_env: it installs exactly the pinned version
        rocm_version = rocm_sdk.load_pin().version
        runner.say(
            f"[dry-run] ROCm SDK {rocm_version}: pinned in pins/rocm.toml, setup_env installs it"
        )
    python_tag = runner.run(
        [session.python, "-c", "import sys; print('cp%d%d' % sys.version_info[:2])"],
        capture=True,
        dry_run_output="$(python tag)",
    ).stdout.strip()
    aotriton, how, aotriton_digest = find_aotriton_prefix(
        opts.aotriton_prefix, work, dry_run=opts.dry_run
    )
    patched = patched_aotriton(arch, work, aotriton, how, dry_run=opts.dry_run)
    if patched is not None:
        aotriton, how = patched, how or "build_aotriton (after it runs)"
    if aotriton:
        runner.say(f"AOTriton: {aotriton} from {how} -> AOTRITON_INSTALLED_PREFIX")
    elif arch.aotriton_supported():
        runner.say(
            "AOTriton: no build_aotriton install found (or --aotriton-prefix); PyTorch's build "
            "fetches the AOTriton its cmake/External/aotriton.cmake pins"
        )
    jobs, why = buildjobs.choose_jobs(opts.jobs, TORCH_GIB_PER_JOB)
    runner.say(f"compile: MAX_JOBS={jobs}: {why}")
    therock_dir = paths.src_dir(work, "therock")
    env_identity = condaenv.env_identity(prefix) if session.ready else ""
    cache_spec = opts.cache  # parsed with the options
    cache = None
    if cache_spec is not None:
        toolchain = {"rocm": rocm_version, "python": python_tag, "env": env_identity}
        cache = compile_cache.plan_cache(
            cache_spec,
            work=work,
            arch=arch.name,
            toolchain=toolchain,
            env=session.environ,
            runner=runner,
            planned=not session.ready,
        )
    return Context(
        session=session,
        therock_pin=therock_pin,
        pytorch_pin=pytorch_pin,
        therock_dir=therock_dir,
        scripts_dir=therock_dir / SCRIPTS_SUBDIR,
        out=output_dir(work),
        enabled=enabled_stages(opts.skip, opts.with_apex),
        rocm_version=rocm_version,
        python_tag=python_tag,
        env_identity=env_identity,
        aotriton=aotriton,
        aotriton_digest=aotriton_digest,
        max_jobs=jobs,
        build_triton="triton" not in opts.skip,
        build_tests=opts.build_tests,
        force=opts.force,
        discard_local_edits=opts.discard_local_edits,
        clean=opts.clean,
        from_stage=opts.from_stage,
        only=opts.only,
        cache=cache,
        flash_attention=arch.aotriton_supported() or patched is not None,
    )


def patched_aotriton(
    arch: archs.Arch, work: Path, found: Path | None, how: str, *, dry_run: bool
) -> Path | None:
    """For an arch whose AOTriton kernels come from our patch set (gfx908 on 0.13b): the
    build_aotriton install torch is built against (PyTorch's own aotriton.cmake would fetch
    release images, which have none for it), or the --aotriton-prefix given; None for any
    other arch."""
    from scripts.sources import pins

    if arch.aotriton_supported() or not arch.aotriton_patched:
        return None
    version = str(pins.load_pin("aotriton", workdir=work).data.get("version") or "")
    if not arch.aotriton_patched_pack(version):
        return None
    built = (stamps.read(paths.stamp_path(work, "aotriton-built")) or {}).get("inputs") or {}
    if found is not None and (how == "--aotriton-prefix" or built.get("arch") in (arch.name, None)):
        return found
    if dry_run:
        return paths.build_dir(work, "aotriton") / "install"
    raise UserError(
        f"{arch.name}: torch gets flash attention only from AOTriton {version} built with our "
        f"patch set for {arch.name}; run nox -s build_aotriton -- --arch {arch.name} first"
    )


def checkout_components(ctx: Context) -> list[Component]:
    return [
        c for c in COMPONENTS if c.stage in ctx.enabled and (c.key != "triton" or ctx.build_triton)
    ]


def stage_inputs(ctx: Context, stage: str) -> dict[str, Any]:
    from scripts.sources import patches

    if stage == "checkout":
        return {
            "therock": ctx.therock_pin.commit,
            "pytorch": [ctx.pytorch_pin.url, ctx.pytorch_pin.commit],
            "companions": {
                c.key: ctx.pytorch_pin.data.get(c.pin_key) for c in checkout_components(ctx)
            },
            "patches": {
                c.key: {
                    commit: patches.patch_set_digest(c.key, commit)
                    for commit in patches.available_sets(c.key)
                }
                for c in checkout_components(ctx)
            },
            "depth": CHECKOUT_DEPTH,
        }
    dep = dependency(stage, ctx.enabled)
    dep_stamp = stamps.read(stage_stamp(ctx.work, dep)) if dep else None
    inputs: dict[str, Any] = {
        "after": (dep, (dep_stamp or {}).get("inputs_digest")),
        "config": stage_config(ctx, stage),
        "rocm": ctx.rocm_version,
        "python": ctx.python_tag,
        "env": ctx.env_identity,
        "compile_cache": ctx.cache.spec.tool if ctx.cache else None,
        "version_suffix": version_suffix(ctx),
    }
    return inputs


def stage_config(ctx: Context, stage: str) -> dict[str, Any]:
    """What the build dir's CMake cache remembers: a change means a clean rebuild."""
    config: dict[str, Any] = {"arch": ctx.arch.name}
    if stage == "torch":
        config["triton"] = ctx.build_triton
        config["build_tests"] = ctx.build_tests
        config["flash_attention"] = ctx.flash_attention
        config["aotriton"] = [str(ctx.aotriton) if ctx.aotriton else None, ctx.aotriton_digest]
    return config


def wheel_identity(ctx: Context) -> str:
    """8 hex digits naming what builds this run's wheels: the checkout (TheRock, every source's
    commit and HEAD after our patches, the patch sha256s), the AOTriton install torch links,
    the arch and the ROCm SDK. A named placeholder while the checkout is not done yet (a dry
    run), so no claim is made from a guess."""
    stamp = stamps.read(stage_stamp(ctx.work, "checkout")) or {}
    if stamp.get("inputs_digest") != stamps.digest(stage_inputs(ctx, "checkout")):
        return "<identity: digest of the checkout's commits and patches, after checkout>"
    sources = stamp.get("sources") or {}
    return stamps.digest({
        "therock": ctx.therock_pin.commit,
        "heads": stamp.get("heads"),
        "sources": {k: [v.get("hashtag"), v.get("patches")] for k, v in sorted(sources.items())},
        "aotriton": ctx.aotriton_digest,
        "arch": ctx.arch.name,
        "rocm": ctx.rocm_version,
    })[:8]  # fmt: skip


def version_suffix(ctx: Context) -> str:
    """build_prod_wheels.py --version-suffix: TheRock's own default (+rocm<SDK>, +devrocm<SDK>
    for a dev SDK; get_version_suffix_for_installed_rocm_package @ 89553ce3) with this build's
    identity put first in the one local segment, `+rocmfa<identity>.rocm<SDK>`, so two
    different builds never share a wheel file name and install_wheels still reads the SDK."""
    sdk = ctx.rocm_version
    with contextlib.suppress(InvalidVersion):  # a dry run's placeholder is shown as it is
        sdk = str(Version(sdk)).replace("+", "-")
    base = "devrocm" if "dev" in ctx.rocm_version else "rocm"
    return f"+rocmfa{wheel_identity(ctx)}.{base}{sdk}"


def build_argv(ctx: Context, stage: str, clean: bool) -> list[str]:
    argv = [
        str(ctx.python),
        str(ctx.scripts_dir / BUILD_SCRIPT),
        "build",
        "--no-install-rocm",
        "--output-dir",
        str(ctx.out),
        "--pytorch-rocm-arch",
        ctx.arch.name,
        "--version-suffix",
        version_suffix(ctx),
        "--clean" if clean else "--no-clean",
    ]
    if ctx.cache is not None and ctx.cache.active:
        argv += ctx.cache.therock_flags()

    def src(key: str) -> str:
        return str(paths.src_dir(ctx.work, key))

    if stage == "torch":
        argv += ["--pytorch-dir", src("pytorch")]
        if ctx.build_triton:
            argv += ["--triton-dir", src("triton"), "--build-triton"]
        else:
            argv.append("--no-build-triton")
        if ctx.flash_attention:
            argv.append("--enable-pytorch-flash-attention")
        else:
            argv.append("--no-enable-pytorch-flash-attention")
    else:
        component = BY_STAGE[stage]
        argv += [component.dir_flag, src(component.key), f"--build-{component.build_flag}"]
        argv.append("--no-build-triton")
    for flag in NO_BUILD_FLAGS:
        if stage not in BY_STAGE or BY_STAGE[stage].build_flag != flag:
            argv.append(f"--no-build-{flag}")
    return argv


def build_sets(ctx: Context, stage: str) -> dict[str, str]:
    sets = {"MAX_JOBS": str(ctx.max_jobs)}
    if stage == "torch":
        sets["BUILD_TEST"] = "1" if ctx.build_tests else "0"
    if stage == "torch" and ctx.aotriton:
        sets["AOTRITON_INSTALLED_PREFIX"] = str(ctx.aotriton)
    if ctx.cache is not None:
        sets.update(ctx.cache.build_sets(ctx.runner.base_env))
    return sets


def guard_default_dirs(ctx: Context) -> None:
    """build_prod_wheels builds any project whose dir exists under --root-checkout-dir (default:
    its own folder), so a hand-made checkout there would be built in every stage."""
    for sub in ("pytorch", "pytorch_audio", "pytorch_vision", "triton", "apex"):
        stray = ctx.scripts_dir / sub
        if stray.exists():
            raise UserError(
                f"{stray} exists: TheRock's {BUILD_SCRIPT} would build it in every stage by "
                "default; move it away (our checkouts live in the work dir)"
            )


def protect_checkout(ctx: Context, dest: Path, recorded: str | None) -> None:
    """TheRock's checkout scripts force-checkout: never let them eat the user's work."""
    if ctx.runner.dry_run or not (dest / ".git").exists():
        return
    changes = ctx.runner.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=dest, capture=True
    ).stdout.splitlines()
    head = read_head(dest)
    problem = None
    if changes:
        problem = f"has local edits ('{changes[0].strip()}')"
    elif recorded and head != recorded:
        problem = f"HEAD {str(head)[:12]} is not the {recorded[:12]} this build left there"
    if problem:
        if not ctx.discard_local_edits:
            raise UserError(
                f"{dest} {problem}; TheRock's checkout would discard it - keep it on a branch "
                "or stash it, or pass --discard-local-edits"
            )
        ctx.runner.say(f"--discard-local-edits: {dest} {problem}; checking out over it")


def run_checkout(ctx: Context, previous: Mapping[str, Any]) -> dict[str, Any]:
    from scripts.sources import checkouts, patches

    checkouts.ensure_checkout(
        ctx.therock_pin, ctx.therock_dir, ctx.runner, force=ctx.discard_local_edits
    )
    if not ctx.runner.dry_run:
        guard_default_dirs(ctx)
    heads: dict[str, str] = {}
    sources: dict[str, Any] = {}
    torch_dir = paths.src_dir(ctx.work, "pytorch")
    for component in checkout_components(ctx):
        dest = paths.src_dir(ctx.work, component.key)
        protect_checkout(ctx, dest, (previous.get("heads") or {}).get(component.key))
        source = resolve_source(component, ctx.pytorch_pin, torch_dir)
        if source.hashtag is None and not ctx.runner.dry_run:
            ctx.runner.say(
                f"warning: {component.key} is not pinned ({source.how}); TheRock's checkout "
                "script picks its default - pin it in pins/pytorch.toml "
                f"[pytorch.{component.pin_key}]"
            )
        # Patch sets are found by the commit the source is at, whatever form its ref takes: a
        # 40-hex pin is known now; a tag, a branch or TheRock's default is read from the
        # checkout's HEAD before hipify.
        known = source.commit
        patch_set = patches.patch_set_for(component.key, known) if known else None
        script = str(ctx.scripts_dir / component.script)
        argv = [str(ctx.python), script, "checkout", "--checkout-dir", str(dest)]
        if source.hashtag:
            argv += ["--repo-hashtag", source.hashtag]
        if source.origin:
            argv += ["--gitrepo-origin", source.origin]
        argv += ["--depth", CHECKOUT_DEPTH, "--jobs", CHECKOUT_JOBS]
        if component.key != "pytorch":
            argv += ["--torch-dir", str(torch_dir)]
        # Patches are keyed by the upstream commit, so they go on before hipify.
        hipify_later = bool(patch_set or not known) and component.hipify_subcommand
        if hipify_later:
            argv.append("--no-hipify")
        elif component.hipify_subcommand:
            argv.append("--hipify")
        ctx.runner.say(f"{component.key}: {source.hashtag or 'default'} from {source.how}")
        ctx.runner.run(argv, cwd=ctx.scripts_dir)
        commit = known or (None if ctx.runner.dry_run else read_head(dest))
        applied: list[str] = []
        if commit:
            applied = patches.apply_patch_set(component.key, commit, dest, ctx.runner)
        else:
            ctx.runner.say(
                f"[dry-run] {component.key}: patches/{component.key}/<the commit the checkout "
                "lands on>/ is applied before hipify (a missing set where others exist is refused)"
            )
        if hipify_later:
            ctx.runner.run(
                [str(ctx.python), script, "hipify", "--checkout-dir", str(dest)],
                cwd=ctx.scripts_dir,
            )
        heads[component.key] = read_head(dest) or ""
        sources[component.key] = {
            "origin": source.origin,
            "hashtag": source.hashtag,
            "commit": commit,
            "how": source.how,
            "patches": applied,
        }
    if not ctx.runner.dry_run:
        write_source_manifest(ctx, sources)
    ctx.runner.say(
        f"{'[dry-run] ' if ctx.runner.dry_run else ''}the checked-out commits go to "
        f"{source_manifest_path(ctx.work)} (TheRock's source-manifest form: its "
        "checkout_from_manifest.py reproduces the tree)"
    )
    return {"heads": heads, "sources": sources}


def source_manifest_path(work: Path) -> Path:
    return work / SOURCE_MANIFEST_NAME


def write_source_manifest(ctx: Context, sources: Mapping[str, Mapping[str, Any]]) -> None:
    """What this checkout is, in TheRock's own source-manifest form (schema_version 1: one
    {repo, commit, branch} entry per project, keys as checkout_from_manifest.py's
    CHECKOUT_SCRIPTS, plus "therock"; generate_pytorch_source_manifest.py @ 89553ce3 writes it).
    The commit is the upstream one the checkout landed on, before our patches and hipify."""
    manifest: dict[str, Any] = {"schema_version": 1}
    for key, source in sources.items():
        entry = {"repo": source.get("origin") or "", "commit": source.get("commit") or ""}
        hashtag = source.get("hashtag") or ""
        if key == "pytorch":
            entry["branch"] = ctx.pytorch_pin.ref
        elif hashtag and hashtag != entry["commit"]:
            entry["branch"] = hashtag
        manifest[key] = entry
    manifest["therock"] = {
        "repo": ctx.therock_pin.url,
        "commit": ctx.therock_pin.commit,
        "branch": ctx.therock_pin.ref,
        "version": ctx.rocm_version,
    }
    stamps.write_text_atomic(
        source_manifest_path(ctx.work), json.dumps(manifest, indent=2, sort_keys=False) + "\n"
    )


def run_build_stage(ctx: Context, stage: str, inputs: dict[str, Any]) -> dict[str, Any]:
    config_file = paths.build_dir(ctx.work, "build_pytorch") / f"{stage}.config.json"
    clean = ctx.clean
    config = stage_config(ctx, stage)
    try:
        previous = json.loads(config_file.read_text())
    except (OSError, ValueError):
        previous = None
    if previous is not None and previous != config and not clean:
        ctx.runner.say(
            f"{stage}: build settings changed since the last build ({previous} -> {config}); "
            "passing --clean so the CMake cache does not keep the old ones"
        )
        clean = True
    argv = build_argv(ctx, stage, clean)
    sets = build_sets(ctx, stage)
    if stage == "torch":
        triton = "triton is built in this call too, its only build of the run; "
        built = "triton and torch" if ctx.build_triton else "torch"
        ctx.runner.say(
            f"torch: {triton if ctx.build_triton else ''}TheRock pip-installs the {built} it "
            f"built into {ctx.python} (the env) when done"
        )
    cwd = paths.build_dir(ctx.work, "build_pytorch")
    if ctx.runner.dry_run:
        with compile_cache.compiling(ctx.cache, ctx.runner, ctx.work, f"build_pytorch {stage}"):
            ctx.runner.run(argv, cwd=cwd, sets=sets)
        return {}
    cwd.mkdir(parents=True, exist_ok=True)
    stamps.write_text_atomic(config_file, json.dumps(config, sort_keys=True))
    before = snapshot(ctx.out)
    with compile_cache.compiling(ctx.cache, ctx.runner, ctx.work, f"build_pytorch {stage}"):
        ctx.runner.run(argv, cwd=cwd, sets=sets)
    wheels = produced_wheels(ctx.out, before, stage)
    for record in wheels:
        ctx.runner.say(f"{stage}: built {Path(record['file']).name}")
    return {"wheels": wheels, "argv": argv}


def plan(ctx: Context) -> list[str]:
    """Stages to run, in order, after checking --from/--only against the stamps."""
    order = ctx.enabled
    for name, value in (("--from", ctx.from_stage), ("--only", ctx.only)):
        if value and value not in order:
            raise UserError(f"{name} {value}: that stage is not part of this build (see --skip)")

    def done(stage: str) -> bool:
        stamp = stamps.read(stage_stamp(ctx.work, stage))
        if not stamp or stamp.get("inputs_digest") != stamps.digest(stage_inputs(ctx, stage)):
            return False
        if stage == "checkout":
            heads = stamp.get("heads") or {}
            return (
                all(
                    read_head(paths.src_dir(ctx.work, c.key)) == heads.get(c.key)
                    for c in checkout_components(ctx)
                )
                and (ctx.therock_dir / ".git").exists()
            )
        return stage_wheels_ok(stamp)

    start = ctx.only or ctx.from_stage
    if start:
        flag = "--only" if ctx.only else "--from"
        for stage in order[: order.index(start)]:
            if stage in _needed_before(start, order) and not done(stage):
                raise UserError(
                    f"{flag} {start}: stage {stage} is not done (or its inputs changed); "
                    f"run without {flag} to resume, or {flag} {stage}"
                )
        return [start] if ctx.only else order[order.index(start) :]
    if ctx.force:
        return list(order)
    todo: list[str] = []
    for stage in order:
        if dependency(stage, order) in todo or not done(stage):
            todo.append(stage)
    return todo


def _needed_before(stage: str, order: list[str]) -> set[str]:
    needed: set[str] = set()
    dep = dependency(stage, order)
    while dep:
        needed.add(dep)
        dep = dependency(dep, order)
    return needed


def write_manifest(ctx: Context) -> dict[str, Any]:
    by_project: dict[str, dict[str, Any]] = {}
    for stage in ctx.enabled:
        if stage == "checkout":
            continue
        stamp = stamps.read(stage_stamp(ctx.work, stage)) or {}
        for record in stamp.get("wheels", []):
            by_project[record["project"]] = record  # later stages win (triton from torch's)
    wheels = sorted(by_project.values(), key=lambda r: STAGES.index(r["stage"]))
    manifest = {
        "schema": "build_pytorch-manifest/1",
        "arch": ctx.arch.name,
        "rocm_version": ctx.rocm_version,
        "python_tag": ctx.python_tag,
        "env_prefix": str(ctx.prefix),
        "stages": ctx.enabled,
        "wheels": wheels,
    }
    stamps.write_text_atomic(
        manifest_path(ctx.work), json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    )
    return manifest


def install_argv(python: Path, files: list[str]) -> list[str]:
    return [str(python), "-m", "pip", "install", "--no-deps", "--force-reinstall", *files]


def check_matrix(ctx: Context) -> None:
    """The torch series of a release/X.Y pin x build_aotriton's AOTriton, before any build."""
    match = re.search(r"release/(\d+\.\d+)", ctx.pytorch_pin.ref or "")
    stamp = stamps.read(paths.stamp_path(ctx.work, "aotriton")) or {}
    version = (stamp.get("inputs") or {}).get("pin", {}).get("version")
    if match and version and ctx.aotriton:
        compat_matrix.announce(
            compat_matrix.check_combination(
                ctx.arch, version, torch_version=match[1], force=ctx.force
            ),
            ctx.runner.say,
        )


def check_pin_set(ctx: Context) -> None:
    """The torch pin x build_aotriton's AOTriton it is built against, before any build
    (scripts.sources.pin_set)."""
    from scripts.sources import pin_set, pins

    built = stamps.read(paths.stamp_path(ctx.work, "aotriton-built")) or {}
    inputs = built.get("inputs") or {}
    if not ctx.aotriton or built.get("install_prefix") != str(ctx.aotriton):
        return
    aotriton = pins.load_pin("aotriton", workdir=ctx.work)
    version = str((inputs.get("pin") or {}).get("version") or aotriton.data.get("version") or "")
    lines = pin_set.check(
        aotriton, version, force=ctx.force, dry_run=ctx.runner.dry_run, workdir=ctx.work
    )
    compat_matrix.announce(lines[1:], ctx.runner.say)  # the line itself was said already


def build_pytorch(opts: BuildPytorchOptions) -> None:
    ctx = make_context(opts)
    say = ctx.runner.say
    if ctx.arch.therock_torch_flash:  # the long way where a prebuilt flash torch exists: say so
        from scripts.env.doctor import torch_path

        path = torch_path(ctx.arch, ctx.session.arch_how, None)
        say(f"note: {path['why']} ({', then '.join(path['commands'])}); this build is for a "
            "change of ours (patches, tuning, another AOTriton)")  # fmt: skip
    if not ctx.flash_attention:
        say(
            f"note: {ctx.arch.name} has no AOTriton kernels; torch is built without flash "
            "attention (--no-enable-pytorch-flash-attention)"
        )
    for stage in ctx.enabled:
        if stage == "checkout":
            continue
        problem = flash_attention_problem(
            ctx.arch, build_argv(ctx, stage, False), ctx.flash_attention
        )
        if problem:
            cause = "" if ctx.build_triton else " (--skip triton)"
            raise UserError(f"refusing to build{cause}: {problem}; drop --skip triton")
    check_matrix(ctx)
    check_pin_set(ctx)
    todo = plan(ctx)
    skipped = [s for s in ctx.enabled if s not in todo]
    if skipped:
        say(f"done already (stamps current): {', '.join(skipped)}")
    if not todo:
        say("nothing to build: every stage is up to date (--from STAGE or --force to rebuild)")
    for stage in todo:
        say(f"=== stage {stage} ===")
        stamp = stage_stamp(ctx.work, stage)
        inputs = stage_inputs(ctx, stage)
        previous = stamps.read(stamp) or {}
        if not ctx.runner.dry_run:
            stamps.remove(stamp)  # a stage that does not finish is never "done"
        if stage == "checkout":
            facts = run_checkout(ctx, previous)
        else:
            facts = run_build_stage(ctx, stage, inputs)
        if not ctx.runner.dry_run:
            stamps.write(stamp, inputs, **facts)
    if ctx.runner.dry_run:
        say(
            f"[dry-run] afterwards: the wheels that appeared in {ctx.out} during each stage are "
            f"listed in {manifest_path(ctx.work)}"
        )
        return
    manifest = write_manifest(ctx)
    files = [w["file"] for w in manifest["wheels"]]
    say(f"wheels of this build ({manifest_path(ctx.work)}):")
    for record in manifest["wheels"]:
        say(f"  {record['project']} {record['version']}: {record['file']}")
    say("install them into the env with:")
    say("  nox -s install_wheels")
    say("or by hand:")
    say("  " + shlex.join(install_argv(ctx.python, files)))
