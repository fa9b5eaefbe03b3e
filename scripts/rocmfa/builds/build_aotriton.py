"""`nox -s build_aotriton` (docs/aotriton.md): AOTriton at its pin, the release pack or a source
build per arch (choose_path), into its install prefix (build_pytorch's AOTRITON_INSTALLED_PREFIX),
then into the env's torch when there is one, as torch's own wheel repacked and installed by pip
(RECORD stays true; a run killed while pip replaces torch is finished by the next)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wheel.wheelfile import WheelFile

from rocmfa.builds import compile_cache, kernel_build
from rocmfa.env import archs, session_env
from rocmfa.plumbing import options, stamps
from rocmfa.plumbing.commands import Runner, choose_jobs
from rocmfa.plumbing.errors import UserError, load_toml
from rocmfa.sources import checkouts, pins, update_pins
from rocmfa.sources.checkouts import apply_patch_set, ensure_checkout, git, patch_set_digest

STAMP_NAME = "aotriton"
AOTRITON_GIB_PER_JOB = 2.0  # peak compiler memory per AOTriton job (HIP host/device C++)
MARKER = "aotriton.rocmfa.json"  # in torch/lib of our repacked wheel: what we installed
WHEELS = "torch-wheels"  # under the work dir
PIP_WRITES = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}  # not in the wheel
LIB_RE = re.compile(r"libaotriton_v2\.so\.(\d+)\.(\d+)\.(\d+)")
REINSTALL = "reinstall torch with pip (nox -s install_wheels), then rerun"


def site_packages(prefix: Path) -> Path:
    found = sorted((prefix / "lib").glob("python3*/site-packages"))
    if not found:
        raise UserError(f"no site-packages under {prefix}/lib/python3*/ - is the env set up?")
    return found[-1]


def find_torch(prefix: Path, required: bool = False) -> Path | None:
    """The env's torch; None (required: a UserError) if there is none."""
    torch = site_packages(prefix) / "torch"
    if required and not (torch / "__init__.py").is_file():
        raise UserError(
            f"no torch in the env ({torch.parent}); install it first: nox -s setup_env -- "
            "--with-torch, or nox -s build_pytorch install_wheels"
        )
    return torch if (torch / "__init__.py").is_file() else None


def dist_version(site: Path, name: str) -> str | None:
    infos = sorted(site.glob(f"{name}-*.dist-info"))
    return infos[-1].name[len(name) + 1 : -len(".dist-info")] if infos else None


def signature_of(text: str) -> str:
    """'X.Y' for a text signature, 'git-<sha1[:12]>' for 0.13b's JSON one, or 'unknown'."""
    if sha := re.search(r'"AOTRITON_GIT_SHA1"\s*:\s*"(\w+)"', text):
        return "git-" + sha[1][:12]
    match = re.search(r"aotriton\s*v?(\d+)\.(\d+)", text)
    return f"{match[1]}.{match[2]}" if match else "unknown"


def image_signatures(images: Path) -> dict[str, str]:  # {'amd-gfx115x': '0.13', ...}
    signatures = sorted(images.glob("*/__signature__"))  # none when images is no folder
    return {sig.parent.name: signature_of(sig.read_text(errors="replace")) for sig in signatures}


@dataclass(frozen=True)
class AotritonInstall:
    """An AOTriton install layout: <root>/lib/libaotriton_v2.so.X.Y.Z, lib/aotriton.images/."""

    lib: Path
    runtime: str | None
    images: dict[str, str]
    pyaotriton: tuple[Path, ...]

    @classmethod
    def read(cls, lib: Path, include: Path | None = None) -> AotritonInstall:
        found = [p for p in lib.iterdir() if not p.is_symlink()] if lib.is_dir() else []
        versions = [tuple(map(int, m.groups())) for p in found if (m := LIB_RE.fullmatch(p.name))]
        runtime = ".".join(map(str, max(versions))) if versions else None
        config = include / "aotriton" / "config.h" if include else None  # else its headers say
        text = config.read_text() if config and config.is_file() else ""
        parts = re.findall(r"#define\s+AOTRITON_VERSION_(MAJOR|MINOR|PATCH)\s+(\d+)", text)
        if runtime is None and [p[0] for p in parts] == ["MAJOR", "MINOR", "PATCH"]:
            runtime = ".".join(p[1] for p in parts)
        py = tuple(sorted(lib.glob("pyaotriton*.so")))
        return cls(lib, runtime, image_signatures(lib / "aotriton.images"), py)

    def describe(self) -> str:
        images = ", ".join(f"{k}={v}" for k, v in self.images.items()) or "none"
        return f"runtime {self.runtime or 'none'}, images {images}"


def major_minor(version: str | None) -> tuple[int, ...] | None:
    try:
        return archs.aotriton_version_key(version)[:2] if version else None
    except UserError:
        return None


