"""Patch sets keyed by the pinned commit, and update_pins, against test-made repositories."""

from __future__ import annotations

import io
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocmfa.plumbing import options
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.sources import checkouts, update_pins
from rocmfa.sources.checkouts import ensure_checkout
from rocmfa.sources.pins import Pin
from tests.support import aotriton_standins as st


@dataclass
class Up:
    repo: Path
    base: str
    root: Path  # patches root

    def pin(self, commit: str | None = None) -> Pin:
        return Pin("proj", f"file://{self.repo}", "main", commit or self.base, "test", {})


@pytest.fixture
def up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Up:
    repo = tmp_path / "upstream"
    base = st.make_repo(repo, {"a.txt": "one\ntwo\nthree\n", "b.txt": "alpha\nbeta\n"})
    root = tmp_path / "patches"
    root.mkdir()
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(root))
    return Up(repo, base, root)


def quiet(dry_run: bool = False) -> Runner:
    return Runner(dry_run=dry_run, out=io.StringIO())


def checkout(up: Up, dest: Path, commit: str | None = None) -> Path:
    return ensure_checkout(up.pin(commit), dest, quiet())


def test_apply_is_idempotent_and_reproducible(up: Up, tmp_path: Path) -> None:
    st.make_patch_set(
        up.root, "proj", up.base, up.repo, [{"a.txt": "one\nTWO\nthree\n"}, {"c.txt": "new\n"}]
    )
    first = checkout(up, tmp_path / "one")
    shas = checkouts.apply_patch_set("proj", up.base, first, quiet())
    assert len(shas) == 2
    head = st.git(first, "rev-parse", "HEAD")
    assert (first / "c.txt").read_text() == "new\n"
    again = quiet()
    assert checkouts.apply_patch_set("proj", up.base, first, again) == shas
    assert "already applied" in again.out.getvalue()
    assert st.git(first, "rev-parse", "HEAD") == head
    # a later ensure_checkout accepts the patched state as clean
    ensure_checkout(up.pin(), first, quiet())
    assert st.git(first, "rev-parse", "HEAD") == head
    second = checkout(up, tmp_path / "two")
    checkouts.apply_patch_set("proj", up.base, second, quiet())
    assert st.git(second, "rev-parse", "HEAD") == head  # same pin + patches = same HEAD
    assert checkouts.patch_set_digest("proj", up.base) != checkouts.patch_set_digest(
        "proj", "0" * 40
    )


