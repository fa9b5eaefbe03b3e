"""`nox -s kernel_check` (docs/kernel-check.md): AOTriton's generator on the patched tree, then
a sample of its compile jobs with the recorded Triton, no GPU; builds run it before cmake too."""

import functools
import json
import os
import shlex
import sys
import tarfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rocmfa.builds import kernel_build
from rocmfa.builds.kernel_build import Tree
from rocmfa.env import archs
from rocmfa.plumbing import options, stamps
from rocmfa.plumbing.commands import Runner, choose_jobs, last_line, runner_for
from rocmfa.plumbing.errors import UserError
from rocmfa.sources import pins
from rocmfa.sources.checkouts import apply_patch_set, ensure_checkout

SUMMARY = "summary.json"
SUMMARY_SCHEMA = "rocmfa-kernel-check/1"  # publish's manifest and the results page read it
TARGET = "{}_mod0"  # AOTriton's --target_gpus for an arch: python/gpu_targets.py @ 6e00ef3e
GIB_PER_JOB = 1.0  # one compile job peaks well below 1 GiB (Triton -> LLVM AMDGPU on CPU)


def summary_path(work: Path, arch: str) -> Path:  # the check of work/src/aotriton
    return Tree(options.src_dir(work, "aotriton"), "", arch, "").build / SUMMARY


def compiler_python(tree: Tree, work: Path, runner: Runner) -> str:
    """$ROCMFA_KERNEL_PYTHON, else the check's own venv with the recorded Triton."""
    if given := os.environ.get(kernel_build.PYTHON_ENV):
        runner.say(f"kernel check: compiler Python {given} (${kernel_build.PYTHON_ENV})")
        return given
    venv = work / kernel_build.VENV.format(tree.triton)
    python = venv / "bin" / "python"
    marker = venv / "rocmfa-kernel-venv.json"
    requirements = tree.src / "requirements.txt"  # every AOTriton with python/compile.py has it
    text = requirements.read_text() if requirements.is_file() else None  # a plan's tree
    wanted = {"triton": tree.triton, "requirements": text}
    if python.exists() and stamps.is_current(marker, wanted):
        runner.say(f"kernel check: venv {venv} (triton {tree.triton}) is ready")
        return str(python)
    runner.run([sys.executable, "-m", "venv", "--clear", str(venv)])
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    runner.run([*pip, f"triton=={tree.triton}", "-r", str(requirements)])
    runner.apply(stamps.write, marker, wanted)
    return str(python)


def generate(tree: Tree, python: str, runner: Runner) -> Path:
    """Bare.compile from AOTriton's own generator for its target; one line when it fails."""
    database = tree.build / "database"
    pkg = tree.build / "pkg"
    target = TARGET.format(tree.arch)
    shards = sorted((tree.src / "modules" / "database").rglob("*.sqlite3.tar.xz"))
    say = f"extract {len(shards)} tuning database shards of {tree.src} into {database}"
    runner.apply(_unpack_tree, tree, shards, database, pkg, say=say)
    compose = [python, "-m", "aotriton.database_compose", "--decomposed", str(database)]
    compose += ["--database_file", str(database / "tuning_database.sqlite3")]
    gen = [python, "-X", "utf8", "-m", "aotriton.generate", "--root_dir", str(tree.src)]
    gen += ["--target_gpus", target, "--build_dir", str(tree.build)]
    for argv, what in ((compose, "database_compose"), (gen, "generator")):
        sets = {"PYTHONPATH": str(pkg)}
        done = runner.run(argv, cwd=tree.src, sets=sets, capture=True, check=False)
        if done.returncode != 0:
            why = f"exit {done.returncode}: {last_line(done.stderr or done.stdout)}"
            raise UserError(f"kernel check: AOTriton's {what} failed for {target} ({why})")
    return tree.build / "Bare.compile"


