"""Fault injection against the real sessions (nox in a subprocess): a kill at every step of the
AOTriton install and of --restore, damaged backups, a read-only torch/lib, two runs at once.

Each test asserts the invariant, not a message: torch/lib holds the old AOTriton or the new one,
or doctor names the half-done change in one line with one command, and that command leaves the
old or the new one. The kill points come from the transaction's test hook ROCMFA_FAULT_AT=<n>
(scripts/plumbing/transaction.py): run n = 1, 2, ... until a run is no longer killed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.builds import aotriton_install
from scripts.env import session_guard
from scripts.plumbing import transaction
from scripts.plumbing.errors import UserError
from tests.support import aotriton_standins as st
from tests.support.aotriton_env import provision_env

REPO_ROOT = Path(__file__).resolve().parent.parent
KERNELS = 300  # per image pack: a few thousand small files in all, like a (smaller) real pack


@dataclass
class Rig:
    root: Path
    prefix: Path
    work: Path
    env: dict[str, str]
    shipped: Path  # a copy of torch/lib as torch shipped it
    installed: Path  # a copy of torch/lib after build_aotriton --from-release

    @property
    def lib(self) -> Path:
        return st.site_packages(self.prefix) / "torch" / "lib"

    def args(self) -> list[str]:
        return ["--arch", "gfx1151", "--prefix", str(self.prefix), "--workdir", str(self.work)]

    def nox(self, session: str, *extra: str, fault: str | None = None, **kw):
        env = {**os.environ, **self.env}
        env.pop(transaction.FAULT_ENV, None)
        if fault is not None:
            env[transaction.FAULT_ENV] = fault
        argv = [sys.executable, "-m", "nox", "-s", session, "--", *extra, *self.args()]
        return subprocess.run(
            argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, **kw
        )

    def reset(self, source: Path) -> None:
        shutil.rmtree(self.lib)
        shutil.copytree(source, self.lib, symlinks=True)
        shutil.rmtree(transaction.state_dir(self.prefix), ignore_errors=True)
        shutil.rmtree(self.work / "stamps", ignore_errors=True)


def snapshot(lib: Path) -> dict[str, object]:
    """What torch sees in lib: every entry but our hidden transaction folders."""
    found: dict[str, object] = {}
    for folder, dirs, files in os.walk(lib):
        base = Path(folder)
        dirs[:] = [d for d in dirs if not d.startswith(".rocmfa-")]
        for name in [*files, *(d for d in dirs if (base / d).is_symlink())]:
            path = base / name
            rel = path.relative_to(lib).as_posix()
            found[rel] = ("link", os.readlink(path)) if path.is_symlink() else path.read_bytes()
    return found


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, rocm_index) -> Rig:
    root = tmp_path_factory.mktemp("faults")
    prefix = provision_env(root / "env" / "therock", rocm_index.pins_dir)
    st.install_torch(prefix, image_files=KERNELS)
    files = st.make_release(root / "www", image_files=KERNELS, padding=1000)
    pins = root / "pins"
    pins.mkdir()
    (pins / "aotriton.toml").write_text(
        '[aotriton]\nurl = "file:///nonexistent"\nref = "0.13b"\n'
        'commit = "6e00ef3e335b45dfb49065259533b59c68995bfe"\nversion = "0.13b"\n\n'
        + files.pin_table(None)
    )
    st.write_pytorch_pin(pins, aotriton_commit="6e00ef3e" + "0" * 32, aotriton_version="0.13b")
    work = root / "work"
    cache = work / "downloads" / "aotriton" / "0.13b"  # verified by sha256, so no server
    cache.mkdir(parents=True)
    for name in (files.runtime_name, files.images_name):
        shutil.copy2(root / "www" / "0.13b" / name, cache / name)
    env = {
        "ROCMFA_PINS_DIR": str(pins),
        "ROCMFA_AOTRITON_BASE_URL": "http://127.0.0.1:9/",  # never reached
        **st.FILE_PROTOCOL_ENV,
    }
    lib = st.site_packages(prefix) / "torch" / "lib"
    rig = Rig(root, prefix, work, env, root / "shipped-lib", root / "installed-lib")
    shutil.copytree(lib, rig.shipped, symlinks=True)
    result = rig.nox("build_aotriton", "--from-release")
    assert result.returncode == 0, result.stdout + result.stderr
    shutil.copytree(lib, rig.installed, symlinks=True)
    return rig


def assert_old_new_or_repaired(rig: Rig, old: dict, new: dict, step: str) -> str:
    """The invariant. Returns how it held: 'old', 'new' or 'repaired' (by the one command
    that doctor names)."""
    state = snapshot(rig.lib)
    journals = transaction.pending(rig.prefix)
    if state in (old, new) and not journals:
        return "old" if state == old else "new"
    if state in (old, new):  # torch is whole; only leftovers of ours wait for the next session
        (line,) = session_guard.report(rig.prefix)  # what doctor prints
        command = line
    else:
        doctor = rig.nox("doctor")
        lines = [line for line in doctor.stdout.splitlines() if "half-installed" in line]
        assert len(lines) == 1, f"{step}: doctor does not name the half-install:\n{doctor.stdout}"
        command = lines[0]
    command = shlex.split(command.rsplit("repair: ", 1)[1])
    assert command[:2] == ["nox", "-s"] and "--" not in command, command
    repaired = rig.nox(command[2], *command[3:])
    assert repaired.returncode == 0, f"{step}: {command}: {repaired.stdout}{repaired.stderr}"
    assert snapshot(rig.lib) in (old, new), f"{step}: {command} left a third state"
    assert not transaction.pending(rig.prefix)
    assert not [p for p in rig.lib.iterdir() if p.name.startswith(".rocmfa-")]
    return "repaired" if state not in (old, new) else "cleaned"


def kill_at_every_step(rig: Rig, start: Path, old: dict, new: dict, *extra: str) -> list[str]:
    outcomes = []
    for n in range(1, 60):
        rig.reset(start)
        result = rig.nox("build_aotriton", *extra, fault=str(n))
        if result.returncode == 0:
            assert snapshot(rig.lib) == new  # past the last kill point: the run finished
            return outcomes
        assert result.returncode == -signal.SIGKILL, result.stdout + result.stderr
        outcomes.append(assert_old_new_or_repaired(rig, old, new, f"kill point {n}"))
    raise AssertionError("the run never finished")


@pytest.mark.slow
def test_install_killed_at_every_step(rig: Rig) -> None:
    old, new = snapshot(rig.shipped), snapshot(rig.installed)
    assert old != new and len(old) > 2 * KERNELS
    outcomes = kill_at_every_step(rig, rig.shipped, old, new, "--from-release")
    assert len(outcomes) >= 10 and "repaired" in outcomes  # the swap itself was killed


@pytest.mark.slow
def test_restore_killed_at_every_step(rig: Rig) -> None:
    old, new = snapshot(rig.installed), snapshot(rig.shipped)
    outcomes = kill_at_every_step(rig, rig.installed, old, new, "--restore")
    assert len(outcomes) >= 10 and "repaired" in outcomes


def test_the_next_run_of_the_session_recovers_first(rig: Rig) -> None:
    rig.reset(rig.shipped)
    killed = rig.nox("build_aotriton", "--from-release", fault="aside:aotriton.images")
    assert killed.returncode == -signal.SIGKILL
    assert snapshot(rig.lib) != snapshot(rig.shipped)  # half: the images are aside
    again = rig.nox("build_aotriton", "--from-release")
    assert again.returncode == 0, again.stdout + again.stderr
    assert snapshot(rig.lib) == snapshot(rig.installed)
    assert not transaction.pending(rig.prefix)


@pytest.mark.parametrize(
    "damage",
    ["empty record", "not utf-8", "garbage json", "file missing", "file changed", "no manifest"],
)
def test_damaged_backup_is_refused_before_anything_changes(rig: Rig, damage: str) -> None:
    rig.reset(rig.installed)
    backup = next((rig.work / "backups" / "aotriton").iterdir())
    kept = rig.root / "backup-kept"
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(backup, kept, symlinks=True)
    record = backup / "backup.json"
    kernel = backup / "aotriton.images" / "amd-gfx110x" / "flash" / "k00042.aks2"
    if damage == "empty record":
        record.write_text("")
    elif damage == "not utf-8":
        record.write_bytes(b"\xff\xfe{\x00")
    elif damage == "garbage json":
        record.write_text('{"files": ')
    elif damage == "file missing":
        kernel.unlink()
    elif damage == "file changed":
        kernel.write_bytes(kernel.read_bytes()[::-1])  # same size, other bytes
    else:
        text = record.read_text()
        record.write_text(text.replace('"manifest"', '"manifest_gone"'))
    try:
        before = snapshot(rig.lib)
        result = rig.nox("build_aotriton", "--restore")
        assert result.returncode != 0
        assert snapshot(rig.lib) == before
        assert "Traceback" not in result.stderr + result.stdout
        errors = [line for line in result.stderr.splitlines() if "nothing was changed" in line]
        assert len(errors) == 1, result.stderr
    finally:
        shutil.rmtree(backup)
        shutil.copytree(kept, backup, symlinks=True)


def _unshare_works() -> str | None:
    if not shutil.which("unshare"):
        return "no unshare(1)"
    with tempfile.TemporaryDirectory() as scratch:
        mount = f"mount --bind {scratch} {scratch} && mount -o remount,ro,bind {scratch}"
        probe = subprocess.run(
            ["unshare", "-rm", "sh", "-c", mount], capture_output=True, text=True
        )
    return None if probe.returncode == 0 else f"no mount namespace here: {probe.stderr.strip()}"


def test_read_only_torch_lib_is_one_line_and_changes_nothing(rig: Rig) -> None:
    why = _unshare_works()
    if why:
        pytest.skip(why)
    rig.reset(rig.shipped)
    before = snapshot(rig.lib)
    lib = shlex.quote(str(rig.lib))
    nox = shlex.join(
        [sys.executable, "-m", "nox", "-s", "build_aotriton", "--", "--from-release", *rig.args()]
    )
    script = f"mount --bind {lib} {lib} && mount -o remount,ro,bind {lib} && exec {nox}"
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=REPO_ROOT,
        env={**os.environ, **rig.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert snapshot(rig.lib) == before
    assert not transaction.pending(rig.prefix)
    line = [x for x in result.stderr.splitlines() if "Read-only file system" in x]
    assert len(line) == 1 and str(rig.lib) in line[0], result.stderr


def _start_paused_mid_swap(rig: Rig) -> subprocess.Popen[bytes]:
    """A real build_aotriton --from-release that stops itself (SIGSTOP) mid-swap: the old images
    aside, nothing new in, its locks held."""
    rig.reset(rig.shipped)
    env = {**os.environ, **rig.env, transaction.FAULT_ENV: "aside:aotriton.images"}
    env["ROCMFA_FAULT_SIGNAL"] = "SIGSTOP"
    argv = [sys.executable, "-m", "nox", "-s", "build_aotriton", "--", "--from-release"]
    return subprocess.Popen(
        [*argv, *rig.args()],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_stopped(pid: int) -> None:
    for _ in range(600):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.05)
    raise AssertionError("the first run never reached its stop point")


def test_second_run_is_refused_and_a_killed_runs_lock_is_taken_over(rig: Rig) -> None:
    first = _start_paused_mid_swap(rig)  # holds its locks while stopped
    try:
        _wait_stopped(first.pid)
        second = rig.nox("build_aotriton", "--from-release")
        assert second.returncode != 0
        assert f"pid {first.pid}" in second.stderr and "Traceback" not in second.stderr
        reader = rig.nox("repair")  # any session: it must not touch an install in progress
        assert reader.returncode != 0 and f"pid {first.pid}" in reader.stderr
    finally:
        first.kill()
        first.wait()
    third = rig.nox("build_aotriton", "--from-release")  # the dead run's locks are free
    assert third.returncode == 0, third.stdout + third.stderr
    assert snapshot(rig.lib) == snapshot(rig.installed)


def test_backup_manifest_lists_every_file(rig: Rig) -> None:
    backup = next((rig.work / "backups" / "aotriton").iterdir())
    info = aotriton_install.verify_backup(backup)
    assert len(info["manifest"]) == len(snapshot(rig.shipped))


def test_killed_pip_install_is_named_by_every_session_and_redone_by_install_wheels(
    tmp_path: Path,
) -> None:
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from scripts.plumbing import transaction\n"
            "with transaction.recorded(Path(sys.argv[1]), label='wheels', what='pip install', "
            "target=Path(sys.argv[1]), session='install_wheels', repair='nox -s install_wheels'):"
            "\n    pass",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, transaction.FAULT_ENV: "journal:wheels"},
    )
    assert killed.returncode == -signal.SIGKILL
    (line,) = session_guard.report(tmp_path)
    assert line.endswith("repair: nox -s install_wheels")
    with pytest.raises(UserError, match="repair: nox -s install_wheels"):
        session_guard.recover(tmp_path, "bench")
    session_guard.recover(tmp_path, "install_wheels")  # the repair itself goes ahead


def test_ctrl_c_during_the_swap_waits_for_the_swap_to_end(rig: Rig) -> None:
    run = _start_paused_mid_swap(rig)
    _wait_stopped(run.pid)  # mid-swap: the old images are aside, nothing new is in
    os.kill(run.pid, signal.SIGINT)
    os.kill(run.pid, signal.SIGCONT)
    assert run.wait(timeout=120) != 0  # interrupted, but only after the swap
    assert snapshot(rig.lib) == snapshot(rig.installed)
    assert not transaction.pending(rig.prefix)


@pytest.fixture(scope="module")
def half_swapped(rig: Rig) -> Path:
    """A copy of the env's torch/lib and journal mid-swap at the most work for recovery: every
    old entry aside, every new one in, the journal still saying "swapping"."""
    rig.reset(rig.shipped)
    journal = transaction.journal_dir(rig.prefix) / "aotriton.json"
    killed = rig.nox("build_aotriton", "--from-release", fault="journal:swapping")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    last = transaction.read_journal(journal)["new"][-1]  # type: ignore[index]
    rig.reset(rig.shipped)
    killed = rig.nox("build_aotriton", "--from-release", fault=f"in:{last}")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert transaction.read_journal(journal)["phase"] == "swapping"  # type: ignore[index]
    saved = rig.root / "half-swapped"
    shutil.copytree(rig.lib, saved / "lib", symlinks=True)
    shutil.copytree(transaction.state_dir(rig.prefix), saved / "state", symlinks=True)
    return saved


def _restore_half_swapped(rig: Rig, saved: Path) -> None:
    rig.reset(saved / "lib")
    shutil.copytree(saved / "state", transaction.state_dir(rig.prefix), symlinks=True)


def _assert_next_repair_finishes(rig: Rig, old: dict, step: str) -> None:
    repaired = rig.nox("repair")
    assert repaired.returncode == 0, f"{step}: {repaired.stdout}{repaired.stderr}"
    assert snapshot(rig.lib) == old, f"{step}: repair left a third state"
    assert not transaction.pending(rig.prefix)
    assert not [p for p in rig.lib.iterdir() if p.name.startswith(".rocmfa-")]


def test_repair_killed_at_every_step_of_its_recovery(rig: Rig, half_swapped: Path) -> None:
    old = snapshot(rig.shipped)
    for n in range(1, 60):
        _restore_half_swapped(rig, half_swapped)
        result = rig.nox("repair", fault=str(n))
        if result.returncode == 0:  # past the last kill point
            assert snapshot(rig.lib) == old and not transaction.pending(rig.prefix)
            break
        assert result.returncode == -signal.SIGKILL, result.stdout + result.stderr
        _assert_next_repair_finishes(rig, old, f"repair killed at point {n}")
    else:
        raise AssertionError("repair never finished")
    assert n > 4  # entries moved out, entries moved back, the cleanup: each was killed


def test_a_session_killed_inside_the_recovery_it_does_first(rig: Rig, half_swapped: Path) -> None:
    old = snapshot(rig.shipped)
    recovery_points = 0
    for n in range(1, 60):
        _restore_half_swapped(rig, half_swapped)
        result = rig.nox("build_aotriton", "--from-release", fault=str(n))
        assert result.returncode == -signal.SIGKILL, result.stdout + result.stderr
        if "recovered the interrupted" in result.stdout:
            break  # killed after its recovery: the install's own points, tested above
        recovery_points += 1
        _assert_next_repair_finishes(rig, old, f"build_aotriton killed at point {n}")
    assert recovery_points > 4
