"""One consistent pin set (rocmfa.sources.pins): the torch pin's own aotriton.cmake against
pins/aotriton.toml, recorded by update_pins, checked before the first command; and the
release lists of old aotriton.cmake files read the way CMake reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmfa.builds import aotriton_release
from rocmfa.plumbing import options, pin_files
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.sources import pins, update_pins
from tests.support import aotriton_standins as st
from tests.test_pin_files import with_values

C_013 = "6e00ef3e335b45dfb49065259533b59c68995bfe"
C_012 = "269036897bcee4292f4e928767df1e3dd0e3c8bd"
C_0121 = "8fdb4a4353f95b88c9542f5e5637efc1e1e0e530"
OLD_SUM = "c51b23065dd0ef50ad89386524ee423ee0deb3d43aaf6eb27bdb97afdbf5e004"
CMAKE = pins.AOTRITON_CMAKE
REPO, RAW = "https://github.com/ROCm/pytorch", "https://raw.githubusercontent.com/ROCm/pytorch"
# The form of PyTorch's aotriton.cmake since 0.13b (form C; ROCm/pytorch, docs/upstream-
# interfaces.md), reduced to the lines pins.parse_aotriton_cmake reads.
NAMES_012 = f"""
  set(__AOTRITON_VER "0.12b")
  if(DEFINED ENV{{PYTORCH_AOTRITON_COMMIT}})
    set(__AOTRITON_CI_COMMIT "$ENV{{PYTORCH_AOTRITON_COMMIT}}")
  else()
    set(__AOTRITON_CI_COMMIT "{C_012}")
  endif()
"""
# An old ROCm/pytorch aotriton.cmake (cacab34e, AOTriton 0.4.2b): rocm6.2 listed twice, bz2.
OLD_TWICE = """
  set(__AOTRITON_VER "0.4.2b")
  set(__AOTRITON_MANYLINUX_LIST
      "manylinux_2_17"  # rocm6.2
      "manylinux_2_28"  # rocm6.2
      )
  set(__AOTRITON_ROCM_LIST
      "rocm6.2"
      "rocm6.2"
      )
  set(__AOTRITON_CI_COMMIT "99f540a954e80f446ec6980f108e8c25408f1823")
  set(__AOTRITON_SHA256_LIST
      "c51b23065dd0ef50ad89386524ee423ee0deb3d43aaf6eb27bdb97afdbf5e004"  # rocm6.2
      "50f7d307356bca70928c4b4ac16ad94b0ae130478de51123f018f3588cd0b1f4"  # rocm6.2
      )
  set(__AOTRITON_Z "bz2")
