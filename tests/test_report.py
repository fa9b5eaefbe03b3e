"""nox -s report: the results page from the H100's real JSON (docs/results), every bad input
listed with its reason (page and terminal), --baseline judged by the change rule, and --index
reading the report summaries in wheel-set manifests on a team index (a directory tree and the
pypiserver stand-in of tests/support/team_index.py)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfa.plumbing import team_index
from rocmfa.plumbing.errors import UserError
from rocmfa.plumbing.options import ReportOptions
from rocmfa.report import page
from rocmfa.sharing import install_wheels, publish
from tests.support.project import results_dir
from tests.support.team_index import pypiserver_families

ROOT = Path(__file__).resolve().parent.parent
RESULTS = results_dir()
GOOD = (
    "aa1",
    "aa2",
    "aa3",
    "bench_llm",
    "backend_check_i32",
    "validate_i32",
    "crosscheck_profiler",
)


def make_inputs(folder: Path) -> dict[str, Path]:
    """The real GPU files, and one of each kind of bad input."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for name in GOOD:
        files[name] = folder / f"{name}.json"
        shutil.copy(RESULTS / f"{name}.json", files[name])
    text = (RESULTS / "aa4.json").read_text()
    bad = {
        "truncated": text[: len(text) // 2],
        "unknown": json.dumps({"schema": "sdpa-something/9", "results": []}),
        "older": (RESULTS / "bench.json").read_text(),  # sdpa-bench/1 before the identity
        "duplicate": (RESULTS / "aa2.json").read_text(),
        "newer": text.replace('"version": 1,', '"version": 99,', 1),
        "binary": "\udcff",
        "noresults": json.dumps({**json.loads(text), "results": None}),
        "nofamilies": json.dumps({"schema": "rocmfa-kernel-check/1", "arch": "gfx1151"}),
    }
    for name, body in bad.items():
        files[name] = folder / f"{name}.json"
        if name == "binary":
            files[name].write_bytes(b"\xff\xfe\x00junk")
        else:
            files[name].write_text(body)
    return files


def run_report(capsys, *inputs: str, **opts: str) -> tuple[int, dict, list[str]]:
    rc = page.report(ReportOptions(**opts), list(inputs))
    err = capsys.readouterr().err.strip().splitlines()
    data = json.loads((Path(opts["out"]) / "results.json").read_text())
    return rc, data, err


def test_page_shows_the_good_and_lists_every_bad_input(tmp_path, capsys):
    files = make_inputs(tmp_path / "in")
    out = tmp_path / "out"
    rc, data, err = run_report(capsys, str(tmp_path / "in"), "/no/such", out=str(out))
    assert rc == 0
    why = {Path(n["input"]).stem: n["why"] for n in data["not_shown"]}
    assert why["truncated"].startswith("malformed or truncated JSON")
    assert why["unknown"].startswith("unknown schema 'sdpa-something/9'")
    assert why["older"].startswith("older schema: sdpa-bench/1 without 'identity'")
    assert why["newer"].startswith("unknown identity version 99")
    assert why["binary"].startswith("not UTF-8")
    assert why["noresults"] == "bench JSON without a 'results' list"
    assert why["nofamilies"] == "kernel check summary without 'families'"
    assert why["such"] == "cannot read: No such file or directory"
    dup = next(k for k in ("aa2", "duplicate") if k in why)  # whichever was read second
    assert "same machine and time" in why[dup]
    assert len(err) == len(data["not_shown"]) and all(
        e.startswith("report: not shown: ") for e in err
    )
    assert [len(s["bench"]) for s in data["sets"]] == [120, 120, 120, 192]
    verdicts = {k for s in data["sets"] for k in s["verdicts"]}
    assert verdicts == {"backend_check", "validate", "crosscheck"}
    html_text = (out / "results.html").read_text()
    for section in ("identity", "verdicts", "bench", "over-time", "not-shown"):
        assert f'<section id="{section}">' in html_text
    # Nothing to fetch: no script, no external reference (the SVG namespace is a name, not a fetch).
    assert "<script" not in html_text and "url(" not in html_text and "@import" not in html_text
    assert not re.search(r'(src|href)="(?!#)', html_text)
    assert files["truncated"].name in html_text


def test_baseline_speedups_use_the_change_rule(tmp_path, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("aa2", "bench_llm"):
        shutil.copy(RESULTS / f"{name}.json", folder)
    shutil.copy(RESULTS / "ab-forward-twice" / "ab1.json", folder)
    rc, data, _err = run_report(
        capsys, str(folder), baseline=str(RESULTS / "aa1.json"), out=str(tmp_path / "o")
    )
    assert rc == 0
    by_set = {c["set"]: c for c in data["comparisons"]}
    ids = {s["files"].get("bench", "").split("/")[-1]: s["id"] for s in data["sets"]}
    assert by_set[ids["aa2.json"]]["counts"]["faster"] == 0
    assert by_set[ids["aa2.json"]]["counts"]["slower"] == 0
    assert by_set[ids["ab1.json"]]["counts"]["slower"] >= 70
    # The llm run is shown in full and said not to be compared (no baseline of its kind).
    assert not data["not_shown"] and len(data["sets"]) == 4
    (note,) = data["not_compared"]
    assert note["input"].endswith("bench_llm.json") and "no baseline of its bench" in note["why"]
    assert next(s for s in data["sets"] if s["files"]["bench"] == note["input"])["bench"]
    base = next(s for s in data["sets"] if s["baseline"])
    assert base["files"]["bench"] == str(RESULTS / "aa1.json")


def test_one_baseline_folder_with_an_llm_and_a_default_run_compares_each_with_its_own(
    tmp_path, capsys
):
    base, runs = tmp_path / "base", tmp_path / "runs"
    base.mkdir()
    runs.mkdir()
    shutil.copy(RESULTS / "aa1.json", base)
    shutil.copy(RESULTS / "issue38" / "llm.json", base)
    shutil.copy(RESULTS / "aa2.json", runs)
    llm = json.loads((RESULTS / "issue38" / "llm.json").read_text())
    llm["identity"]["date"] = "2026-11-27T00:00:00Z"  # a later run of the same suite
    (runs / "llm2.json").write_text(json.dumps(llm))
    rc, data, err = run_report(capsys, str(runs), baseline=str(base), out=str(tmp_path / "o"))
    assert rc == 0 and not err and not data["not_shown"] and not data["not_compared"]
    pairs = {
        (by_id["files"]["bench"].split("/")[-1], c["baseline"])
        for c in data["comparisons"]
        for by_id in data["sets"]
        if by_id["id"] == c["set"]
    }
    ids = {s["files"]["bench"].split("/")[-1]: s["id"] for s in data["sets"]}
    assert pairs == {("aa2.json", ids["aa1.json"]), ("llm2.json", ids["llm.json"])}
    llm_comp = next(c for c in data["comparisons"] if c["baseline"] == ids["llm.json"])
    assert llm_comp["counts"]["faster"] == llm_comp["counts"]["slower"] == 0
    # Memory-bound rows get their own view, in GB/s against the roof.
    html_text = (tmp_path / "o" / "results.html").read_text()
    assert 'id="bench-mem-' in html_text and "Memory-bound rows" in html_text
    decode = next(
        r
        for s in data["sets"]
        for r in s["bench"]
        if r["size"] == "decode-128k-d128" and r["backend"] == "flash" and r["dtype"] == "bf16"
    )
    assert decode["bound"] == "memory" and decode["pct_roof"] >= 85
    assert f"{decode['gbps']} GB/s, {decode['pct_roof']}% of the memory roof" in html_text


@pytest.mark.parametrize("bad", ["truncated", "validate-only", "missing"])
def test_an_unusable_baseline_is_one_line_and_non_zero(tmp_path, capsys, bad):
    path = tmp_path / f"{bad}.json"
    if bad == "truncated":
        text = (RESULTS / "aa1.json").read_text()
        path.write_text(text[: len(text) // 3])
    elif bad == "validate-only":
        shutil.copy(RESULTS / "validate_i32.json", path)
    with pytest.raises(UserError) as caught:
        page.report(ReportOptions(baseline=str(path), out=str(tmp_path / "o")), [str(RESULTS)])
    message = str(caught.value)
    assert message.startswith(f"report: --baseline {path}: ") and "\n" not in message
    assert {
        "truncated": "malformed or truncated JSON",
        "validate-only": "holds no bench result",
        "missing": "cannot read: No such file or directory",
    }[bad] in message
    assert not (tmp_path / "o").exists()


def test_nothing_shown_is_one_line_and_non_zero(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(UserError, match="nothing could be shown"):
        page.report(ReportOptions(out=str(tmp_path / "o")), [str(tmp_path / "bad.json")])
    done = subprocess.run(
        [sys.executable, "-m", "nox", "-s", "report", "--", str(tmp_path / "bad.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    assert "malformed or truncated JSON" in done.stderr
    assert "nothing could be shown" in done.stderr


def publish_manifest(family_dir: Path, published: str, *reports: str) -> str:
    """What publish puts on a team index: the manifest wheel (its report summaries made by
    publish's own summarize_report) and the project page listing it."""
    summaries = dict(publish.summarize_report(RESULTS / f"{r}.json") for r in reports)
    manifest = {
        "schema": install_wheels.SCHEMA, "set_id": published.replace(":", "")[-16:].rjust(16, "0"),
        "published": published, "arch": "gfx1151", "family": "gfx1151",
        "python": "cp312", "rocm_sdk": "7.12.0", "flash_attention": True, "wheels": [],
        "torch": {"version": "2.11.0", "commit": "70d99e998b49"},
        "aotriton": {"version": "0.11.2b", "commit": "abc123"},
        "patches": {"aotriton": {"digest": "d1g35t"}}, "reports": summaries,
    }  # fmt: skip
    project = family_dir / install_wheels.MANIFEST_PROJECT
    wheel = project / publish.manifest_wheel_name(manifest)
    publish.write_manifest_wheel(manifest, wheel)
    return wheel.name


def write_page(project: Path) -> None:
    entries = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in project.glob("*.whl")}
    (project / "index.html").write_text(team_index.project_page(entries))


@pytest.mark.parametrize("form", ["directory", "pypiserver"])
def test_index_reads_the_summaries_publish_put_in_manifests(tmp_path, capsys, form):
    if form == "directory":
        family = tmp_path / "idx" / "v2" / "gfx1151"
    else:
        family = tmp_path / "pypi" / "gfx1151"
    publish_manifest(family, "2026-11-24T22:39:14Z", "aa1", "backend_check_i32")
    publish_manifest(family, "2026-11-24T22:40:27Z", "aa4")
    if form == "directory":
        write_page(family / install_wheels.MANIFEST_PROJECT)
        urls = [(str(family), None), (str(tmp_path / "idx"), "gfx1151")]
        for index, arch in urls:
            rc, data, _ = run_report(capsys, index=index, arch=arch, out=str(tmp_path / "o"))
            check_index_data(rc, data)
        return
    # pypiserver serves the files in its folder itself (as after a twine upload).
    for wheel in family.joinpath(install_wheels.MANIFEST_PROJECT).glob("*.whl"):
        wheel.rename(family / wheel.name)
    with pypiserver_families(tmp_path / "pypi") as url:
        rc, data, _ = run_report(
            capsys, index=f"pypi+{url}", arch="gfx1151", baseline=str(RESULTS / "aa2.json"),
            out=str(tmp_path / "o"),
        )  # fmt: skip
    check_index_data(rc, data, baseline=True)


def check_index_data(rc: int, data: dict, baseline: bool = False) -> None:
    assert rc == 0
    from_index = [s for s in data["sets"] if s["identity"].get("wheel_set")]
    assert len(from_index) == 2
    first = from_index[0]
    assert first["identity"]["patches"] == {"aotriton": "d1g35t"}
    assert first["identity"]["gpu"] == "NVIDIA H100 80GB HBM3"  # the probe's own identity
    assert len(first["bench"]) == 120 and "backend_check" in first["verdicts"]
    if baseline:
        assert {c["set"] for c in data["comparisons"]} == {s["id"] for s in from_index}
        assert all(c["counts"]["slower"] == 0 for c in data["comparisons"])


def test_index_needs_a_family(tmp_path):
    with pytest.raises(UserError, match="name the family"):
        page.report(ReportOptions(index=str(tmp_path), out=str(tmp_path / "o")), [])


def test_the_page_module_loads_few_of_ours_and_reads_kernel_checks_schema():
    """Only --index needs the team-index modules (imported then); the page's own schema table
    names kernel_check's summary without importing the builds."""
    from rocmfa.builds import kernel_check
    from rocmfa.report import inputs

    assert inputs.KINDS[kernel_check.SUMMARY_SCHEMA] == "kernel_check"
    code = "import sys, rocmfa.report.page; print(sum(m.startswith('rocmfa') for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(done.stdout) <= 12
