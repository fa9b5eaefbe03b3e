"""Stand-ins for issue 3's tests: upstream git repositories, a small CMake project laid out
like AOTriton, a torch package in an env, release tarballs, and a loopback HTTP server that
supports Range requests and can drop a connection midway."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import http.server
import io
import json
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.loopback import serving
from tests.support.wheels import make_wheel, record_hash

REPO_ROOT = Path(__file__).resolve().parents[2]

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Upstream Dev",
    "GIT_AUTHOR_EMAIL": "dev@upstream.invalid",
    "GIT_COMMITTER_NAME": "Upstream Dev",
    "GIT_COMMITTER_EMAIL": "dev@upstream.invalid",
    "GIT_AUTHOR_DATE": "2026-07-07T12:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-07-07T12:00:00+00:00",
}
# Tests use file:// submodules, which git refuses by default since 2.38.
FILE_PROTOCOL_ENV = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "protocol.file.allow",
    "GIT_CONFIG_VALUE_0": "always",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV, **FILE_PROTOCOL_ENV}
    result = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def make_repo(path: Path, files: dict[str, str], message: str = "initial") -> str:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    return commit_files(path, files, message)


def commit_files(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_patch_set(
    root: Path,
    project: str,
    base: str,
    upstream: Path,
    edits: list[dict[str, str]],
    arches: list[list[str] | None] | None = None,
) -> Path:
    """patches/<project>/<base>/NNNN-*.patch made with `git format-patch` from a clone of
    upstream with one commit per edit, plus manifest.toml with their sha256s (and, per patch,
    the `arches` it is for, where arches gives some)."""
    scratch = root / f".scratch-{project}-{base[:8]}"
    subprocess.run(["git", "clone", "-q", str(upstream), str(scratch)], check=True)
    git(scratch, "checkout", "-q", "--detach", base)
    for i, files in enumerate(edits, 1):
        commit_files(scratch, files, f"stand-in fix {i}")
    directory = root / project / base
    directory.mkdir(parents=True, exist_ok=True)
    git(scratch, "format-patch", "-q", "-o", str(directory), f"{base}..HEAD")
    write_manifest(directory, arches)
    subprocess.run(["rm", "-rf", str(scratch)], check=True)
    return directory


def write_manifest(directory: Path, arches: list[list[str] | None] | None = None) -> None:
    entries = []
    for i, patch in enumerate(sorted(directory.glob("*.patch"))):
        digest = hashlib.sha256(patch.read_bytes()).hexdigest()
        only = (arches or [])[i] if i < len(arches or []) else None
        entries.append(
            f'[[patch]]\nfile = "{patch.name}"\nsha256 = "{digest}"\n'
            f'reason = "stand-in fix"\nupstream = "https://example.invalid/pr/1"\n'
            + (f"arches = {json.dumps(only)}\n" if only else "")
        )
    (directory / "manifest.toml").write_text("\n".join(entries))


# --- a CMake project laid out like AOTriton -----------------------------------------------

# Fidelity (docs/upstream-interfaces.md, ROCm/aotriton@6e00ef3e = 0.13b CMakeLists.txt): the same
# option names and defaults; configure fails as the real one does without a git checkout (or
# AOTRITON_CI_SUPPLIED_SHA1 / AOTRITON_GIT_TREESHA1), with TARGET_GPUS set, without
# find_package(hip) or pkg-config's liblzma, and with AOTRITON_NO_PYTHON=OFF (the default) without
# pybind11 importable by Python3_EXECUTABLE (and torch unless AOTRITON_USE_TORCH=OFF);
# __signature__ is the JSON that 0.13b's write_image_signature writes (no version in it). The
# version comes from a VERSION file here (real: set() in CMakeLists.txt) so tests can make other
# versions.
CMAKELISTS = r"""
cmake_minimum_required(VERSION 3.18 FATAL_ERROR)
file(STRINGS "${CMAKE_CURRENT_SOURCE_DIR}/VERSION" AOTRITON_FULL_VERSION LIMIT_COUNT 1)
project(aotriton VERSION ${AOTRITON_FULL_VERSION} LANGUAGES C)
if(DEFINED ENV{AOTRITON_CI_SUPPLIED_SHA1})
  set(AOTRITON_GIT_SHA1 $ENV{AOTRITON_CI_SUPPLIED_SHA1})
else()
  execute_process(COMMAND git rev-parse HEAD WORKING_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}"
    OUTPUT_VARIABLE AOTRITON_GIT_SHA1 OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(NOT AOTRITON_GIT_SHA1)
  message(FATAL_ERROR "[AOTriton] Cannot identify Git Commit SHA1; set AOTRITON_CI_SUPPLIED_SHA1")
endif()
if(DEFINED ENV{AOTRITON_GIT_TREESHA1})
  set(AOTRITON_GIT_TREESHA1 $ENV{AOTRITON_GIT_TREESHA1})
