"""channel_from_locks: a lock's own records, served as a channel, solve back to the same lock;
pixi.lock records are kept whole and win over conda-lock ones; the order of the sources changes
nothing, and sources that disagree about a file are reported; the named public sources are
checked by sha256 before they are read.

Opt-in: ROCMFA_CONDA_SOURCES=DIR, the sources of scripts/rocmfa/data/conda_sources.toml fetched into
DIR (`python -m rocmfa.env.channel_from_locks CHANNEL --fetched DIR --fetch-commands` prints
how), rebuilds the channel in both orders and re-solves the committed lock from it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rocmfa.env import channel_from_locks, lock_records, lockfile, rattler_env
from rocmfa.plumbing import stamps
from rocmfa.plumbing.errors import UserError
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
    assert sources == {"libfoo-1.0-h1_3.tar.bz2": [str(first)], "tool-2.0-0.tar.bz2": [str(first)]}

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
    for order in ([tmp_path / "one.yml", tmp_path / "two.yml"],
                  [tmp_path / "two.yml", tmp_path / "one.yml"]):  # fmt: skip
        with pytest.raises(UserError, match=r"a-1-0\.conda: sha256 \(.*one.yml vs .*two.yml\)"):
            channel_from_locks.assemble(order, tmp_path / "c")
    assert not (tmp_path / "c").exists()


URL = "https://conda.anaconda.org/conda-forge"


def pixi_lock(path: Path, records: dict[str, str]) -> Path:
    """A pixi.lock (format 6, as stack-of-tasks/eigenpy@7e8a5e0b's) holding records, given as
    {subdir/filename: the record's YAML lines after `- conda: URL`}."""
    lines = ["version: 6", "environments:", "  default:", "    channels:",
             f"    - url: {URL}/", "    packages:", "      linux-64:"]  # fmt: skip
    lines += [f"      - conda: {URL}/{name}" for name in records]
    lines.append("packages:")
    for name, body in records.items():
        lines.append(f"- conda: {URL}/{name}")
        lines += [f"  {line}" for line in body.strip().splitlines()]
    path.write_text("\n".join(lines) + "\n")
    return path


LIBGCC = f"""sha256: {"ab" * 32}
md5: {"ab" * 16}
depends:
- __glibc >=2.17,<3.0.a0
constrains:
- libgomp 15.2.0 he0feb66_18
license: GPL
size: 10
timestamp: 1771378212382"""
TK = f"""build_number: 103
sha256: {"cd" * 32}
md5: {"cd" * 16}
depends:
- libgcc >=14
license: TCL
size: 20
timestamp: 1784229071544"""


def test_pixi_lock_records_are_kept_whole_and_beat_conda_lock_ones(tmp_path: Path) -> None:
    pixi = pixi_lock(tmp_path / "pixi.lock", {
        "linux-64/libgcc-15.2.0-he0feb66_18.conda": LIBGCC,
        "linux-64/tk-8.6.13-noxft_hd70dff1_3.conda": TK,
    })  # fmt: skip
    conda_lock = tmp_path / "conda-lock.yml"
    conda_lock.write_text("version: 1\nmetadata: {}\npackage:\n- name: libgcc\n  version: 15.2.0\n"
                          "  manager: conda\n  platform: linux-64\n  dependencies: {}\n"
                          f"  url: {URL}/linux-64/libgcc-15.2.0-he0feb66_18.conda\n"
                          f"  hash:\n    md5: {'ab' * 16}\n    sha256: {'ab' * 32}\n")  # fmt: skip
    channel_from_locks.assemble([conda_lock, pixi], tmp_path / "c")
    repodata = json.loads((tmp_path / "c" / "linux-64" / "repodata.json").read_text())
    libgcc = repodata["packages.conda"]["libgcc-15.2.0-he0feb66_18.conda"]
    assert libgcc["constrains"] == ["libgomp 15.2.0 he0feb66_18"]
    assert libgcc["depends"] == ["__glibc >=2.17,<3.0.a0"] and libgcc["build_number"] == 18
    # The record's own build number, not the build string's trailing _3.
    assert repodata["packages.conda"]["tk-8.6.13-noxft_hd70dff1_3.conda"]["build_number"] == 103
    sources = json.loads((tmp_path / "c" / "sources.json").read_text())
    assert sources["libgcc-15.2.0-he0feb66_18.conda"] == [str(pixi)]


def test_source_order_changes_nothing_and_disagreements_are_reported(tmp_path: Path) -> None:
    one = pixi_lock(tmp_path / "one.lock", {"linux-64/libgcc-15.2.0-he0feb66_18.conda": LIBGCC})
    two = pixi_lock(tmp_path / "two.lock", {
        "linux-64/libgcc-15.2.0-he0feb66_18.conda": LIBGCC,
        "linux-64/tk-8.6.13-noxft_hd70dff1_3.conda": TK,
    })  # fmt: skip
    labelled = {"one": one, "two": two}
    channel_from_locks.assemble(labelled, tmp_path / "a")
    channel_from_locks.assemble(dict(reversed(labelled.items())), tmp_path / "b")
    for name in ("linux-64/repodata.json", "noarch/repodata.json", "sources.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    sources = json.loads((tmp_path / "a" / "sources.json").read_text())
    assert sources["libgcc-15.2.0-he0feb66_18.conda"] == ["one", "two"]
    # A repodata patch seen by one source only: the same file, other constrains.
    patched = LIBGCC.replace("he0feb66_18\n", "he0feb66_19\n")
    three = pixi_lock(tmp_path / "three.lock",
                      {"linux-64/libgcc-15.2.0-he0feb66_18.conda": patched})  # fmt: skip
    for order in ([one, three], [three, one]):
        with pytest.raises(UserError) as error:
            channel_from_locks.assemble(order, tmp_path / "c")
        assert str(error.value).startswith(
            "1 file(s) have different records in different sources; drop or fix one of each "
            f"pair: libgcc-15.2.0-he0feb66_18.conda: constrains ({one} vs {three})"
        )
    assert not (tmp_path / "c").exists()


def test_named_sources_are_verified_before_they_are_read(tmp_path: Path) -> None:
    pixi = pixi_lock(tmp_path / "pixi.lock", {"linux-64/libgcc-15.2.0-he0feb66_18.conda": LIBGCC})
    listing = tmp_path / "sources.toml"
    listing.write_text('[[source]]\nrepo = "o/r"\ncommit = "' + "c" * 40 + '"\npath = "pixi.lock"\n'
                       f'sha256 = "{stamps.file_sha256(pixi)}"\n')  # fmt: skip
    [source] = channel_from_locks.named_sources(listing)
    fetched = tmp_path / "fetched"
    with pytest.raises(UserError, match=r"pixi.lock is missing; fetch it: curl -fsSL "
                       r"--create-dirs -o .*/o/r/c{40}/pixi.lock https://raw.githubusercontent"
                       r".com/o/r/c{40}/pixi.lock"):  # fmt: skip
        channel_from_locks.verified_sources(fetched, [source])
    assert channel_from_locks.fetch_commands(fetched, [source]) == [
        f"curl -fsSL --create-dirs -o {source.fetched(fetched)} {source.raw_url}"
    ]
    source.fetched(fetched).parent.mkdir(parents=True)
    source.fetched(fetched).write_text(pixi.read_text().replace("GPL", "MIT"))
    with pytest.raises(UserError, match=r"is not the .* that conda_sources\.toml names for o/r@"):
        channel_from_locks.verified_sources(fetched, [source])
    shutil.copy(pixi, source.fetched(fetched))
    found = channel_from_locks.verified_sources(fetched, [source])
    assert found == {f"o/r@{'c' * 8}:pixi.lock": source.fetched(fetched)}
    assert channel_from_locks.named_sources() and all(
        len(s.commit) == 40 and len(s.sha256) == 64 for s in channel_from_locks.named_sources()
    )


FETCHED = os.environ.get("ROCMFA_CONDA_SOURCES")


@pytest.mark.skipif(not FETCHED, reason="ROCMFA_CONDA_SOURCES (the fetched public sources) unset")
def test_real_sources_rebuild_the_channel_the_committed_lock_solves_from(tmp_path: Path) -> None:
    found = channel_from_locks.verified_sources(Path(FETCHED or ""),
                                                channel_from_locks.named_sources())  # fmt: skip
    channel_from_locks.assemble(found, tmp_path / "a")
    channel_from_locks.assemble(dict(reversed(found.items())), tmp_path / "b")
    for name in ("linux-64/repodata.json", "noarch/repodata.json", "sources.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    shutil.copy(lockfile.ENV_FILE, tmp_path / "environment.yml")
    lock = tmp_path / "conda-lock.yml"
    rattler_env.solve_lock(tmp_path / "environment.yml", lock, [(tmp_path / "a").as_uri()],
                           lockfile.CUDA_CHOICE, say=lambda _: None,
                           records_file=lock_records.records_path(lock))  # fmt: skip
    assert lock.read_text() == lockfile.LOCK_FILE.read_text()
    committed = lock_records.records_path(lockfile.LOCK_FILE).read_text()
    assert lock_records.records_path(lock).read_text() == committed
    # Every url/hash pair of the lock is the rebuilt channel's record of that file.
    repodata = {}
    for subdir in ("linux-64", "noarch"):
        data = json.loads((tmp_path / "a" / subdir / "repodata.json").read_text())
        repodata.update(data["packages"] | data["packages.conda"])
    for url, entry in json.loads(committed)["records"].items():
        assert repodata[url.rsplit("/", 1)[1]] == entry
