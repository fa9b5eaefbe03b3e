"""The one shared conda env: resolve its prefix and build its full activation for commands
that nox runs. py-rattler installs it; a conda manager (micromamba, mamba or conda: found,
never downloaded), when present, only decides where named envs live so `activate NAME` finds it.

Nox never activates conda envs (it only prepends PATH), so compiler packages' CC/CXX and our
persisted variables would be missing. activated_environ() reproduces what `conda activate`
does - package env_vars.d, conda-meta/state env_vars, then every etc/conda/activate.d/*.sh
sourced in order - in a bash subprocess, once per prefix per process.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import env_name as check_env_name
from rocmfa.plumbing.options import origin


@dataclass(frozen=True)
class Manager:
    kind: str  # micromamba | mamba | conda
    exe: Path
    found_via: str


def _kind_of(exe: Path) -> str:
    name = exe.name.lower()
    for kind in ("micromamba", "mamba", "conda"):
        if name.startswith(kind):
            return kind
    return "conda"


def find_manager(environ: Mapping[str, str] | None = None) -> Manager | None:
    """$MAMBA_EXE, then $CONDA_EXE, then micromamba, mamba, conda on PATH. Never downloads."""
    environ = os.environ if environ is None else environ
    for var in ("MAMBA_EXE", "CONDA_EXE"):
        value = environ.get(var)
        if value and os.access(value, os.X_OK):
            exe = Path(value)
            return Manager(_kind_of(exe), exe, f"${var}")
    for name in ("micromamba", "mamba", "conda"):
        found = shutil.which(name, path=environ.get("PATH", ""))
        if found:
            return Manager(name, Path(found), "PATH")
    return None


def no_manager_error() -> UserError:
    return UserError(
        "no conda manager found (looked at $MAMBA_EXE, $CONDA_EXE, and micromamba, mamba, "
        "conda on PATH); install micromamba or miniforge, or set MAMBA_EXE"
    )


DEFAULT_ENV_NAME = "therock"
ENV_STAMP = Path("conda-meta") / "rocmfa-env.json"  # written last by setup_env


def _envs_dirs(manager: Manager | None, environ: Mapping[str, str]) -> list[Path]:
    dirs = [Path(p) for p in environ.get("CONDA_ENVS_PATH", "").split(os.pathsep) if p]
    if manager is not None:
        if manager.kind == "micromamba":
            root = environ.get("MAMBA_ROOT_PREFIX") or str(Path.home() / "micromamba")
            dirs.append(Path(root) / "envs")
        else:
            # <root>/bin/conda or <root>/condabin/conda
            dirs.append(manager.exe.resolve().parent.parent / "envs")
    else:
        # No manager: py-rattler still installs the env; it lives in our own data dir.
        data = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        dirs.append(Path(data) / "rocm-fa-workflow" / "envs")
    return dirs


def _registered_envs() -> list[Path]:
    """Prefixes conda and mamba record in ~/.conda/environments.txt."""
    try:
        lines = (Path.home() / ".conda" / "environments.txt").read_text().splitlines()
    except OSError:
        return []
    return [Path(line.strip()) for line in lines if line.strip()]


@dataclass(frozen=True)
class EnvLocation:
    prefix: Path | None
    how: str


def resolve_prefix(
    prefix: str | None,
    env_name: str | None,
    manager: Manager | None,
    environ: Mapping[str, str] | None = None,
) -> EnvLocation:
    """prefix/env_name: the session's (from --prefix/--env-name or $ROCMFA_*, resolved with
    its settings). environ: the manager's own variables (its envs directories)."""
    environ = os.environ if environ is None else environ
    if prefix:
        return EnvLocation(Path(prefix).expanduser().resolve(), origin(prefix, "--prefix"))
    name = env_name or DEFAULT_ENV_NAME
    how = origin(env_name, "--env-name") if env_name else "default name"
    check_env_name(name)
    for registered in _registered_envs():
        if registered.name == name and (registered / "conda-meta").is_dir():
            return EnvLocation(registered, f"{how} '{name}' (registered env)")
    dirs = _envs_dirs(manager, environ)
    for envs_dir in dirs:
        if (envs_dir / name / "conda-meta").is_dir():
            return EnvLocation(envs_dir / name, f"{how} '{name}'")
    if dirs:
        return EnvLocation(dirs[0] / name, f"{how} '{name}' (to be created)")
    return EnvLocation(None, f"{how} '{name}': no manager to locate its envs directory")


def is_conda_env(prefix: Path) -> bool:
    return (prefix / "conda-meta").is_dir()


