"""Assemble a file:// conda channel from the records of existing conda-lock.yml files.

    python -m scripts.env.channel_from_locks OUT_DIR LOCK [LOCK ...] [--platform linux-64]

Each conda record of a lock (name, version, url, md5, sha256, dependencies) becomes an entry
of OUT_DIR/<subdir>/repodata.json (subdir and filename from its url; build string from the
filename; build number from the build string's trailing `_N`, conda-forge's convention;
dependencies as the lock keeps them, i.e. without build constraints). OUT_DIR/sources.json
says which lock supplied each file. The archives themselves are not copied: `nox -s lock
-- --channel file://OUT_DIR` solves against this channel and writes the records' own URLs
(the channel's, e.g. conda-forge), which is how conda-lock.yml here was made
(docs/conda-lock.md). Serves as a mirror's index too: put the archives beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from scripts.plumbing.errors import UserError

ARCHIVE_SUFFIXES = (".conda", ".tar.bz2")


def split_filename(name: str, version: str, filename: str) -> str:
    """The build string of <name>-<version>-<build>.conda|.tar.bz2."""
    stem = next((filename[: -len(s)] for s in ARCHIVE_SUFFIXES if filename.endswith(s)), None)
    prefix = f"{name}-{version}-"
    if stem is None or not stem.startswith(prefix) or len(stem) == len(prefix):
        raise UserError(f"{filename}: not a {name}-{version}-<build> conda archive name")
    return stem[len(prefix) :]


def build_number(build: str) -> int:
    tail = build.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def dependency(name: str, spec: str) -> str:
    """A match spec from a lock's {name: spec} pair. Some writers put the whole spec in the
    key with '*' as value (`gcc_linux-64 13.3.0 h6f18a23_11: '*'`)."""
    spec = str(spec).strip()
    if " " in name.strip():
        return name.strip() if spec in ("", "*") else f"{name.strip()} {spec}"
    return f"{name} {spec}".strip()


def repodata_entry(package: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(subdir, filename, entry) for one conda record of a conda-lock.yml."""
    url = package["url"]
    subdir, quoted = url.rsplit("/", 2)[-2:]
    filename = urllib.parse.unquote(quoted)  # epochs: x264-1%21164... is x264-1!164...
    build = split_filename(package["name"], str(package["version"]), filename)
    depends = [dependency(n, spec) for n, spec in (package.get("dependencies") or {}).items()]
    entry: dict[str, Any] = {
        "name": package["name"],
        "version": str(package["version"]),
        "build": build,
        "build_number": build_number(build),
        "depends": sorted(depends),
        "subdir": subdir,
        "md5": package["hash"]["md5"],
        "sha256": package["hash"]["sha256"],
    }
    if subdir == "noarch":
        # The lock does not say which kind; python's kind only matters when linking, and
        # installs read the archive's own index.json.
        entry["noarch"] = (
            "python" if "python" in (package.get("dependencies") or {}) else ("generic")
        )
    return subdir, filename, entry


def read_lock(path: Path) -> list[dict[str, Any]]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
        packages = data["package"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as e:
        raise UserError(f"{path}: not a readable conda-lock.yml ({e})") from None
    return [p for p in packages if p.get("manager", "conda") == "conda"]


def assemble(locks: list[Path], out: Path, platform: str = "linux-64") -> dict[str, int]:
    """Write out/<platform>/repodata.json, out/noarch/repodata.json, out/sources.json."""
    subdirs: dict[str, dict[str, dict[str, Any]]] = {platform: {}, "noarch": {}}
    supplied: dict[str, str] = {}
    for lock in locks:
        for package in read_lock(lock):
            if package.get("platform") != platform or not package.get("hash", {}).get("sha256"):
                continue
            subdir, filename, entry = repodata_entry(package)
            if subdir not in subdirs:
                continue
            known = subdirs[subdir].get(filename)
            if known is not None:
                if known["sha256"] != entry["sha256"]:
                    raise UserError(
                        f"{filename}: {lock} and {supplied[filename]} give different sha256"
                    )
                continue
            subdirs[subdir][filename] = entry
            supplied[filename] = str(lock)
    for subdir, entries in subdirs.items():
        key = "packages.conda"
        repodata = {
            "info": {"subdir": subdir},
            "packages": {f: e for f, e in sorted(entries.items()) if not f.endswith(".conda")},
            key: {f: e for f, e in sorted(entries.items()) if f.endswith(".conda")},
            "repodata_version": 1,
        }
        (out / subdir).mkdir(parents=True, exist_ok=True)
        (out / subdir / "repodata.json").write_text(json.dumps(repodata, indent=1) + "\n")
    (out / "sources.json").write_text(json.dumps(dict(sorted(supplied.items())), indent=1) + "\n")
    return {subdir: len(entries) for subdir, entries in subdirs.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("locks", type=Path, nargs="+")
    parser.add_argument("--platform", default="linux-64")
    args = parser.parse_args(argv)
    try:
        counts = assemble(args.locks, args.out, args.platform)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    summary = ", ".join(f"{n} in {s}" for s, n in counts.items())
    print(f"{args.out.resolve().as_uri()}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
