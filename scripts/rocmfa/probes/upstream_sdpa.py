"""Run PyTorch's own SDPA tests (test/test_transformers.py) against the installed torch.

The test file of the commit torch was built from, read from a PyTorch checkout's git object
store (blob id checked; --test-file: unverified), run with real pytest in a subprocess:
-k "TestSDPA or TestAttnBias", a CK pass on ROCm, TheRock's skip list (therock_skips.py), a time
budget, --quick. Exit 0 when every test that ran passed (one at least); 1 on a failure, an import
error or a spent budget; 2 on bad input or when nothing can be run. More:
docs/attention-tools.md ("validate --upstream").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

if __package__:
    from . import sdpa_common as common
    from . import therock_skips
else:  # run as `python scripts/rocmfa/probes/upstream_sdpa.py`
    import sdpa_common as common  # type: ignore[no-redef]
    import therock_skips  # type: ignore[no-redef]

PROG = "upstream_sdpa.py"
SCHEMA = "sdpa-upstream/1"
PROBES_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROBES_DIR.parents[2]
PLUGIN = "upstream_sdpa_plugin"
TEST_PATH = "test/test_transformers.py"
SELECTION = "TestSDPA or TestAttnBias"
WORKDIR_ENV = "ROCMFA_WORKDIR"
PIN_FILE = REPO_ROOT / "pins" / "therock.toml"
GRACE_S = 120  # after the budget: time for the running test to end before the run is killed
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
THEROCK_PREFIX = "TheRock skip list: "  # the plugin's reason prefix
SOURCES = {
    "therock": "TheRock skip list",
    "test-file": "the test file's own guard or skip",
    "ours": "ours",
}


class CannotRun(Exception):
    """Nothing can be run (test file, pytest or expecttest missing): one line, exit 2."""


def therock_commit(checkout: Path) -> tuple[str | None, str]:
    """HEAD of the TheRock checkout itself (never of a repository that merely encloses the
    folder), else the pinned commit, named as such."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        if (checkout / ".git").exists():
            git = ["git", "-C", str(checkout), "rev-parse", "HEAD"]
            head = subprocess.run(git, capture_output=True, text=True, timeout=30).stdout.strip()
            if head:
                return head, f"git HEAD of {checkout}"
    pin = pinned_therock_commit()
    return pin, "pins/therock.toml (the folder is not a git checkout)" if pin else "unknown"


def pinned_therock_commit() -> str | None:
    try:
        return str(tomllib.loads(PIN_FILE.read_text())["therock"]["commit"])
    except (OSError, ValueError, KeyError):  # no pin file: the report says "unknown"
        return None


def require_test_tools() -> dict[str, str]:
    """pytest and torch's test helpers must import; else one line saying what to install."""
    versions = {}
    for module in ("pytest", "expecttest"):
        try:
            versions[module] = str(getattr(__import__(module), "__version__", "?"))
        except ImportError:
            need = f"PyTorch's tests need it: python -m pip install {module}"
            raise CannotRun(f"{module} is not installed in {sys.executable}; {need}") from None
    return versions


def load_skips(
    therock_dir: Path | None, torch_version: str, arch: str | None
) -> tuple[list[therock_skips.SkipEntry], dict[str, Any]]:
    info: dict[str, Any] = {"dir": None, "commit": None, "files": [], "families": []}
    if therock_dir is None:
        info["note"] = "--no-therock: TheRock's skip list not applied"
        return [], info
    skip_dir = therock_dir / therock_skips.SKIP_DIR
    info["dir"] = str(skip_dir)
    if not skip_dir.is_dir():
        info["note"] = f"{skip_dir} not found (run build_pytorch, or --therock-dir): not applied"
        return [], info
    try:
        entries, notes = therock_skips.read_skip_dir(skip_dir, torch_version)
    except therock_skips.SkipListError as exc:
        raise common.UsageError(str(exc)) from None
    commit, how = therock_commit(therock_dir)
    families = [arch] if arch and arch.startswith("gfx") else []
    chosen = therock_skips.select(entries, families, platform.system())
    info.update(commit=commit, commit_from=how, files=notes, families=families,
                platform=platform.system().lower(), entries_read=len(entries),
                entries_applied=len(chosen))  # fmt: skip
    return chosen, info