else()
  execute_process(COMMAND git rev-parse "HEAD^{tree}"
    WORKING_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}"
    OUTPUT_VARIABLE AOTRITON_GIT_TREESHA1 OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(NOT AOTRITON_GIT_TREESHA1)
  message(FATAL_ERROR "[AOTriton] Cannot identify Git tree SHA1; define AOTRITON_GIT_TREESHA1.")
endif()
# As the real one (CMakeLists.txt @ 6e00ef3e): any ccache found becomes the compiler launcher,
# overriding a -DCMAKE_*_COMPILER_LAUNCHER given on the command line.
find_program(CCACHE_FOUND ccache)
if(CCACHE_FOUND)
  set(CMAKE_C_COMPILER_LAUNCHER ${CCACHE_FOUND})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CCACHE_FOUND})
endif()
set(AOTRITON_MIN_PYTHON 3.10 CACHE STRING "Minimal Python version for find_package.")
find_package(Python3 ${AOTRITON_MIN_PYTHON} COMPONENTS Interpreter REQUIRED)
find_package(hip REQUIRED)
set(VENV_DIR "${CMAKE_CURRENT_BINARY_DIR}/venv" CACHE STRING "Virtual Environment Directory")
option(AOTRITON_NO_PYTHON "Disable python binding build" OFF)
option(AOTRITON_USE_TORCH "Enable functions in python binding that requires libtorch" ON)
option(AOTRITON_ENABLE_ASAN "Enable Address Sanitizer (g++). Implies -g" OFF)
option(AOTRITON_ENABLE_ASAN_CLANG "Enable Address Sanitizer using Clang" OFF)
option(AOTRITON_BUILD_FOR_TUNING "Build all GPU kernels" OFF)
option(AOTRITON_ENABLE_FP32_INPUTS "Enable FP32 support." ON)
option(AOTRITON_NOIMAGE_MODE "Only build C++ Shim part. Kernel image builds are disabled" OFF)
option(AOTRITON_INHERIT_SYSTEM_SITE_TRITON "Use system site packages" OFF)
set(AOTRITON_USE_LOCAL_TRITON_WHEEL "" CACHE STRING "local triton wheel")
set(AOTRITON_GPU_BUILD_TIMEOUT "8.0" CACHE STRING "minutes, 0 for indefinite")
option(AOTRITON_TERMINATE_WHEN_GPU_BUILD_TIMEOUT "error on GPU build timeout" OFF)
set(AOTRITON_TARGET_ARCH "gfx90a;gfx942;gfx950;gfx1100;gfx1101;gfx1102;gfx1103;gfx1150;gfx1151"
    "gfx1152;gfx1153;gfx1201;gfx1200;gfx1250" CACHE STRING "Target GPU Architecture")
set(TARGET_GPUS "OBSOLETE" CACHE STRING "OBSOLETE")
set(AOTRITON_OVERRIDE_TARGET_GPUS "" CACHE STRING "Override AOTRITON_TARGET_ARCH")
set(AOTRITON_NAME_SUFFIX "" CACHE STRING "suffix")
# As the real one (lines 131-152): the python binding's requirements, before any build venv.
if(NOT AOTRITON_NO_PYTHON)
  cmake_policy(SET CMP0148 NEW)
  find_package(Python3 ${AOTRITON_MIN_PYTHON} COMPONENTS Development REQUIRED)
  execute_process(COMMAND "${Python3_EXECUTABLE}" -c
    "import pybind11, pathlib; print(pathlib.Path(pybind11.__file__).parent/'share/cmake/pybind11')"
                  OUTPUT_STRIP_TRAILING_WHITESPACE
                  OUTPUT_VARIABLE pybind11_DIR)
  find_package(pybind11 CONFIG REQUIRED)
  if(AOTRITON_USE_TORCH)
    execute_process(COMMAND "${Python3_EXECUTABLE}" -c
      "import torch; from pathlib import Path; print(str(Path(torch.__file__).parent))"
                    OUTPUT_STRIP_TRAILING_WHITESPACE
                    OUTPUT_VARIABLE TORCH_SITE)
    find_package(Torch REQUIRED HINTS ${TORCH_SITE})
  endif()
endif()
if(NOT TARGET_GPUS STREQUAL "OBSOLETE")
  message(FATAL_ERROR "TARGET_GPUS is OBSOLETE in Dispatcher V3. "
    "Use AOTRITON_TARGET_ARCH or AOTRITON_OVERRIDE_TARGET_GPUS.")
