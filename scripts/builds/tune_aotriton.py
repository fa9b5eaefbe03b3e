"""`nox -s tune_aotriton`: tune AOTriton's flash-attention kernels on this GPU, keep the result
as data, rebuild with it, and install it only when `validate` passes.

    1 build for tuning   AOTRITON_BUILD_FOR_TUNING=ON, AOTRITON_NAME_SUFFIX (no clash with torch's
                         libaotriton), AOTRITON_OVERRIDE_TARGET_GPUS=<arch>_modN; own build dir
    2 tune               the pinned commit's own tuner, one run per (head_dim, dtype)
    3 store              a candidate tuning database (scripts.sources.tuning_db) with sha256s
    4 rebuild            the normal build, using the candidate
    5 validate (gate)    scripts/probes/validate.py with the candidate preloaded
    6 install + publish  into the env's torch (build_aotriton's version/image guards), and the
                         database into pins/tuning/aotriton/<commit>/<arch>/ for later builds

Only cpptune is driven (test/tune_flash.py: AOTriton <= 0.10 and the gfx908 port). Upstream
0.13b tunes with Tuner v3.5 (PostgreSQL + Docker workers over SSH), which is refused with a
pointer to AOTRITON_TUNING_DATABASE_ROOT. Progress is kept in work/tuning/<...>/progress.json:
an interrupted run resumes at the first unfinished step, and a tuner run cut midway continues
its own --json_file (cpptune skips the entries already recorded there).
"""

from __future__ import annotations

import argparse
import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.builds import build_aotriton as ba
from scripts.builds.aotriton_install import AotritonInstall
from scripts.env import condaenv
from scripts.plumbing import paths, stamps
from scripts.plumbing.commands import Runner
from scripts.plumbing.datafiles import REPO_ROOT
from scripts.plumbing.errors import UserError
from scripts.sources import tuning_db
from scripts.sources.patches import patch_set_digest

CPPTUNE = "cpptune"
TUNE_SCRIPT = "test/tune_flash.py"
NAME_SUFFIX = "rocmfa"
DTYPES = ("float16", "bfloat16")
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

    def as_dict(self) -> dict[str, Any]:
        return {
            "head_dims": list(self.head_dims),
            "dtypes": list(self.dtypes),
            "seqlens": list(self.seqlens),
        }


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UserError(f"{flag} {text!r}: expected a comma list of integers") from None
    if not values or any(v <= 0 for v in values):
        raise UserError(f"{flag} {text!r}: expected positive integers")
    return values


def make_plan(opts: argparse.Namespace, ctx: ba.Context) -> TunePlan:
    variant = ctx.variant
    head_dims = variant.tune_head_dims if variant else DEFAULT_HEAD_DIMS
    if getattr(opts, "tune_head_dims", None):
        head_dims = _int_list(opts.tune_head_dims, "--tune-head-dims")
    dtypes = variant.dtypes if variant else DTYPES
    if getattr(opts, "tune_dtypes", None):
        dtypes = tuple(t.strip() for t in opts.tune_dtypes.split(",") if t.strip())
        unknown = [t for t in dtypes if t not in DTYPES]
        if unknown or not dtypes:
            raise UserError(f"--tune-dtypes {opts.tune_dtypes!r}: choose from {', '.join(DTYPES)}")
    seqlens = DEFAULT_SEQLENS
    if getattr(opts, "tune_seqlens", None):
        seqlens = _int_list(opts.tune_seqlens, "--tune-seqlens")
    return TunePlan(tuple(head_dims), tuple(dtypes), tuple(seqlens))


