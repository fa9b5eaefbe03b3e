"""Submodules as pinned data: a pin's `submodules` lists exactly the paths a checkout initialises
(`git submodule update --init -- <paths>`), read by update_pins from the pinned commit's tree.
Only a gitlink that .gitmodules maps can be initialised: the gfx908 port at 60639c72 has a
gitlink third_party/aiter with no .gitmodules entry, and `--init --recursive` stops at it ("No
url found for submodule path 'third_party/aiter' in .gitmodules") before initialising anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from rocmfa.plumbing.commands import Runner
from rocmfa.plumbing.errors import UserError


def pinned_paths(data: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The submodule paths recorded for a pin (its `submodules` key); () when it has none."""
    value = data.get("submodules", [])
    if value is True:
        raise UserError(
            f"{where}: 'submodules = true' initialises whatever .gitmodules lists, which fails on "
            "an unmapped gitlink; list the paths instead (nox -s update_pins records them)"
        )
    if value is False:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(p, str) and p for p in value):
        raise UserError(f"{where}: 'submodules' must be a list of submodule paths")
    for path in value:
        if path.startswith(("/", "-")) or ".." in PurePosixPath(path).parts:
            raise UserError(f"{where}: submodule path {path!r} must be relative, inside the tree")
    return tuple(value)


class TreeSubmodules(NamedTuple):
    initialisable: tuple[str, ...]  # gitlinks (mode 160000) that .gitmodules maps to a url
    unmapped: tuple[str, ...]  # gitlinks without a .gitmodules entry


def read_tree_submodules(runner: Runner, repo: Path, commit: str) -> TreeSubmodules:
    """Gitlinks at commit in repo, split by whether .gitmodules maps them (read-only)."""
    tree = runner.run(["git", "ls-tree", "-r", "--full-tree", commit], cwd=repo, capture=True,
                      check=False)  # fmt: skip
    if tree.returncode != 0:
        raise UserError(f"{repo}: cannot list the tree of {commit[:12]}")
    gitlinks = sorted(
        line.partition("\t")[2] for line in tree.stdout.splitlines() if line.startswith("160000 ")
    )
    keys = ["--get-regexp", r"^submodule\..*\.path$"]
    config = runner.run(["git", "config", "--blob", f"{commit}:.gitmodules", *keys], cwd=repo,
                        capture=True, check=False)  # fmt: skip
    mapped = {line.split(" ", 1)[1] for line in config.stdout.splitlines() if " " in line}
    return TreeSubmodules(
        tuple(p for p in gitlinks if p in mapped), tuple(p for p in gitlinks if p not in mapped)
    )
