"""The results page in a real headless Chromium (Debian's chromium + chromium-driver, driven by
selenium): it loads from file:// with no console error and no network request, every section
and chart is there, the numbers in the page are the numbers in its JSON, and a screenshot is
taken. Skipped with the reason when the browser, its driver or selenium is missing (.ci/run
installs them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rocmfa.plumbing.options import ReportOptions
from rocmfa.report import page
from tests.support.project import results_dir

ROOT = Path(__file__).resolve().parent.parent
RESULTS = results_dir()
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--window-size=1400,1000",
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    for path in (CHROMIUM, DRIVER):
        if not Path(path).exists():
            pytest.skip(f"{path} not found (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def test_page_in_chromium(browser, tmp_path, capsys):
    out = tmp_path / "page"
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("aa2", "aa3", "bench_llm", "backend_check_i32", "validate_i32"):
        shutil.copy(RESULTS / f"{name}.json", folder)
    shutil.copy(RESULTS / "ab-forward-twice" / "ab1.json", folder)
    (folder / "broken.json").write_text('{"schema": "sdpa-bench/1", "resu')
    options = ReportOptions(out=str(out), baseline=str(RESULTS / "aa1.json"))
    assert page.report(options, [str(folder)]) == 0
    capsys.readouterr()
    data = json.loads((out / "results.json").read_text())

    browser.get_log("performance")  # drop what came before this page
    browser.get((out / "results.html").as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == []
    requests = [
        json.loads(e["message"])["message"]["params"]["request"]["url"]
        for e in browser.get_log("performance")
        if '"Network.requestWillBeSent"' in e["message"]
    ]
    # The page's own file only; chrome:// is the browser's internal UI, never the network.
    assert any(url.startswith("file://") for url in requests), requests
    local = ("file://", "chrome://", "chrome-extension://", "data:", "about:")
    assert [url for url in requests if not url.startswith(local)] == []

    find = browser.execute_script
    for section in ("identity", "verdicts", "bench", "baseline", "over-time", "not-shown"):
        assert find(f"return !!document.getElementById('{section}')"), section
    assert find("return document.querySelectorAll('#identity .card').length") == len(data["sets"])
    charts = find("return Array.from(document.querySelectorAll('svg.chart')).map(s => s.id)")
    assert any(c.startswith("bench-") for c in charts)
    assert any(c.startswith("speedup-") for c in charts) and any(
        c.startswith("time-") for c in charts
    )
    drawn = find(
        "return Array.from(document.querySelectorAll('svg.chart')).map(s => s.getBBox().width)"
    )
    assert all(w > 0 for w in drawn)
    assert "broken.json" in find("return document.getElementById('not-shown').textContent")

    # Numbers in the page = numbers in the JSON: every bench table's cells, set by set.
    tables = find(
        "return Array.from(document.querySelectorAll('table.bench-table')).map(t => ({"
        "sets: t.dataset.sets, rows: Array.from(t.rows).map(r => Array.from(r.cells)"
        ".map(c => c.textContent))}))"
    )
    by_id = {s["id"]: s for s in data["sets"]}
    checked = 0
    for table in tables:
        header, *rows = table["rows"]
        for set_id in table["sets"].split(", "):
            col = header.index(f"{set_id} ms")
            expected = [r for r in by_id[set_id]["bench"] if r["status"] == "ok" and r["median_ms"]]
            shown = [row for row in rows if row[col] != "-"]
            assert len(shown) == len(expected)
            for row, want in zip(shown, expected, strict=True):
                assert float(row[col].rstrip("*†")) == want["median_ms"]
                assert row[col + 1] == ("-" if want["tflops"] is None else repr(want["tflops"]))
                checked += 1
    assert checked == sum(len([r for r in s["bench"] if r["status"] == "ok"]) for s in data["sets"])
    summary = find(
        "return Array.from(document.querySelectorAll('table.comparisons tr')).slice(1)"
        ".map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    for row, comp in zip(summary, data["comparisons"], strict=True):
        assert row[0] == comp["set"] and float(row[-1]) == comp["geomean_speedup"]

    height = find("return document.body.scrollHeight")
    browser.set_window_size(1400, min(height + 40, 8000))
    shot = tmp_path / "results.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
