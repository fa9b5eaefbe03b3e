"""Stand-in TheRock ROCm SDK wheels with the real package shape (TheRock RELEASES.md and
build_tools/packaging/python/templates/rocm @ 89553ce3):
`rocm` with extras libraries/devel/device-gfxNNNN pulling rocm-sdk-* packages, and the
`rocm-sdk` CLI (path --root|--bin|--cmake, version, targets, init [--quiet])."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from tests.support.conda_packages import pip_standin
from tests.support.wheels import make_wheel

VERSION = "7.15.0a20260630"
DEVICE_ARCHS = ("gfx1151", "gfx1100", "gfx942", "gfx908")

ROCM_SDK_MAIN = """
import argparse, json, os, sys
from importlib import metadata


def _devel_root():
    try:
        import _rocm_sdk_devel
    except ImportError:
        sys.exit("Could not load the `rocm[devel]` package")
    return os.path.dirname(_rocm_sdk_devel.__file__)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="rocm-sdk")
    sub = parser.add_subparsers(dest="command", required=True)
    path = sub.add_parser("path")
    which = path.add_mutually_exclusive_group(required=True)
    for flag in ("--root", "--bin", "--cmake"):
        which.add_argument(flag, action="store_true")
    sub.add_parser("version")
    sub.add_parser("targets")
    init = sub.add_parser("init")
    init.add_argument("--quiet", action="store_true")
    sub.add_parser("test")
    args = parser.parse_args(argv)
    if args.command == "path":
        root = _devel_root()
        print(root if args.root else os.path.join(root, "bin" if args.bin else "lib/cmake"))
    elif args.command == "version":
        print(metadata.version("rocm"))
    elif args.command == "targets":
        import _rocm_sdk_core
        here = os.path.dirname(_rocm_sdk_core.__file__)
        info = os.path.join(here, "share/therock/dist_info.json")
        print(json.load(open(info))["dist_amdgpu_targets"])
    elif args.command == "init":
        _devel_root()
        if not args.quiet:
            print("rocm-sdk: initialized")
    return 0


if __name__ == "__main__":
    sys.exit(main())
