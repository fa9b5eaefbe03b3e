"""build_aotriton against stand-ins: a CMake project laid out like AOTriton, built with the real
cmake and ninja, installed into a stand-in torch inside a provisioned stand-in env."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from rocmfa.builds import build_aotriton
from rocmfa.builds import build_aotriton as ba
from rocmfa.env import session_env
from rocmfa.plumbing import options, stamps
from rocmfa.plumbing.errors import UserError
from tests.support import aotriton_standins as st
from tests.support import kill_hook
from tests.support.aotriton_env import build_opts, command_lines, provision_env

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Bed:
    root: Path
    prefix: Path
    repo: Path
    commit: str
    pins: Path
    patches: Path
    work: Path

    @property
    def torch_lib(self) -> Path:
        return st.site_packages(self.prefix) / "torch" / "lib"

    @property
    def src(self) -> Path:
        return self.work / "src" / "aotriton"

    def env(self) -> dict[str, str]:
        return {
            "ROCMFA_PINS_DIR": str(self.pins),
            "ROCMFA_PATCHES_DIR": str(self.patches),
            **st.FILE_PROTOCOL_ENV,
        }


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory, rocm_index) -> Bed:
    root = tmp_path_factory.mktemp("aotriton-build")
    prefix = provision_env(root / "env" / "therock", rocm_index.pins_dir)
    repo, commit = st.make_aotriton_upstream(root)
    pins = root / "pins"
    pins.mkdir()
    st.pin_standin_release(pins, repo, commit)
    patches = root / "patches"
    patches.mkdir()
    st.install_torch(prefix)
    return Bed(root, prefix, repo, commit, pins, patches, root / "work")


@pytest.fixture(autouse=True)
def _env(bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in bed.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PYTORCH_AOTRITON_COMMIT", raising=False)


def run_build(bed: Bed, capsys, *extra: str, arch: str = "gfx1151") -> str:
    capsys.readouterr()
    ba.build_aotriton(build_opts(bed.prefix, bed.work, *extra, arch=arch))
    return capsys.readouterr().out


def test_first_build_installs_then_rerun_runs_nothing(bed: Bed, capsys) -> None:
    shipped = (bed.torch_lib / "libaotriton_v2.so.0.13.0").read_bytes()
    out = run_build(bed, capsys)
    assert f"aotriton pin: {bed.commit} (0.13b) from {bed.pins / 'aotriton.toml'}" in out
    lib = bed.torch_lib
    real = lib / "libaotriton_v2.so.0.13.0"
    assert real.is_file() and not real.is_symlink()
    assert real.read_bytes() != shipped  # the build's runtime replaced torch's
    assert (lib / "libaotriton_v2.so").read_bytes() == real.read_bytes()  # a wheel holds no links
    # AOTriton 0.13b's JSON signature (write_image_signature), naming the commit built
    signature = json.loads((lib / "aotriton.images" / "amd-gfx115x" / "__signature__").read_text())
    assert signature["AOTRITON_GIT_SHA1"] == st.git(bed.src, "rev-parse", "HEAD")
    assert set(signature) == {
        "AOTRITON_GIT_SHA1",
        "AOTRITON_GIT_TREESHA1",
        "DB_SHA256",
        "TRITON_VERSION",
    }
    # configured as torch's aotriton.cmake does: no python binding (torch never uses it); the
    # stand-in pin is no release tag, so the plan says why it builds from source
    assert "-DAOTRITON_NO_PYTHON=ON" in out and not list(lib.glob("pyaotriton*"))
    assert "path: source build: the pin " in out and "cost: kernel job count for gfx1151" in out
    # pip installed it: torch's RECORD is true, pip check passes; torch's own wheel (rebuilt
    # from its RECORD) is kept for --restore, and both versions are recorded
    assert st.record_lies(bed.prefix) == [] and st.pip_check(bed.prefix).returncode == 0
    marker = json.loads((lib / build_aotriton.MARKER).read_text())
    original = Path(marker["original"])
    with zipfile.ZipFile(original) as whl:
        assert whl.read("torch/lib/libaotriton_v2.so.0.13.0") == shipped
    assert marker["shipped"]["runtime"] == "0.13.0" and marker["new"]["runtime"] == "0.13.0"
    assert f"torch's own wheel: {original}" in out
    # cmake got the arch, timeout, no-image mode, ROCm from rocm-sdk, pkg-config path
    info = bed.work / "build" / "aotriton" / "install" / "share" / "aotriton" / "build-info.txt"
    text = info.read_text()
    assert "TARGET_ARCH=gfx1151\n" in text and "TIMEOUT=0\n" in text and "NOIMAGE=OFF\n" in text
    assert "ROCM_PATH=" + str(st.site_packages(bed.prefix) / "_rocm_sdk_devel") in text
    assert f"PKG_CONFIG_PATH={bed.prefix / 'lib' / 'pkgconfig'}" in text
    assert text.split("PREFIX_PATH=")[1].splitlines()[0].endswith("_rocm_sdk_devel/lib/cmake")
    ninja = [line for line in command_lines(out) if " install" in line and "ninja" in line]
    assert len(ninja) == 1 and not any(
        re.search(r"(ninja|-j\d+)$", line.rstrip()) for line in command_lines(out)
    )
    assert "build jobs: " in out
    # the rerun with nothing changed runs no command at all
    again = run_build(bed, capsys)
    assert command_lines(again) == []
    assert "up to date" in again


def test_dry_run_prints_every_command_and_runs_none(bed: Bed, capsys) -> None:
    stamp = bed.work / "stamps" / "aotriton.json"
    before = (stamp.read_text(), build_aotriton.installed_fingerprint(bed.torch_lib))
    out = run_build(bed, capsys, "--dry-run", "--force", "--timeout-min", "2.5")
    assert command_lines(out) == []
    lines = [line for line in out.splitlines() if line.startswith("[dry-run] ")]
    configure = next(line for line in lines if " -G Ninja " in line)
    assert f"(cd {bed.src})" in configure
    assert "ROCM_PATH='$(rocm-sdk path --root)'" in configure
    assert "PKG_CONFIG_PATH=" in configure
    assert "-DAOTRITON_TARGET_ARCH=gfx1151" in configure
    assert "-DAOTRITON_GPU_BUILD_TIMEOUT=2.5" in configure
    assert "-DAOTRITON_NOIMAGE_MODE=OFF" in configure
    assert "'-DCMAKE_PREFIX_PATH=$(rocm-sdk path --cmake)'" in configure
    assert any(line.endswith(" install") and "ninja" in line for line in lines)
    assert any(" git " in f" {line} " and "checkout" in line for line in lines)
    assert (stamp.read_text(), build_aotriton.installed_fingerprint(bed.torch_lib)) == before


def test_nox_session_dry_run_subprocess(bed: Bed) -> None:
    result = subprocess.run(
        [
            *(sys.executable, "-m", "nox", "-s", "build_aotriton", "--", "--dry-run", "--force"),
            *("--arch", "gfx1151", "--prefix", str(bed.prefix), "--workdir", str(bed.work)),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, **bed.env()},
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "[dry-run]" in output and "-DAOTRITON_TARGET_ARCH=gfx1151" in output


def test_gfx908_needs_the_patch_set_and_a_source_build(bed: Bed, capsys) -> None:
    """gfx908 has no upstream kernels: without a patch set for the pinned commit, and with
    --from-release (no release has gfx908 images), it is refused in one line."""
    for extra in ((), ("--from-release",)):
        with pytest.raises(UserError) as error:
            run_build(bed, capsys, *extra, arch="gfx908")
        message = str(error.value)
        assert "\n" not in message and "gfx908" in message
        expected = "drop --from-release" if extra else "no patch set for the pinned commit"
        assert expected in message


@pytest.mark.slow
def test_gfx908_builds_upstream_with_the_patch_set_into_the_013_torch(bed: Bed, capsys) -> None:
    """With a patch set adding gfx908 to the tables (as patches/aotriton/6e00ef3e.../ does on
    the real tree), the upstream pin builds amd-gfx908 images and installs into torch 2.13's
    AOTriton 0.13 (one release line: no refusal, no variant)."""
    text = (bed.repo / "python" / "gpu_targets.py").read_text()
    set_dir = st.make_patch_set(
        bed.patches,
        "aotriton",
        bed.commit,
        bed.repo,
        [{"python/gpu_targets.py": text.replace(*st.GFX908_PACK_EDIT)}],
    )
    own = replace(bed, work=bed.root / "work-gfx908")  # its own build dir: no other arch's packs
    try:
        out = run_build(own, capsys, arch="gfx908")
    finally:
        shutil.rmtree(set_dir)
    assert "source build: upstream 0.13b has no gfx908 kernels and no release has its" in out
    assert "built with this repository's patch set" in out
    assert (bed.torch_lib / "aotriton.images" / "amd-gfx908" / "__signature__").is_file()
    info = own.work / "build" / "aotriton" / "install" / "share" / "aotriton" / "build-info.txt"
    assert "TARGET_ARCH=gfx908" in info.read_text()
    run_build(own, capsys, "--restore")


def test_patch_set_rebuilds_and_tampered_patch_is_refused(bed: Bed, capsys) -> None:
    set_dir = st.make_patch_set(
        bed.patches, "aotriton", bed.commit, bed.repo, [{"src/extra.txt": "patched\n"}]
    )
    try:
        out = run_build(bed, capsys)
        assert "applied 1 patch(es)" in out
        assert (bed.src / "src" / "extra.txt").read_text() == "patched\n"
        head = st.git(bed.src, "rev-parse", "HEAD")
        assert head != bed.commit
        assert command_lines(run_build(bed, capsys)) == []
        # tamper with the patch: refused before anything runs, checkout untouched
        patch = next(set_dir.glob("*.patch"))
        patch.write_text(patch.read_text().replace("patched", "tampered"))
        with pytest.raises(UserError, match=r"sha256 mismatch") as error:
            run_build(bed, capsys)
        assert "\n" not in str(error.value) and patch.name in str(error.value)
        assert st.git(bed.src, "rev-parse", "HEAD") == head
        assert st.git(bed.src, "status", "--porcelain") == ""
    finally:
        shutil.rmtree(set_dir)
    run_build(bed, capsys)  # back to the unpatched pin
    assert st.git(bed.src, "rev-parse", "HEAD") == bed.commit


def test_real_json_signatures_are_read_and_mixed_builds_refused(tmp_path: Path) -> None:
    """0.13b writes JSON signatures without a version (docs/upstream-interfaces.md): they are
    not a runtime/image mismatch, but packs from two different commits are."""
    sig = json.dumps({"AOTRITON_GIT_SHA1": "a" * 40, "AOTRITON_GIT_TREESHA1": "b" * 40})
    assert build_aotriton.signature_of(sig) == "git-" + "a" * 12
    assert build_aotriton.signature_of("aotriton0.12\n") == "0.12"
    one = build_aotriton.AotritonInstall(tmp_path, "0.13.0", {"amd-gfx115x": "git-" + "a" * 12}, ())
    assert build_aotriton.check_compatible(one, one, force=False) == []
    mixed = replace(one, images={"amd-gfx115x": "git-aaaa", "amd-gfx110x": "git-bbbb"})
    with pytest.raises(UserError, match="different AOTriton commits"):
        build_aotriton.check_compatible(mixed, one, force=False)
    old_text = replace(one, images={"amd-gfx115x": "0.12"})
    with pytest.raises(
        UserError, match=r"runtime 0\.13\.0 but amd-gfx115x/__signature__ says 0\.12"
    ):
        build_aotriton.check_compatible(old_text, one, force=False)


def test_version_torch_was_not_built_for_needs_force_then_restore(bed: Bed, capsys) -> None:
    st.install_torch(bed.prefix, runtime="0.12.0", images={"amd-gfx115x": "0.12"})
    with pytest.raises(UserError, match=r"torch was built for AOTriton 0\.12\.0 but this is 0\.13"):
        run_build(bed, capsys)
    assert (bed.torch_lib / "libaotriton_v2.so.0.12.0").read_bytes() == b"torch-shipped runtime\n"
    out = run_build(bed, capsys, "--force")
    assert "WARNING (--force)" in out
    lib = bed.torch_lib
    # torch links the soname it was built with: it is now the new runtime
    new_runtime = (lib / "libaotriton_v2.so.0.13.0").read_bytes()
    assert (lib / "libaotriton_v2.so.0.12.0").read_bytes() == new_runtime
    restore = run_build(bed, capsys, "--restore")
    assert "restored torch's own AOTriton (0.12.0)" in restore
    assert (lib / "libaotriton_v2.so.0.12.0").read_bytes() == b"torch-shipped runtime\n"
    assert not (lib / "libaotriton_v2.so.0.13.0").exists()
    assert (lib / "aotriton.images" / "amd-gfx115x" / "__signature__").read_text() == (
        "aotriton0.12\n"
    )
    assert not (lib / build_aotriton.MARKER).exists()
    assert st.record_lies(bed.prefix) == [] and st.pip_check(bed.prefix).returncode == 0
    st.install_torch(bed.prefix)


def test_no_images_keeps_torch_images(bed: Bed, capsys) -> None:
    st.install_torch(bed.prefix)
    out = run_build(bed, capsys, "--no-images")
    assert "-DAOTRITON_NOIMAGE_MODE=ON" in out
    lib = bed.torch_lib
    assert sorted(p.name for p in (lib / "aotriton.images").iterdir()) == [
        "amd-gfx110x",
        "amd-gfx115x",
    ]
    assert (lib / "libaotriton_v2.so.0.13.0").read_bytes() != b"torch-shipped runtime\n"
    record = stamps.read(bed.work / "stamps" / "aotriton.json")
    assert record is not None and record["inputs"]["options"]["noimage"] is True


def test_with_pyaotriton_needs_pybind11_in_the_env(bed: Bed, capsys) -> None:
    """--with-pyaotriton (AOTRITON_NO_PYTHON=OFF): refused in one line naming pybind11 while
    the env's python cannot import it, nothing run; with pybind11 there (a stand-in laid out
    as its wheel is) the binding is built and installed next to the runtime."""
    own = replace(bed, work=bed.root / "work-pyaotriton")
    needs = r"pyaotriton \(--with-pyaotriton; tune_aotriton's tuner\) needs pybind11"
    with pytest.raises(UserError, match=needs) as error:
        run_build(own, capsys, "--with-pyaotriton")
    assert "\n" not in str(error.value) and "nox -s lock && nox -s setup_env" in str(error.value)
    assert not (own.work / "build" / "aotriton").exists()
    package = st.install_pybind11(bed.prefix)
    try:
        out = run_build(own, capsys, "--with-pyaotriton")
    finally:
        shutil.rmtree(package)
    assert "path: source build: --with-pyaotriton asks for one" in out
    assert "-DAOTRITON_NO_PYTHON=OFF" in out
    py = subprocess.run(
        [
            str(bed.prefix / "bin" / "python"),
            "-c",
            "import pyaotriton; print(pyaotriton.version())",
        ],
        env={**os.environ, "PYTHONPATH": str(bed.torch_lib)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert py.stdout.strip() == "1300"
    run_build(own, capsys, "--restore")


def test_standin_configure_fails_where_the_real_one_does(bed: Bed, tmp_path: Path) -> None:
    """As ROCm/aotriton@6e00ef3e CMakeLists.txt: the binding needs pybind11, TARGET_GPUS is
    obsolete, find_package(hip) needs `rocm-sdk path --cmake`, and a source without git needs
    AOTRITON_CI_SUPPLIED_SHA1."""
    cmake_dir = next(bed.prefix.glob("lib/python3*/site-packages/_rocm_sdk_devel/lib/cmake"))
    cmake = shutil.which("cmake")
    assert cmake

    def configure(src: Path, *args: str) -> str:
        build = tmp_path / f"b{len(list(tmp_path.iterdir()))}"
        argv = [cmake, "-S", str(src), "-B", str(build), *args]
        result = subprocess.run(argv, capture_output=True, text=True)
        assert result.returncode != 0
        return result.stdout + result.stderr

    prefix = f"-DCMAKE_PREFIX_PATH={cmake_dir}"
    # the binding (AOTRITON_NO_PYTHON defaults OFF) needs pybind11 from the cmake-invoking python
    assert 'provided by "pybind11"' in configure(bed.repo, prefix)
    no_python = "-DAOTRITON_NO_PYTHON=ON"
    assert "OBSOLETE" in configure(bed.repo, prefix, no_python, "-DTARGET_GPUS=gfx942")
    assert "hip" in configure(bed.repo, "-DAOTRITON_NOIMAGE_MODE=ON")
    bare = tmp_path / "bare"
    shutil.copytree(bed.repo, bare, ignore=shutil.ignore_patterns(".git"))
    assert "AOTRITON_CI_SUPPLIED_SHA1" in configure(bare, prefix)


def test_known_bad_torch_aotriton_combination_is_refused_before_any_command(
    bed: Bed, capsys
) -> None:
    st.install_torch(bed.prefix)
    site = st.site_packages(bed.prefix)
    info = next(site.glob("torch-*.dist-info"))
    old = site / "torch-2.11.0+rocm7.1.dist-info"
    info.rename(old)  # torch 2.11 expects AOTriton 0.11.2b; the pin is 0.13b
    try:
        src_before = bed.src.exists()
        with pytest.raises(UserError) as error:
            run_build(bed, capsys)
        assert "torch 2.11 expects AOTriton 0.11.2b" in str(error.value)
        out = capsys.readouterr().out
        assert "$ " not in out and bed.src.exists() == src_before  # no command ran
    finally:
        old.rename(info)


def test_cache_choice_beats_aotritons_own_ccache_detection(
    bed: Bed, tmp_path: Path, capsys
) -> None:
    """AOTriton's CMakeLists makes any ccache on PATH the launcher, over a command-line
    CMAKE_*_COMPILER_LAUNCHER: the launcher args build_aotriton passes for --cache sccache and
    --cache none must still decide, in a real configure with a ccache on PATH."""
    tools = tmp_path / "tools"
    tools.mkdir()
    fake_ccache = tools / "ccache"
    fake_ccache.write_text('#!/bin/sh\nexec "$@"\n')
    fake_ccache.chmod(0o755)
    cmake_dir = next(bed.prefix.glob("lib/python3*/site-packages/_rocm_sdk_devel/lib/cmake"))
    env = {
        **os.environ,
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "PKG_CONFIG_PATH": str(bed.prefix / "lib" / "pkgconfig"),
    }

    def launcher(*cmake_args: str) -> str:
        build = tmp_path / f"b{len(list(tmp_path.glob('b*')))}"
        argv = [shutil.which("cmake") or "cmake", "-S", str(bed.repo), "-B", str(build)]
        argv += [f"-DCMAKE_PREFIX_PATH={cmake_dir}", "-DAOTRITON_NO_PYTHON=ON"]
        argv += ["-DAOTRITON_NOIMAGE_MODE=ON", *cmake_args]  # no aiter clone: not what is tested
        result = subprocess.run(argv, capture_output=True, text=True, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        info = (build / "build-info.txt").read_text()
        return info.split("LAUNCHER=", 1)[1].splitlines()[0]

    def cache_args(choice: str) -> list[str]:
        out = run_build(bed, capsys, "--dry-run", "--cache", choice)
        configure = next(line for line in out.splitlines() if " -G Ninja " in line)
        return [a for a in configure.split() if "LAUNCHER=" in a or a.startswith("-DCCACHE_FOUND")]

    assert launcher() == str(fake_ccache)  # what the real CMakeLists does on its own
    sccache_args = cache_args("sccache")
    assert launcher(*sccache_args).endswith("sccache")
    assert launcher(*cache_args("none")) == ""


def test_torch_pin_naming_another_aotriton_is_refused_before_any_command(bed: Bed, capsys) -> None:
    torch_pin = bed.pins / "pytorch.toml"
    kept = torch_pin.read_text()
    st.write_pytorch_pin(bed.pins, aotriton_commit="2" * 40, aotriton_version="0.12b")
    try:
        capsys.readouterr()
        with pytest.raises(UserError) as error:
            ba.build_aotriton(build_opts(bed.prefix, bed.work, "--dry-run"))
        assert "\n" not in str(error.value)
        assert "pins disagree" in str(error.value) and "names AOTriton 0.12b" in str(error.value)
        printed = capsys.readouterr().out
        assert command_lines(printed) == [] and "[dry-run]" not in printed
        ba.build_aotriton(build_opts(bed.prefix, bed.work, "--dry-run", "--force"))
        assert "WARNING (--force): pins disagree" in capsys.readouterr().out
    finally:
        torch_pin.write_text(kept)


def test_a_reinstalled_torch_is_never_mixed_with_the_old_one(bed: Bed, capsys) -> None:
    """pip reinstalling torch by hand removes our marker with the rest of our wheel (it is in
    its RECORD): the next build_aotriton repacks the torch pip installed, not the old one, and
    --restore never puts one torch's AOTriton into another."""
    lib = bed.torch_lib
    st.install_torch(bed.prefix, build="A")
    run_build(bed, capsys, "--force")  # --force: the same stamp inputs as the last test's
    first = json.loads((lib / build_aotriton.MARKER).read_text())
    with zipfile.ZipFile(first["original"]) as whl:
        assert whl.read("torch/lib/libaotriton_v2.so.0.13.0").endswith(b"build A\n")

    # another torch build, for AOTriton 0.12, installed over it by pip
    st.install_torch(bed.prefix, "0.12.0", {"amd-gfx115x": "0.12"}, build="B")
    assert not (lib / build_aotriton.MARKER).exists()
    assert not (lib / "libaotriton_v2.so.0.13.0").exists()  # pip removed all of our wheel
    shipped_b = (lib / "libaotriton_v2.so.0.12.0").read_bytes()
    # what torch B shipped (0.12) is what the install is checked against
    with pytest.raises(UserError, match=r"torch was built for AOTriton 0\.12\.0 but this is 0\.13"):
        run_build(bed, capsys)
    assert "nothing to restore: " in run_build(bed, capsys, "--restore")
    assert (lib / "libaotriton_v2.so.0.12.0").read_bytes() == shipped_b

    run_build(bed, capsys, "--force")
    second = json.loads((lib / build_aotriton.MARKER).read_text())
    assert second["original"] != first["original"] and second["shipped"]["runtime"] == "0.12.0"
    with zipfile.ZipFile(second["original"]) as whl:
        assert whl.read("torch/lib/libaotriton_v2.so.0.12.0") == shipped_b
    restored = run_build(bed, capsys, "--restore")
    assert "restored torch's own AOTriton (0.12.0)" in restored
    assert (lib / "libaotriton_v2.so.0.12.0").read_bytes() == shipped_b
    assert not (lib / "libaotriton_v2.so.0.13.0").exists()
    assert st.record_lies(bed.prefix) == [] and st.pip_check(bed.prefix).returncode == 0
    st.install_torch(bed.prefix)


