#!/usr/bin/env python
"""Stand-in for TheRock's external-builds/pytorch/build_prod_wheels.py.

The command line is exactly the real parser's at TheRock@89553ce3, our pin (names, choices,
defaults, validate_build_args; docs/upstream-interfaces.md). The flash-attention rule is its: an
explicit --enable-pytorch-flash-attention without building triton is a parser error; with triton not
built and no explicit flag, Linux disables it; otherwise it is ON when an arch starts with an
AOTriton-supported prefix. Versions are formed as its compute_build_version() does (version.txt +
--version-suffix, default +rocm<installed rocm>; dev/dev-bkc release types merge git<8-char
commit> into the local segment); triton's as its setup.py (+git<sha> then the suffixes).
"Building" writes real wheel files (zip, METADATA/WHEEL/RECORD) named like TheRock's, into
<project>/dist and then --output-dir, with an incremental <project>/build dir
that --clean removes. As the real build_triton_linux and do_build_pytorch (~1302-1305), triton
and torch are pip-uninstalled from the Python running the script before their build and the
built wheel pip-installed into it afterwards (that Python is the env's); their requirement
installs (network) and torch's import sanity check are not mirrored. The environment it is
called with is recorded as far as TheRock leaves it alone on Linux (BUILD_TEST,
AOTRITON_INSTALLED_PREFIX, MAX_JOBS) or overrides it (CXXFLAGS, USE_FLASH_ATTENTION).

Test hooks (environment): THEROCK_STANDIN_BLOCK=<project> and THEROCK_STANDIN_BLOCK_FILE=<path>
make the build of that project write <path>.started and wait until <path> exists;
THEROCK_STANDIN_PYTAG overrides the Python tag of the wheels (and, as the build stands for one
by another Python then, skips the pip installs into this one) and THEROCK_STANDIN_ROCM_VERSION
the installed ROCm version (as if built while the env had another one).
"""

import argparse
import base64
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import repo_management

THIS_DIR = Path(__file__).resolve().parent
AOTRITON_SUPPORTED_ARCH_PREFIXES = ("gfx90a", "gfx942", "gfx950", "gfx11", "gfx12")
RELEASE_TYPES = ("ci", "dev", "dev-bkc", "nightly", "nightly-bkc", "prerelease")
# torch 2.13.0's Requires-Dist, in its order (its METADATA from PyPI's wheel).
TORCH_REQUIRES = (
    "filelock",
    "typing-extensions>=4.10.0",
    "setuptools>=77.0.3",
    "sympy>=1.13.3",
    "networkx>=2.5.1",
    "jinja2",
    "fsspec>=0.8.5",
    'optree>=0.13.0; extra == "optree"',
    'opt-einsum>=3.3; extra == "opt-einsum"',
    'pyyaml; extra == "pyyaml"',
)
PROJECT_DIRS = {
    "pytorch": "pytorch",
    "pytorch-audio": "pytorch_audio",
    "pytorch-vision": "pytorch_vision",
    "triton": "triton",
    "apex": "apex",
}


def build_parser():
    def add_common(sp):
        sp.add_argument("--index-url")
        sp.add_argument("--find-links")
        sp.add_argument("--pip-cache-dir", type=Path)
        sp.add_argument("--rocm-sdk-version", default=">1.0")
        sp.add_argument("--pre", action=argparse.BooleanOptionalAction, default=True)
        sp.add_argument("--rocm-extras", default="")

    p = argparse.ArgumentParser("build_prod_wheels.py")
    sub_p = p.add_subparsers(dest="command", required=True)
    add_common(sub_p.add_parser("install-rocm"))
    b = sub_p.add_parser("build")
    add_common(b)
    b.add_argument("--install-rocm", action=argparse.BooleanOptionalAction)
    b.add_argument("--output-dir", type=Path, required=True)
    cache = b.add_mutually_exclusive_group()
    cache.add_argument("--use-ccache", action="store_true")
    cache.add_argument("--use-sccache", action="store_true")
    b.add_argument("--sccache-no-wrap", action="store_true")
    b.add_argument("--root-checkout-dir", type=Path, default=THIS_DIR)
    for name in PROJECT_DIRS:
        b.add_argument(f"--{name}-dir", type=Path)
    b.add_argument("--pytorch-rocm-arch")
    b.add_argument("--pytorch-build-number", default="1")
    for name in ("triton", "pytorch-audio", "pytorch-vision", "apex"):
        b.add_argument(f"--build-{name}", action=argparse.BooleanOptionalAction, default=None)
    b.add_argument(
        "--enable-pytorch-flash-attention", action=argparse.BooleanOptionalAction, default=None
    )
    b.add_argument("--version-suffix")
    b.add_argument("--release-type", choices=RELEASE_TYPES, default="nightly")
    b.add_argument("--clean", action=argparse.BooleanOptionalAction)
    return p


