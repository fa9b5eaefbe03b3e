"""The torch x AOTriton pin set must agree (0.12b changed the varlen LSE shape, 0.13b the .aks2
packing): [pytorch.aotriton] records what the torch pin's aotriton.cmake names (update_pins).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from rocmfa.env import archs
from rocmfa.plumbing import pin_files
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError
from rocmfa.sources import pins

RECORD_TABLE = "pytorch.aotriton"


def recorded(pytorch: pins.Pin) -> pins.ResolvedAotriton | None:
    """The [pytorch.aotriton] record, when read at this torch commit (not a public record)."""
    table = pytorch.data.get("aotriton")
    if not isinstance(table, Mapping) or table.get("pytorch_commit") == "":
        return None
    where = f"pins/pytorch.toml [{RECORD_TABLE}]"
    keys = ("pytorch_commit", "commit", "source")
    at, commit, source = (pin_files.text(table, k, where) for k in keys)
    version = pin_files.text(table, "version", where, empty_ok=True) if "version" in table else ""
    fresh = at == pytorch.commit  # else read at an older torch pin: stale
    return pins.ResolvedAotriton(commit, version or None, source, None) if fresh else None


def read_from_torch(pytorch: pins.Pin, *, workdir=None, environ=None, out=None):
    """Read the torch pin's aotriton.cmake (checkout, cache or HTTP); UserError if it cannot."""
    environ = dict(os.environ if environ is None else environ)
    environ.pop(pins.AOTRITON_COMMIT_ENV, None)  # the file's own pin, not a local override
    return pins.resolve_aotriton_from_pytorch(pytorch, workdir=workdir, environ=environ, out=out)


def problem(aotriton: pins.Pin, version: str, named, pytorch: pins.Pin) -> str:
    """'' when they agree, else one sentence saying how they differ."""
    key, both = archs.aotriton_version_key, named.version and version
    if key(named.version)[:2] == key(version)[:2] if both else named.commit == aotriton.commit:
        return ""
    return (
        f"pins disagree: torch {pytorch.commit[:12]} ({pytorch.ref}) names AOTriton "
        f"{named.version or '?'} ({named.commit[:12]}) in its {pins.AOTRITON_CMAKE} "
        f"[{named.source}], but pins/aotriton.toml pins {version} ({aotriton.commit[:12]}); "
        'pin that AOTriton (or commit = "from-pytorch") or another torch'
    )


def check(aotriton, version: str, *, force, runner=None, workdir=None, environ=None, out=None):
    """[the torch line, the verdict]; UserError for a set that disagrees or cannot be read,
    unless force (a warning); a dry run that cannot read it notes that the real run refuses."""
    head = pin_files.describe_line(pin_files.pins_dir(None, environ), environ)
    if aotriton.data.get("pytorch_cmake") is not None:
        return [head, f"pin set: AOTriton follows the torch pin ({aotriton.source})"]
    runner = runner or Runner(out=out)
    try:
        pytorch = pins.load_pin("pytorch", workdir=workdir, environ=environ, out=out)
        where = {"workdir": workdir, "environ": environ, "out": out}
        named = recorded(pytorch) or read_from_torch(pytorch, **where)
    except UserError as e:
        later = "pin set: checked once the real run has resolved the torch pin"
        if isinstance(e, pin_files.Unresolved) and (line := runner.plan_line(later)):
            return [head, line]  # the real run resolves it first: update_pins.resolve_for_build
        found = f"cannot tell which AOTriton the torch pin names ({e}); "
        found += "nox -s update_pins records it in pins/pytorch.toml"
        refused = f"note: {found}; the real run refuses this (--force to go on)"
        if not force and (line := runner.plan_line(refused)):
            return [head, line]
    else:
        if not (found := problem(aotriton, version, named, pytorch)):
            same = "" if named.commit == aotriton.commit else f" (torch names {named.commit[:12]})"
            return [
                head,
                f"pin set: torch {pytorch.commit[:12]} names AOTriton {named.version or '?'} "
                f"[{named.source}]; pinned {version} {aotriton.commit[:12]}{same}: same line",
            ]
    if not force:
        raise UserError(found + "; --force to go on anyway")
    return [head, f"WARNING (--force): {found}"]
