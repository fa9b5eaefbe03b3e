"""validate.py on the CPU: the --quick subset end to end, the reference, and bad input."""

from __future__ import annotations

import json

import pytest
import torch

from scripts.probes import sdpa_common, validate


def test_quick_subset_passes_on_cpu(tmp_path):
    out = tmp_path / "validate.json"
    assert validate.main(["--quick", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["passed"] is True and doc["counts"].get("FAIL", 0) == 0
    ran = [r for r in doc["results"] if r["status"] == "pass"]
    assert {r["backend"] for r in ran} == {"flash", "math"}
    assert {r["head_dim"] for r in ran} == {32, 64}
    assert any(r["kv_heads"] != r["q_heads"] for r in ran)  # grouped-query heads covered
    assert {r["seq_q"] for r in ran} >= {1, 17}
    # torch has no memory-efficient kernel on CPU: unsupported, not a failure
    assert {r["status"] for r in doc["results"] if r["backend"] == "efficient"} == {"unsupported"}
    for r in ran:
        assert set(r["errors"]) == {"out", "dq", "dk", "dv"}
        assert all(e["err"] <= e["allowed"] for e in r["errors"].values())
    assert "float64" in doc["tolerance"]["reference"]


@pytest.mark.parametrize("causal", [False, True])
def test_naive_attention_equals_sdpa_in_float64(causal):
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 9, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 2, 9, 8, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 2, 9, 8, generator=gen, dtype=torch.float64)
    ref = sdpa_common.sdpa(q, k, v, causal)
    torch.testing.assert_close(validate.naive_attention(q, k, v, causal), ref)


def test_a_wrong_result_fails_the_tolerance():
    # The tolerance must catch what the AOTriton runtime/image mismatch produced: all zeros.
    ref = torch.randn(1, 2, 17, 32, dtype=torch.float64)
    naive_err = validate._max_err(ref.half(), ref)
    allowed = validate.FWD_FACTOR * naive_err + validate.FLOOR["fp16"] * ref.abs().max().item()
    assert validate._max_err(torch.zeros_like(ref).half(), ref) > allowed
    assert validate._max_err(torch.full_like(ref, float("nan")), ref) == float("inf")


def test_arch_head_dim_limit_is_read_from_arch_data():
    arches = sdpa_common.load_arches()
    assert sdpa_common.head_dim_limit(arches["gfx1151"])[0] == 256
    assert sdpa_common.head_dim_limit(arches["gfx942"]) is None  # its limit is backward-only


@pytest.mark.parametrize(
    "args", [["--head-dims", "a"], ["--backends", "nope"], ["--shape", "1,2"], ["--dtypes", "x"]]
)
def test_bad_input_exit_2(args, capsys):
    assert validate.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("validate.py: error:")
