"""The one change rule (scripts/rocmfa/probes/bench_change.py), replayed on real H100 runs: A/A
pairs
flag nothing, the A/B with a known difference (every forward computed twice) flags the rows
that changed and none of those that did not; launch-bound rows are never a change."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from rocmfa.probes import bench, bench_change
from tests.support.project import results_dir

ROOT = Path(__file__).resolve().parent.parent
RESULTS = results_dir()
# The first A/A session (copied fields of four sdpa-bench/1 runs; see its "source").
FIXTURE = ROOT / "tests" / "data" / "bench_aa_h100_2026-11-24.json"


def fixture_runs() -> list[list[dict]]:
    doc = json.loads(FIXTURE.read_text())
    return [[dict(zip(doc["fields"], row, strict=True)) for row in run] for run in doc["runs"]]


def results(path: Path) -> list[dict]:
    return json.loads(path.read_text())["results"]


def flagged(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["verdict"] in ("faster", "slower")]


@pytest.mark.parametrize(
    "session",
    [
        pytest.param(fixture_runs, id="fixture-session"),
        pytest.param(lambda: [results(RESULTS / f"aa{i}.json") for i in range(1, 5)], id="gpu-aa"),
    ],
)
def test_aa_pairs_flag_no_row(session):
    runs = session()
    for a, b in itertools.permutations(runs, 2):
        rows = bench_change.compare_runs([a], [b], 5.0)
        assert len(rows) == 120
        assert flagged(rows) == [], [(r["size"], r["backend"], r["pass"]) for r in flagged(rows)]


def test_aa_halves_with_several_runs_per_side_flag_no_row():
    runs = [results(RESULTS / f"aa{i}.json") for i in range(1, 5)]
    assert flagged(bench_change.compare_runs(runs[:2], runs[2:], 5.0)) == []


def test_ab_forward_twice_flags_forward_rows_and_no_backward_row():
    """B computes every SDPA call twice: forwards take ~2x, a backward timed alone is unchanged."""
    a_runs = [results(RESULTS / f"aa{i}.json") for i in range(1, 5)]
    b_runs = [results(RESULTS / "ab-forward-twice" / f"ab{i}.json") for i in (1, 2)]
    for a, b in itertools.product(a_runs, b_runs):
        rows = bench_change.compare_runs([a], [b], 5.0)
        by_pass = {p: [r for r in rows if r["pass"] == p] for p in ("fwd", "bwd", "fwdbwd")}
        assert all(r["verdict"] == "slower" for r in by_pass["fwd"])
        assert not flagged(by_pass["bwd"])
        assert all(r["verdict"] in ("slower", "launch-bound", "noisy") for r in by_pass["fwdbwd"])
        assert sum(r["verdict"] == "slower" for r in by_pass["fwdbwd"]) >= 30


def test_launch_bound_is_never_a_change_and_overlapping_runs_are_noisy():
    floors = {"floor": {}, "default": 0.0, "source": "test"}
    row = {"backend": "math", "pass": "fwdbwd", "median_ms": 1.0}
    fast = dict(row, median_ms=0.3)
    assert bench_change.judge([row], [fast], 5.0, floors)["verdict"] == "faster"
    assert (
        bench_change.judge([row], [dict(fast, launch_bound=True)], 5.0, floors)["verdict"]
        == "launch-bound"
    )
    # Two runs a side whose medians overlap: run-to-run variation, not a change.
    a = [dict(row, median_ms=1.0), dict(row, median_ms=1.3)]
    b = [dict(row, median_ms=1.2), dict(row, median_ms=1.25)]
    assert bench_change.judge(a, b, 5.0, floors)["verdict"] == "noisy"
    assert bench_change.judge([row], [dict(row, median_ms=1.02)], 5.0, floors)["verdict"] == "same"


def test_floors_come_from_data_with_a_fallback_per_pass_and_bucket():
    floors = bench_change.load_floors()
    assert "H100" in floors["source"] and floors["floor"]
    # ck was not in the A/A runs: the largest floor of its pass and bucket stands in.
    same_class = [v for k, v in floors["floor"].items() if k.endswith("/fwd/<0.05ms")]
    assert bench_change.floor_of(floors, "ck", "fwd", 0.01) == max(same_class)
    assert bench_change.floor_of(floors, "ck", "sideways", 1.0) == floors["default"]


def test_learned_floors_cover_their_sessions(tmp_path, capsys):
    paths = []
    for i, run in enumerate(fixture_runs()):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps({"results": run}))
        paths.append(str(path))
    assert bench_change.main(["--learn", *paths]) == 0
    out = capsys.readouterr().out
    assert '"math/fwdbwd/<1ms" = ' in out and "default_floor" in out


def test_bench_compare_uses_the_rule(capsys):
    a, b = RESULTS / "aa1.json", RESULTS / "ab-forward-twice" / "ab1.json"
    assert bench.main(["--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "0 faster" in out and "launch-bound" in out
    assert bench.main(["--compare", str(a), str(b), "--compare-runs", str(a)]) == 2
