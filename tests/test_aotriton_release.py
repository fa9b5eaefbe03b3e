"""build_aotriton --from-release: prebuilt runtime + this arch's image pack from a loopback
server, sha256-verified, cached, resumed after a dropped connection."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocmfa.builds import build_aotriton
from rocmfa.builds import build_aotriton as ba
from rocmfa.plumbing.errors import UserError
from tests.support import aotriton_standins as st
from tests.support.aotriton_env import build_opts, command_lines, provision_env


@pytest.fixture(scope="module")
def env_prefix(tmp_path_factory: pytest.TempPathFactory, rocm_index) -> Path:
    return provision_env(tmp_path_factory.mktemp("release-env") / "therock", rocm_index.pins_dir)


@pytest.fixture
def release(tmp_path: Path, env_prefix: Path, monkeypatch: pytest.MonkeyPatch):
    def make(*, signature: str | None = None, runtime_sha: str | None = None, **kw):
        www = tmp_path / "www"
        files = st.make_release(www, signature=signature, **kw)
        pins = tmp_path / "pins"
        pins.mkdir(exist_ok=True)
        (pins / "aotriton.toml").write_text(
            '[aotriton]\nurl = "file:///nonexistent"\nref = "0.13b"\n'
            f'commit = "{"6e00ef3e335b45dfb49065259533b59c68995bfe"}"\nversion = "0.13b"\n\n'
            + files.pin_table(runtime_sha)
        )
        st.write_pytorch_pin(pins, aotriton_commit="6e00ef3e" + "0" * 32, aotriton_version="0.13b")
        monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins))
        st.install_torch(env_prefix)
        return www, files

    return make


def build(prefix: Path, work: Path, capsys, *extra: str) -> str:
    capsys.readouterr()
    ba.build_aotriton(build_opts(prefix, work, "--from-release", *extra))
    return capsys.readouterr().out


def test_release_installs_only_this_arch_pack_and_rerun_is_a_noop(
    release, env_prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    www, files = release()
    work = tmp_path / "work"
    with st.serve(www) as (base, log):
        monkeypatch.setenv("ROCMFA_AOTRITON_BASE_URL", base + "/")
        out = build(env_prefix, work, capsys)
        fetched = sorted(path for path, _ in log.requests)
        assert fetched == sorted(f"/0.13b/{n}" for n in (files.runtime_name, files.images_name))
        lib = st.site_packages(env_prefix) / "torch" / "lib"
        assert (lib / "libaotriton_v2.so.0.13.0").read_bytes().startswith(b"release runtime")
        assert [p.name for p in (lib / "aotriton.images").iterdir()] == ["amd-gfx115x"]
        assert "prebuilt release 0.13b" in out
        assert (work / "downloads" / "aotriton" / "0.13b" / files.runtime_name).is_file()
        again = build(env_prefix, work, capsys)
        assert "up to date" in again and command_lines(again) == []
        assert len(log.requests) == 2  # nothing downloaded again


def test_interrupted_download_starts_over(
    release, env_prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    www, files = release()
    with st.serve(www) as (base, log):
        monkeypatch.setenv("ROCMFA_AOTRITON_BASE_URL", base + "/")
        path = f"/0.13b/{files.runtime_name}"
        log.drop_after[path] = 100_000
        out = build(env_prefix, tmp_path / "work", capsys)
        ranges = [rng for p, rng in log.requests if p == path]
        assert ranges == ["", ""]  # the second try fetches the whole file again
        assert "download interrupted" in out and "starting over" in out
    lib = st.site_packages(env_prefix) / "torch" / "lib"
    assert (lib / "libaotriton_v2.so.0.13.0").read_bytes().startswith(b"release runtime")


def test_sha256_mismatch_discards_download_and_installs_nothing(
    release, env_prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    www, _ = release(runtime_sha="1" * 64)
    lib = st.site_packages(env_prefix) / "torch" / "lib"
    before = build_aotriton.installed_fingerprint(lib)
    with st.serve(www) as (base, _log):
        monkeypatch.setenv("ROCMFA_AOTRITON_BASE_URL", base + "/")
        with pytest.raises(UserError, match="sha256 mismatch") as error:
            build(env_prefix, tmp_path / "work", capsys)
    assert "\n" not in str(error.value)
    assert not [p for p in (tmp_path / "work" / "downloads").rglob("*") if p.is_file()]
    assert build_aotriton.installed_fingerprint(lib) == before


def test_placeholder_sum_is_refused_before_any_download(
    release, env_prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    www, _ = release(runtime_sha="0" * 64)  # 0.14b's aotriton.cmake lists such placeholders
    with st.serve(www) as (base, log):
        monkeypatch.setenv("ROCMFA_AOTRITON_BASE_URL", base + "/")
        with pytest.raises(UserError, match=r"placeholder \(all zeros\), not a real release sum"):
            build(env_prefix, tmp_path / "work", capsys)
    assert not log.requests
    assert not (tmp_path / "work" / "downloads").exists()


def test_release_runtime_image_mismatch_is_refused(
    release, env_prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    www, _ = release(signature="0.12")
    lib = st.site_packages(env_prefix) / "torch" / "lib"
    before = build_aotriton.installed_fingerprint(lib)
    with st.serve(www) as (base, _log):
        monkeypatch.setenv("ROCMFA_AOTRITON_BASE_URL", base + "/")
        with pytest.raises(UserError, match=r"runtime 0\.13\.0 but amd-gfx115x/__signature__"):
            build(env_prefix, tmp_path / "work", capsys)
    assert build_aotriton.installed_fingerprint(lib) == before


def test_no_prebuilt_runtime_for_this_rocm(
    release, env_prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    www, _ = release(rocm="7.2")
    with st.serve(www) as (base, _log):
        monkeypatch.setenv("ROCMFA_AOTRITON_BASE_URL", base + "/")
        with pytest.raises(UserError, match=r"no prebuilt runtime for ROCm 7\.15 \(has 7\.2\)"):
            build(env_prefix, tmp_path / "work", capsys)


def test_unreachable_release_server_is_one_line(
    release, env_prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    release()
    monkeypatch.setenv("ROCMFA_AOTRITON_BASE_URL", "http://127.0.0.1:9/")
    monkeypatch.setattr("time.sleep", lambda _s: None)  # urllib3's Retry backs off
    with pytest.raises(UserError, match=r"cannot download http://127\.0\.0\.1:9/0\.13b/") as e:
        build(env_prefix, tmp_path / "work", capsys)
    assert "\n" not in str(e.value)
    assert "127.0.0.1:9 unreachable or offline? set $ROCMFA_AOTRITON_BASE_URL" in str(e.value)


def test_the_default_path_is_the_pinned_pack_and_lands_in_the_install_prefix(
    release, env_prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """No option: gfx1151 takes the release pack (nothing of ours changes its kernels), said
    before anything runs; with no torch in the env (the README's main job) the runtime and the
    pack are unpacked into build_aotriton's install prefix, where build_pytorch finds them as
    AOTRITON_INSTALLED_PREFIX; no git, cmake or ninja runs."""
    from rocmfa.builds import build_pytorch
    from rocmfa.env import archs
    from rocmfa.plumbing.commands import Runner

    www, _ = release()
    site = st.site_packages(env_prefix)
    shutil.rmtree(site / "torch")
    for info in site.glob("torch-*.dist-info"):
        shutil.rmtree(info)
    work = tmp_path / "work"
    with st.serve(www) as (base, log):
        monkeypatch.setenv("ROCMFA_AOTRITON_BASE_URL", base + "/")
        capsys.readouterr()
        ba.build_aotriton(build_opts(env_prefix, work))
        out = capsys.readouterr().out
    path_line = next(line for line in out.splitlines() if line.startswith("path: "))
    assert path_line.startswith("path: release pack amd-gfx115x: nothing of ours changes gfx1151")
    assert out.index("cost: 2 downloads") < out.index("downloading ")
    assert command_lines(out) == [] and len(log.requests) == 2
    prefix = work / "build" / "aotriton" / "install"
    assert f"no torch in the env: AOTriton stays in {prefix}" in out
    assert (prefix / "lib" / "libaotriton_v2.so").resolve().name == "libaotriton_v2.so.0.13.0"
    assert [p.name for p in (prefix / "lib" / "aotriton.images").iterdir()] == ["amd-gfx115x"]
    capsys.readouterr()
    arch = archs.get_arch("gfx1151")
    found, _digest, flash = build_pytorch.aotriton_for_torch(arch, work, Runner(), None)
    assert (found, flash) == (prefix, True)
    assert f"AOTriton: {prefix} from build_aotriton ->" in capsys.readouterr().out
    ba.build_aotriton(build_opts(env_prefix, work))
    assert "up to date" in capsys.readouterr().out


def test_from_release_with_a_source_only_option_is_refused(
    release, env_prefix: Path, tmp_path: Path, capsys
) -> None:
    release()
    with pytest.raises(UserError) as error:
        build(env_prefix, tmp_path / "work", capsys, "--no-images")
    assert str(error.value) == (
        "--from-release installs the prebuilt pack, --no-images needs a source build: drop one"
    )
