"""A journal is confined to its env (scripts/plumbing/transaction.py check()): one that names
anything outside the env, or is not readable, is never acted on - every session but repair
stops on it in one line, and `nox -s repair` sets it aside in <env>/.rocmfa/quarantine/,
leaving every path it names untouched. A garbage journal costs one repair, nothing else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.env import doctor, session_guard
from scripts.plumbing import transaction
from scripts.plumbing.errors import UserError

REPO_ROOT = Path(__file__).resolve().parent.parent


def _layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """An env with a target folder, and a precious folder outside it."""
    prefix, outside = tmp_path / "env", tmp_path / "elsewhere"
    target = prefix / "lib" / "torch" / "lib"
    (target / "libaotriton_v2.so").parent.mkdir(parents=True)
    (target / "libaotriton_v2.so").write_text("installed")
    (outside / "kernels").mkdir(parents=True)
    (outside / "kernels" / "k.aks2").write_text("precious")
    (outside / "libaotriton_v2.so").write_text("precious too")
    return prefix, target, outside


def _tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): p.read_text() if p.is_file() else "/"
        for p in sorted(root.rglob("*"))
    }


HOSTILE = {
    # the journal: an absolute staging replaces the base it is joined to
    "absolute staging": lambda t, o: {"staging": str(o), "phase": "staging"},
    "absolute aside": lambda t, o: {"aside": str(o), "old": ["libaotriton_v2.so"]},
    "target outside": lambda t, o: {"target": str(o), "new": ["libaotriton_v2.so"]},
    "target with ..": lambda t, o: {"target": f"{t}/../../../../elsewhere", "new": ["kernels"]},
    "relative target": lambda t, o: {"target": "elsewhere", "new": ["kernels"]},
    "entry with /": lambda t, o: {"new": ["../../../../../elsewhere/kernels"]},
    "staging other name": lambda t, o: {"staging": ".rocmfa-other.new"},
    "unknown phase": lambda t, o: {"phase": "rm -rf"},
    "unknown kind": lambda t, o: {"kind": "delete"},
    "opaque repair not nox": lambda t, o: {"kind": "opaque", "repair": "rm -rf ~"},
}


def _write(prefix: Path, target: Path, outside: Path, change) -> Path:
    record = {
        "version": 1,
        "what": "AOTriton install",
        "kind": "replace",
        "target": str(target),
        "staging": transaction.staging_name("aotriton"),
        "aside": transaction.aside_name("aotriton"),
        "phase": "swapping",
        "old": [],
        "new": [],
        "repaired_by": "install_wheels",
        **change(target, outside),
    }
    path = transaction.journal_dir(prefix) / "aotriton.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    return path


def _assert_set_aside(prefix: Path, journal: Path) -> None:
    assert not journal.exists() and not transaction.pending(prefix)
    (kept,) = transaction.quarantined(prefix)
    assert kept.name.endswith("-aotriton.json")


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_journal_naming_anything_outside_the_env_is_refused_then_set_aside(
    tmp_path: Path, case: str
) -> None:
    prefix, target, outside = _layout(tmp_path)
    journal = _write(prefix, target, outside, HOSTILE[case])
    before_out, before_env = _tree(outside), _tree(target)
    with pytest.raises(UserError, match=r"refused journal .*repair: nox -s repair") as error:
        session_guard.recover(prefix, "build_aotriton", say=lambda _line: None)
    assert "\n" not in str(error.value) and journal.exists()
    said: list[str] = []
    session_guard.recover(prefix, "repair", say=said.append)
    (line,) = said
    assert "set aside as" in line and str(transaction.quarantine_dir(prefix)) in line
    _assert_set_aside(prefix, journal)
    assert _tree(outside) == before_out and _tree(target) == before_env
    session_guard.recover(prefix, "build_aotriton")  # nothing blocks any more


def test_staging_that_is_a_symlink_out_of_the_env_is_refused(tmp_path: Path) -> None:
    prefix, target, outside = _layout(tmp_path)
    (target / transaction.aside_name("aotriton")).symlink_to(outside)
    journal = _write(prefix, target, outside, lambda t, o: {"old": ["libaotriton_v2.so"]})
    before_out, before_env = _tree(outside), _tree(target)
    with pytest.raises(UserError, match="not a folder of ours"):
        transaction.recover(journal, transaction.read_journal(journal))
    session_guard.recover(prefix, "repair", say=lambda _line: None)
    _assert_set_aside(prefix, journal)
    assert _tree(outside) == before_out and _tree(target) == before_env


def test_target_through_a_symlink_out_of_the_env_is_refused(tmp_path: Path) -> None:
    prefix, _target, outside = _layout(tmp_path)
    (prefix / "escape").symlink_to(outside)
    journal = _write(prefix, prefix / "escape", outside, lambda t, o: {"new": ["kernels"]})
    record = transaction.read_journal(journal)
    assert record is not None and "outside the env" in str(transaction.check(journal, record))


def test_a_well_formed_journal_is_still_recovered(tmp_path: Path) -> None:
    prefix, target, outside = _layout(tmp_path)
    aside = target / transaction.aside_name("aotriton")
    aside.mkdir()
    os.rename(target / "libaotriton_v2.so", aside / "libaotriton_v2.so")
    _write(prefix, target, outside, lambda t, o: {"old": ["libaotriton_v2.so"]})
    session_guard.recover(prefix, "bench", say=lambda _line: None)
    assert (target / "libaotriton_v2.so").read_text() == "installed" and not aside.exists()
    assert not transaction.pending(prefix) and not transaction.quarantined(prefix)


def _nox(
    session: str, prefix: Path, work: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nox", "-s", session, "--", "--prefix", str(prefix)]
        + ["--workdir", str(work)] * (session != "doctor"),
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_garbage_journal_costs_one_repair_through_nox(tmp_path: Path) -> None:
    prefix, work = tmp_path / "env", tmp_path / "work"
    journal = transaction.journal_dir(prefix) / "aotriton.json"
    journal.parent.mkdir(parents=True)
    journal.write_text('{"kind": "repl')
    blocked = _nox("build_ck", prefix, work)
    assert blocked.returncode != 0 and "repair: nox -s repair" in blocked.stderr
    repaired = _nox("repair", prefix, work)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    (line,) = [x for x in repaired.stdout.splitlines() if "set aside as" in x]
    assert str(transaction.quarantine_dir(prefix)) in line
    _assert_set_aside(prefix, journal)
    report = doctor.render({**doctor.gather(doctor.DoctorOptions(prefix=str(prefix))), "next": "-"})
    assert f"SET ASIDE  1 refused journal(s) in {transaction.quarantine_dir(prefix)}" in report


def test_repair_killed_while_setting_a_journal_aside(tmp_path: Path) -> None:
    prefix, work = tmp_path / "env", tmp_path / "work"
    journal = transaction.journal_dir(prefix) / "aotriton.json"
    journal.parent.mkdir(parents=True)
    journal.write_bytes(b"\xff\xfe")
    killed = _nox("repair", prefix, work, {transaction.FAULT_ENV: "quarantined"})
    assert killed.returncode == -signal.SIGKILL
    again = _nox("repair", prefix, work)
    assert again.returncode == 0 and "no interrupted change left" in again.stdout
    _assert_set_aside(prefix, journal)
