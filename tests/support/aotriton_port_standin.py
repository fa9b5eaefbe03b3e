"""A stand-in of an AOTriton tree tuned with cpptune, laid out as upstream ROCm/aotriton 0.11b
(972223c5) and the retired community gfx908 port (Jack31098/aotriton_gfx908 @ 60639c72, 0.10)
both have it, following the interfaces read there:

- CMakeLists.txt: AOTRITON_TARGET_ARCH, AOTRITON_OVERRIDE_TARGET_GPUS (gfxNNN_modN ids),
  AOTRITON_BUILD_FOR_TUNING, AOTRITON_NAME_SUFFIX (library libaotriton<SUFFIX>_v2.so,
  v3src/CMakeLists.txt), AOTRITON_NOIMAGE_MODE; packs per arch (v3python/gpu_targets.py); at
  configure time it untars v3python/rules/tuning_database.sqlite3.tar.xz into the build dir.
- test/tune_flash.py: --json_file (required; appends and skips task ids already recorded unless
  --overwrite_json_file), --d_head/--dtype/--seqlen_q/--seqlen_k (nargs +), --validate; needs
  the tuning build's bindings on PYTHONPATH; writes one JSON record per line; ends in a Textual
  app, `app.run(mouse=False, inline=True, headless=args.debug_headless)` (972223c5 line 448):
  the stand-in fails at once without a terminal unless --debug_headless is given.
- v2python/table_tool.py --action rawjson -k FLASH -f <sqlite3> -i <json>: best record per
  input into the FLASH tables.
- submodules as the port has them (the layout issue 28's resume tests replay): gitlinks
  third_party/{aiter,incbin,pybind11,triton}, but .gitmodules maps only incbin, pybind11 and
  triton (port a96e8f2 re-added the aiter gitlink without a mapping), so `git submodule update
  --init --recursive` fails with "No url found for submodule path 'third_party/aiter' in
  .gitmodules"; CMakeLists.txt stops without third_party/pybind11/CMakeLists.txt when
  AOTRITON_NO_PYTHON=OFF (0.11b lines 85-87 and the port alike).
$STANDIN_TUNE_STOP_AFTER=N makes the tuner die after N new records (an interrupted run)."""

from __future__ import annotations

import io
import sqlite3
import subprocess
import tarfile
from pathlib import Path

from tests.support.aotriton_standins import CONFIG_H_IN, git, make_repo

PORT_CMAKELISTS = r"""
cmake_minimum_required(VERSION 3.26)
file(STRINGS "${CMAKE_CURRENT_SOURCE_DIR}/VERSION" AOTRITON_FULL_VERSION LIMIT_COUNT 1)
project(aotriton VERSION ${AOTRITON_FULL_VERSION} LANGUAGES C)
option(AOTRITON_NO_PYTHON "Disable python binding build" OFF)
option(AOTRITON_BUILD_FOR_TUNING "Build all GPU kernels and set -DAOTRITON_BUILD_FOR_TUNING=1" OFF)
option(AOTRITON_NOIMAGE_MODE "Only build C++ Shim part" OFF)
set(AOTRITON_GPU_BUILD_TIMEOUT "8.0" CACHE STRING "minutes, 0 for indefinite")
set(AOTRITON_TARGET_ARCH "gfx908;gfx90a;gfx942;gfx950;gfx1100;gfx1151" CACHE STRING "GPUs")
set(AOTRITON_OVERRIDE_TARGET_GPUS "" CACHE STRING "Override AOTRITON_TARGET_ARCH")
set(AOTRITON_NAME_SUFFIX "" CACHE STRING "Add suffix to namespace and library file name")
if(NOT DEFINED ENV{ROCM_PATH})
  message(FATAL_ERROR "ROCM_PATH is not set")
endif()
if(AOTRITON_OVERRIDE_TARGET_GPUS)
  set(gpus ${AOTRITON_OVERRIDE_TARGET_GPUS})
else()
  set(gpus "")
  foreach(arch IN LISTS AOTRITON_TARGET_ARCH)
    list(APPEND gpus "${arch}_mod0")
  endforeach()
endif()
set(packs "")
foreach(gpu IN LISTS gpus)
  if(gpu MATCHES "^(gfx908|gfx90a|gfx942|gfx950)_mod0$")
    list(APPEND packs ${CMAKE_MATCH_1})
  elseif(gpu MATCHES "^gfx11[05][01]_mod0$")
    list(APPEND packs gfx11xx)
  endif()
endforeach()
if(NOT packs)
  message(FATAL_ERROR "aotriton: no supported target arch in input list")
endif()
list(REMOVE_DUPLICATES packs)
if(NOT AOTRITON_NO_PYTHON)
  if(NOT EXISTS ${CMAKE_SOURCE_DIR}/third_party/pybind11/CMakeLists.txt)
    message(FATAL_ERROR "third_party/pybind11 is not initialized")
  endif()
endif()
find_package(Python3 REQUIRED COMPONENTS Interpreter)
execute_process(COMMAND ${CMAKE_COMMAND} -E tar xf
  "${CMAKE_SOURCE_DIR}/v3python/rules/tuning_database.sqlite3.tar.xz"
  WORKING_DIRECTORY "${CMAKE_BINARY_DIR}" COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${Python3_EXECUTABLE} "${CMAKE_SOURCE_DIR}/count_rows.py"
  "${CMAKE_BINARY_DIR}/tuning_database.sqlite3"
  OUTPUT_VARIABLE tuned_rows OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
configure_file(config.h.in include/aotriton/config.h)
add_library(aotriton_v2 SHARED src/aotriton.c)
target_include_directories(aotriton_v2 PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/include)
set_target_properties(aotriton_v2 PROPERTIES VERSION ${PROJECT_VERSION}
                      OUTPUT_NAME "aotriton${AOTRITON_NAME_SUFFIX}_v2")
install(TARGETS aotriton_v2 LIBRARY DESTINATION lib)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/include/aotriton/config.h DESTINATION include/aotriton)
if(NOT AOTRITON_NOIMAGE_MODE)
  foreach(pack IN LISTS packs)
    file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/images/amd-${pack}/__signature__
         "aotriton${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}\n")
  endforeach()
  install(DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/images/ DESTINATION lib/aotriton.images)
endif()
if(NOT AOTRITON_NO_PYTHON)
  file(WRITE ${CMAKE_BINARY_DIR}/bindings/pyaotriton_standin.py
       "BUILD_FOR_TUNING = '${AOTRITON_BUILD_FOR_TUNING}'\nSUFFIX = '${AOTRITON_NAME_SUFFIX}'\n")
endif()
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/build-info.txt
  "GPUS=${gpus}\nTUNING=${AOTRITON_BUILD_FOR_TUNING}\nSUFFIX=${AOTRITON_NAME_SUFFIX}\n"
  "TUNED_ROWS=${tuned_rows}\n")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/build-info.txt DESTINATION share/aotriton)
"""