def _base_activation(prefix: Path, outer: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in outer.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join([str(prefix / "bin"), outer.get("PATH", "")]).rstrip(os.pathsep)
    env["CONDA_PREFIX"] = str(prefix)
    env["CONDA_DEFAULT_ENV"] = str(prefix)
    env_vars: dict[str, str] = {}
    vars_dir = prefix / "etc" / "conda" / "env_vars.d"
    if vars_dir.is_dir():
        for item in sorted(vars_dir.iterdir()):
            try:
                env_vars.update(json.loads(item.read_text()))
            except (OSError, ValueError):
                continue
    try:
        state = json.loads((prefix / "conda-meta" / "state").read_text())
        env_vars.update(state.get("env_vars", {}))
    except (OSError, ValueError, AttributeError):
        pass
    for name, value in env_vars.items():
        if name.upper() != "PATH" and value != "***unset***":
            env[name.upper()] = str(value)
    return env


@functools.lru_cache(maxsize=8)
def _activated(
    prefix: str, outer_items: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    base = _base_activation(Path(prefix), dict(outer_items))
    scripts_dir = Path(prefix) / "etc" / "conda" / "activate.d"
    scripts = sorted(scripts_dir.glob("*.sh")) if scripts_dir.is_dir() else []
    if not scripts:
        return tuple(sorted(base.items()))
    bash = shutil.which("bash", path=base.get("PATH")) or "/bin/bash"
    # Compiler activation scripts reference unset variables, so no `set -u` here.
    program = 'for f in "$@"; do . "$f" || exit 97; done; exec env -0'
    result = subprocess.run(
        [bash, "--norc", "--noprofile", "-c", program, "activate", *map(str, scripts)],
        env=base,
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines()
        raise UserError(
            f"activating {prefix} failed: an activate.d script exited non-zero"
            + (f": {detail[-1]}" if detail else "")
        )
    pairs = (item.split("=", 1) for item in result.stdout.decode().split("\0") if "=" in item)
    env = {k: v for k, v in pairs if k not in ("_", "SHLVL", "PWD", "OLDPWD")}
    return tuple(sorted(env.items()))


def activated_environ(prefix: Path, outer: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment `conda activate PREFIX` would give, computed without a manager."""
    outer = os.environ if outer is None else outer
    return dict(_activated(str(prefix), tuple(sorted(outer.items()))))


def which_in_env(program: str, env: Mapping[str, str]) -> Path:
    """Resolve a program on the activated PATH (nox would look at its own PATH instead)."""
    found = shutil.which(program, path=env.get("PATH", ""))
    if not found:
        raise UserError(f"{program} not found in the env (PATH={env.get('PATH', '')})")
    return Path(found)


def require_env(prefix: Path | None) -> Path:
    """The prefix of a set-up env, or a one-line error naming the session that makes it."""
    if prefix is None:
        raise no_manager_error()
    if not (prefix / ENV_STAMP).is_file():
        state = "is not a conda env" if not is_conda_env(prefix) else "was not set up by us"
        if not prefix.exists():
            state = "does not exist"
        raise UserError(f"env {prefix} {state}; run: nox -s setup_env")
    from rocmfa.env import lockfile  # lazily: conda-lock's import is slow

    if lockfile.LOCK_FILE.is_file():
        lockfile.require_fresh()
    else:
        print(f"note: {lockfile.LOCK_FILE.name} is missing, so {prefix} cannot be checked "
              "against it (nox -s lock makes it)", file=sys.stderr)  # fmt: skip
    return prefix


def env_identity(prefix: Path) -> str:
    """Changes whenever setup_env (re)creates or updates the env; build steps that install
    into the env include it in their stamp so a recreated env gets its installs again."""
    try:
        return json.loads((prefix / ENV_STAMP).read_text()).get("inputs_digest", "")
    except (OSError, ValueError):
        return ""


# --- the env's torch as pip installed it -------------------------------------------------


def torch_record(site: Path) -> Path | None:
    """RECORD of the env's torch (pip's list of its files), or None without a torch dist."""
    infos = sorted(site.glob("torch-*.dist-info"))
    return infos[-1] / "RECORD" if infos else None


def record_rows(record: Path) -> list[list[str]]:
    """[path relative to site-packages, 'sha256=<urlsafe b64>' or '', size or ''] per line."""
    with open(record, newline="", encoding="utf-8") as f:
        return [row for row in csv.reader(f) if len(row) == 3]


def torch_incomplete(site: Path) -> str | None:
    """Why the env's torch is not a whole pip install (a pip run killed midway), or None."""
    record = torch_record(site)
    if record is None:
        return "no torch-*.dist-info"
    if not record.is_file():
        return f"{record.parent.name} has no RECORD"
    for rel, _digest, size in record_rows(record):
        try:
            found = (site / rel).stat().st_size
        except OSError:
            return f"{rel} is missing"
        if size and found != int(size):
            return f"{rel} is not the size its RECORD says"
    return None


def pip_pending_path(prefix: Path) -> Path:
    """Where build_aotriton names the torch wheel pip is installing into the env, until pip is
    done (scripts/rocmfa/builds/aotriton_install.py)."""
    return prefix / ".rocmfa" / "pip-install.json"


def pip_pending(prefix: Path) -> dict[str, Any] | None:
    """That record, or None (none, or unreadable: it only ever leads to a pip install)."""
    try:
        pending = json.loads(pip_pending_path(prefix).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return pending if isinstance(pending, dict) else None
