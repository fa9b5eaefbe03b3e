"""bench.py's spread figure and `noisy` mark; bench_crosscheck (bench's timer against an
independent harness, in turns): real CPU torch runs and real timers. The one change rule
(bench.py --compare, the results page), replayed on real H100 runs: A/A pairs flag nothing, the
A/B with a known difference (every forward computed twice) flags the rows that changed and none
of those that did not; launch-bound rows are never a change."""

from __future__ import annotations

import csv
import itertools
import json
import statistics
from pathlib import Path

import pytest
import torch

from rocmfa.probes import bench
from tests.perf import bench_crosscheck
from tests.support.project import results_dir

ROOT = Path(__file__).resolve().parent.parent
RESULTS = results_dir()
FLOORS = bench.load_floors()

TINY = ["--shape", "1,2,32,16", "--dtypes", "fp16", "--warmup-ms", "0", "--causal", "no"]


def test_spread_is_iqr_over_median():
    assert bench.summarize([1.0] * 8)["spread"] == 0.0
    summary = bench.summarize([1.0, 1.0, 2.0, 2.0, 3.0], noise_threshold=0.1)
    assert summary["spread"] == 0.5 and summary["noisy"] is True
    assert bench.summarize([1.0, 1.01, 1.02, 1.0], 0.1)["noisy"] is False


def test_noisy_rows_marked_on_screen_csv_and_json(tmp_path, capsys):
    args = [*TINY, "--backends", "math", "--passes", "fwd", "--repeats", "8"]
    assert bench.main([*args, "--json", str(tmp_path / "bench.json")]) == 0
    doc = json.loads((tmp_path / "bench.json").read_text())
    (row,) = doc["results"]
    assert row["repeats"] == 8 and row["noisy"] is (row["spread"] > 0.1)
    row |= {"noisy": True, "spread": 0.25}  # as a noisy run writes it
    bench.write_csv(tmp_path / "bench.csv", [row])
    with open(tmp_path / "bench.csv") as f:
        (csv_row,) = list(csv.DictReader(f))
    assert csv_row["noisy"] == "True" and float(csv_row["spread"]) == 0.25
    table = bench.render_table([row], doc["identity"], doc["provenance"], "device: test")
    assert "noisy" in table.splitlines()[-3] and "1 row(s) noisy" in table
    assert "noisy" in bench.progress_text(row)


def test_crosscheck_takes_turns_a_b_then_b_a():
    order: list[str] = []

    def side(name: str):
        def run(index: int) -> list[float]:
            order.append(name)
            assert index == (len(order) - 1) // 2
            return [float(len(order))]

        return run

    a, b = bench_crosscheck.take_turns(4, side("A"), side("B"))
    assert order == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert a == [[1.0], [4.0], [5.0], [8.0]] and b == [[2.0], [3.0], [6.0], [7.0]]


def test_crosscheck_difference_pairs_neighbouring_turns():
    # The machine switches between a fast (1 ms) and a slow (2 ms) state, and once between the
    # two turns of a pair; A times 2 % slower than B in either state. The pooled medians differ
    # by 104 % (A saw 3 slow turns of 5, B 2); the paired difference is the 2 %.
    a_turns = [[1.02], [1.02], [2.04], [2.04], [2.04]]
    b_turns = [[1.0], [1.0], [1.0], [2.0], [2.0]]
    assert abs(bench_crosscheck.paired_diff_pct(a_turns, b_turns) - 2.0) < 1e-9
    pooled = bench_crosscheck.diff_pct(
        statistics.median([x for turn in a_turns for x in turn]), 1.0
    )
    assert abs(pooled - 104.0) < 1e-9


def test_crosscheck_times_bench_and_its_own_harness_in_one_process(tmp_path, capsys):
    path = tmp_path / "cc.json"
    args = ["--device", "cpu", "--sizes", "Tiny", "--turns", "2"]
    code = bench_crosscheck.main([*args, "--json", str(path)])
    data = json.loads(path.read_text())
    assert code == (0 if data["agree"] else 1)
    assert {(r["causal"], r["pass"]) for r in data["rows"]} == {
        (c, p) for c in (False, True) for p in ("fwd", "bwd")
    }
    for row in data["rows"]:
        assert row["backend"] == "math" and row["bench_ms"] > 0 and row["crosscheck_ms"] > 0
        expected = 100 * (row["bench_ms"] - row["crosscheck_ms"]) / row["crosscheck_ms"]
        assert row["pooled_diff_pct"] == pytest.approx(expected, abs=0.05, rel=1e-4)  # ms rounded
        pairs = zip(row["bench_turns_ms"], row["crosscheck_turns_ms"], strict=True)
        ratios = [statistics.median(a) / statistics.median(b) for a, b in pairs]
        paired = 100 * (statistics.median(ratios) - 1)
        assert row["diff_pct"] == pytest.approx(paired, abs=0.05, rel=1e-4)
    worst = max(abs(r["diff_pct"]) for r in data["rows"])
    assert data["max_abs_diff_pct_by_size"] == {"Tiny": round(worst, 2)}
    # The profiler's clock needs a GPU: on a CPU it is absent, and said to be.
    assert all(r["profiler_kernel_ms"] is None for r in data["rows"])
    assert data["profiler_summary"].startswith("no profiler kernel records")
    out = capsys.readouterr().out
    assert all(r["turns"] == 2 == len(r["bench_turns_ms"]) for r in data["rows"])
    assert "take turns on each case" in out and ("AGREE" in out or "DISAGREE" in out)