def check_compatible(new: AotritonInstall, shipped: AotritonInstall, force: bool):
    """Refuse runtime/image disagreement or a version torch was not built for; force: say them."""
    runtime = major_minor(new.runtime)
    problems = []
    built_from = sorted(sig for sig in new.images.values() if sig.startswith("git-"))
    if len(set(built_from)) > 1:
        commits = ", ".join(built_from)
        problems.append(f"the image packs come from different AOTriton commits ({commits})")
    for pack, sig in new.images.items():  # a JSON signature names a commit, not a version
        if not sig.startswith("git-") and major_minor(sig) != runtime:
            problems.append(
                f"runtime {new.runtime} but {pack}/__signature__ says {sig} (mismatched runtime "
                "and images give hipErrorInvalidValue / all-zero attention)"
            )
    if shipped.runtime is None:
        problems.append("the env's torch ships no AOTriton runtime (built without it?)")
    elif major_minor(shipped.runtime) != runtime:
        problems.append(f"torch was built for AOTriton {shipped.runtime} but this is {new.runtime}")
    if problems and not force:
        raise UserError(f"refusing to install AOTriton: {problems[0]} (--force to install anyway)")
    return problems


def installed_fingerprint(lib: Path) -> str | None:
    """The sha256 of the RECORD of lib's torch (pip rewrites it on every install)."""
    record = session_env.torch_record(lib.parent.parent)
    return stamps.file_sha256(record) if record is not None and record.is_file() else None


def read_marker(torch: Path) -> dict[str, Any] | None:
    """Our marker, when torch's RECORD lists it (one a killed pip run left is not trusted)."""
    record = session_env.torch_record(torch.parent)
    rel = f"{torch.name}/lib/{MARKER}"
    rows = session_env.record_rows(record) if record is not None and record.is_file() else []
    return stamps.read(torch / "lib" / MARKER) if any(row[0] == rel for row in rows) else None


def wheel_in(folder: Path) -> Path | None:
    return min(folder.glob("*.whl"), default=None)


def original_wheel(torch: Path, work: Path, runner: Runner) -> Path:
    """The wheel our marker names, else (once per RECORD) one rebuilt from torch's files."""
    marker = read_marker(torch)
    if marker is not None:
        wheel = Path(str(marker.get("original")))
        if not wheel.is_file():
            gone = f"{wheel}, torch's own wheel (the env's torch was repacked from it), is gone; "
            raise UserError(gone + REINSTALL)
        return wheel
    site = torch.parent
    if why := session_env.torch_incomplete(site):
        raise UserError(f"the env's torch is incomplete ({why}); {REINSTALL}")
    out = work / WHEELS / f"original-{installed_fingerprint(torch / 'lib')[:16]}"
    if wheel_in(out) is None:
        said = f"rebuild torch's own wheel from {site} and its RECORD in {out}"
        runner.apply(keep_original, site, out, say=said)
    return wheel_in(out) or out / "torch.whl"


def keep_original(site: Path, out: Path) -> None:
    """The installed files RECORD lists, each checked against it, as a wheel (dist-info last)."""
    info = session_env.torch_record(site).parent
    tag = re.search(r"^Tag: *(\S+)", (info / "WHEEL").read_text(), re.M)  # torch has one
    name = f"{info.name.removesuffix('.dist-info')}-{tag[1] if tag else 'py3-none-any'}.whl"
    rows = sorted(session_env.record_rows(info / "RECORD"), key=lambda row: ".dist-info/" in row[0])
    with checkouts.into_folder(out) as partial, WheelFile(partial / name, "w") as whl:
        for rel, digest, _size in rows:
            parts = Path(rel).parts  # what pip makes at install is not the wheel's
            made = parts[0] == info.name and parts[-1] in PIP_WRITES
            if made or ".." in parts or "__pycache__" in parts:
                continue
            data = (site / rel).read_bytes()
            sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if "sha256=" + sha != digest:
                raise UserError(
                    f"{site / rel} is not the file torch's RECORD lists (changed since pip "
                    f"installed it); {REINSTALL}"
                )
            whl.writestr(zipfile.ZipInfo.from_file(site / rel, rel), data, zipfile.ZIP_DEFLATED)


def repack(
    original: Path, new: AotritonInstall, marker: dict, linked: str | None, work: Path
) -> Path:
    """original with new's runtime, images (none: torch's stay), pyaotriton and our marker."""
    real = f"libaotriton_v2.so.{new.runtime}"
    # a wheel holds no links: the runtime torch's libtorch_hip was linked with is a copy too
    aliases = sorted({"libaotriton_v2.so", f"libaotriton_v2.so.{linked or new.runtime}"} - {real})
    images = new.lib / "aotriton.images"
    sources = [new.lib / real, *new.pyaotriton]
    sources += sorted(p for p in images.rglob("*") if p.is_file())  # none without images
    files = {str(p.relative_to(new.lib)): stamps.file_sha256(p) for p in sources}
    key = stamps.digest([str(original), files, aliases, marker])
    out = work / WHEELS / f"aotriton-{key[:16]}"
    if (done := wheel_in(out)) is not None:
        return done
    adds = {f"torch/lib/{name}": new.lib / real for name in aliases}
    adds |= {f"torch/lib/{rel}": new.lib / rel for rel in files}
    gone = ("torch/lib/libaotriton_v2.so", "torch/lib/pyaotriton", f"torch/lib/{MARKER}")
    gone += ("torch/lib/aotriton.images/",) if images.is_dir() else ()
    text = json.dumps({**marker, "wheel": out.name}, indent=1, default=str) + "\n"
    with (
        checkouts.into_folder(out) as partial,
        WheelFile(original) as old,  # its reads are checked against its RECORD
        WheelFile(partial / original.name, "w") as whl,
    ):
        for rel, path in adds.items():
            whl.write(path, rel)
        whl.writestr(f"torch/lib/{MARKER}", text)
        meta = old.dist_info_path + "/"  # last in the wheel, as pip writes it last
        for info in sorted(old.infolist(), key=lambda i: i.filename.startswith(meta)):
            if info.filename != old.record_path and not info.filename.startswith(gone):
                kept = zipfile.ZipInfo(info.filename, info.date_time)
                kept.external_attr = info.external_attr
                whl.writestr(kept, old.read(info), zipfile.ZIP_DEFLATED)
    return out / original.name


