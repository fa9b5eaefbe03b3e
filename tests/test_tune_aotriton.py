"""tune_aotriton against a stand-in AOTriton pinned at a cpptune release (upstream 0.11b's
layout, torch 2.9's AOTriton: a coherent pin set) built with the real cmake and ninja; and its
refusal of Tuner v3.5 at 0.13b, gfx908's patch set included."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocmfa.builds import aotriton_install
from rocmfa.builds import build_aotriton as ba
from rocmfa.builds import tune_aotriton as ta
from rocmfa.plumbing import options
from rocmfa.plumbing.errors import UserError
from rocmfa.sources import tuning_db
from tests.support import aotriton_port_standin as port
from tests.support import aotriton_standins as st
from tests.support.aotriton_env import build_opts, command_lines, provision_env


@dataclass
class Bed:
    prefix: Path
    repo: Path
    commit: str
    pins: Path
    work: Path

    @property
    def torch_lib(self) -> Path:
        return st.site_packages(self.prefix) / "torch" / "lib"

    @property
    def state(self) -> Path:
        return self.work / "tuning" / f"aotriton-{self.commit[:12]}-gfx90a"

    @property
    def published(self) -> Path:
        return self.pins / "tuning" / "aotriton" / self.commit / "gfx90a"


PINNED_013B = "6e00ef3e335b45dfb49065259533b59c68995bfe"  # the real pin, with gfx908's patch set
PLAN = ("--tune-head-dims", "32,64", "--tune-dtypes", "float16")


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory, rocm_index) -> Bed:
    root = tmp_path_factory.mktemp("aotriton-port")
    prefix = provision_env(root / "env" / "therock", rocm_index.pins_dir)
    st.install_pybind11(prefix)  # the cpptune tuner imports the tuning build's pyaotriton
    repo, commit = port.make_port(root)
    pins = root / "pins"
    pins.mkdir()
    st.write_aotriton_pin(
        pins,
        f"file://{repo}",
        commit,
        "0.11b",
        version="0.11b",
        tuner="cpptune",
        submodules=list(port.PORT_SUBMODULES),
    )
    (root / "patches").mkdir()
    # torch 2.9, built for AOTriton 0.11 (aotriton_matrix.toml [torch."2.9"])
    st.install_torch(
        prefix, runtime="0.11.0", images={"amd-gfx90a": "0.11"}, version="2.9.1+rocm7.1.0"
    )
    return Bed(prefix, repo, commit, pins, root / "work")


@pytest.fixture
def v35(bed: Bed, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Pins of the real line: 0.13b (Tuner v3.5) with the repository's own patch sets."""
    pins = bed.pins.parent / "pins-v35"
    if not pins.exists():
        pins.mkdir()
        st.write_aotriton_pin(
            pins, f"file://{bed.repo}", PINNED_013B, "0.13b", version="0.13b", tuner="tuner-v3.5"
        )
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins))
    monkeypatch.delenv("ROCMFA_PATCHES_DIR")
    return pins


@pytest.fixture(autouse=True)
def _env(bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(bed.pins))
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(bed.pins.parent / "patches"))
    monkeypatch.delenv("ROCMFA_TUNING_DIR", raising=False)
    monkeypatch.delenv("STANDIN_TUNE_STOP_AFTER", raising=False)
    for key, value in st.FILE_PROTOCOL_ENV.items():  # the port's file:// submodules
        monkeypatch.setenv(key, value)


def tune(bed: Bed, capsys, *extra: str, arch: str = "gfx90a") -> str:
    capsys.readouterr()
    argv = ["--arch", arch, "--prefix", str(bed.prefix), "--workdir", str(bed.work), *extra]
    try:
        ta.tune_aotriton(options.parse("tune_aotriton", argv))
    finally:
        captured = capsys.readouterr().out
        print(captured)
    return captured