def test_failing_patch_leaves_pristine_checkout(up: Up, tmp_path: Path) -> None:
    set_dir = st.make_patch_set(
        up.root, "proj", up.base, up.repo, [{"c.txt": "new\n"}, {"b.txt": "alpha\nBETA\n"}]
    )
    dest = checkout(up, tmp_path / "co")
    (dest / "b.txt").write_text("alpha\nsomething else\n")  # upstream-like divergence
    st.git(dest, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qam", "diverge")
    diverged = st.git(dest, "rev-parse", "HEAD")
    # pretend the pin is this diverged commit, with the set moved to it
    moved = up.root / "proj" / diverged
    shutil.move(set_dir, moved)
    with pytest.raises(UserError) as error:
        checkouts.apply_patch_set("proj", diverged, dest, quiet())
    message = str(error.value)
    assert "\n" not in message
    assert "0002-" in message and "b.txt" in message and diverged[:12] in message
    assert st.git(dest, "rev-parse", "HEAD") == diverged
    assert st.git(dest, "status", "--porcelain") == ""
    assert not (dest / "c.txt").exists()  # patch 1 was rolled back too
    assert not (dest / ".git" / "rebase-apply").exists()


def test_failing_new_set_goes_back_to_the_previous_patched_state(up: Up, tmp_path: Path) -> None:
    set_dir = st.make_patch_set(up.root, "proj", up.base, up.repo, [{"c.txt": "new\n"}])
    dest = checkout(up, tmp_path / "co")
    checkouts.apply_patch_set("proj", up.base, dest, quiet())
    patched = st.git(dest, "rev-parse", "HEAD")
    # the set changes: its patch now conflicts with the pin
    shutil.rmtree(set_dir)
    st.make_patch_set(up.root, "proj", up.base, up.repo, [{"b.txt": "alpha\nBETA\n"}])
    patch = next(set_dir.glob("*.patch"))
    patch.write_bytes(patch.read_bytes().replace(b"-beta", b"-gamma"))
    st.write_manifest(set_dir)
    with pytest.raises(UserError) as error:
        checkouts.apply_patch_set("proj", up.base, dest, quiet())
    assert f"checkout back at its previous patched state {patched[:12]}" in str(error.value)
    assert st.git(dest, "rev-parse", "HEAD") == patched  # not the pristine pin
    assert (dest / "c.txt").read_text() == "new\n"
    assert st.git(dest, "status", "--porcelain", "--untracked-files=no") == ""


def test_edit_after_patching_is_kept_and_reported_on_reapply(up: Up, tmp_path: Path) -> None:
    st.make_patch_set(up.root, "proj", up.base, up.repo, [{"c.txt": "new\n"}])
    dest = checkout(up, tmp_path / "co")
    checkouts.apply_patch_set("proj", up.base, dest, quiet())
    (dest / "a.txt").write_text("my edit\n")
    said = quiet()
    checkouts.apply_patch_set("proj", up.base, dest, said)
    text = said.out.getvalue()
    assert "already applied" in text
    assert "WARNING:" in text and "1 edit(s) made after the patches were applied" in text
    assert "'M a.txt'" in text
    assert (dest / "a.txt").read_text() == "my edit\n"


def test_tampered_patch_refused_before_anything_is_applied(up: Up, tmp_path: Path) -> None:
    set_dir = st.make_patch_set(up.root, "proj", up.base, up.repo, [{"c.txt": "new\n"}])
    patch = next(set_dir.glob("*.patch"))
    patch.write_bytes(patch.read_bytes().replace(b"+new", b"+evil"))
    dest = checkout(up, tmp_path / "co")
    with pytest.raises(UserError, match=rf"{patch.name}: sha256 mismatch") as error:
        checkouts.apply_patch_set("proj", up.base, dest, quiet())
    assert "\n" not in str(error.value)
    assert st.git(dest, "rev-parse", "HEAD") == up.base and not (dest / "c.txt").exists()


def test_patch_already_contained_upstream_is_skipped(up: Up, tmp_path: Path) -> None:
    set_dir = st.make_patch_set(up.root, "proj", up.base, up.repo, [{"c.txt": "new\n"}])
    newer = st.commit_files(up.repo, {"c.txt": "new\n"}, "upstream merged the fix")
    shutil.copytree(set_dir, up.root / "proj" / newer)
    dest = checkout(up, tmp_path / "co", newer)
    said = quiet()
    checkouts.apply_patch_set("proj", newer, dest, said)
    assert "already contained at this commit; skipped" in said.out.getvalue()
    assert st.git(dest, "rev-parse", "HEAD") == newer


def test_pin_bump_without_a_patch_set_is_refused(up: Up, tmp_path: Path) -> None:
    """An earlier commit had a set, the pinned one has none: refused in one line naming the
    sets and both ways out; a manifest saying none_needed lets it build unpatched."""
    st.make_patch_set(up.root, "proj", up.base, up.repo, [{"c.txt": "new\n"}])
    st.commit_files(up.repo, {"d.txt": "1\n"}, "two")
    newer = st.commit_files(up.repo, {"d.txt": "2\n"}, "three")
    dest = checkout(up, tmp_path / "co", newer)
    with pytest.raises(UserError) as e:
        checkouts.apply_patch_set("proj", newer, dest, quiet())
    text = str(e.value)
    assert "\n" not in text and text.endswith("refusing to build it unpatched")
    assert f"no patch set for the pinned commit {newer[:12]}" in text
    assert f"(sets for earlier commits: {up.root / 'proj' / up.base})" in text
    assert "--port-patches" in text
    assert st.git(dest, "rev-parse", "HEAD") == newer

    dry = quiet(dry_run=True)
    assert checkouts.apply_patch_set("proj", newer, dest, dry) == []
    assert "[dry-run] note: proj: no patch set" in dry.out.getvalue()

    none = up.root / "proj" / newer
    none.mkdir()
    (none / "manifest.toml").write_text('none_needed = "upstream merged the fix (pr/1)"\n')
    said = quiet()
    assert checkouts.apply_patch_set("proj", newer, dest, said) == []
    assert "no patches needed at" in said.out.getvalue() and "merged the fix" in said.out.getvalue()
    assert checkouts.patch_set_digest("proj", newer) != checkouts.patch_set_digest("proj", "0" * 40)
    (none / "manifest.toml").write_text("")
    with pytest.raises(UserError, match=r"lists no patches; say why none are needed"):
        checkouts.patch_set_for("proj", newer)


def test_a_set_of_another_line_does_not_block(up: Up, tmp_path: Path) -> None:
    """A set for a commit that is provably not an ancestor (another branch) is no reason to
    refuse; with no checkout to ask (the first run), it is."""
    st.make_patch_set(up.root, "proj", up.base, up.repo, [{"c.txt": "new\n"}])
    st.git(up.repo, "checkout", "-q", "--orphan", "other")
    other = st.commit_files(up.repo, {"z.txt": "z\n"}, "another line")
    dest = checkout(up, tmp_path / "co", other)
    st.git(dest, "fetch", "-q", "origin", up.base)
    said = quiet()
    assert checkouts.apply_patch_set("proj", other, dest, said) == []
    assert "no patches for" in said.out.getvalue()
    assert checkouts.missing_set_problem("proj", other, None, quiet())


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: (d / "manifest.toml").write_text(
            (d / "manifest.toml").read_text().replace('reason = "stand-in fix"\n', "")
        ), r"manifest\.toml: patch 1: missing key 'reason'"),
        (lambda d: (d / "0009-stray.patch").write_text("From x\n"),
         r"0009-stray\.patch is in the directory but not in the manifest"),
    ],
)  # fmt: skip
def test_manifest_errors_are_one_line(up: Up, mutate, message) -> None:
    set_dir = st.make_patch_set(up.root, "proj", up.base, up.repo, [{"c.txt": "new\n"}])
    mutate(set_dir)
    with pytest.raises(UserError, match=message):
        checkouts.patch_set_for("proj", up.base)


