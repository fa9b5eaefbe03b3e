"""Small real conda packages and a file:// channel that serves them.

A package is a real `.tar.bz2` in conda's layout (conda-package-handling / conda-build write the
same): `info/index.json` (name, version, build, build_number, depends, subdir, timestamp),
`info/paths.json` (paths_version 1; `_path`, `path_type` hardlink, `sha256`,
`size_in_bytes` per file), `info/files`, then the payload. The channel is one
`repodata.json` per subdir with the archives' md5/sha256/size, as `conda index` writes.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

SUBDIR = "linux-64"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    build: str = "0"
    depends: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)  # prefix-relative path -> text
    subdir: str = SUBDIR
    links: dict[str, str] = field(default_factory=dict)  # prefix-relative path -> link target

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.build}.tar.bz2"


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 1_700_000_000
    tar.addfile(info, io.BytesIO(data))


def build(package: Package, out_dir: Path) -> Path:
    """Write package's .tar.bz2 into out_dir/<subdir>/ and return its path."""
    index = {
        "name": package.name,
        "version": package.version,
        "build": package.build,
        "build_number": 0,
        "depends": list(package.depends),
        "subdir": package.subdir,
        "arch": "x86_64" if package.subdir == "linux-64" else None,
        "platform": "linux" if package.subdir == "linux-64" else None,
        "timestamp": 1_700_000_000_000,
        "license": "MIT",
    }
    payload = {path: text.encode() for path, text in sorted(package.files.items())}
    paths = {
        "paths_version": 1,
        "paths": [
            {
                "_path": path,
                "path_type": "hardlink",
                "sha256": hashlib.sha256(data).hexdigest(),
                "size_in_bytes": len(data),
            }
            for path, data in payload.items()
        ]
        + [{"_path": path, "path_type": "softlink"} for path in sorted(package.links)],
    }
    target = out_dir / package.subdir / package.filename
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w:bz2") as tar:
        _add(tar, "info/index.json", json.dumps(index, indent=1).encode())
        _add(tar, "info/paths.json", json.dumps(paths, indent=1).encode())
        listed = [*payload, *sorted(package.links)]
        _add(tar, "info/files", "".join(f"{p}\n" for p in listed).encode())
        for path, data in payload.items():
            _add(tar, path, data, 0o755 if path.startswith("bin/") else 0o644)
        for path, target in sorted(package.links.items()):
            info = tarfile.TarInfo(path)
            info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, 1_700_000_000
            tar.addfile(info)
    return target


def write_repodata(channel: Path) -> None:
    """repodata.json for every subdir of channel (noarch always exists, possibly empty)."""
    (channel / "noarch").mkdir(parents=True, exist_ok=True)
    for subdir in sorted(p for p in channel.iterdir() if p.is_dir()):
        packages: dict[str, dict[str, object]] = {}
        for archive in sorted(subdir.glob("*.tar.bz2")):
            with tarfile.open(archive) as tar:
                member = tar.extractfile("info/index.json")
                assert member is not None
                entry = json.loads(member.read())
            data = archive.read_bytes()
            entry.update(
                md5=hashlib.md5(data).hexdigest(),
                sha256=hashlib.sha256(data).hexdigest(),
                size=len(data),
            )
            packages[archive.name] = {k: v for k, v in entry.items() if v is not None}
        repodata = {
            "info": {"subdir": subdir.name},
            "packages": packages,
            "packages.conda": {},
            "repodata_version": 1,
        }
        (subdir / "repodata.json").write_text(json.dumps(repodata, indent=1, sort_keys=True))


def make_channel(channel: Path, packages: list[Package]) -> str:
    """Build packages into channel, index it, return its file:// URL."""
    for package in packages:
        build(package, channel)
    write_repodata(channel)
    return channel.resolve().as_uri()


def python_standin(version: str = "3.12.0", *, system_site_packages: bool = True) -> Package:
    """A `python` package whose prefix is a venv of the Python running the tests (pyvenv.cfg +
    bin/python links): `PREFIX/bin/python -m pip install` then installs into the prefix,
    as with conda-forge's python, without shipping an interpreter. system_site_packages=False:
    the env sees none of the test Python's packages (no torch); add pip_standin() for pip."""
    import sys
    import sysconfig

    real = Path(sys.executable).resolve()
    cfg = (
        f"home = {real.parent}\n"
        f"include-system-site-packages = {str(system_site_packages).lower()}\n"
        f"version = {sysconfig.get_python_version()}\n"
    )
    return Package(
        "python", version, files={"pyvenv.cfg": cfg},
        links={"bin/python": str(real), "bin/python3": "python"},
    )  # fmt: skip


PIP_ONLY = """\
import importlib.machinery
import sys

SITE = {site!r}


class PipOnly:
    \"\"\"Finds the top-level `pip` package in the test Python's site-packages, nothing else.\"\"\"

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "pip":
            return None
        return importlib.machinery.PathFinder.find_spec(name, [SITE])


sys.meta_path.append(PipOnly)
"""


def pip_standin(version: str = "25.0") -> Package:
    """A `pip` package for a python_standin(system_site_packages=False) env: a .pth hook that
    lets the env's Python import the test Python's pip (which vendors its dependencies) and
    no other package of it, as conda-forge's pip package gives an env pip and nothing else."""
    import sysconfig

    import pip

    site_dir = str(Path(pip.__file__).resolve().parent.parent)
    lib = f"lib/python{sysconfig.get_python_version()}/site-packages"
    return Package(
        "pip", version, depends=("python",),
        files={
            f"{lib}/rocmfa_pip_standin.pth": "import rocmfa_pip_standin\n",
            f"{lib}/rocmfa_pip_standin.py": PIP_ONLY.format(site=site_dir),
        },
    )  # fmt: skip