def test_tune_dry_run_shows_tune_store_rebuild_validate(bed: Bed, capsys) -> None:
    out = tune(bed, capsys, "--dry-run", *PLAN)
    assert command_lines(out) == []
    lines = out.splitlines()
    tuning_configure = next(line for line in lines if "-DAOTRITON_BUILD_FOR_TUNING=ON" in line)
    assert "-DAOTRITON_OVERRIDE_TARGET_GPUS=gfx90a_mod0" in tuning_configure
    assert "-DAOTRITON_NAME_SUFFIX=rocmfa" in tuning_configure
    tuner = [line for line in lines if "test/tune_flash.py --json_file" in line]
    assert len(tuner) == 2 and "--d_head 32" in tuner[0] and "--d_head 64" in tuner[1]
    assert all("--dtype float16 " in line and "PYTHONPATH=" in line for line in tuner)
    assert all(line.endswith(" --debug_headless") for line in tuner)  # no terminal needed
    assert any("table_tool.py --action rawjson -k FLASH" in line for line in lines)
    gate = next(line for line in lines if "validate.py" in line)
    assert "--head-dims 32,64" in gate and "--dtypes fp16" in gate and "LD_PRELOAD=" in gate
    order = [next(i for i, x in enumerate(lines) if x.startswith(f"[{n}/6]")) for n in range(1, 7)]
    assert order == sorted(order)
    assert not bed.state.exists()


@pytest.mark.parametrize("arch", ["gfx1151", "gfx908"])
def test_tune_at_013b_names_tuner_v35(bed: Bed, v35: Path, capsys, arch: str) -> None:
    """0.13b tunes with Tuner v3.5; gfx908 (0.13b + our patch set, gfx90a's tuning reused) too:
    the 0.10b port's cpptune is retired with it."""
    with pytest.raises(UserError) as error:
        tune(bed, capsys, "--dry-run", arch=arch)
    message = str(error.value)
    assert "\n" not in message and "Tuner v3.5" in message
    assert "AOTRITON_TUNING_DATABASE_ROOT" in message and f"amd/{arch}/" in message


def test_interrupted_tuning_resumes_and_failed_gate_installs_nothing(
    bed: Bed, capfd, monkeypatch: pytest.MonkeyPatch
) -> None:
    capsys = capfd  # the tuner's own output goes to the file descriptors
    before = aotriton_install.installed_fingerprint(bed.torch_lib)
    monkeypatch.setenv("STANDIN_TUNE_STOP_AFTER", "3")
    with pytest.raises(UserError, match="command failed"):
        tune(bed, capsys, *PLAN, "--tune-seqlens", "16,32")
    raw = bed.state / "raw-d32-float16.json"
    assert len(raw.read_text().splitlines()) == 3
    assert json.loads((bed.state / "progress.json").read_text())["done"] == ["build"]

    monkeypatch.delenv("STANDIN_TUNE_STOP_AFTER")
    with pytest.raises(UserError) as error:
        tune(bed, capsys, *PLAN, "--tune-seqlens", "16,32")
    out = capsys.readouterr().out
    assert "resuming: done earlier: build" in out and "done earlier; skipped" in out
    assert "skip_set=3" in out  # the tuner continued its own records
    ids = [json.loads(x)["task_id"] for x in raw.read_text().splitlines()]
    assert sorted(ids) == [0, 1, 2, 3]
    candidate = tuning_db.load(bed.state / "candidate")
    assert candidate.meta["head_dims"] == [32, 64] and candidate.meta["dtypes"] == ["float16"]
    rebuilt = bed.work / "build" / "aotriton" / "install"
    info = (rebuilt / "share" / "aotriton" / "build-info.txt").read_text()
    assert "TUNED_ROWS=9" in info  # 1 reused gfx90a row + 8 tuned
    # The gate (validate.py) cannot pass here: nothing installed, nothing published.
    assert "validate failed" in str(error.value) and "NOT installed" in str(error.value)
    assert aotriton_install.installed_fingerprint(bed.torch_lib) == before
    assert not bed.published.exists()

    # Another plan keeps the tuning build, not the old records (their task ids mean other cases).
    monkeypatch.setenv("STANDIN_TUNE_STOP_AFTER", "1")
    with pytest.raises(UserError, match="command failed"):
        tune(bed, capsys, *PLAN, "--tune-seqlens", "16,64")
    out = capsys.readouterr().out
    assert "another plan than last time" in out and "done earlier; skipped" in out
    assert [json.loads(x)["task_id"] for x in raw.read_text().splitlines()] == [0]


