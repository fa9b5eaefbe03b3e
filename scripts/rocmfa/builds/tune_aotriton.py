"""`nox -s tune_aotriton` (docs/tuning.md): AOTriton's Tuner v3.5 here, its database stored in
pins/tuning/aotriton/<commit>/<arch>/, the rebuild kept only when `validate` passes."""

import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path

from rocmfa.builds import build_aotriton as ba
from rocmfa.env import archs
from rocmfa.plumbing import stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import REPO_ROOT, BuildAotritonOptions, TuneAotritonOptions
from rocmfa.sources import checkouts

DB_USER = "tuner"  # role and database alike: the tuner connects without a dbname
VALIDATE_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def filters(opts: TuneAotritonOptions) -> list[str]:
    """dispatch_tasks' filters for the options (its flash module's names); none = every task."""
    argv: list[str] = []
    for flags, value in (
        (["--hdim"], opts.tune_head_dims),
        (["--dtype"], opts.tune_dtypes),
        (["--seqlen_q", "--seqlen_k"], opts.tune_seqlens),
    ):
        values = [v.strip() for v in (value or "").split(",") if v.strip()]
        for flag in flags if values else []:
            argv += [flag, *values]
    return argv


@dataclass(frozen=True)
class Postgres:
    """A cluster in data/ on 127.0.0.1:port; under root, as `nobody` (postgres refuses root)."""

    bin_dir: Path
    data: Path
    port: int
    runner: Runner

    def tool(self, name: str, *args: str) -> list[str]:
        argv = [str(self.bin_dir / name), *args]
        if os.geteuid() == 0 and name in ("initdb", "pg_ctl"):
            argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
        return argv

    def query(self, sql: str, db: str = DB_USER, how: str = "-c") -> str:
        """psql's answer to sql (how="-f": the file sql names), one row a line."""
        where = ("-h", "127.0.0.1", "-p", str(self.port), "-U", DB_USER, "-d", db)
        argv = [str(self.bin_dir / "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", *where]
        return self.runner.run([*argv, how, sql], capture=True).stdout


def find_postgres(prefix: Path | None) -> Path | None:
    """The directory holding initdb, pg_ctl and psql: the env's, Debian's, then PATH's."""
    dirs = [prefix / "bin"] if prefix else []
    dirs += [Path(f"/usr/lib/postgresql/{v}/bin") for v in (17, 16, 15)]
    if found := shutil.which("initdb"):
        dirs.append(Path(found).resolve().parent)
    tools = ("initdb", "pg_ctl", "psql")
    return next((d for d in dirs if all((d / t).is_file() for t in tools)), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(pg: Postgres) -> Iterator[Postgres]:
    """The server for the session's length (its cluster made once), stopped also on failure."""
    runner = pg.runner
    sock = pg.data.parent
    data = str(pg.data)
    if not (pg.data / "PG_VERSION").is_file():
        runner.apply(sock.mkdir, parents=True, exist_ok=True)
        if os.geteuid() == 0:
            runner.run(["chown", "nobody:nogroup", str(sock)])
        init = ("-D", data, "-U", DB_USER, "--auth=trust", "-E", "UTF8", "--no-sync")
        runner.run(pg.tool("initdb", *init, "--no-instructions"), capture=True)
    listen = f"-c listen_addresses=127.0.0.1 -p {pg.port} -k {sock}"
    log = f"{sock}/server.log"
    runner.run(pg.tool("pg_ctl", "-D", data, "-l", log, "-w", "-o", listen, "start"))
    try:
        if not pg.query(f"SELECT 1 FROM pg_database WHERE datname = '{DB_USER}'", db="postgres"):
            pg.query(f"CREATE DATABASE {DB_USER}", db="postgres")
        yield pg
    finally:
        runner.run(pg.tool("pg_ctl", "-D", data, "-m", "fast", "-w", "stop"))


def write_config(wd: Path, port: int, python: str) -> None:
    """WD/config.rc, KEY=VALUE, as .tune/bin/dispatch sources it."""
    wd.mkdir(parents=True, exist_ok=True)  # trust on 127.0.0.1; dispatch wants a password
    text = f"POSTGRES_USER={DB_USER}\nPOSTGRES_PASSWORD=trust\nPOSTGRES_PORT={port}\n"
    text += f"CELERY_SERVICE_HOST=127.0.0.1\nCELERY_WORKER_PYTHON={python}\n"
    stamps.write_text_atomic(wd / "config.rc", text)


def progress(pg: Postgres, arch: str) -> dict[str, int]:
    keys = ("pending", "running", "completed", "failed", "total")
    row = pg.query(f"SELECT {', '.join(keys)} FROM queue_progress WHERE arch = '{arch}'")
    values = [int(v) for v in row.strip().split("|")] if row.strip() else [0] * 5
    return dict(zip(keys, values, strict=True))


def progress_line(counts: dict[str, int], eta_hours: str) -> str:
    done = counts["completed"] + counts["failed"]
    bar = "#" * (30 * done // (counts["total"] or 1))
    eta = eta_hours.strip() and f"{eta_hours} h"
    running = f"{counts['running']} running; ETA {eta or '-'}"
    return f"[{bar:<30}] {done}/{counts['total']} done ({counts['failed']} failed), {running}"


def watch(pg: Postgres, arch: str) -> dict[str, int]:
    """A progress bar with ETA from the tuner's own views, every 30 s until the queue drains."""
    while True:
        counts = progress(pg, arch)
        eta = pg.query(f"SELECT eta_hours FROM completion_eta WHERE arch = '{arch}'")
        pg.runner.say(progress_line(counts, eta))
        if counts["pending"] + counts["running"] == 0:
            return counts
        time.sleep(30)


def need_gpu(arch: str, wd: Path) -> None:
    """The worker's first task imports torch on the GPU (v3python/tune/testrun.py)."""
    found = archs.detect_gpus()
    if arch not in found.gpus:
        raise UserError(
            f"tune_aotriton: the worker's first task needs a {arch} GPU and this machine has "
            f"{', '.join(found.gpus) or 'none'} ({found.source}); stopped before the tuning "
            f"build, the queue kept in {wd} (run the same line on a {arch} machine to go on)"
        )


def tune_aotriton(opts: TuneAotritonOptions) -> None:
    build = {f.name: getattr(opts, f.name) for f in fields(opts) if f.name[:5] != "tune_"}
    ctx = ba.make_context(BuildAotritonOptions(**build), tuning=True)  # builds as build_aotriton
    runner = ctx.runner
    arch = ctx.arch.name
    commit = ctx.pin.commit
    wd = ctx.work / "tuning" / f"aotriton-{commit[:12]}-{arch}"
    runner.say(f"tune_aotriton: {ctx.pin.url} {ctx.version}; arch {arch}; Tuner v3.5 in {wd}")
    if (stored := checkouts.find_tuning(commit, arch)) is not None and not opts.force:
        return runner.say(f"already tuned: {stored.describe()}; nothing run (--force to redo)")
    src = ba.check_out(ctx)
    if (bin_dir := find_postgres(ctx.prefix if ctx.session.ready else None)) is None:
        runner.refuse("no PostgreSQL (initdb, pg_ctl, psql): apt-get install postgresql")
    pg = Postgres(bin_dir or Path("<postgres bin>"), wd / "pg" / "data", free_port(), runner)
    runner.apply(write_config, wd, pg.port, str(ctx.session.python), say=f"write {wd}/config.rc")
    with running(pg):
        queue(pg, src, wd, arch, filters(opts))
        runner.apply(need_gpu, arch, wd)
        tuner = replace(ctx, opts=replace(ctx.opts, with_pyaotriton=True))
        try:  # the worker imports pyaotriton, which needs pybind11
            ba.require_pybind11(ctx)
        except UserError as missing:
            runner.refuse(str(missing))  # a plan notes it and plans on without it
            tuner = ctx
        tuned = ba.build_from_source(tuner, for_tuner=True)
        tune_and_bake(pg, src, wd, arch, tuned.lib if tuned else Path("<tuning build>/lib"))
    candidate = store(runner, wd, commit, arch, opts)
    runner.say("rebuild with the tuned database")
    new = ba.build_from_source(ctx, tuning=candidate)
    inputs = ba.stamp_inputs(ctx, from_release=False)
    if ctx.torch is not None or new is None:  # a plan (no build) shows the gate too
        gate(ctx, new, opts)
    how = f"built from {ctx.pin.url} at {commit[:12]} with {candidate.directory}"
    ba.finish(ctx, new, inputs, how)  # no torch: torch is built against it


def queue(pg: Postgres, src: Path, wd: Path, arch: str, chosen: list[str]) -> dict[str, int]:
    """schema.sql (once), the arch's partition, dispatch once per filter set: a new set replaces
    the pending tasks (dispatch would queue them twice); --skip_completed keeps finished ones."""
    runner = pg.runner
    if not pg.query("SELECT to_regclass('task_queue')").strip():
        pg.query(str(src / "v3python/tune/pq/schema.sql"), how="-f")
    pg.query(f"SELECT create_arch_partition('{arch}')")
    marker = wd / "dispatched"
    wanted = " ".join(["--arch", arch, *chosen])
    if marker.is_file() and marker.read_text() == wanted:
        runner.say(f"dispatched earlier ({wanted}); the queue resumes")
    else:
        pg.query(f"DELETE FROM task_queue WHERE arch = '{arch}' AND status = 'pending'")
        dispatch = [str(src / ".tune/bin/dispatch"), "flash", str(wd), "--arch", arch]
        runner.run([*dispatch, *chosen, "--skip_completed", "-y"], cwd=src)
        runner.apply(stamps.write_text_atomic, marker, wanted)
    counts = runner.apply(progress, pg, arch) or {"total": 0}
    runner.say(f"queue: {counts['total']} tasks for {arch}")
    return counts


def tune_and_bake(pg: Postgres, src: Path, wd: Path, arch: str, lib: Path) -> None:
    """One worker on this host's GPUs until the queue drains, then bake_lut."""
    runner = pg.runner
    service = [str(src / ".tune/remote/worker_service.sh")]
    start = [*service, "start", str(wd), arch, "--multi_gpu", "0", "--hostname", "localhost"]
    runner.run(start, cwd=src, sets={"PYTHONPATH": f"{lib}{os.pathsep}{src}"})
    try:
        final = runner.apply(watch, pg, arch)
    finally:
        runner.run([*service, "stop", str(wd), arch], cwd=src)
    if final and final["completed"] == 0:
        raise UserError(f"tune_aotriton: all {final['failed']} tasks failed; see {wd}")
    runner.run([str(src / ".tune/bin/bake_lut"), str(wd)], cwd=src, sets={"PYTHONPATH": str(src)})


def store(
    runner: Runner, wd: Path, commit: str, arch: str, opts: TuneAotritonOptions
) -> checkouts.TuningDb:
    """The shards into pins/tuning/aotriton/<commit>/<arch>/ (sha256 per file)."""
    target = checkouts.tuning_dir(commit, arch)
    shards = wd / "installed" / "database"
    meta = {k: getattr(opts, f"tune_{k}") or "all" for k in ("head_dims", "dtypes", "seqlens")}
    found = sorted((shards / "amd" / arch).rglob("*.sqlite3.tar.xz"))
    files = {p.relative_to(shards).as_posix(): p for p in found}  # as under a database root
    how = dict(commit=commit, arch=arch, kind="sharded-sqlite", tuner="tuner-v3.5", meta=meta)
    say = f"store {shards}/amd/{arch}/flash/*.sqlite3.tar.xz in {target} (sha256 per file)"
    stored = runner.apply(checkouts.write_tuning, target, files, **how, say=say)
    return stored or checkouts.TuningDb(target, commit, arch, how["kind"], how["tuner"], {}, meta)


def gate(ctx: ba.Context, new, opts: TuneAotritonOptions) -> None:
    """validate.py against the rebuilt library (preloaded) before anything is installed."""
    validate = REPO_ROOT / "scripts/rocmfa/probes/validate.py"
    argv = [str(ctx.session.python), str(validate), "--backends", "flash"]
    argv += ["--head-dims", opts.tune_head_dims] if opts.tune_head_dims else []
    if opts.tune_dtypes:
        argv += ["--dtypes", ",".join(VALIDATE_DTYPES[t] for t in opts.tune_dtypes.split(","))]
    lib = f"{new.lib}/libaotriton_v2.so.{new.runtime}" if new else "<rebuild>/lib/libaotriton_v2.so"
    result = ctx.runner.run(argv, cwd=REPO_ROOT, sets={"LD_PRELOAD": lib}, check=False)
    if result.returncode != 0:
        raise UserError(f"validate failed (exit {result.returncode}): tuned build NOT installed")
