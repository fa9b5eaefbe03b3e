"""The options table and the typed options classes agree: every row of a session is a field of
its class and every field a row, so a misspelt name fails here instead of reading a default."""

from __future__ import annotations

import dataclasses

import pytest

from scripts.plumbing import options
from scripts.plumbing.errors import UserError


def test_every_session_row_is_a_field_of_its_class_and_back() -> None:
    named = {s for row in options.OPTIONS for s in row.sessions}
    assert named == set(options.SESSION_OPTIONS), "a session in OPTIONS has no options class"
    for session, cls in options.SESSION_OPTIONS.items():
        rows = {row.dest for row in options.session_rows(session)}
        fields = set(cls.field_names())
        assert rows - fields == set(), f"{session}: rows without a field in {cls.__name__}"
        assert fields - rows == set(), f"{session}: fields of {cls.__name__} without a row"


def test_parse_gives_a_frozen_typed_object_with_argparse_defaults() -> None:
    for session, cls in options.SESSION_OPTIONS.items():
        parsed = options.parse(session, [])
        assert type(parsed) is cls
        assert parsed == cls(), f"{session}: class defaults differ from the table's"
        assert hash(parsed) == hash(cls()) and repr(parsed).startswith(cls.__name__ + "(")
    opts = options.parse("build_pytorch", ["--skip", "audio", "--skip", "vision", "-j", "3"])
    assert opts.skip == ("audio", "vision") and opts.jobs == 3 and opts.from_stage is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.jobs = 4  # type: ignore[misc]
    with pytest.raises(TypeError, match="no option clena"):
        options.BuildCkOptions(clena=True)  # a misspelt field is an error, not a default


def test_other_sessions_options_are_accepted_and_dropped() -> None:
    opts = options.parse("doctor", ["--profile", "vllm", "--arch", "gfx1100"])
    assert opts == options.DoctorOptions(arch="gfx1100")
    with pytest.raises(UserError, match="unrecognized arguments: --nope"):
        options.parse("doctor", ["--nope"])


def test_probe_sessions_pass_their_own_options_through() -> None:
    opts, rest = options.parse_known("bench", ["--arch", "gfx1151", "--sizes", "Tiny"])
    assert opts == options.BenchOptions(arch="gfx1151") and rest == ["--sizes", "Tiny"]
