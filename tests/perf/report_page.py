"""Measure the results page for 20 result sets: generation time of the whole `nox -s report`
process and in-process, and the page's size (raw and gzip).

The 20 sets are the H100's real bench runs in docs/results (aa1..aa4 and the two A/B runs,
120 rows each), each copied with its identity moved to another host and hour so that they
count as 20 runs of 4 machines; the backend_check/validate files ride along with the first.

Run: python -m tests.perf.report_page [--sets 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rocmfa.plumbing.options import ReportOptions
from rocmfa.report import page
from tests.support.project import results_dir

ROOT = Path(__file__).resolve().parents[2]
RESULTS = results_dir()  # docs/results with its raw JSON unpacked
SOURCES = [
    *(RESULTS / f"aa{i}.json" for i in range(1, 5)),
    *(RESULTS / "ab-forward-twice" / f"ab{i}.json" for i in (1, 2)),
]


def make_sets(folder: Path, count: int) -> None:
    for n in range(count):
        doc = json.loads(SOURCES[n % len(SOURCES)].read_text())
        doc["identity"]["host"] = f"machine-{n % 4}"
        doc["identity"]["date"] = f"2026-11-{10 + n // 4:02d}T{n % 24:02d}:00:00Z"
        (folder / f"run{n:02d}.json").write_text(json.dumps(doc))
    for name in ("backend_check_i32", "validate_i32"):
        doc = json.loads((RESULTS / f"{name}.json").read_text())
        doc["identity"].update(host="machine-0", date="2026-11-10T00:05:00Z")
        (folder / f"{name}.json").write_text(json.dumps(doc))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder, out = Path(tmp, "in"), Path(tmp, "out")
        folder.mkdir()
        make_sets(folder, opts.sets)
        baseline = str(folder / "run00.json")
        inproc, whole = [], []
        for _ in range(opts.repeats):
            start = time.perf_counter()
            page.report(ReportOptions(out=str(out), baseline=baseline), [str(folder)])
            inproc.append(time.perf_counter() - start)
            start = time.perf_counter()
            args = ["--baseline", baseline, "--out", str(out)]
            done = subprocess.run(
                [sys.executable, "-m", "nox", "-s", "report", "--", str(folder), *args],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
            )
            whole.append(time.perf_counter() - start)
            if done.returncode:
                sys.exit(f"nox -s report failed: {done.stderr.strip().splitlines()[-1:]}")
        data = json.loads((out / "results.json").read_text())
        html_bytes = (out / "results.html").read_bytes()
        print(
            f"{len(data['sets'])} result sets ({sum(len(s['bench']) for s in data['sets'])} bench "
            f"rows, {len(data['comparisons'])} compared with the baseline): page "
            f"{len(html_bytes) / 1024:.0f} KiB ({len(gzip.compress(html_bytes)) / 1024:.0f} KiB "
            f"gzip), merged JSON {(out / 'results.json').stat().st_size / 1024:.0f} KiB; "
            f"generation in-process median {statistics.median(inproc):.2f} s, whole "
            f"`nox -s report` process median {statistics.median(whole):.2f} s (n={opts.repeats})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