def test_a_session_killed_while_pip_replaces_torch_is_finished_by_the_next(
    bed: Bed, capsys, tmp_path: Path
) -> None:
    """The real session, SIGKILLed (with its pip) once pip has begun writing the new torch/lib
    (tests/support/kill_hook.py): the next build_aotriton finishes the install first."""
    site = st.site_packages(bed.prefix)
    hooks = kill_hook.hook_dir(tmp_path / "hooks")
    program = (
        "import sys\nfrom pathlib import Path\nfrom rocmfa.builds import build_aotriton as ba\n"
        "from tests.support.aotriton_env import build_opts\n"
        "ba.build_aotriton(build_opts(Path(sys.argv[1]), Path(sys.argv[2]), '--force'))\n"
    )
    argv = [sys.executable, "-c", program, bed.prefix, bed.work]
    python_path = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "scripts")])  # this tree's
    env = {**os.environ, **bed.env(), "PYTHONPATH": python_path}
    st.install_torch(bed.prefix)
    _, changes = kill_hook.run(argv, hooks, [site], 0, env)
    inside_pip = next(n for n, c in enumerate(changes, 1) if f"{site / 'torch' / 'lib'}/" in c)
    st.install_torch(bed.prefix)
    status, _ = kill_hook.run(argv, hooks, [site], inside_pip + 1, env)
    assert status == -9 and session_env.torch_incomplete(site) is not None
    out = run_build(bed, capsys)
    assert "the env's torch is incomplete (" in out and "finishing the killed install" in out
    assert session_env.torch_incomplete(site) is None and st.record_lies(bed.prefix) == []
    assert st.pip_check(bed.prefix).returncode == 0
    assert (bed.torch_lib / build_aotriton.MARKER).is_file()
    assert command_lines(run_build(bed, capsys)) == []  # and the run after it has nothing to do
    st.install_torch(bed.prefix)


