"""The one shared conda env: where it is (a conda manager, when present, only decides where
named envs live) and its full activation for the commands nox runs (nox only prepends PATH)."""

import csv
import functools
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from rocmfa.plumbing import stamps
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import env_name as check_env_name
from rocmfa.plumbing.options import origin

DEFAULT_ENV_NAME = "therock"
ENV_STAMP = Path("conda-meta") / "rocmfa-env.json"  # written last by setup_env


@dataclass(frozen=True)
class Manager:
    kind: str  # micromamba | mamba | conda
    exe: Path
    found_via: str


def find_manager() -> Manager | None:
    """$MAMBA_EXE, then $CONDA_EXE, then micromamba, mamba, conda on PATH. Never downloads."""
    for var in ("MAMBA_EXE", "CONDA_EXE"):
        value = os.environ.get(var)
        if value and os.access(value, os.X_OK):
            name = Path(value).name.lower()
            kind = next((k for k in ("micromamba", "mamba") if name.startswith(k)), "conda")
            return Manager(kind, Path(value), f"${var}")
    for name in ("micromamba", "mamba", "conda"):
        if found := shutil.which(name):
            return Manager(name, Path(found), "PATH")
    return None


@dataclass(frozen=True)
class EnvLocation:
    prefix: Path
    how: str


def resolve_prefix(
    prefix: str | None, env_name: str | None, manager: Manager | None
) -> EnvLocation:
    """prefix/env_name: the session's settings; the manager's own variables say where envs live."""
    environ = os.environ
    if prefix:
        return EnvLocation(Path(prefix).expanduser().resolve(), origin(prefix, "--prefix"))
    name = check_env_name(env_name or DEFAULT_ENV_NAME)
    how = origin(env_name, "--env-name") if env_name else "default name"
    dirs = [Path(p) for p in environ.get("CONDA_ENVS_PATH", "").split(os.pathsep) if p]
    if manager is None:  # py-rattler still installs the env: into our own data dir
        data = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        dirs.append(Path(data) / "rocm-fa-workflow" / "envs")
    elif manager.kind == "micromamba":
        dirs.append(Path(environ.get("MAMBA_ROOT_PREFIX") or Path.home() / "micromamba") / "envs")
    else:  # <root>/{bin,condabin}/conda
        dirs.append(manager.exe.resolve().parent.parent / "envs")
    for envs_dir in dirs:
        if (envs_dir / name / "conda-meta").is_dir():
            return EnvLocation(envs_dir / name, f"{how} '{name}'")
    return EnvLocation(dirs[0] / name, f"{how} '{name}' (to be created)")


@functools.lru_cache(maxsize=8)
def _activated(prefix: str, outer_items: tuple[tuple[str, str], ...]) -> tuple:
    from rattler.shell import ActivationVariables, PathModificationBehavior, Shell, activate

    outer = {k: v for k, v in outer_items if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    path = [p for p in outer.get("PATH", "").split(os.pathsep) if p]
    variables = ActivationVariables(None, path, PathModificationBehavior.Replace)
    script = activate(Path(prefix), variables, Shell.bash).script
    # conda stops at an activate.d script that fails; compiler scripts are not `set -u` safe
    script = re.sub(r"^(\. .*)$", r"\1 || exit 97", script, flags=re.M) + "\nexec env -0\n"
    bash = shutil.which("bash", path=outer.get("PATH")) or "/bin/bash"
    result = subprocess.run(
        [bash, "--norc", "--noprofile", "-c", script], env=outer, capture_output=True, check=False
    )
    if result.returncode != 0:
        last = (result.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
        raise UserError(f"activating {prefix} failed: an activate.d script exited non-zero: {last}")
    pairs = (item.split("=", 1) for item in result.stdout.decode().split("\0") if "=" in item)
    return tuple(sorted((k, v) for k, v in pairs if k not in ("_", "SHLVL", "PWD", "OLDPWD")))


def activated_environ(prefix: Path, outer: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment `conda activate PREFIX` gives (py-rattler's activation script, in bash)."""
    outer = os.environ if outer is None else outer
    return dict(_activated(str(prefix), tuple(sorted(outer.items()))))


def require_env(prefix: Path) -> Path:
    if not (prefix / ENV_STAMP).is_file():
        state = "was not set up by us" if (prefix / "conda-meta").is_dir() else "is not a conda env"
        state = state if prefix.exists() else "does not exist"
        raise UserError(f"env {prefix} {state}; run: nox -s setup_env")
    from rocmfa.env import lockfile  # lazily: conda-lock's import is slow

    lockfile.require_fresh()
    return prefix


def env_identity(prefix: Path) -> str:
    """Changes whenever setup_env (re)makes the env: in the stamps of steps installing into it."""
    return (stamps.read(prefix / ENV_STAMP) or {}).get("inputs_digest", "")


def torch_record(site: Path) -> Path | None:
    infos = sorted(site.glob("torch-*.dist-info"))
    return infos[-1] / "RECORD" if infos else None


def record_rows(record: Path) -> list[list[str]]:
    """[path relative to site-packages, 'sha256=<urlsafe b64>' or '', size or ''] per line."""
    with open(record, newline="", encoding="utf-8") as f:
        return [row for row in csv.reader(f) if len(row) == 3]


def torch_incomplete(site: Path) -> str | None:
    """Why the env's torch is not a whole pip install (a pip run killed midway), or None."""
    if (record := torch_record(site)) is None:
        return "no torch-*.dist-info"
    if (files := metadata.Distribution.at(record.parent).files) is None:
        return f"{record.parent.name} has no RECORD"
    for file in files:
        try:
            if file.size and file.locate().stat().st_size != file.size:
                return f"{file} is not the size its RECORD says"
        except OSError:
            return f"{file} is missing"
    return None


def pip_pending_path(prefix: Path) -> Path:
    """The torch wheel build_aotriton has pip installing, until pip is done (aotriton_install)."""
    return prefix / ".rocmfa" / "pip-install.json"


def pip_pending(prefix: Path) -> dict[str, Any] | None:
    return stamps.read(pip_pending_path(prefix))