endif()
include(FindPkgConfig)
pkg_search_module(LZMA REQUIRED liblzma)
# the real one pip-installs third_party/triton for the image build (0.13b: its only submodule)
# unless AOTRITON_USE_LOCAL_TRITON_WHEEL names another Triton
if(NOT AOTRITON_NOIMAGE_MODE AND NOT AOTRITON_USE_LOCAL_TRITON_WHEEL
   AND NOT EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/third_party/triton/python")
  message(FATAL_ERROR "submodule third_party/triton is missing")
endif()
# As v3src/CMakeLists.txt ~89-131 @ 6e00ef3e: with images, aiter is cloned by the tag in
# third_party/aiter.txt into <build>/v3src/aiter unless a checkout there is at that tag, else
# fetched and checked out there. The URL stands for https://github.com/ROCm/aiter.git at an
# unreachable address: a build that leaves the clone to configure fails here.
if(NOT AOTRITON_NOIMAGE_MODE AND EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/third_party/aiter.txt")
  find_package(Git REQUIRED)
  file(STRINGS "${CMAKE_CURRENT_SOURCE_DIR}/third_party/aiter.txt" AITER_GIT_TAG LIMIT_COUNT 1)
  set(AITER_DIR "${CMAKE_CURRENT_BINARY_DIR}/v3src/aiter")
  file(MAKE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/v3src")
  if(NOT EXISTS "${AITER_DIR}/.git")
    execute_process(COMMAND ${GIT_EXECUTABLE} clone --depth 1 --branch ${AITER_GIT_TAG}
      http://127.0.0.1:9/ROCm/aiter.git
      WORKING_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/v3src" COMMAND_ERROR_IS_FATAL ANY)
  else()
    execute_process(COMMAND ${GIT_EXECUTABLE} describe --tags --exact-match HEAD
      WORKING_DIRECTORY "${AITER_DIR}" RESULT_VARIABLE AITER_DESCRIBE_RESULT
      OUTPUT_VARIABLE AITER_CURRENT_TAG OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT AITER_DESCRIBE_RESULT EQUAL 0 OR NOT AITER_CURRENT_TAG STREQUAL "${AITER_GIT_TAG}")
      execute_process(COMMAND ${GIT_EXECUTABLE} fetch origin --depth 1 "tag" "${AITER_GIT_TAG}"
        WORKING_DIRECTORY "${AITER_DIR}" COMMAND_ERROR_IS_FATAL ANY)
      execute_process(COMMAND ${GIT_EXECUTABLE} checkout ${AITER_GIT_TAG}
        WORKING_DIRECTORY "${AITER_DIR}" COMMAND_ERROR_IS_FATAL ANY)
    endif()
  endif()
endif()
# the real one asks python/gpu_targets.py (`-m aotriton.gpu_targets --target_arch`): an arch
# missing from its tables (gfx908 at 0.13b) gives no GPU and no pack
execute_process(COMMAND ${Python3_EXECUTABLE} "${CMAKE_CURRENT_SOURCE_DIR}/python/gpu_targets.py"
  ${AOTRITON_TARGET_ARCH} OUTPUT_VARIABLE packs OUTPUT_STRIP_TRAILING_WHITESPACE
  COMMAND_ERROR_IS_FATAL ANY)
if(NOT packs)
  message(FATAL_ERROR "aotriton: no supported target arch in input list")
endif()
list(REMOVE_DUPLICATES packs)
# Kernel images, only in a tree with the generator stand-in (tests/support/
# aotriton_generator_standin.py): as ROCm/aotriton 6e00ef3e CMakeLists.txt (the Triton install is
# a custom command: `pip install .` of third_party/triton, or of ${AOTRITON_USE_LOCAL_TRITON_WHEEL})
# and v3src/CMakeLists.txt (database extract + compose and the generator at configure time into
# <build>/v3src, then one add_custom_command(OUTPUT ${HSACO}) per line of Bare.compile with the
# real COMMAND, no VERBATIM, DEPENDS aotriton_venv_triton; Bare.targets; aks2 per pack). Simpler:
# no build venv (the real one pip-installs requirements.txt and the tree into <build>/venv): the
# tree's python/ is the package `aotriton` through a symlink on PYTHONPATH, the "Triton install"
# records what it would install in <build>/venv/triton-installed.txt, and one stand-in aks2
# image per pack lists the sha256 of every code object.
if(NOT AOTRITON_NOIMAGE_MODE AND EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/python/generate.py")
  set(VENV_BIN_PYTHON "${Python3_EXECUTABLE}")
  if(AOTRITON_USE_LOCAL_TRITON_WHEEL)
    set(TRITON_FROM "${AOTRITON_USE_LOCAL_TRITON_WHEEL}")
  else()
    set(TRITON_FROM "${CMAKE_CURRENT_SOURCE_DIR}/third_party/triton")
  endif()
  file(WRITE "${VENV_DIR}/triton-source.txt" "${TRITON_FROM}\n")
  set(AOTRITON_TRITON_SO "${VENV_DIR}/triton-installed.txt")
  # (its command line names what it installs, as the real pip command does: another Triton
  # reruns it)
  add_custom_command(OUTPUT "${AOTRITON_TRITON_SO}"
    COMMAND ${CMAKE_COMMAND} -E env "PIP_INSTALLS=${TRITON_FROM}"
    ${CMAKE_COMMAND} -E copy "${VENV_DIR}/triton-source.txt" "${AOTRITON_TRITON_SO}")
  add_custom_target(aotriton_venv_triton ALL DEPENDS "${AOTRITON_TRITON_SO}")
  set(AOTRITON_V2_BUILD_DIR "${CMAKE_CURRENT_BINARY_DIR}/v3src")
  set(DBXZ_BASE "${CMAKE_CURRENT_SOURCE_DIR}/modules/database")
  file(GLOB_RECURSE DB_TARS "${DBXZ_BASE}/*.sqlite3.tar.xz")
  foreach(DBXZ IN LISTS DB_TARS)
    cmake_path(RELATIVE_PATH DBXZ BASE_DIRECTORY "${DBXZ_BASE}" OUTPUT_VARIABLE REL_DBXZ)
    cmake_path(REMOVE_FILENAME REL_DBXZ)
    file(ARCHIVE_EXTRACT INPUT "${DBXZ}"
         DESTINATION "${AOTRITON_V2_BUILD_DIR}/database/${REL_DBXZ}")
  endforeach()
  file(MAKE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/pkg")
  file(REMOVE "${CMAKE_CURRENT_BINARY_DIR}/pkg/aotriton")
  file(CREATE_LINK "${CMAKE_CURRENT_SOURCE_DIR}/python" "${CMAKE_CURRENT_BINARY_DIR}/pkg/aotriton"
       SYMBOLIC)
  set(PYPKG "PYTHONPATH=${CMAKE_CURRENT_BINARY_DIR}/pkg")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ${PYPKG}
    "${VENV_BIN_PYTHON}" -m aotriton.database_compose
    --database_file "${AOTRITON_V2_BUILD_DIR}/database/tuning_database.sqlite3"
    --decomposed "${AOTRITON_V2_BUILD_DIR}/database"
    WORKING_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}" COMMAND_ERROR_IS_FATAL ANY)
  set(EFFECTIVE_TARGET_GPUS "")
  foreach(arch IN LISTS AOTRITON_TARGET_ARCH)
    list(APPEND EFFECTIVE_TARGET_GPUS "${arch}_mod0")
  endforeach()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ${PYPKG}
    "${VENV_BIN_PYTHON}" -X utf8 -m aotriton.generate
    --target_gpus ${EFFECTIVE_TARGET_GPUS}
    --build_dir "${AOTRITON_V2_BUILD_DIR}"
    --root_dir "${CMAKE_CURRENT_SOURCE_DIR}"
    WORKING_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}" COMMAND_ERROR_IS_FATAL ANY)
  get_filename_component(AOTRITON_COMPILER "${CMAKE_CURRENT_SOURCE_DIR}/python/compile.py" ABSOLUTE)
  set(HSACO_COMPILE_OPTION "")
  if(AOTRITON_TERMINATE_WHEN_GPU_BUILD_TIMEOUT)
    list(APPEND HSACO_COMPILE_OPTION "--error_when_timeout")
  endif()
  set(AOTRITON_HSACO_RECORD "${AOTRITON_V2_BUILD_DIR}/Bare.targets")
  file(STRINGS "${AOTRITON_V2_BUILD_DIR}/Bare.compile" HSACO_RULES ENCODING UTF-8)
  file(WRITE "${AOTRITON_HSACO_RECORD}" "")
  foreach(RULE IN LISTS HSACO_RULES)
    list(POP_FRONT RULE ALTNAME)
    list(POP_FRONT RULE COMPILER_PYTHON)
    list(POP_FRONT RULE HSACO)
    list(POP_FRONT RULE SRC)
    list(POP_FRONT RULE KNAME)
    list(POP_FRONT RULE NWARPS)
    list(POP_FRONT RULE NSTAGES)
    list(POP_FRONT RULE WAVESPEREU)
    list(POP_FRONT RULE TGTGPU)
    list(POP_FRONT RULE SIG)
    add_custom_command(OUTPUT "${HSACO}"
      COMMAND ${CMAKE_COMMAND} -E env
      TRITON_CACHE_DIR=${CMAKE_BINARY_DIR}/triton-cache.${ALTNAME}
      TRITON_F32_DEFAULT="ieee"
      TRITON_STORE_BINARY_ONLY=1
      "${COMPILER_PYTHON}"
      "${AOTRITON_COMPILER}"
      "${SRC}"
      "--kernel_name" "${KNAME}"
      "-o" "${HSACO}"
      "-g" "1,1,1"
      "--num_warps" "${NWARPS}"
      "--num_stages" "${NSTAGES}"
      "--waves_per_eu" "${WAVESPEREU}"
      "--target" "${TGTGPU}"
      "--signature" "${SIG}"
      "--timeout" "${AOTRITON_GPU_BUILD_TIMEOUT}"
      ${HSACO_COMPILE_OPTION}
      DEPENDS aotriton_venv_triton
    )
    file(APPEND "${AOTRITON_HSACO_RECORD}" "${HSACO}" "\n")
  endforeach(RULE)
  file(STRINGS "${AOTRITON_HSACO_RECORD}" ALL_HSACOS ENCODING UTF-8)
  add_custom_target(aotriton_v2_compile ALL DEPENDS ${ALL_HSACOS})
  set(ALL_AKS2 "")
  foreach(pack IN LISTS packs)
    set(AKS2 "${CMAKE_CURRENT_BINARY_DIR}/images/amd-${pack}/kernels.aks2")
    add_custom_command(OUTPUT "${AKS2}"
      COMMAND ${CMAKE_COMMAND} -E env ${PYPKG} "${VENV_BIN_PYTHON}" -m aotriton.aks2
      -o "${AKS2}" --hsaco_manifest "${AOTRITON_HSACO_RECORD}"
      DEPENDS aotriton_v2_compile
      WORKING_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND ALL_AKS2 "${AKS2}")
  endforeach()
  add_custom_target(aotriton_v3_aks2 ALL DEPENDS ${ALL_AKS2})
endif()
configure_file(config.h.in include/aotriton/config.h)
add_library(aotriton_v2 SHARED src/aotriton.c)
target_include_directories(aotriton_v2 PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/include)
set_target_properties(aotriton_v2 PROPERTIES VERSION ${PROJECT_VERSION})
install(TARGETS aotriton_v2 LIBRARY DESTINATION lib)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/include/aotriton/config.h DESTINATION include/aotriton)
if(NOT AOTRITON_NOIMAGE_MODE)
  foreach(pack IN LISTS packs)
    file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/images/amd-${pack}/__signature__
         "{\n  \"AOTRITON_GIT_SHA1\": \"${AOTRITON_GIT_SHA1}\",\n"
         "  \"AOTRITON_GIT_TREESHA1\": \"${AOTRITON_GIT_TREESHA1}\",\n"
         "  \"DB_SHA256\": {\"primary\": {}, \"secondary\": {}},\n"
         "  \"TRITON_VERSION\": \"3.5.0+git00000000\"\n}\n")
  endforeach()
  install(DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/images/ DESTINATION lib/aotriton.images)
endif()
if(NOT AOTRITON_NO_PYTHON)
  find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)
  Python3_add_library(pyaotriton MODULE WITH_SOABI src/pyaotriton.c)
  target_link_libraries(pyaotriton PRIVATE aotriton_v2)
  set_target_properties(pyaotriton PROPERTIES INSTALL_RPATH "$ORIGIN")
  install(TARGETS pyaotriton LIBRARY DESTINATION lib)
endif()
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/build-info.txt
  "TARGET_ARCH=${AOTRITON_TARGET_ARCH}\nTIMEOUT=${AOTRITON_GPU_BUILD_TIMEOUT}\n"
  "NOIMAGE=${AOTRITON_NOIMAGE_MODE}\nROCM_PATH=$ENV{ROCM_PATH}\n"
  "PKG_CONFIG_PATH=$ENV{PKG_CONFIG_PATH}\nPREFIX_PATH=${CMAKE_PREFIX_PATH}\n"
  "LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER}\n")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/build-info.txt DESTINATION share/aotriton)
