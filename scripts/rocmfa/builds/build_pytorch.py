"""`nox -s build_pytorch`: torch (triton in its call), audio, vision (apex) wheels through
TheRock's scripts, one stamped stage per call; docs/pytorch-and-ck.md tells the whole story."""

import contextlib
import json
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from rocmfa.builds import compile_cache
from rocmfa.builds.build_aotriton import check_pairing
from rocmfa.env import rocm_sdk, session_env
from rocmfa.env.doctor import torch_path
from rocmfa.plumbing import options, pin_files, stamps
from rocmfa.plumbing.commands import choose_jobs
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import STAGES, BuildPytorchOptions
from rocmfa.sources import checkouts, pins, update_pins

BUILD_SCRIPT = "build_prod_wheels.py"
MANIFEST_NAME = "build_pytorch-manifest.json"
SOURCE_MANIFEST_NAME = "build_pytorch-sources.json"
CHECKOUT_DEPTH = "1"
TORCH_GIB_PER_JOB = 3.0  # HIP translation units of PyTorch; MAX_JOBS otherwise = CPU count


@dataclass(frozen=True)
class Component:  # a row of data/pytorch_components.toml, whose header says what each field is
    key: str
    stage: str
    pin_key: str
    hipify: bool
    wheels: tuple[str, ...]
    related: str | None = None
    build_flag: str | None = None


COMPONENTS = tuple(Component(**c | {"wheels": tuple(c["wheels"])}) for c in pin_files.COMPONENTS)
AFTER = dict.fromkeys(STAGES[2:], "torch") | {"torch": "checkout"}  # the stage each one needs


def manifest_path(work: Path) -> Path:
    return work / MANIFEST_NAME


def stage_stamp(work: Path, stage: str) -> Path:
    return options.stamp_path(work, "build_pytorch-" + stage)


def enabled_stages(skip: Sequence[str], with_apex: bool) -> list[str]:
    return [s for s in STAGES if s not in skip and (with_apex or s != "apex")]


def install_argv(python: Path, files: list[str]) -> list[str]:
    return [str(python), "-m", "pip", "install", "--no-deps", "--force-reinstall", *files]


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {e.name: (e.stat().st_size, e.stat().st_mtime_ns) for e in directory.glob("*.whl")}


def produced_wheels(out: Path, before: Mapping, stage: str) -> list[dict[str, Any]]:
    records = []
    for name in sorted(n for n, st in snapshot(out).items() if before.get(n) != st):
        try:
            project, version, _build, tags = parse_wheel_filename(name)
        except InvalidWheelFilename as e:
            raise UserError(f"{out / name}: not a valid wheel file name ({e})") from None
        path = out / name
        record = {
            "project": str(project),
            "version": str(version),
            "tags": sorted(str(t) for t in tags),
            "file": str(path),
            "sha256": stamps.file_sha256(path),
            "size": path.stat().st_size,
            "stage": stage,
        }
        records.append(record)
    wanted = next(c.wheels for c in COMPONENTS if c.stage == stage)  # torch's: not triton's
    if not any(r["project"] in wanted for r in records):
        raise UserError(f"stage {stage} finished but no {'/'.join(wanted)} wheel appeared in {out}")
    return records


def resolve_source(component: Component, pytorch_pin: pins.Pin, work: Path) -> tuple:
    """(origin, hashtag, how): an explicit [pytorch.<x>] pin, else what the pinned PyTorch says."""
    if component.key == "pytorch":
        return pytorch_pin.url, pytorch_pin.commit, pytorch_pin.source
    table = pytorch_pin.data.get(component.pin_key) or {}
    ref = table.get("ref") if table.get("ref") != pin_files.FROM_PYTORCH else None
    if table.get("commit") or ref:  # a commit, else a tag or branch
        where = f"pins/pytorch.toml [pytorch.{component.pin_key}]"
        return table.get("url"), table.get("commit") or ref, where
    origin, commit, how = update_pins.companion_from_torch(
        component.related, pytorch_pin, work, checkout=True
    )
    if component.key == "triton":  # its ci_commit_pins file names no origin
        origin = "https://github.com/ROCm/triton.git"
    if commit is None:  # no entry there, or (a plan) no torch checkout yet
        how += " (read after torch's checkout; none: TheRock's default)"
    return table.get("url") or origin, commit, how


