"""A maintainer's tool, not a session: assemble the file:// conda channel conda-lock.yml was
solved against from the records of pixi.lock files (docs/conda-lock.md).

    python -m tests.support.channel_from_locks OUT_DIR PIXI_LOCK [PIXI_LOCK ...]
    python -m tests.support.channel_from_locks OUT_DIR --fetched DIR     (the sources named in
        scripts/rocmfa/data/conda_sources.toml, fetched into DIR; --fetch-commands prints how)

A pixi.lock keeps each file's repodata record whole (read with py-rattler's lock parser). Every
source holding a file must give it the same record, else nothing is written. OUT_DIR gets
<subdir>/repodata.json and sources.json (who supplied each file); no archives.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmfa.env.lockfile import repodata_entry
from rocmfa.plumbing import stamps
from rocmfa.plumbing.errors import UserError, load_toml
from rocmfa.plumbing.options import DATA_DIR

SOURCES_FILE = DATA_DIR / "conda_sources.toml"


def read_pixi_lock(path: Path, platform: str) -> dict[tuple[str, str], dict[str, Any]]:
    """{(subdir, filename): entry} of every environment of a pixi.lock for platform (+ noarch)."""
    import rattler

    try:
        lock = rattler.LockFile.from_path(path)
    except Exception as e:  # rattler's parse errors
        raise UserError(f"{path}: not a readable pixi.lock ({str(e).splitlines()[0]})") from None
    return {(record.subdir, record.file_name): repodata_entry(record)
            for _name, env in lock.environments() for on in env.platforms() if on.name == platform
            for record in env.conda_repodata_records_for_platform(on) or []}  # fmt: skip


def assemble(sources: list[Path] | dict[str, Path], out: Path,
             platform: str = "linux-64") -> dict[str, int]:  # fmt: skip
    """sources: paths, or {label: path} (the label names the source in sources.json). In any
    order, one record per file, or a UserError naming the files the sources disagree on."""
    labelled = sources if isinstance(sources, dict) else {str(p): p for p in sources}
    held: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}  # file -> {source: entry}
    for label in sorted(labelled):  # messages the same in any order
        for key, entry in read_pixi_lock(labelled[label], platform).items():
            held.setdefault(key, {})[label] = entry
    conflicts = []
    for (_, filename), by_source in sorted(held.items()):
        (first, mine), *others = by_source.items()
        problems = sorted({f"{', '.join(keys)} ({first} vs {label})" for label, entry in others
                           if (keys := sorted(k for k in {*mine, *entry}
                                              if mine.get(k) != entry.get(k)))})  # fmt: skip
        conflicts += [f"{filename}: {'; '.join(problems)}"] if problems else []
    if conflicts:
        more = f" | and {len(conflicts) - 3} more" if len(conflicts) > 3 else ""
        raise UserError(f"{len(conflicts)} file(s) have different records in different "
                        f"sources; drop or fix one of each pair: "
                        f"{' | '.join(conflicts[:3])}{more}")  # fmt: skip
    chosen = {key: next(iter(by_source.values())) for key, by_source in held.items()}
    supplied = {filename: sorted(by_source) for (_, filename), by_source in held.items()}
    return write_channel(chosen, out, platform, supplied)


def write_channel(entries: dict[tuple[str, str], dict[str, Any]], out: Path, platform: str,
                  supplied: dict[str, list[str]]) -> dict[str, int]:  # fmt: skip
    counts = {}
    for subdir in (platform, "noarch"):
        mine = {f: e for (s, f), e in sorted(entries.items()) if s == subdir}
        repodata = {
            "info": {"subdir": subdir},
            "packages": {f: e for f, e in mine.items() if not f.endswith(".conda")},
            "packages.conda": {f: e for f, e in mine.items() if f.endswith(".conda")},
            "repodata_version": 1,
        }
        (out / subdir).mkdir(parents=True, exist_ok=True)
        (out / subdir / "repodata.json").write_text(json.dumps(repodata, indent=1) + "\n")
        counts[subdir] = len(mine)
    (out / "sources.json").write_text(json.dumps(supplied, indent=1, sort_keys=True) + "\n")
    return counts


@dataclass(frozen=True)
class Source:
    repo: str
    commit: str
    path: str
    sha256: str

    @property
    def label(self) -> str:
        return f"{self.repo}@{self.commit[:8]}:{self.path}"

    @property
    def raw_url(self) -> str:
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{self.path}"

    def fetched(self, folder: Path) -> Path:
        return folder / self.repo / self.commit / self.path


def named_sources(path: Path = SOURCES_FILE) -> list[Source]:
    data = load_toml(path, "conda lock sources")
    try:
        return [Source(s["repo"], s["commit"], s["path"], s["sha256"]) for s in data["source"]]
    except (KeyError, TypeError) as e:
        raise UserError(f"{path}: a [[source]] lacks repo, commit, path or sha256: {e}") from None


def fetch_commands(folder: Path, sources: list[Source]) -> list[str]:
    return [f"curl -fsSL --create-dirs -o {s.fetched(folder)} {s.raw_url}" for s in sources]


def verified_sources(folder: Path, sources: list[Source]) -> dict[str, Path]:
    for source, fetch in zip(sources, fetch_commands(folder, sources), strict=True):
        path = source.fetched(folder)
        if not path.is_file():
            raise UserError(f"{path} is missing; fetch it: {fetch}  (or: --fetch-commands)")
        if (digest := stamps.file_sha256(path)) != source.sha256:
            raise UserError(f"{path}: sha256 {digest} is not the {source.sha256} that "
                            f"{SOURCES_FILE.name} names for {source.label}")  # fmt: skip
    return {source.label: source.fetched(folder) for source in sources}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("sources", type=Path, nargs="*", help="pixi.lock files")
    parser.add_argument("--fetched", type=Path, metavar="DIR",
                        help=f"the sources of {SOURCES_FILE.name}, fetched into DIR")  # fmt: skip
    parser.add_argument("--fetch-commands", action="store_true",
                        help="print the commands that fetch them into --fetched DIR")  # fmt: skip
    parser.add_argument("--platform", default="linux-64")
    args = parser.parse_args(argv)
    try:
        if (args.fetch_commands or args.fetched) and (args.sources or not args.fetched):
            raise UserError("--fetched DIR takes the place of SOURCE arguments")
        if args.fetch_commands:
            print("\n".join(fetch_commands(args.fetched, named_sources())))
            return 0
        if not (args.sources or args.fetched):
            raise UserError("name the lock files to read, or --fetched DIR")
        sources = verified_sources(args.fetched, named_sources()) if args.fetched else args.sources
        counts = assemble(sources, args.out, args.platform)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{args.out.resolve().as_uri()}: {', '.join(f'{n} in {s}' for s, n in counts.items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
