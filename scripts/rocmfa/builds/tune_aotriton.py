"""`nox -s tune_aotriton`: tune AOTriton's flash-attention kernels on this GPU, keep the result
as data, rebuild with it, and install it only when `validate` passes.

    1 build for tuning   AOTRITON_BUILD_FOR_TUNING=ON, AOTRITON_NAME_SUFFIX (no clash with torch's
                         libaotriton), AOTRITON_OVERRIDE_TARGET_GPUS=<arch>_modN; own build dir
    2 tune               the pinned commit's own tuner, one run per (head_dim, dtype)
    3 store              a candidate tuning database (rocmfa.sources.tuning_db) with sha256s
    4 rebuild            the normal build, using the candidate
    5 validate (gate)    scripts/rocmfa/probes/validate.py with the candidate preloaded
    6 install + publish  into the env's torch (build_aotriton's version/image guards), and the
                         database into pins/tuning/aotriton/<commit>/<arch>/ for later builds

Only cpptune is driven (test/tune_flash.py of AOTriton <= 0.10: a pin whose `tuner` is
"cpptune"). Upstream 0.13b tunes with Tuner v3.5 (PostgreSQL + Docker workers over SSH), which
is refused with a pointer to AOTRITON_TUNING_DATABASE_ROOT; so is gfx908 on 0.13b (our patch
set reuses gfx90a's database until one is tuned there). The 0.10b community gfx908 port and its
cpptune are retired (docs/aotriton.md). Progress is kept in work/tuning/<...>/progress.json:
an interrupted run resumes at the first unfinished step, and a tuner run cut midway continues
its own --json_file (cpptune skips the entries already recorded there).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rocmfa.builds import build_aotriton as ba
from rocmfa.builds.aotriton_install import AotritonInstall
from rocmfa.plumbing import paths, stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.datafiles import REPO_ROOT
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import TUNE_DTYPES as DTYPES
from rocmfa.plumbing.options import TuneAotritonOptions
from rocmfa.sources import tuning_db
from rocmfa.sources.patches import patch_set_digest

CPPTUNE = "cpptune"
TUNE_SCRIPT = "test/tune_flash.py"
NAME_SUFFIX = "rocmfa"
VALIDATE_DTYPES = {"float16": "fp16", "bfloat16": "bf16"}
DEFAULT_SEQLENS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
DEFAULT_HEAD_DIMS = (64, 128)


@dataclass(frozen=True)
class TunePlan:
    head_dims: tuple[int, ...]
    dtypes: tuple[str, ...]
    seqlens: tuple[int, ...]

    def chunks(self) -> list[tuple[int, str]]:
        return [(d, t) for d in self.head_dims for t in self.dtypes]

    def as_dict(self) -> dict[str, Any]:  # lists, as read back from progress.json
        return {k: list(v) for k, v in asdict(self).items()}


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UserError(f"{flag} {text!r}: expected a comma list of integers") from None
    if not values or any(v <= 0 for v in values):
        raise UserError(f"{flag} {text!r}: expected positive integers")
    return values


def make_plan(
    *,
    head_dims: str | None = None,
    dtypes: str | None = None,
    seqlens: str | None = None,
) -> TunePlan:
    """The defaults, overridden by --tune-head-dims/-dtypes/-seqlens."""
    chosen_dims = _int_list(head_dims, "--tune-head-dims") if head_dims else DEFAULT_HEAD_DIMS
    chosen_types = DTYPES
    if dtypes:
        chosen_types = tuple(t.strip() for t in dtypes.split(",") if t.strip())
        unknown = [t for t in chosen_types if t not in DTYPES]
        if unknown or not chosen_types:
            raise UserError(f"--tune-dtypes {dtypes!r}: choose from {', '.join(DTYPES)}")
    chosen_seqlens = _int_list(seqlens, "--tune-seqlens") if seqlens else DEFAULT_SEQLENS
    return TunePlan(tuple(chosen_dims), tuple(chosen_types), tuple(chosen_seqlens))


class Progress:
    """Steps done so far for one (commit, patches) build and one plan. Another build starts
    over; another plan keeps the tuning build but not the tuner records, whose task ids
    number another set of cases."""

    def __init__(self, path: Path, key: str, plan: dict[str, Any], runner: Runner) -> None:
        self.path, self.key, self.plan, self.runner = path, key, plan, runner
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        done = data.get("done", []) if data.get("key") == key else []
        self.stale = bool(data) and data.get("plan") != plan
        self.done: list[str] = [s for s in done if s == "build"] if self.stale else done

    def has(self, step: str) -> bool:
        return step in self.done

    def mark(self, step: str) -> None:
        self.done.append(step)
        record = {"key": self.key, "plan": self.plan, "done": self.done}
        self.runner.apply(self.path.parent.mkdir, parents=True, exist_ok=True)
        self.runner.apply(stamps.write_text_atomic, self.path, json.dumps(record, indent=1) + "\n")

    def reset(self) -> None:
        self.done = []
        self.runner.apply(self.path.unlink, missing_ok=True)


def tuner_argv(
    python: str | Path, raw: Path, head_dim: int, dtype: str, seq: list[str]
) -> list[str]:
    """One cpptune run. test/tune_flash.py ends in a Textual app, `app.run(mouse=False,
    inline=True, headless=args.debug_headless)` (port @ 60639c72): --debug_headless lets it run
    without a terminal (nox, CI, ssh without a tty)."""
    return [
        *(python, TUNE_SCRIPT, "--json_file", str(raw), "--d_head", str(head_dim)),
        *("--dtype", dtype, "--seqlen_q", *seq, "--seqlen_k", *seq, "--validate"),
        "--debug_headless",
    ]


def refuse_other_tuners(ctx: ba.Context) -> str:
    """The pin's tuner, when it is the one tune_aotriton drives (cpptune); else a one-line
    error saying how to tune with it and where to store the result."""
    tuner = str(ctx.pin.data.get("tuner", "unknown"))
    if tuner != CPPTUNE:
        where = tuning_db.db_dir(ctx.pin.commit, ctx.arch.name)
        raise UserError(
            f"AOTriton {ctx.version} ({ctx.pin.commit[:12]}) tunes with {tuner}: Tuner v3.5 needs "
            "a PostgreSQL queue and Docker GPU workers over SSH (docs/How To Generate Tuning "
            "Database.md), which tune_aotriton does not drive; tune there, then store its "
            f"amd/{ctx.arch.name}/... files under {where} (kind sharded-sqlite) and "
            "build_aotriton passes them as AOTRITON_TUNING_DATABASE_ROOT"
        )
    return tuner


@dataclass(frozen=True)
class TuningRun:
    """One tune_aotriton run: the build context, the plan, and where its progress is kept."""

    ctx: ba.Context
    plan: TunePlan
    tuner: str
    build: ba.SourceBuild
    progress: Progress
    state_dir: Path

    @property
    def runner(self) -> Runner:
        return self.ctx.session.runner

    @property
    def python(self) -> str:
        return str(self.ctx.session.python)

    @property
    def gpus(self) -> tuple[str, ...]:
        return (f"{self.ctx.arch.name}_mod0",)

    @property
    def tuning_build(self) -> str:
        return f"{self.ctx.source_name}-tuning"


def tune_aotriton(opts: TuneAotritonOptions) -> None:
    ctx = ba.make_context(opts)
    tuner = refuse_other_tuners(ctx)
    plan = make_plan(
        head_dims=opts.tune_head_dims,
        dtypes=opts.tune_dtypes,
        seqlens=opts.tune_seqlens,
    )
    announce(ctx, tuner, plan)
    if already_tuned(ctx, plan, force=opts.force):
        return
    build = ba.source_build(opts, pyaotriton=True)  # cpptune imports the tuning build's binding
    run = resume_or_start(ctx, plan, tuner, build, force=opts.force)
    build_for_tuning(run)  # [1/6]
    records = tune_each_case(run)  # [2/6]
    candidate = store_candidate(run, records)  # [3/6]
    run.runner.say("[4/6] rebuild with the candidate database")
    new = ba.build_from_source(ctx, run.build, tuning=candidate)
    run.runner.say("[5/6] validate (the gate): the tuned build, forward and backward")
    gate(ctx, new, plan, run.runner, run.python, candidate.directory)
    install_and_publish(run, new, candidate)  # [6/6]


def announce(ctx: ba.Context, tuner: str, plan: TunePlan) -> None:
    say = ctx.session.runner.say
    say(
        f"tune_aotriton: {ctx.pin.url} {ctx.version}; arch {ctx.arch.name}; "
        f"tuner {tuner} ({TUNE_SCRIPT})"
    )
    say(
        f"plan: head_dim {','.join(map(str, plan.head_dims))}; {','.join(plan.dtypes)}; "
        f"seqlens {','.join(map(str, plan.seqlens))}"
    )


def already_tuned(ctx: ba.Context, plan: TunePlan, *, force: bool) -> bool:
    """A stored database for this commit, arch and plan: nothing to do (unless --force)."""
    stored = tuning_db.find(ctx.pin.commit, ctx.arch.name)
    if stored is None or force:
        return False
    if not all(stored.meta.get(k) == v for k, v in plan.as_dict().items()):
        return False
    ctx.session.runner.say(
        f"tune_aotriton: already tuned for this plan: {stored.describe()}; nothing run "
        "(--force to tune again)"
    )
    return True


def resume_or_start(
    ctx: ba.Context, plan: TunePlan, tuner: str, build: ba.SourceBuild, *, force: bool
) -> TuningRun:
    """Progress of an earlier run of this build and plan is kept; --force or another plan
    drops the tuner records (another plan keeps the tuning build)."""
    commit, arch = ctx.pin.commit, ctx.arch.name
    runner = ctx.session.runner
    state_dir = ctx.work / "tuning" / f"{ctx.source_name}-{commit[:12]}-{arch}"
    patches = patch_set_digest("aotriton", commit, arch=arch)
    key = stamps.digest({"commit": commit, "patches": patches})
    progress = Progress(state_dir / "progress.json", key, plan.as_dict(), runner)
    if force or progress.stale:
        if force:
            runner.say("--force: starting over, tuning build included")
            progress.reset()
        else:
            runner.say("another plan than last time: tuning again (the tuning build is kept)")
        for old in state_dir.glob("raw-*.json"):
            runner.apply(old.unlink)
    elif progress.done:
        runner.say(f"resuming: done earlier: {', '.join(progress.done)} ({progress.path})")
    return TuningRun(ctx, plan, tuner, build, progress, state_dir)


def build_for_tuning(run: TuningRun) -> None:
    """[1/6] AOTRITON_BUILD_FOR_TUNING with a name suffix, in its own build dir."""
    run.runner.say("[1/6] build for tuning")
    if run.progress.has("build"):
        run.runner.say("  done earlier; skipped")
        return
    ba.build_from_source(
        run.ctx,
        run.build,
        build_name=run.tuning_build,
        extra_cmake=(
            "-DAOTRITON_BUILD_FOR_TUNING=ON",
            f"-DAOTRITON_NAME_SUFFIX={NAME_SUFFIX}",
            f"-DAOTRITON_OVERRIDE_TARGET_GPUS={';'.join(run.gpus)}",
        ),
    )
    run.progress.mark("build")


def tune_each_case(run: TuningRun) -> list[Path]:
    """[2/6] the pinned tuner once per (head_dim, dtype); returns its record files."""
    ctx, runner = run.ctx, run.runner
    src = paths.src_dir(ctx.work, ctx.source_name)
    bindings = paths.build_dir(ctx.work, run.tuning_build) / "bindings"
    chunks = run.plan.chunks()
    records: list[Path] = []
    runner.say(f"[2/6] tune: {len(chunks)} runs")
    seq = [str(s) for s in run.plan.seqlens]
    for i, (head_dim, dtype) in enumerate(chunks, 1):
        step = f"tune:d{head_dim}:{dtype}"
        raw = run.state_dir / f"raw-d{head_dim}-{dtype}.json"
        records.append(raw)
        if run.progress.has(step):
            runner.say(f"  [{i}/{len(chunks)}] head_dim {head_dim} {dtype}: done earlier ({raw})")
            continue
        again = " (continues its records)" if raw.is_file() else ""
        runner.say(f"  [{i}/{len(chunks)}] head_dim {head_dim} {dtype}{again}")
        runner.apply(run.state_dir.mkdir, parents=True, exist_ok=True)
        runner.run(
            tuner_argv(run.python, raw, head_dim, dtype, seq),
            cwd=src,
            sets={"PYTHONPATH": str(bindings)},
        )
        run.progress.mark(step)
    return records


def store_candidate(run: TuningRun, records: list[Path]) -> tuning_db.TuningDb:
    """[3/6] the tuner's records as a candidate database (sha256 per file), not published."""
    ctx, runner = run.ctx, run.runner
    commit, arch = ctx.pin.commit, ctx.arch.name
    runner.say("[3/6] store the candidate tuning database (sha256 per file)")
    candidate_dir = run.state_dir / "candidate"
    meta = {**run.plan.as_dict(), "gpus": list(run.gpus)}
    placeholder = tuning_db.TuningDb(
        candidate_dir, commit, arch, "cpptune-json", run.tuner, {}, meta
    )
    what = f"write {candidate_dir}/{{manifest.toml,tune_flash.json}}"
    candidate = runner.apply(write_candidate, run, records, candidate_dir, meta, say=what)
    return candidate or placeholder


