"""One consistent pin set: the torch we build (pins/pytorch.toml) and the AOTriton we pin
(pins/aotriton.toml) must agree.

PyTorch names its AOTriton in its own cmake/External/aotriton.cmake; a torch built against
another AOTriton release line breaks at run time (0.12b changed the varlen LSE shape, 0.13b the
.aks2 image packing). What the torch pin's file names is recorded in pins/pytorch.toml

    [pytorch.aotriton]          # written by `nox -s update_pins`, never by hand
    pytorch_commit = "<the torch commit it was read at>"
    version = "0.13b"
    commit = "<AOTriton commit>"
    source = "<file + commit read, and where from>"

A record for another torch commit is stale and ignored. Without a current record the file is
read the way `commit = "from-pytorch"` reads it (the local PyTorch checkout, the cache, else
that one file over HTTP). An AOTriton pin of `commit = "from-pytorch"` follows the torch pin
and agrees by construction. update_pins and the build sessions call check() before their first
command; --force turns a refusal into a warning.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scripts.env import archs
from scripts.plumbing import pin_files
from scripts.plumbing.errors import UserError
from scripts.sources import pins

RECORD_KEY = "aotriton"
RECORD_TABLE = "pytorch.aotriton"


@dataclass(frozen=True)
class TorchAotriton:
    """The AOTriton a torch tree's own aotriton.cmake names."""

    pytorch_commit: str
    version: str | None
    commit: str
    source: str


def recorded(pytorch: pins.Pin) -> TorchAotriton | None:
    """The [pytorch.aotriton] record, when it was read at this torch commit."""
    table = pytorch.data.get(RECORD_KEY)
    if not isinstance(table, Mapping):
        return None
    where = f"pins/pytorch.toml [{RECORD_TABLE}]"
    if table.get("pytorch_commit") == "":
        return None  # a public record, not read from the file: update_pins reads it
    values = {
        key: pin_files.text(table, key, where) for key in ("pytorch_commit", "commit", "source")
    }
    version = pin_files.text(table, "version", where, empty_ok=True) if "version" in table else None
    if values["pytorch_commit"] != pytorch.commit:
        return None  # read at an older torch pin: stale
    return TorchAotriton(pytorch.commit, version or None, values["commit"], values["source"])


def read_from_torch(
    pytorch: pins.Pin,
    *,
    workdir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    out=None,
) -> TorchAotriton:
    """Read the torch pin's aotriton.cmake (checkout, cache or HTTP); UserError if it cannot."""
    environ = {k: v for k, v in (os.environ if environ is None else environ).items()}
    environ.pop(pins.AOTRITON_COMMIT_ENV, None)  # the file's own pin, not a local override
    resolved = pins.resolve_aotriton_from_pytorch(
        pytorch, workdir=workdir, environ=environ, out=out
    )
    return TorchAotriton(pytorch.commit, resolved.version, resolved.commit, resolved.source)


def torch_names(
    pytorch: pins.Pin, *, workdir=None, environ: Mapping[str, str] | None = None, out=None
) -> TorchAotriton:
    return recorded(pytorch) or read_from_torch(pytorch, workdir=workdir, environ=environ, out=out)


def problem(aotriton: pins.Pin, version: str, named: TorchAotriton, pytorch: pins.Pin) -> str:
    """'' when they agree, else one sentence saying how they differ."""
    if named.version and version:
        if archs.aotriton_version_key(named.version)[:2] == archs.aotriton_version_key(version)[:2]:
            return ""
    elif named.commit == aotriton.commit:
        return ""
    return (
        f"pins disagree: torch {pytorch.commit[:12]} ({pytorch.ref}) names AOTriton "
        f"{named.version or '?'} ({named.commit[:12]}) in its {pins.AOTRITON_CMAKE} "
        f"[{named.source}], but pins/aotriton.toml pins {version} ({aotriton.commit[:12]}); "
        'pin that AOTriton (or commit = "from-pytorch") or another torch'
    )


def check(
    aotriton: pins.Pin,
    version: str,
    *,
    force: bool,
    dry_run: bool = False,
    workdir: str | os.PathLike[str] | Path | None = None,
    environ: Mapping[str, str] | None = None,
    out=None,
) -> list[str]:
    """Lines to print; UserError (one line) for an inconsistent or unverifiable set unless
    force, which makes it a warning. A dry run shows its plan when the torch file cannot be
    read (offline), saying that the real run refuses. The first line names the torch line
    and how its agreement is known."""
    head = pin_files.describe_line(pin_files.pins_dir(None, environ), environ)
    return [head, *_check(aotriton, version, force=force, dry_run=dry_run, workdir=workdir,
                          environ=environ, out=out)]  # fmt: skip


def _check(aotriton: pins.Pin, version: str, *, force: bool, dry_run: bool, workdir, environ,
           out) -> list[str]:  # fmt: skip
    if aotriton.data.get("pytorch_cmake") is not None:
        return [f"pin set: AOTriton follows the torch pin ({aotriton.source})"]
    try:
        pytorch = pins.load_pin("pytorch", workdir=workdir, environ=environ, out=out)
        named = torch_names(pytorch, workdir=workdir, environ=environ, out=out)
    except UserError as e:
        if dry_run and isinstance(e, pin_files.Unresolved):  # update_pins.resolve_for_build
            return ["[dry-run] pin set: checked once the real run has resolved the torch pin"]
        found = (
            f"cannot tell which AOTriton the torch pin names ({e}); "
            "nox -s update_pins records it in pins/pytorch.toml"
        )
        if dry_run and not force:
            return [f"[dry-run] note: {found}; the real run refuses this (--force to go on)"]
    else:
        found = problem(aotriton, version, named, pytorch)
        if not found:
            same = "" if named.commit == aotriton.commit else f" (torch names {named.commit[:12]})"
            return [
                f"pin set: torch {pytorch.commit[:12]} names AOTriton {named.version or '?'} "
                f"[{named.source}]; pinned {version} {aotriton.commit[:12]}{same}: same line"
            ]
    if not force:
        raise UserError(found + "; --force to go on anyway")
    return [f"WARNING (--force): {found}"]