def run_pass(name: str, selection: str, extra_env: dict[str, str], run: dict[str, Any]) -> dict:
    """One pytest run of the test file; returns its records and how it ended. run: test_file,
    run_dir, devices, therock (skip entries), budget_s, quick_max, log_path."""
    run_dir, budget_s = run["run_dir"], run["budget_s"]
    run_dir.mkdir(parents=True, exist_ok=True)
    # A pytest.ini of its own: no ini of an enclosing folder (ours, under work/) applies.
    ini = run_dir / "pytest.ini"
    ini.write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    results = run_dir / f"results-{name}.jsonl"
    results.unlink(missing_ok=True)
    config = {"results_path": str(results), "budget_s": budget_s, "quick_max": run["quick_max"],
              "therock": [e.as_dict() for e in run["therock"]], "label": f"upstream {name}",
              "progress_every_s": 15}  # fmt: skip
    config_path = run_dir / f"plugin-{name}.json"
    config_path.write_text(json.dumps(config))
    python_path = [str(PROBES_DIR), str(run_dir), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(python_path), "PYTHONUNBUFFERED": "1",
           "PYTORCH_TESTING_DEVICE_ONLY_FOR": run["devices"], **extra_env,
           "ROCMFA_UPSTREAM_PLUGIN_CONFIG": str(config_path)}  # fmt: skip
    local_copy = run_dir / Path(TEST_PATH).name
    local_copy.write_bytes(run["test_file"])
    argv = [sys.executable, "-m", "pytest", str(local_copy), "-c", str(ini), "--rootdir"]
    argv += [str(run_dir), "-q", "--tb=short", "-k", selection, "-p", PLUGIN]
    print(f"$ {' '.join(argv)}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    code, killed = run_logged(argv, run_dir, env, run["log_path"], budget_s, name)
    wall = time.perf_counter() - started
    records = read_records(results)
    if killed:
        started_ids = [r["nodeid"] for r in records if r.get("event") == "start"]
        finished = {r["nodeid"] for r in records if r.get("event") == "result"}
        hung = [n for n in started_ids if n not in finished]
        killed += f"; still running: {hung[-1]}" if hung else ""
    collected = next((r for r in records if r.get("event") == "collected"), None)
    return {"name": name, "selection": selection, "env": extra_env, "collected": collected,
            "pytest_exit": code, "killed": killed, "wall_s": round(wall, 1),
            "records": records}  # fmt: skip


def run_logged(
    argv: list[str], run_dir: Path, env: dict, log_path: Path, budget_s: float, name: str
) -> tuple[int | None, str | None]:
    """(exit status, why it was killed): pytest's report goes to the log; the plugin's progress
    lines (its stderr) reach ours as they come, so a long run is never silent."""
    with log_path.open("ab") as log:
        log.write(f"\n==== pass {name}: {' '.join(argv)}\n".encode())
        log.flush()
        sys.stderr.flush()
        proc = subprocess.Popen(argv, cwd=run_dir, env=env, stdout=log)
        try:
            return proc.wait(timeout=budget_s + GRACE_S if budget_s else None), None
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None, f"killed {GRACE_S} s after the {budget_s / 60:g} min budget"


def read_records(path: Path) -> list[dict[str, Any]]:
    records = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a kill
    return records


def final_results(passes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (pass, test): the worst outcome its reports gave."""
    rank = ("passed", "xfailed", "skipped", "xpassed", "error", "failed").index
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for p in passes:
        for r in (r for r in p["records"] if r.get("event") == "result"):
            row = {k: v for k, v in r.items() if k != "event"} | {"pass": p["name"]}
            row["class"], row["test"] = split_nodeid(r["nodeid"])
            old = rows.get((p["name"], r["nodeid"]))
            if old is None or rank(row["outcome"]) > rank(old["outcome"]):
                rows[(p["name"], r["nodeid"])] = row
    return list(rows.values())


def split_nodeid(nodeid: str) -> tuple[str, str]:
    parts = nodeid.split("::")
    return (parts[-2] if len(parts) >= 3 else "", parts[-1])


def tally(rows: list[dict[str, Any]], key: str) -> dict[str, dict[str, int]]:
    out: dict[str, Counter] = {}
    for r in rows:
        out.setdefault(str(r[key]), Counter())[r["outcome"]] += 1
    return {k: dict(v) for k, v in sorted(out.items())}


def skip_groups(
    rows: list[dict[str, Any]], entries: list[therock_skips.SkipEntry]
) -> list[dict[str, Any]]:
    """Skips grouped by (source, reason); a TheRock group carries the entry's own comment."""
    comments = {e.name: e.comment for e in entries}
    groups: dict[tuple[str, str], int] = {}
    for r in rows:
        if r["outcome"] == "skipped":
            key = (r.get("source", "test-file"), r.get("reason", ""))
            groups[key] = groups.get(key, 0) + 1
    out = []
    for (source, reason), n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])):
        group = {"source": source, "source_name": SOURCES.get(source, source), "reason": reason}
        if source == "therock":
            name = reason.removeprefix(THEROCK_PREFIX).split(" (", 1)[0]
            group["therock_comment"] = comments.get(name, "")
        out.append({**group, "count": n})
    return out


