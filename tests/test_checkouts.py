"""ensure_checkout against upstream repositories made by the tests (file:// URLs)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from scripts.plumbing.commands import Runner
from scripts.plumbing.errors import UserError
from scripts.sources.checkouts import ensure_checkout
from scripts.sources.pins import Pin
from tests.support import aotriton_standins as st
from tests.support.aotriton_env import command_lines


@pytest.fixture(autouse=True)
def _file_submodules(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in st.FILE_PROTOCOL_ENV.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, str]:
    return st.make_aotriton_upstream(tmp_path)


def pin_for(repo: Path, commit: str) -> Pin:
    return Pin("aotriton", f"file://{repo}", "main", commit, "test", {"submodules": True})


def runner(dry_run: bool = False) -> Runner:
    return Runner(dry_run=dry_run, out=io.StringIO())


def test_clone_at_commit_with_submodules_then_noop(upstream, tmp_path: Path) -> None:
    repo, commit = upstream
    st.commit_files(repo, {"later.txt": "x\n"}, "upstream moved on")
    dest = tmp_path / "co"
    ensure_checkout(pin_for(repo, commit), dest, runner(), submodules=True)
    assert st.git(dest, "rev-parse", "HEAD") == commit
    assert (dest / "third_party" / "incbin" / "incbin.h").is_file()
    assert not (dest / "later.txt").exists()
    again = runner()
    ensure_checkout(pin_for(repo, commit), dest, again, submodules=True)
    printed = command_lines(again.out.getvalue())
    assert not any(" fetch " in line or " checkout " in line for line in printed)
    assert "up to date" in again.out.getvalue()


def test_dirty_checkout_is_refused_and_kept(upstream, tmp_path: Path) -> None:
    repo, commit = upstream
    dest = tmp_path / "co"
    ensure_checkout(pin_for(repo, commit), dest, runner())
    (dest / "VERSION").write_text("my local edit\n")
    (dest / "notes.txt").write_text("untracked, mine\n")
    with pytest.raises(UserError, match=r"has local edits .*'M VERSION'.*--force") as error:
        ensure_checkout(pin_for(repo, commit), dest, runner())
    assert "\n" not in str(error.value)
    assert (dest / "VERSION").read_text() == "my local edit\n"
    ensure_checkout(pin_for(repo, commit), dest, runner(), force=True)
    assert (dest / "VERSION").read_text() == "0.13.0\n"
    assert (dest / "notes.txt").read_text() == "untracked, mine\n"  # untracked files stay


def test_extra_commits_are_refused_without_force(upstream, tmp_path: Path) -> None:
    repo, commit = upstream
    first = st.git(repo, "rev-parse", "HEAD~1")
    dest = tmp_path / "co"
    ensure_checkout(pin_for(repo, commit), dest, runner())
    mine = st.commit_files(dest, {"mine.txt": "work\n"}, "my own commit")
    with pytest.raises(UserError, match=r"1 commit\(s\) that are not upstream or ours"):
        ensure_checkout(pin_for(repo, first), dest, runner())
    assert st.git(dest, "rev-parse", "HEAD") == mine
    ensure_checkout(pin_for(repo, first), dest, runner(), force=True)
    assert st.git(dest, "rev-parse", "HEAD") == first


def test_moving_between_pins_needs_no_force(upstream, tmp_path: Path) -> None:
    repo, commit = upstream
    newer = st.commit_files(repo, {"later.txt": "x\n"}, "upstream moved on")
    dest = tmp_path / "co"
    ensure_checkout(pin_for(repo, commit), dest, runner())
    ensure_checkout(pin_for(repo, newer), dest, runner())
    assert st.git(dest, "rev-parse", "HEAD") == newer


def test_unreachable_upstream_is_one_line(tmp_path: Path) -> None:
    dest = tmp_path / "co"
    pin = Pin("aotriton", f"file://{tmp_path / 'nowhere'}", "main", "a" * 40, "test", {})
    with pytest.raises(UserError, match=r"cannot fetch aotriton aaaaaaaaaaaa from file://") as e:
        ensure_checkout(pin, dest, runner())
    assert "\n" not in str(e.value)


def test_non_git_directory_is_not_deleted(upstream, tmp_path: Path) -> None:
    repo, commit = upstream
    dest = tmp_path / "co"
    dest.mkdir()
    (dest / "precious.txt").write_text("keep me\n")
    with pytest.raises(UserError, match="is not a git checkout"):
        ensure_checkout(pin_for(repo, commit), dest, runner())
    assert (dest / "precious.txt").read_text() == "keep me\n"


def test_dry_run_prints_and_creates_nothing(upstream, tmp_path: Path) -> None:
    repo, commit = upstream
    dest = tmp_path / "co"
    dry = runner(dry_run=True)
    ensure_checkout(pin_for(repo, commit), dest, dry, submodules=True)
    out = dry.out.getvalue()
    assert f"[dry-run] (cd {dest}) git fetch -q --no-tags origin {commit}" in out
    assert "submodule update -q --init --recursive" in out
    assert not dest.exists()