def pip_install(prefix: Path, wheel: Path, runner: Runner) -> None:
    """pip replaces torch with wheel; until done, a record names it (finish_interrupted)."""
    runner.apply(write_pending, prefix, wheel)
    pip = [prefix / "bin" / "python", "-m", "pip", "install", "--no-deps", "--force-reinstall"]
    runner.run([*pip, wheel])
    runner.apply(session_env.pip_pending_path(prefix).unlink)


def write_pending(prefix: Path, wheel: Path) -> None:
    site = site_packages(prefix)
    pending = session_env.pip_pending_path(prefix)
    replaced = pending.with_name("pip-replaced")
    record = session_env.torch_record(site)
    if record is not None and session_env.torch_incomplete(site) is None:
        shutil.rmtree(replaced, ignore_errors=True)
        shutil.copytree(record.parent, replaced / record.parent.name)
    stamps.write_text_atomic(pending, json.dumps({"wheel": str(wheel)}) + "\n")


def finish_interrupted(prefix: Path, runner: Runner) -> None:
    """Finish a killed pip install of a torch wheel; a whole torch is kept as it is."""
    path = session_env.pip_pending_path(prefix)
    pending = stamps.read(path)
    if pending is None:
        return
    site = site_packages(prefix)
    if (why := session_env.torch_incomplete(site)) is None:
        return runner.apply(path.unlink, missing_ok=True)
    wheel = Path(str(pending.get("wheel")))
    if not wheel.is_file():
        why = f"the env's torch is incomplete ({why}) and {wheel}, whose install was killed"
        raise UserError(f"{why}, is gone; {REINSTALL}")
    runner.say(f"the env's torch is incomplete ({why}): finishing the killed install of {wheel}")
    record = session_env.torch_record(site)
    if record is None or not record.is_file():
        # pip was killed after moving the old torch's dist-info away: put it back, so that
        # pip removes what the old RECORD lists before it installs the wheel again
        for info in path.with_name("pip-replaced").glob("torch-*.dist-info"):
            runner.apply(shutil.copytree, info, site / info.name, dirs_exist_ok=True)
    pip_install(prefix, wheel, runner)


def install_into_torch(
    new: AotritonInstall, torch: Path, marker: dict, linked: str | None, work: Path, runner
) -> tuple[Path, Path]:
    """new into torch by pip (linked: the runtime torch was built for): (its own wheel, the new)."""
    original = original_wheel(torch, work, runner)
    marker = {**marker, "original": str(original)}
    wheel = repack(original, new, marker, linked, work)
    if (read_marker(torch) or {}).get("wheel") == wheel.parent.name:
        runner.say(f"the env's torch is already {wheel}")
    else:
        pip_install(torch.parents[3], wheel, runner)  # <prefix>/lib/python3.X/site-packages/torch
    return original, wheel


def restore_torch(torch: Path, work: Path, runner: Runner) -> None:
    """Reinstall the wheel torch was repacked from (nothing when torch is not our repack)."""
    if read_marker(torch) is None:
        return runner.say(f"nothing to restore: {torch / 'lib'} holds torch's own AOTriton")
    pip_install(torch.parents[3], original_wheel(torch, work, runner), runner)
    runner.say(f"restored torch's own AOTriton ({AotritonInstall.read(torch / 'lib').runtime})")


def rocm_version(site: Path, parts: int | None = None) -> str:
    """The env's ROCm (its first parts); before setup_env (a dry run), pins/rocm.toml's."""
    found = dist_version(site, "rocm")
    if found is None:
        from rocmfa.env import rocm_sdk  # only before setup_env made the env

        found = rocm_sdk.load_pin().version
    return ".".join(found.split(".")[:parts])


def toolchain(prefix: Path, site: Path) -> dict[str, Any]:
    """The env (its lock covers cmake, ninja, compilers), its ROCm and the tools it would use."""
    env_path = os.pathsep.join([str(prefix / "bin"), os.environ.get("PATH", "")])
    tools = {t: shutil.which(t, path=env_path) for t in ("cmake", "ninja", "ccache")}
    identity = session_env.env_identity(prefix)
    return {"env_identity": identity, "rocm": rocm_version(site), "tools": tools}


@dataclass(frozen=True)
class AotritonPath:
    pack: str  # "amd-gfx115x"
    source: bool
    why: str
    cost: str
    patches: tuple[str, ...] = ()  # what a source build applies for the arch