def _unpack_tree(tree: Tree, shards: list[Path], database: Path, pkg: Path) -> None:
    """The shards extracted; python/ importable as `aotriton` through a symlink (tree untouched)."""
    for shard in shards:
        rel = shard.relative_to(tree.src / "modules" / "database").parent
        (database / rel).mkdir(parents=True, exist_ok=True)
        with tarfile.open(shard) as archive:
            archive.extractall(database / rel, filter="data")
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "aotriton").unlink(missing_ok=True)
    (pkg / "aotriton").symlink_to(tree.src / "python", target_is_directory=True)


def settings_line(python: str | None) -> str:
    """The Triton settings this environment gives every compile (and key), unknown ones named."""
    knobs = set(kernel_build.triton_info(python)["knobs"]) if python else set()
    env = kernel_build.settings(os.environ, knobs)
    unknown = [k for k in env if knobs and k not in knobs]
    given = ", ".join(f"{k}={v}" for k, v in env.items()) or "none"
    also = f"; {', '.join(unknown)}: not read by this Triton, kept in the key" if unknown else ""
    return f"Triton settings from the environment, in every key and compile: {given}{also}"


def compile_sample(tree: Tree, python: str, store, threads: int, all_jobs, chosen, say):
    """Each chosen job from the store or compiled; counts per family, said as a table."""
    context = tree.key_context()
    compiler = kernel_build.Compiler(python, tree.src / "python/compile.py", dict(context.env))
    with ThreadPoolExecutor(max_workers=threads) as pool:
        build = functools.partial(kernel_build.build_kernel, compiler=compiler, store=store)
        built = pool.map(build, chosen, context.keys(chosen))
        try:
            results = list(built)
        except kernel_build.CompileFailed as error:
            pool.shutdown(cancel_futures=True)
            raise UserError(f"kernel check: {error}") from None
    families = {
        k: {"jobs": n, "sampled": 0, "compiled": 0, "from_store": 0, "seconds": 0.0}
        for k, n in Counter(job.kernel for job in all_jobs).items()
    }
    for job, (how, seconds) in zip(chosen, results, strict=True):
        entry = families[job.kernel]
        entry["sampled"] += 1
        entry["compiled" if how == "compiled" else "from_store"] += 1
        entry["seconds"] = round(entry["seconds"] + seconds, 3)
    row = "{:<32} {:>6} {:>7} {:>8} {:>6} {:>8}".format
    say(row("family", "jobs", "sampled", "compiled", "stored", "seconds"))
    for name, f in sorted(families.items()):
        counts = (f[k] for k in ("jobs", "sampled", "compiled", "from_store"))
        say(row(name, *counts, f"{f['seconds']:.1f}"))
    return context.patches, families


