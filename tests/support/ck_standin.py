"""A stand-in composable_kernel CMake project (built for real with cmake + ninja), in a
rocm-libraries-like monorepo (projects/composablekernel) and in a legacy-layout repo.

It mirrors the upstream behaviour build_ck relies on (checked against
rocm-libraries@05d98566 projects/composablekernel/CMakeLists.txt, docs/upstream-interfaces.md):
find_package(hip) is required; a single unsupported target (gfx900/906/90c) gives a dummy
build with nothing installed; fused-MHA instances only with BUILD_MHA_LIB=ON (default OFF) and
a gfx90a/gfx94x/gfx95x target; BUILD_DEV
defaults ON and adds -Werror (the stand-in has a warning, so BUILD_DEV=ON fails); tests and
examples are only added when GPU_TARGETS is given without GPU_ARCHS; find_package(ROCM) must
be found through CMAKE_PREFIX_PATH; the install has include/ck/config.h (which records the
compiler and targets), the instance library and lib/cmake/composable_kernel."""

from __future__ import annotations

from pathlib import Path

from tests.support.therock_standin import make_repo, url

CMAKELISTS = r"""
cmake_minimum_required(VERSION 3.21)
project(composable_kernel VERSION 1.2.0 LANGUAGES CXX)
set(CK_UNSUPPORTED_GPU_TARGETS_LIST "gfx900;gfx906;gfx90c")
find_package(ROCM REQUIRED CONFIG)
if(GPU_ARCHS)
  unset(GPU_TARGETS CACHE)
  unset(AMDGPU_TARGETS CACHE)
endif()
if("${GPU_TARGETS}" IN_LIST CK_UNSUPPORTED_GPU_TARGETS_LIST)
  add_custom_target(ck_dummy_target)
  message("CK is not supported for target ${GPU_TARGETS}")
  return()
endif()
find_package(hip REQUIRED)
SET(BUILD_DEV ON CACHE BOOL "BUILD_DEV")
if(BUILD_DEV)
  add_compile_options(-Werror -Wunused-variable)
endif()
include(CTest)
option(BUILD_CK_EXAMPLES "examples" ON)
option(BUILD_CK_TUTORIALS "tutorials" ON)
if(GPU_ARCHS)
  unset(GPU_TARGETS CACHE)
  set(CK_TARGETS "${GPU_ARCHS}")
elseif(GPU_TARGETS)
  set(USER_GPU_TARGETS 1)
  set(CK_TARGETS "${GPU_TARGETS}")
endif()
configure_file(include/ck/config.h.in ${CMAKE_BINARY_DIR}/include/ck/config.h)
add_library(device_gemm_instance STATIC library/src/gemm.cpp)
target_include_directories(device_gemm_instance PUBLIC
  $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include> $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/include>)
install(TARGETS device_gemm_instance EXPORT ckTargets ARCHIVE DESTINATION lib)
option(BUILD_MHA_LIB "Build the static library for flash attention" OFF)
if(BUILD_MHA_LIB AND CK_TARGETS MATCHES "gfx94|gfx90a|gfx95")
  add_library(device_mha_instance STATIC library/src/mha.cpp)
  install(TARGETS device_mha_instance ARCHIVE DESTINATION lib)
endif()
install(DIRECTORY include/ck DESTINATION include FILES_MATCHING PATTERN "*.hpp")
install(FILES ${CMAKE_BINARY_DIR}/include/ck/config.h DESTINATION include/ck)
install(EXPORT ckTargets FILE composable_kernelConfig.cmake
  DESTINATION lib/cmake/composable_kernel)
if(NOT GPU_ARCHS AND USER_GPU_TARGETS)
  if(BUILD_TESTING)
    add_subdirectory(test)
  endif()
  if(BUILD_CK_EXAMPLES)
    add_subdirectory(example)
  endif()
endif()
"""

FILES = {
    "CMakeLists.txt": CMAKELISTS,
    "include/ck/ck.hpp": "#pragma once\nint ck_gemm();\n",
    "include/ck/config.h.in": (
        '#define CK_CXX_COMPILER "${CMAKE_CXX_COMPILER}"\n#define CK_TARGETS "${CK_TARGETS}"\n'
    ),
    "library/src/gemm.cpp": (
        '#include "ck/ck.hpp"\n#include "ck/config.h"\n'
        "int ck_gemm() { int unused_in_dev_builds; return 1; }\n"
    ),
    "library/src/mha.cpp": "int ck_mha() { return 1; }\n",
    "test/CMakeLists.txt": "add_executable(test_gemm gemm.cpp)\n"
    "target_link_libraries(test_gemm device_gemm_instance)\n",
    "test/gemm.cpp": '#include "ck/ck.hpp"\nint main() { return ck_gemm() == 1 ? 0 : 1; }\n',
    "example/CMakeLists.txt": "add_executable(example_gemm gemm.cpp)\n"
    "target_link_libraries(example_gemm device_gemm_instance)\n",
    "example/gemm.cpp": '#include "ck/ck.hpp"\nint main() { return ck_gemm() == 1 ? 0 : 1; }\n',
}

ROCM_CONFIG = "set(ROCM_FOUND TRUE)\n"


def make_ck_upstreams(root: Path) -> Path:
    """A monorepo and a legacy repo; returns a pins dir whose composable_kernel.toml selects
    the monorepo (use = "legacy" or $ROCMFA_CK_SOURCE=legacy selects the other)."""
    mono = root / "rocm-libraries"
    mono_files = {f"projects/composablekernel/{k}": v for k, v in FILES.items()}
    mono_files["projects/other/README"] = "another library\n"
    mono_commit = make_repo(mono, mono_files, branch="develop")
    legacy = root / "composable_kernel"
    legacy_commit = make_repo(legacy, FILES, branch="develop")
    pins = root / "pins"
    pins.mkdir(parents=True, exist_ok=True)
    (pins / "composable_kernel.toml").write_text(
        "[composable_kernel]\n"
        'use = "monorepo"\n'
        f'url = "{url(mono)}"\nref = "develop"\ncommit = "{mono_commit}"\n'
        'subdir = "projects/composablekernel"\n\n'
        "[composable_kernel.legacy]\n"
        f'url = "{url(legacy)}"\nref = "develop"\ncommit = "{legacy_commit}"\nsubdir = ""\n'
    )
    return pins


def add_rocm_cmake(cmake_dir: Path) -> None:
    """The rocm-cmake package config CK's find_package(ROCM) looks for, in the SDK's
    `rocm-sdk path --cmake` dir."""
    target = cmake_dir / "ROCM"
    target.mkdir(parents=True, exist_ok=True)
    (target / "ROCMConfig.cmake").write_text(ROCM_CONFIG)