def source_cost(commit: str, arch: str, jobs: int, fork: bool = True) -> str:
    """Measured jobs x seconds a job (data/aotriton_matrix.toml [build_cost])."""
    table = load_toml(archs.MATRIX_FILE, "AOTriton matrix data").get("build_cost", {})
    table = table.get(commit, {})
    fork_part = "AOTriton's Triton fork (its own LLVM download) and " if fork else ""
    rest = f"plus {fork_part}the C++ runtime"
    row = table.get(arch)
    each = [f"{a}: {r['jobs']:,} jobs x {r['seconds_per_job']:g} s a job" for a, r in table.items()]
    if row is None:
        known = f" ({'; '.join(each)})" if table else ""
        return f"kernel job count for {arch} not measured at {commit[:12]}{known}; {rest}"
    cpu = row["jobs"] * row["seconds_per_job"]
    wall = f"{cpu / jobs / 3600:.1f} h" if cpu / jobs >= 5400 else f"{cpu / jobs / 60:.0f} min"
    return (
        f"{row['jobs']:,} kernel compile jobs x {row['seconds_per_job']:g} s a job "
        f"({row['source']}) = {cpu / 3600:.1f} CPU-hours, about {wall} on {jobs} build jobs; "
        f"{rest}"
    )


def release_gap(pin: pins.Pin, version: str, pack: str, rocm: str) -> str:
    """'' when the pinned release has this pack and runtime from the pinned commit; else why."""
    from rocmfa.builds import aotriton_release  # only the release pack's path needs it

    releases = archs.load_matrix()["releases"]
    tag = next((r["commit"] for r in releases if r["version"] == version), None)
    if tag != pin.commit:
        known = tag[:12] if tag else "no such release in scripts/rocmfa/data/aotriton_matrix.toml"
        why = f"the pin {pin.commit[:12]} is not the commit the {version} release packs were built"
        return f"{why} from ({known})"
    try:
        info = aotriton_release.release_info(pin, version)
    except UserError as e:
        return f"no release pack to take ({e})"
    sums = [
        ("image pack " + pack, info.images.get(pack.removeprefix("amd-"))),
        (f"runtime for ROCm {rocm}", (info.runtime.get(rocm) or ("", None))[1]),
    ]
    for what, sha in sums:
        if not sha:
            return f"the {version} release has no {what} ({info.source})"
        if set(sha) == {"0"}:
            return f"the {version} release lists a placeholder sum for its {what} (unpublished)"
    return ""


def choose_path(
    arch: archs.Arch, work: Path, site: Path, asked: str | None = None, jobs=1, fork=True
) -> AotritonPath:
    """The release pack unless ours changes the arch's kernels (patch, tuning database, patched
    arch), an option (asked) wants a source build, or the release has nothing to take."""
    pin, version, pack = _upstream_pin(arch, work)
    rocm = rocm_version(site, 2)
    found = checkouts.patch_set_for("aotriton", pin.commit, arch=arch.name)
    names = tuple(p.name for p in found.patches) if found else ()
    release_cost = f"2 downloads, sha256-checked and cached: the runtime for ROCm {rocm} and the "
    release_cost += f"{pack} image pack (sizes as the server reports them when each starts); "
    release_cost += "no kernel compiles"
    tuned = checkouts.find_tuning(pin.commit, arch.name)
    if asked == "--from-release":
        return AotritonPath(pack, False, "--from-release", release_cost)
    if asked:
        why = f"{asked} asks for one"
    elif arch.aotriton_patched_pack(version):
        why = f"upstream {version} has no {arch.name} kernels and no release has its images; "
        why += f"our patch set adds them ({', '.join(names)})"
    elif names:
        why = f"our patch set changes {arch.name}'s build ({', '.join(names)})"
    elif tuned:
        why = f"our tuning database changes {arch.name}'s kernels ({tuned.directory})"
    else:
        why = release_gap(pin, version, pack, rocm)
    if why:
        return AotritonPath(pack, True, why, source_cost(pin.commit, arch.name, jobs, fork), names)
    why = f"nothing of ours changes {arch.name}'s kernels (no patch for it, no tuning database), "
    why += f"and the pinned {version} release ships {pack} built from this commit "
    return AotritonPath(pack, False, why + "(--from-source builds it anyway)", release_cost)


@dataclass(frozen=True)
class Context(session_env.OnSession):
    """The session env, its settings (tune_aotriton's as build_aotriton's) and which AOTriton."""

    session: session_env.SessionEnv
    opts: options.BuildAotritonOptions  # --triton resolved (kernel_triton)
    torch: Path | None  # None: no torch yet, the build stays in its install prefix
    site: Path  # the env's site-packages
    pin: pins.Pin
    version: str
    pack: str
    tuning: bool = False  # tune_aotriton's builds: the patch set's tuning patches too


def make_context(opts: options.BuildAotritonOptions, tuning: bool = False) -> Context:
    """The session env plus which AOTriton: its pin, version and pack (--restore: a torch)."""
    session = session_env.open_env(opts)
    pin, version, pack = _upstream_pin(session.arch, session.work, opts.from_release)
    site = session.prefix / "lib/python3.X/site-packages"  # a plan before setup_env made it
    torch = site / "torch" if opts.restore else None
    if session.ready:  # a torch install killed midway is finished first
        finish_interrupted(session.prefix, session.runner)
        site = site_packages(session.prefix)
        torch = find_torch(session.prefix, required=opts.restore)
    opts = replace(opts, triton=opts.kernel_triton)
    return Context(session, opts, torch, site, pin, version, pack, tuning)