def read_head(checkout: Path) -> str | None:
    if not (checkout / ".git").exists():  # not the HEAD of a repository around it
        return None
    argv = ["git", "-C", str(checkout), "rev-parse", "--verify", "-q", "HEAD"]
    return subprocess.run(argv, capture_output=True, text=True).stdout.strip() or None


@dataclass(frozen=True)
class Context(session_env.OnSession):
    session: session_env.SessionEnv
    opts: BuildPytorchOptions
    therock_pin: pins.Pin
    pytorch_pin: pins.Pin
    rocm_version: str
    python_tag: str
    env_identity: str
    aotriton: Path | None
    aotriton_digest: str
    flash_attention: bool  # the arch has AOTriton kernels, upstream or from our patch set
    max_jobs: int
    cache: compile_cache.CachePlan

    def src(self, key: str) -> Path:  # <work>/src/<key>
        return options.src_dir(self.work, key)

    @property
    def scripts_dir(self) -> Path:
        return self.src("therock") / "external-builds" / "pytorch"

    @property
    def out(self) -> Path:
        return self.work / "wheels"

    @property
    def enabled(self) -> list[str]:
        return enabled_stages(self.opts.skip, self.opts.with_apex)

    @property
    def build_triton(self) -> bool:  # in the torch call (--skip triton: not at all)
        return "triton" not in self.opts.skip

    def components(self) -> list[Component]:  # what the checkout stage checks out
        t = self.build_triton
        return [c for c in COMPONENTS if c.stage in self.enabled and (c.key != "triton" or t)]


def aotriton_for_torch(arch: Any, work: Path, runner: Any, requested: str | None) -> tuple:
    """(AOTRITON_INSTALLED_PREFIX, digest of what built it, flash attention): --aotriton-prefix,
    build_aotriton's install (or a plan's), else none; gfx908 on 0.13b needs our patched one."""

    def has_lib(prefix: Path) -> bool:  # what PyTorch's aotriton.cmake needs
        return (prefix / "lib" / "libaotriton_v2.so").is_file() and (prefix / "include").is_dir()

    stamp = options.stamp_path(work, "aotriton-built")
    built = stamps.read(stamp) or {}
    planned = stamps.planned(stamp) or {}
    default = options.build_dir(work, "aotriton") / "install"
    aotriton = None
    how = "build_aotriton"
    digest = str(built.get("inputs_digest"))
    if requested:
        aotriton = Path(requested).expanduser().resolve()
        how = "--aotriton-prefix"
        if not has_lib(aotriton):
            raise UserError(f"--aotriton-prefix {aotriton}: no lib/libaotriton_v2.so and include/")
        digest = str(aotriton)
    elif built.get("install_prefix") and has_lib(Path(built["install_prefix"])):
        aotriton = Path(built["install_prefix"])
    elif has_lib(default):
        aotriton = default
        digest = str(default)
    elif planned.get("install_prefix"):
        aotriton = Path(planned["install_prefix"])
        how = "build_aotriton, which fills it earlier in this run"
        digest = "<digest of build_aotriton's build to come>"
    patched = False
    if not arch.aotriton_supported() and arch.aotriton_patched:
        version = str(pins.load_pin("aotriton", workdir=work).data.get("version") or "")
        patched = bool(arch.aotriton_patched_pack(version))
    built_for = (built.get("inputs") or {}).get("arch")
    ours = how == "--aotriton-prefix" or built_for in (arch.name, None)
    if patched and (aotriton is None or not ours):
        runner.refuse(
            f"{arch.name}: torch gets flash attention only from AOTriton {version} with our "
            f"patch set; run nox -s build_aotriton -- --arch {arch.name} first"
        )
        aotriton = default
        how = "build_aotriton (after it runs)"
    if aotriton:
        runner.say(f"AOTriton: {aotriton} from {how} -> AOTRITON_INSTALLED_PREFIX")
    elif arch.aotriton_supported():
        runner.say("AOTriton: none built here; torch's build fetches what its aotriton.cmake pins")
    return aotriton, digest if aotriton else "", arch.aotriton_supported() or patched


