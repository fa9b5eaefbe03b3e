"""bench.py on the CPU: real torch runs at tiny sizes, the JSON/CSV schema, --compare, the
over-peak flag, the memory skip, and one-line errors for bad input."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfa.probes import bench, sdpa_common

REPO = Path(__file__).resolve().parent.parent
TINY = ["--shape", "1,2,32,16", "--dtypes", "fp16", "--repeats", "2", "--warmup-ms", "0"]


def run_json(tmp_path: Path, *args: str, name: str = "out.json") -> dict:
    path = tmp_path / name
    assert bench.main([*TINY, *args, "--json", str(path)]) == 0
    return json.loads(path.read_text())


def test_tiny_end_to_end_writes_json_and_csv(tmp_path, capsys):
    rc = bench.main([*TINY, "--backends", "flash,math", "--out-dir", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert doc["schema"] == bench.SCHEMA
    assert "flash-attention convention" in doc["flop_convention"]
    ident = doc["identity"]
    assert ident["torch"] and ident["platform"] == "cpu" and ident["arch"] is None
    prov = doc["provenance"]
    assert "env" in prov and "peak_tflops" in prov and not set(prov) & set(ident)
    rows = doc["results"]
    # 1 shape x 1 dtype x 2 causal x 2 backends x 3 passes
    assert len(rows) == 12
    assert {r["status"] for r in rows} == {"ok"}
    assert all(list(r) == list(rows[0]) for r in rows) and "pct_roof" in rows[0]
    assert all(r["repeats"] == 2 and r["min_ms"] <= r["median_ms"] <= r["max_ms"] for r in rows)
    fwd = 4 * 1 * 2 * 32 * 32 * 16
    by_key = {(r["backend"], r["causal"], r["pass"]): r for r in rows}
    assert by_key[("math", False, "fwd")]["flops"] == fwd
    assert by_key[("math", True, "fwd")]["flops"] == fwd / 2
    assert by_key[("flash", False, "bwd")]["flops"] == 2.5 * fwd
    assert by_key[("flash", True, "fwdbwd")]["flops"] == 3.5 * fwd / 2
    with open(tmp_path / "bench.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == 12 and list(csv_rows[0]) == list(rows[0])
    out = capsys.readouterr()
    assert "FLOPs: flash-attention convention" in out.out
    assert "[4/4]" in out.err  # progress on stderr


def test_grouped_query_shape_runs(tmp_path):
    doc = run_json(tmp_path, "--shape", "gqa=1,4,2,17,16", "--backends", "math", "--causal", "no")
    gqa = [r for r in doc["results"] if r["size"] == "gqa"]
    assert gqa and all(r["q_heads"] == 4 and r["kv_heads"] == 2 for r in gqa)
    assert {r["status"] for r in gqa} == {"ok"}


def test_rate_above_peak_is_flagged_not_shown(tmp_path, capsys):
    doc = run_json(tmp_path, "--backends", "math", "--causal", "no", "--peak-tflops", "1e-9")
    rows = doc["results"]
    assert rows and all(r["above_peak"] for r in rows)
    assert all(r["tflops"] is None and r["pct_peak"] is None for r in rows)
    assert all(r["measured_tflops_above_peak"] > 1e-9 for r in rows)
    table = capsys.readouterr().out
    assert "!>peak" in table and "ABOVE PEAK" in table


def timed_row(shape, pass_name: str, median_ms: float, causal: bool = False) -> dict:
    row = {**shape.as_dict(), "dtype": "fp16", "causal": causal, "pass": pass_name}
    return row | {"median_ms": median_ms}


def test_rate_below_peak_has_percentage():
    shape = sdpa_common.Shape("x", 1, 1, 1, 500, 1000)  # 1e9 FLOP forward
    fields = bench.rates(timed_row(shape, "fwd", 0.5), 4.0, None)
    assert fields["tflops"] == 2.0 and fields["pct_peak"] == 50.0
    assert fields["above_peak"] is False and fields["measured_tflops_above_peak"] is None


def test_case_that_does_not_fit_in_memory_is_skipped(tmp_path):
    doc = run_json(tmp_path, "--backends", "math,flash", "--mem-limit-gib", "1e-6")
    rows = doc["results"]
    assert rows and {r["status"] for r in rows} == {"skipped"}
    assert all("GiB free" in r["reason"] for r in rows)


def test_math_estimate_counts_materialised_scores():
    xlarge = sdpa_common.Shape("XLarge", 16, 16, 16, 4096, 64)
    math_bytes = bench.estimate_bytes(xlarge, "math", 2)
    flash_bytes = bench.estimate_bytes(xlarge, "flash", 2)
    scores_fp32 = 16 * 16 * 4096 * 4096 * 4
    assert math_bytes > 3 * scores_fp32 > 40 * 2**30
    assert flash_bytes < 2 * 2**30


def test_backend_torch_rejects_is_recorded_as_unavailable(tmp_path):
    # The memory-efficient kernel has no CPU implementation: torch refuses, we record why.
    doc = run_json(tmp_path, "--backends", "efficient", "--causal", "no")
    rows = doc["results"]
    assert {r["status"] for r in rows} == {"unavailable"}
    assert all(r["reason"] for r in rows)


@pytest.mark.parametrize(
    "args",
    [
        ["--shape", "1,2,3"],
        ["--shape", "1,3,2,16,8"],  # 3 query heads not a multiple of 2 kv heads
        ["--backends", "flash,nope"],
        ["--dtypes", "fp8"],
        ["--sizes", "Huge"],
        ["--passes", "sideways"],
        ["--repeats", "0"],
        ["--compare", "/nonexistent/a.json", "/nonexistent/b.json"],
        ["--learn", "/nonexistent/a.json"],  # one run is no A/A pair
        ["--learn", "/nonexistent/a.json", "/nonexistent/b.json"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, capsys):
    assert bench.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bench.py: error:")


def test_compare_rejects_non_result_json(tmp_path, capsys):
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    assert bench.main(["--compare", str(junk), str(other)]) == 2
    assert bench.main(["--compare", str(other), str(other)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "cannot read" in err[0] and "no 'results' list" in err[1]


def test_runs_as_plain_script():
    """`python scripts/rocmfa/probes/bench.py` must work without the repo on sys.path (the target
    env)."""
    ok = subprocess.run(
        [sys.executable, "scripts/rocmfa/probes/bench.py", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and "flash-attention convention" in ok.stdout
    bad = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "rocmfa" / "probes" / "bench.py"), "--shape", "x"],
        cwd="/",
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().count("\n") == 0


def test_decode_row_is_memory_bound_and_judged_against_the_memory_roof():
    # decode against 128k keys on an H200 (docs/results): 0.9619 ms for K and V read once.
    decode = sdpa_common.Shape("decode-128k-d128", 8, 32, 8, 1, 128, 131072)
    row = {**timed_row(decode, "fwd", 0.9619), "backend": "flash", "dtype": "bf16"}
    fields = bench.rates(row, 1070.5, 4814.3)
    kv = 2 * 8 * 8 * 131072 * 128 * 2
    q_o = 2 * 8 * 32 * 1 * 128 * 2
    assert fields["bytes"] == kv + q_o + 4 * 8 * 32
    assert fields["bound"] == "memory" and fields["intensity"] < 1070.5e3 / 4814.3
    assert fields["gbps"] == pytest.approx(4465, rel=1e-3)
    assert fields["pct_roof"] == pytest.approx(92.75, abs=0.1)
    assert fields["pct_peak"] < 2  # the compute % that used to be its only figure
    xlarge = sdpa_common.Shape("XLarge", 16, 16, 16, 4096, 64)
    prefill = {p: bench.rates(timed_row(xlarge, p, 10.0), 1070.5, 4814.3) for p in bench.PASSES}
    assert prefill["bwd"]["bound"] == "compute"
    assert prefill["bwd"]["pct_roof"] == prefill["bwd"]["pct_peak"]
    elements = 16 * 16 * 4096 * 64  # q,k,v,o,do in; dq,dk,dv out
    assert prefill["bwd"]["bytes"] == 8 * elements * 2 + 4 * 16 * 16 * 4096
    assert prefill["fwdbwd"]["bytes"] == prefill["bwd"]["bytes"] + prefill["fwd"]["bytes"]
    row.update(status="ok", reason=None, min_ms=0.96, max_ms=0.97, spread=0.004, repeats=6)
    ident = {"gpu": "H200", "arch": "sm_90", "torch": "x"}
    table = bench.render_table([row | fields], ident, {"peak_note": "p"}, "device: test")
    line = next(x for x in table.splitlines() if x.startswith("decode-128k"))
    assert "4465" in line and "memory" in line and "92.8" in line


def test_memory_roof_from_the_device_else_a_named_table_entry():
    roofs = sdpa_common.load_table("peak_rates", "memory")
    h200 = {"memory_clock_khz": 3201000, "memory_bus_bits": 6016, "integrated": False}
    roof, source = bench.memory_roof("sm_90", h200)
    assert roof == 4814.3 and "memory_clock_rate 3201000 kHz" in source
    # An APU's memory is the system's: the table's named LPDDR5X figure, not the properties.
    apu = {"memory_clock_khz": 1000000, "memory_bus_bits": 64, "integrated": True}
    roof, source = bench.memory_roof("gfx1151", apu)
    assert roof == 256 and "LPDDR5X-8000" in source and "integrated" in source
    assert bench.memory_roof("gfx942", {})[0] == 5300
    assert bench.memory_roof("gfx9999", {}) == (
        None,
        "unknown (no memory clock/bus width; gfx9999 not in peak_rates.toml [memory])",
    )
    assert all(entry.get("source") and entry.get("gbps") for entry in roofs.values())


def test_dry_run_names_the_device_and_runs_nothing(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert bench.main(["--dry-run", "--sizes", "Tiny,Small", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "dry run on cpu" in text and "nothing is run" in text
    assert "Tiny 1,1,128,64" in text and "timings" in text
    assert not out.exists()


def test_compare_matches_cases_and_refuses_nothing_in_common_or_a_negative_threshold(
    tmp_path, capsys
):
    a, b, c = (str(tmp_path / f"{name}.json") for name in "abc")
    for path, backends in ((a, "math"), (b, "math,flash"), (c, "flash")):
        run_json(tmp_path, "--backends", backends, name=Path(path).name)
    capsys.readouterr()
    assert bench.main(["--compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "6 matching cases" in out and "speedup" in out
    assert bench.main(["--compare", a, c]) == 2
    assert bench.main(["--compare", a, a, "--threshold-pct", "-5"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "nothing to compare" in err[0] and "negative" in err[1]