def verdict(doc: dict[str, Any]) -> tuple[bool, str]:
    c = Counter(doc["counts"])
    bad, skipped = c["failed"] + c["error"], c["skipped"]
    ran = c["passed"] + bad + c["xpassed"]
    skip_text = ", ".join(f"{n} {SOURCES.get(s, s)}" for s, n in doc["skips_by_source"].items())
    problems = doc["problems"]
    ok = bad == 0 and c["passed"] > 0 and not problems
    word = "PASS" if ok else ("INCOMPLETE" if bad == 0 and problems else "FAIL")
    tf = doc["test_file"]
    line = (
        f"{word}: {c['passed']} passed, {bad} failed, {skipped} skipped"
        + (f" ({skip_text})" if skip_text else "")
        + (f", {c['xfailed']} xfailed" if c["xfailed"] else "")
        + f" of {ran + skipped + c['xfailed']} SDPA tests"
        + (
            f" (test_transformers.py @ {tf['repo']}:{tf['commit'][:12]}"
            if tf["verified"]
            else f" (UNVERIFIED --test-file, git blob {tf['blob_sha1'][:12]}, not torch's commit"
        )
        + f"; torch {doc['torch']['version']}; {doc['wall_s']:.0f} s)"
    )
    if problems:
        line += "; " + "; ".join(problems)
    elif bad:
        first = next(r for r in doc["results"] if r["outcome"] in ("failed", "error"))
        line += f"; first failure: {first['class']}::{first['test']}"
    return ok, line


def render(doc: dict[str, Any]) -> str:
    stride = (doc["passes"][0].get("collected") or {}).get("quick_stride") or 1
    lines = [
        f"PyTorch's SDPA tests on {doc['device']['name']} ({doc['device']['arch'] or 'cpu'}), "
        f"torch {doc['torch']['version']} (git {doc['torch']['git_version'][:12]})",
        f"test file: {doc['test_file']['how']}",
        f'selection: -k "{SELECTION}", devices {doc["selection"]["devices"]}'
        + (f", --quick: 1 in {stride} selected tests" if doc["quick"] else ""),
        "TheRock: "
        + (
            f"{doc['therock'].get('entries_applied', 0)} of {doc['therock']['entries_read']} "
            f"entries apply ({'; '.join(doc['therock']['files'])}; commit "
            f"{str(doc['therock']['commit'])[:12]} from {doc['therock']['commit_from']})"
            if doc["therock"].get("files")
            else doc["therock"].get("note", "not applied")
        ),
        "",
    ]
    rows = [
        (p["name"], f"{p['wall_s']:.0f}", *map(p["counts"].get, OUTCOMES)) for p in doc["passes"]
    ]
    lines += common.text_table(("pass", "wall s", *OUTCOMES), rows)
    rows = [(k, *(v.get(o, 0) for o in OUTCOMES)) for k, v in doc["by_class"].items()]
    lines += ["", "by class:", *common.text_table(("class", *OUTCOMES), rows)]
    if doc["skips"]:
        lines += ["", "skips (count, source: reason):"]
        for g in doc["skips"]:
            reason = g["reason"].removeprefix(THEROCK_PREFIX)
            if g.get("therock_comment"):
                reason += f" - {g['therock_comment']}"
            lines.append(f"  {g['count']:5d}  {g['source_name']}: {common.first_line(reason, 160)}")
    failures = [r for r in doc["results"] if r["outcome"] in ("failed", "error")]
    if failures:
        lines += ["", f"failures ({len(failures)}):"]
        lines += [f"  {r['class']}::{r['test']}: {common.first_line(r.get('message', ''), 160)}"
                  for r in failures[:40]]  # fmt: skip
        if len(failures) > 40:
            lines.append(f"  ... {len(failures) - 40} more in the JSON")
    return "\n".join(lines)


def build_parser() -> common.OneLineArgumentParser:
    p = common.OneLineArgumentParser(
        prog=PROG, description=__doc__, formatter_class=common.argparse.RawDescriptionHelpFormatter
    )
    add = p.add_argument
    # fmt: off
    add("--quick", action="store_true", help="every Nth test, about --quick-max in all")
    add("--quick-max", type=int, default=300, metavar="N", help="(default 300)")
    add(
        "--budget-min",
        type=float,
        metavar="MIN",
        help="time budget per pass; tests not started by then are skipped (default 10 quick, 60)",
    )
    add("--devices", help="cuda, cpu or cpu,cuda (default: cuda if a GPU, else cpu)")
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
    # fmt: on
    return p


