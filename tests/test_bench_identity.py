"""The probes on CPU torch: the machine identity in their JSON, the card's own peak (and the
table fallback), --suite llm's shapes and memory skips, query length != key length, and the
profiler's kernel records cut into repeats."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch

from rocmfa.probes import bench, sdpa_common

ROOT = Path(__file__).resolve().parent.parent
IDENTITY_KEYS = {"version", "date", "host", "gpu", "arch", "platform", "torch", "torch_commit"}


def test_bench_writes_the_identity(tmp_path):
    out = tmp_path / "b.json"
    args = ["--sizes", "Tiny", "--backends", "math", "--causal", "no", "--passes", "fwd"]
    rc = bench.main([*args, "--repeats", "2", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["identity"].keys() >= IDENTITY_KEYS
    assert doc["identity"]["platform"] == "cpu" and doc["identity"]["torch_commit"]
    assert doc["settings"]["suite"] == "default"
    assert doc["provenance"]["peak_source"]["fp16"].startswith("table fallback")


def test_peak_is_computed_from_the_card_and_falls_back_to_the_table():
    h100 = {"compute_units": 132, "max_clock_mhz": 1980.0, "clock_source": "nvidia-smi"}
    peak, source = bench.peak_from_device("sm_90", "bf16", None, h100)
    assert peak == 1070.5 and source.startswith("computed: 132 CUs x 1980 MHz")
    # 7900 XT: 84 CUs of gfx1100 at 2400 MHz, not the 7900 XTX's table figure.
    xt = {"compute_units": 84, "max_clock_mhz": 2400.0, "clock_source": "sysfs"}
    assert bench.peak_from_device("gfx1100", "fp16", None, xt)[0] == 103.2
    no_clock = dict(h100, max_clock_mhz=None)
    peak, source = bench.peak_from_device("sm_90", "fp16", None, no_clock)
    assert peak == 989.0 and source.startswith("table fallback (no engine clock)")
    assert bench.peak_from_device("gfx908", "bf16", None, {})[0] == 92.3
    assert bench.peak_from_device(None, "fp16", None, {})[0] is None
    override = bench.peak_from_device("gfx908", "fp16", 5.0, {})
    assert override == (5.0, "--peak-tflops")
    # Each rate reproduces the spec sheet it names (units x clock x rate).
    assert all(rate["source"] for rate in sdpa_common.load_table("peak_rates", "rate").values())


def test_llm_suite_shapes_and_memory_skips(tmp_path):
    out = tmp_path / "llm.json"
    assert bench.main(["--suite", "llm", "--mem-limit-gib", "0.01", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = doc["results"]
    assert {r["dtype"] for r in rows} == {"bf16", "fp16"}
    assert {r["head_dim"] for r in rows} == {64, 128}
    assert all(r["status"] == "skipped" and "GiB" in r["reason"] for r in rows)
    decode = [r for r in rows if r["size"].startswith("decode")]
    assert {r["seq_k"] for r in decode} == {4096, 16384, 65536, 131072}
    assert all(r["seq_q"] == 1 and not r["causal"] and r["pass"] == "fwd" for r in decode)
    prefill = [r for r in rows if r["size"].startswith("prefill")]
    assert all(r["causal"] and r["q_heads"] == 4 * r["kv_heads"] for r in prefill)
    assert max(r["seq_q"] for r in prefill) == 32768
    assert bench.main(["--suite", "llm", "--sizes", "Tiny"]) == 2


def test_query_length_other_than_key_length_runs_and_counts_flops():
    shape = sdpa_common.Shape("chunk", 1, 4, 2, 8, 16, 32)
    assert shape.dims() == "1,4/2,8/32,16" and shape.as_dict()["seq_k"] == 32
    tensors = bench.Tensors(shape, sdpa_common.torch_dtype("bf16"), torch.device("cpu"))
    opts = SimpleNamespace(
        warmup_ms=0.0, warmup=1, repeats=2, budget_ms=1.0, min_repeats=1, slow_min_repeats=1,
        max_repeats=2,
    )  # fmt: skip
    timer = bench.Timer(torch.device("cpu"))
    row = bench.run_pass(timer, tensors, {"causal": False, "backend": "math", "pass": "fwd"}, opts)
    assert row["status"] == "ok" and row["kernel_ms"] is None
    timed = {**shape.as_dict(), "dtype": "bf16", "causal": False, "pass": "fwd", "median_ms": 1.0}
    assert bench.rates(timed, None, None)["flops"] == 4 * 1 * 4 * 8 * 32 * 16
    math_bytes = bench.estimate_bytes(shape, "math", 2)
    assert math_bytes > bench.estimate_bytes(shape, "flash", 2)


def test_kernel_records_are_cut_into_repeats():
    spin, flush = "spin_kernel(long)", "vectorized_elementwise_kernel<FillFunctor<signed char>>"
    kernels = [
        (spin, 0.0, 100.0), (flush, 100.0, 50.0), ("flash_fwd", 160.0, 8.0),
        (spin, 300.0, 100.0), (flush, 400.0, 50.0), ("a", 460.0, 2.0), ("b", 470.0, 3.0),
    ]  # fmt: skip
    assert bench.kernel_ms_per_repeat(kernels) == 0.0065  # median of 8 and 5 us
    assert bench.kernel_ms_per_repeat([(spin, 0.0, 1.0), (flush, 1.0, 1.0)]) is None
