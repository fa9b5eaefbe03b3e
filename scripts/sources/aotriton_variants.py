"""AOTriton source variants (pins/aotriton_variants.toml): which AOTriton source an arch builds.

Upstream ROCm/aotriton (pins/aotriton.toml) is the default. An arch that upstream does not
support may have a variant - a third-party port such as the community gfx908 fork - pinned the
same way (url, ref, resolved commit) plus why it exists and its status. `--aotriton-source`
overrides the choice: `upstream` never uses a variant, a variant name forces that variant.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.plumbing import pin_schema
from scripts.plumbing.datafiles import load_toml, require
from scripts.plumbing.errors import UserError
from scripts.sources import pins, submodules

VARIANTS_FILE = "aotriton_variants.toml"
UPSTREAM = "upstream"
STATUSES = ("community", "vendor")
TESTED = ("untested", "tested")


@dataclass(frozen=True)
class Variant:
    name: str
    pin: pins.Pin
    status: str
    tested: str
    why: str
    arches: tuple[str, ...]
    pack: str
    gpus: tuple[str, ...]
    dtypes: tuple[str, ...]
    tuner: str
    tune_head_dims: tuple[int, ...]

    def describe(self) -> str:
        return (
            f"AOTriton variant '{self.name}': {self.pin.url} at {self.pin.commit[:12]} "
            f"({self.pin.ref}) - {self.status} port, {self.tested}: NOT upstream ROCm/aotriton, "
            f"not tested by AMD"
        )


def load_variants(pins_dir: str | os.PathLike[str] | None = None) -> dict[str, Variant]:
    directory = pins.resolve_pins_dir(pins_dir)
    path = directory / VARIANTS_FILE
    if not path.is_file():
        return {}
    table = load_toml(path, "AOTriton variants").get("variant", {})
    if not isinstance(table, dict):
        raise UserError(f"{path}: [variant.<name>] tables expected")
    return {name: _parse(name, raw, path) for name, raw in table.items()}


def _strings(raw: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    values = require(raw, key, list, where)
    if not values or not all(isinstance(v, str) and v for v in values):
        raise UserError(f"{where}: '{key}' must be a non-empty list of strings")
    return tuple(values)


def _parse(name: str, raw: Any, path: Path) -> Variant:
    where = f"{path.name} [variant.{name}]"
    if not isinstance(raw, dict):
        raise UserError(f"{where}: must be a table")
    commit = pin_schema.check_commit(require(raw, "commit", str, where).strip(), where)
    status = require(raw, "status", str, where)
    tested = require(raw, "tested", str, where)
    if status not in STATUSES:
        raise UserError(f"{where}: 'status' must be one of {', '.join(STATUSES)}, got {status!r}")
    if tested not in TESTED:
        raise UserError(f"{where}: 'tested' must be one of {', '.join(TESTED)}, got {tested!r}")
    data = {
        "version": require(raw, "version", str, where),
        "submodules": submodules.pinned_paths(raw, where),
        "variant": name,
    }
    pin = pins.Pin(
        "aotriton",
        require(raw, "url", str, where),
        require(raw, "ref", str, where),
        commit,
        f"pins/{VARIANTS_FILE} [variant.{name}]",
        data,
    )
    return Variant(
        name,
        pin,
        status,
        tested,
        " ".join(require(raw, "why", str, where).split()),
        _strings(raw, "arches", where),
        require(raw, "pack", str, where),
        _strings(raw, "gpus", where),
        _strings(raw, "dtypes", where),
        require(raw, "tuner", str, where),
        _head_dims(raw, where),
    )


def _head_dims(raw: dict[str, Any], where: str) -> tuple[int, ...]:
    values = raw.get("tune_head_dims", [64, 128])
    if not isinstance(values, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values
    ):
        raise UserError(f"{where}: 'tune_head_dims' must be a list of positive integers")
    return tuple(values)


def choose(
    arch: str, requested: str | None, pins_dir: str | os.PathLike[str] | None = None
) -> Variant | None:
    """The variant arch builds: None means upstream. requested is --aotriton-source."""
    variants = load_variants(pins_dir)
    if requested == UPSTREAM:
        return None
    if requested:
        if requested not in variants:
            known = ", ".join([UPSTREAM, *variants]) or UPSTREAM
            raise UserError(f"--aotriton-source {requested!r}: unknown; known: {known}")
        chosen = variants[requested]
        if arch not in chosen.arches:
            raise UserError(
                f"--aotriton-source {requested}: built for {', '.join(chosen.arches)}, not {arch}"
            )
        return chosen
    return next((v for v in variants.values() if arch in v.arches), None)


def update_variant_pins(
    runner, resolve, pins_dir: str | os.PathLike[str] | None = None, *, record=None
) -> None:
    """update_pins for variants: resolve each variant's ref with resolve(runner, url, ref) and
    rewrite only its commit line, as for pins/aotriton.toml; then record(path, table, url,
    commit, checkout name) re-reads what else is recorded with the commit (submodules)."""
    directory = pins.resolve_pins_dir(pins_dir)
    path = directory / VARIANTS_FILE
    for name, variant in load_variants(directory).items():
        new = resolve(runner, variant.pin.url, variant.pin.ref)
        label = f"aotriton variant {name}"
        if runner.dry_run:
            runner.say(f"[dry-run] {label}: would set commit to what {variant.pin.ref} resolves to")
        elif new == variant.pin.commit:
            runner.say(f"{label}: {variant.pin.ref} is still {new[:12]} (unchanged)")
        else:
            pins.rewrite_commit(path, "variant", new, table=f"variant.{name}")
            runner.say(f"{label}: {variant.pin.ref} {variant.pin.commit[:12]} -> {new[:12]}")
        if record is not None:
            record(path, f"variant.{name}", variant.pin.url, new, f"aotriton-{name}")
