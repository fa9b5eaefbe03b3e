"""bench's reporting: the result table, CSV, PNG plot, and --compare of two result files.
torch + stdlib only (matplotlib when present, for the plot)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

if __package__:
    from . import bench_measure as measure
    from . import gpu_state
    from . import sdpa_common as common
else:  # run as a plain script: this file's folder is first on sys.path
    import bench_measure as measure  # type: ignore[no-redef]
    import gpu_state  # type: ignore[no-redef]
    import sdpa_common as common  # type: ignore[no-redef]

# --------------------------------------------------------------------------- output


def format_rate(row: dict[str, Any]) -> tuple[str, str]:
    if row.get("above_peak"):
        return "!>peak", "!>peak"
    tflops = row.get("tflops")
    pct = row.get("pct_peak")
    return (
        (f"{tflops:.1f}" if tflops >= 10 else f"{tflops:.3g}") if tflops is not None else "-",
        f"{pct:.1f}" if pct is not None else "-",
    )


def timing_note(timing: str, gpu: bool) -> str:
    if timing == "wall":
        return (
            "wall: back-to-back calls on the host clock (time.perf_counter), synchronised once "
            "per sample, after 25 ms of untimed calls; host launch cost included, no cache flush"
        )
    if gpu:
        return (
            "device: torch.cuda.Event per repeat, 256 MiB L2 flush and a GPU spin "
            "(torch.cuda._sleep) queued before each repeat; host launch cost kept out"
        )
    return "device: time.perf_counter per repeat, no cache flush (CPU)"


def _state_line(provenance: dict[str, Any]) -> str:
    state = provenance.get("gpu_state") or {}
    parts = [f"{k} {gpu_state.describe(v)}" for k, v in state.items() if isinstance(v, dict)]
    return "GPU state: " + ("; ".join(parts) or gpu_state.UNKNOWN)


def status_text(r: dict[str, Any]) -> str:
    if r["status"] != "ok":
        return f"{r['status']}: {common.first_line(r['reason'] or '', 90)}"
    if r["above_peak"]:
        return "ABOVE PEAK (timing suspect)"
    return "noisy" if r.get("noisy") else "ok"


def render_table(results: list[dict], provenance: dict[str, Any], timing: str = "device") -> str:
    header = (
        "size",
        "B,H,S,D",
        "dtype",
        "causal",
        "backend",
        "pass",
        "median ms",
        "min ms",
        "max ms",
        "spread %",
        "reps",
        "TFLOP/s",
        "% peak",
        "status",
    )
    rows = []
    for r in results:
        shape = common.Shape(
            r["size"], r["batch"], r["q_heads"], r["kv_heads"], r["seq_q"], r["head_dim"]
        )
        if r["status"] == "ok":
            tflops, pct = format_rate(r)
            times = (
                f"{r['median_ms']:.4f}",
                f"{r['min_ms']:.4f}",
                f"{r['max_ms']:.4f}",
                f"{100 * r['spread']:.1f}",
                str(r["repeats"]),
            )
        else:
            tflops = pct = "-"
            times = ("-",) * 5
        status = status_text(r)
        rows.append(
            (
                r["size"],
                shape.dims(),
                r["dtype"],
                "yes" if r["causal"] else "no",
                r["backend"],
                r["pass"],
                *times,
                tflops,
                pct,
                status,
            )
        )
    noisy = sum(1 for r in results if r.get("noisy"))
    footer = (
        [
            "",
            f"{noisy} row(s) noisy: spread (p75-p25)/median stayed above the threshold after "
            "extra repeats; treat those medians with care",
        ]
        if noisy
        else []
    )
    lines = [
        f"SDPA benchmark on {provenance['device_name']} ({provenance['arch'] or 'cpu'}), "
        f"torch {provenance['torch']}",
        f"timing: {timing_note(timing, provenance.get('platform') not in (None, 'cpu'))}",
        f"FLOPs: {measure.FLOP_CONVENTION}",
        _state_line(provenance),
        f"peak: {provenance.get('peak_note', '-')}",
        "",
        *common.text_table(header, rows),
        *footer,
    ]
    return "\n".join(lines)


def write_csv(path: Path, results: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=measure.RESULT_FIELDS)
        writer.writeheader()
        for row in results:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})


def write_plot(path: Path, results: list[dict], title: str) -> str | None:
    """PNG of TFLOP/s per size: one panel per (dtype, causal) and pass. None or why skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed; plot skipped"
    ok = [r for r in results if r["status"] == "ok" and r["tflops"] is not None]
    if not ok:
        return "no rate to plot"
    columns = sorted({(r["dtype"], r["causal"]) for r in ok})
    passes = [p for p in measure.PASSES if any(r["pass"] == p for r in ok)]
    sizes = list(dict.fromkeys(r["size"] for r in results))
    backends = list(dict.fromkeys(r["backend"] for r in ok))
    fig, axes = plt.subplots(
        len(passes),
        len(columns),
        figsize=(4.2 * len(columns), 3.2 * len(passes)),
        squeeze=False,
        sharex=True,
    )
    any_noisy = False
    for i, pass_name in enumerate(passes):
        for j, (dtype, causal) in enumerate(columns):
            ax = axes[i][j]
            for backend in backends:
                points = [
                    (sizes.index(r["size"]), r["tflops"])
                    for r in ok
                    if (r["pass"], r["dtype"], r["causal"], r["backend"])
                    == (pass_name, dtype, causal, backend)
                ]
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot(xs, ys, marker="o", label=backend)
                    noisy = [
                        (sizes.index(r["size"]), r["tflops"])
                        for r in ok
                        if r.get("noisy")
                        and (r["pass"], r["dtype"], r["causal"], r["backend"])
                        == (pass_name, dtype, causal, backend)
                    ]
                    if noisy:
                        nx, ny = zip(*noisy, strict=True)
                        ax.scatter(
                            nx,
                            ny,
                            s=90,
                            marker="o",
                            facecolors="none",
                            edgecolors="red",
                            zorder=3,
                            label="noisy" if not any_noisy else None,
                        )
                        any_noisy = True
            ax.set_title(f"{pass_name} {dtype} {'causal' if causal else 'non-causal'}", fontsize=9)
            ax.set_xticks(range(len(sizes)))
            ax.set_xticklabels(sizes, rotation=30, fontsize=7)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("TFLOP/s")
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    fig.suptitle(
        title + "\n" + measure.FLOP_CONVENTION + ("\nred ring: noisy row" if any_noisy else ""),
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# --------------------------------------------------------------------------- compare


def load_results(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except UnicodeDecodeError:
        raise common.UsageError(f"{path} is not UTF-8 text (not a bench.py result file)") from None
    except OSError as e:
        raise common.UsageError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise common.UsageError(f"{path} is not JSON: {e.msg} (line {e.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise common.UsageError(f"{path} is not a bench.py result file (no 'results' list)")
    return data


def _case_key(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) for k in measure.CASE_FIELDS)


def compare(path_a: str, path_b: str, threshold_pct: float) -> str:
    a, b = load_results(path_a), load_results(path_b)
    rows_b = {_case_key(r): r for r in b["results"] if r.get("status") == "ok"}
    lines = [
        f"A: {path_a} (torch {a.get('provenance', {}).get('torch')}, "
        f"{a.get('provenance', {}).get('device_name')})",
        f"B: {path_b} (torch {b.get('provenance', {}).get('torch')}, "
        f"{b.get('provenance', {}).get('device_name')})",
        f"speedup = A median / B median (>1: B faster); changes beyond {threshold_pct:g}% marked",
        "",
    ]
    header = ("size", "dtype", "causal", "backend", "pass", "A ms", "B ms", "speedup", "")
    table = []
    matched = regressions = improvements = noisy_changes = 0
    for ra in a["results"]:
        if ra.get("status") != "ok":
            continue
        rb = rows_b.get(_case_key(ra))
        if rb is None:
            continue
        matched += 1
        speedup = ra["median_ms"] / rb["median_ms"]
        mark = ""
        noisy = ra.get("noisy") or rb.get("noisy")
        if noisy and abs(speedup - 1) > threshold_pct / 100:
            mark, noisy_changes = "noisy", noisy_changes + 1  # the spread hides a real change
        elif speedup < 1 - threshold_pct / 100:
            mark, regressions = "REGRESSION", regressions + 1
        elif speedup > 1 + threshold_pct / 100:
            mark, improvements = "faster", improvements + 1
        table.append(
            (
                ra.get("size", "?"),
                ra["dtype"],
                "yes" if ra["causal"] else "no",
                ra["backend"],
                ra["pass"],
                f"{ra['median_ms']:.4f}",
                f"{rb['median_ms']:.4f}",
                f"{speedup:.3f}x",
                mark,
            )
        )
    if not table:
        return "\n".join([*lines, "no matching successful cases in the two files"])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table, strict=True)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    for row in table:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip())
    speedups = [float(r[7][:-1]) for r in table]
    geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
    lines += [
        "",
        f"{matched} matching cases: {improvements} faster, {regressions} regressions, "
        + (
            f"{noisy_changes} noisy (a change, but a flagged spread: rerun), "
            if noisy_changes
            else ""
        )
        + f"geometric-mean speedup {geo:.3f}x",
    ]
    return "\n".join(lines)