def make_context(opts: BuildPytorchOptions) -> Context:
    session = session_env.open_env(opts)
    arch = session.arch
    work = session.work
    runner = session.runner
    if arch.vendor != "amd":
        raise UserError(f"build_pytorch builds for AMD GPUs; {arch.name} is not one")
    runner.say(session.describe())
    therock_pin = pins.load_pin("therock", workdir=work)
    pytorch_pin = update_pins.resolve_for_build("pytorch", runner, workdir=work, force=opts.force)
    runner.say(pin_files.describe_line(pin_files.pins_dir()))
    runner.say(f"pins: {therock_pin.describe()}; {pytorch_pin.describe()}")
    if session.ready:
        rocm_version = session.ask([session.tool("rocm-sdk"), "version"], "$(rocm-sdk version)")
    else:  # a plan before setup_env: it installs exactly the pinned version
        rocm_version = rocm_sdk.load_pin().version
        pinned = f"ROCm SDK {rocm_version}: pinned in pins/rocm.toml, setup_env installs it"
        runner.say(runner.plan_line(pinned) or pinned)
    tag = "import sys; print('cp%d%d' % sys.version_info[:2])"
    python_tag = runner.ask([session.python, "-c", tag], "$(python tag)")
    aotriton, aotriton_digest, flash = aotriton_for_torch(arch, work, runner, opts.aotriton_prefix)
    jobs, why = choose_jobs(opts.jobs, TORCH_GIB_PER_JOB)
    runner.say(f"compile: MAX_JOBS={jobs}: {why}")
    env_identity = session_env.env_identity(session.prefix) if session.ready else ""
    cache = compile_cache.plan_cache(  # --cache not given: a plan that does nothing
        opts.cache,
        work=work,
        arch=arch.name,
        toolchain={"rocm": rocm_version, "python": python_tag, "env": env_identity},
        env=session.environ,
        runner=runner,
        planned=not session.ready,
    )
    return Context(
        session=session,
        opts=opts,
        therock_pin=therock_pin,
        pytorch_pin=pytorch_pin,
        rocm_version=rocm_version,
        python_tag=python_tag,
        env_identity=env_identity,
        aotriton=aotriton,
        aotriton_digest=aotriton_digest,
        flash_attention=flash,
        max_jobs=jobs,
        cache=cache,
    )


def stage_inputs(ctx: Context, stage: str) -> dict[str, Any]:
    if stage == "checkout":
        pin = ctx.pytorch_pin
        sets = {c.key: checkouts.available_patch_sets(c.key) for c in ctx.components()}
        return {
            "therock": ctx.therock_pin.commit,
            "pytorch": [pin.url, pin.commit],
            "companions": {c.key: pin.data.get(c.pin_key) for c in ctx.components()},
            "patches": {
                k: {c: checkouts.patch_set_digest(k, c) for c in v} for k, v in sets.items()
            },
            "depth": CHECKOUT_DEPTH,
        }
    dep = AFTER.get(stage)
    return {
        "after": (dep, (stamps.read(stage_stamp(ctx.work, dep)) or {}).get("inputs_digest")),
        "config": stage_config(ctx, stage),
        "python": ctx.python_tag,
        "env": ctx.env_identity,
        "compile_cache": ctx.cache.spec.tool if ctx.opts.cache else None,
        "version_suffix": version_suffix(ctx),
    }