TUNE_FLASH = r"""
import argparse, itertools, json, os, sys
from pathlib import Path


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--d_head", type=int, nargs="+", default=[16, 32, 64])
    p.add_argument("--seqlen_q", type=int, nargs="+", default=[16, 32])
    p.add_argument("--seqlen_k", type=int, nargs="+", default=[16, 32])
    p.add_argument("--dtype", type=str, nargs="+", default=["float16", "bfloat16", "float32"],
                   choices=["float16", "bfloat16", "float32"])
    p.add_argument("--validate", action="store_true")
    p.add_argument("--json_file", type=Path, required=True, default=None)
    p.add_argument("--overwrite_json_file", dest="continue_from_json_file",
                   action="store_false")
    p.add_argument("--debug_headless", action="store_true")
    return p.parse_args()


def main():
    a = parse()
    if not a.debug_headless and not (sys.stdin.isatty() and sys.stdout.isatty()):
        sys.exit("stand-in: the tuner's inline Textual app needs a terminal; pass --debug_headless")
    import pyaotriton_standin as binding  # the tuning build's bindings, via PYTHONPATH
    if binding.BUILD_FOR_TUNING != "ON" or not binding.SUFFIX:
        sys.exit("tune_flash.py needs a build with AOTRITON_BUILD_FOR_TUNING=ON and a suffix")
    skip = set()
    if a.continue_from_json_file and a.json_file.is_file():
        for line in a.json_file.read_text().splitlines():
            skip.add(json.loads(line)["task_id"])
    print(f"skip_set={len(skip)}", flush=True)
    stop_after = int(os.environ.get("STANDIN_TUNE_STOP_AFTER", "0"))
    written = 0
    mode = "a" if a.continue_from_json_file else "w"
    with open(a.json_file, mode) as out:
        combos = itertools.product(a.d_head, a.dtype, a.seqlen_q, a.seqlen_k)
        for task_id, (d, dt, sq, sk) in enumerate(combos):
            if task_id in skip:
                continue
            if stop_after and written >= stop_after:
                print("interrupted", flush=True)
                sys.exit(130)
            record = {
                "arch": "gfx90a_mod0", "task_id": task_id, "kernel_name": "attn_fwd",
                "inputs": {"D_HEAD": d, "Q_dtype": f"torch.{dt}", "Max_seqlen_q": sq,
                           "Max_seqlen_k": sk},
                "tuned_kernel": {"BLOCK_M": 64, "BLOCK_N": 32, "PRE_LOAD_V": False},
                "compiler_options": {"waves_per_eu": 2, "num_warps": 4, "num_stages": 1},
                "result": "tuned", "time": [0.01 * (task_id + 1)],
            }
            out.write(json.dumps(record) + "\n")
            out.flush()
            written += 1
            print(f"[{task_id:06d}] d_head={d} {dt} {sq}x{sk}", flush=True)


main()
"""

