"""tune_aotriton on the pinned AOTriton 0.13b (6e00ef3e): the tuning patch set, the plan, and
Tuner v3.5's own queue on a real PostgreSQL.

The queue test (the pin's schema, dispatch and bake steps) and the no-GPU run of the session
need a real PostgreSQL (initdb/pg_ctl/psql: Debian's postgresql, installed by .ci/run) and
psycopg (the dev extra), and skip, saying which, when one is absent. Both run on the stand-in
tuner tree
(tests/support/aotriton_tuner/, each file citing its upstream file at the pin) and, with
ROCMFA_AOTRITON_REAL_GIT (a ROCm/aotriton git snapshot holding the pin,
tests/support/real_trees.py) and the tuner's own Python packages (requirements-tuning.txt at the
pin: psycopg, pandas, dacite, ...), on the real pinned tree too.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocmfa.builds import tune_aotriton as ta
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import TuneAotritonOptions, parse
from rocmfa.sources import checkouts
from tests.support import aotriton_standins as st
from tests.support.real_trees import borrow_snapshot

REPO_ROOT = Path(__file__).resolve().parent.parent
PIN = "6e00ef3e335b45dfb49065259533b59c68995bfe"
AOTRITON_GIT = os.environ.get("ROCMFA_AOTRITON_REAL_GIT")
needs_tree = pytest.mark.skipif(
    not AOTRITON_GIT, reason="set ROCMFA_AOTRITON_REAL_GIT to a ROCm/aotriton git snapshot"
)
TUNER_PACKAGES = ("psycopg", "psycopg_pool", "pandas", "dacite", "msgpack", "elftools")
missing = [m for m in TUNER_PACKAGES if importlib.util.find_spec(m) is None]
PG_BIN = ta.find_postgres(None)
needs_server = pytest.mark.skipif(
    PG_BIN is None or "psycopg" in missing,
    reason="PostgreSQL absent (apt-get install postgresql)" if PG_BIN is None else
    "psycopg is absent (pip install -e '.[dev]')",
)  # fmt: skip
STANDIN_TUNER = REPO_ROOT / "tests/support/aotriton_tuner"
SMALL = ("--tune-head-dims", "64", "--tune-dtypes", "float16", "--tune-seqlens", "128")


def tuning_options(*argv: str) -> TuneAotritonOptions:
    return parse("tune_aotriton", ["--arch", "gfx908", *argv])


@pytest.mark.parametrize(
    ("arch", "tuning", "expected"),
    [
        ("gfx908", False, ["0001", "0002"]),  # what users install: gfx90a's database reused
        ("gfx908", True, ["0001", "0003", "0004", "0005"]),  # the reuse mapping left out
        ("gfx90a", False, []),
        ("gfx90a", True, ["0003", "0004", "0005"]),
    ],
)
def test_tuning_set_only_in_tuning_builds(arch: str, tuning: bool, expected: list[str]) -> None:
    found = checkouts.patch_set_for("aotriton", PIN, arch=arch, tuning=tuning)
    assert [p.name[:4] for p in found.patches] == expected
    manifest = tomllib.loads((found.directory / "manifest.toml").read_text())["patch"]
    upstream = {entry["file"]: entry["upstream"] for entry in manifest}
    cited = ("github.com/ROCm/aotriton/commit/" in upstream[p.name] for p in found.patches[-3:])
    assert all(cited) or not tuning
    digests = {checkouts.patch_set_digest("aotriton", PIN, arch=arch, tuning=t) for t in (0, 1)}
    assert len(digests) == 2  # a tuning build never reuses a plain build's stamp


def export_pin(dest: Path) -> Path:
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "--git-dir", AOTRITON_GIT, "archive", PIN], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    return dest


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned tree with gfx908's tuning build patches applied (`git apply`, as checked)."""
    if not AOTRITON_GIT:
        pytest.skip("set ROCMFA_AOTRITON_REAL_GIT to a ROCm/aotriton git snapshot")
    src = export_pin(tmp_path_factory.mktemp("tuner") / "aotriton")
    for patch in checkouts.patch_set_for("aotriton", PIN, arch="gfx908", tuning=True).patches:
        subprocess.run(["git", "apply", "--check", str(patch.path)], cwd=src, check=True)
        subprocess.run(["git", "apply", str(patch.path)], cwd=src, check=True)
    return src


