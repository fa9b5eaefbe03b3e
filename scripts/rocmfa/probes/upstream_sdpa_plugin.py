"""pytest plugin loaded by upstream_sdpa.py into the run of PyTorch's own test file: marks each
test TheRock's skip list names as skipped with that entry as the reason, keeps every Nth test for
--quick, skips what is left once the time budget is spent, prints progress, and writes one JSON
line per outcome to a results file that survives a kill. Config: $ROCMFA_UPSTREAM_PLUGIN_CONFIG.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import pytest
import therock_skips  # beside this file: upstream_sdpa puts the probes' folder on PYTHONPATH

CONFIG_ENV = "ROCMFA_UPSTREAM_PLUGIN_CONFIG"
THEROCK_PREFIX = "TheRock skip list: "
BUDGET_PREFIX = "ours: time budget of "


class _State:
    def __init__(self, config: dict[str, Any]) -> None:
        self.cfg, self.started, self.last_print = config, time.monotonic(), 0.0
        self.budget_s, self.every_s = float(config["budget_s"]), float(config["progress_every_s"])
        self.out = open(config["results_path"], "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self.total = self.done = 0
        self.counts: dict[str, int] = {}

    def write(self, record: dict[str, Any]) -> None:
        self.out.write(json.dumps(record) + "\n")

    def progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_print < self.every_s:
            return
        self.last_print = now
        elapsed = int(now - self.started)
        counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items())) or "starting"
        where = f"{self.cfg['label']} {self.done}/{self.total} {elapsed // 60}m{elapsed % 60:02d}s"
        print(f"[{where}] {counts}", file=sys.stderr, flush=True)


_state: _State | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _state
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return
    with open(path, encoding="utf-8") as f:
        _state = _State(json.load(f))


def _keywords(item: pytest.Item) -> list[str]:
    cls = getattr(item, "cls", None)
    return [item.name, *([cls.__name__] if cls else []), os.path.basename(str(item.fspath))]


@pytest.hookimpl(trylast=True)  # after -k has deselected
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    if _state is None:
        return
    selected = len(items)
    quick_max = int(_state.cfg.get("quick_max") or 0)
    stride = max(1, -(-len(items) // quick_max)) if quick_max else 1
    if stride > 1:
        keep = [it for i, it in enumerate(items) if i % stride == 0]
        dropped = [it for i, it in enumerate(items) if i % stride != 0]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    entries = _state.cfg.get("therock") or []
    for item in items:
        for entry in entries:
            if therock_skips.matches(entry["name"], _keywords(item)):
                where = f"{entry['file']} [{entry['section']}/{entry['module']}]"
                item.add_marker(
                    pytest.mark.skip(reason=f"{THEROCK_PREFIX}{entry['name']} ({where})")
                )
                break
    _state.total = len(items)
    _state.write(
        {"event": "collected", "selected": selected, "kept": len(items), "quick_stride": stride}
    )
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
    if _state.budget_s and time.monotonic() - _state.started > _state.budget_s:
        pytest.skip(f"{BUDGET_PREFIX}{_state.budget_s / 60:g} min spent before this test")


def _message(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
        return text[len("Skipped: ") :] if text.startswith("Skipped: ") else text
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    return str(longrepr or "")


def _source(reason: str) -> str:
    if reason.startswith(THEROCK_PREFIX):
        return "therock"
    if reason.startswith(BUDGET_PREFIX):
        return "ours"
    return "test-file"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _state is None:
        return
    outcome = None
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        else:
            outcome = report.outcome
    elif report.when == "teardown" and report.failed:
        outcome = "error"
    if outcome is None:
        return
    duration = round(report.duration, 4)
    record: dict[str, Any] = {"event": "result", "nodeid": report.nodeid, "outcome": outcome,
                              "when": report.when, "duration": duration}  # fmt: skip
    if outcome == "skipped":
        reason = _message(report)
        record["reason"] = reason
        record["source"] = _source(reason)
    elif outcome in ("failed", "error"):
        record["message"] = (
            _message(report).strip().splitlines()[0][:500] if report.longrepr else ""
        )
    elif outcome in ("xfailed", "xpassed"):
        record["reason"] = str(getattr(report, "wasxfail", ""))
    _state.write(record)
    if report.when != "teardown":
        _state.done += 1
    _state.counts[outcome] = _state.counts.get(outcome, 0) + 1
    _state.progress()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _state is None:
        return
    _state.progress(force=True)
    _state.write({"event": "finished", "exitstatus": int(exitstatus)})
    _state.out.close()
