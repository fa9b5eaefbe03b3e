"""A stand-in for PyTorch's test/test_transformers.py, and TheRock's skip-list folder.

The test file is ours (no PyTorch code in it) but is built the way the real one is: it imports
torch's shipped test helpers (torch.testing._internal: NNTestCase, parametrize,
instantiate_device_type_tests, onlyCUDA/onlyCPU, PLATFORM_SUPPORTS_FLASH_ATTENTION), uses the
real file's class names (TestTransformers, TestSDPA, TestSDPACpuOnly) and per-device
instantiation, and skips through the same kinds of guard. So it runs under the probe's real
pytest run exactly as the real file does: the same hooks see the same kinds of items and skips.

THEROCK_SKIP_FILES mirrors the form of ROCm/TheRock@89553ce3746eda74ade42557470d25e37c91b6f0
external-builds/pytorch/skip_tests/{generic,pytorch_2.13}.py, quirks included: a set (not a
list) in one section, a family section ("gfx950"), a "windows" section, reasons as comment
blocks above the names (shared by a run of names) and after a name on its line, commented-out
names under a dashed heading. The names are the real files' where the tests use them
("test_print" in generic.py's common/torch, which pytest -k matches as a substring).
"""

from __future__ import annotations

from pathlib import Path

TEST_FILE = """\
# Owner(s): ["module: sdpa"]
# Stand-in for PyTorch's test/test_transformers.py (see tests/support/upstream_sdpa_standin.py).
import os
import unittest

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.testing._internal.common_cuda import PLATFORM_SUPPORTS_FLASH_ATTENTION
from torch.testing._internal.common_device_type import (
    instantiate_device_type_tests,
    onlyCPU,
    onlyCUDA,
)
from torch.testing._internal.common_nn import NNTestCase
from torch.testing._internal.common_utils import parametrize, run_tests

BACKENDS = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION}


class TestTransformers(NNTestCase):
    def test_transformer_layer_not_selected(self, device):
        raise AssertionError("the probe's selection leaves TestTransformers out")


class TestSDPA(NNTestCase):
    def _vs_math(self, device, backend, causal):
        # fp16 on a GPU (its fused kernels take no fp32), fp32 on the CPU; reference in fp64.
        dtype, tol = (torch.float16, 1e-2) if "cuda" in device else (torch.float32, 1e-4)
        gen = torch.Generator().manual_seed(0)
        qkv = [torch.randn(1, 2, 17, 16, generator=gen) for _ in range(3)]
        ref = [t.double().to(device).requires_grad_() for t in qkv]
        got = [t.to(device=device, dtype=dtype).requires_grad_() for t in qkv]
        with sdpa_kernel(SDPBackend.MATH):
            out_ref = F.scaled_dot_product_attention(*ref, is_causal=causal)
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(*got, is_causal=causal)
        out_ref.sum().backward()
        out.sum().backward()
        self.assertEqual(out.double(), out_ref, atol=tol, rtol=tol)
        for a, b in zip(got, ref):
            self.assertEqual(a.grad.double(), b.grad, atol=tol, rtol=tol)

    @parametrize("causal", [False, True])
    @parametrize("backend", ["math", "flash"])
    def test_backend_vs_math_ref_grads(self, device, backend, causal):
        self._vs_math(device, BACKENDS[backend], causal)

    def test_print_sdpa_params(self, device):
        raise AssertionError("TheRock's generic.py names test_print: this must be skipped")

    @onlyCUDA
    def test_mem_efficient_attention_cuda_only(self, device):
        self._vs_math(device, SDPBackend.EFFICIENT_ATTENTION, True)

    @unittest.skipIf(not PLATFORM_SUPPORTS_FLASH_ATTENTION, "Does not support fused SDPA")
    def test_flash_attention_platform_guard(self, device):
        pass

    def test_fails_on_request(self, device):
        if os.environ.get("STANDIN_SDPA_FAIL"):
            self.assertEqual(torch.ones(2), torch.zeros(2))


class TestSDPACpuOnly(NNTestCase):
    @onlyCPU
    @parametrize("seq", [1, 33])
    def test_scaled_dot_product_fused_attention_vs_math_cpu(self, device, seq):
        q = torch.randn(2, 3, seq, 8)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(q, q, q)
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(q, q, q)
        self.assertEqual(out, ref, atol=1e-5, rtol=1e-4)


instantiate_device_type_tests(TestTransformers, globals())
instantiate_device_type_tests(TestSDPA, globals())
instantiate_device_type_tests(TestSDPACpuOnly, globals(), only_for="cpu")

if __name__ == "__main__":
    run_tests()
"""

# Tests the stand-in holds per outcome on a CPU-only torch with the TheRock stand-in applied.
CPU_PASSED = 4 + 1 + 2  # backend x causal, fails_on_request, the two CPU-only seqs
CPU_SKIPPED_THEROCK = 1  # test_print_sdpa_params
CPU_SKIPPED_TEST_FILE = 2  # onlyCUDA, PLATFORM_SUPPORTS_FLASH_ATTENTION guard

GENERIC_PY = """\
# Copyright Advanced Micro Devices, Inc.
# SPDX-License-Identifier: MIT

skip_tests = {
    "gfx950": {
        "cuda": {
            "test_autocast_torch_bf16",
            "test_autocast_torch_fp16",
        }
    },
    "common": {
        "cuda": [
            # TestCudaAllocator - FileNotFoundError: flamegraph.pl missing in CI
            "test_memory_snapshot",
            "test_memory_plots",
            # ----------------
            # maybe failing
            # ----------------
            # "test_hip_device_count"
        ],
        "torch": [
            # FLAKY!! tensor repr differs in the number of digits
            # (Note: this will also skip "test_print" in all other test modules)
            "test_print",
        ],
    },
    "gfx94": {
        "torch": [
            "test_terminate_handler_on_crash",  # hangs forever
        ],
    },
    "windows": {
        "nn": [
            # only on Windows
            "test_backend_vs_math_ref_grads",
        ],
    },
}
"""

PYTORCH_2_13_PY = """\
# Copyright Advanced Micro Devices, Inc.
# SPDX-License-Identifier: MIT

skip_tests = {
    "common": {
        "nn": [
            # TestNNDeviceTypeCUDA - cudnn CTC loss numerical mismatch
            "test_ctc_loss_cudnn_tensor_cuda_cuda",
        ],
    },
}
"""


def write_therock(root: Path) -> Path:
    """A TheRock checkout stand-in holding only the skip_tests folder; returns root."""
    skip_dir = root / "external-builds" / "pytorch" / "skip_tests"
    skip_dir.mkdir(parents=True, exist_ok=True)
    (skip_dir / "generic.py").write_text(GENERIC_PY)
    (skip_dir / "pytorch_2.13.py").write_text(PYTORCH_2_13_PY)
    return root
