"""Write real wheel files (zip + METADATA + WHEEL + RECORD) for stand-in upstream packages."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.utils import canonicalize_name


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def make_wheel(
    out_dir: Path,
    name: str,
    version: str,
    *,
    files: Mapping[str, str | bytes] = {},
    requires: Sequence[str] = (),
    extras: Mapping[str, Sequence[str]] = {},
    console_scripts: Mapping[str, str] = {},
    executables: Sequence[str] = (),
    tag: str = "py3-none-any",
) -> Path:
    """Build name-version-tag.whl in out_dir. executables: paths in files to mark 0o755."""
    dist = canonicalize_name(name).replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Dist: {r}" for r in requires]
    for extra, reqs in extras.items():
        metadata.append(f"Provides-Extra: {extra}")
        metadata += [f'Requires-Dist: {r} ; extra == "{extra}"' for r in reqs]
    contents: dict[str, bytes] = {
        path: data.encode() if isinstance(data, str) else data for path, data in files.items()
    }
    contents[f"{info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    contents[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: rocmfa-tests\nRoot-Is-Purelib: true\nTag: {tag}\n"
    ).encode()
    if console_scripts:
        lines = ["[console_scripts]", *(f"{k} = {v}" for k, v in console_scripts.items())]
        contents[f"{info}/entry_points.txt"] = ("\n".join(lines) + "\n").encode()
    record = [f"{path},{record_hash(data)},{len(data)}" for path, data in contents.items()]
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in contents.items():
            entry = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            # pip sets +x only for regular-file modes (S_IFREG) with an exec bit
            entry.external_attr = (0o100755 if path in executables else 0o100644) << 16
            zf.writestr(entry, data, zipfile.ZIP_DEFLATED)
    return wheel


def installed(prefix: Path, name: str) -> str | None:
    """The version of distribution name in the env at prefix, or None (its own Python asks)."""
    program = (
        "import sys\nfrom importlib import metadata\n"
        "try: print(metadata.version(sys.argv[1]))\n"
        "except metadata.PackageNotFoundError: print('')\n"
    )
    out = subprocess.run(
        [prefix / "bin" / "python", "-c", program, name], capture_output=True, text=True
    )
    return out.stdout.strip() or None


# torch 2.13.0's run-time requirements (its Requires-Dist less the extras) and theirs, each at
# the version installed here from PyPI, with the Requires-Dist of its own METADATA (extras
# left out): a loopback index of these stands in for PyPI when install_wheels has pip resolve
# torch's requirements. (name, version, import name, requires)
TORCH_RUNTIME = (
    ("filelock", "3.32.7", "filelock", ()),
    ("typing_extensions", "4.15.0", "typing_extensions", ()),
    ("setuptools", "84.2.1", "setuptools", ()),
    ("sympy", "1.14.0", "sympy", ("mpmath<1.4,>=1.1.0",)),
    ("mpmath", "1.3.0", "mpmath", ()),
    ("networkx", "3.6.1", "networkx", ()),
    ("jinja2", "3.1.6", "jinja2", ("MarkupSafe>=2.0",)),
    ("MarkupSafe", "3.0.3", "markupsafe", ()),
    ("fsspec", "2026.9.0", "fsspec", ()),
)


def torch_runtime_wheels(out_dir: Path) -> Path:
    """Stand-in wheels of TORCH_RUNTIME in out_dir (each importable: a module with __version__)."""
    for name, version, module, requires in TORCH_RUNTIME:
        init = f"{module}.py" if module == "typing_extensions" else f"{module}/__init__.py"
        make_wheel(
            out_dir, name, version, files={init: f"__version__ = {version!r}\n"}, requires=requires
        )
    return out_dir