def stage_config(ctx: Context, stage: str) -> dict[str, Any]:
    """What the CMake cache remembers: a change means a clean rebuild."""
    if stage != "torch":
        return {"arch": ctx.arch.name}
    return {
        "arch": ctx.arch.name,
        "triton": ctx.build_triton,
        "build_tests": ctx.opts.build_tests,
        "flash_attention": ctx.flash_attention,
        "aotriton": [str(ctx.aotriton) if ctx.aotriton else None, ctx.aotriton_digest],
    }


def version_suffix(ctx: Context) -> str:
    """The wheels' version suffix `+rocmfa<identity>.rocm<SDK>`: TheRock's default
    (+rocm<SDK> or +devrocm<SDK> @ 89553ce3) with this build's identity first."""
    checkout = stage_stamp(ctx.work, "checkout")
    if not stamps.is_current(checkout, stage_inputs(ctx, "checkout")):
        identity = "<identity: digest of the checkout's commits and patches, after checkout>"
    else:  # the checkout's inputs (pins, patch sets) and heads, and what torch is built with
        stamp = stamps.read(checkout) or {}
        built = [ctx.aotriton_digest, ctx.arch.name, ctx.rocm_version]
        identity = stamps.digest([stamp["inputs_digest"], stamp.get("heads"), *built])[:8]
    sdk = ctx.rocm_version
    with contextlib.suppress(InvalidVersion):  # a plan's placeholder is shown as it is
        sdk = str(Version(sdk)).replace("+", "-")
    base = "devrocm" if "dev" in ctx.rocm_version else "rocm"
    return f"+rocmfa{identity}.{base}{sdk}"


def build_argv(ctx: Context, stage: str, clean: bool) -> list[str]:
    argv = [str(ctx.python), str(ctx.scripts_dir / BUILD_SCRIPT), "build", "--no-install-rocm"]
    argv += ["--output-dir", str(ctx.out), "--pytorch-rocm-arch", ctx.arch.name]
    argv += ["--version-suffix", version_suffix(ctx), "--clean" if clean else "--no-clean"]
    argv += ctx.cache.therock_flags()
    for c in COMPONENTS:  # this stage's dirs and --build-*; --no-build-* for the others
        built = c.stage == stage and (c.key != "triton" or ctx.build_triton)
        argv += [f"--{c.key.replace('_', '-')}-dir", str(ctx.src(c.key))] if built else []
        argv += [f"--{'' if built else 'no-'}build-{c.build_flag}"] if c.build_flag else []
    if stage == "torch":
        argv.append(f"--{'' if ctx.flash_attention else 'no-'}enable-pytorch-flash-attention")
    return argv


def build_sets(ctx: Context, stage: str) -> dict[str, str]:
    sets = {"MAX_JOBS": str(ctx.max_jobs)}
    if stage == "torch":
        sets["BUILD_TEST"] = "1" if ctx.opts.build_tests else "0"
        sets |= {"AOTRITON_INSTALLED_PREFIX": str(ctx.aotriton)} if ctx.aotriton else {}
    return sets | ctx.cache.build_sets(ctx.runner.base_env)


def protect_checkout(ctx: Context, dest: Path, recorded: str | None) -> None:
    """TheRock's checkout scripts force-checkout: never let them eat the user's work."""
    if not (dest / ".git").exists():
        return
    changes = ctx.runner.apply(checkouts.tracked_changes, ctx.runner, dest)
    if changes is None:  # a plan: TheRock's checkout does not run either
        return
    problem = f"has local edits ('{changes[0].strip()}')" if changes else None
    if not changes and recorded and (head := read_head(dest)) != recorded:
        problem = f"HEAD {str(head)[:12]} is not the {recorded[:12]} this build left there"
    if problem and not ctx.opts.discard_local_edits:
        raise UserError(
            f"{dest} {problem}; TheRock's checkout would discard it - keep it on a "
            "branch or stash it, or pass --discard-local-edits"
        )
    if problem:
        ctx.runner.say(f"--discard-local-edits: {dest} {problem}; checking out over it")