class Progress:
    """Steps done so far for one (commit, patches) build and one plan. Another build starts
    over; another plan keeps the tuning build but not the tuner records, whose task ids
    number another set of cases."""

    def __init__(self, path: Path, key: str, plan: dict[str, Any], *, dry_run: bool) -> None:
        self.path, self.key, self.plan, self.dry_run = path, key, plan, dry_run
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
        if not self.dry_run:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            record = {"key": self.key, "plan": self.plan, "done": self.done}
            tmp.write_text(json.dumps(record, indent=1) + "\n")
            tmp.replace(self.path)

    def reset(self) -> None:
        self.done = []
        if not self.dry_run:
            self.path.unlink(missing_ok=True)


def tuner_argv(python: str, raw: Path, head_dim: int, dtype: str, seq: list[str]) -> list[str]:
    """One cpptune run. test/tune_flash.py ends in a Textual app, `app.run(mouse=False,
    inline=True, headless=args.debug_headless)` (port @ 60639c72): --debug_headless lets it run
    without a terminal (nox, CI, ssh without a tty)."""
    return [
        *(python, TUNE_SCRIPT, "--json_file", str(raw), "--d_head", str(head_dim)),
        *("--dtype", dtype, "--seqlen_q", *seq, "--seqlen_k", *seq, "--validate"),
        "--debug_headless",
    ]


def _refuse_other_tuners(ctx: ba.Context) -> str:
    tuner = ctx.variant.tuner if ctx.variant else str(ctx.pin.data.get("tuner", "unknown"))
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


