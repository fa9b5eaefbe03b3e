"""TheRock's ROCm SDK from pip: which index and requirement (pins/rocm.toml), and the
paths `rocm-sdk path` reports once it is installed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scripts.env.archs import Arch
from scripts.plumbing.commands import Runner
from scripts.plumbing.datafiles import load_toml, require
from scripts.plumbing.errors import UserError
from scripts.plumbing.pin_schema import pins_dir

INDEX_KINDS = ("multi-arch", "legacy")


@dataclass(frozen=True)
class RocmPin:
    index: str
    multi_arch_index_url: str
    legacy_index_url: str
    version: str
    extras: tuple[str, ...]
    pre: bool
    torch_spec: str

    def index_url(self, arch: Arch, kind: str | None = None) -> str:
        kind = kind or self.index
        if kind == "multi-arch":
            return self.multi_arch_index_url
        if not arch.legacy_family:
            raise UserError(f"{arch.name} has no legacy per-family TheRock index")
        return self.legacy_index_url.format(family=arch.legacy_family)

    def requirement(self, arch: Arch, kind: str | None = None) -> str:
        """rocm[libraries,devel,device-gfxNNNN]==V (the device extra only on multi-arch)."""
        extras = list(self.extras)
        if (kind or self.index) == "multi-arch":
            if not arch.device_extra:
                raise UserError(f"{arch.name} has no TheRock device package")
            extras.append(arch.device_extra)
        return f"rocm[{','.join(extras)}]=={self.version}"

    def torch_requirement(self, arch: Arch, kind: str | None = None) -> str:
        if (kind or self.index) == "multi-arch" and arch.device_extra:
            return f"torch[{arch.device_extra}]{self.torch_spec}"
        return f"torch{self.torch_spec}"


def load_pin(path: Path | None = None) -> RocmPin:
    path = path or pins_dir() / "rocm.toml"
    data = load_toml(path, "ROCm pin")
    where = f"{path.name} [rocm]"
    rocm = require(data, "rocm", dict, path.name)
    index = require(rocm, "index", str, where)
    if index not in INDEX_KINDS:
        raise UserError(f"{where}: index must be one of {', '.join(INDEX_KINDS)}, got {index!r}")
    extras = require(rocm, "extras", list, where)
    if not all(isinstance(e, str) for e in extras):
        raise UserError(f"{where}: extras must be strings")
    legacy = require(rocm, "legacy_index_url", str, where)
    if "{family}" not in legacy:
        raise UserError(f"{where}: legacy_index_url needs a {{family}} placeholder")
    torch = data.get("torch", {})
    return RocmPin(
        index=index,
        multi_arch_index_url=require(rocm, "multi_arch_index_url", str, where),
        legacy_index_url=legacy,
        version=require(rocm, "version", str, where),
        extras=tuple(extras),
        pre=bool(rocm.get("pre", False)),
        torch_spec=torch.get("spec", "") if isinstance(torch, dict) else "",
    )


def pip_install_argv(python: Path, index_url: str, pre: bool, requirement: str) -> list[str]:
    argv = [str(python), "-m", "pip", "install", "--index-url", index_url]
    if pre:
        argv.append("--pre")
    return [*argv, requirement]


@dataclass(frozen=True)
class RocmPaths:
    root: str
    bin: str
    cmake: str
    version: str


def read_paths(runner: Runner, rocm_sdk: Path | str) -> RocmPaths:
    def ask(*args: str) -> str:
        placeholder = f"$(rocm-sdk {' '.join(args)})"
        result = runner.run([rocm_sdk, *args], capture=True, dry_run_output=placeholder)
        return result.stdout.strip()

    return RocmPaths(
        root=ask("path", "--root"),
        bin=ask("path", "--bin"),
        cmake=ask("path", "--cmake"),
        version=ask("version"),
    )
