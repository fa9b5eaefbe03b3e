"""`nox -s build_aotriton`: AOTriton at its pin (with its patch set), built with cmake + ninja
against the env's ROCm, installed into the env's torch - or, with --from-release, the prebuilt
runtime and this arch's image pack (scripts.aotriton_release).

What the env's torch shipped is backed up first (work/backups/aotriton/...) and both versions
are recorded; `--restore` puts the backup back. The install is refused when the runtime and the
image signatures disagree, or when the AOTriton version is not the one torch was built for,
unless --force (upstream user-pitfalls §1.2: that mismatch gives hipErrorInvalidValue and
all-zero attention output).

A content-addressed stamp (pin, patch sha256s, options, arch, toolchain, env identity, what is
installed) makes a rerun with nothing changed run no command at all.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scripts import archs, condaenv, paths, pins, stamps
from scripts.checkouts import ensure_checkout
from scripts.commands import Runner
from scripts.errors import UserError
from scripts.patches import apply_patch_set, patch_set_digest

STAMP_NAME = "aotriton"
STAMP_VERSION = 1
MARKER = "aotriton.rocmfa.json"  # in torch/lib: what we installed there
LIB_RE = re.compile(r"libaotriton_v2\.so\.(\d+)\.(\d+)\.(\d+)")
SIG_RE = re.compile(r"aotriton\s*v?(\d+)\.(\d+)")
GIB = 1 << 30


# --- the env's torch ----------------------------------------------------------------------


def site_packages(prefix: Path) -> Path:
    found = sorted(glob.glob(str(prefix / "lib" / "python3*" / "site-packages")))
    if not found:
        raise UserError(f"no site-packages under {prefix}/lib/python3*/ - is the env set up?")
    return Path(found[-1])


def torch_dir(prefix: Path) -> Path:
    site = site_packages(prefix)
    torch = site / "torch"
    if not (torch / "__init__.py").is_file():
        raise UserError(
            f"no torch in the env ({site}); install it first: nox -s setup_env -- --with-torch, "
            "or nox -s build_pytorch install_wheels"
        )
    return torch


def torch_version(torch: Path) -> str:
    infos = sorted(torch.parent.glob("torch-*.dist-info"))
    if infos:
        return infos[-1].name[len("torch-") : -len(".dist-info")]
    text = (torch / "version.py").read_text() if (torch / "version.py").is_file() else ""
    match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
    return match.group(1) if match else "unknown"


def runtime_version_in(lib_dir: Path) -> str | None:
    """X.Y.Z of the real libaotriton_v2.so.X.Y.Z file in lib_dir (not a symlink)."""
    versions = []
    if lib_dir.is_dir():
        for item in lib_dir.iterdir():
            match = LIB_RE.fullmatch(item.name)
            if match and not item.is_symlink():
                versions.append(tuple(int(g) for g in match.groups()))
    if not versions:
        return None
    return ".".join(map(str, max(versions)))


def config_h_version(include_dir: Path) -> str | None:
    path = include_dir / "aotriton" / "config.h"
    try:
        text = path.read_text()
    except OSError:
        return None
    parts = []
    for name in ("MAJOR", "MINOR", "PATCH"):
        match = re.search(rf"#define\s+AOTRITON_VERSION_{name}\s+(\d+)", text)
        if not match:
            return None
        parts.append(match.group(1))
    return ".".join(parts)


def image_signatures(images: Path) -> dict[str, str]:
    """{'amd-gfx115x': '0.13', ...} from each pack's __signature__."""
    found = {}
    if images.is_dir():
        for sig in sorted(images.glob("*/__signature__")):
            text = sig.read_text(errors="replace")
            match = SIG_RE.search(text)
            found[sig.parent.name] = f"{match.group(1)}.{match.group(2)}" if match else "unknown"
    return found


