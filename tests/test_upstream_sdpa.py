"""validate --upstream (scripts/rocmfa/probes/upstream_sdpa.py): the test file from git's object
store of a real PyTorch-like checkout, TheRock's skip-list format, and real pytest runs of a
stand-in test file through the probe's plugin; opt-in, the real PyTorch test file and TheRock's
real skip files."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rocmfa.probes import sdpa_common, upstream_sdpa
from tests.support import upstream_sdpa_standin as standin

PATH = upstream_sdpa.TEST_PATH
COMMIT = "c0ffee" + "0" * 34
DATA = standin.TEST_FILE.encode()
PINNED_THEROCK = tomllib.loads((upstream_sdpa.REPO_ROOT / "pins/therock.toml").read_text())[
    "therock"
]["commit"]


def test_git_blob_id_is_gits(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(DATA)
    out = subprocess.run(["git", "hash-object", str(tmp_path / "f")], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert upstream_sdpa.git_blob_sha1(DATA) == out.stdout.strip()


def test_the_source_checkout_gives_the_file_of_torchs_commit(tmp_path: Path) -> None:
    repo = tmp_path / "src" / "pytorch"
    (repo / "test").mkdir(parents=True)
    (repo / PATH).write_bytes(DATA)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    (repo / PATH).write_bytes(b"# a local edit after the commit\n")  # the commit's blob counts
    opts = SimpleNamespace(test_file=None, torch_src=None)
    got = upstream_sdpa.find_test_file(opts, tmp_path, head, "2.13.0")
    assert got["verified"] and head[:12] in got["how"]
    assert got["data"] == DATA and got["blob_sha1"] == upstream_sdpa.git_blob_sha1(DATA)
    with pytest.raises(sdpa_common.UsageError) as err:
        upstream_sdpa.find_test_file(opts, tmp_path, COMMIT, "2.13.0")
    message = str(err.value)
    assert f"{repo} has no commit c0ffee000000" in message and "\n" not in message
    assert f"git -C {repo} fetch https://github.com/pytorch/pytorch {COMMIT}" in message


# --------------------------------------------------------------------------- TheRock


def test_therock_skip_files_are_read_in_their_real_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    therock = standin.write_therock(tmp_path)
    skip_dir = therock / upstream_sdpa.SKIP_DIR
    entries, notes = upstream_sdpa.read_skip_dir(skip_dir, "2.13.0+rocm7.1")
    assert notes == ["generic.py: read", "pytorch_2.13.py: read"]
    by_name = {e["name"]: e for e in entries}
    assert by_name["test_memory_plots"]["comment"].startswith("TestCudaAllocator - FileNotFound")
    assert by_name["test_memory_snapshot"]["comment"] == by_name["test_memory_plots"]["comment"]
    assert by_name["test_terminate_handler_on_crash"]["comment"] == "hangs forever"
    assert by_name["test_print"]["comment"].startswith("FLAKY!!")
    assert "test_hip_device_count" not in by_name  # commented out
    assert {by_name["test_autocast_torch_bf16"]["section"], by_name["test_print"]["section"]} == {
        "gfx950",
        "common",
    }
    assert by_name["test_ctc_loss_cudnn_tensor_cuda_cuda"]["file"] == "pytorch_2.13.py"

    def chosen(arch: str | None, system: str) -> set[str]:
        monkeypatch.setattr(platform, "system", lambda: system)  # the OS load_skips sees
        return {e["name"] for e in upstream_sdpa.load_skips(therock, "2.13.0", arch)[0]}

    assert "test_terminate_handler_on_crash" in chosen("gfx942", "Linux")  # "gfx94" in gfx942
    assert "test_terminate_handler_on_crash" not in chosen("gfx1151", "Linux")
    assert "test_backend_vs_math_ref_grads" not in chosen("gfx942", "Linux")
    assert "test_backend_vs_math_ref_grads" in chosen(None, "Windows")
    # A torch with no version file: generic.py only, and the report says so.
    only, notes = upstream_sdpa.read_skip_dir(skip_dir, "2.11.0+cu130")
    assert notes[1].startswith("pytorch_2.11.py: not in this TheRock")
    assert {e["file"] for e in only} == {"generic.py"}


def test_therock_commit_is_the_checkouts_own_never_an_enclosing_repos(tmp_path: Path) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    outer = tmp_path / "outer"
    therock = standin.write_therock(outer / "therock")
    subprocess.run([*git, "init", "-q", str(outer)], check=True)
    subprocess.run([*git, "-C", str(outer), "commit", "-q", "--allow-empty", "-m", "o"],
                   check=True)  # fmt: skip
    commit, how = upstream_sdpa.therock_commit(therock)
    assert commit == PINNED_THEROCK and how.startswith("pins/")
    subprocess.run([*git, "init", "-q", str(therock)], check=True)
    subprocess.run([*git, "-C", str(therock), "commit", "-q", "--allow-empty", "-m", "t"],
                   check=True)  # fmt: skip
    head = subprocess.run([*git, "-C", str(therock), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    assert upstream_sdpa.therock_commit(therock) == (head, f"git HEAD of {therock}")


@pytest.mark.parametrize(
    "text",
    ["skip_tests = [1]", "x = {}", "skip_tests = {'common': {'nn': 'test_a'}}", "skip_tests = {"],
)
def test_a_malformed_skip_file_is_one_error(text: str) -> None:
    with pytest.raises(sdpa_common.UsageError) as err:
        upstream_sdpa.parse_skip_file(text, "pytorch_2.13.py")
    assert str(err.value).startswith("pytorch_2.13.py: ")


def test_therock_real_skip_files_opt_in() -> None:
    """ROCMFA_THEROCK_SKIP_DIR=<TheRock checkout>/external-builds/pytorch/skip_tests."""
    skip_dir = os.environ.get("ROCMFA_THEROCK_SKIP_DIR")
    if not skip_dir:
        pytest.skip("set ROCMFA_THEROCK_SKIP_DIR to a real TheRock skip_tests folder")
    entries, notes = upstream_sdpa.read_skip_dir(Path(skip_dir), "2.13.0")
    assert notes == ["generic.py: read", "pytorch_2.13.py: read"]
    assert len(entries) > 20 and sum(1 for e in entries if e["comment"]) > len(entries) // 2


# --------------------------------------------------------------------------- the whole probe


def run_probe(tmp_path: Path, *extra: str, fail: bool = False) -> tuple[int, dict]:
    test_file = tmp_path / "test_transformers.py"
    test_file.write_bytes(DATA)
    therock = standin.write_therock(tmp_path / "therock")
    out = tmp_path / "out.json"
    if fail:
        os.environ["STANDIN_SDPA_FAIL"] = "1"
    try:
        code = upstream_sdpa.main([
            "--workdir", str(tmp_path / "w"), "--test-file", str(test_file),
            "--therock-dir", str(therock), "--json", str(out), *extra,
        ])  # fmt: skip
    finally:
        os.environ.pop("STANDIN_SDPA_FAIL", None)
    return code, json.loads(out.read_text()) if out.exists() else {}


@pytest.mark.slow
def test_probe_runs_the_test_file_with_pytest_and_explains_every_skip(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, doc = run_probe(tmp_path)
    printed = capfd.readouterr()
    assert code == 0, printed.out + printed.err
    assert doc["counts"] == {
        "passed": standin.CPU_PASSED,
        "skipped": standin.CPU_SKIPPED_THEROCK + standin.CPU_SKIPPED_TEST_FILE,
    }
    assert doc["skips_by_source"] == {"test-file": 2, "therock": 1}
    assert not doc["test_file"]["verified"]
    therock = next(g for g in doc["skips"] if g["source"] == "therock")
    assert "test_print (generic.py [common/torch])" in therock["reason"]
    assert therock["therock_comment"].startswith("FLAKY!!")
    assert {g["reason"] for g in doc["skips"] if g["source"] == "test-file"} == {
        "Only runs on cuda",
        "Does not support fused SDPA",
    }
    assert set(doc["by_class"]) == {"TestSDPACPU", "TestSDPACpuOnlyCPU"}  # no TestTransformers
    assert len(doc["therock"]["entries"]) == 4
    # The stand-in folder is not a git checkout (though inside one: the tmp dir may be): the
    # commit is the pin's, and said to be.
    assert doc["therock"]["commit"] == PINNED_THEROCK
    assert doc["therock"]["commit_from"].startswith("pins/therock.toml")
    last = printed.out.strip().splitlines()[-1]
    assert last == doc["verdict"] and last.startswith("PASS: 7 passed, 0 failed, 3 skipped")
    assert "UNVERIFIED --test-file" in last
    assert printed.out.count(doc["verdict"]) == 1
    assert "[upstream main " in printed.err  # progress lines


@pytest.mark.slow
def test_a_failing_test_fails_the_verdict(tmp_path: Path) -> None:
    code, doc = run_probe(tmp_path, fail=True)
    assert code == 1 and doc["counts"]["failed"] == 1 and doc["verdict"].startswith("FAIL: ")
    assert "first failure: TestSDPACPU::test_fails_on_request_cpu" in doc["verdict"]
    failed = [r for r in doc["results"] if r["outcome"] == "failed"]
    assert "Tensor-likes are not" in failed[0]["message"]


@pytest.mark.slow
def test_quick_takes_every_nth_and_a_spent_budget_skips_the_rest(tmp_path: Path) -> None:
    code, doc = run_probe(tmp_path, "--quick", "--quick-max", "5", "--budget-min", "0.0001")
    collected = doc["passes"][0]["collected"]
    assert collected["selected"] == 10 and collected["quick_stride"] == 2
    assert collected["kept"] == 5 and sum(doc["counts"].values()) == 5
    assert code == 1 and doc["verdict"].startswith("INCOMPLETE: 0 passed")
    assert doc["skips_by_source"]["ours"] > 0
    assert "time budget spent" in doc["verdict"]


def test_no_test_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = upstream_sdpa.main(["--workdir", str(tmp_path), "--no-therock"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("upstream_sdpa.py: error: PyTorch's test file for torch ")
    assert "cannot be had" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "args", [["--quick-max", "0"], ["--devices", "tpu"], ["--budget-min", "-1"]]
)
def test_bad_input_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert upstream_sdpa.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("upstream_sdpa.py: error:")


def test_real_pytorch_test_file_opt_in(tmp_path: Path) -> None:
    """ROCMFA_TORCH_TEST_FILE=<test/test_transformers.py of torch.version.git_version>: a small
    real run of the CPU SDPA tests. Not committed (PyTorch's file); none is stored for
    torch 2.13.0's commit cf30153c4c131c8164ee7798e5022d810682e2cb in the sources these
    machines read (see docs/results/README.md)."""
    path = os.environ.get("ROCMFA_TORCH_TEST_FILE")
    if not path:
        pytest.skip(
            f"PyTorch's test/test_transformers.py at {torch.version.git_version} (torch "
            f"{torch.__version__}) is not available here: set ROCMFA_TORCH_TEST_FILE to it"
        )
    out = tmp_path / "real.json"
    code = upstream_sdpa.main([
        "--workdir", str(tmp_path), "--test-file", path, "--no-therock", "--devices", "cpu",
        "-k", "TestSDPACpuOnly", "--quick", "--quick-max", "40", "--json", str(out),
    ])  # fmt: skip
    doc = json.loads(out.read_text())
    assert code in (0, 1) and doc["counts"].get("passed", 0) > 0, doc["verdict"]
