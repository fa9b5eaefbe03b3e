"""Real cache servers on loopback (redis-server, moto's S3) and a stand-in C++ CMake
project built through --cache.

Used by tests/test_compile_cache_servers.py and tests/perf/bench_shared_cache.py: two "machines"
(separate work dirs, so separate source trees, build dirs, SCCACHE_DIR and sccache server
ports) build the same project against one redis; the second should be served from the cache.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from rocmfa.builds import compile_cache
from rocmfa.plumbing import options
from rocmfa.plumbing.commands import Runner

REDIS = shutil.which("redis-server") or (
    "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
)


def installed_program(name: str) -> str | None:
    """A server program from PATH, else from the folder of this Python (a venv's bin)."""
    beside = Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside) if beside.exists() else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def redis_server(tmp: Path, *options: str) -> Iterator[str]:
    """redis-server on 127.0.0.1:<free port>, data in tmp, no persistence, more options (such
    as --requirepass PW); yields its URL."""
    if REDIS is None:
        raise RuntimeError("redis-server not installed")
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    argv = [REDIS, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(tmp)]
    argv += ["--save", "", "--appendonly", "no", "--protected-mode", "yes", *options]
    with _serving(argv, port, "redis-server", f"redis://127.0.0.1:{port}") as url:
        yield url


def _wait_for_port(proc: subprocess.Popen, port: int, what: str) -> None:
    deadline = time.monotonic() + 15
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start on port {port}") from None
            time.sleep(0.05)


@contextmanager
def _serving(argv: list[str], port: int, what: str, url: str) -> Iterator[str]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(proc, port, what)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


MOTO = installed_program("moto_server")


@contextmanager
def s3_server(bucket: str) -> Iterator[str]:
    """moto's S3-compatible server (PyPI moto[server]) on 127.0.0.1:<free port> with an empty
    bucket; yields its endpoint URL. It takes any credentials, which the caller sets in the
    environment as a real user would."""
    if MOTO is None:
        raise RuntimeError("moto_server not installed")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with _serving([MOTO, "-H", "127.0.0.1", "-p", str(port)], port, "moto_server", url):
        requests.put(f"{url}/{bucket}", timeout=10).raise_for_status()  # CreateBucket
        yield url


def write_project(src: Path, units: int) -> None:
    """A small C++ library + program: `units` translation units with some template work."""
    src.mkdir(parents=True, exist_ok=True)
    names = [f"unit{i}.cpp" for i in range(units)]
    for i, name in enumerate(names):
        (src / name).write_text(
            "#include <map>\n#include <string>\n#include <vector>\n#include <algorithm>\n"
            "template <int N> struct Fib {\n"
            "  static constexpr long v = Fib<N - 1>::v + Fib<N - 2>::v;\n};\n"
            "template <> struct Fib<1> { static constexpr long v = 1; };\n"
            "template <> struct Fib<0> { static constexpr long v = 0; };\n"
            f"long unit{i}() {{\n"
            "  std::map<std::string, std::vector<int>> m;\n"
            f"  for (int k = 0; k < {10 + i}; ++k) m[std::to_string(k)].push_back(k);\n"
            "  long s = 0; for (auto& [key, v] : m) s += std::count(v.begin(), v.end(), 1);\n"
            f"  return s + Fib<{30 + i % 10}>::v;\n}}\n"
        )
    decls = "".join(f"long unit{i}();\n" for i in range(units))
    calls = " + ".join(f"unit{i}()" for i in range(units))
    (src / "main.cpp").write_text(
        f'#include <cstdio>\n{decls}int main() {{ std::printf("%ld\\n", {calls}); }}\n'
    )
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(standin_cache CXX)\n"
        "set(CMAKE_CXX_STANDARD 17)\n"
        f"add_library(units STATIC {' '.join(names)})\n"
        "add_executable(app main.cpp)\ntarget_link_libraries(app units)\n"
    )


def tool(name: str) -> str:
    """cmake/ninja from the PyPI wheels next to this Python, else PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


@dataclass
class MachineBuild:
    wall_s: float
    stats: dict[str, Any]
    log: str


def build_on_machine(machine: Path, cache: str, units: int) -> MachineBuild:
    """One 'machine': its own work dir, checkout, build dir, SCCACHE_DIR and server port."""
    src, build = machine / "src", machine / "build"
    write_project(src, units)
    out = io.StringIO()
    runner = Runner(out=out)
    plan = compile_cache.plan_cache(
        options.parse_cache(cache),
        work=machine,
        arch="gfx1151",
        toolchain={"rocm": "7.13.0", "compiler": "system c++"},
        env=os.environ,
        runner=runner,
    )
    began = time.monotonic()
    with compile_cache.compiling(plan, runner, machine, "standin") as active:
        sets = active.build_sets(runner.base_env)
        configure = [tool("cmake"), "-G", "Ninja", "-S", str(src), "-B", str(build)]
        configure += [f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}", *active.cmake_args()]
        runner.run(configure, cwd=machine, sets=sets, capture=True)
        runner.run([tool("cmake"), "--build", str(build)], cwd=machine, sets=sets, capture=True)
    wall = time.monotonic() - began
    stats_file = machine / ".cache" / compile_cache.STATS_FILE
    lines = stats_file.read_text().splitlines() if stats_file.exists() else ["{}"]
    return MachineBuild(wall, json.loads(lines[-1]), out.getvalue())