"""


def aotriton_pin(commit: str = C_013, version: str = "0.13b") -> pins.Pin:
    return pins.Pin("aotriton", "https://github.com/ROCm/aotriton", version, commit, "t", {})


def test_recorded_same_line_agrees_other_line_refused_force_warns(tmp_path: Path) -> None:
    st.write_pytorch_pin(tmp_path, aotriton_commit=C_012, aotriton_version="0.12b")
    env = {"ROCMFA_PINS_DIR": str(tmp_path)}
    with pytest.raises(UserError) as error:
        pins.check_pin_set(aotriton_pin(), "0.13b", force=False, workdir=tmp_path, environ=env)
    message = str(error.value)
    assert "\n" not in message
    assert (
        "pins disagree: torch bbbbbbbbbbbb (nightly) names AOTriton 0.12b (269036897bce)" in message
    )
    assert "pins/aotriton.toml pins 0.13b (6e00ef3e335b)" in message and "--force" in message
    warned = pins.check_pin_set(aotriton_pin(), "0.13b", force=True, workdir=tmp_path, environ=env)
    assert warned[0].startswith("line release: ") and warned[1].startswith(
        "WARNING (--force): pins disagree"
    )
    fine = pins.check_pin_set(
        aotriton_pin(C_0121, "0.12.1b"), "0.12.1b", force=False, workdir=tmp_path, environ=env
    )
    assert "same line" in fine[1] and "(torch names 269036897bce)" in fine[1]


def test_stale_record_is_ignored_and_the_real_file_is_read(tmp_path: Path) -> None:
    """A record made at another torch commit does not count: the file at the pin is read."""
    torch_commit = "1" * 40
    www = tmp_path / "www"
    target = www / "raw" / torch_commit / CMAKE
    target.parent.mkdir(parents=True)
    target.write_text(NAMES_012)
    pins_dir = tmp_path / "pins"
    pins_dir.mkdir()
    st.write_pytorch_pin(
        pins_dir,
        aotriton_commit=C_013,
        aotriton_version="0.13b",
        torch_commit=torch_commit,
        recorded_for="2" * 40,
    )
    env = {"ROCMFA_PINS_DIR": str(pins_dir), "PYTORCH_AOTRITON_COMMIT": C_013}
    with st.serve(www) as (base, log):
        text = (pins_dir / "pytorch.toml").read_text()
        (pins_dir / "pytorch.toml").write_text(
            text.replace("\n\n[pytorch.aotriton]", f'\nraw_url = "{base}/raw/{{commit}}/{{path}}"'
                         "\n\n[pytorch.aotriton]")
        )  # fmt: skip
        with pytest.raises(UserError, match=r"names AOTriton 0\.12b \(269036897bce\)"):
            pins.check_pin_set(aotriton_pin(), "0.13b", force=False, workdir=tmp_path, environ=env)
        assert [path for path, _ in log.requests] == [f"/raw/{torch_commit}/{CMAKE}"]


def test_unreadable_torch_file_is_refused_unless_forced_and_noted_by_a_dry_run(
    tmp_path: Path,
) -> None:
    (tmp_path / "pytorch.toml").write_text(
        f'[pytorch]\nurl = "https://x.invalid/pytorch"\nref = "nightly"\ncommit = "{"1" * 40}"\n'
    )
    env = {"ROCMFA_PINS_DIR": str(tmp_path)}
    with pytest.raises(UserError, match=r"cannot tell which AOTriton the torch pin names .*"):
        pins.check_pin_set(aotriton_pin(), "0.13b", force=False, workdir=tmp_path, environ=env)
    forced = pins.check_pin_set(aotriton_pin(), "0.13b", force=True, workdir=tmp_path, environ=env)
    assert forced[1].startswith("WARNING (--force): cannot tell")
    # a dry run shows its plan, saying the real run refuses
    dry = pins.check_pin_set(aotriton_pin(), "0.13b", force=False, runner=Runner(dry_run=True),
                        workdir=tmp_path, environ=env)  # fmt: skip
    assert dry[1].startswith("[dry-run] note: cannot tell which AOTriton")
    assert "the real run refuses this" in dry[1]


def test_update_pins_records_what_torch_names_then_refuses_the_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    torch_repo = tmp_path / "pytorch-upstream"
    torch_commit = st.make_repo(torch_repo, {CMAKE: NAMES_012})
    www = tmp_path / "www"
    served = www / "raw" / torch_commit / CMAKE
    served.parent.mkdir(parents=True)
    served.write_text(NAMES_012)
    pins_dir = tmp_path / "pins"
    pins_dir.mkdir()
    aot_repo, aot_commit = st.make_aotriton_upstream(tmp_path)
    st.write_aotriton_pin(
        pins_dir, f"file://{aot_repo}", aot_commit, version="0.13b", submodules=["x"]
    )
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins_dir))
    argv = ["--workdir", str(tmp_path / "work"), "--project", "pytorch", "--project", "aotriton"]
    with st.serve(www) as (base, _log):
        (pins_dir / "pytorch.toml").write_text(
            f'# keep me\n[pytorch]\nurl = "file://{torch_repo}"\nref = "main"\n'
            f'commit = "{"0" * 40}"\nraw_url = "{base}/raw/{{commit}}/{{path}}"\n'
        )
        with pytest.raises(UserError, match=r"pin set: pins disagree: .*names AOTriton 0\.12b"):
            update_pins.update_pins(options.parse("update_pins", argv))
        text = (pins_dir / "pytorch.toml").read_text()
        assert "# keep me" in text and f'commit = "{torch_commit}"' in text
        record = pins.load_pin("pytorch", pins_dir).data["aotriton"]
        assert record["pytorch_commit"] == torch_commit
        assert (record["version"], record["commit"]) == ("0.12b", C_012)
        assert f"PyTorch {torch_commit[:12]} {CMAKE}, form C literal" in record["source"]
        # the aotriton checkout is absent: its submodule list is kept, and said so
        out = capsys.readouterr().out
        assert "submodule paths not re-read" in out
        forced = update_pins.update_pins(options.parse("update_pins", [*argv, "--force"]))
        assert forced is None
        assert "WARNING (--force): pins disagree" in capsys.readouterr().out


def test_release_lists_read_as_cmake_does_first_entry_and_bz2(tmp_path: Path) -> None:
    parsed = pins.parse_aotriton_cmake(OLD_TWICE)
    resolved = pins.ResolvedAotriton(
        "99f540a954e80f446ec6980f108e8c25408f1823", "0.4.2b", "test", parsed
    )
    pin = pins.Pin("aotriton", "u", "r", resolved.commit, "t", {"pytorch_cmake": resolved})
    info = aotriton_release.release_info(pin, "0.4.2b")
    # CMake's list(FIND ... "rocm6.2") is the first index: manylinux_2_17 and its sum
    assert info.runtime == {"6.2": ("manylinux_2_17", OLD_SUM)}
    assert info.runtime_name.endswith("-shared.tar.bz2") and info.images_name.endswith(".tar.bz2")
    name = info.runtime_name.format(
        version="0.4.2b", manylinux="manylinux_2_17", hostarch="x86_64", rocm="6.2"
    )
    assert name == "aotriton-0.4.2b-manylinux_2_17_x86_64-rocm6.2-shared.tar.bz2"
    with pytest.raises(UserError, match="placeholder"):
        aotriton_release.real_sum("0" * 64, "x", "src")


def release_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]
) -> tuple[Path, str, Path, Path]:
    """A stand-in ROCm/pytorch release/2.13 holding files, and $ROCMFA_PINS_DIR with an
    AOTriton 0.13b pin: (torch repo, its commit, the folder raw_url serves, the pins dir)."""
    torch_repo, torch_commit, www = st.make_rocm_pytorch_release(tmp_path, files)
    pins_dir = tmp_path / "pins"
    pins_dir.mkdir()
    aot_repo, aot_commit = st.make_aotriton_upstream(tmp_path)
    st.write_aotriton_pin(pins_dir, f"file://{aot_repo}", aot_commit, version="0.13b")
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins_dir))
    return torch_repo, torch_commit, www, pins_dir


def test_update_pins_resolves_the_default_line_and_records_every_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The repository's own pins/pytorch.toml (ROCm/pytorch release/2.13, no commit yet) against
    a stand-in ROCm/pytorch: update_pins resolves the branch, reads aotriton.cmake,
    related_commits and ci_commit_pins/triton.txt at that commit over raw_url (one file each, as
    TheRock's generate_pytorch_source_manifest.py), records them and checks the pair."""
    audio, vision, triton = "a" * 40, "b" * 40, "c" * 40
    files = {
        CMAKE: NAMES_012.replace("0.12b", "0.13b").replace(C_012, C_013),
        "related_commits": "".join(
            f"{os_}|pytorch|{name}|release/2.13|{commit}|https://github.com/pytorch/{repo}\n"
            for os_ in ("ubuntu", "centos")
            for name, commit, repo in (
                ("torchaudio", audio, "audio"),
                ("torchvision", vision, "vision"),
            )
        ),
        ".ci/docker/ci_commit_pins/triton.txt": triton + "\n",
    }
    torch_repo, torch_commit, www, pins_dir = release_line(tmp_path, monkeypatch, files)
    argv = ["--workdir", str(tmp_path / "work"), "--project", "pytorch"]
    with st.serve(www) as (base, _log):
        path = st.write_default_torch_pin(
            pins_dir, {REPO: f"file://{torch_repo}", RAW: f"{base}/raw"}
        )
        before = path.read_text()
        assert "public record only" in pin_files.describe_line(pins_dir)
        update_pins.update_pins(options.parse("update_pins", argv))
    out = capsys.readouterr().out
    torch = pins.load_pin("pytorch", pins_dir)
    assert torch.commit == torch_commit
    assert {k: torch.data[k]["commit"] for k in ("triton", "audio", "vision")} == {
        "triton": triton, "audio": audio, "vision": vision,
    }  # fmt: skip
    assert torch.data["triton"]["url"] == "https://github.com/ROCm/triton"
    assert torch.data["audio"]["url"] == "https://github.com/pytorch/audio"
    record = torch.data["aotriton"]
    assert (record["pytorch_commit"], record["version"], record["commit"]) == (
        torch_commit, "0.13b", C_013,
    )  # fmt: skip
    assert f"names AOTriton 0.13b {C_013[:12]}" in out
    assert "pin set: torch" in out and "same line" in out
    said = pin_files.describe_line(pins_dir)
    assert said.startswith(f"line release: file://{torch_repo} release/2.13 {torch_commit[:12]}")
    assert f"the torch names 0.13b [PyTorch {torch_commit[:12]} {CMAKE}, form C literal" in said
    # every comment and untouched line byte for byte (tests/test_pin_files.py: the one writer)
    written = {
        ("pytorch", "commit"): torch_commit,
        ("pytorch.aotriton", "pytorch_commit"): torch_commit,
    }
    written |= {
        (f"pytorch.{k}", "commit"): v
        for k, v in (("triton", triton), ("audio", audio), ("vision", vision))
    }
    written[("pytorch.aotriton", "source")] = record["source"]
    assert path.read_text() == with_values(before, written)


