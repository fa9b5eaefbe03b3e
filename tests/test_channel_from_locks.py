"""channel_from_locks: a lock's own records, served as a channel, solve back to the same lock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.env import channel_from_locks, rattler_env
from scripts.plumbing.errors import UserError
from tests.support.conda_packages import Package, make_channel


@pytest.fixture(autouse=True)
def own_conda_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Repodata and package caches of each test in its own tmp dir, not ~/.cache."""
    monkeypatch.setenv("ROCMFA_CONDA_CACHE", str(tmp_path / "conda-cache"))


def test_a_lock_round_trips_through_a_channel_made_from_it(tmp_path: Path) -> None:
    mirror = make_channel(tmp_path / "mirror", [
        Package("libfoo", "1.2", files={"lib/f": "1\n"}),
        Package("libfoo", "1.0", build="h1_3", files={"lib/f": "0\n"}),
        Package("tool", "2.0", depends=("libfoo >=1.0",), files={"bin/t": "t\n"}),
        Package("py-thing", "1!0.5", build="pyh_0", depends=("python",), subdir="noarch"),
    ])  # fmt: skip
    env_file = tmp_path / "environment.yml"
    env_file.write_text("channels: [conda-forge]\nplatforms: [linux-64]\n"
                        "dependencies: [tool, libfoo<1.1, py-thing]\n")  # fmt: skip
    (tmp_path / "mirror" / "linux-64" / "python-3.12.0-0.tar.bz2").write_bytes(b"")
    with pytest.raises(UserError, match="python"):  # nothing provides python yet
        rattler_env.solve_lock(env_file, tmp_path / "a.yml", [mirror], "", say=lambda _: None)
    env_file.write_text(env_file.read_text().replace(", py-thing", ""))
    first = tmp_path / "first.yml"
    rattler_env.solve_lock(env_file, first, [mirror], "", say=lambda _: None)

    channel = tmp_path / "from-locks"
    counts = channel_from_locks.assemble([first], channel)
    assert counts == {"linux-64": 2, "noarch": 0}
    repodata = json.loads((channel / "linux-64" / "repodata.json").read_text())
    entry = repodata["packages"]["libfoo-1.0-h1_3.tar.bz2"]
    assert (entry["build"], entry["build_number"], entry["version"]) == ("h1_3", 3, "1.0")
    sources = json.loads((channel / "sources.json").read_text())
    assert sources == {"libfoo-1.0-h1_3.tar.bz2": str(first), "tool-2.0-0.tar.bz2": str(first)}

    second = tmp_path / "second.yml"
    rattler_env.solve_lock(env_file, second, [channel.as_uri()], "", say=lambda _: None)
    assert rattler_env.locked_packages(second) == rattler_env.locked_packages(first)


def test_dependencies_as_lock_writers_spell_them() -> None:
    assert channel_from_locks.dependency("libfoo", ">=1.0") == "libfoo >=1.0"
    assert channel_from_locks.dependency("binutils", "*") == "binutils *"
    assert channel_from_locks.dependency("gcc_linux-64 13.3.0 h6f18a23_11", "*") == (
        "gcc_linux-64 13.3.0 h6f18a23_11"
    )
    assert channel_from_locks.split_filename("x264", "1!164.3095", "x264-1!164.3095-h_2.conda") == (
        "h_2"
    )
    with pytest.raises(UserError, match=r"not a tool-2\.0-<build> conda archive name"):
        channel_from_locks.split_filename("tool", "2.0", "tool-2.1-0.conda")


def test_two_locks_that_disagree_on_a_files_bytes_are_refused(tmp_path: Path) -> None:
    record = ("- name: a\n  version: '1'\n  manager: conda\n  platform: linux-64\n"
              "  dependencies: {}\n  url: https://conda.anaconda.org/conda-forge/linux-64/"
              "a-1-0.conda\n  hash:\n    md5: " + "0" * 32 + "\n    sha256: SHA\n")  # fmt: skip
    for name, sha in (("one.yml", "1" * 64), ("two.yml", "2" * 64)):
        (tmp_path / name).write_text("version: 1\npackage:\n" + record.replace("SHA", sha))
    with pytest.raises(UserError, match="give different sha256"):
        channel_from_locks.assemble([tmp_path / "one.yml", tmp_path / "two.yml"], tmp_path / "c")