def run_check(tree: Tree, *, runner: Runner, cache: Any, jobs=None, size=None, store=None):
    """The check of a checked-out tree (store: build_aotriton's); the summary (a plan: None)."""
    say = runner.say
    began = time.monotonic()
    work = tree.src.parents[1]
    if not (tree.src / "python" / "compile.py").is_file():  # a plan's tree may not be there yet
        why = f"{tree.src} has no python/compile.py (the layout of AOTriton >= 0.12b)"
        runner.raise_for_real(UserError(f"kernel check: {why}"))
    python = compiler_python(tree, work, runner)
    bare = generate(tree, python, runner)
    threads, why = choose_jobs(jobs, GIB_PER_JOB)
    store = store or kernel_build.open_store(cache, work, tree.arch, runner=runner)
    line = runner.plan_line(
        f"then compile a stratified sample of {bare} (one job per kernel x num_warps x "
        f"num_stages x waves_per_eu{'' if size is None else f', {size} jobs'}) on {threads} "
        "threads, each looked up in the kernel store first, else e.g.:"
    )
    if line:  # with an example compile command, the settings and the summary's path
        job = kernel_build.Job(1, "", python, "", "SRC.py", "KERNEL", 4, 1, 2, tree.arch, "SIG")
        argv = kernel_build.compile_argv(job, python, tree.src / "python/compile.py", Path("OUT"))
        sets = {"TRITON_CACHE_DIR": "<job scratch>/triton", **kernel_build.COMPILE_ENV}
        example = " ".join([*(f"{k}={v}" for k, v in sets.items()), shlex.join(argv)])
        settings = settings_line(kernel_build.known_python(work, tree.triton))
        return say(f"{line}\n  {example}\n  {settings}\n  summary: {tree.build / SUMMARY}")
    if not (all_jobs := kernel_build.read_jobs(bare)):
        raise UserError(f"kernel check: the generator listed no compile job for {tree.arch}")
    chosen = kernel_build.sample(all_jobs, size)
    where = store.describe() if store else "none"
    found = f"{len(all_jobs)} jobs in {len({j.kernel for j in all_jobs})} kernel families"
    say(f"kernel check: {found}; compiling {len(chosen)} ({why}); kernel store: {where}")
    left = sorted(set(map(kernel_build.combo, all_jobs)) - set(map(kernel_build.combo, chosen)))
    if left:
        combos = ", ".join(f"{k} w{w}/s{s}/e{e}" for k, w, s, e in left)
        what = f"{len(left)} (kernel, num_warps/num_stages/waves_per_eu) combinations"
        say(f"kernel check: --sample {size} leaves out {what}: {combos}")
    say(f"kernel check: {settings_line(python)}")
    patches, families = compile_sample(tree, python, store, threads, all_jobs, chosen, say)
    summary = {
        "schema": SUMMARY_SCHEMA,
        "aotriton_commit": tree.commit,
        "tree": str(tree.src),
        "arch": tree.arch,
        "target_gpus": [TARGET.format(tree.arch)],
        "triton": tree.triton,
        "patches": patches,
        "jobs": len(all_jobs),
        "sampled": len(chosen),
        "families": families,
        "wall_s": round(time.monotonic() - began, 3),
        "store": where,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    written = tree.build / SUMMARY
    stamps.write_text_atomic(written, json.dumps(summary, indent=2) + "\n")
    done = f"{len(chosen)} of {len(all_jobs)} jobs compiled or fetched in {summary['wall_s']:.1f} s"
    say(f"kernel check: {tree.arch} OK - {done} (triton {tree.triton}); summary: {written}")
    return summary


def before_build(ctx: Any, src: Path, build: Any, store: Any = None) -> None:
    """build_aotriton / tune_aotriton before cmake: the check, then --workers' cluster."""
    runner = ctx.runner
    if build.workers:
        kernel_build.require(build.workers, build.cache, runner)
    if build.no_images:
        return runner.say("kernel check: skipped (--no-images compiles no kernel)")
    # none with --workers: build_aotriton has refused that already
    if (triton := kernel_build.recorded_triton(ctx.pin.commit)) is None:
        return runner.say(f"kernel check: {kernel_build.NO_TRITON.format(ctx.pin.commit)}; skipped")
    tree = Tree(src, ctx.pin.commit, ctx.arch.name, triton)
    run_check(tree, runner=runner, cache=build.cache, jobs=build.jobs, store=store)
    if build.workers:
        kernel_build.fan_out(tree, build.workers, build.cache, runner)


def kernel_check(opts: Any) -> None:
    choice = archs.resolve_arch(opts.arch)
    runner = runner_for(opts)
    work = options.workdir(opts.workdir)
    pin = pins.load_pin("aotriton", workdir=work)
    if not (triton := kernel_build.recorded_triton(pin.commit)):
        fix = 'add [compiler.<commit>] triton = "X.Y.Z"'
        raise UserError(f"kernel check: {kernel_build.NO_TRITON.format(pin.commit)} ({fix})")
    tree = Tree(options.src_dir(work, "aotriton"), pin.commit, choice.arch.name, triton)
    what = f"AOTriton {pin.commit[:12]} from {pin.source}; arch {tree.arch} ({choice.how})"
    runner.say(f"kernel check: {what}; target {TARGET.format(tree.arch)}; triton {tree.triton}")
    # no submodules: the check needs none; build_aotriton adds them to this checkout later
    ensure_checkout(pin, tree.src, runner, force=opts.discard_local_edits, submodules=())
    apply_patch_set("aotriton", pin.commit, tree.src, runner, arch=choice.arch.name)
    run_check(tree, runner=runner, cache=opts.cache, jobs=opts.jobs, size=opts.sample)
