"""One rule for "changed", used by `bench --compare` and the results page (stdlib only).

Faster or slower only beyond --threshold-pct and the run-to-run floors of bench_noise.toml
(`bench_change.py --learn A1.json A2.json ...` writes them); launch-bound rows never change.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tomllib
from pathlib import Path
from typing import Any

NOISE_FILE = Path(__file__).resolve().parents[1] / "data" / "bench_noise.toml"
BUCKETS_MS = (0.05, 0.2, 1.0, 5.0)  # row classes by duration: short rows move most
FLOOR_MARGIN = 2.0  # a learned floor is this times the largest A/A change
DEFAULT_FLOOR = 0.10  # a class no A/A run has seen
CASE_FIELDS = ("size", "batch", "q_heads", "kv_heads", "seq_q", "seq_k", "head_dim", "dtype")
CASE_FIELDS += ("causal", "backend", "pass")
VERDICTS = ("faster", "slower", "same", "noisy", "launch-bound")


def row_class(backend: str, pass_name: str, ms: float) -> str:
    bucket = next((f"<{edge:g}ms" for edge in BUCKETS_MS if ms < edge), f">={BUCKETS_MS[-1]:g}ms")
    return f"{backend}/{pass_name}/{bucket}"


def case_key(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) for k in CASE_FIELDS)


def load_floors(path: Path = NOISE_FILE) -> dict[str, Any]:
    """{"floor": {class: fraction}, "default": fraction, "source": text}; defaults if unreadable."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        return {"floor": {}, "default": DEFAULT_FLOOR, "source": f"{path} unreadable"}
    return {
        "floor": {str(k): float(v) for k, v in (data.get("floor") or {}).items()},
        "default": float(data.get("default_floor", DEFAULT_FLOOR)),
        "source": str(data.get("source", path.name)),
    }


def floor_of(floors: dict[str, Any], backend: str, pass_name: str, ms: float) -> float:
    """The class's floor, else the largest of its pass and bucket, else the default."""
    cls = row_class(backend, pass_name, ms)
    if cls in floors["floor"]:
        return floors["floor"][cls]
    same = [v for k, v in floors["floor"].items() if k.endswith(cls[len(backend) :])]
    return max(same) if same else floors["default"]


def judge(a_rows: list[dict], b_rows: list[dict], threshold_pct: float, floors: dict) -> dict:
    """The verdict of one case: A's runs against B's runs (one row per run, status ok)."""
    a_ms, b_ms = [r["median_ms"] for r in a_rows], [r["median_ms"] for r in b_rows]
    a_med, b_med = statistics.median(a_ms), statistics.median(b_ms)
    speedup, backend, pass_name = a_med / b_med, a_rows[0]["backend"], a_rows[0]["pass"]
    floor = floor_of(floors, backend, pass_name, min(a_med, b_med))
    allowance = max(threshold_pct / 100.0, floor)
    why = f"floor {100 * floor:.1f}% ({row_class(backend, pass_name, min(a_med, b_med))})"
    overlap = False
    if len(a_ms) >= 2 and len(b_ms) >= 2:
        ranges = (max(a_ms) - min(a_ms)) / a_med + (max(b_ms) - min(b_ms)) / b_med
        allowance = max(allowance, ranges)
        overlap = min(a_ms) <= max(b_ms) and min(b_ms) <= max(a_ms)
        why += f"; runs {len(a_ms)}+{len(b_ms)}, ranges {100 * ranges:.1f}%"
    if any(r.get("launch_bound") for r in (*a_rows, *b_rows)):
        verdict = "launch-bound"
    elif abs(speedup - 1.0) <= threshold_pct / 100.0:
        verdict = "same"
    elif overlap or abs(speedup - 1.0) <= allowance or any(r.get("noisy") for r in a_rows + b_rows):
        verdict = "noisy"
    else:
        verdict = "faster" if speedup > 1 else "slower"
    return {
        "a_ms": round(a_med, 5),
        "b_ms": round(b_med, 5),
        "speedup": round(speedup, 4),
        "allowance_pct": round(100 * allowance, 2),
        "verdict": verdict,
        "why": why,
    }


def compare_runs(
    a_runs: list[list[dict]], b_runs: list[list[dict]], threshold_pct: float, floors: Any = None
) -> list[dict[str, Any]]:
    """Every case that ran in every run of both sides: its key fields and verdict."""
    floors = floors if floors is not None else load_floors()
    maps = [
        {case_key(r): r for r in rows if r.get("status") == "ok" and r.get("median_ms")}
        for rows in (*a_runs, *b_runs)
    ]
    out = []
    for key, row in maps[0].items():
        if all(key in m for m in maps):
            runs = [m[key] for m in maps]
            verdict = judge(runs[: len(a_runs)], runs[len(a_runs) :], threshold_pct, floors)
            out.append({k: row.get(k) for k in CASE_FIELDS} | verdict)
    return out


def tally(rows: list[dict[str, Any]]) -> tuple[dict[str, int], float | None]:
    """Compared rows per verdict, and the geometric-mean speedup of those not launch-bound."""
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in VERDICTS}
    kernel = [r["speedup"] for r in rows if r["verdict"] != "launch-bound"]
    return counts, statistics.geometric_mean(kernel) if kernel else None


def learn_floors(groups: list[list[list[dict[str, Any]]]]) -> dict[str, float]:
    """Per class: FLOOR_MARGIN x the largest A/A change, rounded up to whole %."""
    seen: dict[str, float] = {}
    for a, b in (pair for runs in groups for pair in itertools.combinations(runs, 2)):
        for row in compare_runs([a], [b], 0.0, {"floor": {}, "default": 0.0}):
            if row["verdict"] != "launch-bound":
                cls = row_class(row["backend"], row["pass"], min(row["a_ms"], row["b_ms"]))
                seen[cls] = max(seen.get(cls, 0.0), abs(row["speedup"] - 1.0))
    return {
        cls: round(max(0.01, -(-FLOOR_MARGIN * value * 100 // 1) / 100), 2)
        for cls, value in sorted(seen.items())
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="learn the change rule's floors from A/A runs")
    p.add_argument(
        "--learn",
        nargs="+",
        action="append",
        required=True,
        metavar="JSON",
        help="one A/A session: bench runs of one build; repeatable",
    )
    p.add_argument("--source", default="", help="where the runs came from (written as source)")
    opts = p.parse_args(argv)
    if any(len(files) < 2 for files in opts.learn):
        p.error("each --learn needs at least two runs of one build")
    try:
        groups = [[json.loads(Path(f).read_text())["results"] for f in fs] for fs in opts.learn]
    except (OSError, ValueError, KeyError, TypeError) as e:
        p.error(f"cannot read the runs: {e}")
    names = "; ".join(", ".join(Path(f).name for f in files) for files in opts.learn)
    print(f'source = "{opts.source or names}"\ndefault_floor = {DEFAULT_FLOOR}\n[floor]')
    print("\n".join(f'"{cls}" = {value}' for cls, value in learn_floors(groups).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
