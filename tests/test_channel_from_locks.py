"""channel_from_locks: pixi.lock records are kept whole; the order of the sources changes
nothing, and sources that disagree about a file are reported; the named public sources are
checked by sha256 before they are read. (A lock's records served as a closed channel solve back
to the same lock: tests/test_lockfile.py.)

Opt-in: ROCMFA_CONDA_SOURCES=DIR, the sources of scripts/rocmfa/data/conda_sources.toml fetched into
DIR (`python -m tests.support.channel_from_locks CHANNEL --fetched DIR --fetch-commands` prints
how), rebuilds the channel in both orders and re-solves the committed lock from it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rocmfa.env import lockfile
from rocmfa.plumbing import stamps
from rocmfa.plumbing.errors import UserError
from tests.support import channel_from_locks


@pytest.fixture(autouse=True)
def own_conda_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Repodata and package caches of each test in its own tmp dir, not ~/.cache."""
    monkeypatch.setenv("ROCMFA_CONDA_CACHE", str(tmp_path / "conda-cache"))


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


def test_pixi_lock_records_are_kept_whole(tmp_path: Path) -> None:
    pixi = pixi_lock(tmp_path / "pixi.lock", {
        "linux-64/libgcc-15.2.0-he0feb66_18.conda": LIBGCC,
        "linux-64/tk-8.6.13-noxft_hd70dff1_3.conda": TK,
    })  # fmt: skip
    channel_from_locks.assemble([pixi], tmp_path / "c")
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
    lockfile.solve_lock(tmp_path / "environment.yml", lock, [(tmp_path / "a").as_uri()])
    assert lock.read_text() == lockfile.LOCK_FILE.read_text()
    committed = lockfile.records_path(lockfile.LOCK_FILE).read_text()
    assert lockfile.records_path(lock).read_text() == committed
    # Every url/hash pair of the lock is the rebuilt channel's record of that file.
    repodata = {}
    for subdir in ("linux-64", "noarch"):
        data = json.loads((tmp_path / "a" / subdir / "repodata.json").read_text())
        repodata.update(data["packages"] | data["packages.conda"])
    for url, entry in json.loads(committed)["records"].items():
        assert repodata[url.rsplit("/", 1)[1]] == entry