def check_out(ctx: Context, component: Component, recorded: str | None) -> dict[str, Any]:
    """One component: TheRock's checkout, our patch set by commit (before hipify), hipify."""
    key = component.key
    name = key.removeprefix("pytorch_").replace("pytorch", "torch")
    dest = ctx.src(key)
    script = ctx.scripts_dir / f"pytorch_{name}_repo.py"
    protect_checkout(ctx, dest, recorded)
    origin, hashtag, how = resolve_source(component, ctx.pytorch_pin, ctx.work)
    if hashtag is None:
        pin_it = f"pin it in pins/pytorch.toml [pytorch.{component.pin_key}]"
        warning = f"warning: {key} is not pinned ({how}); TheRock picks its default - {pin_it}"
        ctx.runner.apply(ctx.runner.say, warning)
    # Patch sets are keyed by the commit the source is at, whatever form its ref takes: a
    # 40-hex pin is known now; a tag, a branch or TheRock's default is read from HEAD.
    known = hashtag if pin_files.HEX40.fullmatch(hashtag or "") else None
    patch_set = checkouts.patch_set_for(key, known) if known else None
    hipify_later = bool(patch_set or not known) and component.hipify
    ctx.runner.say(f"{key}: {hashtag or 'default'} from {how}")
    argv = [ctx.python, script, "checkout", "--checkout-dir", dest]
    argv += ["--repo-hashtag", hashtag] if hashtag else []
    argv += ["--gitrepo-origin", origin] if origin else []
    argv += ["--depth", CHECKOUT_DEPTH, "--jobs", "10"]
    argv += ["--torch-dir", ctx.src("pytorch")] if key != "pytorch" else []
    argv += [f"--{'no-' if hipify_later else ''}hipify"] if component.hipify else []
    ctx.runner.run(argv, cwd=ctx.scripts_dir)
    commit = known or ctx.runner.apply(read_head, dest)
    applied = checkouts.apply_patch_set(key, commit, dest, ctx.runner) if commit else []
    if not commit:
        ctx.runner.done(f"{key}: patches/{key}/<the commit checked out>/ goes in before hipify")
    if hipify_later:
        ctx.runner.run([ctx.python, script, "hipify", "--checkout-dir", dest], cwd=ctx.scripts_dir)
    return {"origin": origin, "hashtag": hashtag, "commit": commit, "how": how, "patches": applied}


def run_checkout(ctx: Context, previous: Mapping[str, Any]) -> dict[str, Any]:
    force = ctx.opts.discard_local_edits
    checkouts.ensure_checkout(ctx.therock_pin, ctx.src("therock"), ctx.runner, force=force)
    for sub in (c.key for c in COMPONENTS):  # build_prod_wheels builds any dir in its folder
        if ctx.runner.apply((ctx.scripts_dir / sub).exists):
            raise UserError(
                f"{ctx.scripts_dir / sub} exists: TheRock's {BUILD_SCRIPT} would build it in "
                "every stage; move it away (our checkouts live in the work dir)"
            )
    recorded = previous.get("heads") or {}
    sources = {c.key: check_out(ctx, c, recorded.get(c.key)) for c in ctx.components()}
    heads = {c.key: read_head(ctx.src(c.key)) or "" for c in ctx.components()}
    said = f"the checked-out commits go to {ctx.work / SOURCE_MANIFEST_NAME} (TheRock's "
    said += "source-manifest form: its checkout_from_manifest.py reproduces the tree)"
    ctx.runner.apply(write_source_manifest, ctx, sources, say=said)
    return {"heads": heads, "sources": sources}