def _upstream_pin(arch: archs.Arch, work: Path, from_release=False) -> tuple[pins.Pin, str, str]:
    """(pin, version, image pack) for build_aotriton: the ones refused say why."""
    pin = pins.load_pin("aotriton", workdir=work)
    version = pin.data.get("version")
    if not version:
        raise UserError(f"{pin.source}: AOTriton 'version' is unknown; add version = \"0.13b\"")
    patched = arch.aotriton_patched_pack(version)
    if patched:  # upstream has no kernels for it; our patch set adds them (arches.toml)
        if from_release:
            raise UserError(
                f"{arch.name}: AOTriton {version} releases have no {arch.name} images (upstream "
                "has no kernels for it; our patch set adds them); drop --from-release to build "
                "from source"
            )
        if checkouts.patch_set_for("aotriton", pin.commit) is None:
            raise UserError(
                f"{arch.name}: no AOTriton kernels upstream and no patch set for the pinned commit "
                f"{pin.commit[:12]} (patches/aotriton/<commit>/ adds {arch.name} to {version}); "
                "port it with: nox -s update_pins -- --port-patches"
            )
        return pin, version, f"amd-{patched}"
    if not arch.aotriton_supported(version):
        limit = next((f": {lim}" for lim in arch.limits if "AOTriton" in lim), "")
        since = f" (needs AOTriton >= {arch.aotriton_since})" if arch.aotriton_since else ""
        no = f"{arch.name} ({arch.display_name}) has no AOTriton support in {version}"
        raise UserError(no + limit + since)
    pack = arch.aotriton_pack(version)
    if not pack:
        raise UserError(f"{arch.name}: no AOTriton image pack known for {version}")
    return pin, version, f"amd-{pack}"


def stamp_inputs(ctx: Context, from_release: bool) -> dict[str, Any]:
    """Everything the install depends on (a rerun with the same is a no-op)."""
    inputs = {
        "stamp_version": 1,
        "mode": "release" if from_release else "source",
        "pin": {"url": ctx.pin.url, "commit": ctx.pin.commit, "version": ctx.version},
        "arch": ctx.arch.name,
        "pack": ctx.pack,
        "torch": ctx.torch and str(ctx.torch),
        "toolchain": toolchain(ctx.prefix, ctx.site),
    }
    if from_release:
        from rocmfa.builds import aotriton_release  # only the release pack's path needs it

        info = aotriton_release.release_info(ctx.pin, ctx.version)
        inputs["release"] = {
            "version": info.version,
            "base_url": info.base_url,
            "runtime": dict(info.runtime),  # JSON writes its tuples as lists
            "images": dict(info.images),
            "hostarch": platform.machine(),
        }
        return inputs
    tuned = checkouts.find_tuning(ctx.pin.commit, ctx.arch.name)
    tuning = ctx.tuning or bool(tuned)
    opts = ctx.opts
    digest = patch_set_digest("aotriton", ctx.pin.commit, arch=ctx.arch.name, tuning=tuning)
    flags = {
        "noimage": opts.no_images,
        "timeout_min": f"{opts.timeout_min or 0:g}",
        "pyaotriton": opts.with_pyaotriton,
    }
    if opts.triton != "fork":  # AOTRITON_USE_LOCAL_TRITON_WHEEL: other kernels
        flags["triton"] = kernel_build.pypi_triton(ctx.pin.commit)
    return {
        **inputs,
        "aiter": ctx.pin.data.get("aiter"),
        "patches": digest,
        "tuning_db": tuned.digest() if tuned else None,
        "options": flags,
    }


def install_prefix(ctx: Context) -> Path:  # build_pytorch's AOTRITON_INSTALLED_PREFIX
    return options.build_dir(ctx.work, "aotriton") / "install"


def check_pairing(arch: archs.Arch, pin: pins.Pin, version: str, torch, runner, work, force):
    """The pin set, then arch x AOTriton x torch (its version or None), against `nox -s matrix`:
    the lines to say (--force: warnings)."""
    lines = pins.check_pin_set(pin, version, force=force, runner=runner, workdir=work)
    return lines + archs.check_combination(arch, version, torch_version=torch, force=force)


def up_to_date(ctx: Context, stamp: Path, inputs: dict[str, Any]) -> bool:
    """The stamp is current and what it installed is still there."""
    lib = ctx.torch and ctx.torch / "lib"
    built_in = install_prefix(ctx)
    recorded = stamps.read(stamp)
    stale = not recorded or recorded.get("inputs_digest") != stamps.digest(inputs)
    gone = lib is None and AotritonInstall.read(built_in / "lib").runtime is None
    if stale or gone or recorded.get("installed") != (lib and installed_fingerprint(lib)):
        return False
    where = f"installed in {lib}" if lib else f"built in {built_in}; no torch in the env"
    runtime = recorded.get("new", {}).get("runtime")
    ctx.runner.say(f"build_aotriton: up to date ({runtime} {where}; stamp {stamp}); nothing run")
    return True


