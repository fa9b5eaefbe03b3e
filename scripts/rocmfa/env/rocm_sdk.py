"""TheRock's ROCm SDK from pip: which index and requirement (pins/rocm.toml), and the paths
`rocm-sdk path` reports once it is installed."""

from dataclasses import dataclass
from pathlib import Path

from rocmfa.env.archs import Arch
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError, load_toml, require
from rocmfa.plumbing.options import INDEX_KINDS
from rocmfa.plumbing.pin_files import pins_dir

# The distributions of one TheRock ROCm SDK: all carry the same version (rocm[...]==V pins each).
SDK_DISTS = ("rocm", "rocm-sdk-core", "rocm-sdk-libraries", "rocm-sdk-devel")


@dataclass(frozen=True)
class RocmPin:
    index: str
    multi_arch_index_url: str
    legacy_index_url: str
    version: str
    extras: tuple[str, ...]
    pre: bool
    torch_spec: str

    def kind_for(self, arch: Arch, kind: str | None = None) -> str:
        """ "legacy" only where TheRock has a per-family index (arches.toml legacy_family)."""
        return "legacy" if (kind or self.index) == "legacy" and arch.legacy_family else "multi-arch"

    def index_note(self, arch: Arch, kind: str | None = None) -> str:
        """Why the multi-arch index is used although "legacy" was asked for ('' otherwise)."""
        if (kind or self.index) != "legacy" or arch.legacy_family:
            return ""
        why = "its docs/packaging/legacy_per_family_releases.md lists none"
        use = f"the multi-arch index with the {arch.device_extra} extra"
        return f"{arch.name}: TheRock has no legacy per-family index ({why}); using {use}"

    def index_url(self, arch: Arch, kind: str | None = None) -> str:
        if self.kind_for(arch, kind) == "multi-arch":
            return self.multi_arch_index_url
        return self.legacy_index_url.format(family=arch.legacy_family)

    def requirement(self, arch: Arch, kind: str | None = None) -> str:
        """rocm[libraries,devel,device-gfxNNNN]==V (the device extra only on multi-arch)."""
        device = [arch.device_extra] if self.kind_for(arch, kind) == "multi-arch" else []
        if device == [None]:
            raise UserError(f"{arch.name} has no TheRock device package")
        return f"rocm[{','.join([*self.extras, *device])}]=={self.version}"

    def torch_requirement(self, arch: Arch, kind: str | None = None) -> str:
        if self.kind_for(arch, kind) == "multi-arch" and arch.device_extra:
            return f"torch[{arch.device_extra}]{self.torch_spec}"
        return f"torch{self.torch_spec}"


def load_pin(path: Path | None = None) -> RocmPin:
    path = path or pins_dir() / "rocm.toml"
    data = load_toml(path, "ROCm pin")
    where = f"{path.name} [rocm]"
    rocm = require(data, "rocm", dict, path.name)
    if (index := require(rocm, "index", str, where)) not in INDEX_KINDS:
        raise UserError(f"{where}: index must be one of {', '.join(INDEX_KINDS)}, got {index!r}")
    keys = ("index", "multi_arch_index_url", "legacy_index_url", "version")
    text = {k: require(rocm, k, str, where) for k in keys}
    if "{family}" not in text["legacy_index_url"]:
        raise UserError(f"{where}: legacy_index_url needs a {{family}} placeholder")
    extras = tuple(map(str, require(rocm, "extras", list, where)))
    torch = data.get("torch", {})
    spec = torch.get("spec", "") if isinstance(torch, dict) else ""
    return RocmPin(**text, extras=extras, pre=bool(rocm.get("pre", False)), torch_spec=spec)


def mixed_sdk(versions: dict[str, str]) -> str:
    """'' when every installed SDK distribution has one version, else a sentence naming them."""
    named = {name.lower().replace("_", "-"): v for name, v in versions.items()}
    found = {n: v for n, v in named.items() if n in SDK_DISTS or n.startswith("rocm-sdk-device-")}
    if len(set(found.values())) <= 1:
        return ""
    listed = ", ".join(f"{name} {version}" for name, version in sorted(found.items()))
    return f"mixed ROCm SDK: {listed}; rerun: nox -s setup_env -- --force"


def read_paths(runner: Runner, rocm_sdk: Path | str) -> dict[str, str]:
    asks = {"root": ("path", "--root"), "cmake": ("path", "--cmake"), "version": ("version",)}
    return {k: runner.ask([rocm_sdk, *a], f"$(rocm-sdk {' '.join(a)})") for k, a in asks.items()}
