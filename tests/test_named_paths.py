"""Every repository path that README, docs/ and the sessions' --help name exists (files move
between subpackages; the texts that name them must move with them). Not checked: example
layouts in fenced code blocks, patterns (<project>, {family}, X.py, ...), and upstream paths
(docs/upstream-interfaces.md cites TheRock's and CK's files): a path whose first folder below
the top is not one of ours."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

from rocmfa.plumbing import options

REPO_ROOT = Path(__file__).resolve().parent.parent
TOP = ("scripts", "tests", "docs", "pins", "patches", ".github")
PATH = re.compile(r"(?<![\w./<{-])((?:" + "|".join(map(re.escape, TOP)) + r")/[\w./-]*[\w/])")


FENCED = re.compile(r"^```.*?^```", re.M | re.S)


def named_paths(text: str) -> set[str]:
    found = set()
    text = FENCED.sub("", text)
    for match in PATH.finditer(text):
        path, end = match.group(1).rstrip("/."), match.end()
        if text[end : end + 1] in ("<", "{", "*") or "..." in match.group(1) or "/X." in path:
            continue  # a pattern, not a path
        parts = path.split("/")
        ours = (REPO_ROOT / parts[0] / parts[1]).exists()
        if not ours and (len(parts) > 2 or "." not in parts[1]):
            continue  # an upstream repository's path
        found.add(path)
    return found


RAW = REPO_ROOT / "docs" / "results" / "raw.tar.xz"  # docs/results' raw JSON and logs


def exists(path: str) -> bool:
    """The path, the module of a `scripts/x/module.function` reference, or a raw result kept in
    docs/results/raw.tar.xz (its README says so)."""
    module = re.sub(r"\.\w+$", "", path) + ".py"
    if (REPO_ROOT / path).exists() or (REPO_ROOT / module).exists():
        return True
    with tarfile.open(RAW) as raw:
        return path.removeprefix("docs/results/") in raw.getnames()


def texts() -> dict[str, str]:
    found = {"README.md": (REPO_ROOT / "README.md").read_text()}
    for doc in sorted((REPO_ROOT / "docs").rglob("*.md")):
        found[str(doc.relative_to(REPO_ROOT))] = doc.read_text()
    for declared in options.SESSIONS:
        found[f"nox -s {declared.name} -- --help"] = options.build_parser(
            declared.name
        ).format_help()
    return found


def test_every_named_repository_path_exists() -> None:
    missing = [
        f"{where}: {path}"
        for where, text in texts().items()
        for path in sorted(named_paths(text))
        if not exists(path)
    ]
    assert not missing, "named but not in the repository: " + "; ".join(missing)


def test_the_path_reader_finds_paths_and_skips_patterns() -> None:
    text = "see scripts/rocmfa/env/doctor.py, pins/<project>.toml and patches/{project}/ or "
    text += "tests/x_*.py."
    text += (
        " TheRock's docs/packaging/x.md; scripts/backend_check.py; scripts/rocmfa/builds/publish.py"
    )
    assert named_paths(text) == {
        "scripts/rocmfa/env/doctor.py",
        "scripts/backend_check.py",
        "scripts/rocmfa/builds/publish.py",
    }
    assert exists("scripts/rocmfa/sources/pins.load_pin") and not exists(
        "scripts/rocmfa/builds/publish.py"
    )