def build_aotriton(opts: options.BuildAotritonOptions) -> None:
    source_only = ("from_source", "no_images", "workers", "triton", "with_pyaotriton")
    given = ["--" + f.replace("_", "-") for f in source_only if getattr(opts, f)]
    if opts.from_release and given:
        raise UserError(
            f"--from-release installs the prebuilt pack, {given[0]} needs a source build: drop one"
        )
    asked = "--from-release" if opts.from_release else next(iter(given), None)
    ctx = make_context(opts)
    runner = ctx.runner
    stamp = options.stamp_path(ctx.work, STAMP_NAME)
    if opts.restore:  # pip reinstalls the wheel torch was repacked from; no stale stamp stays
        runner.apply(stamp.unlink, missing_ok=True)
        return restore_torch(ctx.torch, ctx.work, runner)
    if ctx.torch is None and opts.no_images and ctx.session.ready:
        raise UserError(
            "--no-images builds the runtime only and keeps the images of the env's torch, but the "
            "env has no torch: drop --no-images (build_pytorch needs the images too)"
        )
    update_pins.resolve_for_build("pytorch", runner, workdir=ctx.work, force=opts.force)
    torch = ctx.torch and dist_version(ctx.site, "torch")
    for line in check_pairing(ctx.arch, ctx.pin, ctx.version, torch, runner, ctx.work, opts.force):
        runner.say(line)
    runner.say(f"aotriton pin: {ctx.pin.commit} ({ctx.version}) from {ctx.pin.source}")
    runner.say(f"arch: {ctx.arch.name} ({ctx.session.choice.how}); image pack {ctx.pack}")
    jobs = choose_jobs(opts.jobs, AOTRITON_GIB_PER_JOB)[0]
    path = choose_path(ctx.arch, ctx.work, ctx.site, asked, jobs, ctx.opts.triton == "fork")
    kind = "source build" if path.source else f"release pack {path.pack}"
    print(f"path: {kind}: {path.why}\ncost: {path.cost}")
    inputs = stamp_inputs(ctx, from_release=not path.source)
    if not opts.force and not opts.clean and up_to_date(ctx, stamp, inputs):
        return
    runner.apply(stamp.unlink, missing_ok=True)
    if not path.source:
        from rocmfa.builds import aotriton_release  # only the release pack's path needs it

        prefix = install_prefix(ctx)
        aotriton_release.fetch_release(ctx, runner, prefix, rocm_version(ctx.site, 2))
        new = runner.apply(AotritonInstall.read, prefix / "lib", prefix / "include")
        how = f"prebuilt release {ctx.version}"
    else:
        tuned = checkouts.find_tuning(ctx.pin.commit, ctx.arch.name)
        new = build_from_source(ctx, tuning=tuned)
        how = f"built from {ctx.pin.url} at {ctx.pin.commit[:12]}"
        how += f" with the tuning database {tuned.directory.name}" if tuned else ""
    finish(ctx, new, inputs, how)


def check_out(ctx: Context) -> Path:
    """The pinned tree (the Triton fork only when the kernels use it) with the patch set."""
    src = options.src_dir(ctx.work, "aotriton")
    fork = ctx.opts.triton == "fork"
    pinned = tuple(p for p in ctx.pin.data.get("submodules", ()) if fork or p != kernel_build.FORK)
    ensure_checkout(ctx.pin, src, ctx.runner, force=ctx.opts.discard_local_edits, submodules=pinned)
    tuned = ctx.tuning or checkouts.find_tuning(ctx.pin.commit, ctx.arch.name) is not None
    apply_patch_set("aotriton", ctx.pin.commit, src, ctx.runner, arch=ctx.arch.name, tuning=tuned)
    return src


def place_aiter(
    pin: pins.Pin, src: Path, build: Path, checkout: Path, runner: Runner, force: bool
) -> None:
    """Configure clones aiter by third_party/aiter.txt's tag into <build>/v3src/aiter unless a
    checkout there has it (v3src/CMakeLists.txt ~89-131 at 6e00ef3e): ours is linked there."""
    tag_file = src / "third_party/aiter.txt"  # the aiter tag AOTriton's configure clones
    wanted = tag_file.read_text().strip() if tag_file.is_file() else None
    aiter = pin.part("aiter")
    if not wanted and (aiter is None or src.is_dir()):
        return  # a tree that clones no aiter (before 0.13b: a gitlink), or nothing pinned
    if aiter is None or (wanted and aiter.ref != wanted):
        pinned = f"pins [aotriton.aiter] ref {aiter.ref}" if aiter else "no [aotriton.aiter] pin"
        return runner.refuse(
            f"{tag_file} names aiter {wanted}, which AOTriton's configure would clone from "
            f"GitHub, but there is {pinned}: run nox -s update_pins (it records tag and commit)"
        )
    ensure_checkout(aiter, checkout, runner, force=force)
    git(runner, checkout, "update-ref", f"refs/tags/{aiter.ref}", aiter.commit)
    link = build / "v3src" / "aiter"
    if not (link.is_symlink() and link.resolve() == checkout.resolve()):
        say = f"aiter: {link} -> {checkout} (configure finds {aiter.ref} there, clones nothing)"
        runner.apply(_link, link, checkout, say=say)


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(link, ignore_errors=True)  # an earlier clone (a link it leaves to unlink)
    link.unlink(missing_ok=True)
    link.symlink_to(target, target_is_directory=True)


