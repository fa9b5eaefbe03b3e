"""`nox -s build_ck`: composable_kernel (rocm-libraries) for this arch with the env's ROCm SDK
compilers, into the env; docs/pytorch-and-ck.md, docs/upstream-interfaces.md (at 05d98566)."""

import os
import shutil
from pathlib import Path
from typing import Any

from rocmfa.builds import compile_cache
from rocmfa.env import rocm_sdk, session_env
from rocmfa.plumbing import options, stamps
from rocmfa.plumbing.commands import choose_jobs
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import BuildCkOptions
from rocmfa.sources import checkouts, pins

CK = "composable_kernel"  # its pin, checkout, build dir and patch sets
CK_GIB_PER_JOB = 3.0  # CK instance translation units; they get OOM-killed with one job per core


def compilers(session: session_env.SessionEnv) -> tuple[str, Path, Path, str]:
    """The env SDK's (cmake prefix, C and C++ compiler: amdclang or llvm clang, ROCm version)."""
    asked = rocm_sdk.read_paths(session, session.tool("rocm-sdk"))  # session.ask: a plan's too
    root = Path(asked["root"])
    if not root.is_dir():  # a plan before setup_env: where rocm[devel] puts them
        session.runner.refuse(f"no ROCm SDK at {root}; run: nox -s setup_env")
        return asked["cmake"], root / "bin/amdclang", root / "bin/amdclang++", asked["version"]
    for d, name in ((root / "bin", "amdclang"), (root / "lib" / "llvm" / "bin", "clang")):
        c = d / name
        cxx = d / f"{name}++"
        if os.access(c, os.X_OK) and os.access(cxx, os.X_OK):
            return asked["cmake"], c, cxx, asked["version"]
    raise UserError(
        f"no amdclang/amdclang++ in the env's ROCm SDK ({root}/bin or lib/llvm/bin); "
        "is rocm[devel] installed? run: nox -s setup_env"
    )


def announce(session: session_env.SessionEnv, opts: BuildCkOptions, pin: Any) -> None:
    say = session.runner.say
    arch = session.arch
    subdir = pin.data.get("subdir")
    if not arch.ck_mha:
        say(f"note: CK has fused-MHA (flash attention) for gfx90a/gfx94x/gfx95x, not {arch.name}")
    say("note: torch's CK attention (USE_ROCM_CK_SDPA=1) is its own bundled CK, not this one;")
    say("      a torch built with it selects it at run time with TORCH_ROCM_FA_PREFER_CK=1")
    if opts.with_tests or opts.with_examples:
        say("note: tests/examples make this a much longer build (upstream reports ~1.5 h)")
    if pin.data.get("use") == "legacy" or "ROCm/composable_kernel" in pin.url:
        say(f"note: {pin.url} is the deprecated CK repository; CK lives in rocm-libraries now")
    say(f"pin: {pin.describe()}" + (f", subdir {subdir}" if subdir else ""))


def cmake_args(arch, opts, source: Path, build: Path, prefix: Path, sdk: tuple) -> list[str]:
    """CK's configure from source into build, to install into prefix, with sdk = compilers()."""
    cmake_prefix, cc, cxx, _version = sdk
    tests, examples = ("ON" if flag else "OFF" for flag in (opts.with_tests, opts.with_examples))
    # tests/examples are only added with GPU_TARGETS (and without GPU_ARCHS)
    extra = opts.with_tests or opts.with_examples
    on, off = ("TARGETS", "ARCHS") if extra else ("ARCHS", "TARGETS")
    return [
        *("-G", "Ninja", "-S", str(source), "-B", str(build)),
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_INSTALL_PREFIX={prefix}",
        f"-DCMAKE_PREFIX_PATH={cmake_prefix}",
        f"-DCMAKE_C_COMPILER={cc}",
        f"-DCMAKE_CXX_COMPILER={cxx}",
        f"-DCMAKE_HIP_COMPILER={cxx}",
        "-DBUILD_DEV=OFF",
        f"-UGPU_{off}",
        f"-DGPU_{on}={arch.name}",
        f"-DBUILD_TESTING={tests}",
        f"-DBUILD_CK_EXAMPLES={examples}",
        f"-DBUILD_CK_TUTORIALS={examples}",
        # the monorepo CK builds fused-MHA instances only with BUILD_MHA_LIB=ON (default OFF)
        *(["-DBUILD_MHA_LIB=ON"] if arch.ck_mha else []),
    ]