def test_pip_uninstall_leaves_nothing_of_ours(bed: Bed, capsys) -> None:
    """Every file the swap put into torch is in torch's RECORD: `pip uninstall torch` after a
    swap leaves no torch folder behind."""
    st.install_torch(bed.prefix)
    run_build(bed, capsys, "--force")
    assert (bed.torch_lib / build_aotriton.MARKER).is_file()
    assert st.record_lies(bed.prefix) == [] and st.pip_check(bed.prefix).returncode == 0
    python = bed.prefix / "bin" / "python"
    subprocess.run([python, "-m", "pip", "uninstall", "-y", "-q", "torch"], check=True)
    site = st.site_packages(bed.prefix)
    assert not (site / "torch").exists() and list(site.glob("torch-*")) == []
    st.install_torch(bed.prefix)


def test_first_real_run_resolves_the_torch_pin_and_refuses_a_disagreeing_pair(
    bed: Bed, capsys
) -> None:
    """The repository's own pins/pytorch.toml (release/2.13, commit = "") against a stand-in
    ROCm/pytorch whose aotriton.cmake names 0.12b: the first real run resolves the branch and
    reads the file as update_pins does, refuses the pair before any command, and leaves the pin
    file as it was."""
    cmake = '  set(__AOTRITON_VER "0.12b")\n  set(__AOTRITON_CI_COMMIT "' + "2" * 40 + '")\n'
    files = {
        "cmake/External/aotriton.cmake": cmake,
        "related_commits": "ubuntu|pytorch|torchaudio|release/2.13|" + "a" * 40 + "|https://x/a\n"
        "ubuntu|pytorch|torchvision|release/2.13|" + "b" * 40 + "|https://x/v\n",
        ".ci/docker/ci_commit_pins/triton.txt": "c" * 40 + "\n",
    }
    repo, _commit, www = st.make_rocm_pytorch_release(bed.root / "torch-release", files)
    torch_pin = bed.pins / "pytorch.toml"
    kept = torch_pin.read_text()
    try:
        with st.serve(www) as (base, _log):
            st.write_default_torch_pin(
                bed.pins,
                {
                    "https://github.com/ROCm/pytorch": f"file://{repo}",
                    "https://raw.githubusercontent.com/ROCm/pytorch": f"{base}/raw",
                },
            )
            before = torch_pin.read_text()
            capsys.readouterr()
            with pytest.raises(UserError) as error:
                ba.build_aotriton(build_opts(bed.prefix, bed.work))
        message = str(error.value)
        assert "\n" not in message and "pins disagree" in message and "0.12b" in message
        assert command_lines(capsys.readouterr().out) == []
        assert torch_pin.read_text() == before
    finally:
        torch_pin.write_text(kept)