def test_crosscheck_reads_the_cases_of_a_bench_result_and_refuses_bad_input(tmp_path, capsys):
    bench_json = tmp_path / "b.json"
    bench_args = ["--sizes", "Tiny,Small", "--backends", "math", "--causal", "no"]
    bench_args += ["--passes", "fwd", "--repeats", "2", "--warmup-ms", "0"]
    assert bench.main([*bench_args, "--json", str(bench_json)]) == 0
    opts = bench_crosscheck.build_parser().parse_args(["--bench-json", str(bench_json)])
    cases = bench_crosscheck.pick_cases(opts, torch.device("cpu"))
    assert cases == [("Tiny", "math", False), ("Small", "math", False)]
    capsys.readouterr()
    for argv, message in (
        (["--device", "cpu", "--sizes", "Huge"], "unknown size 'Huge'"),
        (["--device", "cpu", "--turns", "0"], "at least 1"),
        (["--bench-json", str(tmp_path / "none.json")], "cannot read"),
    ):
        assert bench_crosscheck.main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1


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
        rows = bench.compare_runs([a], [b], 5.0, FLOORS)
        assert len(rows) == 120
        assert flagged(rows) == [], [(r["size"], r["backend"], r["pass"]) for r in flagged(rows)]


def test_aa_halves_with_several_runs_per_side_flag_no_row():
    runs = [results(RESULTS / f"aa{i}.json") for i in range(1, 5)]
    assert flagged(bench.compare_runs(runs[:2], runs[2:], 5.0, FLOORS)) == []


def test_ab_forward_twice_flags_forward_rows_and_no_backward_row():
    """B computes every SDPA call twice: forwards take ~2x, a backward timed alone is unchanged."""
    a_runs = [results(RESULTS / f"aa{i}.json") for i in range(1, 5)]
    b_runs = [results(RESULTS / "ab-forward-twice" / f"ab{i}.json") for i in (1, 2)]
    for a, b in itertools.product(a_runs, b_runs):
        rows = bench.compare_runs([a], [b], 5.0, FLOORS)
        by_pass = {p: [r for r in rows if r["pass"] == p] for p in ("fwd", "bwd", "fwdbwd")}
        assert all(r["verdict"] == "slower" for r in by_pass["fwd"])
        assert not flagged(by_pass["bwd"])
        assert all(r["verdict"] in ("slower", "launch-bound", "noisy") for r in by_pass["fwdbwd"])
        assert sum(r["verdict"] == "slower" for r in by_pass["fwdbwd"]) >= 30


def test_launch_bound_is_never_a_change_and_overlapping_runs_are_noisy():
    floors = {"floor": {}, "default_floor": 0.0, "source": "test"}
    row = {"backend": "math", "pass": "fwdbwd", "median_ms": 1.0}
    fast = dict(row, median_ms=0.3)
    assert bench.judge([row], [fast], 5.0, floors)["verdict"] == "faster"
    assert (
        bench.judge([row], [dict(fast, launch_bound=True)], 5.0, floors)["verdict"]
        == "launch-bound"
    )
    # Two runs a side whose medians overlap: run-to-run variation, not a change.
    a = [dict(row, median_ms=1.0), dict(row, median_ms=1.3)]
    b = [dict(row, median_ms=1.2), dict(row, median_ms=1.25)]
    assert bench.judge(a, b, 5.0, floors)["verdict"] == "noisy"
    assert bench.judge([row], [dict(row, median_ms=1.02)], 5.0, floors)["verdict"] == "same"


def test_floors_come_from_data_with_a_fallback_per_pass_and_bucket():
    floors = bench.load_floors()
    assert "H100" in floors["source"] and floors["floor"]
    # ck was not in the A/A runs: the largest floor of its pass and bucket stands in.
    same_class = [v for k, v in floors["floor"].items() if k.endswith("/fwd/<0.05ms")]
    assert bench.floor_of(floors, "ck", "fwd", 0.01) == max(same_class)
    assert bench.floor_of(floors, "ck", "sideways", 1.0) == floors["default_floor"]


def test_learned_floors_cover_their_sessions(tmp_path, capsys):
    paths = []
    for i, run in enumerate(fixture_runs()):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps({"results": run}))
        paths.append(str(path))
    assert bench.main(["--learn", *paths]) == 0
    out = capsys.readouterr().out
    assert '"math/fwdbwd/<1ms" = ' in out and "default_floor" in out


def test_bench_compare_uses_the_rule(capsys):
    a, b = RESULTS / "aa1.json", RESULTS / "ab-forward-twice" / "ab1.json"
    assert bench.main(["--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "0 faster" in out and "launch-bound" in out
    assert bench.main(["--compare", str(a), str(b), "--compare-runs", str(a)]) == 2
