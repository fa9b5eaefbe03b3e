"""Run PyTorch's own SDPA tests (test/test_transformers.py of torch's commit, with real pytest)
against the installed torch, TheRock's skip list applied. More: docs/attention-tools.md."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import platform
import subprocess
import sys
import time
import tokenize
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

if __package__:
    from . import sdpa_common as common
else:  # run as `python scripts/rocmfa/probes/upstream_sdpa.py`
    import sdpa_common as common  # type: ignore[no-redef]

PROG = "upstream_sdpa.py"
SCHEMA = "sdpa-upstream/1"
PROBES_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROBES_DIR.parents[2]
TEST_PATH = "test/test_transformers.py"
SELECTION = "TestSDPA or TestAttnBias"
WORKDIR_ENV = "ROCMFA_WORKDIR"
GRACE_S = 120  # after the budget: time for the running test to end before the run is killed
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
THEROCK_PREFIX = "TheRock skip list: "  # the plugin's reason prefix
# The skip sources' names (the third, "ours", is its own): SOURCES.get(source, source).
SOURCES = {"therock": "TheRock skip list", "test-file": "the test file's own guard or skip"}
SKIP_DIR = Path("external-builds") / "pytorch" / "skip_tests"
PYTEST_ARGS = ["-c", "pytest.ini", "--rootdir", ".", "-q", "--tb=short", "-p", "upstream_sdpa"]


# --- TheRock's skip lists, read as ROCm/TheRock@89553ce3 external-builds/pytorch/skip_tests/
# create_skip_tests.py reads them (docs/attention-tools.md, "Skips").


def parse_skip_file(text: str, file_name: str) -> list[dict[str, str]]:
    """Every test name in a skip file's literal `skip_tests` dict, with its section, module and
    file, and the comment above it (TheRock's reason for the skip)."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    try:
        assigns = [n for n in ast.parse(text, file_name).body if isinstance(n, ast.Assign)]
        node = {getattr(t, "id", None): n.value for n in assigns for t in n.targets}["skip_tests"]
        ast.literal_eval(node)
        comment_tokens = (t for t in tokens if t.type == tokenize.COMMENT)
        comments = {t.start[0]: t.string.lstrip("#").strip() for t in comment_tokens}
        entries = []
        for section, modules in zip(node.keys, node.values, strict=True):
            for module, names in zip(modules.keys, modules.values, strict=True):
                start = names.lineno
                block = ""  # a block is its names' until the next one
                for name in names.elts:
                    above = (comments.get(n, "") for n in range(start, name.lineno))
                    block = " ".join(c for c in above if c.strip("-= ")) or block
                    comment = f"{block} {comments.get(name.end_lineno or 0, '')}".strip()
                    entry = {
                        "name": str(ast.literal_eval(name)),
                        "section": str(ast.literal_eval(section)),  # type: ignore[arg-type]
                        "module": str(ast.literal_eval(module)),  # type: ignore[arg-type]
                        "file": file_name,
                        "comment": comment,
                    }
                    entries.append(entry)
                    start = name.lineno + 1  # comments inside a name that spans lines count
    except (SyntaxError, ValueError, KeyError, AttributeError) as exc:
        what = "not a literal skip_tests = {section: {module: [names]}}"
        raise common.UsageError(f"{file_name}: {what} ({type(exc).__name__}: {exc})") from None
    return entries


def read_skip_dir(skip_dir: Path, torch_version: str) -> tuple[list[dict], list[str]]:
    """generic.py plus this torch's version file, and a note per file (read, or not there)."""
    if not (skip_dir / "generic.py").is_file():
        raise common.UsageError(f"{skip_dir}: no generic.py (not TheRock's skip_tests folder)")
    major, minor = torch_version.split(".")[:2]
    entries, notes = [], []
    for name in ("generic.py", f"pytorch_{major}.{minor}.py"):
        if not (skip_dir / name).is_file():
            notes.append(f"{name}: not in this TheRock (no version-specific skips for it)")
            continue
        entries += parse_skip_file((skip_dir / name).read_text(encoding="utf-8"), name)
        notes.append(f"{name}: read")
    return entries, notes


def therock_commit(checkout: Path) -> tuple[str | None, str]:
    """HEAD of the TheRock checkout itself, else the pinned commit, named as such."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        if (checkout / ".git").exists():
            git = ["git", "-C", str(checkout), "rev-parse", "HEAD"]
            head = subprocess.run(git, capture_output=True, text=True, timeout=30).stdout.strip()
            if head:
                return head, f"git HEAD of {checkout}"
    with contextlib.suppress(OSError, ValueError, KeyError):  # no pin: the report says "unknown"
        pin = tomllib.loads((REPO_ROOT / "pins" / "therock.toml").read_text())["therock"]["commit"]
        return str(pin), "pins/therock.toml (the folder is not a git checkout)"
    return None, "unknown"


def load_skips(therock_dir: Path | None, torch_version: str, arch: str | None) -> tuple[list, dict]:
    """The entries that apply here, and what the report says of them."""
    skip_dir = therock_dir / SKIP_DIR if therock_dir else None
    if skip_dir is None or not skip_dir.is_dir():
        missing = f"{skip_dir} not found (run build_pytorch, or --therock-dir)"
        note = f"{missing if skip_dir else '--no-therock'}: TheRock's skip list not applied"
        return [], {"dir": None, "commit": None, "files": [], "families": [], "note": note}
    entries, notes = read_skip_dir(skip_dir, torch_version)
    commit, how = therock_commit(therock_dir)
    families = [arch] if arch and arch.startswith("gfx") else []
    system = platform.system().lower()
    # What create_skip_tests.py pools: the entries whose section key is a substring of a filter.
    chosen = [e for e in entries if any(e["section"] in f for f in ["common", *families, system])]
    return chosen, {
        "dir": str(skip_dir),
        "commit": commit,
        "commit_from": how,
        "files": notes,
        "families": families,
        "platform": system,
        "note": f"{len(chosen)} of {len(entries)} entries apply ({'; '.join(notes)}; commit "
        f"{str(commit)[:12]} from {how})",
    }


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def find_test_file(opts: Any, work: Path, commit: str, torch_version: str) -> dict[str, Any]:
    """The test file for this torch: --test-file (unverified), else torch's commit from git."""
    checkout = Path(opts.torch_src or work / "src" / "pytorch")
    if opts.test_file:
        try:
            data = Path(opts.test_file).read_bytes()
        except OSError as exc:
            raise common.UsageError(f"--test-file {opts.test_file}: {exc.strerror}") from None
        blob = git_blob_sha1(data)
        how = (
            f"--test-file {opts.test_file} (git blob {blob[:12]}); NOT checked against torch's "
            f"commit {commit[:12]}"
        )
    else:
        cannot = f"PyTorch's test file for torch {torch_version} (git {commit[:12] or '?'})"
        if not commit or commit == "Unknown":
            raise common.UsageError(f"{cannot} cannot be had: torch.version.git_version is unknown")
        git = ["git", "-C", str(checkout)]
        rev_parse = [*git, "rev-parse", "--verify", "--quiet", f"{commit}:{TEST_PATH}"]
        blob = subprocess.run(rev_parse, capture_output=True, text=True).stdout.strip()
        data = subprocess.run([*git, "cat-file", "blob", blob], capture_output=True).stdout
        if not data or git_blob_sha1(data) != blob:
            fetch = f"git -C {checkout} fetch https://github.com/pytorch/pytorch {commit}"
            raise common.UsageError(
                f"{cannot} cannot be had: {checkout} has no commit {commit[:12]} (a git checkout "
                f"of PyTorch: git clone --filter=blob:none https://github.com/pytorch/pytorch "
                f"{checkout}; then {fetch} (ROCm/pytorch for TheRock's wheels)), or pass "
                "--test-file PATH"
            )
        where = f"the source checkout {checkout} (git blob {blob[:12]})"
        how = f"{TEST_PATH} at {commit[:12]} from {where}"
    return {"data": data, "blob_sha1": blob, "how": how, "verified": not opts.test_file}


def run_pass(name: str, selection: str, extra_env: dict[str, str], run: dict[str, Any]) -> tuple:
    """One pytest run of the test file with this module as its plugin."""
    run_dir = run["run_dir"]
    # A pytest.ini of its own: no ini of an enclosing folder (ours, under work/) applies.
    (run_dir / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    results = run_dir / f"results-{name}.jsonl"
    results.unlink(missing_ok=True)
    config = {
        **{k: run[k] for k in ("budget_s", "quick_max", "therock")},
        "results_path": str(results),
        "label": f"upstream {name}",
        "progress_every_s": 15,
    }
    plugin_config = run_dir / f"plugin-{name}.json"
    plugin_config.write_text(json.dumps(config))
    python_path = [str(PROBES_DIR), str(run_dir), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(python_path),
        "PYTHONUNBUFFERED": "1",
        "PYTORCH_TESTING_DEVICE_ONLY_FOR": run["devices"],
        **extra_env,
        "ROCMFA_UPSTREAM_PLUGIN_CONFIG": str(plugin_config),
    }
    argv = [sys.executable, "-m", "pytest", Path(TEST_PATH).name, *PYTEST_ARGS, "-k", selection]
    print(f"$ {' '.join(argv)}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    code = killed = None
    # pytest's report goes to the log; the plugin's progress lines (stderr) reach ours.
    with run["log_path"].open("ab") as log:
        log.write(f"\n==== pass {name}: {' '.join(argv)}\n".encode())
        log.flush()
        try:
            limit = run["budget_s"] + GRACE_S
            code = subprocess.run(argv, cwd=run_dir, env=env, stdout=log, timeout=limit).returncode
        except subprocess.TimeoutExpired:  # the run is killed
            killed = f"killed {GRACE_S} s after the {run['budget_s'] / 60:g} min budget"
    records = []
    with contextlib.suppress(OSError):
        for line in results.read_text(encoding="utf-8", errors="replace").splitlines():
            with contextlib.suppress(ValueError):  # a line cut by a kill
                records.append(json.loads(line))
    ended = {r["nodeid"] for r in records if r.get("event") == "result"}
    hung = [r["nodeid"] for r in records if r.get("event") == "start" and r["nodeid"] not in ended]
    if killed and hung:
        killed += f"; still running: {hung[-1]}"
    done = {
        "name": name,
        "selection": selection,
        "env": extra_env,
        "collected": next((r for r in records if r.get("event") == "collected"), None),
        "pytest_exit": code,
        "killed": killed,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    return done, pass_rows(done, records, run["log_path"])


def pass_rows(p: dict[str, Any], records: list[dict[str, Any]], log: Path) -> list[dict[str, Any]]:
    """One row per test of a pass (its worst outcome); counts and problems set on p."""
    rank = ("passed", "xfailed", "skipped", "xpassed", "error", "failed").index
    rows: dict[str, dict[str, Any]] = {}
    for r in (r for r in records if r.get("event") == "result"):
        parts = r["nodeid"].split("::")
        row = {
            **{k: v for k, v in r.items() if k != "event"},
            "pass": p["name"],
            "class": parts[-2] if len(parts) >= 3 else "",
            "test": parts[-1],
        }
        if r["nodeid"] not in rows or rank(row["outcome"]) > rank(rows[r["nodeid"]]["outcome"]):
            rows[r["nodeid"]] = row
    p["counts"] = {o: sum(1 for r in rows.values() if r["outcome"] == o) for o in OUTCOMES}
    errors = [r.get("message", "") for r in records if r.get("event") == "collect-error"]
    budget_skips = sum(1 for r in rows.values() if r.get("source") == "ours")
    collected_nothing = f"pytest collected nothing (exit {p['pytest_exit']}; see {log})"
    problems = [
        errors and f"the test file did not import: {common.first_line(errors[0], 200)}",
        p["killed"],
        budget_skips and f"time budget spent, {budget_skips} tests not run",
        not (errors or p["collected"]) and collected_nothing,
    ]
    p["problems"] = [f"pass {p['name']}: {text}" for text in problems if text]
    return list(rows.values())


def summarize(doc: dict[str, Any], rows: list[dict], skips: list[dict]) -> dict[str, Any]:
    """The counts and groupings of the rows, and the verdict line, added to the report."""
    by_class: dict[str, Counter] = {}
    for r in rows:
        by_class.setdefault(r["class"], Counter())[r["outcome"]] += 1
    skipped = [(r["source"], r["reason"]) for r in rows if r["outcome"] == "skipped"]
    comments = {e["name"]: e["comment"] for e in skips}
    doc["skips"] = []
    for (source, reason), n in sorted(Counter(skipped).items(), key=lambda kv: (-kv[1], kv[0])):
        group = {"source": source, "source_name": SOURCES.get(source, source), "reason": reason}
        if source == "therock":
            name = reason.removeprefix(THEROCK_PREFIX).split(" (")[0]
            group["therock_comment"] = comments.get(name, "")
        doc["skips"].append({**group, "count": n})
    doc["counts"] = dict(Counter(r["outcome"] for r in rows))
    doc["skips_by_source"] = dict(sorted(Counter(s for s, _ in skipped).items()))
    doc["by_class"] = {k: dict(v) for k, v in sorted(by_class.items())}
    doc["results"] = rows
    c = Counter(doc["counts"])
    tf = doc["test_file"]
    bad = c["failed"] + c["error"]
    ok = bad == 0 and c["passed"] > 0 and not doc["problems"]
    skips = ", ".join(f"{n} {SOURCES.get(s, s)}" for s, n in doc["skips_by_source"].items())
    source = f"test_transformers.py @ pytorch/pytorch:{doc['identity']['torch_commit'][:12]}"
    if not tf["verified"]:
        source = f"UNVERIFIED --test-file, git blob {tf['blob_sha1'][:12]}, not torch's commit"
    word = "PASS" if ok else "INCOMPLETE" if bad == 0 and doc["problems"] else "FAIL"
    skips = f" ({skips})" if skips else ""
    xfailed = f", {c['xfailed']} xfailed" if c["xfailed"] else ""
    line = (
        f"{word}: {c['passed']} passed, {bad} failed, {c['skipped']} skipped{skips}{xfailed} "
        f"of {c.total()} SDPA tests ({source}; torch {doc['identity']['torch']}; "
        f"{doc['wall_s']:.0f} s)"
    )
    if doc["problems"]:
        line += "; " + "; ".join(doc["problems"])
    elif bad:
        first = next(r for r in doc["results"] if r["outcome"] in ("failed", "error"))
        line += f"; first failure: {first['class']}::{first['test']}"
    return doc | {"passed": ok, "verdict": line}


def render(doc: dict[str, Any]) -> str:
    stride = (doc["passes"][0].get("collected") or {}).get("quick_stride") or 1
    ident = doc["identity"]
    passes = [(p["name"], p["wall_s"], *map(p["counts"].get, OUTCOMES)) for p in doc["passes"]]
    classes = [(k, *(v.get(o, 0) for o in OUTCOMES)) for k, v in doc["by_class"].items()]
    lines = [
        f"PyTorch's SDPA tests on {ident['gpu']} ({ident['arch'] or 'cpu'}), "
        f"torch {ident['torch']} (git {(ident['torch_commit'] or '')[:12]})",
        f"test file: {doc['test_file']['how']}",
        f'selection: -k "{SELECTION}", devices {doc["selection"]["devices"]}'
        + (f", --quick: 1 in {stride} selected tests" if doc["quick"] else ""),
        f"TheRock: {doc['therock']['note']}",
        "",
        *common.text_table(("pass", "wall s", *OUTCOMES), passes),
        "",
        "by class:",
        *common.text_table(("class", *OUTCOMES), classes),
    ]
    lines += ["", "skips (count, source: reason):"] if doc["skips"] else []
    for g in doc["skips"]:
        reason = g["reason"].removeprefix(THEROCK_PREFIX)
        reason += f" - {g['therock_comment']}" if g.get("therock_comment") else ""
        lines.append(f"  {g['count']:5d}  {g['source_name']}: {common.first_line(reason, 160)}")
    failures = [r for r in doc["results"] if r["outcome"] in ("failed", "error")]
    lines += ["", f"failures ({len(failures)}):"] if failures else []
    for r in failures[:40]:
        lines.append(f"  {r['class']}::{r['test']}: {common.first_line(r.get('message', ''), 160)}")
    lines += [f"  ... {len(failures) - 40} more in the JSON"] if len(failures) > 40 else []
    return "\n".join(lines)


def build_parser() -> common.OneLineArgumentParser:
    p = common.OneLineArgumentParser(prog=PROG, description=__doc__)
    add = p.add_argument
    add("--quick", action="store_true", help="every Nth test, about --quick-max in all")
    add("--quick-max", type=int, default=300, metavar="N", help="(default 300)")
    add("--budget-min", type=float, metavar="MIN", help="budget per pass (default 10 quick, 60)")
    add("--devices", choices=("cuda", "cpu", "cpu,cuda"), help="default: cuda if a GPU, else cpu")
    add("-k", dest="extra_k", metavar="EXPR", help="narrow the selection further")
    add("--no-ck", action="store_true", help="skip the CK pass on ROCm")
    add("--workdir", help=f"cache and checkouts (default ${WORKDIR_ENV}, else ./work)")
    add("--torch-src", help="PyTorch git checkout (default <workdir>/src/pytorch)")
    add("--therock-dir", help="TheRock checkout (default <workdir>/src/therock)")
    add("--no-therock", action="store_true", help="apply no TheRock skip list")
    add("--test-file", help="run this test_transformers.py instead (reported as unverified)")
    add("--json", metavar="PATH", help="write the full report as JSON to PATH")
    add("--log", metavar="PATH", help="pytest's own output (default <run dir>/pytest.log)")
    add("--dry-run", action="store_true", help="refused: see the error it gives")
    return p


def parse_args(argv: list[str] | None) -> Any:
    opts = build_parser().parse_args(argv)
    if opts.dry_run:  # which tests run is known only once the file is found and collected
        raise common.UsageError("--dry-run: PyTorch's own tests have no dry run; try --quick")
    for flag, value in (("--quick-max", opts.quick_max), ("--budget-min", opts.budget_min)):
        if value is not None and value <= 0:
            raise common.UsageError(f"{flag} must be positive")
    for module in ("pytest", "expecttest"):  # PyTorch's test helpers import both
        if importlib.util.find_spec(module) is None:
            need = f"PyTorch's tests need it: python -m pip install {module}"
            raise common.UsageError(f"{module} is not installed in {sys.executable}; {need}")
    return opts


@common.cli(PROG)
def main(argv: list[str] | None) -> int:
    started = time.perf_counter()
    opts = parse_args(argv)
    import torch

    workdir = opts.workdir or os.environ.get(WORKDIR_ENV) or REPO_ROOT / "work"
    work = Path(workdir).expanduser().resolve()
    devices = opts.devices or ("cuda" if torch.cuda.is_available() else "cpu")
    device = common.resolve_device("cuda" if "cuda" in devices else "cpu")
    doc, arch, _device_name = common.provenance(SCHEMA, device)
    test = find_test_file(opts, work, doc["identity"]["torch_commit"] or "", torch.__version__)
    print(f"test file: {test['how']}", file=sys.stderr, flush=True)
    therock_dir = None if opts.no_therock else Path(opts.therock_dir or work / "src" / "therock")
    skips, therock_info = load_skips(therock_dir, torch.__version__, arch)
    selection = f"({SELECTION})" + (f" and ({opts.extra_k})" if opts.extra_k else "")
    # One run folder per file version, quick or full; the log emptied.
    source = "checkout" if test["verified"] else "user"
    name = f"{source}-{test['blob_sha1'][:12]}" + "-quick" * opts.quick
    run_dir = work / "upstream-tests" / "runs" / name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / Path(TEST_PATH).name).write_bytes(test.pop("data"))
    log_path = Path(opts.log) if opts.log else run_dir / "pytest.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")
    run = {
        "run_dir": run_dir,
        "devices": devices,
        "therock": skips,
        "budget_s": 60 * (opts.budget_min or (10 if opts.quick else 60)),
        "quick_max": opts.quick_max if opts.quick else None,
        "log_path": log_path,
    }
    plan = {"main": (selection, {})}  # pass name: its -k selection and extra variables
    ck = torch.version.hip and common.ask(torch.backends.cuda.is_ck_sdpa_available)
    if device.type == "cuda" and ck and not opts.no_ck:
        plan["ck"] = (f"{selection} and flash", {"TORCH_ROCM_FA_PREFER_CK": "1"})
    ran = [run_pass(pass_name, k, extra_env, run) for pass_name, (k, extra_env) in plan.items()]
    passes = [done for done, _ in ran]
    rows = [row for _, rows_of_pass in ran for row in rows_of_pass]
    doc |= {
        "test_file": test,
        "selection": {"k": selection, "devices": devices, "ck_pass": len(passes) > 1},
        "therock": {**therock_info, "entries": skips},
        "quick": opts.quick,
        "log": str(log_path),
        "problems": [text for p in passes for text in p["problems"]],
        "passes": passes,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    doc = summarize(doc, rows, skips)
    common.emit(opts.json, doc, render(doc) + "\n\n" + doc["verdict"])
    return 0 if doc["passed"] else 1


# --- the pytest plugin: `pytest -p upstream_sdpa` in the run of the test file, configured by
# $ROCMFA_UPSTREAM_PLUGIN_CONFIG: TheRock's entries as skip marks, every Nth test for --quick, a
# skip once the time budget is spent, progress lines, and one JSON line per outcome to a results
# file that survives a kill. It imports pytest only in that run.

BUDGET_PREFIX = "ours: time budget of "
_run: dict[str, Any] = {}  # that run's config and state


def _write(record: dict[str, Any]) -> None:
    _run["out"].write(json.dumps(record) + "\n")


def _progress(force: bool = False) -> None:
    now = time.monotonic()
    if force or now - _run["printed"] >= _run["progress_every_s"]:
        _run["printed"] = now
        elapsed = int(now - _run["started"])
        where = f"{_run['done']}/{_run['total']} {elapsed // 60}m{elapsed % 60:02d}s"
        text = ", ".join(f"{n} {k}" for k, n in sorted(_run["counts"].items())) or "starting"
        print(f"[{_run['label']} {where}] {text}", file=sys.stderr, flush=True)


def pytest_configure(config: Any) -> None:
    _run.update(json.loads(Path(os.environ["ROCMFA_UPSTREAM_PLUGIN_CONFIG"]).read_text()))
    _run.update(started=time.monotonic(), printed=0.0, total=0, done=0, counts=Counter())
    _run["out"] = open(_run["results_path"], "a", encoding="utf-8", buffering=1)  # noqa: SIM115


def pytest_collection_finish(session: Any) -> None:  # after -k has deselected
    import pytest

    items = session.items
    selected = len(items)
    stride = max(1, -(-selected // _run["quick_max"])) if _run["quick_max"] else 1
    if stride > 1:
        session.config.hook.pytest_deselected(items=[t for i, t in enumerate(items) if i % stride])
        items[:] = items[::stride]
    for item in items:
        cls = getattr(item, "cls", None)
        keywords = [item.name, cls.__name__ if cls else "", os.path.basename(str(item.fspath))]
        for e in _run["therock"]:  # pytest -k for one bare name: a substring, any case
            if any(e["name"].lower() in k.lower() for k in keywords):
                where = f"{e['file']} [{e['section']}/{e['module']}]"
                item.add_marker(pytest.mark.skip(reason=f"{THEROCK_PREFIX}{e['name']} ({where})"))
                break
    _run["total"] = len(items)
    _write({"event": "collected", "selected": selected, "kept": len(items), "quick_stride": stride})
    _progress(force=True)


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _write({"event": "collect-error", "nodeid": report.nodeid, "message": _message(report)})


def pytest_runtest_setup(item: Any) -> None:
    import pytest

    _write({"event": "start", "nodeid": item.nodeid})
    if time.monotonic() - _run["started"] > _run["budget_s"]:
        pytest.skip(f"{BUDGET_PREFIX}{_run['budget_s'] / 60:g} min spent before this test")


def _message(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    return str(crash.message) if crash is not None else str(longrepr or "")


def pytest_runtest_logreport(report: Any) -> None:
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
    elif report.when == "teardown" and report.failed:
        outcome = "error"
    else:
        return
    record = {"event": "result", "nodeid": report.nodeid, "outcome": outcome}
    if outcome == "skipped":
        reason = record["reason"] = _message(report)
        source = "therock" if reason.startswith(THEROCK_PREFIX) else "test-file"
        record["source"] = "ours" if reason.startswith(BUDGET_PREFIX) else source
    elif outcome in ("failed", "error"):
        record["message"] = common.first_line(_message(report), 500)
    elif outcome in ("xfailed", "xpassed"):
        record["reason"] = str(report.wasxfail)
    _write(record)
    _run["done"] += report.when != "teardown"
    _run["counts"][outcome] += 1
    _progress()


def pytest_sessionfinish() -> None:
    _progress(force=True)
    _run["out"].close()


if __name__ == "__main__":
    sys.exit(main())