def write_candidate(
    run: TuningRun, records: list[Path], candidate_dir: Path, meta: dict[str, Any]
) -> tuning_db.TuningDb:
    combined = run.state_dir / "combined.json"
    with open(combined, "w") as out:
        for raw in records:
            out.write(raw.read_text() if raw.is_file() else "")
    meta["created"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    candidate = tuning_db.write(
        candidate_dir,
        {tuning_db.CPPTUNE_RECORDS: combined},
        commit=run.ctx.pin.commit,
        arch=run.ctx.arch.name,
        kind="cpptune-json",
        tuner=run.tuner,
        meta=meta,
    )
    run.runner.say(f"  {candidate.describe()}")
    return candidate


def install_and_publish(
    run: TuningRun, new: AotritonInstall | None, candidate: tuning_db.TuningDb
) -> None:
    """[6/6] into the env's torch (build_aotriton's guards), the database into pins/tuning."""
    ctx, runner = run.ctx, run.runner
    commit = ctx.pin.commit
    runner.say("[6/6] install into torch and publish the database")
    published_at = tuning_db.db_dir(commit, ctx.arch.name)
    if new is None:  # a plan
        runner.say(
            f"[dry-run] would install into {ctx.in_torch / 'lib'} and copy to {published_at}"
        )
        return
    published = tuning_db.publish(candidate)
    stamp = paths.stamp_path(ctx.work, ba.STAMP_NAME)
    stamps.remove(stamp)
    how = f"built from {ctx.pin.url} at {commit[:12]} with tuning database {published.directory}"
    inputs = ba.stamp_inputs(ctx, from_release=False, build=run.build)
    ba.install(ctx, new, stamp, inputs, how, no_images=False, force=run.build.force)
    runner.say(f"tuning database stored: {published.directory} (commit it to keep it)")
    run.progress.reset()


def gate(
    ctx: ba.Context,
    new: AotritonInstall | None,
    plan: TunePlan,
    runner: Runner,
    python: str,
    candidate: Path,
) -> None:
    """validate.py against the candidate, which is preloaded so torch's DT_NEEDED on
    libaotriton_v2.so.X.Y.Z resolves to it (its images are found next to it); nothing is
    installed before this passes."""
    head_dims = ",".join(map(str, plan.head_dims))
    dtypes = ",".join(VALIDATE_DTYPES[t] for t in plan.dtypes)
    argv = [python, str(REPO_ROOT / "scripts" / "rocmfa" / "probes" / "validate.py")]
    argv += ["--backends", "flash", "--head-dims", head_dims, "--dtypes", dtypes]
    if new is None:  # dry run
        lib = "<rebuilt install>/lib/libaotriton_v2.so.X.Y.Z"
        runner.run(argv, cwd=REPO_ROOT, sets={"LD_PRELOAD": lib})
        return
    # The preload only tests the candidate when torch asks for this very runtime version.
    shipped = AotritonInstall.read(ctx.in_torch / "lib", ctx.in_torch / "include")
    if shipped.runtime != new.runtime:
        raise UserError(
            f"{ctx.in_torch / 'lib'} has AOTriton {shipped.runtime}, the tuned build is "
            f"{new.runtime}: the gate cannot test it, nothing installed (build torch against "
            "this AOTriton first: nox -s build_pytorch)"
        )
    candidate_lib = new.lib / f"libaotriton_v2.so.{new.runtime}"
    result = runner.run(argv, cwd=REPO_ROOT, sets={"LD_PRELOAD": str(candidate_lib)}, check=False)
    if result.returncode != 0:
        raise UserError(
            f"validate failed (exit {result.returncode}) for the tuned build in {new.lib}: NOT "
            f"installed, torch keeps what it has; the candidate database stays in {candidate} "
            "(not published)"
        )
