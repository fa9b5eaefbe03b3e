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


class _State:
    def __init__(self, config: dict[str, Any]) -> None:
        self.cfg, self.started, self.printed = config, time.monotonic(), 0.0
        self.out = open(config["results_path"], "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self.total = self.done = 0
        self.counts: Counter[str] = Counter()

    def write(self, record: dict[str, Any]) -> None:
        self.out.write(json.dumps(record) + "\n")

    def progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.printed >= self.cfg["progress_every_s"]:
            self.printed, elapsed = now, int(now - self.started)
            counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items())) or "starting"
            where = f"{self.done}/{self.total} {elapsed // 60}m{elapsed % 60:02d}s"
            print(f"[{self.cfg['label']} {where}] {counts}", file=sys.stderr, flush=True)


_state: _State | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _state
    if path := os.environ.get("ROCMFA_UPSTREAM_PLUGIN_CONFIG"):
        with open(path, encoding="utf-8") as f:
            _state = _State(json.load(f))


@pytest.hookimpl(trylast=True)  # after -k has deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _state is None:
        return
    selected, quick_max = len(items), _state.cfg["quick_max"]
    stride = max(1, -(-len(items) // quick_max)) if quick_max else 1
    if stride > 1:
        config.hook.pytest_deselected(items=[it for i, it in enumerate(items) if i % stride])
        items[:] = items[::stride]
    for item in items:
        cls = getattr(item, "cls", None)
        keywords = [item.name, cls.__name__ if cls else "", os.path.basename(str(item.fspath))]
        for e in _state.cfg["therock"]:  # pytest -k for one bare name: a substring, any case
            if any(e["name"].lower() in k.lower() for k in keywords):
                where = f"{e['file']} [{e['section']}/{e['module']}]"
                item.add_marker(pytest.mark.skip(reason=f"{THEROCK_PREFIX}{e['name']} ({where})"))
                break
    _state.total = len(items)
    _state.write({"event": "collected", "selected": selected, "kept": len(items),
                  "quick_stride": stride})  # fmt: skip
    _state.progress(force=True)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if _state is not None and report.failed:
        _state.write(
            {"event": "collect-error", "nodeid": report.nodeid, "message": _message(report)}
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _state is None:
        return
    _state.write({"event": "start", "nodeid": item.nodeid})
    if _state.cfg["budget_s"] and time.monotonic() - _state.started > _state.cfg["budget_s"]:
        pytest.skip(f"{BUDGET_PREFIX}{_state.cfg['budget_s'] / 60:g} min spent before this test")


def _message(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    return str(crash.message) if crash is not None else str(longrepr or "")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _state is None:
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
        source = "ours" if reason.startswith(BUDGET_PREFIX) else source
        record |= {"reason": reason, "source": source}
    elif outcome in ("failed", "error"):
        record["message"] = (_message(report).strip().splitlines() or [""])[0][:500]
    elif outcome in ("xfailed", "xpassed"):
        record["reason"] = str(report.wasxfail)
    _state.write(record)
    _state.done += report.when != "teardown"
    _state.counts[outcome] += 1
    _state.progress()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _state is not None:
        _state.progress(force=True)
        _state.write({"event": "finished", "exitstatus": int(exitstatus)})
        _state.out.close()
