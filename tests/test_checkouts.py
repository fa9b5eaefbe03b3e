"""ensure_checkout against upstream repositories made by the tests (file:// URLs)."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest

from rocmfa.plumbing import pin_files
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.sources import checkouts, update_pins
from rocmfa.sources.checkouts import ensure_checkout
from rocmfa.sources.pins import Pin
from tests.support import aotriton_port_standin as port
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
    return Pin("aotriton", f"file://{repo}", "main", commit, "test", {"submodules": SUBS})


SUBS = [st.UPSTREAM_SUBMODULE]


def runner(dry_run: bool = False) -> Runner:
    return Runner(dry_run=dry_run, out=io.StringIO())


def test_clone_at_commit_with_submodules_then_noop(upstream, tmp_path: Path) -> None:
    repo, commit = upstream
    st.commit_files(repo, {"later.txt": "x\n"}, "upstream moved on")
    dest = tmp_path / "co"
    ensure_checkout(pin_for(repo, commit), dest, runner(), submodules=SUBS)
    assert st.git(dest, "rev-parse", "HEAD") == commit
    assert (dest / "third_party" / "triton" / "python" / "setup.py").is_file()
    assert not (dest / "later.txt").exists()
    again = runner()
    ensure_checkout(pin_for(repo, commit), dest, again, submodules=SUBS)
    printed = command_lines(again.out.getvalue())
    assert not any(" fetch " in line or " checkout " in line for line in printed)
    assert "up to date" in again.out.getvalue()


def test_dirty_checkout_is_refused_and_kept(upstream, tmp_path: Path) -> None:
    repo, commit = upstream
    dest = tmp_path / "co"
    ensure_checkout(pin_for(repo, commit), dest, runner())
    (dest / "VERSION").write_text("my local edit\n")
    (dest / "notes.txt").write_text("untracked, mine\n")
    refused = r"has local edits .*'M VERSION'.*--discard-local-edits"
    with pytest.raises(UserError, match=refused) as error:
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


def test_dry_run_prints_exactly_the_commands_of_the_real_run(upstream, tmp_path: Path) -> None:
    """One code path: a fresh checkout's dry run prints the commands the real run executes,
    the pin's `depth` (docs/aotriton.md) in its fetch."""
    repo, commit = upstream
    pin = Pin("aotriton", f"file://{repo}", "main", commit, "test", {"depth": 1})
    dest = tmp_path / "co"
    dry = runner(dry_run=True)
    ensure_checkout(pin, dest, dry, submodules=SUBS)
    assert not dest.exists()
    lines = dry.out.getvalue().splitlines()
    printed = [line.removeprefix("[dry-run] ") for line in lines if line.startswith("[dry-run] (")]
    real = runner()
    ensure_checkout(pin, dest, real, submodules=SUBS)
    ran = [line.removeprefix("$ ") for line in real.out.getvalue().splitlines()]
    assert printed == [line for line in ran if line.startswith("(cd ")]
    assert f"(cd {dest}) git fetch -q --no-tags --depth=1 origin {commit}" in printed
    assert st.git(dest, "rev-parse", "HEAD") == commit


def test_port_layout_initialises_exactly_the_pinned_paths(tmp_path: Path) -> None:
    repo, commit = port.make_port(tmp_path)
    mapped, unmapped = update_pins.read_tree_submodules(runner(), repo, commit)
    assert mapped == port.PORT_SUBMODULES
    assert unmapped == (port.UNMAPPED_GITLINK,)
    # what `submodules = true` used to run: git stops at the unmapped gitlink, as on the real port
    plain = tmp_path / "plain"
    st.git(tmp_path, "clone", "-q", str(repo), str(plain))
    port.assert_recursive_init_stops_at_aiter(plain)
    dest = tmp_path / "co"
    pin = Pin("aotriton", f"file://{repo}", "main", commit, "test", {})
    ensure_checkout(pin, dest, runner(), submodules=list(mapped))
    for path in port.PORT_SUBMODULES:
        assert any((dest / path).iterdir()), path
    assert not any((dest / port.UNMAPPED_GITLINK).iterdir())
    registered = st.git(dest, "config", "--get-regexp", r"^submodule\..*\.url$")
    assert sorted(line.split()[0] for line in registered.splitlines()) == [
        f"submodule.{p}.url" for p in port.PORT_SUBMODULES
    ]