def offline_pins(bed: Bed, tmp_path: Path) -> Path:
    """bed's pins with every upstream URL pointed at an unreachable address."""
    pins = tmp_path / "offline-pins"
    shutil.copytree(bed.pins, pins)
    for name in ("aotriton.toml", "pytorch.toml"):
        text = (pins / name).read_text()
        (pins / name).write_text(re.sub(r'"(file|https?)://[^"]*"', '"http://127.0.0.1:9/x"', text))
    return pins


def test_aiter_is_our_pinned_checkout_and_a_build_with_its_sources_needs_no_network(
    bed: Bed, capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """AOTriton's configure clones aiter by tag (v3src/CMakeLists.txt @ 6e00ef3e; the stand-in
    from an unreachable address): ours, at the pinned commit, is where it looks. With every
    source present, a forced rebuild with every URL unreachable and git allowed no transport
    passes; without our checkout the stand-in's configure fails at its clone."""
    run_build(bed, capsys)
    aiter, link = bed.work / "src" / "aiter", bed.work / "build" / "aotriton" / "v3src" / "aiter"
    assert link.is_symlink() and link.resolve() == aiter.resolve()
    upstream = bed.root / "aiter-upstream"
    assert st.git(aiter, "rev-parse", "HEAD") == st.git(upstream, "rev-parse", st.AITER_TAG)
    assert st.git(aiter, "describe", "--tags", "--exact-match", "HEAD") == st.AITER_TAG
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(offline_pins(bed, tmp_path)))
    monkeypatch.setenv("GIT_ALLOW_PROTOCOL", "none")  # any clone or fetch, file:// too, fails
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(proxy, "http://127.0.0.1:9")
    out = run_build(bed, capsys, "--force")
    assert "installed into" in out and not [c for c in command_lines(out) if " fetch " in c]
    recorded = stamps.read(bed.work / "build" / "aotriton" / ".rocmfa-configure.json")
    link.unlink()
    configure = subprocess.run(
        recorded["inputs"]["args"], cwd=bed.src, env={**os.environ, **recorded["inputs"]["sets"]},
        capture_output=True, text=True,
    )  # fmt: skip
    assert configure.returncode != 0 and "Cloning into 'aiter'" in configure.stderr