def git_blob_sha1(data: bytes) -> str:
    """The id git gives a file's content: sha1 over b"blob <len>\\0" + content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def find_test_file(opts: Any, work: Path, commit: str, torch_version: str) -> dict[str, Any]:
    """PyTorch's test file for this torch (its bytes under "data"): --test-file, else TEST_PATH
    at torch's commit from git's object store of the checkout, its blob id checked."""
    if opts.test_file:
        try:
            data = Path(opts.test_file).read_bytes()
        except OSError as exc:
            raise CannotRun(f"--test-file {opts.test_file}: {exc.strerror or exc}") from None
        blob = git_blob_sha1(data)
        how = f"--test-file {opts.test_file} (git blob {blob[:12]}); NOT checked against torch's "
        return _test_file(data, commit, "user", blob, how + f"commit {commit[:12]}")
    checkout = Path(opts.torch_src) if opts.torch_src else work / "src" / "pytorch"
    cannot = (
        f"PyTorch's test file for torch {torch_version} (git {commit[:12] or '?'}) cannot be had"
    )
    if not commit or commit == "Unknown":
        raise CannotRun(f"{cannot}: torch.version.git_version is unknown")
    git = ["git", "-C", str(checkout)]
    named = subprocess.run(
        [*git, "rev-parse", "--verify", "--quiet", f"{commit}:{TEST_PATH}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    blob = named.stdout.strip()
    data = b""
    if named.returncode == 0 and (checkout / ".git").exists():
        data = subprocess.run([*git, "cat-file", "blob", blob], capture_output=True).stdout
    if not data or git_blob_sha1(data) != blob:
        fetch = f"git -C {checkout} fetch https://github.com/pytorch/pytorch {commit}"
        raise CannotRun(
            f"{cannot}: {checkout} has no commit {commit[:12]} (a git checkout of PyTorch: "
            f"git clone --filter=blob:none https://github.com/pytorch/pytorch {checkout}; then "
            f"{fetch} (ROCm/pytorch for TheRock's wheels)), or pass --test-file PATH"
        )
    how = f"{TEST_PATH} at {commit[:12]} from the source checkout {checkout} (git blob {blob[:12]})"
    return _test_file(data, commit, "checkout", blob, how)


def _test_file(data: bytes, commit: str, source: str, blob: str, how: str) -> dict[str, Any]:
    verified = source == "checkout"
    repo = "pytorch/pytorch" if verified else source
    return {"data": data, "commit": commit, "repo": repo, "blob_sha1": blob, "source": source,
            "verified": verified, "how": how}  # fmt: skip


def pass_problems(
    passes: list[dict[str, Any]], rows: list[dict[str, Any]], log_path: Path
) -> list[str]:
    """Each pass's counts (set on it) and what went wrong in it, one line each."""
    problems = []
    for p in passes:
        mine = [r for r in rows if r["pass"] == p["name"]]
        p["counts"] = {o: sum(1 for r in mine if r["outcome"] == o) for o in OUTCOMES}
        errors = [r for r in p["records"] if r.get("event") == "collect-error"]
        budget_skips = sum(1 for r in mine if r.get("source") == "ours")
        name = f"pass {p['name']}"
        if errors:
            first = common.first_line(errors[0].get("message", ""), 200)
            problems.append(f"{name}: the test file did not import: {first}")
        if p["killed"]:
            problems.append(f"{name}: {p['killed']}")
        if budget_skips:
            problems.append(f"{name}: time budget spent, {budget_skips} tests not run")
        if not errors and not any(r.get("event") == "collected" for r in p["records"]):
            exit_code = p["pytest_exit"]
            problems.append(f"{name}: pytest collected nothing (exit {exit_code}; see {log_path})")
    return problems


def parse_args(argv: list[str] | None) -> Any:
    opts = build_parser().parse_args(argv)
    if opts.dry_run:
        raise common.UsageError(
            "--dry-run: PyTorch's own tests have no dry run (which tests run is known only once "
            "the test file is found and collected); drop --dry-run, add --quick for a short run"
        )
    if opts.quick_max <= 0:
        raise common.UsageError("--quick-max must be positive")
    if opts.budget_min is not None and opts.budget_min <= 0:
        raise common.UsageError("--budget-min must be positive")
    if opts.devices and not set(opts.devices.split(",")) <= {"cpu", "cuda"}:
        raise common.UsageError(f"--devices {opts.devices!r}: expected cpu, cuda or cpu,cuda")
    return opts