def tune_aotriton(opts: argparse.Namespace) -> None:
    ctx = ba._context(opts)
    tuner = _refuse_other_tuners(ctx)
    plan = make_plan(opts, ctx)
    commit, arch = ctx.pin.commit, ctx.arch.name
    runner = Runner(dry_run=opts.dry_run, base_env=condaenv.activated_environ(ctx.prefix))
    what = ctx.variant.describe() if ctx.variant else f"ROCm/aotriton {ctx.version}"
    runner.say(f"tune_aotriton: {what}; arch {arch}; tuner {tuner} ({TUNE_SCRIPT})")
    runner.say(
        f"plan: head_dim {','.join(map(str, plan.head_dims))}; {','.join(plan.dtypes)}; "
        f"seqlens {','.join(map(str, plan.seqlens))}"
    )
    stored = tuning_db.find(commit, arch)
    if (
        stored
        and not opts.force
        and all(stored.meta.get(k) == v for k, v in plan.as_dict().items())
    ):
        runner.say(
            f"tune_aotriton: already tuned for this plan: {stored.describe()}; nothing run "
            "(--force to tune again)"
        )
        return
    state_dir = paths.workdir(opts.workdir) / "tuning" / f"{ctx.source_name}-{commit[:12]}-{arch}"
    key = stamps.digest({"commit": commit, "patches": patch_set_digest("aotriton", commit)})
    progress = Progress(state_dir / "progress.json", key, plan.as_dict(), dry_run=opts.dry_run)
    if opts.force or progress.stale:
        if opts.force:
            runner.say("--force: starting over, tuning build included")
            progress.reset()
        else:
            runner.say("another plan than last time: tuning again (the tuning build is kept)")
        if not opts.dry_run:
            for old in state_dir.glob("raw-*.json"):
                old.unlink()
    elif progress.done:
        runner.say(f"resuming: done earlier: {', '.join(progress.done)} ({progress.path})")
    python = str(ctx.prefix / "bin" / "python")
    gpus = ctx.variant.gpus if ctx.variant else (f"{arch}_mod0",)
    tuning_build = f"{ctx.source_name}-tuning"

    runner.say("[1/6] build for tuning")
    if progress.has("build"):
        runner.say("  done earlier; skipped")
    else:
        ba._build_from_source(
            ctx,
            runner,
            build_name=tuning_build,
            extra_cmake=(
                "-DAOTRITON_BUILD_FOR_TUNING=ON",
                f"-DAOTRITON_NAME_SUFFIX={NAME_SUFFIX}",
                f"-DAOTRITON_OVERRIDE_TARGET_GPUS={';'.join(gpus)}",
            ),
        )
        progress.mark("build")

    src = paths.src_dir(ctx.work, ctx.source_name)
    bindings = paths.build_dir(ctx.work, tuning_build) / "bindings"
    chunks = plan.chunks()
    records: list[Path] = []
    runner.say(f"[2/6] tune: {len(chunks)} runs")
    seq = [str(s) for s in plan.seqlens]
    for i, (head_dim, dtype) in enumerate(chunks, 1):
        step = f"tune:d{head_dim}:{dtype}"
        raw = state_dir / f"raw-d{head_dim}-{dtype}.json"
        records.append(raw)
        if progress.has(step):
            runner.say(f"  [{i}/{len(chunks)}] head_dim {head_dim} {dtype}: done earlier ({raw})")
            continue
        again = " (continues its records)" if raw.is_file() else ""
        runner.say(f"  [{i}/{len(chunks)}] head_dim {head_dim} {dtype}{again}")
        if not opts.dry_run:
            state_dir.mkdir(parents=True, exist_ok=True)
        runner.run(
            tuner_argv(python, raw, head_dim, dtype, seq),
            cwd=src,
            sets={"PYTHONPATH": str(bindings)},
        )
        progress.mark(step)

    runner.say("[3/6] store the candidate tuning database (sha256 per file)")
    candidate_dir = state_dir / "candidate"
    meta = {**plan.as_dict(), "gpus": list(gpus)}
    if opts.dry_run:
        runner.say(f"[dry-run] would write {candidate_dir}/{{manifest.toml,tune_flash.json}}")
        candidate = tuning_db.TuningDb(candidate_dir, commit, arch, "cpptune-json", tuner, {}, meta)
    else:
        combined = state_dir / "combined.json"
        with open(combined, "w") as out:
            for raw in records:
                out.write(raw.read_text() if raw.is_file() else "")
        meta["created"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        candidate = tuning_db.write(
            candidate_dir,
            {tuning_db.CPPTUNE_RECORDS: combined},
            commit=commit,
            arch=arch,
            kind="cpptune-json",
            tuner=tuner,
            meta=meta,
        )
        runner.say(f"  {candidate.describe()}")

    runner.say("[4/6] rebuild with the candidate database")
    new = ba._build_from_source(ctx, runner, tuning=candidate)

    runner.say("[5/6] validate (the gate): the tuned build, forward and backward")
    _gate(ctx, new, plan, runner, python, candidate_dir)

    runner.say("[6/6] install into torch and publish the database")
    published_at = tuning_db.db_dir(commit, arch)
    if opts.dry_run:
        runner.say(f"[dry-run] would install into {ctx.torch / 'lib'} and copy to {published_at}")
        return
    published = tuning_db.publish(candidate)
    stamp = paths.stamp_path(ctx.work, ba.STAMP_NAME)
    stamps.remove(stamp)
    how = f"built from {ctx.pin.url} at {commit[:12]} with tuning database {published.directory}"
    ba._install(ctx, new, runner, stamp, ba._inputs(ctx), how)
    runner.say(f"tuning database stored: {published.directory} (commit it to keep it)")
    progress.reset()


def _gate(
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
    argv = [python, str(REPO_ROOT / "scripts" / "probes" / "validate.py")]
    argv += ["--backends", "flash", "--head-dims", head_dims, "--dtypes", dtypes]
    if new is None:  # dry run
        lib = "<rebuilt install>/lib/libaotriton_v2.so.X.Y.Z"
        runner.run(argv, cwd=REPO_ROOT, sets={"LD_PRELOAD": lib})
        return
    # The preload only tests the candidate when torch asks for this very runtime version.
    shipped = AotritonInstall.read(ctx.torch / "lib", ctx.torch / "include")
    if shipped.runtime != new.runtime:
        raise UserError(
            f"{ctx.torch / 'lib'} has AOTriton {shipped.runtime}, the tuned build is "
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