def build_ck(opts: BuildCkOptions) -> None:
    session = session_env.open_env(opts)
    arch = session.arch
    work = session.work
    prefix = session.prefix
    runner = session.runner
    if arch.vendor != "amd":
        raise UserError(f"composable_kernel targets AMD GPUs; {arch.name} is not one")
    runner.say(session.describe())
    pin = pins.load_pin(CK, workdir=work)
    announce(session, opts, pin)
    sdk = compilers(session)
    _cmake_prefix, _cc, cxx, rocm_version = sdk
    cmake = session.tool("cmake")
    _ninja = session.tool("ninja")
    jobs, why = choose_jobs(opts.jobs, CK_GIB_PER_JOB)
    runner.say(f"compile: {why}")
    checkout = options.src_dir(work, CK)
    build = options.build_dir(work, CK)
    subdir = str(pin.data.get("subdir") or "")
    env = session_env.env_identity(prefix)
    configure = cmake_args(arch, opts, checkout / subdir, build, prefix, sdk)
    inputs = {
        "pin": [pin.url, pin.commit],
        "patches": checkouts.patch_set_digest(CK, pin.commit),
        "configure": configure,  # arch, compilers, tests/examples, the prefix
        "rocm": rocm_version,
        "env": env,
    }
    stamp = options.stamp_path(work, "build_ck")
    if stamps.is_current(stamp, inputs) and not (opts.force or opts.clean):
        runner.say(f"composable_kernel is up to date in {prefix} ({stamp}); --force to rebuild")
        return
    checkouts.ensure_checkout(pin, checkout, runner, force=opts.discard_local_edits)
    checkouts.apply_patch_set(CK, pin.commit, checkout, runner)
    if checkout.exists() and not (checkout / subdir / "CMakeLists.txt").is_file():
        raise UserError(f"{checkout / subdir} has no CMakeLists.txt (pin subdir {subdir!r})")
    cache_file = build / "CMakeCache.txt"  # --clean or another compiler: start over
    lines = cache_file.read_text().splitlines() if cache_file.is_file() else []
    cached = next((x.split("=", 1)[1] for x in lines if x.startswith("CMAKE_CXX_COMPILER:")), None)
    if build.exists() and (opts.clean or (cached and cached != str(cxx))):
        why = "--clean" if opts.clean else f"the compiler changed ({cached} -> {cxx})"
        runner.apply(shutil.rmtree, build, say=f"{why}: removing {build}")
    runner.apply(stamp.unlink, missing_ok=True)
    runner.apply(build.mkdir, parents=True, exist_ok=True)
    tools = {"rocm": rocm_version, "cxx": str(cxx), "env": env}
    cache = compile_cache.plan_cache(
        opts.cache, work=work, arch=arch.name, toolchain=tools, env=session.environ, runner=runner
    )
    with compile_cache.compiling(cache, runner, work, "build_ck") as cache:
        sets = cache.build_sets(session.environ)
        runner.run([cmake, *configure, *cache.cmake_args()], cwd=build, sets=sets)
        runner.run([cmake, "--build", str(build), "--parallel", str(jobs)], cwd=build, sets=sets)
    runner.run([cmake, "--install", str(build)], cwd=build)
    runner.apply(stamps.write, stamp, inputs, install_prefix=str(prefix), build_dir=str(build))
    runner.say(f"composable_kernel installed into {prefix} (lib/cmake, include/ck)")
