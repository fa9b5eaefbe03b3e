"""Smaller points of issue 22: bench --compare and noisy rows, bench's own --help through nox,
the probes on a machine without conda, validate's verdict printed once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfa.probes import bench

REPO_ROOT = Path(__file__).resolve().parent.parent
TINY = ["--device", "cpu", "--shape", "1,2,16,8", "--dtypes", "bf16", "--repeats", "2"]
NO_CONDA = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": "/nonexistent"}


def nox(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**NO_CONDA, "ROCMFA_WORKDIR": "/tmp/rocmfa-issue22-unused"}
    return subprocess.run([sys.executable, "-m", "nox", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_compare_calls_a_noisy_row_noisy_not_a_regression(tmp_path: Path, capsys) -> None:
    a = tmp_path / "a.json"
    args = [*TINY, "--backends", "math", "--causal", "no", "--passes", "fwd,bwd"]
    assert bench.main([*args, "--json", str(a)]) == 0
    doc = json.loads(a.read_text())
    ok = [r for r in doc["results"] if r.get("status") == "ok"]
    assert len(ok) >= 2
    for r in ok:
        r["noisy"] = False  # a loaded machine may flag rows of A itself: here only B's flags count
    a.write_text(json.dumps(doc))
    slower = json.loads(json.dumps(doc))
    rows = [r for r in slower["results"] if r.get("status") == "ok"]
    for r in rows[:2]:
        r["median_ms"] *= 3
    rows[0]["noisy"] = True  # flagged: the spread stayed above the threshold
    rows[1]["noisy"] = False
    b = tmp_path / "b.json"
    b.write_text(json.dumps(slower))
    capsys.readouterr()
    assert bench.main(["--compare", str(a), str(b)]) == 0
    table = capsys.readouterr().out.splitlines()
    # The change rule (scripts/rocmfa/probes/bench.py) calls a regression "slower".
    marks = [line.split()[-1] for line in table if line.endswith(("noisy", "slower"))]
    assert sorted(marks) == ["noisy", "slower"]
    assert "1 slower" in table[-1] and "1 noisy" in table[-1]


def test_nox_bench_help_shows_benchs_own_options() -> None:
    result = nox("-s", "bench", "--", "--help")
    assert result.returncode == 0, result.stderr
    assert (
        "--prefix" in result.stdout and "--sizes" in result.stdout and "--compare" in result.stdout
    )


@pytest.mark.slow
def test_probes_without_conda_run_with_this_python_and_say_so() -> None:
    tiny = ["--shape", "1,2,16,8", "--dtypes", "bf16", "--causal", "no", "--backends", "math"]
    result = nox("-s", "validate", "--", *tiny, "--device", "cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"running with {sys.executable}" in result.stderr
    verdicts = [line for line in (result.stdout + result.stderr).splitlines()
                if line.startswith(("PASS", "FAIL"))]  # fmt: skip
    assert len(verdicts) == 1