def test_update_pins_resolves_rewrites_and_ports(
    up: Up, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    pins_dir = tmp_path / "pins"
    pins_dir.mkdir()
    pin_file = pins_dir / "aotriton.toml"
    pin_file.write_text(
        f'# keep me\n[aotriton]\nurl = "file://{up.repo}"  # stand-in\nref = "main"\n'
        f'commit = "{up.base}"\nversion = "0.13b"\n'
    )
    st.write_pytorch_pin(pins_dir, aotriton_commit=up.base, aotriton_version="0.13b")
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins_dir))
    st.make_patch_set(up.root, "aotriton", up.base, up.repo, [{"c.txt": "new\n"}])
    newer = st.commit_files(up.repo, {"d.txt": "later\n"}, "upstream moved")
    work = tmp_path / "work"
    ensure_checkout(up.pin(), work / "src" / "aotriton", quiet())
    argv = ["--workdir", str(work), "--project", "aotriton", "--port-patches"]
    update_pins.update_pins(options.parse("update_pins", argv))
    out = capsys.readouterr().out
    text = pin_file.read_text()
    assert f'commit = "{newer}"' in text and "# keep me" in text and "# stand-in" in text
    assert "submodules = []" in text  # read from the new commit's tree (it has none)
    assert "pin set: torch bbbbbbbbbbbb names AOTriton 0.13b" in out
    assert f"patch set {up.base[:12]} still applies at {newer[:12]}" in out
    ported = checkouts.patch_set_for("aotriton", newer)
    assert ported is not None and len(ported.patches) == 1
    # the checkout the check used is untouched
    assert st.git(work / "src" / "aotriton", "rev-parse", "HEAD") == up.base


def test_update_pins_reports_a_set_that_no_longer_applies(
    up: Up, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    pins_dir = tmp_path / "pins"
    pins_dir.mkdir()
    st.write_aotriton_pin(pins_dir, f"file://{up.repo}", up.base, version="0.13b")
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins_dir))
    st.make_patch_set(up.root, "aotriton", up.base, up.repo, [{"b.txt": "alpha\nBETA\n"}])
    newer = st.commit_files(up.repo, {"b.txt": "alpha\ngamma\n"}, "upstream rewrote b")
    work = tmp_path / "work"
    ensure_checkout(up.pin(), work / "src" / "aotriton", quiet())
    argv = ["--workdir", str(work), "--project", "aotriton", "--port-patches"]
    update_pins.update_pins(options.parse("update_pins", argv))
    out = capsys.readouterr().out
    assert f"does NOT apply at {newer[:12]}: 0001-stand-in-fix-1.patch conflicts in b.txt" in out
    assert checkouts.patch_set_for("aotriton", newer) is None