"""

CONFIG_H_IN = """#pragma once
#define AOTRITON_VERSION_MAJOR @PROJECT_VERSION_MAJOR@u
#define AOTRITON_VERSION_MINOR @PROJECT_VERSION_MINOR@u
#define AOTRITON_VERSION_PATCH @PROJECT_VERSION_PATCH@u
#define AOTRITON_GIT_SHA1 @AOTRITON_GIT_SHA1@
"""

AOTRITON_C = """#include "aotriton/config.h"
int aotriton_version(void) {
  return AOTRITON_VERSION_MAJOR * 10000 + AOTRITON_VERSION_MINOR * 100 + AOTRITON_VERSION_PATCH;
}
"""

PYAOTRITON_C = """#define PY_SSIZE_T_CLEAN
#include <Python.h>
int aotriton_version(void);
static PyObject *version(PyObject *self, PyObject *args) {
  return PyLong_FromLong(aotriton_version());
}
static PyMethodDef methods[] = {{"version", version, METH_NOARGS, "runtime version"},
                                {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "pyaotriton", NULL, -1, methods};
PyMODINIT_FUNC PyInit_pyaotriton(void) { return PyModule_Create(&module); }
"""


# python/gpu_targets.py's pack table as at 0.13b (6e00ef3e: no gfx908; the gfx908 patch set adds
# it, patches/aotriton/6e00ef3e.../0001); run as a script it prints the packs of its arguments.
GPU_TARGETS = """AOTRITON_ARCH_TO_PACK = {
    'gfx90a'    : 'gfx90a',
    'gfx942'    : 'gfx942',
    'gfx950'    : 'gfx950',
    'gfx1100'   : 'gfx110x',
    'gfx1101'   : 'gfx110x',
    'gfx1102'   : 'gfx110x',
    'gfx1103'   : 'gfx110x',
    'gfx1150'   : 'gfx115x',
    'gfx1151'   : 'gfx115x',
    'gfx1152'   : 'gfx115x',
    'gfx1153'   : 'gfx115x',
    'gfx1201'   : 'gfx120x',
    'gfx1200'   : 'gfx120x',
    'gfx1250'   : 'gfx1250',
}

if __name__ == "__main__":
    import sys
    found = [AOTRITON_ARCH_TO_PACK[a] for a in sys.argv[1:] if a in AOTRITON_ARCH_TO_PACK]
    print(";".join(dict.fromkeys(found)))
"""
GFX908_PACK_EDIT = (
    "AOTRITON_ARCH_TO_PACK = {\n",
    "AOTRITON_ARCH_TO_PACK = {\n    'gfx908'    : 'gfx908',\n",
)

UPSTREAM_SUBMODULE = "third_party/triton"


def install_pybind11(prefix: Path) -> Path:
    """A stand-in pybind11 in the env, laid out as the pybind11 wheel is: the package, with its
    CMake package config under pybind11/share/cmake/pybind11 (what AOTriton's configure finds
    through `import pybind11`)."""
    package = site_packages(prefix) / "pybind11"
    config = package / "share" / "cmake" / "pybind11"
    config.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("# stand-in pybind11\n")
    (config / "pybind11Config.cmake").write_text("set(pybind11_FOUND TRUE)\n")
    return package


AITER_TAG = "v0.1.11"  # third_party/aiter.txt at 6e00ef3e


def make_aotriton_upstream(root: Path, version: str = "0.13.0") -> tuple[Path, str]:
    """A git repo shaped like AOTriton; returns (repo, HEAD commit). Its one submodule is
    third_party/triton, as at 0.13b (6e00ef3e: the only gitlink, mapped in .gitmodules), and
    third_party/aiter.txt names the aiter tag its configure clones: a stand-in aiter upstream
    with that tag sits beside it (aiter_upstream)."""
    triton = root / "triton-upstream"
    make_repo(triton, {"python/setup.py": "# stand-in triton\n"})
    make_repo(root / "aiter-upstream", {"hsa/README": "stand-in aiter\n"})
    git(root / "aiter-upstream", "tag", AITER_TAG)
    repo = root / "aotriton-upstream"
    make_repo(
        repo,
        {
            "CMakeLists.txt": CMAKELISTS,
            "VERSION": version + "\n",
            "config.h.in": CONFIG_H_IN,
            "src/aotriton.c": AOTRITON_C,
            "src/pyaotriton.c": PYAOTRITON_C,
            "python/gpu_targets.py": GPU_TARGETS,
            "third_party/aiter.txt": AITER_TAG + "\n",
        },
    )
    git(repo, "submodule", "add", "-q", f"file://{triton}", UPSTREAM_SUBMODULE)
    git(repo, "commit", "-q", "-m", "add the triton submodule")
    git(repo, "tag", "0.13b")
    return repo, git(repo, "rev-parse", "HEAD")


# --- torch in an env ----------------------------------------------------------------------


def write_aotriton_pin(
    pins_dir: Path, url: str, commit: str, ref: str = "main", **fields: str | bool | list[str]
) -> Path:
    """pins/aotriton.toml as a user's: url, ref, commit, then `fields` (version, tuner, ...).
    Unless pins_dir has one, also a pins/pytorch.toml whose recorded aotriton.cmake names this
    AOTriton (rocmfa.sources.pins), so the pin set is consistent."""
    lines = ["[aotriton]", f'url = "{url}"', f'ref = "{ref}"', f'commit = "{commit}"']
    for key, value in fields.items():
        if isinstance(value, bool):
            lines.append(f"{key} = {str(value).lower()}")
        elif isinstance(value, list):
            lines.append(f"{key} = [" + ", ".join(f'"{v}"' for v in value) + "]")
        else:
            lines.append(f'{key} = "{value}"')
    aiter = Path(url.removeprefix("file://")).parent / "aiter-upstream"
    if url.startswith("file://") and aiter.is_dir():  # as update_pins records it
        aiter_commit = git(aiter, "rev-parse", AITER_TAG)
        lines += ["[aotriton.aiter]", f'url = "file://{aiter}"', f'ref = "{AITER_TAG}"']
        lines += [f'commit = "{aiter_commit}"', "depth = 1"]
    path = pins_dir / "aotriton.toml"
    path.write_text("\n".join(lines) + "\n")
    torch = pins_dir / "pytorch.toml"
    if not torch.exists() and commit != "from-pytorch":
        write_pytorch_pin(pins_dir, aotriton_commit=commit, aotriton_version=fields.get("version"))
    return path


def pin_standin_release(pins_dir: Path, repo: Path, commit: str) -> Path:
    """pins/aotriton.toml for make_aotriton_upstream's repo as 0.13b, with its one submodule.
    A pins/pytorch.toml already there (a TheRock stand-in's) gets the [pytorch.aotriton]
    record update_pins would write, naming this AOTriton at that torch's commit."""
    torch_pin = pins_dir / "pytorch.toml"
    if torch_pin.is_file():
        torch_commit = re.search(r'^commit = "([0-9a-f]{40})"', torch_pin.read_text(), re.M)
        assert torch_commit, torch_pin
        record = (
            f'\n[pytorch.aotriton]\npytorch_commit = "{torch_commit[1]}"\nversion = "0.13b"\n'
            f'commit = "{commit}"\nsource = "stand-in record"\n'
        )
        torch_pin.write_text(torch_pin.read_text() + record)
    return write_aotriton_pin(
        pins_dir, f"file://{repo}", commit, "0.13b", version="0.13b",
        submodules=[UPSTREAM_SUBMODULE],
    )  # fmt: skip


STANDIN_TORCH_COMMIT = "b" * 40


def write_pytorch_pin(
    pins_dir: Path,
    *,
    aotriton_commit: str,
    aotriton_version: object = None,
    torch_commit: str = STANDIN_TORCH_COMMIT,
    recorded_for: str | None = None,
) -> Path:
    """pins/pytorch.toml with a [pytorch.aotriton] record (as update_pins writes it) saying the
    torch names that AOTriton; recorded_for: the torch commit the record was read at."""
    version = f'version = "{aotriton_version}"\n' if isinstance(aotriton_version, str) else ""
    path = pins_dir / "pytorch.toml"
    path.write_text(
        f'[pytorch]\nurl = "https://example.invalid/pytorch"\nref = "nightly"\n'
        f'commit = "{torch_commit}"\n\n[pytorch.aotriton]\n'
        f'pytorch_commit = "{recorded_for or torch_commit}"\n{version}'
        f'commit = "{aotriton_commit}"\nsource = "stand-in record"\n'
    )
    return path


def make_rocm_pytorch_release(root: Path, files: dict[str, str]) -> tuple[Path, str, Path]:
    """A stand-in ROCm/pytorch whose release/2.13 branch holds files, and a folder that serves
    each at <www>/raw/<commit>/<path> as raw.githubusercontent.com does: (repo, commit, www)."""
    repo = root / "rocm-pytorch"
    make_repo(repo, {"README": "x\n"})
    git(repo, "checkout", "-q", "-b", "release/2.13")
    commit = commit_files(repo, files, "release 2.13")
    www = root / "www"
    for path, text in files.items():
        (www / "raw" / commit / path).parent.mkdir(parents=True, exist_ok=True)
        (www / "raw" / commit / path).write_text(text)
    return repo, commit, www


def write_default_torch_pin(pins_dir: Path, urls: dict[str, str]) -> Path:
    """The repository's own pins/pytorch.toml (release/2.13, commit = "") with each upstream
    URL in urls (a prefix of one in the file) pointed at a stand-in."""
    text = (REPO_ROOT / "pins" / "pytorch.toml").read_text()
    for real, standin in urls.items():
        text = text.replace(real, standin)
    path = pins_dir / "pytorch.toml"
    path.write_text(text)
    return path


def site_packages(prefix: Path) -> Path:
    return next(prefix.glob("lib/python3*/site-packages"))


def install_torch(
    prefix: Path,
    runtime: str = "0.13.0",
    images: dict[str, str] | None = None,
    image_files: int = 0,
    version: str = "2.13.0+rocm7.15.0",
    *,
    build: str = "",
) -> Path:
    """A stand-in torch wheel carrying AOTriton the way TheRock's wheels do (torch/lib/
    libaotriton_v2.so.X.Y.Z, libaotriton_v2.so a copy of it - a wheel holds no links -,
    aotriton.images/<pack>/__signature__, include/aotriton/config.h), installed by the env's
    real pip as a user would: `pip install --force-reinstall --no-deps` removes what the old
    RECORD lists, so what others left in torch/ stays. build: a tag in the shipped runtime's
    bytes, so another build is another wheel with another RECORD. From an index (a
    --find-links folder, as with TheRock's index)."""
    files: dict[str, str | bytes] = {"torch/__init__.py": f"__version__ = '{version}'\n"}
    if runtime:
        shipped = b"torch-shipped runtime\n" + (f"build {build}\n".encode() if build else b"")
        files[f"torch/lib/libaotriton_v2.so.{runtime}"] = shipped
        files["torch/lib/libaotriton_v2.so"] = shipped
        major, minor, patch = runtime.split(".")
        files["torch/include/aotriton/config.h"] = (
            f"#define AOTRITON_VERSION_MAJOR {major}\n#define AOTRITON_VERSION_MINOR {minor}\n"
            f"#define AOTRITON_VERSION_PATCH {patch}\n"
        )
    for pack, sig in (images or {"amd-gfx115x": "0.13", "amd-gfx110x": "0.13"}).items():
        files[f"torch/lib/aotriton.images/{pack}/__signature__"] = f"aotriton{sig}\n"
        for i in range(image_files):
            files[f"torch/lib/aotriton.images/{pack}/flash/k{i:05d}.aks2"] = b"shipped %d" % i
    out = prefix.parent / "standin-torch-wheels" / hashlib.sha256(repr(files).encode()).hexdigest()
    make_wheel(out, "torch", version, files=files)
    pip_install(prefix, f"torch=={version}", "--find-links", out)
    return site_packages(prefix) / "torch"


def pip_install(prefix: Path, *args: str | Path) -> None:
    """pip install args into the env at prefix, as a user replaces torch by hand."""
    python = prefix / "bin" / "python"
    pip = [python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", "--no-index"]
    subprocess.run([*pip, *map(str, args)], check=True, capture_output=True)


def record_lies(prefix: Path) -> list[str]:
    """Files of the env's torch that are not what its RECORD (pip's own data) says."""
    site = site_packages(prefix)
    (info,) = site.glob("torch-*.dist-info")
    wrong = []
    for rel, digest, _size in csv.reader((info / "RECORD").read_text().splitlines()):
        path = site / rel
        if digest and not (path.is_file() and record_hash(path.read_bytes()) == digest):
            wrong.append(rel)
    return wrong


def pip_check(prefix: Path) -> subprocess.CompletedProcess[str]:
    python = prefix / "bin" / "python"
    return subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)


# --- release tarballs and a loopback server with Range support ----------------------------


def _tar(entries: dict[str, bytes | str], target: Path) -> str:
    """A .tar.gz of entries: bytes are files, a str is a symlink to that name."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in entries.items():
            member = tarfile.TarInfo(name)
            member.mtime = 0
            if isinstance(data, str):
                member.type, member.linkname = tarfile.SYMTYPE, data
                tar.addfile(member)
                continue
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(buffer.getvalue())
    return hashlib.sha256(target.read_bytes()).hexdigest()


@dataclass(frozen=True)
class ReleaseFiles:
    runtime_name: str
    runtime_sha: str
    images_name: str
    images_sha: str
    pack: str
    version: str
    rocm: str

    def pin_table(self, runtime_sha: str | None = None) -> str:
        return (
            f'[aotriton.release]\nversion = "{self.version}"\n'
            'base_url = "http://127.0.0.1:9/overridden-by-env/"\n'
            "[aotriton.release.runtime_sha256]\n"
            f'"{self.rocm}" = ["manylinux_2_28", "{runtime_sha or self.runtime_sha}"]\n'
            "[aotriton.release.image_sha256]\n"
            f'{self.pack} = "{self.images_sha}"\n'
        )


def json_signature(commit: str = "6e00ef3e335b45dfb49065259533b59c68995bfe") -> bytes:
    """An image pack's __signature__ as AOTriton writes it (python/write_image_signature.py)."""
    fields = {
        "AOTRITON_GIT_SHA1": commit,
        "AOTRITON_GIT_TREESHA1": "0" * 40,
        "DB_SHA256": {"primary": {}, "secondary": {}},
        "TRITON_VERSION": "3.5.0+git00000000",
    }
    return (json.dumps(fields, indent=2) + "\n").encode()


def make_release(
    www: Path,
    *,
    version: str = "0.13b",
    runtime: str = "0.13.0",
    signature: str | None = None,
    rocm: str = "7.15",
    pack: str = "gfx115x",
    hostarch: str = "x86_64",
    padding: int = 300_000,
    image_files: int = 0,
) -> ReleaseFiles:
    """Runtime + one image pack under www/<version>/ (AOTriton's release names). The pack's
    __signature__ is AOTriton's JSON form (0.11b+ write_image_signature) unless `signature`
    gives a version, then the old text form `aotriton<version>` (to test the version guard)."""
    noise = os.urandom(padding)  # incompressible, so a download can be cut midway
    runtime_name = f"aotriton-{version}-manylinux_2_28_{hostarch}-rocm{rocm}-shared.tar.gz"
    images_name = f"aotriton-{version}-images-amd-{pack}.tar.gz"
    runtime_sha = _tar(
        {
            f"aotriton/lib/libaotriton_v2.so.{runtime}": b"release runtime\n" + noise,
            # `ninja install` puts the namelink beside it (torch's aotriton.cmake links it)
            "aotriton/lib/libaotriton_v2.so": f"libaotriton_v2.so.{runtime}",
            "aotriton/include/aotriton/config.h": b"/* release */\n",
        },
        www / version / runtime_name,
    )
    images_sha = _tar(
        {
            f"aotriton/lib/aotriton.images/amd-{pack}/__signature__": (
                f"aotriton{signature}\n".encode() if signature else json_signature()
            ),
            f"aotriton/lib/aotriton.images/amd-{pack}/flash/fwd.aks2": noise,
            # many small kernel files, as a real pack has (tens of thousands)
            **{
                f"aotriton/lib/aotriton.images/amd-{pack}/flash/k{i:05d}.aks2": b"new %d" % i
                for i in range(image_files)
            },
        },
        www / version / images_name,
    )
    return ReleaseFiles(runtime_name, runtime_sha, images_name, images_sha, pack, version, rocm)


@dataclass
class ServerLog:
    requests: list[tuple[str, str]] = field(default_factory=list)  # (path, Range header)
    drop_after: dict[str, int] = field(default_factory=dict)  # path -> bytes, first GET only


def _handler(directory: Path, log: ServerLog):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            log.requests.append((path, self.headers.get("Range", "")))
            target = directory / path.lstrip("/")
            if not target.is_file():
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = target.read_bytes()
            start = 0
            rng = self.headers.get("Range", "")
            if rng.startswith("bytes=") and rng.endswith("-"):
                start = int(rng[6:-1])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            cut = log.drop_after.pop(path, None)
            if cut is not None:
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


@contextlib.contextmanager
def serve(directory: Path, log: ServerLog | None = None) -> Iterator[tuple[str, ServerLog]]:
    log = log or ServerLog()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(directory, log))
    with serving(server) as url:
        yield url, log
