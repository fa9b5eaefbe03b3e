"""Submodules as pinned data: the exact submodule paths a checkout initialises.

A pin's `submodules` is a list of paths, read from the pinned commit itself (its gitlinks and
its .gitmodules) and recorded next to the commit by `nox -s update_pins`. Only a gitlink that
.gitmodules maps can be initialised: the gfx908 port at 60639c72 has a gitlink
third_party/aiter with no .gitmodules entry, and `git submodule update --init --recursive`
stops at it ("No url found for submodule path 'third_party/aiter' in .gitmodules") before
initialising anything. So the checkout names the recorded paths instead
(`git submodule update --init -- <paths>`), and an unmapped gitlink is reported, not used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from scripts.plumbing.commands import Runner
from scripts.plumbing.errors import UserError

GITLINK_MODE = "160000"
PATH_KEYS = r"^submodule\..*\.path$"


def pinned_paths(data: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The submodule paths recorded for a pin (its `submodules` key); () when it has none."""
    value = data.get("submodules", [])
    if value is False:
        return ()
    if value is True:
        raise UserError(
            f"{where}: 'submodules = true' initialises whatever .gitmodules lists, which fails on "
            "an unmapped gitlink; list the paths instead (nox -s update_pins records them)"
        )
    if not isinstance(value, list | tuple) or not all(isinstance(p, str) and p for p in value):
        raise UserError(f"{where}: 'submodules' must be a list of submodule paths")
    for path in value:
        parts = PurePosixPath(path).parts
        if path.startswith("/") or ".." in parts or path.startswith("-"):
            raise UserError(f"{where}: submodule path {path!r} must be relative, inside the tree")
    return tuple(value)


@dataclass(frozen=True)
class TreeSubmodules:
    """What a commit's tree says about submodules."""

    gitlinks: tuple[str, ...]  # paths recorded as submodule commits (mode 160000)
    mapped: tuple[str, ...]  # paths .gitmodules maps to a url

    @property
    def initialisable(self) -> tuple[str, ...]:
        """Gitlinks that .gitmodules maps: what `--init` can fetch."""
        return tuple(p for p in self.gitlinks if p in self.mapped)

    @property
    def unmapped(self) -> tuple[str, ...]:
        """Gitlinks without a .gitmodules entry (`--init --recursive` fails on these)."""
        return tuple(p for p in self.gitlinks if p not in self.mapped)


def read_tree_submodules(runner: Runner, repo: Path, commit: str) -> TreeSubmodules:
    """Gitlinks and .gitmodules paths at commit in repo (a read-only query)."""
    tree = runner.run(
        ["git", "ls-tree", "-r", "--full-tree", commit], cwd=repo, capture=True, check=False
    )
    if tree.returncode != 0:
        raise UserError(f"{repo}: cannot list the tree of {commit[:12]}")
    gitlinks = []
    for line in tree.stdout.splitlines():
        meta, _, path = line.partition("\t")
        if meta.split()[:1] == [GITLINK_MODE]:
            gitlinks.append(path)
    mapped: list[str] = []
    config = runner.run(
        ["git", "config", "--blob", f"{commit}:.gitmodules", "--get-regexp", PATH_KEYS],
        cwd=repo,
        capture=True,
        check=False,
    )
    if config.returncode == 0:
        mapped = [line.split(" ", 1)[1] for line in config.stdout.splitlines() if " " in line]
    return TreeSubmodules(tuple(sorted(gitlinks)), tuple(sorted(mapped)))
