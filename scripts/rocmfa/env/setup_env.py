"""`nox -s setup_env`: the lock with py-rattler, TheRock's ROCm SDK (and torch) with pip, then the
variables; nothing redone while the stamp (conda-meta/, written last) matches the inputs."""

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rocmfa.env import activation, archs, lockfile, rocm_sdk, session_env
from rocmfa.plumbing import pin_files, stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import SetupEnvOptions


def aotriton_version(prefix: Path) -> str | None:
    """The AOTriton runtime the env's torch carries (libaotriton_v2.so.X.Y.Z), else the pin's."""
    for lib in sorted(prefix.glob("lib/python3*/site-packages/torch/lib/libaotriton_v2.so.*")):
        if match := re.fullmatch(r"libaotriton_v2\.so\.(\d+\.\d+\.\d+)", lib.name):
            return match.group(1)
    return pin_files.aotriton_version(pin_files.pins_dir())


@dataclass(frozen=True)
class Request:
    arch: archs.Arch
    rocm: rocm_sdk.RocmPin
    index_kind: str
    with_torch: bool
    profiles: tuple[str, ...]

    def inputs(self, lock_sha256: str, aotriton_version: str | None) -> dict[str, object]:
        torch = self.rocm.torch_requirement(self.arch, self.index_kind) if self.with_torch else None
        return {
            "stamp_version": 1,
            "lock_sha256": lock_sha256,
            "arch": self.arch.name,
            "rocm_index_url": self.rocm.index_url(self.arch, self.index_kind),
            "rocm_requirement": self.rocm.requirement(self.arch, self.index_kind),
            "torch_requirement": torch,
            "profiles": sorted(self.profiles),
            "variables_file": stamps.file_sha256(activation.VARS_FILE),
            "aotriton_version": aotriton_version,
        }


def check_prefix_usable(prefix: Path, force: bool) -> None:
    """Refuse to let the installer replace what we did not make, or write where we cannot."""
    conda_env = (prefix / "conda-meta").is_dir()
    if prefix.exists() and not prefix.is_dir():
        raise UserError(f"env prefix {prefix} exists and is not a directory")
    if prefix.is_dir() and not conda_env and any(prefix.iterdir()):
        raise UserError(f"{prefix} is not empty and not a conda env; choose another --prefix")
    if conda_env and not (prefix / session_env.ENV_STAMP).is_file() and not force:
        raise UserError(
            f"conda env {prefix} was not created by setup_env; --force replaces it with the lock's"
            " packages, or choose another --env-name/--prefix"
        )
    there = next(p for p in (prefix, *prefix.parents) if p.exists())
    if not os.access(there, os.W_OK):
        where = f" (no write access to {there})" if there != prefix else ""
        raise UserError(f"env prefix {prefix} is not writable{where}")


def provision(
    prefix: Path, request: Request, runner: Runner, *, stamp_inputs: dict[str, object]
) -> activation.Plan:
    """The ROCm SDK, the variables and the stamp on any prefix with bin/python (tests: a venv)."""
    rocm = request.rocm
    arch = request.arch
    if note := rocm.index_note(arch, request.index_kind):
        runner.say(note)
    sdk = rocm.requirement(arch, request.index_kind)
    torch = [rocm.torch_requirement(arch, request.index_kind)] if request.with_torch else []
    if torch:  # TheRock's torch requires rocm[libraries]==<its own SDK>
        runner.say(f"torch and the ROCm SDK in one pip resolve: {sdk} holds the SDK at the pin")
    url = rocm.index_url(arch, request.index_kind)
    pre = ["--pre"] if rocm.pre else []
    pip = [prefix / "bin" / "python", "-m", "pip", "install", "--index-url", url, *pre, sdk, *torch]
    if runner.run(pip, check=not torch).returncode != 0:
        raise UserError(
            f"pip found no {torch[0]} on {url} that works with {sdk}; pick an SDK version that "
            "index has a torch for in pins/rocm.toml, or drop --with-torch"
        )
    rocm_cli = prefix / "bin" / "rocm-sdk"
    runner.run([rocm_cli, "init", "--quiet"])
    rocm_paths = rocm_sdk.read_paths(runner, rocm_cli)
    version = aotriton_version(prefix)
    result = activation.plan(
        arch, rocm_root=rocm_paths["root"], aotriton_version=version, profiles=request.profiles
    )
    scripts = " and ".join(map(str, activation.script_paths(prefix)))
    runner.apply(activation.write_scripts, prefix, result["set"], say=f"write {scripts}")
    stamp = prefix / session_env.ENV_STAMP
    runner.apply(stamps.write, stamp, stamp_inputs, rocm=rocm_paths, variables=result)
    return result