def write_source_manifest(ctx: Context, sources: Mapping[str, Mapping[str, Any]]) -> None:
    """The checkout in TheRock's source-manifest form (schema_version 1;
    generate_pytorch_source_manifest.py @ 89553ce3): upstream commits, before our patches."""
    manifest: dict[str, Any] = {"schema_version": 1}
    for key, source in sources.items():
        entry = {"repo": source.get("origin") or "", "commit": source.get("commit") or ""}
        hashtag = ctx.pytorch_pin.ref if key == "pytorch" else source.get("hashtag")
        if hashtag and hashtag != entry["commit"]:
            entry["branch"] = hashtag
        manifest[key] = entry
    manifest["therock"] = {
        "repo": ctx.therock_pin.url,
        "commit": ctx.therock_pin.commit,
        "branch": ctx.therock_pin.ref,
        "version": ctx.rocm_version,
    }
    stamps.write_text_atomic(ctx.work / SOURCE_MANIFEST_NAME, json.dumps(manifest, indent=2))


def run_build_stage(ctx: Context, stage: str) -> dict[str, Any]:
    cwd = options.build_dir(ctx.work, "build_pytorch")
    config_file = cwd / f"{stage}.config.json"
    clean = ctx.opts.clean
    config = stage_config(ctx, stage)
    if (previous := stamps.read(config_file)) is not None and previous != config and not clean:
        changed = f"{stage}: build settings changed since the last build ({previous} -> {config})"
        ctx.runner.say(f"{changed}; passing --clean so the CMake cache keeps none of the old ones")
        clean = True
    argv = build_argv(ctx, stage, clean)
    if stage == "torch":
        built = "triton (its only build of the run) and torch" if ctx.build_triton else "torch"
        ctx.runner.say(f"torch: TheRock builds {built} and pip-installs them into {ctx.python}")
    ctx.runner.apply(cwd.mkdir, parents=True, exist_ok=True)
    ctx.runner.apply(stamps.write_text_atomic, config_file, json.dumps(config, sort_keys=True))
    before = snapshot(ctx.out)
    with compile_cache.compiling(ctx.cache, ctx.runner, ctx.work, f"build_pytorch {stage}"):
        ctx.runner.run(argv, cwd=cwd, sets=build_sets(ctx, stage))
    wheels = ctx.runner.apply(produced_wheels, ctx.out, before, stage) or []
    for record in wheels:
        ctx.runner.say(f"{stage}: built {Path(record['file']).name}")
    return {"wheels": wheels, "argv": argv}


def done(ctx: Context, stage: str) -> bool:
    stamp = stamps.read(stage_stamp(ctx.work, stage)) or {}
    if not stamps.is_current(stage_stamp(ctx.work, stage), stage_inputs(ctx, stage)):
        return False
    if stage != "checkout":  # the wheels it recorded are still there, unchanged in size
        sizes = [(Path(r["file"]), r["size"]) for r in stamp.get("wheels", [])]
        return all(path.is_file() and path.stat().st_size == size for path, size in sizes)
    heads = stamp.get("heads") or {}
    return (ctx.src("therock") / ".git").exists() and all(
        read_head(ctx.src(c.key)) == heads.get(c.key) for c in ctx.components()
    )


def plan(ctx: Context) -> list[str]:
    order = ctx.enabled
    start = ctx.opts.only or ctx.opts.from_stage
    flag = "--only" if ctx.opts.only else "--from"  # they exclude each other
    if start and start not in order:
        raise UserError(f"{flag} {start}: that stage is not part of this build (see --skip)")
    if start:
        for stage in ("checkout", "torch")[: STAGES.index(start)]:  # what it builds on
            if not done(ctx, stage):
                raise UserError(
                    f"{flag} {start}: stage {stage} is not done (or its inputs changed); "
                    f"run without {flag} to resume, or {flag} {stage}"
                )
        return [start] if ctx.opts.only else order[order.index(start) :]
    if ctx.opts.force:
        return list(order)
    todo: list[str] = []
    for stage in order:
        if AFTER.get(stage) in todo or not done(ctx, stage):
            todo.append(stage)
    return todo


