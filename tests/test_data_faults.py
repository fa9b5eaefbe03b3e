"""Garbage, empty and non-UTF-8 content in every data file we read, OS errors on our paths,
locks: each is one line (UserError, which the noxfile turns into one line and exit 1) or, for
records that only say "done", a redo - never a traceback, never a wrong "done"."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfa.builds import build_aotriton
from rocmfa.env import activation, archs, doctor, session_env
from rocmfa.plumbing import errors, options, pin_files, stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.sharing import install_wheels
from rocmfa.sources import pins

REPO_ROOT = Path(__file__).resolve().parent.parent
COMMIT = "6e00ef3e335b45dfb49065259533b59c68995bfe"
GARBAGE = {
    "empty": b"",
    "not utf-8": b"\xff\xfe\x00[x]\n",
    "garbage": b"[[[ = \x01 nonsense",
}


def one_line(error: BaseException) -> str:
    text = str(error)
    assert text and "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_toml_data_files_are_one_line(tmp_path: Path, kind: str) -> None:
    bad = tmp_path / "data.toml"
    bad.write_bytes(GARBAGE[kind])
    (tmp_path / "aotriton.toml").write_bytes(GARBAGE[kind])
    for load in (
        lambda: archs.load_arches(bad),
        lambda: activation.plan(
            archs.get_arch("gfx1151"), rocm_root="/r", aotriton_version=None, vars_file=bad
        ),
        lambda: pins.load_pin("aotriton", tmp_path),
        lambda: pin_files.check_file(tmp_path / "aotriton.toml", "aotriton"),
    ):
        with pytest.raises(UserError) as error:
            load()
        line = one_line(error.value)
        assert str(tmp_path) in line or "aotriton.toml" in line


@pytest.mark.parametrize(
    ("body", "expect"),
    [
        ('url = "u"\nref = "r"\ncommit = 12\n', "'commit' must be a string"),
        ('url = "u"\nref = "r"\ncommit = "6e00ef3"\n', "full 40-hex"),
        (f'url = "u"\nref = "r"\ncomit = "{COMMIT}"\n', "did you mean 'commit'"),
        (f'url = "u"\nref = "r"\ncommit = "{COMMIT}"\nversoin = "0.13b"\n', "'version'"),
    ],
)
def test_bad_pins_are_refused_the_same_by_builds_and_doctor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, expect: str
) -> None:
    (tmp_path / "aotriton.toml").write_text("[aotriton]\n" + body)
    with pytest.raises(UserError) as error:
        pins.load_pin("aotriton", tmp_path)
    assert expect in one_line(error.value)
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(tmp_path))
    (shown,) = doctor._pins_section()
    assert expect in shown["error"]


def test_doctor_next_step_names_a_bad_arch_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCMFA_ARCH", "GFX1151")
    section = doctor._arch_section(options.parse("doctor", []).arch, [])
    step = doctor._next_step({"arch": section, "env": {}, "lock": {}})
    assert "$ROCMFA_ARCH=GFX1151" in step and "did you mean 'gfx1151'" in step
    assert "no AMD GPU" not in step


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_records_that_say_done_are_a_redo_when_damaged(tmp_path: Path, kind: str) -> None:
    stamp = tmp_path / "stamp.json"
    stamp.write_bytes(GARBAGE[kind])
    assert stamps.read(stamp) is None and not stamps.is_current(stamp, {"a": 1})


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_run_manifest_is_one_line(tmp_path: Path, kind: str) -> None:
    path = install_wheels.manifest_path(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(GARBAGE[kind])
    with pytest.raises(UserError) as error:
        install_wheels.load_manifest(tmp_path)
    assert str(path) in one_line(error.value)


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_damaged_pip_install_record_is_not_acted_on(tmp_path: Path, kind: str) -> None:
    """The record naming the torch wheel pip was installing (build_aotriton.pip_install)
    only ever leads to a pip install of that wheel: damaged, it is passed over."""
    path = session_env.pip_pending_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(GARBAGE[kind])
    runner = Runner()
    build_aotriton.finish_interrupted(tmp_path, runner)
    assert runner.executed == [] and path.read_bytes() == GARBAGE[kind]


def test_os_errors_name_path_cause_and_fix() -> None:
    for code, words in (
        (errno.EROFS, "read-only"),
        (errno.EACCES, "write access"),
        (errno.ENOSPC, "free space"),
    ):
        line = errors.os_error_line(OSError(code, os.strerror(code), "/x/torch/lib"))
        assert "/x/torch/lib" in line and os.strerror(code) in line and words in line
    try:
        b"\xff".decode()
    except UnicodeDecodeError as e:
        assert "UTF-8" in errors.decode_error_line(e, "/p/x.toml")


def test_workdir_that_is_a_file_is_one_line_through_nox(tmp_path: Path) -> None:
    blocker = tmp_path / "work"
    blocker.write_text("not a folder")
    result = subprocess.run(
        [sys.executable, "-m", "nox", "-s", "build_pytorch", "--", "--workdir", str(blocker)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if str(blocker) in line]
    assert len(lines) == 1 and "fix:" in lines[0], result.stderr


def test_lock_names_its_holder_and_is_free_after_the_holder_dies(tmp_path: Path) -> None:
    lock = tmp_path / "work" / ".rocmfa.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from rocmfa.env.session_env import hold\n"
            "with hold(Path(sys.argv[1]), 'workdir', 'build_pytorch'):\n"
            "    print('held', flush=True); time.sleep(60)",
            str(lock),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError) as error, session_env.hold(lock, "workdir X", "build_ck"):
            pass
        assert f"pid {holder.pid}" in one_line(error.value) and "build_pytorch" in str(error.value)
    finally:
        holder.kill()
        holder.wait()
    with session_env.hold(lock, "workdir X", "build_ck"):  # the dead run's lock is taken over
        assert json.loads(lock.read_text())["session"] == "build_ck"


def test_doctor_next_step_for_a_mixed_sdk_and_the_unresolved_pin() -> None:
    report = {
        "arch": {"arch": "gfx1151"},
        "env": {"set_up": True, "torch": {"version": "2.13.0"},
                "mixed_sdk": "mixed ROCm SDK: rocm-sdk-core 2, rocm-sdk-devel 1; rerun: x"},
        "lock": {"present": True, "fresh": True, "reason": "ok"},
        "pins": [{"file": "pytorch.toml", "error": "p: 'commit' is not resolved yet (''); "
                  "the first real build resolves it, or run: nox -s update_pins"}],
        "builds": [],
    }  # fmt: skip
    assert doctor._next_step(report) == "nox -s setup_env -- --force (the ROCm SDK is mixed)"
    del report["env"]["mixed_sdk"]
    assert doctor._next_step(report).startswith("nox -s bench")
    report["env"]["torch"] = {}  # the next step is the main job's line; it resolves the pin
    assert doctor._next_step(report) == (
        "nox -s build_aotriton build_pytorch (its first run resolves and records the torch pin's "
        "commit)"
    )