def test_update_pins_names_a_companion_file_the_torch_pin_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A torch commit without ci_commit_pins/triton.txt (raw_url answers 404): update_pins fails
    in one line naming that file, not a file that names no commit."""
    related = f"ubuntu|pytorch|torchaudio|release/2.13|{'a' * 40}|https://x/audio\n"
    files = {CMAKE: NAMES_012.replace("0.12b", "0.13b").replace(C_012, C_013)}
    torch_repo, _commit, www, pins_dir = release_line(
        tmp_path, monkeypatch, {**files, "related_commits": related}
    )
    argv = ["--workdir", str(tmp_path / "work"), "--project", "pytorch"]
    with st.serve(www) as (base, _log):
        st.write_default_torch_pin(pins_dir, {REPO: f"file://{torch_repo}", RAW: f"{base}/raw"})
        with pytest.raises(UserError, match=r"ci_commit_pins/triton\.txt does not exist"):
            update_pins.update_pins(options.parse("update_pins", argv))


def test_a_build_resolves_an_unresolved_pin_or_leaves_it_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """update_pins.resolve_for_build, what build_aotriton and build_pytorch call first, on the
    repository's own pins/pytorch.toml: a dry run asks nothing and says the real run records
    it; an unreachable upstream and a disagreeing pair are refused in one line and the pin file
    is left as it was; --force records the pair with a warning; a resolved pin is left alone."""
    names = {
        CMAKE: NAMES_012,  # this torch names 0.12b; pins/aotriton.toml pins 0.13b
        "related_commits": f"ubuntu|pytorch|torchaudio|release/2.13|{'a' * 40}|https://x/audio\n"
        f"ubuntu|pytorch|torchvision|release/2.13|{'b' * 40}|https://x/vision\n",
        ".ci/docker/ci_commit_pins/triton.txt": "c" * 40 + "\n",
    }
    torch_repo, torch_commit, www, pins_dir = release_line(tmp_path, monkeypatch, names)
    pin = pins_dir / "pytorch.toml"
    work = tmp_path / "work"

    def resolve(*, dry_run: bool = False, force: bool = False) -> None:
        runner = Runner(dry_run=dry_run)
        update_pins.resolve_for_build("pytorch", runner, workdir=work, force=force)

    st.write_default_torch_pin(pins_dir, {REPO: "https://127.0.0.1:9/pytorch"})
    before = pin.read_text()
    resolve(dry_run=True)
    out = capsys.readouterr().out
    assert "[dry-run] pytorch: release/2.13 has no commit in" in out and "$ " not in out
    assert "the real run resolves, checks and records it there first" in out
    with pytest.raises(UserError) as unreachable:
        resolve()
    message = str(unreachable.value)
    assert "\n" not in message and message.startswith("pytorch: cannot resolve release/2.13")
    assert "run nox -s update_pins where 127.0.0.1 is reachable" in message
    assert "$ROCMFA_PINS_DIR" in message
    assert pin.read_text() == before
    with st.serve(www) as (base, _log):
        st.write_default_torch_pin(pins_dir, {REPO: f"file://{torch_repo}", RAW: f"{base}/raw"})
        before = pin.read_text()
        with pytest.raises(UserError, match=r"^pins disagree: .*names AOTriton 0\.12b.*--force"):
            resolve()
        assert pin.read_text() == before  # never a recorded pair that was refused
        capsys.readouterr()
        resolve(force=True)
        out = capsys.readouterr().out
    said = f"pytorch: resolved release/2.13 to {torch_commit[:12]}, checked it and recorded it in"
    assert said in out and "WARNING (--force): pins disagree" in out
    assert pins.load_pin("pytorch", pins_dir).commit == torch_commit
    resolve()  # resolved now: nothing asked, nothing said, the server is gone
    assert capsys.readouterr().out == ""