def test_an_aiter_pin_the_tree_does_not_name_is_refused(
    bed: Bed, capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pins = tmp_path / "pins"
    shutil.copytree(bed.pins, pins)
    text = (pins / "aotriton.toml").read_text()
    (pins / "aotriton.toml").write_text(text.replace(f'ref = "{st.AITER_TAG}"', 'ref = "v0"'))
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins))
    with pytest.raises(UserError, match=r"names aiter v0\.1\.11.*ref v0.*update_pins") as error:
        run_build(bed, capsys, "--force")
    assert "\n" not in str(error.value)


def test_gfx908_plan_lists_aiter_at_its_pin_and_the_fork_only_when_it_builds(
    capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`nox -s build_aotriton -- --dry-run --arch gfx908` with the repository's pins and
    patches: aiter fetched at the pinned commit (depth 1) and linked where configure looks;
    third_party/triton initialised with the fork, not with --triton pypi."""
    for name in ("ROCMFA_PINS_DIR", "ROCMFA_PATCHES_DIR"):
        monkeypatch.delenv(name)
    argv = ["--dry-run", "--arch", "gfx908", "--workdir", str(tmp_path / "w")]
    argv += ["--prefix", str(tmp_path / "no-env")]
    plans = {}
    for triton in ("fork", "pypi"):
        capsys.readouterr()
        ba.build_aotriton(options.parse("build_aotriton", [*argv, "--triton", triton]))
        plans[triton] = capsys.readouterr().out
    aiter = "c4a3ff2a044ef0f433d235986afd7979b7b7d147"
    for plan in plans.values():
        assert f"git fetch -q --no-tags --depth=1 origin {aiter}\n" in plan
        assert f"git update-ref refs/tags/v0.1.11 {aiter}\n" in plan
        assert f"[dry-run] aiter: {tmp_path}/w/build/aotriton/v3src/aiter -> " in plan
    assert "git submodule update -q --init -- third_party/triton" in plans["fork"]
    assert "third_party/triton" not in plans["pypi"]
