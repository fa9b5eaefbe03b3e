"""Benchmark torch scaled_dot_product_attention per backend: forward, backward, forward+backward.

Timing: device events (torch.cuda.Event; the same API on ROCm) around each repeat, with a 256 MiB
buffer written before every repeat to flush the L2 and a short GPU spin (torch.cuda._sleep)
queued ahead of it so that launch latency stays out of the window, after a warm-up; median,
min/max and quartiles are reported. On CPU the host clock (time.perf_counter) is used and
there is no flush.
The number of repeats adapts to a time budget per measurement (--budget-ms, clamped to
--min-repeats..--max-repeats) unless --repeats fixes it. Each row has a spread figure,
(p75 - p25) / median; above 10 % the row is marked `noisy`.

FLOPs follow the flash-attention convention (say so when quoting the numbers):
forward 4*B*Hq*Sq*Sk*D, causal half of that, backward 2.5x forward, forward+backward 3.5x.
A rate above the device's peak is flagged ("!>peak", "above_peak": true), never shown as a
rate. Bytes follow measure.BYTE_CONVENTION; a row whose FLOP/byte is under the ridge point (peak
/ the card's memory roof) is memory-bound and judged in GB/s against that roof.

Run as `python scripts/rocmfa/probes/bench.py [options]` with any Python that has torch (CPU, CUDA
or ROCm).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__:
    from . import bench_measure as measure
    from . import bench_plan as plan
    from . import bench_report as report
    from . import sdpa_common as common
else:  # run as a plain script: this file's folder is first on sys.path
    import bench_measure as measure  # type: ignore[no-redef]
    import bench_plan as plan  # type: ignore[no-redef]
    import bench_report as report  # type: ignore[no-redef]
    import sdpa_common as common  # type: ignore[no-redef]

PROG = "bench.py"
SCHEMA = "sdpa-bench/1"


# --------------------------------------------------------------------------- CLI


def build_parser() -> common.OneLineArgumentParser:
    p = common.new_parser(PROG, __doc__.split("\n\n")[0])
    p.epilog = (
        "Default sizes (B,H,S,D): "
        + "; ".join(f"{k} {','.join(map(str, v))}" for k, v in plan.SIZES.items())
        + f". FLOPs: {measure.FLOP_CONVENTION}. Exit 0 when the run completed (cases that were "
        "unavailable or skipped are recorded, not errors), 2 on bad input."
    )
    _add_case_options(p)
    _add_timing_options(p)
    _add_output_options(p)
    return p


def _add_case_options(p: common.OneLineArgumentParser) -> None:
    """Which cases: sizes, shapes, dtypes, backends, causal, passes."""
    p.add_argument(
        "--suite",
        choices=plan.SUITES,
        default="default",
        help="default: the named sizes (head dim 64, Sq = Sk); llm: the shapes models run "
        "(head dim 128 and 64, grouped-query heads, 4k-32k causal prefill, one-token decode "
        "against 4k-128k keys, a 512-query chunk against 8k keys; bf16 and fp16)",
    )
    p.add_argument("--sizes", help="comma list of named sizes (default: all when no --shape)")
    p.add_argument(
        "--shape",
        action="append",
        help="extra shape B,H,S,D or grouped-query B,Hq,Hkv,S,D, optionally NAME=...; repeatable",
    )
    p.add_argument("--kv-heads", type=int, help="KV heads for named sizes / 4-number shapes (GQA)")
    p.add_argument(
        "--dtypes",
        help="comma list of fp16, bf16 (default fp16, the dtype of the reference figures; "
        "--suite llm: bf16,fp16)",
    )
    p.add_argument(
        "--backends",
        default="all",
        help="comma list of flash, ck, efficient, cudnn, math (default: all on device)",
    )
    p.add_argument("--causal", choices=("yes", "no", "both"), default="both")
    p.add_argument("--passes", default="fwd,bwd,fwdbwd", help="comma list of fwd, bwd, fwdbwd")


def _add_timing_options(p: common.OneLineArgumentParser) -> None:
    """How each case is timed: repeats, warm-up, kernel time."""
    for flag, kind, default, text in (
        ("--repeats", int, None, "fixed repeat count (default: adaptive)"),
        ("--budget-ms", float, 6.0, "adaptive mode: timed milliseconds per measurement"),
        ("--min-repeats", int, 5, "adaptive mode minimum"),
        ("--slow-min-repeats", int, 2, "adaptive mode minimum for calls slower than "
         f"{measure.SLOW_CALL_MS:g} ms"),
        ("--max-repeats", int, 50, "adaptive mode maximum"),
        ("--warmup", int, 1, "minimum warm-up calls"),
        ("--warmup-ms", float, 3.0, "keep warming up until this many ms were spent"),
    ):  # fmt: skip
        shown = "" if default is None else f" (default {default:g})"
        p.add_argument(flag, type=kind, default=default, help=text + shown)
    p.add_argument(
        "--no-kernel-time",
        dest="kernel_time",
        action="store_false",
        help="skip timing a few repeats again under torch.profiler (kernel time, busy "
        "fraction, launch-bound label) for the rows that can be launch-bound (host launch time "
        "at least a quarter of the event time)",
    )


def _add_output_options(p: common.OneLineArgumentParser) -> None:
    """Device, memory, outputs and --compare."""
    p.add_argument("--peak-tflops", type=float, help="override the arch's peak TFLOP/s")
    p.add_argument(
        "--mem-limit-gib",
        type=float,
        help="treat at most this much memory as free (skips cases that need more)",
    )
    p.add_argument("--out-dir", help="write bench.json, bench.csv, bench.png here")
    p.add_argument("--json", dest="json_path", help="JSON result path")
    p.add_argument("--csv", dest="csv_path", help="CSV result path")
    p.add_argument("--plot", dest="plot_path", help="PNG plot path")
    p.add_argument("--replot", metavar="JSON", help="only draw --plot from an existing JSON")
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("A.json", "B.json"),
        help="print speedups/regressions of B against A for matching cases and exit",
    )
    p.add_argument(
        "--threshold-pct",
        type=float,
        default=5.0,
        help="--compare: change that counts as faster/slower (default 5), besides what "
        "run-to-run variation allows (scripts/rocmfa/data/bench_noise.toml)",
    )
    p.add_argument(
        "--compare-runs",
        nargs="+",
        metavar="JSON",
        help="with --compare: more runs of A and B, as A2.json B2.json ... (several runs per "
        "side: their spread is the run-to-run variation)",
    )


def _check_options(opts: Any) -> None:
    given = vars(opts)
    for name in ("repeats", "min_repeats", "slow_min_repeats", "max_repeats", "kv_heads"):
        value = given[name]
        if value is not None and value < 1:
            raise common.UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if opts.min_repeats > opts.max_repeats:
        raise common.UsageError("--min-repeats is larger than --max-repeats")
    if opts.peak_tflops is not None and opts.peak_tflops <= 0:
        raise common.UsageError("--peak-tflops must be positive")


def _output_paths(opts: Any) -> dict[str, Path | None]:
    """--json/--csv/--plot, else bench.json/.csv/.png in --out-dir, else none; folders made."""
    out_dir = Path(opts.out_dir) if opts.out_dir else None
    paths: dict[str, Path | None] = {}
    for kind, explicit, name in (
        ("json", opts.json_path, "bench.json"),
        ("csv", opts.csv_path, "bench.csv"),
        ("plot", opts.plot_path, "bench.png"),
    ):
        path = Path(explicit) if explicit else out_dir / name if out_dir else None
        paths[kind] = path
        try:
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise common.UsageError(f"cannot create {path.parent}: {e.strerror}") from None
    return paths


def _compare(opts: Any) -> int:
    """--compare: the change between run files A and B (and --compare-runs pairs)."""
    extra = opts.compare_runs or []
    if opts.threshold_pct < 0:
        raise common.UsageError(f"--threshold-pct {opts.threshold_pct:g} must not be negative")
    if len(extra) % 2:
        raise common.UsageError("--compare-runs takes pairs: A2.json B2.json ...")
    print(
        report.compare(
            [opts.compare[0], *extra[0::2]], [opts.compare[1], *extra[1::2]], opts.threshold_pct
        )
    )
    return 0


def _replot(opts: Any) -> int:
    """--replot: draw the plot again from a saved JSON."""
    if not opts.plot_path:
        raise common.UsageError("--replot needs --plot PATH")
    data = common.read_results(opts.replot, "--replot")
    prov = data.get("provenance", {})
    note = report.write_plot(
        Path(opts.plot_path),
        data["results"],
        f"SDPA on {prov.get('device_name')} ({prov.get('arch')}), torch {prov.get('torch')}",
    )
    print(note or f"wrote {opts.plot_path}")
    return 0


def _add_peaks(
    prov: dict[str, Any], arch: Any, arches: Any, info: Any, peak_tflops: float | None
) -> dict[str, tuple[Any, Any]]:
    """The card's peak per dtype, (TFLOP/s, source), and its memory roof (GB/s, source:
    provenance memory_roof_*); recorded in the provenance."""
    rates = common.load_peak_rates()
    peaks = {
        d: common.peak_from_device(arch, d, peak_tflops, arches, info, rates)
        for d in ("fp16", "bf16")
    }
    prov["peak_tflops"] = {d: p for d, (p, _src) in peaks.items()}
    prov["peak_source"] = {d: src for d, (_p, src) in peaks.items()}
    roof, roof_source = common.memory_roof(arch, info, common.load_memory_roofs())
    prov["memory_roof_gbps"] = roof
    prov["memory_roof_source"] = roof_source
    prov["peak_note"] = (
        ", ".join(f"{d} {p:g} TFLOP/s" if p else f"{d} unknown" for d, (p, _s) in peaks.items())
        + f" ({peaks['fp16'][1]}); memory "
        + (f"{roof:g} GB/s" if roof else "unknown")
        + f" ({roof_source})"
    )
    return peaks


# Options that say where output goes or what else to do; every other option shaped the run.
NOT_SETTINGS = {"device", "dry_run", "peak_tflops", "out_dir", "json_path", "csv_path"} | {
    "plot_path", "replot", "compare", "threshold_pct", "compare_runs"
}  # fmt: skip


def _settings(opts: Any, device: Any) -> dict[str, Any]:
    """The options that shaped the run, as recorded in the JSON."""
    settings = {k: v for k, v in vars(opts).items() if k not in NOT_SETTINGS}
    # timing/sustained: as earlier runs recorded them, so that the results page still finds
    # them the same configuration as this one.
    return {**settings, "timing": "device", "sustained": 0.0, "timer": report.timing_note(device)}


def _write_outputs(
    paths: dict[str, Path | None], document: dict[str, Any], plot_title: str
) -> None:
    """Write the JSON, CSV and plot that were asked for."""
    results = document["results"]
    if paths["json"]:
        paths["json"].write_text(json.dumps(document, indent=1) + "\n")
        plan.progress(f"wrote {paths['json']}")
    if paths["csv"]:
        report.write_csv(paths["csv"], results)
        plan.progress(f"wrote {paths['csv']}")
    if paths["plot"]:
        note = report.write_plot(paths["plot"], results, plot_title)
        plan.progress(f"plot: {note}" if note else f"wrote {paths['plot']}")


def _dry_run(opts: Any, device: Any, cases: list, dtypes: list, backends: list) -> int:
    timings = sum(len(c) * len(p) for _s, c, p in cases) * len(dtypes) * len(backends)
    outputs = [opts.out_dir, opts.json_path, opts.csv_path, opts.plot_path]
    return common.dry_run(
        PROG,
        device,
        [
            f"{timings} timings: {len(cases)} shapes x {','.join(dtypes)} x "
            f"{','.join(backends)} ({opts.suite} suite, --causal {opts.causal})",
            *(f"{s.name} {s.dims()}: causal {c}, {','.join(p)}" for s, c, p in cases),
            "outputs: " + (", ".join(o for o in outputs if o) or "the table only"),
        ],
    )


def _main(argv: list[str] | None) -> int:
    opts = build_parser().parse_args(argv)
    if opts.compare:
        return _compare(opts)
    if opts.replot:
        return _replot(opts)
    _check_options(opts)
    # Validate everything cheap before touching the device.
    cases = plan.build_cases(opts)
    device = common.resolve_device(opts.device)
    dtypes = plan.suite_dtypes(opts)
    backends = common.parse_backends(opts.backends, device)
    if opts.dry_run:
        return _dry_run(opts, device, cases, dtypes, backends)
    paths = _output_paths(opts)

    started = time.perf_counter()
    arches = common.load_arches()
    arch, device_name = common.detect_arch(device)
    ident = common.identity(device, arch, device_name)
    prov = common.provenance(device, ident)
    info = common.device_info(device)
    prov["device_info"] = info
    peaks = _add_peaks(prov, arch, arches, info, opts.peak_tflops)
    if prov["env"].get("AMD_SERIALIZE_KERNEL", "0") not in ("", "0"):
        plan.progress(
            "warning: AMD_SERIALIZE_KERNEL is set; launches are serialised, timings suffer"
        )

    results = plan.run_suite(
        opts, device, {d: p for d, (p, _s) in peaks.items()}, prov["memory_roof_gbps"]
    )
    wall = time.perf_counter() - started
    print(report.render_table(results, prov, report.timing_note(device)))
    document = {
        "schema": SCHEMA,
        "identity": ident,
        "flop_convention": measure.FLOP_CONVENTION,
        "byte_convention": measure.BYTE_CONVENTION,
        "provenance": prov,
        "settings": _settings(opts, device),
        "wall_s": round(wall, 3),
        "results": results,
    }
    _write_outputs(
        paths, document, f"SDPA on {device_name} ({arch or 'cpu'}), torch {prov['torch']}"
    )
    plan.progress(f"done in {wall:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    return common.run_cli(PROG, lambda: _main(argv))


if __name__ == "__main__":
    sys.exit(main())
