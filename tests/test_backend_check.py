"""backend_check.py: the CPU verdict, and the GPU branches' logic exercised through torch's own
APIs on CPU (profiler output, can_use_* on CPU tensors) and a test-made torch/lib tree."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from rocmfa.probes import backend_check, sdpa_common

# Kernel names as the profiler reports them (the CUDA ones copied from an H100 run of this tool;
# the ROCm ones are AOTriton's Triton kernels and Tensile gemms).
KERNELS = {
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>": "flash",
    "void pytorch_flash::flash_bwd_dot_do_o_kernel<true>": "flash",
    "attn_fwd": "flash",
    "bwd_kernel_dk_dv": "flash",
    "fmha_cutlassF_f16_aligned_64x64_rf_sm80": "efficient",
    "fmha_cutlassB_f16_aligned_64x64_k64_sm80": "efficient",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7": "cudnn",
    "ck_tile::FmhaFwdKernel<...>": "ck",
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64": "math",
    "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32": "math",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8>": "math",
    "void at::native::elementwise_kernel<128, 4>": "other",
}


def profiled_cpu_sdpa(backend: SDPBackend) -> list[tuple[str, bool]]:
    q = torch.randn(1, 2, 16, 8, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof, sdpa_kernel(backend):
        F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    return backend_check.profile_events(prof)


@pytest.mark.parametrize(("name", "family"), KERNELS.items())
def test_kernel_name_rules(name, family):
    assert backend_check.classify_kernel(name) == family


def test_real_profiler_output_tells_flash_from_math():
    flash = backend_check.classify_events(profiled_cpu_sdpa(SDPBackend.FLASH_ATTENTION))
    math = backend_check.classify_events(profiled_cpu_sdpa(SDPBackend.MATH))
    assert flash["ran"] == "flash-cpu" and "math" not in flash["ops"]
    assert math["ran"] == "math" and math["ops"] == ["math"]


def test_device_kernels_outrank_op_names():
    # On a GPU the op can say flash while only gemm/softmax kernels ran: that is a fallback.
    events = [("aten::_scaled_dot_product_flash_attention", False)]
    events += [(n, True) for n, f in KERNELS.items() if f in ("math", "other")]
    assert backend_check.classify_events(events)["ran"] == "math"
    events.append(("attn_fwd", True))
    assert backend_check.classify_events(events)["ran"] == "flash"


def gpu_report(forced_ran: str, default_ran: str) -> dict:
    """A report as backend_check builds it on a GPU, with the given profiler verdicts."""
    return {
        "identity": {"platform": "rocm"},
        "backends": {"flash": {"can_use": True, "reasons": []}},
        "truth": {
            "forced_flash": {"ran": forced_ran, "kernel_families": [forced_ran]},
            "default_dispatch": {"ran": default_ran},
            "correct": True,
            "errors": {"fwd": 0.0, "bwd": 0.0},
            "tolerance": backend_check.TOLERANCE["fp16"],
        },
    }


def test_verdict_fails_a_silent_fallback_to_math():
    assert backend_check.verdict(gpu_report("flash", "flash")) == (True, [])
    passed, failures = backend_check.verdict(gpu_report("flash", "math"))
    assert not passed and "silently fell back to the math path" in failures[0]
    passed, failures = backend_check.verdict(gpu_report("math", "math"))
    assert not passed and "ran no flash kernel" in failures[0]


def test_can_use_on_cpu_is_false_with_a_reason():
    flags = backend_check.backend_flags(
        torch.device("cpu"), torch.float16, sdpa_common.parse_shape("1,2,64,32")
    )
    for name in ("flash", "efficient"):
        assert flags[name]["can_use"] is False and flags[name]["reasons"]
    assert flags["math"]["can_use"] is True


def test_cpu_run_exits_1_with_one_clear_line(tmp_path, capsys):
    out = tmp_path / "check.json"
    assert backend_check.main(["--shape", "1,2,64,32", "--json", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["passed"] is False
    assert report["failures"][0].startswith("flash attention not usable on cpu")
    # The forced-flash run itself works on CPU (torch's CPU flash kernel) and is correct.
    assert report["truth"]["forced_flash"]["ran"] == "flash-cpu"
    assert report["truth"]["correct"] is True
    captured = capsys.readouterr()
    verdicts = [
        line
        for line in (captured.out + captured.err).splitlines()
        if line.startswith(("FAIL", "PASS"))
    ]
    assert len(verdicts) == 1 and verdicts[0].startswith("FAIL: flash attention not usable")
    assert "profiler" not in captured.err.lower()


def test_json_on_stdout_puts_the_one_verdict_on_stderr(capsys):
    assert backend_check.main(["--shape", "1,2,64,32", "--json"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert isinstance(report["backends"]["flash"]["reasons"], list)
    assert captured.err.strip().splitlines()[-1] == report["summary"]
    assert report["summary"].count("FAIL") == 1


@pytest.mark.parametrize(
    ("full", "short"),
    [
        (
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, "
            "false, false, cutlass::half_t, Flash_kernel_traits<64, 128, 128, 4, "
            "cutlass::half_t> >, false, true, false>(Flash_fwd_params)",
            "flash_fwd_kernel",
        ),
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8>(float*)",
            "cunn_SoftMaxForward",
        ),
        ("attn_fwd", "attn_fwd"),
    ],
)
def test_kernel_names_shortened_to_the_function(full, short):
    assert backend_check.short_kernel_name(full) == short


def _forked_resize_warning() -> None:
    """A real C++ TORCH_WARN that bypasses Python's warnings: the out= resize warning raised on
    torch's inter-op thread pool (torch.jit.fork), where no Python warning handler is set, so
    c10 logs it to fd 2."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script is deprecated

        @torch.jit.script
        def resize_into(a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
            return torch.add(a, a, out=out)

        @torch.jit.script
        def forked(a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
            return torch.jit.wait(torch.jit.fork(resize_into, a, out))

    forked(torch.ones(2), torch.empty(3))


def test_fd_level_capture_catches_a_real_cpp_warning(capfd):
    with sdpa_common.capture_all_warnings() as reasons:
        _forked_resize_warning()
        sdpa_common.warnings.warn("a python warning", UserWarning, stacklevel=1)
    assert any(r.startswith("An output with one or more elements was resized") for r in reasons)
    assert "a python warning" in reasons
    # Each reason once, without c10's log prefix or the '(function ...)' suffix.
    assert len(reasons) == len(set(reasons)) and not any("(function" in r for r in reasons)
    # Nothing leaked to the real fd 2, and fd 2 works again afterwards.
    assert "resized" not in capfd.readouterr().err
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def make_torch_tree(root: Path, runtime: tuple[int, int, int], images: dict[str, str]) -> Path:
    lib = root / "torch" / "lib"
    for pack, signature in images.items():
        (lib / "aotriton.images" / pack).mkdir(parents=True)
        (lib / "aotriton.images" / pack / "__signature__").write_text(signature)
    include = root / "torch" / "include" / "aotriton"
    include.mkdir(parents=True)
    major, minor, patch = runtime
    include.joinpath("config.h").write_text(
        f"#define AOTRITON_VERSION_MAJOR {major}\n#define AOTRITON_VERSION_MINOR {minor}\n"
        f"#define AOTRITON_VERSION_PATCH {patch}\n"
    )
    return lib


def test_runtime_image_mismatch_fails_naming_both_versions(tmp_path):
    lib = make_torch_tree(tmp_path, (0, 12, 50), {"amd-gfx110x": "aotriton0.13 gfx1100\n"})
    out = tmp_path / "check.json"
    assert backend_check.main(["--torch-lib-dir", str(lib), "--json", str(out)]) == 1
    report = json.loads(out.read_text())
    mismatch = report["rocm"]["aotriton"]["mismatch"]
    assert "0.12.50" in mismatch and "amd-gfx110x images 0.13" in mismatch
    assert mismatch in report["failures"]


def test_matching_runtime_and_images_are_not_a_mismatch(tmp_path):
    lib = make_torch_tree(tmp_path, (0, 12, 1), {"amd-gfx115x": "aotriton 0.12.1b", "x": ""})
    info = sdpa_common.aotriton_versions(lib)
    assert info["runtime_version"] == "0.12.1"
    assert info["images"]["amd-gfx115x"]["version"] == "0.12.1"
    assert info["mismatch"] is None


def test_real_json_signature_is_not_read_as_a_version(tmp_path):
    """AOTriton 0.13b's __signature__ is JSON whose TRITON_VERSION (3.x) is no AOTriton
    version (ROCm/aotriton@6e00ef3e python/write_image_signature.py)."""
    signature = json.dumps(
        {
            "AOTRITON_GIT_SHA1": "6e00ef3e335b45dfb49065259533b59c68995bfe",
            "AOTRITON_GIT_TREESHA1": "0" * 40,
            "DB_SHA256": {"primary": {}, "secondary": {}},
            "TRITON_VERSION": "3.5.0+git1234abcd",
        },
        indent=2,
    )
    lib = make_torch_tree(tmp_path, (0, 13, 0), {"amd-gfx115x": signature})
    info = sdpa_common.aotriton_versions(lib)
    assert info["images"]["amd-gfx115x"] == {"version": None, "signature": "git 6e00ef3e335b"}
    assert info["mismatch"] is None


def test_runtime_version_from_versioned_library_name(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libaotriton_v2.so.0.11.2").write_bytes(b"")
    assert sdpa_common.aotriton_versions(lib)["runtime_version"] == "0.11.2"


def test_experimental_flag_requirement_follows_arch_ranges(tmp_path, monkeypatch):
    arches = sdpa_common.load_arches()
    gfx1151 = arches["gfx1151"]
    assert sdpa_common.needs_experimental_flag(gfx1151, "0.11.2b") is True
    assert sdpa_common.needs_experimental_flag(gfx1151, "0.12.0") is False
    assert sdpa_common.needs_experimental_flag(arches["gfx942"], "0.11b") is False
    lib = make_torch_tree(tmp_path, (0, 11, 2), {})
    monkeypatch.delenv("TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", raising=False)
    report = backend_check.rocm_report("gfx1151", arches, lib)
    assert "needs TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1" in report["flag_problem"]
    monkeypatch.setenv("TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "1")
    assert "flag_problem" not in backend_check.rocm_report("gfx1151", arches, lib)


def test_bad_input_exit_2(tmp_path, capsys):
    assert backend_check.main(["--torch-lib-dir", str(tmp_path / "missing")]) == 2
    assert backend_check.main(["--dtype", "fp64"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(e.startswith("backend_check.py: error:") for e in err)


def test_reason_headings_join_the_warning_that_follows(capfd):
    with sdpa_common.capture_all_warnings() as reasons:
        os.write(2, (
            b"[W1122 16:49:58.1 sdp_utils.cpp:1] Warning: Flash attention kernel not used because: "
            b"(function operator())\n"
            b"[W1122 16:49:58.2 sdp_utils.cpp:2] Warning: Flash attention has been runtime "
            b"disabled. "
            b"(function check_runtime_disabled_flash)\n"
            b"[W1122 16:49:58.3 sdp_utils.cpp:2] Warning: Flash attention has been runtime "
            b"disabled. "
            b"(function check_runtime_disabled_flash)\n"
            b"some other output\n"
        ))  # fmt: skip
    assert reasons == [
        "Flash attention kernel not used because: Flash attention has been runtime disabled.",
        "Flash attention has been runtime disabled.",
    ]
    assert capfd.readouterr().err == "some other output\n"  # passed on to stderr


def test_probes_honour_dry_run_or_refuse_it_in_one_line(tmp_path, capsys):
    from rocmfa.probes import upstream_sdpa
    from tests.support.project import run_nox

    assert backend_check.main(["--dry-run", "--json", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "backend_check.py: dry run on cpu" in out and not (tmp_path / "b.json").exists()
    assert upstream_sdpa.main(["--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--dry-run: PyTorch's own tests have no dry run" in err
    # Through nox, as the issue found it: the flag reaches the probe, which runs nothing.
    root = Path(__file__).resolve().parent.parent
    done = run_nox(root, "-s", "bench", "--", "--dry-run", env={"ROCMFA_WORKDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "bench.py: dry run on cpu" in done.stdout and "120 timings" not in done.stdout
    assert "90 timings: 5 shapes" in done.stdout  # 5 sizes x 2 causal x 3 backends x 3 passes
