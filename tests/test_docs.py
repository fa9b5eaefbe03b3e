"""The repository stands on its own: comments and docs cite upstream files and commits (or
docs/ here), never the team's reference notes outside it, and the README's session table is
the one `nox -l` shows."""

from __future__ import annotations

import json
import re
import subprocess

from tests.support.project import REPO_ROOT, run_nox

# Built from pieces so this file does not cite them itself.
OUTSIDE_NOTES = (
    *(
        name + ".md"
        for name in ("upstream-facts", "user-pitfalls", "tooling-facts", "benchmarking")
    ),
    "shared/" + "reference",
    "upstream-" + "facts §",
    "user-" + "pitfalls §",
)


def tracked_text_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    return [name for name in listed if (REPO_ROOT / name).is_file()]


def test_no_file_cites_the_reference_notes_outside_the_repository() -> None:
    found = []
    for name in tracked_text_files():
        try:
            text = (REPO_ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{name}: {note}" for note in OUTSIDE_NOTES if note in text]
    assert not found, "cite the upstream file and commit, or docs/: " + "; ".join(found)


def readme_sessions() -> dict[str, bool]:
    """session -> default (yes/no) from the README's "## Sessions" table."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("\n## Sessions\n", 1)[1].split("\n## ", 1)[0]
    table: dict[str, bool] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[1] in ("yes", "no"):
            for name in re.findall(r"`([a-z_]+)`", cells[0]):
                table[name] = cells[1] == "yes"
    return table


def test_readme_session_table_matches_nox_list() -> None:
    listing = run_nox(REPO_ROOT, "-l").stdout
    every = re.findall(r"^[*-] ([a-z_]+)\b", listing, re.MULTILINE)
    default = {s["name"] for s in json.loads(run_nox(REPO_ROOT, "-l", "--json").stdout)}
    described = json.loads(run_nox(REPO_ROOT, "-l", "--json", "-s", *every).stdout)
    assert {s["name"] for s in described} == set(every) and default <= set(every)
    assert readme_sessions() == {name: name in default for name in every}