TABLE_TOOL = r"""
import argparse, json, sqlite3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-i", type=str, default=None)
    p.add_argument("-f", "--file", type=str, default=None)
    p.add_argument("-k", "--kernel_family", type=str)
    p.add_argument("--action", type=str, default="pipejson",
                   choices=["pipejson", "createtableonly", "dumpcsv", "loadcsv", "rawjson",
                            "rawsc"])
    a = p.parse_args()
    assert a.action == "rawjson" and a.kernel_family == "FLASH", "stand-in: rawjson FLASH only"
    db = sqlite3.connect(a.file)
    with open(a.i) as f:
        for line in f:
            j = json.loads(line)
            if j["result"] != "tuned":
                continue
            table = f"{a.kernel_family}${j['kernel_name']}"
            db.execute(f'INSERT OR REPLACE INTO "{table}" VALUES (?, ?, ?)',
                       (j["arch"], json.dumps(j["inputs"], sort_keys=True),
                        json.dumps(j["tuned_kernel"], sort_keys=True)))
    db.commit()


main()
"""


COUNT_ROWS = """import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(db.execute('SELECT COUNT(*) FROM "FLASH$attn_fwd"').fetchone()[0])
"""


def tuning_database_tar_xz() -> bytes:
    """v3python/rules/tuning_database.sqlite3.tar.xz with one row reused from gfx90a_mod0."""
    buffer = io.BytesIO()
    db = sqlite3.connect(":memory:")
    db.execute(
        'CREATE TABLE "FLASH$attn_fwd" (gpu TEXT, inputs TEXT, tuned_kernel TEXT, '
        "UNIQUE(gpu, inputs))"
    )
    db.execute('INSERT INTO "FLASH$attn_fwd" VALUES (?, ?, ?)', ("gfx90a_mod0", "{}", "{}"))
    db.commit()
    data = db.serialize()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        member = tarfile.TarInfo("tuning_database.sqlite3")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


PORT_SUBMODULES = ("third_party/incbin", "third_party/pybind11", "third_party/triton")
UNMAPPED_GITLINK = "third_party/aiter"


def make_port(root: Path, version: str = "0.11.0") -> tuple[Path, str]:
    """The stand-in as a git repo; returns (repo, HEAD commit)."""
    subs = {
        "third_party/incbin": {"incbin.h": "/* stand-in incbin */\n"},
        "third_party/pybind11": {"CMakeLists.txt": "# stand-in pybind11\n"},
        "third_party/triton": {"python/setup.py": "# stand-in triton\n"},
    }
    repo = root / "aotriton-gfx908-port"
    make_repo(
        repo,
        {
            "CMakeLists.txt": PORT_CMAKELISTS,
            "VERSION": version + "\n",
            "config.h.in": CONFIG_H_IN,
            "src/aotriton.c": "int aotriton_version(void) { return 1000; }\n",
            "test/tune_flash.py": TUNE_FLASH,
            "v2python/table_tool.py": TABLE_TOOL,
            # stand-in only: how many tuned rows configure saw (reported in build-info.txt)
            "count_rows.py": COUNT_ROWS,
        },
    )
    for path, files in subs.items():
        sub = root / "port-submodules" / path.rsplit("/", 1)[1]
        make_repo(sub, files)
        git(repo, "submodule", "add", "-q", f"file://{sub}", path)
    # aiter: a gitlink with no .gitmodules entry, as the real tree has it
    aiter = root / "port-submodules" / "aiter"
    aiter_commit = make_repo(aiter, {"README.md": "stand-in aiter\n"})
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{aiter_commit},{UNMAPPED_GITLINK}")
    rules = repo / "v3python" / "rules"
    rules.mkdir(parents=True)
    (rules / "tuning_database.sqlite3.tar.xz").write_bytes(tuning_database_tar_xz())
    git(repo, "add", "v3python")
    git(repo, "commit", "-q", "-m", "submodules as the port has them; the reused gfx90a database")
    # the author's work tree has the submodules; a clone does not
    return repo, git(repo, "rev-parse", "HEAD")


def assert_recursive_init_stops_at_aiter(checkout: Path) -> None:
    """What `submodules = true` ran, on a clone of the port (stand-in or real): git stops at the
    unmapped gitlink third_party/aiter."""
    failed = subprocess.run(
        ["git", "submodule", "update", "--init", "--recursive"],
        cwd=checkout,
        capture_output=True,
        text=True,
    )
    assert failed.returncode != 0
    assert "No url found for submodule path 'third_party/aiter' in .gitmodules" in failed.stderr