def configure_args(
    ctx: Context, src: Path, build: Path, cache: compile_cache.CachePlan
) -> tuple[list[str], dict[str, str]]:
    """cmake's configure command and the variables it runs with (ROCm from rocm-sdk)."""
    runner = ctx.runner
    opts = ctx.opts
    sdk = ctx.session.tool("rocm-sdk")
    root, cmake_dir = (
        runner.ask([sdk, "path", f"--{q}"], f"$(rocm-sdk path --{q})") for q in ("root", "cmake")
    )
    pkgconfig = [ctx.prefix / "lib/pkgconfig", ctx.prefix / "share/pkgconfig"]
    pkgconfig += [runner.base_env.get("PKG_CONFIG_PATH")]  # what the env had, if anything
    sets = {"ROCM_PATH": root, "PKG_CONFIG_PATH": os.pathsep.join(str(p) for p in pkgconfig if p)}
    args = [str(ctx.session.tool("cmake")), "-G", "Ninja", "-S", str(src), "-B", str(build)]
    args += [
        f"-DCMAKE_MAKE_PROGRAM={ctx.session.tool('ninja')}",
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_INSTALL_PREFIX={build / 'install'}",
        f"-DCMAKE_PREFIX_PATH={cmake_dir}",
        f"-DAOTRITON_TARGET_ARCH={ctx.arch.name}",
        f"-DAOTRITON_GPU_BUILD_TIMEOUT={opts.timeout_min or 0:g}",  # minutes, 0: no limit
        f"-DAOTRITON_NOIMAGE_MODE={'ON' if opts.no_images else 'OFF'}",
        # as torch's own cmake/External/aotriton.cmake: torch never uses pyaotriton
        f"-DAOTRITON_NO_PYTHON={'OFF' if opts.with_pyaotriton else 'ON'}",
        "-DHIP_PLATFORM=amd",
    ]
    if archs.aotriton_version_key(ctx.version) >= (0, 11):  # new in 0.11b (CMakeLists.txt)
        # pyaotriton must not link whichever torch happens to be installed (upstream §8.10).
        args.insert(-1, "-DAOTRITON_USE_TORCH=OFF")
    args += [f"-DPython3_EXECUTABLE={ctx.python}"] if ctx.python.exists() else []
    # AOTriton makes any ccache it finds (CCACHE_FOUND) the launcher: preset that so --cache
    # decides (docs/upstream-interfaces.md); without --cache, a ccache on PATH is used.
    ccache = shutil.which("ccache", path=runner.base_env.get("PATH", ""))
    if cache.active:
        return [*args, *cache.cmake_args(), f"-DCCACHE_FOUND={cache.exe}"], sets
    if ccache and opts.cache is None:
        launchers = (f"-DCMAKE_{lang}_COMPILER_LAUNCHER={ccache}" for lang in ("C", "CXX"))
        return [*args, *launchers], sets
    return [*args, "-DCCACHE_FOUND=OFF"], sets


def build_from_source(
    ctx: Context, tuning: checkouts.TuningDb | None = None, for_tuner: bool = False
) -> AotritonInstall | None:
    """The tree, its kernel check (docs/kernel-check.md), then cmake into <build>/install."""
    runner = ctx.runner
    opts = ctx.opts
    if opts.with_pyaotriton:
        require_pybind11(ctx)
    build = options.build_dir(ctx.work, "aotriton-tuning" if for_tuner else "aotriton")
    store = None  # the build's store, for its kernel check too; --no-images: no kernels
    if not opts.no_images:
        store = kernel_build.open_store(opts.cache, ctx.work, ctx.arch.name, runner=runner)
    if opts.clean and build.exists():
        runner.apply(shutil.rmtree, build, say=f"--clean: removing the build directory {build}")
    src = check_out(ctx)
    if not opts.no_images:  # configure clones aiter only for the images
        aiter = options.src_dir(ctx.work, "aiter")
        place_aiter(ctx.pin, src, build, aiter, runner, opts.discard_local_edits)
    from rocmfa.builds import kernel_check  # only a source build checks kernels

    kernel_check.before_build(ctx, src, opts, store=store)
    kernels = kernel_build.plan(ctx, opts, src, build, store, runner)
    jobs, why = choose_jobs(opts.jobs, AOTRITON_GIB_PER_JOB)
    runner.say(f"build jobs: {why}")
    cache = compile_cache.plan_cache(
        opts.cache,
        work=ctx.work,
        arch=ctx.arch.name,
        toolchain=toolchain(ctx.prefix, ctx.site),
        env=runner.base_env,
        runner=runner,
        planned=not ctx.session.ready,
    )
    args, sets = configure_args(ctx, src, build, cache)
    if tuning is not None:
        db_build = build.with_name(build.name + "-tuning-db")
        args += checkouts.tuning_cmake_args(tuning, src, db_build, runner=runner)
    if for_tuner:  # .tune/single/build_arch.sh ~34-43 at 6e00ef3e
        args += ["-DAOTRITON_BUILD_FOR_TUNING=ON", "-DAOTRITON_NAME_SUFFIX=123"]
    args += kernels.cmake_args() if kernels is not None else []  # every kernel job: the store
    configured = build / ".rocmfa-configure.json"  # a stale CMakeCache wins (pytorch#28373)
    cmake_cache = build / "CMakeCache.txt"
    changed = not stamps.is_current(configured, {"args": args, "sets": sets})
    if configured.exists() and changed and cmake_cache.exists():
        runner.apply(cmake_cache.unlink, say="configuration changed: removing stale CMakeCache.txt")
    if (build / "install").exists():
        runner.apply(shutil.rmtree, build / "install")  # ours; `ninja install` repopulates it
    runner.run(args, cwd=src, sets=sets)
    runner.apply(stamps.write, configured, {"args": args, "sets": sets})
    # AOTriton README: `ninja install` runs the whole build; do not run `ninja` separately.
    ninja = str(ctx.session.tool("ninja"))
    with (
        kernel_build.through_store(kernels, build, runner),
        compile_cache.compiling(cache, runner, ctx.work, "build_aotriton") as cache,
    ):
        build_sets = {**sets, **cache.build_sets(runner.base_env)}
        runner.run([ninja, "-C", str(build), f"-j{jobs}", "install"], cwd=src, sets=build_sets)
    return runner.apply(AotritonInstall.read, build / "install/lib", build / "install/include")


