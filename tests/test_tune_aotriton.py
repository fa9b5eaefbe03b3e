"""tune_aotriton on the pinned AOTriton 0.13b (6e00ef3e): the tuning patch set, the plan, and
Tuner v3.5's own queue on a real PostgreSQL.

The real-tree tests need ROCMFA_AOTRITON_REAL_GIT (a ROCm/aotriton git snapshot holding the pin,
tests/support/real_trees.py) and skip without it; the server tests also need PostgreSQL's
initdb/pg_ctl/psql (Debian's postgresql, installed by .ci/run) and the tuner's own Python
packages (requirements-tuning.txt at the pin: psycopg, pandas, dacite, ...), and skip, saying
which, when one is absent.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocmfa.builds import tune_aotriton as ta
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import TuneAotritonOptions, parse
from rocmfa.sources import patches, tuning_db
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
    PG_BIN is None or bool(missing),
    reason="PostgreSQL absent (apt-get install postgresql)" if PG_BIN is None else
    f"the tuner's Python packages are absent: {', '.join(missing)}",
)  # fmt: skip
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
    found = patches.patch_set_for("aotriton", PIN, arch=arch, tuning=tuning)
    assert [p.name[:4] for p in found.patches] == expected
    assert all("github.com/ROCm/aotriton/commit/" in p.upstream for p in found.patches[-3:]) or (
        not tuning
    )
    digests = {patches.patch_set_digest("aotriton", PIN, arch=arch, tuning=t) for t in (0, 1)}
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
    for patch in patches.patch_set_for("aotriton", PIN, arch="gfx908", tuning=True).patches:
        subprocess.run(["git", "apply", "--check", str(patch.path)], cwd=src, check=True)
        subprocess.run(["git", "apply", str(patch.path)], cwd=src, check=True)
    return src


@needs_tree
def test_tuning_set_applies_to_the_pin_and_names_real_commits(tree: Path) -> None:
    for patch in patches.patch_set_for("aotriton", PIN, arch="gfx90a", tuning=True).patches:
        commit = patch.upstream.rsplit("/", 1)[1]
        git = ["git", "--git-dir", AOTRITON_GIT, "cat-file", "-e", f"{commit}^{{commit}}"]
        assert subprocess.run(git).returncode == 0, patch.upstream
        assert f"Upstream: {patch.upstream}" in patch.path.read_text()
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
    status = subprocess.run(pg.tool("pg_ctl", "-D", str(pg.data), "status"), capture_output=True)
    return status.returncode == 3 and not (pg.data / "postmaster.pid").exists()


@needs_server
def test_queue_on_a_real_server_stops_at_the_first_gpu_task_then_resumes(
    tree: Path, reachable: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCM_BOOTSTRAP_DISABLE_DETECTION", "1")  # no GPU, whatever this host has
    wd = reachable / "wd"
    pg = pg_at(wd)
    ta.write_config(wd, pg.port, sys.executable)
    dispatch_venv(wd)
    chosen = ta.filters(tuning_options(*SMALL))
    with pytest.raises(UserError) as stop, ta.running(pg):
        counts = ta.queue(pg, tree, wd, "gfx908", chosen)
        ta.need_gpu("gfx908", wd)
    assert "\n" not in str(stop.value) and "needs a gfx908 GPU" in str(stop.value)
    assert server_stopped(pg)
    assert counts["total"] == counts["pending"] == 6  # causal x bias x dropout, as filtered
    bar = ta.progress_line(counts, "")
    assert bar == "[" + " " * 30 + "] 0/6 done (0 failed), 0 running; ETA -"
    assert not tuning_db.db_dir(PIN, "gfx908").exists()  # nothing marked done
    # resume: the same queue from the work dir; the same filters are not dispatched again
    pg = pg_at(wd)
    ta.write_config(wd, pg.port, sys.executable)
    with ta.running(pg):
        assert ta.queue(pg, tree, wd, "gfx908", chosen)["total"] == 6
        configs = pg.query("SELECT DISTINCT task_config->'entry'->>'hdim', "
                           "task_config->'entry'->>'dtype', task_config->'entry'->>'seqlen_q', "
                           "task_config->'entry'->>'seqlen_k' FROM task_queue")  # fmt: skip
        wider = ta.filters(tuning_options(*SMALL[:4], "--tune-seqlens", "128,256"))
        assert ta.queue(pg, tree, wd, "gfx908", wider)["total"] == 4 * 6  # q x k seqlens
    assert configs.split() == ["64|float16|128|128"]
    assert server_stopped(pg)


def synthetic_shards(tree: Path, out: Path) -> Path:
    """What the bake writes for gfx908 (installed/database/amd/gfx908/flash/*.sqlite3.tar.xz):
    synthetic results, made from the pin's own gfx90a shards with gpu = gfx908_mod0."""
    for kernel in ta.KERNELS:
        shard = tree / f"modules/database/amd/gfx90a/flash/{kernel}.sqlite3.tar.xz"
        with tarfile.open(shard) as tar:
            (member,) = tar.getmembers()
            tar.extract(member, out / "x", filter="data")
        db = out / "x" / member.name
        with sqlite3.connect(db) as conn:
            conn.execute(f'UPDATE "FLASH${kernel}" SET gpu = ?', ("gfx908_mod0",))
        target = out / "installed/database/amd/gfx908/flash" / shard.name
        target.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(target, "w:xz", preset=0) as tar:
            tar.add(db, arcname=member.name)
    return out


def standin_rebuild(tree: Path, root: Path, build: Path) -> Path:
    """v3src/CMakeLists.txt ~28-48 at the pin: extract every *.sqlite3.tar.xz under the root
    into <build>/database/<its dir>, then the tree's own `python -m aotriton.database_compose`."""
    for tar_xz in root.rglob("*.sqlite3.tar.xz"):
        dest = build / "database" / tar_xz.parent.relative_to(root)
        with tarfile.open(tar_xz) as tar:
            tar.extractall(dest, filter="data")
    (build / "pkg").mkdir()
    (build / "pkg" / "aotriton").symlink_to(tree / "python")
    central = build / "database" / "tuning_database.sqlite3"
    compose = [sys.executable, "-m", "aotriton.database_compose", "--database_file", str(central)]
    subprocess.run([*compose, "--decomposed", str(build / "database")], cwd=tree, check=True,
                   env={**os.environ, "PYTHONPATH": str(build / "pkg")})  # fmt: skip
    return central


@needs_tree
def test_baked_shards_are_stored_with_sha256_and_read_by_the_rebuild(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tuning_db.TUNING_DIR_ENV, str(tmp_path / "tuning"))
    wd = synthetic_shards(tree, tmp_path / "wd")
    runner = Runner(out=io.StringIO())
    stored = ta.store(runner, wd, PIN, "gfx908", tuning_options(*SMALL))
    assert stored.directory == tmp_path / "tuning/aotriton" / PIN / "gfx908"
    assert sorted(stored.files) == [f"amd/gfx908/flash/{k}.sqlite3.tar.xz" for k in ta.KERNELS]
    found = tuning_db.find(PIN, "gfx908")
    args = tuning_db.build_inputs(found, tree, tmp_path / "root", runner=runner)
    assert args == [f"-DAOTRITON_TUNING_DATABASE_ROOT={tmp_path / 'root'}"]
    central = standin_rebuild(tree, tmp_path / "root", tmp_path / "build")
    with sqlite3.connect(central) as conn:
        gpus = {r[0] for r in conn.execute('SELECT DISTINCT gpu FROM "FLASH$attn_fwd"')}
    assert {"gfx908_mod0", "gfx90a_mod0", "gfx942_mod0"} <= gpus  # ours, over upstream's
    shard = stored.directory / "amd/gfx908/flash/attn_fwd.sqlite3.tar.xz"
    shard.write_bytes(shard.read_bytes() + b"\0")
    with pytest.raises(UserError, match="sha256"):
        tuning_db.find(PIN, "gfx908")


@needs_server
def test_a_real_run_without_a_gpu_stops_at_the_first_gpu_task(
    reachable: Path, provisioned_env: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The session itself, on the real pinned tree (its submodules left out: offline) in a
    stand-in env: one line, the server stopped, nothing stored, nothing left running."""
    if not AOTRITON_GIT:
        pytest.skip("set ROCMFA_AOTRITON_REAL_GIT to a ROCm/aotriton git snapshot")
    pins, work = reachable / "pins", reachable / "work"
    pins.mkdir()
    st.write_aotriton_pin(pins, f"file://{AOTRITON_GIT}", PIN, "0.13b", version="0.13b",
                          tuner="tuner-v3.5")  # fmt: skip
    borrow_snapshot(AOTRITON_GIT, work / "src" / "aotriton", PIN)  # the commit is present
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins))
    monkeypatch.setenv(tuning_db.TUNING_DIR_ENV, str(reachable / "tuning"))
    monkeypatch.setenv("ROCM_BOOTSTRAP_DISABLE_DETECTION", "1")
    wd = work / "tuning" / f"aotriton-{PIN[:12]}-gfx908"
    dispatch_venv(wd)
    argv = ["--prefix", str(provisioned_env), "--workdir", str(work), *SMALL]
    with pytest.raises(UserError) as stop:
        ta.tune_aotriton(tuning_options(*argv))
    assert "\n" not in str(stop.value) and "needs a gfx908 GPU" in str(stop.value)
    out = capsys.readouterr().out
    assert "queue: 6 tasks for gfx908" in out and "pg_ctl -D" in out.splitlines()[-1]
    assert server_stopped(pg_at(wd)) and not (reachable / "tuning").exists()
    assert not (work / "build" / "aotriton-tuning").exists()
