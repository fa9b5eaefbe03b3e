"""Tuning databases as data: <pins>/tuning/aotriton/<commit>/<arch>/ (or $ROCMFA_TUNING_DIR),
a manifest of sha256-checked files laid over modules/database (docs/tuning.md)."""

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmfa.plumbing import pin_files, stamps
from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.datafiles import TEXT, checked, filled, inside, load_toml
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import environment

MANIFEST = "manifest.toml"
UPSTREAM_DB = "modules/database"  # the tree's own database at 0.13b
FILE = {"path": (lambda v: filled(v) and inside(v), "a relative path", True), "sha256": TEXT}


def db_dir(commit: str, arch: str) -> Path:
    chosen = environment().tuning_dir
    root = Path(chosen).expanduser().resolve() if chosen else pin_files.pins_dir() / "tuning"
    return root / "aotriton" / commit / arch


HEADER = ("commit", "arch", "kind", "tuner")  # the manifest's own [tuning] keys; the rest: meta


@dataclass(frozen=True)
class TuningDb:
    directory: Path
    commit: str
    arch: str
    kind: str
    tuner: str
    files: Mapping[str, str]  # relative path -> sha256
    meta: Mapping[str, Any]

    def digest(self) -> str:
        return stamps.digest({"commit": self.commit, "arch": self.arch, "files": dict(self.files)})

    def describe(self) -> str:
        tuned = ", ".join(f"{k}={v}" for k, v in self.meta.items() if k in ("head_dims", "dtypes"))
        return f"tuning database {self.directory} ({self.kind} by {self.tuner}; {tuned})"


def load(directory: Path) -> TuningDb:
    """The database in directory, every file checked against its manifest sha256."""
    where = str(directory / MANIFEST)
    data = load_toml(directory / MANIFEST, "tuning database manifest")
    table = data.get("tuning")
    entries = data.get("file")
    if not isinstance(table, dict) or not isinstance(entries, list) or not entries:
        raise UserError(f"{where}: needs a [tuning] table and at least one [[file]]")
    files: dict[str, str] = {}
    for i, entry in enumerate(entries, 1):
        checked(entry, f"{where}: file {i}", FILE)
        name = entry["path"]
        expected = entry["sha256"]
        if not (directory / name).is_file():
            raise UserError(f"{where}: {name} is missing; refusing this tuning database")
        if (actual := stamps.file_sha256(directory / name)) != expected:
            raise UserError(
                f"{where}: {name} has sha256 {actual[:16]}..., manifest says {expected[:16]}...; "
                "refusing this tuning database (re-run nox -s tune_aotriton, or restore the file)"
            )
        files[name] = expected
    meta = {k: v for k, v in table.items() if k not in HEADER}
    header = {k: str(table.get(k, "")) for k in HEADER}
    return TuningDb(directory, files=files, meta=meta, **header)


def find(commit: str, arch: str) -> TuningDb | None:
    """The stored database for commit + arch, verified, or None."""
    directory = db_dir(commit, arch)
    if not (directory / MANIFEST).is_file():
        return None
    found = load(directory)
    if (found.commit, found.arch) != (commit, arch):
        says = f"{directory / MANIFEST}: says commit {found.commit[:12]} arch {found.arch}"
        raise UserError(f"{says}, but it lies under {commit[:12]}/{arch}; refusing")
    return found


def write(directory: Path, files: Mapping[str, Path], *, commit, arch, kind, tuner, meta):
    """Write a database through a staging directory renamed into place (never half of one)."""
    import tomlkit

    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name, source in files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, staging / name)
    listed = [{"path": n, "sha256": stamps.file_sha256(staging / n)} for n in sorted(files)]
    header = {"commit": commit, "arch": arch, "kind": kind, "tuner": tuner}
    header |= {k: list(v) if isinstance(v, tuple) else v for k, v in meta.items()}
    note = "# Written by nox -s tune_aotriton; data, verified by sha256 before any use.\n\n"
    (staging / MANIFEST).write_text(note + tomlkit.dumps({"tuning": header, "file": listed}))
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)
    return load(directory)


def build_inputs(db: TuningDb, src: Path, scratch: Path, *, runner: Runner) -> list[str]:
    """-DAOTRITON_TUNING_DATABASE_ROOT: it REPLACES modules/database (v3src/CMakeLists.txt at
    6e00ef3e), so the root is the tree's database with db's shards laid over it in scratch."""
    runner.say(f"using {db.describe()}")
    runner.apply(compose_root, db, src / UPSTREAM_DB, scratch, say=f"compose {scratch}")
    return [f"-DAOTRITON_TUNING_DATABASE_ROOT={scratch}"]


def compose_root(db: TuningDb, upstream: Path, scratch: Path) -> None:
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(upstream, scratch)
    for name in db.files:
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(db.directory / name, scratch / name)
