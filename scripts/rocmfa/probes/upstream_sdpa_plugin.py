"""pytest plugin that upstream_sdpa.py loads into the run of PyTorch's own test file (config:
$ROCMFA_UPSTREAM_PLUGIN_CONFIG): TheRock's skip list as skip marks, every Nth test for --quick,
skips once the time budget is spent, progress lines, and one JSON line per outcome to a results
file that survives a kill.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from typing import Any

import pytest
from upstream_sdpa import THEROCK_PREFIX  # beside this file, on the run's PYTHONPATH

BUDGET_PREFIX = "ours: time budget of "
cfg: dict[str, Any] = {}  # the run's config, and its state: results file, counts, times
counts: Counter[str] = Counter()


def write(record: dict[str, Any]) -> None:
    cfg["out"].write(json.dumps(record) + "\n")


def progress(force: bool = False) -> None:
    now = time.monotonic()
    if force or now - cfg["printed"] >= cfg["progress_every_s"]:
        cfg["printed"], elapsed = now, int(now - cfg["started"])
        where = f"{cfg['label']} {cfg['done']}/{cfg['total']} {elapsed // 60}m{elapsed % 60:02d}s"
        text = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "starting"
        print(f"[{where}] {text}", file=sys.stderr, flush=True)


def pytest_configure(config: pytest.Config) -> None:
    if path := os.environ.get("ROCMFA_UPSTREAM_PLUGIN_CONFIG"):
        with open(path, encoding="utf-8") as f:
            cfg.update(json.load(f), started=time.monotonic(), printed=0.0, total=0, done=0)
        cfg["out"] = open(cfg["results_path"], "a", encoding="utf-8", buffering=1)  # noqa: SIM115


@pytest.hookimpl(trylast=True)  # after -k has deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not cfg:
        return
    selected, quick_max = len(items), cfg["quick_max"]
    stride = max(1, -(-len(items) // quick_max)) if quick_max else 1
    if stride > 1:
        config.hook.pytest_deselected(items=[it for i, it in enumerate(items) if i % stride])
        items[:] = items[::stride]
    for item in items:
        cls = getattr(item, "cls", None)
        keywords = [item.name, cls.__name__ if cls else "", os.path.basename(str(item.fspath))]
        for e in cfg["therock"]:  # pytest -k for one bare name: a substring, any case
            if any(e["name"].lower() in k.lower() for k in keywords):
                where = f"{e['file']} [{e['section']}/{e['module']}]"
                item.add_marker(pytest.mark.skip(reason=f"{THEROCK_PREFIX}{e['name']} ({where})"))
                break
    cfg["total"] = len(items)
    write({"event": "collected", "selected": selected, "kept": len(items), "quick_stride": stride})
    progress(force=True)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if cfg and report.failed:
        write({"event": "collect-error", "nodeid": report.nodeid, "message": _message(report)})


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if not cfg:
        return
    write({"event": "start", "nodeid": item.nodeid})
    if cfg["budget_s"] and time.monotonic() - cfg["started"] > cfg["budget_s"]:
        pytest.skip(f"{BUDGET_PREFIX}{cfg['budget_s'] / 60:g} min spent before this test")


def _message(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    return str(crash.message) if crash is not None else str(longrepr or "")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not cfg:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
    elif report.when == "teardown" and report.failed:
        outcome = "error"
    else:
        return
    record = {"event": "result", "nodeid": report.nodeid, "outcome": outcome,
              "when": report.when, "duration": round(report.duration, 4)}  # fmt: skip
    if outcome == "skipped":
        reason = _message(report)
        source = "therock" if reason.startswith(THEROCK_PREFIX) else "test-file"
        record |= {
            "reason": reason,
            "source": "ours" if reason.startswith(BUDGET_PREFIX) else source,
        }
    elif outcome in ("failed", "error"):
        record["message"] = (_message(report).strip().splitlines() or [""])[0][:500]
    elif outcome in ("xfailed", "xpassed"):
        record["reason"] = str(report.wasxfail)
    write(record)
    cfg["done"] += report.when != "teardown"
    counts[outcome] += 1
    progress()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if cfg:
        progress(force=True)
        write({"event": "finished", "exitstatus": int(exitstatus)})
        cfg["out"].close()