def update_conda_packages(
    prefix: Path, stamp_file: Path, lock_sha: str, opts: SetupEnvOptions, runner: Runner
) -> None:
    """Install the lock's packages unless the last setup used this lock (or --force)."""
    previous = stamps.read(stamp_file) or {}
    needs_conda = opts.force or previous.get("inputs", {}).get("lock_sha256") != lock_sha
    if needs_conda:
        check_prefix_usable(prefix, opts.force)
    else:
        runner.say("conda packages match the lock; updating ROCm SDK and variables only")
    runner.apply(stamp_file.unlink, missing_ok=True)  # an interrupted install looks unfinished
    cache = lockfile.default_cache_dir()
    lock = lockfile.LOCK_FILE

    def install() -> None:
        done = lockfile.install_lock(lock, prefix, cache_dir=cache, channel=opts.channel)
        counts = f"{len(done.installed)} installed, {len(done.removed)} removed"
        print(f"conda packages: {counts}, {done.unchanged} unchanged (py-rattler; cache {cache})")

    if needs_conda:
        what = f"{lock.name} ({lockfile.PLATFORM})"
        runner.apply(install, say=f"install {what} into {prefix} with py-rattler (cache {cache})")


def setup_env(opts: SetupEnvOptions) -> None:
    if opts.show:
        manager = session_env.find_manager()
        prefix = session_env.resolve_prefix(opts.prefix, opts.env_name, manager).prefix
        if not (stamp := stamps.read(prefix / session_env.ENV_STAMP)):
            raise UserError(f"env {prefix} has not been set up; run: nox -s setup_env")
        print(f"env {prefix}\n{activation.show(stamp['variables'])}")
        return
    session = session_env.open_env(opts, makes_env=True)
    runner = session.runner
    rocm = rocm_sdk.load_pin()
    index_kind = opts.rocm_index or rocm.index
    request = Request(session.arch, rocm, index_kind, opts.with_torch, opts.profile)
    note = session.choice.detection.override
    runner.say(f"arch {session.arch.name} ({session.choice.how})" + (f"; {note}" if note else ""))
    if session.arch.vendor != "amd":
        raise UserError(f"{session.arch.name} is not an AMD GPU arch; setup_env needs one")
    prefix = session.prefix
    manager = session.manager
    lock = lockfile.LOCK_FILE
    found = f"manager {manager.exe} ({manager.found_via})" if manager else "no conda manager"
    runner.say(f"env {prefix} ({session.location.how}); {found}; installer py-rattler")
    if not lock.is_file():
        runner.say(f"{lock.name} is missing: solving it first (as nox -s lock)")
        lockfile.lock(opts)
    lock_sha = lockfile.require_fresh() if lock.is_file() else "(solved above)"  # a planned solve
    inputs = request.inputs(lock_sha, aotriton_version(prefix))
    stamp_file = prefix / session_env.ENV_STAMP
    if not opts.force and stamps.is_current(stamp_file, inputs):
        runner.say(f"env {prefix} is up to date (nothing to do; --force redoes it)")
        return
    # before the first change: only what installs must suit this host
    lockfile.require_suited()
    update_conda_packages(prefix, stamp_file, lock_sha, opts, runner)
    said = f"commands in the env run with CONDA_PREFIX={prefix} PATH={prefix / 'bin'}:$PATH"
    in_env = runner.apply(session_env.activated_environ, prefix, say=said + " + its activate.d")
    runner.base_env = in_env or runner.base_env
    result = provision(prefix, request, runner, stamp_inputs=inputs)
    runner.say(activation.show(result))
    say_next(request, session.choice.how, prefix, runner)


def say_next(request: Request, how: str, prefix: Path, runner: Runner) -> None:
    """Doctor's path line, then the next command."""
    from rocmfa.env.doctor import FAST_PATH, MAIN_JOB, torch_path  # a no-op run needs neither

    path = torch_path(request.arch, how, pin_files.aotriton_version(pin_files.pins_dir()))
    if path["kind"] != "prebuilt":
        runner.say(f"path {path['kind']}: {path['why']}")
    elif not request.with_torch:
        run = ", then ".join(path["commands"])
        runner.say(f"fast path: {path['why']}; run: {run}; {path['build']}")
    runner.done(f"env {prefix} is ready; next: {(MAIN_JOB[1], FAST_PATH[1])[request.with_torch]}")