def test_stored_database_is_used_and_wrong_sha256_refused(bed: Bed, capsys) -> None:
    records = bed.pins.parent / "records.json"
    records.write_text(
        json.dumps(
            {
                "arch": "gfx90a_mod0",
                "task_id": 0,
                "kernel_name": "attn_fwd",
                "inputs": {"D_HEAD": 64},
                "tuned_kernel": {"BLOCK_M": 16},
                "result": "tuned",
                "time": [1.0],
            }
        )
        + "\n"
    )
    tuning_db.write(
        bed.published,
        {tuning_db.CPPTUNE_RECORDS: records},
        commit=bed.commit,
        arch="gfx90a",
        kind="cpptune-json",
        tuner="cpptune",
        meta={"head_dims": [64], "dtypes": ["float16"], "seqlens": [16]},
    )
    plan = ("--tune-head-dims", "64", "--tune-dtypes", "float16", "--tune-seqlens", "16")
    out = tune(bed, capsys, *plan)
    assert "already tuned for this plan" in out and command_lines(out) == []
    # A patch set for the pinned commit is applied before the database is merged in.
    patches = bed.pins.parent / "patches"
    st.make_patch_set(patches, "aotriton", bed.commit, bed.repo, [{"PATCHED": "yes\n"}])
    capsys.readouterr()
    try:
        ba.build_aotriton(build_opts(bed.prefix, bed.work, arch="gfx90a"))
    finally:
        shutil.rmtree(patches / "aotriton")
    out = capsys.readouterr().out
    assert "with the tuning database gfx90a" in out
    src = bed.work / "src" / "aotriton"
    assert (src / "PATCHED").read_text() == "yes\n"
    assert st.git(src, "status", "--porcelain") == ""  # the merged database was put back
    installed = bed.work / "build" / "aotriton" / "install"
    assert "TUNED_ROWS=2" in (installed / "share" / "aotriton" / "build-info.txt").read_text()
    assert (bed.torch_lib / "libaotriton_v2.so.0.11.0").read_bytes() == (
        installed / "lib" / "libaotriton_v2.so.0.11.0"
    ).read_bytes()

    (bed.published / tuning_db.CPPTUNE_RECORDS).write_text("{}\n")
    with pytest.raises(UserError) as error:
        ba.build_aotriton(build_opts(bed.prefix, bed.work, "--dry-run", arch="gfx90a"))
    assert "sha256" in str(error.value) and "refusing" in str(error.value)
    shutil.rmtree(bed.published)


def test_sharded_database_goes_to_tuning_database_root_gfx1151(bed: Bed, v35: Path, capsys) -> None:
    shard = bed.pins.parent / "attn_fwd.sqlite3.tar.xz"
    shard.write_bytes(port.tuning_database_tar_xz())
    where = v35 / "tuning" / "aotriton" / PINNED_013B / "gfx1151"
    tuning_db.write(
        where,
        {"amd/gfx1151/flash/attn_fwd.sqlite3.tar.xz": shard},
        commit=PINNED_013B,
        arch="gfx1151",
        kind="sharded-sqlite",
        tuner="tuner-v3.5",
        meta={},
    )
    try:
        capsys.readouterr()
        # --force: the torch here is 2.9 (0.11b), this dry run is for 0.13b
        opts = build_opts(bed.prefix, bed.work, "--dry-run", "--force", arch="gfx1151")
        ba.build_aotriton(opts)
        out = capsys.readouterr().out
        configure = next(line for line in out.splitlines() if " -G Ninja " in line)
        assert f"-DAOTRITON_TUNING_DATABASE_ROOT={where}" in configure
        assert "-DAOTRITON_TARGET_ARCH=gfx1151" in configure and command_lines(out) == []
    finally:
        shutil.rmtree(where)


def test_nox_tune_aotriton_dry_run_gfx90a(bed: Bed) -> None:
    repo_root = Path(__file__).resolve().parent.parent
    nox = [sys.executable, "-m", "nox", "-s", "tune_aotriton", "--", "--dry-run"]
    fresh = bed.work.with_name("work-nox")  # no progress from the other tests
    result = subprocess.run(
        [*nox, "--arch", "gfx90a", "--prefix", str(bed.prefix), "--workdir", str(fresh)],
        cwd=repo_root,
        env={**os.environ, "ROCMFA_PINS_DIR": str(bed.pins), **st.FILE_PROTOCOL_ENV},
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "-DAOTRITON_BUILD_FOR_TUNING=ON" in output and "validate.py" in output
