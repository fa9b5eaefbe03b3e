"""pins/*.toml written by the one writer (rocmfa.plumbing.pin_files.set_values, what update_pins
and a build's first run call): the values it sets change, every other byte of the file (comments,
order, formatting, untouched lines) stays; a malformed pin file is refused in one line."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from rocmfa.plumbing import options, pin_files
from rocmfa.plumbing.errors import UserError
from rocmfa.sources import update_pins
from tests.support import aotriton_standins as st

REPO_ROOT = Path(__file__).resolve().parent.parent
HEADER = re.compile(r"^\[([^\[\]]+)\]\s*$")
KEY = re.compile(r"^([A-Za-z0-9_-]+)\s*=")


def with_values(text: str, changes: Mapping[tuple[str, str], str | Sequence[str]]) -> str:
    """text with the line of each (table, key) replaced by `key = value`, every other line as
    it was: what a round-trip-safe write of those values must give."""
    table, out, seen = "", [], set()
    for line in text.splitlines(keepends=True):
        header, key = HEADER.match(line), KEY.match(line)
        if header:
            table = header.group(1).strip()
        elif key and (table, key.group(1)) in changes:
            value = changes[(table, key.group(1))]
            shown = json.dumps(value) if isinstance(value, str) else json.dumps(list(value))
            line = f"{key.group(1)} = {shown}\n"
            seen.add((table, key.group(1)))
        out.append(line)
    assert seen == set(changes), f"not in the text: {set(changes) - seen}"
    return "".join(out)


def commit_tables(data: Mapping, prefix: str = "") -> list[str]:
    """Every table (dotted name) holding a `commit`."""
    found = [prefix] if prefix and "commit" in data else []
    for key, value in data.items():
        if isinstance(value, dict):
            found += commit_tables(value, f"{prefix}.{key}" if prefix else key)
    return found


@pytest.mark.parametrize(
    "name", sorted({*(f"{p}.toml" for p in pin_files.PROJECTS), *pin_files.LINES.values()})
)
def test_writing_every_commit_of_a_real_pin_file_keeps_every_other_byte(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / name
    shutil.copy(REPO_ROOT / "pins" / name, path)
    before = path.read_text()
    tables = commit_tables(tomllib.loads(before))
    assert tables
    for table in tables:
        assert pin_files.set_values(path, table, {"commit": "f" * 40})
    assert path.read_text() == with_values(before, {(t, "commit"): "f" * 40 for t in tables})
    assert not any(pin_files.set_values(path, t, {"commit": "f" * 40}) for t in tables)


def test_a_missing_key_and_a_missing_table_are_added_and_nothing_else_moves(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pytorch.toml"
    before = (
        '# head\n[pytorch]\nurl = "u"  # where\nref = "r"\ncommit = ""\n\n'
        '# the triton companion\n[pytorch.triton]\nurl = "t"\nref = "from-pytorch"\ncommit = ""\n'
    )
    path.write_text(before)
    assert pin_files.set_values(path, "pytorch.triton", {"submodules": ["a", "b"]})
    assert pin_files.set_values(path, "pytorch.aotriton", {"pytorch_commit": "c", "version": "v"})
    after = path.read_text()
    assert after.startswith(before)
    assert after[len(before) :] == (
        'submodules = ["a", "b"]\n\n[pytorch.aotriton]\npytorch_commit = "c"\nversion = "v"\n'
    )
    data = tomllib.loads(after)["pytorch"]
    assert data["triton"]["submodules"] == ["a", "b"] and data["aotriton"]["version"] == "v"


def test_update_pins_records_the_commit_and_submodules_keeping_every_other_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repository's own pins/aotriton.toml (its ref 0.13b pointed at a stand-in AOTriton
    with the tag, third_party/triton and third_party/aiter.txt): update_pins rewrites `commit`,
    `submodules` and the aiter tag the tree names, resolved to its commit, only."""
    repo, commit = st.make_aotriton_upstream(tmp_path)
    aiter = tmp_path / "aiter-upstream"
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(repo), str(work / "src" / "aotriton")], check=True)
    pins_dir = tmp_path / "pins"
    pins_dir.mkdir()
    real = (REPO_ROOT / "pins" / "aotriton.toml").read_text()
    before = real.replace("https://github.com/ROCm/aotriton", f"file://{repo}", 1)
    before = before.replace('"https://github.com/ROCm/aiter"', f'"file://{aiter}"')
    old = {("aotriton", "submodules"): ["third_party/old"], ("aotriton.aiter", "ref"): "v0.0.1"}
    before = with_values(before, old)
    (pins_dir / "aotriton.toml").write_text(before)
    st.write_pytorch_pin(pins_dir, aotriton_commit=commit, aotriton_version="0.13b")
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(pins_dir))
    argv = ["--workdir", str(work), "--project", "aotriton"]
    update_pins.update_pins(options.parse("update_pins", argv))
    assert (pins_dir / "aotriton.toml").read_text() == with_values(
        before,
        {
            ("aotriton", "commit"): commit,
            ("aotriton", "submodules"): [st.UPSTREAM_SUBMODULE],
            ("aotriton.aiter", "ref"): st.AITER_TAG,
            ("aotriton.aiter", "commit"): st.git(aiter, "rev-parse", st.AITER_TAG),
        },
    )


@pytest.mark.parametrize(
    "body",
    [b"\xff\xfe\x00[x]\n", b"[[[ = \x01 nonsense", b'[aotriton]\nurl = "u"\nurl = "twice"\n'],
    ids=["not utf-8", "garbage", "duplicate key"],
)
def test_a_malformed_pin_file_is_one_line_and_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: bytes
) -> None:
    path = tmp_path / "aotriton.toml"
    path.write_bytes(body)
    monkeypatch.setenv("ROCMFA_PINS_DIR", str(tmp_path))
    for write in (
        lambda: pin_files.set_values(path, "aotriton", {"commit": "f" * 40}),
        lambda: update_pins.update_pins(
            options.parse("update_pins", ["--workdir", str(tmp_path), "--project", "aotriton"])
        ),
    ):
        with pytest.raises(UserError) as error:
            write()
        line = str(error.value)
        assert line and "\n" not in line and "Traceback" not in line
        assert "aotriton.toml" in line
        assert path.read_bytes() == body


def test_a_key_that_is_not_a_table_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "pytorch.toml"
    path.write_text('[pytorch]\naotriton = "0.13b"\n')
    with pytest.raises(UserError, match=r"pytorch\.toml: \[pytorch\.aotriton\] is not a table$"):
        pin_files.set_values(path, "pytorch.aotriton", {"version": "0.13b"})
    assert path.read_text() == '[pytorch]\naotriton = "0.13b"\n'