def write_manifest(ctx: Context) -> dict[str, Any]:
    by_project: dict[str, dict[str, Any]] = {}
    for stage in ctx.enabled[1:]:  # after checkout; later stages win (triton from torch's)
        for record in (stamps.read(stage_stamp(ctx.work, stage)) or {}).get("wheels", []):
            by_project[record["project"]] = record
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
    stamps.write_text_atomic(manifest_path(ctx.work), json.dumps(manifest, indent=2))
    return manifest


def checks_before_building(ctx: Context) -> None:
    """Flash attention kept; the pin set and torch release/X.Y x our AOTriton (--force: warn)."""
    if "torch" in ctx.enabled and ctx.flash_attention and not ctx.build_triton:
        raise UserError(
            f"refusing to build torch for {ctx.arch.name} without flash attention (--skip "
            f"triton): TheRock's {BUILD_SCRIPT} turns flash attention off on Linux when triton "
            "is not built in the same call; drop --skip triton"
        )
    built = stamps.read(options.stamp_path(ctx.work, "aotriton-built")) or {}
    if not ctx.aotriton or built.get("install_prefix") != str(ctx.aotriton):
        return
    aotriton = pins.load_pin("aotriton", workdir=ctx.work)
    pinned = ((built.get("inputs") or {}).get("pin") or {}).get("version")
    version = str(pinned or aotriton.data.get("version") or "")
    torch = re.search(r"release/(\d+\.\d+)", ctx.pytorch_pin.ref or "")
    release = torch[1] if torch else None
    lines = check_pairing(
        ctx.arch, aotriton, version, release, runner=ctx.runner, work=ctx.work, force=ctx.opts.force
    )
    for line in lines[1:]:  # its first line was said already
        ctx.runner.say(line)


def build_pytorch(opts: BuildPytorchOptions) -> None:
    ctx = make_context(opts)
    say = ctx.runner.say
    if ctx.arch.therock_torch_flash:  # the long way where a prebuilt flash torch exists: say so
        path = torch_path(ctx.arch, ctx.session.choice.how, None)
        why = f"{path['why']} ({', then '.join(path['commands'])})"
        say(f"note: {why}; this build is for a change of ours (patches, tuning, another AOTriton)")
    if not ctx.flash_attention:
        say(f"note: {ctx.arch.name} has no AOTriton kernels; torch builds without flash attention")
    checks_before_building(ctx)
    todo = plan(ctx)
    if skipped := [s for s in ctx.enabled if s not in todo]:
        say(f"done already (stamps current): {', '.join(skipped)}")
    if not todo:
        say("nothing to build: every stage is up to date (--from STAGE or --force to rebuild)")
    for stage in todo:
        say(f"=== stage {stage} ===")
        stamp = stage_stamp(ctx.work, stage)
        inputs = stage_inputs(ctx, stage)
        previous = stamps.read(stamp) or {}
        ctx.runner.apply(stamp.unlink, missing_ok=True)  # an unfinished stage is never "done"
        facts = run_checkout(ctx, previous) if stage == "checkout" else run_build_stage(ctx, stage)
        ctx.runner.apply(stamps.write, stamp, inputs, **facts)
    listed = f"{ctx.out} during each stage: listed in {manifest_path(ctx.work)}"
    manifest = ctx.runner.apply(write_manifest, ctx, say=f"the wheels that appeared in {listed}")
    if manifest is None:
        return
    say(f"wheels of this build ({manifest_path(ctx.work)}):")
    for record in manifest["wheels"]:
        say(f"  {record['project']} {record['version']}: {record['file']}")
    argv = shlex.join(install_argv(ctx.python, [w["file"] for w in manifest["wheels"]]))
    say(f"install them into the env with:\n  nox -s install_wheels\nor by hand:\n  {argv}")