def test_update_pins_unreachable_upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pins_dir = tmp_path / "pins"
    pins_dir.mkdir()
    (pins_dir / "therock.toml").write_text(
        f'[therock]\nurl = "file://{tmp_path}/nowhere"\nref = "main"\ncommit = "{"a" * 40}"\n'
    )
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins_dir))
    argv = ["--workdir", str(tmp_path / "work"), "--project", "therock"]
    with pytest.raises(UserError, match=r"therock: cannot reach file://") as error:
        update_pins.update_pins(options.parse("update_pins", argv))
    assert "\n" not in str(error.value)


def test_patches_for_other_arches_are_left_out(up: Up, tmp_path: Path) -> None:
    """A patch with `arches` goes only into a build for one of them: the gfx1151 tree gets the
    general patch alone, gfx908's gets both, and going back drops the gfx908 one; a set whose
    patches are all for gfx908 leaves a gfx1151 tree at the pristine pin, and says so."""
    st.make_patch_set(
        up.root,
        "proj",
        up.base,
        up.repo,
        [{"a.txt": "one\nTWO\nthree\n"}, {"b.txt": "alpha\nBETA\n"}],
        arches=[None, ["gfx908"]],
    )
    dest = checkout(up, tmp_path / "co")
    general = checkouts.apply_patch_set("proj", up.base, dest, quiet(), arch="gfx1151")
    assert len(general) == 1 and (dest / "b.txt").read_text() == "alpha\nbeta\n"
    both = checkouts.apply_patch_set("proj", up.base, dest, quiet(), arch="gfx908")
    assert len(both) == 2 and (dest / "b.txt").read_text() == "alpha\nBETA\n"
    assert checkouts.apply_patch_set("proj", up.base, dest, quiet(), arch="gfx1151") == general
    assert (dest / "b.txt").read_text() == "alpha\nbeta\n"
    assert (dest / "a.txt").read_text() == "one\nTWO\nthree\n"
    digests = {
        a: checkouts.patch_set_digest("proj", up.base, arch=a) for a in ("gfx1151", "gfx908")
    }
    assert digests["gfx1151"] != digests["gfx908"]
    assert checkouts.patch_set_for("proj", up.base).patches[1].arches == ("gfx908",)


def test_a_set_only_for_another_arch_leaves_the_pin_as_it_is(up: Up, tmp_path: Path) -> None:
    st.make_patch_set(
        up.root, "proj", up.base, up.repo, [{"a.txt": "x\n"}], arches=[["gfx908"]]
    )  # fmt: skip
    dest = checkout(up, tmp_path / "co")
    checkouts.apply_patch_set("proj", up.base, dest, quiet(), arch="gfx908")
    said = quiet()
    assert checkouts.apply_patch_set("proj", up.base, dest, said, arch="gfx1151") == []
    assert "has no patch for gfx1151 (its 1 patch(es) are for gfx908); built as pinned" in (
        said.out.getvalue()
    )
    assert st.git(dest, "rev-parse", "HEAD") == up.base
    gfx1151 = checkouts.patch_set_digest("proj", up.base, arch="gfx1151")
    assert gfx1151 != checkouts.patch_set_digest("proj", up.base, arch="gfx908")
    shutil.rmtree(up.root / "proj")  # the gfx1151 tree is the pin's own: same digest as no set
    assert checkouts.patch_set_digest("proj", up.base, arch="gfx1151") == gfx1151


def test_arches_must_name_gfx_targets(up: Up) -> None:
    directory = st.make_patch_set(up.root, "proj", up.base, up.repo, [{"a.txt": "x\n"}])
    manifest = directory / "manifest.toml"
    for bad in ("arches = []", 'arches = ["mi100"]', 'arches = "gfx908"'):
        manifest.write_text(manifest.read_text().split("arches")[0].rstrip() + f"\n{bad}\n")
        with pytest.raises(UserError, match=r"manifest\.toml: patch 1: 'arches'") as error:
            checkouts.patch_set_for("proj", up.base)
        assert "\n" not in str(error.value)