def skip_without_real_tuner() -> None:
    if not AOTRITON_GIT:
        pytest.skip("set ROCMFA_AOTRITON_REAL_GIT to a ROCm/aotriton git snapshot")
    if missing:
        pytest.skip(f"the real tuner's Python packages are absent: {', '.join(missing)}")


@pytest.fixture(params=["standin", "real"])
def tuner_tree(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tree whose tuner the queue test runs: the stand-in (tests/support/aotriton_tuner/,
    with upstream's database written by its own export and decompose), or the real pinned one."""
    if request.param == "real":
        skip_without_real_tuner()
        return request.getfixturevalue("tree")
    src = tmp_path_factory.mktemp("standin") / "aotriton"
    shutil.copytree(STANDIN_TUNER, src)
    upstream_database(src, src.parent / "upstream")
    return src


def upstream_database(src: Path, scratch: Path) -> None:
    """modules/database as the pin ships it, made by the stand-in's own export and decompose:
    tuning_database.sqlite3.tar.xz (the empty central tables) and one attn_fwd row for each of
    gfx90a and gfx942 in amd/<arch>/flash/attn_fwd.sqlite3.tar.xz."""
    spec = importlib.util.spec_from_file_location(
        "standin_export", src / "v3python/tune/pq/export_best_results.py"
    )
    export = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export)
    scratch.mkdir()
    central, database = scratch / "central.sqlite3", src / "modules/database"
    entry = {"dtype": "float16", "hdim": 64, "seqlen_q": 128, "seqlen_k": 128, "causal": False,
             "dropout_p": 0.0, "bias_type": 0}  # fmt: skip
    with sqlite3.connect(central) as db:
        export.ensure_table(db)
        for arch in ("gfx90a", "gfx942"):
            export.insert(db, arch, entry, {"psels": {"BLOCK_M": 128, "BLOCK_N": 64}})
    db.close()
    script = decompose(src, central, scratch, database)
    empty = database / "tuning_database.sqlite3"
    shutil.copyfile(database / "amd/gfx90a/flash/attn_fwd.sqlite3", empty)
    with sqlite3.connect(empty) as db:
        db.execute('DELETE FROM "FLASH$attn_fwd"')
    db.close()
    with tarfile.open(f"{empty}.tar.xz", "w:xz") as tar:
        tar.add(empty, arcname=empty.name)
    empty.unlink()
    tar_in_loop(script, scratch)


@needs_tree
def test_tuning_set_applies_to_the_pin_and_names_real_commits(tree: Path) -> None:
    found = checkouts.patch_set_for("aotriton", PIN, arch="gfx90a", tuning=True)
    manifest = tomllib.loads((found.directory / "manifest.toml").read_text())["patch"]
    upstream = {entry["file"]: entry["upstream"] for entry in manifest}
    for patch in found.patches:
        commit = upstream[patch.name].rsplit("/", 1)[1]
        git = ["git", "--git-dir", AOTRITON_GIT, "cat-file", "-e", f"{commit}^{{commit}}"]
        assert subprocess.run(git).returncode == 0, upstream[patch.name]
        assert f"Upstream: {upstream[patch.name]}" in patch.path.read_text()
    # #216: the real search space, not the pin's one placeholder configuration
    assert "PRE_LOAD_OPTIONS" in (tree / "modules/flash/aot/attn_fwd.py").read_text()
    assert "aotriton.generate" in (tree / ".tune/bin/sancheck").read_text()


def test_nox_dry_run_plans_every_step_for_gfx908(tmp_path: Path) -> None:
    env = {**os.environ, "ROCMFA_WORKDIR": str(tmp_path / "w")}
    nox = [sys.executable, "-m", "nox", "-s", "tune_aotriton", "--", "--dry-run", "--arch"]
    result = subprocess.run([*nox, "gfx908", *SMALL], cwd=REPO_ROOT, env=env, text=True,
                            capture_output=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    steps = {
        "server": "pg_ctl -D",
        "schema": "v3python/tune/pq/schema.sql",
        "dispatch": ".tune/bin/dispatch flash",
        "tuning build": "-DAOTRITON_BUILD_FOR_TUNING=ON",
        "worker": "worker_service.sh start",
        "bake": ".tune/bin/bake_lut",
        "rebuild": "-DAOTRITON_TUNING_DATABASE_ROOT=",
        "validate": "validate.py --backends flash",
    }
    at = {step: next(i for i, x in enumerate(lines) if mark in x) for step, mark in steps.items()}
    assert list(at.values()) == sorted(at.values()), at
    dispatch = lines[at["dispatch"]]
    assert "--hdim 64 --dtype float16 --seqlen_q 128 --seqlen_k 128 --skip_completed" in dispatch
    assert "0002-gfx908-reuse-gfx90a-tuning.patch" not in result.stdout
    assert "0005-tuning-worker-amdsmi-fixes.patch" in result.stdout
    assert not (tmp_path / "w").exists()


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A temporary dir the server can reach: as root it runs as nobody (postgres refuses root),
    and pytest's temporary dirs are 0700."""
    path = Path(tempfile.mkdtemp(prefix="rocmfa-tune-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path)


def pg_at(wd: Path) -> ta.Postgres:
    return ta.Postgres(PG_BIN, wd / "pg" / "data", ta.free_port(), Runner(out=io.StringIO()))


def dispatch_venv(wd: Path) -> None:
    """.tune/bin/dispatch makes WD/scratch/venv.devnode and pip-installs requirements-tuning.txt
    unless its marker is newer: here a venv that sees this Python's packages, marked done."""
    venv = wd / "scratch" / "venv.devnode"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
    )
    (venv / ".requirements_installed").touch()


def server_stopped(pg: ta.Postgres) -> bool:
    """pg_ctl says so, and no process names the cluster's data dir (a postgres left behind)."""
    status = subprocess.run(pg.tool("pg_ctl", "-D", str(pg.data), "status"), capture_output=True)
    left = [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(pg.data).encode() in read(p)]
    return status.returncode == 3 and not (pg.data / "postmaster.pid").exists() and not left


def read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended meanwhile
        return b""


# best_tuning_results.impl_desc of attn_fwd as export_best_results reads it (_FWD_COLS at the pin)
FWD_PSELS = {"PADDED_HEAD": 0, "USE_ALIBI": 0, "INT8": 0, "INT8_KV": 0, "USE_P_SCALE": 0,
             "PERSISTENT_TYPE": 0, "GRID_CU_MULTIP": 2, "BLOCK_M": 64, "BLOCK_N": 32,
             "PRE_LOAD_V": 0}  # fmt: skip
FWD_COPTS = {"waves_per_eu": 2, "num_warps": 4, "num_stages": 1}


def synthetic_results(pg: ta.Postgres) -> None:
    """Every queued task completed with one best attn_fwd configuration (compute_best_results'
    table), as a worker and bake steps 1-2 would leave them."""
    desc = json.dumps({"psels": FWD_PSELS, "copts": FWD_COPTS}).replace("'", "''")
    pg.query(
        "INSERT INTO best_tuning_results (task_id, arch, task_config, kernel_name, hsaco_index, "
        f"median_time, impl_desc) SELECT id, arch, task_config, 'attn_fwd', 0, 0.1, '{desc}' "
        "FROM task_queue; UPDATE task_queue SET status = 'completed'"
    )


def decompose(tree: Path, central: Path, scratch: Path, shards: Path) -> Path:
    """The tree's `aotriton.database_decompose` (its python/ as the aotriton package): the
    shards' script, to run with GNU parallel."""
    script = scratch / "decompose.sh"
    argv = ["-m", "aotriton.database_decompose", "--database_file", str(central)]
    argv += ["--script_output", str(script), "--decompose_output", str(shards)]
    env = {**os.environ, "PYTHONPATH": str(aotriton_package(tree, scratch))}
    subprocess.run([sys.executable, *argv], cwd=tree, env=env, check=True)
    return script


def aotriton_package(tree: Path, scratch: Path) -> Path:
    """A directory where the tree's python/ imports as `aotriton`, as the build installs it."""
    pkg = scratch / "pkg"
    if not (pkg / "aotriton").exists():
        pkg.mkdir(exist_ok=True)
        (pkg / "aotriton").symlink_to(tree / "python")
    return pkg


def tar_in_loop(script: Path, scratch: Path) -> None:
    """The decompose script, GNU parallel (which decomposedb requires) stood in for by a loop."""
    loop = scratch / "parallel"
    loop.write_text('#!/bin/bash\nwhile read -r f; do "$@" "$f"; done\n')
    loop.chmod(0o755)
    subprocess.run(["bash", str(script)], env={**os.environ, "GNU_PARALLEL": str(loop)},
                   check=True)  # fmt: skip


def bake(tree: Path, wd: Path) -> Path:
    """bake_lut's export (step 3) and decompose (step 5) at the pin, run as its scripts do."""
    central, shards = wd / "scratch/centraldb.sqlite3", wd / "installed/database"
    export = ["-m", "v3python.tune.pq.export_best_results", "--workdir", str(wd)]
    path = f"{tree}{os.pathsep}{aotriton_package(tree, wd)}"
    subprocess.run([sys.executable, *export, "--output", str(central)], cwd=tree, check=True,
                   env={**os.environ, "PYTHONPATH": path})  # fmt: skip
    tar_in_loop(decompose(tree, central, wd, shards), wd)
    return shards


@needs_server
def test_real_queue_resumes_and_bakes_synthetic_results_into_shards_the_rebuild_reads(
    tuner_tree: Path, reachable: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tuner_tree
    monkeypatch.setenv("ROCMFA_TUNING_DIR", str(reachable / "tuning"))
    wd = reachable / "wd"
    pg = pg_at(wd)
    ta.write_config(wd, pg.port, sys.executable)
    dispatch_venv(wd)
    chosen = ta.filters(tuning_options(*SMALL))
    with ta.running(pg):
        assert ta.queue(pg, tree, wd, "gfx908", chosen)["total"] == 6  # causal x bias x dropout
    assert server_stopped(pg)
    pg = pg_at(wd)  # resume: the queue in the work dir; the same filters not dispatched again
    ta.write_config(wd, pg.port, sys.executable)
    with ta.running(pg):
        assert ta.queue(pg, tree, wd, "gfx908", chosen)["total"] == 6
        entries = pg.query("SELECT DISTINCT task_config->'entry'->>'hdim', "
                           "task_config->'entry'->>'dtype', task_config->'entry'->>'seqlen_q', "
                           "task_config->'entry'->>'seqlen_k' FROM task_queue")  # fmt: skip
        wider = ta.filters(tuning_options(*SMALL[:4], "--tune-seqlens", "128,256"))
        counts = ta.queue(pg, tree, wd, "gfx908", wider)
        assert counts["total"] == 4 * 6  # q x k seqlens
        bar = ta.progress_line(counts, "")
        assert bar == f"[{' ' * 30}] 0/24 done (0 failed), 0 running; ETA -"
        synthetic_results(pg)
        assert ta.progress_line(ta.progress(pg, "gfx908"), "").startswith(f"[{'#' * 30}] 24/24")
        widest = ta.filters(tuning_options(*SMALL[:4], "--tune-seqlens", "128,256,512"))
        counts = ta.queue(pg, tree, wd, "gfx908", widest)  # --skip_completed: done ones stay
        assert (counts["total"], counts["completed"], counts["pending"]) == (9 * 6, 24, 30)
        shards = bake(tree, wd)
    assert entries.split() == ["64|float16|128|128"]
    assert server_stopped(pg)
    stored = ta.store(Runner(out=io.StringIO()), wd, PIN, "gfx908", tuning_options(*SMALL))
    assert stored.directory == reachable / "tuning/aotriton" / PIN / "gfx908"
    assert list(stored.files) == ["amd/gfx908/flash/attn_fwd.sqlite3.tar.xz"]
    assert shards.is_dir() and checkouts.find_tuning(PIN, "gfx908") == stored
    assert rebuild_reads(tree, stored, reachable) == [(64, 32, 24)]  # ours, over upstream's
    shard = stored.directory / "amd/gfx908/flash/attn_fwd.sqlite3.tar.xz"
    shard.write_bytes(shard.read_bytes() + b"\0")
    with pytest.raises(UserError, match="sha256"):
        checkouts.find_tuning(PIN, "gfx908")


def standin_rebuild(tree: Path, root: Path, build: Path) -> Path:
    """v3src/CMakeLists.txt ~28-48 at the pin: extract every *.sqlite3.tar.xz under the root
    into <build>/database/<its dir>, then the tree's own `python -m aotriton.database_compose`."""
    for tar_xz in root.rglob("*.sqlite3.tar.xz"):
        dest = build / "database" / tar_xz.parent.relative_to(root)
        with tarfile.open(tar_xz) as tar:
            tar.extractall(dest, filter="data")
    pkg = aotriton_package(tree, build)
    central = build / "database" / "tuning_database.sqlite3"
    compose = [sys.executable, "-m", "aotriton.database_compose", "--database_file", str(central)]
    subprocess.run([*compose, "--decomposed", str(build / "database")], cwd=tree, check=True,
                   env={**os.environ, "PYTHONPATH": str(pkg)})  # fmt: skip
    return central


def rebuild_reads(tree: Path, stored: checkouts.TuningDb, scratch: Path) -> list[tuple]:
    """The rebuild's database root (checkouts.tuning_cmake_args) through the stand-in rebuild:
    gfx908's (BLOCK_M, BLOCK_N, rows) in the central database, gfx90a's still there."""
    args = checkouts.tuning_cmake_args(
        stored, tree, scratch / "root", runner=Runner(out=io.StringIO())
    )
    assert args == [f"-DAOTRITON_TUNING_DATABASE_ROOT={scratch / 'root'}"]
    central = standin_rebuild(tree, scratch / "root", scratch / "build")
    with sqlite3.connect(central) as conn:
        gpus = {r[0] for r in conn.execute('SELECT DISTINCT gpu FROM "FLASH$attn_fwd"')}
        assert {"gfx90a_mod0", "gfx942_mod0"} <= gpus
        return list(conn.execute(
            'SELECT "tuned_kernel$BLOCK_M", "tuned_kernel$BLOCK_N", COUNT(*) FROM "FLASH$attn_fwd" '
            "WHERE gpu = 'gfx908_mod0' GROUP BY 1, 2"))  # fmt: skip


@pytest.fixture(params=["standin", "real"])
def pinned_tuner(request: pytest.FixtureRequest, reachable: Path) -> tuple[Path, str, str]:
    """(pins dir, commit, arch) of the AOTriton the session checks out: the stand-in tuner tree
    committed to a local repository (no patch set for that commit, so gfx90a: gfx908 needs the
    pin's port), or the real pin (offline: its submodules left out) with
    ROCMFA_AOTRITON_REAL_GIT, for gfx908."""
    pins = reachable / "pins"
    pins.mkdir()
    if request.param == "real":
        skip_without_real_tuner()
        borrow_snapshot(AOTRITON_GIT, reachable / "work/src/aotriton", PIN)  # the commit is here
        git_dir, commit, arch = AOTRITON_GIT, PIN, "gfx908"
    else:
        repo = reachable / "standin-aotriton"
        shutil.copytree(STANDIN_TUNER, repo)
        st.git(repo, "init", "-q")
        st.git(repo, "add", "-A")
        st.git(repo, "commit", "-qm", "the stand-in tuner tree")
        git_dir, commit, arch = str(repo / ".git"), st.git(repo, "rev-parse", "HEAD"), "gfx90a"
    st.write_aotriton_pin(pins, f"file://{git_dir}", commit, "0.13b", version="0.13b",
                          tuner="tuner-v3.5")  # fmt: skip
    return pins, commit, arch


@needs_server
def test_a_real_run_without_a_gpu_stops_at_the_first_gpu_task(
    pinned_tuner: tuple[Path, str, str], reachable: Path, provisioned_env: Path,
    monkeypatch: pytest.MonkeyPatch, capsys,
) -> None:  # fmt: skip
    """The session itself on the pinned tuner tree, in a stand-in env: one line, the server
    stopped, nothing stored, nothing left running."""
    pins, commit, arch = pinned_tuner
    work = reachable / "work"
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins))
    monkeypatch.setenv("ROCMFA_TUNING_DIR", str(reachable / "tuning"))
    monkeypatch.setenv("ROCM_BOOTSTRAP_DISABLE_DETECTION", "1")
    if commit != PIN:  # the stand-in's commit has no patch set, and no set is its ancestor
        monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(reachable / "no-patches"))
    wd = work / "tuning" / f"aotriton-{commit[:12]}-{arch}"
    dispatch_venv(wd)
    argv = ["--prefix", str(provisioned_env), "--workdir", str(work), *SMALL, "--arch", arch]
    with pytest.raises(UserError) as stop:
        ta.tune_aotriton(tuning_options(*argv))
    assert "\n" not in str(stop.value) and f"needs a {arch} GPU" in str(stop.value)
    out = capsys.readouterr().out
    assert f"queue: 6 tasks for {arch}" in out and "pg_ctl -D" in out.splitlines()[-1]
    assert server_stopped(pg_at(wd)) and not (reachable / "tuning").exists()
    assert not (work / "build" / "aotriton-tuning").exists()