"""

# The devel root's compilers wrap the host compiler so real cmake/ninja builds work here.
WRAPPERS = {
    "amdclang": 'exec cc "$@"',
    "amdclang++": 'exec c++ "$@"',
    "hipcc": 'exec c++ "$@"',
    "hipconfig": 'echo "7.15.0"',
}


def build_wheels(out: Path, version: str = VERSION) -> Path:
    device_extras = {f"device-{a}": [f"rocm-sdk-device-{a}=={version}"] for a in DEVICE_ARCHS}
    make_wheel(
        out, "rocm", version,
        files={"rocm_sdk/__init__.py": "", "rocm_sdk/__main__.py": ROCM_SDK_MAIN},
        requires=[f"rocm-sdk-core=={version}"],
        extras={
            "libraries": [f"rocm-sdk-libraries=={version}"],
            "devel": [f"rocm-sdk-devel=={version}"],
            **device_extras,
        },
        console_scripts={"rocm-sdk": "rocm_sdk.__main__:main"},
    )  # fmt: skip
    make_wheel(
        out, "rocm-sdk-core", version,
        files={
            "_rocm_sdk_core/__init__.py": "",
            "_rocm_sdk_core/share/therock/dist_info.json":
                '{"dist_amdgpu_targets": "' + ";".join(DEVICE_ARCHS) + '"}',
        },
    )  # fmt: skip
    make_wheel(out, "rocm-sdk-libraries", version, files={"_rocm_sdk_libraries/__init__.py": ""})
    devel_files = {
        "_rocm_sdk_devel/__init__.py": "",
        "_rocm_sdk_devel/lib/cmake/README": "x\n",
        # find_package(hip REQUIRED) (AOTriton's CMakeLists) finds it under `rocm-sdk path --cmake`
        "_rocm_sdk_devel/lib/cmake/hip/hip-config.cmake": "set(hip_VERSION 7.15.0)\n",
        # the device libraries where TheRock's build_prod_wheels.py points HIP_DEVICE_LIB_PATH
        "_rocm_sdk_devel/lib/llvm/amdgcn/bitcode/ockl.bc": "",
    }
    for tool, body in WRAPPERS.items():
        devel_files[f"_rocm_sdk_devel/bin/{tool}"] = f"#!/bin/sh\n{body}\n"
    make_wheel(
        out, "rocm-sdk-devel", version, files=devel_files,
        executables=[p for p in devel_files if "/bin/" in p],
    )  # fmt: skip
    for arch in DEVICE_ARCHS:
        # As TheRock's rocm-sdk-device template: a device wheel requires the libraries wheel.
        make_wheel(
            out, f"rocm-sdk-device-{arch}", version, files={f"_rocm_device_{arch}/x": ""},
            requires=[f"rocm-sdk-libraries=={version}"],
        )  # fmt: skip
    return out


def write_rocm_pin(pins_dir: Path, index_url: str, version: str = VERSION) -> Path:
    pins_dir.mkdir(parents=True, exist_ok=True)
    path = pins_dir / "rocm.toml"
    path.write_text(
        "[rocm]\n"
        'index = "multi-arch"\n'
        f'multi_arch_index_url = "{index_url}"\n'
        f'legacy_index_url = "{index_url.rstrip("/")}/v2/{{family}}/"\n'
        f'version = "{version}"\n'
        'extras = ["libraries", "devel"]\n'
        "pre = true\n"
        "[torch]\n"
        'spec = ">=2.13,<2.14"\n'
    )
    return path


def make_venv(prefix: Path) -> Path:
    """A venv of the Python running the tests, without its site-packages, that imports that
    Python's pip (the pip_standin hook, as a conda env gets pip from its own package):
    `python -m venv` with ensurepip takes 10 s or more on CI's 2 cores, this well under 1."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    for path, text in pip_standin().files.items():
        (prefix / path).write_text(text)
    return prefix


def venv_environ(prefix: Path) -> dict[str, str]:
    """The outer environment with prefix/bin first, as commands in a venv prefix see it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{prefix / 'bin'}:{env.get('PATH', '')}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def provision_env(
    prefix: Path, pins_dir: Path, *, lock_sha256: str = "test-lock", out: TextIO | None = None
) -> Path:
    """A real Python prefix (a venv standing in for the conda env) provisioned by setup_env's
    own post-conda code against the loopback index whose rocm.toml is in pins_dir: stand-in
    ROCm SDK, activation scripts, env stamp (recording lock_sha256 as the lock it came from)."""
    from rocmfa.env import archs, rocm_sdk, setup_env
    from rocmfa.plumbing.commands import Runner

    make_venv(prefix)
    pin = rocm_sdk.load_pin(pins_dir / "rocm.toml")
    request = setup_env.Request(archs.get_arch("gfx1151"), pin, "multi-arch", False, ())
    runner = Runner(base_env=venv_environ(prefix), out=out)
    setup_env.provision(prefix, request, runner, stamp_inputs=request.inputs(lock_sha256, None))
    return prefix


def build_torch_wheel(out: Path, torch_version: str, rocm_version: str, arch: str) -> Path:
    """TheRock's torch as published (RELEASES.md @ 89553ce3; build_prod_wheels.py puts
    `rocm[libraries]==<the SDK it was built with>` in its requirements): the `device-<arch>`
    extra pulls amd-torch-device-<arch> (which needs the SDK's device wheel)."""
    make_wheel(
        out, f"amd-torch-device-{arch}", torch_version, files={f"_amd_torch_device_{arch}/x": ""},
        requires=[f"rocm-sdk-device-{arch}=={rocm_version}"],
    )  # fmt: skip
    return make_wheel(
        out, "torch", torch_version,
        files={"torch/__init__.py": f"__version__ = {torch_version!r}\n"},
        requires=[f"rocm[libraries]=={rocm_version}"],
        extras={f"device-{arch}": [f"amd-torch-device-{arch}=={torch_version}"]},
    )  # fmt: skip