def parse(argv):
    """Parse like HEAD, including the parser-level flash-attention rule."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.command != "build":
        return args
    for name, sub in PROJECT_DIRS.items():
        attr = name.replace("-", "_") + "_dir"
        if getattr(args, attr) is None and (args.root_checkout_dir / sub).exists():
            setattr(args, attr, args.root_checkout_dir / sub)
    # validate_build_args: a --build-X with no (existing) --X-dir is a parser error.
    for name in PROJECT_DIRS:
        attr = name.replace("-", "_")
        source = getattr(args, attr + "_dir")
        if name != "pytorch" and getattr(args, "build_" + attr) is None:
            setattr(args, "build_" + attr, source is not None)
        if name == "pytorch" or not getattr(args, "build_" + attr):
            continue
        if source is None:
            p.error(f"--build-{name} requires --{name}-dir or a matching checkout")
        if not source.is_dir():
            p.error(f"--{name}-dir does not exist: {source}")
    args.triton_built = bool(args.build_triton)
    if args.enable_pytorch_flash_attention and args.pytorch_dir and not args.triton_built:
        p.error("--enable-pytorch-flash-attention on Linux requires Triton")
    return args


def rocm_sdk(*args):
    out = subprocess.run(
        [sys.executable, "-m", "rocm_sdk", *args], check=True, text=True, capture_output=True
    )
    return out.stdout.strip()


def python_tag():
    return os.environ.get("THEROCK_STANDIN_PYTAG") or "cp{}{}".format(*sys.version_info[:2])


def normalized_local(version):
    """Wheel-file form: one '+', local segments joined by '.'."""
    public, _, local = version.partition("+")
    if not local:
        return public
    parts = local.replace("+", ".").replace("-", ".").replace("_", ".")
    return f"{public}+{parts}".lower()


def write_wheel(dist_dir, name, version, files, requires=()):
    dist_dir.mkdir(parents=True, exist_ok=True)
    version = normalized_local(version)
    tag = f"{python_tag()}-{python_tag()}-linux_x86_64"
    info = f"{name}-{version}.dist-info"
    contents = dict(files)
    contents[f"{info}/METADATA"] = "".join(
        [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
        + [f"Requires-Dist: {r}\n" for r in requires]
    )
    contents[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: therock-standin\nRoot-Is-Purelib: false\nTag: {tag}\n"
    )
    record = []
    for path, text in contents.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = "\n".join(record) + "\n"
    wheel = dist_dir / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in contents.items():
            z.writestr(path, text)
    return wheel


def aotriton_files(pytorch_dir):
    """torch/lib/ AOTriton files as PyTorch's cmake/External/aotriton.cmake installs them: the
    runtime (libaotriton_v2.so.X.Y.Z + the unversioned link, stored as a file in a wheel) and
    aotriton.images/ from $AOTRITON_INSTALLED_PREFIX/lib, else the release it pins (here: the
    __AOTRITON_VER / __AOTRITON_CI_COMMIT / __AOTRITON_IMAGE_LIST of the checkout's
    aotriton.cmake, images carrying 0.13b's JSON __signature__)."""
    files = {}
    prefix = os.environ.get("AOTRITON_INSTALLED_PREFIX")
    if prefix:
        lib = Path(prefix) / "lib"
        for item in sorted(lib.rglob("*")):
            rel = item.relative_to(lib).as_posix()
            wanted = rel.startswith("libaotriton_v2.so") or rel.startswith("aotriton.images/")
            if item.is_file() and wanted:
                files[f"torch/lib/{rel}"] = item.read_text(errors="replace")
        return files
    cmake = Path(pytorch_dir) / "cmake" / "External" / "aotriton.cmake"
    if not cmake.is_file():
        return files
    text = cmake.read_text()
    version = re.search(r'set\(__AOTRITON_VER "(\d+)\.(\d+)(?:\.(\d+))?b?"\)', text)
    commit = re.search(r'set\(__AOTRITON_CI_COMMIT "([0-9a-f]{40})"\)', text)
    images = re.search(r"set\(__AOTRITON_IMAGE_LIST(.*?)\)", text, re.S)
    runtime = f"{version[1]}.{version[2]}.{version[3] or 0}"
    files[f"torch/lib/libaotriton_v2.so.{runtime}"] = "stand-in runtime\n"
    files["torch/lib/libaotriton_v2.so"] = "stand-in runtime\n"
    signature = json.dumps({"AOTRITON_GIT_SHA1": commit[1], "TRITON_VERSION": "3.5.0"})
    for pack in re.findall(r'"([^"]+)"', images[1]):
        files[f"torch/lib/aotriton.images/{pack}/__signature__"] = signature + "\n"
    return files


def maybe_block(project):
    if os.environ.get("THEROCK_STANDIN_BLOCK") != project:
        return
    marker = Path(os.environ["THEROCK_STANDIN_BLOCK_FILE"])
    Path(f"{marker}.started").write_text(str(os.getpid()))
    deadline = time.monotonic() + 120
    while not marker.exists():
        if time.monotonic() > deadline:
            repo_management.fail(f"stand-in: {marker} never appeared")
        time.sleep(0.05)


def pip(*args):
    """`python -m pip ARGS` in the Python running this script, as TheRock's run_command. Under
    THEROCK_STANDIN_PYTAG the build stands for one run by another Python, whose installs are
    not this one's: none is made."""
    if os.environ.get("THEROCK_STANDIN_PYTAG"):
        return
    quiet = ["-q", "--disable-pip-version-check"]
    subprocess.run([sys.executable, "-m", "pip", *args, *quiet], check=True)


def installed(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def build_project(args, project, source_dir, name, version, files, requires=(), installs=False):
    source_dir = Path(source_dir)
    if not source_dir.is_dir():
        repo_management.fail(f"{project} dir does not exist: {source_dir}")
    if installs and installed(name):  # pip's own no-op for an absent one costs seconds
        pip("uninstall", name, "-y")
    build = source_dir / "build"
    if args.clean and build.exists():
        print(f"++ Removing {build}")
        shutil.rmtree(build)
    build.mkdir(exist_ok=True)
    counter = build / "build-count"
    count = int(counter.read_text()) + 1 if counter.exists() else 1
    maybe_block(project)
    counter.write_text(str(count))
    dist = source_dir / "dist"
    if dist.exists():
        shutil.rmtree(dist)
    wheel = write_wheel(dist, name, version, files, requires)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(wheel, args.output_dir)
    print(f"++ Copy {wheel} -> {args.output_dir}")
    if installs:
        # The real script pip-installs the wheel with its requirements; those are already in
        # the env there (it pip-installs torch's requirements.txt before building), which the
        # stand-in does not model: --no-deps.
        pip("install", "--no-deps", str(wheel))
    return {"project": project, "wheel": wheel.name, "incremental_count": count}


def compute_build_version(source_dir, version_suffix, release_type):
    """As the real one: version.txt + suffix; dev/dev-bkc merge git<8-char HEAD> into the one
    local segment (2.12.0a0+git1a2b3c4d.rocm7.10.0)."""
    base = (Path(source_dir) / "version.txt").read_text().strip()
    if release_type in ("dev", "dev-bkc"):
        commit = repo_management.git(["rev-parse", "--short=8", "HEAD"], source_dir, True)
        if commit:
            local = [p for p in (f"git{commit}", version_suffix.lstrip("+")) if p]
            return f"{base}+{'.'.join(local)}"
    return base + version_suffix


def do_build(args):
    suffix = args.version_suffix
    hook = os.environ.get("THEROCK_STANDIN_ROCM_VERSION")
    sdk_version = hook or rocm_sdk("version")
    if not suffix:
        suffix = ("+devrocm" if "dev" in sdk_version else "+rocm") + sdk_version.replace("+", "-")
    elif hook:  # the test hook: as if the SDK had changed under the caller's suffix
        suffix = re.sub(r"rocm\d[0-9a-z.]*$", "rocm" + hook, suffix)
    arch = args.pytorch_rocm_arch or rocm_sdk("targets").replace(";", ",")
    if not arch:
        repo_management.fail("No --pytorch-rocm-arch provided and rocm-sdk targets is empty")
    arch = arch.replace(",", ";")
    built = []
    fa = None
    triton_requirement = None
    if args.triton_built:
        env = {}
        env_file = args.triton_dir / "build_env.json"
        if env_file.exists():
            env.update(json.loads(env_file.read_text()))
        head = repo_management.git(["rev-parse", "--short=8", "HEAD"], args.triton_dir, True)
        base = (args.triton_dir / "python" / "version.txt").read_text().strip()
        version = f"{base}+git{head}{env.get('TRITON_WHEEL_VERSION_SUFFIX', '')}{suffix}"
        files = {"triton/__init__.py": f"__version__ = {version!r}\n"}
        built.append(
            build_project(args, "triton", args.triton_dir, "triton", version, files, installs=True)
        )
        triton_requirement = f"triton=={normalized_local(version)}"
    if args.pytorch_dir:
        if args.enable_pytorch_flash_attention is None:
            if not args.triton_built:
                print("Disabling Flash Attention on Linux since triton is not built")
                fa = False
            else:
                fa = any(a.startswith(AOTRITON_SUPPORTED_ARCH_PREFIXES) for a in arch.split(";"))
        else:
            fa = bool(args.enable_pytorch_flash_attention)
        version = compute_build_version(args.pytorch_dir, suffix, args.release_type)
        hip = sdk_version.split("a")[0]
        files = {
            # as torch's own: typing_extensions imported first thing (its only requirement that
            # `import torch` needs), torch/version.py (generated at build time)
            "torch/__init__.py": (
                "import typing_extensions  # noqa: F401\n"
                f"from torch import version as version\n__version__ = {version!r}\n"
            ),
            "torch/version.py": f"__version__ = {version!r}\ncuda = None\nhip = {hip!r}\n",
            "torch/_standin_build.py": (
                f"USE_FLASH_ATTENTION = {fa!r}\nPYTORCH_ROCM_ARCH = {arch!r}\n"
                f"AOTRITON_INSTALLED_PREFIX = {os.environ.get('AOTRITON_INSTALLED_PREFIX')!r}\n"
            ),
        }
        if fa:
            files.update(aotriton_files(args.pytorch_dir))
        (args.pytorch_dir / "torch").mkdir(exist_ok=True)
        (args.pytorch_dir / "torch" / "_rocm_init.py").write_text("def initialize(): pass\n")
        # torch's own Requires-Dist (its setup.py; torch 2.13.0's METADATA as PyPI ships it),
        # then PYTORCH_EXTRA_INSTALL_REQUIREMENTS as the real script sets it (rocm[libraries]
        # of the SDK, and the triton it built in this call)
        requires = [*TORCH_REQUIRES, f"rocm[libraries]=={sdk_version}"]
        requires += [triton_requirement] if triton_requirement else []
        built.append(
            build_project(
                args, "pytorch", args.pytorch_dir, "torch", version, files, requires, installs=True
            )
        )
    for project, name, flag in (
        ("pytorch-audio", "torchaudio", args.build_pytorch_audio),
        ("pytorch-vision", "torchvision", args.build_pytorch_vision),
        ("apex", "apex", args.build_apex),
    ):
        source = getattr(args, project.replace("-", "_") + "_dir")
        if flag or (flag is None and source is not None):
            if source is None:
                repo_management.fail(f"Must specify --{project}-dir if --build-{project}")
            version = compute_build_version(source, suffix, args.release_type)
            files = {f"{name}/__init__.py": f"__version__ = {version!r}\n"}
            built.append(build_project(args, project, source, name, version, files))
    return {"built": built, "flash_attention": fa, "arch": arch}


def main(argv):
    args = parse(argv)
    if args.command == "install-rocm":
        repo_management.record("build_prod_wheels.py", argv, event="install-rocm")
        return
    keep = (
        "AOTRITON_INSTALLED_PREFIX",
        "MAX_JOBS",
        "BUILD_TEST",
        "CXXFLAGS",
        "USE_FLASH_ATTENTION",
    )
    env = {k: os.environ[k] for k in keep if k in os.environ}
    repo_management.record("build_prod_wheels.py", argv, event="start", env=env)
    result = do_build(args)
    repo_management.record("build_prod_wheels.py", argv, event="done", env=env, **result)


if __name__ == "__main__":
    main(sys.argv[1:])