def test_patched_tree_missing_a_submodule_gets_it_and_keeps_the_patches(
    upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, commit = upstream
    root = tmp_path / "patches"
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(root))
    st.make_patch_set(root, "aotriton", commit, repo, [{"fix.txt": "patched\n"}])
    dest = tmp_path / "co"
    ensure_checkout(pin_for(repo, commit), dest, runner(), submodules=SUBS)
    checkouts.apply_patch_set("aotriton", commit, dest, runner())
    patched = st.git(dest, "rev-parse", "HEAD")
    st.git(dest, "submodule", "deinit", "-q", "-f", "--", st.UPSTREAM_SUBMODULE)
    again = runner()
    ensure_checkout(pin_for(repo, commit), dest, again, submodules=SUBS)
    assert st.git(dest, "rev-parse", "HEAD") == patched  # not reset to the pristine pin
    assert (dest / "fix.txt").read_text() == "patched\n"
    assert (dest / "third_party" / "triton" / "python" / "setup.py").is_file()
    assert "submodules added" in again.out.getvalue()
    assert not any(" checkout " in line for line in command_lines(again.out.getvalue()))


def test_submodules_true_is_refused_with_the_fix() -> None:
    def check(value: object) -> None:
        table = {"url": "u", "ref": "r", "commit": "a" * 40, "submodules": value}
        pin_files.check_table("aotriton", table, "pins/aotriton.toml [aotriton]")

    with pytest.raises(UserError, match=r"list the paths instead \(nox -s update_pins"):
        check(True)
    check(["third_party/triton"])
    with pytest.raises(UserError, match="'submodules' must be a list of paths inside the tree"):
        check(["../escape"])


RESUME_CASES = [
    # AOTriton 0.13b (6e00ef3e): one submodule, third_party/triton
    ("0.13b", "lacks-commit"),
    # the retired gfx908 port (60639c72): incbin, pybind11, triton named (aiter unmapped)
    ("port", "clone-breaks"),
    ("port", "lacks-commit"),
]


@pytest.mark.parametrize(("layout", "fault"), RESUME_CASES)
def test_part_failed_submodule_step_is_resumed_without_force(
    tmp_path: Path, layout: str, fault: str
) -> None:
    """The submodule step stops part way (a later submodule's clone breaks, or the fetched
    repository lacks the pinned commit): git leaves the submodules it had cloned modified. The
    next run, with the upstream fixed and nothing changed by the user, resumes without --force;
    an edit outside the submodules is still the user's and refused."""
    if layout == "0.13b":
        repo, commit = st.make_aotriton_upstream(tmp_path)
        subs, broken = [st.UPSTREAM_SUBMODULE], tmp_path / "triton-upstream"
    else:
        repo, commit = port.make_port(tmp_path)
        subs, broken = list(port.PORT_SUBMODULES), tmp_path / "port-submodules" / "pybind11"
    aside = broken.with_name(broken.name + ".aside")
    broken.rename(aside)
    if fault == "lacks-commit":  # a repository at the URL, without the pinned history
        st.make_repo(broken, {"other.txt": "not the pinned history\n"})
    pin = Pin("aotriton", f"file://{repo}", "main", commit, "test", {"submodules": subs})
    dest = tmp_path / "co"
    with pytest.raises(UserError, match=r"submodule update failed .*\(the next run resumes it\)"):
        ensure_checkout(pin, dest, runner(), submodules=subs)
    left = st.git(dest, "status", "--porcelain", "--untracked-files=no").splitlines()
    assert left and all(line.split()[-1] in subs for line in left)  # what the rerun refused
    if fault == "lacks-commit":
        subprocess.run(["rm", "-rf", str(broken)], check=True)
    aside.rename(broken)  # the upstream is fixed

    (dest / "CMakeLists.txt").write_text("# a user's edit\n")
    with pytest.raises(UserError, match="has local edits"):
        ensure_checkout(pin, dest, runner(), submodules=subs)
    st.git(dest, "checkout", "--", "CMakeLists.txt")

    again = runner()
    ensure_checkout(pin, dest, again, submodules=subs)
    said = again.out.getvalue()
    assert f"resuming the submodule step that stopped part way ({', '.join(subs)})" in said
    assert st.git(dest, "rev-parse", "HEAD") == commit
    assert st.git(dest, "status", "--porcelain", "--untracked-files=no") == ""
    status = subprocess.run(
        ["git", "submodule", "status", "--", *subs], cwd=dest, capture_output=True, text=True
    ).stdout.splitlines()  # " <commit> <path>": at the commit the tree records
    assert len(status) == len(subs) and all(line.startswith(" ") for line in status)
    assert subprocess.run(["git", "config", "rocmfa.submodulestep"], cwd=dest).returncode == 1
    up_to_date = runner()
    ensure_checkout(pin, dest, up_to_date, submodules=subs)
    assert "up to date" in up_to_date.out.getvalue()