def fresh_log(opts: Any, work: Path, test: dict[str, Any]) -> tuple[Path, Path]:
    """The run folder (one per file version, quick or full) and the emptied pytest log (--log,
    or pytest.log in the run folder)."""
    name = f"{test['source']}-{test['blob_sha1'][:12]}" + ("-quick" if opts.quick else "")
    run_dir = work / "upstream-tests" / "runs" / name
    log_path = Path(opts.log) if opts.log else run_dir / "pytest.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")
    return run_dir, log_path


def report_verdict(doc: dict[str, Any], json_path: str | None) -> int:
    """Set the verdict on the report, write it (--json), print it; the exit status."""
    ok, line = verdict(doc)
    doc["passed"] = ok
    doc["verdict"] = line
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(doc, indent=1) + "\n")
    print(render(doc))
    print("")
    print(line, flush=True)
    return 0 if ok else 1


def _main(argv: list[str] | None) -> int:
    started = time.perf_counter()
    opts = parse_args(argv)
    import torch

    work = Path(opts.workdir or os.environ.get(WORKDIR_ENV) or REPO_ROOT / "work").expanduser()
    work = work.resolve()
    git_version = str(getattr(torch.version, "git_version", "") or "")
    cuda_ok = torch.cuda.is_available()
    devices = opts.devices or ("cuda" if cuda_ok else "cpu")
    device = common.resolve_device("cuda" if "cuda" in devices else "cpu")
    arch, device_name = common.detect_arch(device)
    tools = require_test_tools()
    test = find_test_file(opts, work, git_version, torch.__version__)
    print(f"test file: {test['how']}", file=sys.stderr, flush=True)
    therock_dir = opts.therock_dir or work / "src" / "therock"
    therock_dir = None if opts.no_therock else Path(therock_dir).expanduser()
    skips, therock_info = load_skips(therock_dir, torch.__version__, arch)
    selection = f"({SELECTION})" + (f" and ({opts.extra_k})" if opts.extra_k else "")
    run_dir, log_path = fresh_log(opts, work, test)
    run = {
        "test_file": test.pop("data"), "run_dir": run_dir, "devices": devices, "therock": skips,
        "budget_s": 60 * (opts.budget_min or (10 if opts.quick else 60)),
        "quick_max": opts.quick_max if opts.quick else None,
        "log_path": log_path,
    }  # fmt: skip
    ck = bool(torch.version.hip) and cuda_ok and common.ck_available() and not opts.no_ck
    plan = [("main", selection, {})]  # (name, -k selection, extra variables) per pytest pass
    plan += [("ck", f"{selection} and flash", {"TORCH_ROCM_FA_PREFER_CK": "1"})] if ck else []
    passes = [run_pass(*planned, run) for planned in plan]
    rows = final_results(passes)
    doc: dict[str, Any] = {
        "schema": SCHEMA, "identity": common.identity(device, arch, device_name),
        "torch": {"version": torch.__version__, "git_version": git_version,
                  "cuda": torch.version.cuda, "hip": torch.version.hip},
        "python": platform.python_version(), "tools": tools,
        "device": {"type": device.type, "name": device_name, "arch": arch}, "test_file": test,
        "therock": {**therock_info, "entries": [e.as_dict() for e in skips]},
        "selection": {"k": selection, "devices": devices, "ck_pass": ck,
                      "quick_max": run["quick_max"]},
        "quick": bool(opts.quick),
        "budget_min_per_pass": run["budget_s"] / 60,
        "log": str(run["log_path"]),
        "problems": pass_problems(passes, rows, run["log_path"]),
        "passes": [{k: v for k, v in p.items() if k != "records"} for p in passes],
    }  # fmt: skip
    return report_verdict(summarize(doc, rows, skips, started), opts.json)


def summarize(doc: dict[str, Any], rows: list[dict], skips: list, started: float) -> dict:
    """The counts and groupings of the rows, added to the report."""
    skipped = [r.get("source", "test-file") for r in rows if r["outcome"] == "skipped"]
    return {
        **doc,
        "counts": dict(Counter(r["outcome"] for r in rows)),
        "skips_by_source": dict(sorted(Counter(skipped).items())),
        "by_class": tally(rows, "class"),
        "skips": skip_groups(rows, skips),
        "wall_s": round(time.perf_counter() - started, 1),
        "results": rows,
    }


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        try:
            return _main(argv)
        except CannotRun as exc:
            sys.stderr.write(f"{PROG}: {exc}\n")
            return 2

    return common.run_cli(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