@dataclass(frozen=True)
class AotritonInstall:
    """An AOTriton install layout: <root>/lib/libaotriton_v2.so.X.Y.Z, lib/aotriton.images/."""

    lib: Path
    runtime: str | None
    images: dict[str, str]
    pyaotriton: tuple[Path, ...]

    @classmethod
    def read(cls, lib: Path, include: Path | None = None) -> AotritonInstall:
        runtime = runtime_version_in(lib) or (config_h_version(include) if include else None)
        py = tuple(sorted(lib.glob("pyaotriton*.so")))
        return cls(lib, runtime, image_signatures(lib / "aotriton.images"), py)

    def describe(self) -> str:
        images = ", ".join(f"{k}={v}" for k, v in self.images.items()) or "none"
        return f"runtime {self.runtime or 'none'}, images {images}"


def major_minor(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    try:
        return archs.aotriton_version_key(version)[:2]
    except UserError:
        return None


def check_compatible(new: AotritonInstall, torch_shipped: AotritonInstall | None, force: bool):
    """Refuse runtime/image disagreement and a version torch was not built for (unless force).
    Returns the warnings that --force overrode."""
    problems = []
    if new.runtime is None:
        raise UserError(f"no libaotriton_v2.so.X.Y.Z in {new.lib}; the build did not install one")
    runtime = major_minor(new.runtime)
    for pack, sig in new.images.items():
        if major_minor(sig) != runtime:
            problems.append(
                f"runtime {new.runtime} but {pack}/__signature__ says {sig} (mismatched runtime "
                "and images give hipErrorInvalidValue / all-zero attention)"
            )
    if torch_shipped is None or torch_shipped.runtime is None:
        problems.append("the env's torch ships no AOTriton runtime (built without it?)")
    elif major_minor(torch_shipped.runtime) != runtime:
        problems.append(
            f"torch was built for AOTriton {torch_shipped.runtime} but this is {new.runtime}"
        )
    if problems and not force:
        raise UserError(f"refusing to install AOTriton: {problems[0]} (--force to install anyway)")
    return problems


# --- options, inputs, stamp ---------------------------------------------------------------


def jobs_limit(requested: int | None) -> int:
    """--jobs, else min(CPUs, free memory / 2 GiB), at least 1."""
    if requested:
        if requested < 1:
            raise UserError(f"--jobs must be at least 1, got {requested}")
        return requested
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    by_memory = max(1, available // (2 * GIB)) if available else cpus
    return max(1, min(cpus or 1, by_memory))


def dist_version(site: Path, name: str) -> str | None:
    infos = sorted(site.glob(f"{name}-*.dist-info"))
    return infos[-1].name[len(name) + 1 : -len(".dist-info")] if infos else None


def toolchain(prefix: Path, site: Path) -> dict[str, Any]:
    """Toolchain identity without running anything: the env's identity (its lock covers
    cmake, ninja, compilers), TheRock's rocm version, and which tools would be used."""
    env_path = os.pathsep.join([str(prefix / "bin"), os.environ.get("PATH", "")])
    return {
        "env_identity": condaenv.env_identity(prefix),
        "rocm": dist_version(site, "rocm"),
        "tools": {t: shutil.which(t, path=env_path) for t in ("cmake", "ninja", "ccache")},
    }


def installed_fingerprint(lib: Path) -> dict[str, Any]:
    """Cheap identity of what is in torch/lib now (names, sizes, mtimes)."""
    entries = {}
    candidates = [*lib.glob("libaotriton_v2.so*"), *lib.glob("pyaotriton*.so"), lib / MARKER]
    for path in sorted(candidates):
        try:
            st = path.lstat()
        except OSError:
            continue
        entries[path.name] = [st.st_size, st.st_mtime_ns]
    for sig in sorted((lib / "aotriton.images").glob("*/__signature__")):
        st = sig.stat()
        entries[f"images/{sig.parent.name}"] = [st.st_size, st.st_mtime_ns]
    return entries


# --- backup, install, restore -------------------------------------------------------------


def backup_root(work: Path) -> Path:
    return work / "backups" / "aotriton"


def _aotriton_files(lib: Path) -> list[Path]:
    files = [*lib.glob("libaotriton_v2.so*"), *lib.glob("pyaotriton*.so")]
    if (lib / "aotriton.images").exists():
        files.append(lib / "aotriton.images")
    return sorted(files)


def _copy(src: Path, dst: Path) -> None:
    if src.is_symlink():
        dst.symlink_to(os.readlink(src))
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def backup_shipped(torch: Path, work: Path, runner: Runner) -> Path | None:
    """Copy what torch shipped (libaotriton_v2.so*, aotriton.images/, pyaotriton) out of the
    way once. Files we installed earlier (the marker says so) are not backed up again."""
    lib = torch / "lib"
    marker = _read_marker(lib)
    if marker is not None:
        return Path(marker["backup"]) if marker.get("backup") else None
    shipped = AotritonInstall.read(lib, torch / "include")
    files = _aotriton_files(lib)
    if not files:
        return None
    name = f"torch-{torch_version(torch)}-aotriton-{shipped.runtime or 'unknown'}"
    target = backup_root(work) / re.sub(r"[^A-Za-z0-9._+-]", "_", name)
    if (target / "backup.json").is_file():
        runner.say(f"backup of torch's AOTriton already at {target}")
        return target
    if runner.dry_run:
        runner.say(f"[dry-run] would back up {len(files)} AOTriton file(s) from {lib} to {target}")
        return target
    staging = target.with_name(target.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    for item in files:
        _copy(item, staging / item.name)
    record = {
        "torch_dir": str(torch),
        "torch_version": torch_version(torch),
        "runtime": shipped.runtime,
        "images": shipped.images,
        "files": [f.name for f in files],
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    stamps.write_text_atomic(staging / "backup.json", json.dumps(record, indent=1) + "\n")
    staging.rename(target)
    runner.say(f"backed up torch's AOTriton ({shipped.describe()}) to {target}")
    return target


def _read_marker(lib: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((lib / MARKER).read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def install_into_torch(
    new: AotritonInstall,
    torch: Path,
    *,
    record: dict[str, Any],
    expected_soname: str | None,
    runner: Runner,
) -> list[str]:
    """Replace torch/lib's AOTriton with new (runtime + symlink, aotriton.images/, pyaotriton).
    Returns the installed names."""
    lib = torch / "lib"
    real = f"libaotriton_v2.so.{new.runtime}"
    if runner.dry_run:
        runner.say(
            f"[dry-run] would install {real}, libaotriton_v2.so, aotriton.images/ into {lib}"
        )
        return [real]
    staging = lib / ".aotriton-staging"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    shutil.copy2(new.lib / real, staging / real)
    (staging / "libaotriton_v2.so").symlink_to(real)
    names = [real, "libaotriton_v2.so"]
    if expected_soname and expected_soname not in names:
        # torch's libtorch_hip links the full-version soname it was built with.
        (staging / expected_soname).symlink_to(real)
        names.append(expected_soname)
    if (new.lib / "aotriton.images").is_dir():
        shutil.copytree(new.lib / "aotriton.images", staging / "aotriton.images", symlinks=True)
        names.append("aotriton.images")
    for py in new.pyaotriton:
        shutil.copy2(py, staging / py.name)
        names.append(py.name)
    for old in _aotriton_files(lib):
        if old.name == "aotriton.images" and "aotriton.images" not in names:
            continue  # runtime-only install keeps the images next to it
        _remove(old)
    for name in names:
        os.replace(staging / name, lib / name)
    shutil.rmtree(staging)
    stamps.write_text_atomic(lib / MARKER, json.dumps(record, indent=1, default=str) + "\n")
    return names


def restore(torch: Path, work: Path, runner: Runner) -> None:
    lib = torch / "lib"
    marker = _read_marker(lib)
    if marker is None:
        raise UserError(f"nothing to restore: {lib} has no AOTriton installed by build_aotriton")
    backup = Path(marker.get("backup") or "")
    if not marker.get("backup") or not (backup / "backup.json").is_file():
        raise UserError(f"no backup recorded for {lib} (expected under {backup_root(work)})")
    info = json.loads((backup / "backup.json").read_text())
    if runner.dry_run:
        runner.say(f"[dry-run] would restore {', '.join(info['files'])} from {backup} to {lib}")
        return
    for old in _aotriton_files(lib):
        _remove(old)
    for name in info["files"]:
        _copy(backup / name, lib / name)
    (lib / MARKER).unlink(missing_ok=True)
    stamps.remove(paths.stamp_path(work, STAMP_NAME))
    runner.say(f"restored torch's AOTriton ({info.get('runtime')}) from {backup} into {lib}")


# --- the session --------------------------------------------------------------------------


@dataclass
class Context:
    opts: argparse.Namespace
    arch: archs.Arch
    arch_how: str
    work: Path
    prefix: Path
    torch: Path
    site: Path
    pin: pins.Pin
    version: str
    pack: str


def _context(opts: argparse.Namespace) -> Context:
    choice = archs.resolve_arch(opts.arch)
    arch = choice.arch
    work = paths.workdir(opts.workdir)
    location = condaenv.locate(opts)
    prefix = condaenv.require_env(location.prefix)
    pin = pins.load_pin("aotriton", workdir=work)
    version = pin.data.get("version")
    if not version:
        raise UserError(f"{pin.source}: AOTriton 'version' is unknown; add version = \"0.13b\"")
    if not arch.aotriton_supported(version):
        limit = next((lim for lim in arch.limits if "AOTriton" in lim), "")
        raise UserError(
            f"{arch.name} ({arch.display_name}) has no AOTriton support in {version}"
            + (f": {limit}" if limit else " (needs AOTriton >= " + str(arch.aotriton_since) + ")")
        )
    pack = arch.aotriton_pack(version)
    if not pack:
        raise UserError(f"{arch.name}: no AOTriton image pack known for {version}")
    torch = torch_dir(prefix)
    return Context(
        opts, arch, choice.how, work, prefix, torch, torch.parent, pin, version, f"amd-{pack}"
    )


def _inputs(ctx: Context) -> dict[str, Any]:
    opts = ctx.opts
    mode = "release" if getattr(opts, "from_release", False) else "source"
    inputs: dict[str, Any] = {
        "stamp_version": STAMP_VERSION,
        "mode": mode,
        "pin": {"url": ctx.pin.url, "commit": ctx.pin.commit, "version": ctx.version},
        "arch": ctx.arch.name,
        "pack": ctx.pack,
        "torch": str(ctx.torch),
        "toolchain": toolchain(ctx.prefix, ctx.site),
    }
    if mode == "source":
        inputs["patches"] = patch_set_digest("aotriton", ctx.pin.commit)
        inputs["options"] = {
            "noimage": bool(getattr(opts, "no_images", False)),
            "timeout_min": _timeout(opts),
        }
    else:
        from scripts import aotriton_release

        inputs["release"] = aotriton_release.release_inputs(ctx.pin, ctx.version)
    return inputs


def _timeout(opts: argparse.Namespace) -> str:
    value = getattr(opts, "timeout_min", None)
    if value is None:
        return "0"
    if value < 0:
        raise UserError(f"--timeout-min must be >= 0 (0 = no limit), got {value}")
    return f"{value:g}"


def build_aotriton(opts: argparse.Namespace) -> None:
    ctx = _context(opts)
    out = sys.stdout
    stamp = paths.stamp_path(ctx.work, STAMP_NAME)
    lib = ctx.torch / "lib"
    if getattr(opts, "restore", False):
        restore(ctx.torch, ctx.work, Runner(dry_run=opts.dry_run))
        return
    print(f"aotriton pin: {ctx.pin.commit} ({ctx.version}) from {ctx.pin.source}", file=out)
    print(f"arch: {ctx.arch.name} ({ctx.arch_how}); image pack {ctx.pack}", file=out)
    inputs = _inputs(ctx)
    recorded = stamps.read(stamp)
    if (
        not opts.force
        and not getattr(opts, "clean", False)
        and stamps.is_current(stamp, inputs)
        and recorded is not None
        and recorded.get("installed") == installed_fingerprint(lib)
    ):
        print(
            f"build_aotriton: up to date ({recorded.get('new', {}).get('runtime')} installed in "
            f"{lib}; stamp {stamp}); nothing run",
            file=out,
        )
        return
    runner = Runner(dry_run=opts.dry_run, base_env=condaenv.activated_environ(ctx.prefix))
    if not opts.dry_run:
        stamps.remove(stamp)
    if inputs["mode"] == "release":
        from scripts import aotriton_release

        new = aotriton_release.fetch_release(ctx, runner)
        how = f"prebuilt release {ctx.version}"
    else:
        new = _build_from_source(ctx, runner)
        how = f"built from {ctx.pin.url} at {ctx.pin.commit[:12]}"
    _install(ctx, new, runner, stamp, inputs, how)


def _build_from_source(ctx: Context, runner: Runner) -> AotritonInstall | None:
    opts = ctx.opts
    src = paths.src_dir(ctx.work, "aotriton")
    build = paths.build_dir(ctx.work, "aotriton")
    install = build / "install"
    if getattr(opts, "clean", False) and build.exists():
        runner.say(f"--clean: removing the build directory {build}")
        if not runner.dry_run:
            shutil.rmtree(build)
    submodules = ctx.pin.data.get("submodules", True)
    ensure_checkout(ctx.pin, src, runner, force=opts.force, submodules=submodules)
    apply_patch_set("aotriton", ctx.pin.commit, src, runner)
    env = runner.base_env
    rocm = condaenv.which_in_env("rocm-sdk", env)
    root = runner.run(
        [rocm, "path", "--root"], capture=True, dry_run_output="$(rocm-sdk path --root)"
    )
    cmake_dir = runner.run(
        [rocm, "path", "--cmake"], capture=True, dry_run_output="$(rocm-sdk path --cmake)"
    )
    jobs = jobs_limit(getattr(opts, "jobs", None))
    pkgconfig = [str(ctx.prefix / "lib" / "pkgconfig"), str(ctx.prefix / "share" / "pkgconfig")]
    if env.get("PKG_CONFIG_PATH"):
        pkgconfig.append(env["PKG_CONFIG_PATH"])
    sets = {"ROCM_PATH": root.stdout.strip(), "PKG_CONFIG_PATH": os.pathsep.join(pkgconfig)}
    cmake = str(condaenv.which_in_env("cmake", env))
    ninja = str(condaenv.which_in_env("ninja", env))
    python = ctx.prefix / "bin" / "python"
    args = [
        cmake,
        "-G",
        "Ninja",
        "-S",
        str(src),
        "-B",
        str(build),
        f"-DCMAKE_MAKE_PROGRAM={ninja}",
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_INSTALL_PREFIX={install}",
        f"-DCMAKE_PREFIX_PATH={cmake_dir.stdout.strip()}",
        f"-DAOTRITON_TARGET_ARCH={ctx.arch.name}",
        f"-DAOTRITON_GPU_BUILD_TIMEOUT={_timeout(opts)}",
        f"-DAOTRITON_NOIMAGE_MODE={'ON' if getattr(opts, 'no_images', False) else 'OFF'}",
        "-DAOTRITON_NO_PYTHON=OFF",
        # pyaotriton must not link whichever torch happens to be installed (upstream §8.10).
        "-DAOTRITON_USE_TORCH=OFF",
        "-DHIP_PLATFORM=amd",
    ]
    if python.exists():
        args.append(f"-DPython3_EXECUTABLE={python}")
    ccache = shutil.which("ccache", path=env.get("PATH", ""))
    if ccache:
        args += [f"-DCMAKE_C_COMPILER_LAUNCHER={ccache}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={ccache}"]
    # A changed configuration must not meet a stale CMakeCache (user-pitfalls §1.7).
    configured = build / ".rocmfa-configure.json"
    wanted = stamps.digest({"args": args, "sets": sets})
    previous = stamps.read(configured)
    if previous and previous.get("inputs_digest") != wanted and (build / "CMakeCache.txt").exists():
        runner.say("configuration changed: removing the stale CMakeCache.txt")
        if not runner.dry_run:
            (build / "CMakeCache.txt").unlink()
    if not runner.dry_run and install.exists():
        shutil.rmtree(install)  # ours; `ninja install` repopulates it
    runner.run(args, cwd=src, sets=sets)
    if not runner.dry_run:
        stamps.write(configured, {"args": args, "sets": sets})
    # AOTriton README: `ninja install` runs the whole build; do not run `ninja` separately.
    runner.run([ninja, "-C", str(build), f"-j{jobs}", "install"], cwd=src, sets=sets)
    if runner.dry_run:
        return None
    return AotritonInstall.read(install / "lib", install / "include")


def _install(
    ctx: Context,
    new: AotritonInstall | None,
    runner: Runner,
    stamp: Path,
    inputs: dict[str, Any],
    how: str,
) -> None:
    lib = ctx.torch / "lib"
    marker = _read_marker(lib)
    if marker is not None and marker.get("backup"):
        info = _backup_info(Path(marker["backup"]))
        shipped = (
            AotritonInstall(lib, info.get("runtime"), info.get("images", {}), ()) if info else None
        )
    else:
        shipped = AotritonInstall.read(lib, ctx.torch / "include")
    if new is None:  # dry run
        backup_shipped(ctx.torch, ctx.work, runner)
        runner.say(f"[dry-run] would check versions, then install into {lib} and write {stamp}")
        return
    no_images = inputs["mode"] == "source" and getattr(ctx.opts, "no_images", False)
    if not no_images and ctx.pack not in new.images:
        raise UserError(f"no {ctx.pack} images under {new.lib}; nothing installed")
    # --no-images: the runtime joins the images already in torch/lib; check it against those.
    effective = (
        new if new.images else replace(new, images=image_signatures(lib / "aotriton.images"))
    )
    overridden = check_compatible(effective, shipped, ctx.opts.force)
    for problem in overridden:
        runner.say(f"WARNING (--force): {problem}")
    backup = backup_shipped(ctx.torch, ctx.work, runner)
    expected = None
    if shipped is not None and shipped.runtime and shipped.runtime != new.runtime:
        expected = f"libaotriton_v2.so.{shipped.runtime}"
    record = {
        "installed_by": "nox -s build_aotriton",
        "how": how,
        "pin": {"commit": ctx.pin.commit, "version": ctx.version, "source": ctx.pin.source},
        "arch": ctx.arch.name,
        "torch_version": torch_version(ctx.torch),
        "shipped": {"runtime": shipped.runtime, "images": shipped.images} if shipped else None,
        "new": {"runtime": new.runtime, "images": effective.images},
        "backup": str(backup) if backup else None,
        "forced": overridden,
    }
    names = install_into_torch(
        new, ctx.torch, record=record, expected_soname=expected, runner=runner
    )
    was = shipped.describe() if shipped else "nothing"
    runner.say(f"installed into {lib}: {', '.join(names)}")
    runner.say(f"torch shipped: {was}; now: {effective.describe()} ({how})")
    if backup:
        runner.say(
            f"backup of what torch shipped: {backup} (undo: nox -s build_aotriton -- --restore)"
        )
    stamps.write(
        stamp,
        inputs,
        installed=installed_fingerprint(lib),
        shipped=record["shipped"],
        new=record["new"],
        backup=record["backup"],
    )


def _backup_info(backup: Path) -> dict[str, Any] | None:
    try:
        return json.loads((backup / "backup.json").read_text())
    except (OSError, ValueError):
        return None
