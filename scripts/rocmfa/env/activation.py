"""Activation variables: decide which to persist (data/env_vars.toml) and write the
activate.d/deactivate.d pair that conda, mamba and micromamba all source.

The scripts save what each variable held before (set or unset) and restore exactly that on
deactivate; values are single-quoted, and both scripts run under `set -u`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmfa.env.archs import Arch
from rocmfa.plumbing import stamps
from rocmfa.plumbing.datafiles import DATA_DIR, load_toml, require
from rocmfa.plumbing.errors import UserError

VARS_FILE = DATA_DIR / "env_vars.toml"
SCRIPT_NAME = "zz-rocmfa.sh"  # sorts after compiler activation scripts
BACKUP = "_ROCMFA_BACKUP_"
ACTIVE = "_ROCMFA_ACTIVE"  # the prefix of the innermost env that activated us
DEPTH = "_ROCMFA_DEPTH"  # how many of our envs are stacked
OUTER = "_ROCMFA_OUTER_"  # + depth: the ACTIVE of the env below
SHELL_ONLY = "_ROCMFA_SHELL_ONLY_"  # + depth + name: it was a shell variable, not exported
NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]*")


@dataclass(frozen=True)
class Variable:
    name: str
    value: str
    why: str


@dataclass(frozen=True)
class Skipped:
    name: str
    why: str


@dataclass(frozen=True)
class Plan:
    variables: tuple[Variable, ...]
    skipped: tuple[Skipped, ...]

    def as_dict(self) -> dict[str, list]:
        return {
            "set": [vars(v) for v in self.variables],
            "not_set": [vars(s) for s in self.skipped],
        }


def _conditions(
    arch: Arch, aotriton_version: str | None, rocm_root: str
) -> dict[str, tuple[bool, str]]:
    version = aotriton_version
    if version is None:
        experimental = (False, "AOTriton version unknown, so the experimental flag is not set")
    elif arch.aotriton_patched_pack(version):
        experimental = (False, f"{arch.name}'s kernels come from our patch set for AOTriton "
                        f"{version}, which does not list it as experimental")  # fmt: skip
    elif not arch.aotriton_supported(version):
        experimental = (False, f"AOTriton {version} has no kernels for {arch.name}")
    else:
        flag = arch.needs_experimental_flag(version)
        experimental = (flag, f"{arch.name} is not experimental in AOTriton {version}")
    bitcode = Path(rocm_root) / "lib" / "llvm" / "amdgcn" / "bitcode"
    # a dry run before the SDK is installed names it by a placeholder: show what would be set
    device_libs = (
        not Path(rocm_root).is_absolute() or bitcode.is_dir(),
        f"the SDK has no {bitcode} (TheRock then relies on clang's own lookup, as here)",
    )
    return {
        "aotriton_experimental": experimental,
        "vllm_aiter": (arch.vllm_aiter, arch.vllm_note),
        "device_libs": device_libs,
    }


def _section(table: dict, where: str, conditions, fields) -> tuple[list, list]:
    chosen, skipped = [], []
    for name, spec in table.get("set", {}).items():
        if not NAME_RE.fullmatch(name) or not isinstance(spec, dict):
            raise UserError(f"{VARS_FILE.name} {where}: bad variable entry {name!r}")
        why = require(spec, "why", str, f"{VARS_FILE.name} {where}.{name}")
        when = spec.get("when")
        if when is not None:
            if when not in conditions:
                raise UserError(f"{VARS_FILE.name} {where}.{name}: unknown condition {when!r}")
            ok, reason = conditions[when]
            if not ok:
                skipped.append(Skipped(name, reason))
                continue
        template = require(spec, "value", str, f"{VARS_FILE.name} {where}.{name}")
        try:
            value = template.format(**fields)
        except (KeyError, IndexError):
            raise UserError(f"{VARS_FILE.name} {where}.{name}: unknown placeholder") from None
        chosen.append(Variable(name, value, why))
    for name, spec in table.get("refuse", {}).items():
        if not isinstance(spec, dict):
            raise UserError(f"{VARS_FILE.name} {where}: bad refuse entry {name!r}")
        skipped.append(Skipped(name, require(spec, "why", str, f"{VARS_FILE.name} {name}")))
    return chosen, skipped


def plan(arch: Arch, *, rocm_root: str, aotriton_version: str | None,
         profiles: Sequence[str] = (), vars_file: Path = VARS_FILE) -> Plan:  # fmt: skip
    data = load_toml(vars_file, "variable data")
    if not data:
        raise UserError(f"variable data {vars_file} is empty; restore it: git checkout {vars_file}")
    conditions = _conditions(arch, aotriton_version, rocm_root)
    fields = {"rocm_root": rocm_root, "arch": arch.name}
    variables, skipped = _section(data, "", conditions, fields)
    for profile in profiles:
        if (table := data.get("profile", {}).get(profile)) is None:
            raise UserError(f"unknown variable profile {profile!r}")
        more, more_skipped = _section(table, f"[profile.{profile}]", conditions, fields)
        variables += more
        skipped += more_skipped
    return Plan(tuple(variables), tuple(skipped))


def render_activate(variables: Sequence[Variable]) -> str:
    """POSIX sh. Each activation of another env (conda activate --stack) saves the variables
    at its own depth ($_ROCMFA_DEPTH), so the inner deactivate gives back the outer env's
    values; a variable that was only a shell variable (not exported) is remembered as such.
    Activating the same env again saves nothing new."""
    lines = [
        "# Generated by `nox -s setup_env` (rocm-fa-workflow); rewritten on every setup.",
        "# Saves each variable's previous state and restores it in deactivate.d.",
        f'if [ -z "${{{ACTIVE}+x}}" ] || [ "${{{ACTIVE}}}" != "${{CONDA_PREFIX-}}" ]; then',
        f"  _rocmfa_d=$(( ${{{DEPTH}:-0}} + 1 ))",
        f'  if [ -n "${{{ACTIVE}+x}}" ]; then '
        f'eval "export {OUTER}${{_rocmfa_d}}=\\"\\${{{ACTIVE}}}\\""; fi',
    ]
    for var in variables:
        name = var.name
        lines += [
            f"  # {var.why}",
            f'  if [ -n "${{{name}+x}}" ]; then',
            f'    eval "export {BACKUP}${{_rocmfa_d}}_{name}=\\"\\${{{name}}}\\""',
            # a child shell sees only exported variables
            f"    if ! sh -c '[ -n \"${{{name}+x}}\" ]'; then "
            f'eval "export {SHELL_ONLY}${{_rocmfa_d}}_{name}=1"; fi',
            "  fi",
        ]
    lines += [
        f'  export {DEPTH}="$_rocmfa_d"',
        f'  export {ACTIVE}="${{CONDA_PREFIX-}}"',
        "  unset _rocmfa_d",
        "fi",
    ]
    lines += [f"export {v.name}={shlex.quote(v.value)}" for v in variables]
    return "\n".join(lines) + "\n"


def render_deactivate(variables: Sequence[Variable]) -> str:
    lines = [
        "# Generated by `nox -s setup_env` (rocm-fa-workflow): restores what activate saved.",
        f'if [ -n "${{{DEPTH}+x}}" ]; then',
        f'  _rocmfa_d="${DEPTH}"',
    ]
    for var in variables:
        name = var.name
        saved = f"{BACKUP}${{_rocmfa_d}}_{name}"
        lines += [
            f'  if eval "[ -n \\"\\${{{saved}+x}}\\" ]"; then',
            f'    if eval "[ -n \\"\\${{{SHELL_ONLY}${{_rocmfa_d}}_{name}+x}}\\" ]"; then',
            f'      unset {name}; eval "{name}=\\"\\${{{saved}}}\\""',
            f'    else eval "export {name}=\\"\\${{{saved}}}\\""; fi',
            f"  else unset {name}; fi",
            f'  eval "unset {saved} {SHELL_ONLY}${{_rocmfa_d}}_{name}"',
        ]
    lines += [
        '  if [ "$_rocmfa_d" -gt 1 ]; then',
        f'    eval "export {ACTIVE}=\\"\\${{{OUTER}${{_rocmfa_d}}}}\\""',
        f'    eval "unset {OUTER}${{_rocmfa_d}}"',
        f'    export {DEPTH}="$((_rocmfa_d - 1))"',
        f"  else unset {ACTIVE} {DEPTH}; fi",
        "  unset _rocmfa_d",
        "fi",
    ]
    return "\n".join(lines) + "\n"


def script_paths(prefix: Path) -> tuple[Path, Path]:
    base = prefix / "etc" / "conda"
    return base / "activate.d" / SCRIPT_NAME, base / "deactivate.d" / SCRIPT_NAME


def write_scripts(prefix: Path, variables: Sequence[Variable]) -> tuple[Path, Path]:
    paths = script_paths(prefix)
    for path, render in zip(paths, (render_activate, render_deactivate), strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        stamps.write_text_atomic(path, render(variables))
    return paths


def show(recorded: dict) -> str:
    """Plan.as_dict() (as the stamp records it) as the lines setup_env --show prints."""
    chosen = [f"  {v['name']}={shlex.quote(v['value'])}  - {v['why']}" for v in recorded["set"]]
    skipped = [f"  {s['name']}  - {s['why']}" for s in recorded["not_set"]]
    return "\n".join(["Variables set on activation:", *(chosen or ["  (none)"]), "Not set:",
                      *(skipped or ["  (none)"])])  # fmt: skip