def require_pybind11(ctx: Context) -> None:
    """AOTRITON_NO_PYTHON=OFF: configure imports pybind11 with the env's python (CMakeLists.txt
    131-143 at 6e00ef3e); before setup_env, the lock must have it."""
    if ctx.session.ready:
        probe = subprocess.run([ctx.python, "-c", "import pybind11"], capture_output=True)
        has = probe.returncode == 0
        where = f"the env's python ({ctx.python}) cannot import it"
    else:
        from rocmfa.env import lockfile  # only --with-pyaotriton before setup_env reads the lock

        records = lockfile.load(lockfile.records_path(lockfile.LOCK_FILE))["records"]
        has = any(r.get("name") == "pybind11" for r in records.values())
        where = "conda-lock.yml, which setup_env installs, has no pybind11"
    if not has:
        raise UserError(
            f"pyaotriton (--with-pyaotriton; tune_aotriton's tuner) needs pybind11, and {where}: "
            "add `- pybind11` to environment.yml, then run: nox -s lock && nox -s setup_env"
        )


def finish(ctx: Context, new: AotritonInstall | None, inputs: dict[str, Any], how: str) -> None:
    """Record the build (None in a plan) for build_pytorch; into torch if there is one."""
    stamp = options.stamp_path(ctx.work, STAMP_NAME)
    built = install_prefix(ctx)
    built_stamp = options.stamp_path(ctx.work, "aotriton-built")  # build_pytorch reads it
    if new is None:  # a plan: build_pytorch later in this run plans against this prefix
        stamps.plan(built_stamp, install_prefix=str(built))
    elif new.runtime is None:
        raise UserError(f"no libaotriton_v2.so.X.Y.Z in {new.lib}; the build did not install one")
    elif not ctx.opts.no_images and ctx.pack not in new.images:
        raise UserError(f"no {ctx.pack} images under {new.lib}; torch would find no kernels")
    else:  # not which torch it goes into: a torch appearing later must not rebuild torch
        own = {k: v for k, v in inputs.items() if k != "torch"}
        stamps.write(built_stamp, own, install_prefix=str(built))
    if ctx.torch is not None:
        return install(ctx, new, stamp, inputs, how)
    story = f"no torch in the env: AOTriton stays in {built}; nox -s build_pytorch builds torch "
    story += "against it (AOTRITON_INSTALLED_PREFIX) and nox -s install_wheels installs that torch"
    if new is None:
        return ctx.runner.say(ctx.runner.plan_line(f"{story}; would write {stamp}") or story)
    ctx.runner.say(f"built: {new.describe()}\n{story}")
    stamps.write(stamp, inputs, new={"runtime": new.runtime, "images": new.images})


def install(ctx: Context, new: AotritonInstall | None, stamp: Path, inputs, how: str) -> None:
    """Check versions, pip-install torch's own wheel repacked with new, stamp it."""
    runner = ctx.runner
    if new is None:  # a plan
        return runner.done(
            "check versions, repack torch's own wheel with the new AOTriton, pip install it into "
            f"{ctx.prefix} and write {stamp}"
        )
    torch = ctx.torch
    lib = torch / "lib"
    shipped = AotritonInstall.read(lib, torch / "include")
    if was := (read_marker(torch) or {}).get("shipped"):  # torch is a wheel we repacked
        shipped = AotritonInstall(lib, was.get("runtime"), was.get("images", {}), ())
    # --no-images: the runtime joins the images already in torch/lib; check it against those.
    effective = replace(new, images=new.images or image_signatures(lib / "aotriton.images"))
    overridden = check_compatible(effective, shipped, ctx.opts.force)
    for problem in overridden:
        runner.say(f"WARNING (--force): {problem}")
    before = {"runtime": shipped.runtime, "images": shipped.images}
    versions = {"shipped": before, "new": {"runtime": new.runtime, "images": effective.images}}
    record = {
        "how": how,
        "pin": {"commit": ctx.pin.commit, "version": ctx.version, "source": ctx.pin.source},
        "forced": overridden,
        "arch": ctx.arch.name,
        **versions,
    }
    original, wheel = install_into_torch(new, torch, record, shipped.runtime, ctx.work, runner)
    runner.say(f"installed into {lib} by pip: {wheel.name} ({wheel.parent.name})")
    runner.say(f"torch shipped: {shipped.describe()}; now: {effective.describe()} ({how})")
    runner.say(f"torch's own wheel: {original} (undo: nox -s build_aotriton -- --restore)")
    stamps.write(stamp, inputs, installed=installed_fingerprint(lib), wheel=str(wheel), **versions)
