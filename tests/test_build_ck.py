"""build_ck: a stand-in CK (monorepo subdir or legacy repo) built with real cmake and ninja
by the env's stand-in ROCm compilers, installed into the env."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rocmfa.builds import build_ck as ck
from rocmfa.plumbing import options
from rocmfa.plumbing.commands import choose_jobs
from rocmfa.plumbing.errors import UserError
from tests.support import ck_standin
from tests.support import therock_standin as standin


@pytest.fixture(scope="module")
def env_prefix(tmp_path_factory, rocm_index) -> Path:
    """Our own env (build_ck installs into it), with rocm-cmake in `rocm-sdk path --cmake`."""
    prefix = standin.provision_private_env(tmp_path_factory.mktemp("ck-env"), rocm_index.pins_dir)
    cmake_dir = subprocess.run(
        [prefix / "bin" / "rocm-sdk", "path", "--cmake"], capture_output=True, text=True
    ).stdout.strip()
    ck_standin.add_rocm_cmake(Path(cmake_dir))
    return prefix


@pytest.fixture(scope="module")
def ck_pins(tmp_path_factory) -> Path:
    return ck_standin.make_ck_upstreams(tmp_path_factory.mktemp("ck-up"))


@pytest.fixture
def run(monkeypatch, env_prefix, ck_pins, tmp_path):
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(ck_pins))
    monkeypatch.setenv("ROCMFA_PATCHES_DIR", str(tmp_path / "patches"))
    monkeypatch.delenv("ROCMFA_CK_SOURCE", raising=False)
    work = tmp_path / "work"

    def call(*args: str) -> Path:
        argv = ["--prefix", str(env_prefix), "--workdir", str(work), "--jobs", "2", *args]
        if "--arch" not in args:
            argv += ["--arch", "gfx1151"]
        ck.build_ck(options.parse("build_ck", argv))
        return work

    return call


def commands(out: str, tool: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("$ ") and f"/{tool} " in line]


def test_library_only_build_installs_into_env_and_rerun_skips(run, env_prefix, capfd):
    work = run()
    out = capfd.readouterr().out
    assert "fused-MHA (flash attention) for gfx90a/gfx94x/gfx95x, not gfx1151" in out
    assert "USE_ROCM_CK_SDPA" in out
    configure = next(line for line in commands(out, "cmake") if " -G Ninja " in line)
    assert "-DGPU_ARCHS=gfx1151" in configure and "-DGPU_TARGETS" not in configure.replace(
        "-UGPU_TARGETS", ""
    )
    assert "-DBUILD_DEV=OFF" in configure and "-DBUILD_TESTING=OFF" in configure
    assert f"-DCMAKE_INSTALL_PREFIX={env_prefix}" in configure
    assert "/bin/amdclang++" in configure and "sudo" not in out
    assert "projects/composablekernel" in configure
    config_h = (env_prefix / "include" / "ck" / "config.h").read_text()
    assert "amdclang++" in config_h and '"gfx1151"' in config_h
    assert (env_prefix / "lib" / "libdevice_gemm_instance.a").is_file()
    assert "BUILD_MHA_LIB" not in configure  # no MHA instances exist for gfx1151
    assert not (env_prefix / "lib" / "libdevice_mha_instance.a").exists()
    assert (env_prefix / "lib/cmake/composable_kernel/composable_kernelConfig.cmake").is_file()
    build = work / "build" / "composable_kernel"
    assert not (build / "test").exists() and not (build / "example").exists()

    run()
    out = capfd.readouterr().out
    assert "up to date" in out and not commands(out, "cmake") and not commands(out, "git")


def test_tests_and_examples_use_gpu_targets_and_clean_starts_over(run, capfd):
    work = run("--with-tests")
    out = capfd.readouterr().out
    configure = next(line for line in commands(out, "cmake") if " -G Ninja " in line)
    assert "-DGPU_TARGETS=gfx1151" in configure and "-UGPU_ARCHS" in configure
    build = work / "build" / "composable_kernel"
    assert (build / "test" / "test_gemm").is_file()
    marker = build / "left-by-an-earlier-build"
    marker.write_text("x")
    run("--clean")
    assert not marker.exists() and not (build / "test").exists()
    assert "--clean: removing" in capfd.readouterr().out


def test_dry_run_legacy_repo_and_cdna_arch(run, monkeypatch, capfd, env_prefix):
    monkeypatch.setenv("ROCMFA_CK_SOURCE", "legacy")
    work = run("--dry-run", "--arch", "gfx942")
    out = capfd.readouterr().out
    assert "deprecated CK repository" in out
    assert "fused-MHA" not in out  # gfx942 gets MHA instances
    configure = next(line for line in out.splitlines() if " -G Ninja " in line)
    assert configure.startswith("[dry-run] (cd ")
    assert f"-S {work / 'src' / 'composable_kernel'} " in configure  # no subdir
    assert "-DGPU_ARCHS=gfx942" in configure
    assert "-DBUILD_MHA_LIB=ON" in configure  # the monorepo CK builds MHA only with it
    assert not (work / "src").exists() and not (work / "build").exists()


def test_jobs_are_capped_by_available_memory(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 33554432 kB\nMemAvailable: 7340032 kB\n")  # 7 GiB
    jobs, why = choose_jobs(None, 3.0, meminfo=meminfo, cpus=32)
    assert jobs == 2 and "limited by memory" in why
    assert choose_jobs(5, 3.0, meminfo=meminfo, cpus=32)[0] == 5


def test_dry_run_shows_the_compile_cache_and_contacts_nothing(run, capfd, monkeypatch):
    monkeypatch.setenv("SCCACHE_REDIS_PASSWORD", "hunter2")  # sccache reads it; we never print it
    work = run("--dry-run", "--cache", "redis://192.0.2.1:6379?read_only=1")
    out = capfd.readouterr().out
    assert "[dry-run] check that the cache server answers" in out
    configure = next(line for line in out.splitlines() if " -G Ninja " in line)
    assert "SCCACHE_REDIS_RW_MODE=READ_ONLY" in configure
    assert "-DCMAKE_CXX_COMPILER_LAUNCHER=" in configure and "/gfx1151/" in configure
    assert "[dry-run] " in out and "--start-server" in out
    assert "hunter2" not in out
    assert not (work / "src").exists() and not (work / ".cache").exists()
    with pytest.raises(UserError, match="credentials do not belong in the URL"):
        run("--dry-run", "--cache", "redis://u:hunter2@h:1")
