"""bench's reporting: the result table, CSV, PNG plot, and --compare of two result files.
torch + stdlib only (matplotlib when present, for the plot)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

if __package__:
    from . import bench_change as change
    from . import bench_measure as measure
    from . import sdpa_common as common
else:  # run as a plain script: this file's folder is first on sys.path
    import bench_change as change  # type: ignore[no-redef]
    import bench_measure as measure  # type: ignore[no-redef]
    import sdpa_common as common  # type: ignore[no-redef]

# --------------------------------------------------------------------------- output


def format_rate(row: dict[str, Any]) -> tuple[str, str, str, str]:
    """TFLOP/s, GB/s, the binding roof and % of it (of the compute peak when no memory roof is
    known) as table text."""
    gbps = row.get("gbps")
    bound = {"memory": "memory", "compute": "compute"}.get(row.get("bound") or "", "-")
    gb_text = (f"{gbps:.0f}" if gbps >= 100 else f"{gbps:.3g}") if gbps is not None else "-"
    if row.get("above_peak"):
        return "!>peak", gb_text, bound, "!>peak"
    tflops = row.get("tflops")
    pct = row.get("pct_roof") if row.get("bound") else row.get("pct_peak")
    return (
        (f"{tflops:.1f}" if tflops >= 10 else f"{tflops:.3g}") if tflops is not None else "-",
        gb_text,
        bound,
        f"{pct:.1f}" if pct is not None else "-",
    )


def timing_note(device: Any) -> str:
    if device.type == "cuda":
        return (
            "device: torch.cuda.Event per repeat, 256 MiB L2 flush and a GPU spin "
            "(torch.cuda._sleep) queued before each repeat; host launch cost kept out"
        )
    return "device: time.perf_counter per repeat, no cache flush (CPU)"


def status_text(r: dict[str, Any]) -> str:
    if r["status"] != "ok":
        return f"{r['status']}: {common.first_line(r['reason'] or '', 90)}"
    if r["above_peak"]:
        return "ABOVE PEAK (timing suspect)"
    if r.get("bound") == "memory" and (r.get("pct_roof") or 0) > 100:
        return "ABOVE MEMORY ROOF (timing or roof suspect)"
    if r.get("launch_bound"):
        return f"launch-bound (GPU busy {100 * r['busy']:.0f}% of the time)"
    return "noisy" if r.get("noisy") else "ok"


TABLE_HEADER = (
    *("size", "B,H,S,D", "dtype", "causal", "backend", "pass"),
    *("median ms", "min ms", "max ms", "spread %", "reps"),
    *("TFLOP/s", "GB/s", "bound", "% roof", "status"),
)


def table_row(r: dict[str, Any]) -> tuple:
    dims = common.Shape.of_row(r).dims()
    rate: tuple = ("-",) * 4
    times: tuple = ("-",) * 5
    if r["status"] == "ok":
        rate = format_rate(r)
        ms = (f"{r[k]:.4f}" for k in ("median_ms", "min_ms", "max_ms"))
        times = (*ms, f"{100 * r['spread']:.1f}", str(r["repeats"]))
    causal = "yes" if r["causal"] else "no"
    return (
        r["size"],
        dims,
        r["dtype"],
        causal,
        r["backend"],
        r["pass"],
        *times,
        *rate,
        status_text(r),
    )


def render_table(results: list[dict], provenance: dict[str, Any], timer: str) -> str:
    noisy = sum(1 for r in results if r.get("noisy"))
    footer = [
        "",
        f"{noisy} row(s) noisy: spread (p75-p25)/median above "
        f"{measure.NOISE_THRESHOLD:.0%}; treat those medians with care",
    ]
    lines = [
        f"SDPA benchmark on {provenance['device_name']} ({provenance['arch'] or 'cpu'}), "
        f"torch {provenance['torch']}",
        f"timing: {timer}",
        f"FLOPs: {measure.FLOP_CONVENTION}",
        f"bytes: {measure.BYTE_CONVENTION}; bound: memory when FLOP/byte is under peak / memory "
        "roof; % roof: of the memory roof (GB/s) for memory-bound rows, of the compute peak "
        "otherwise",
        f"peak: {provenance.get('peak_note', '-')}",
        "",
        *common.text_table(TABLE_HEADER, [table_row(r) for r in results]),
        *(footer if noisy else []),
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
            panel = [
                r for r in ok if (r["pass"], r["dtype"], r["causal"]) == (pass_name, dtype, causal)
            ]
            any_noisy = _plot_panel(ax, panel, sizes, any_noisy)
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


def _plot_panel(ax: Any, rows: list[dict], sizes: list[str], any_noisy: bool) -> bool:
    """One line per backend, noisy rows ringed in red; True once a noisy row was drawn."""
    for backend in dict.fromkeys(r["backend"] for r in rows):
        mine = [r for r in rows if r["backend"] == backend]
        xs, ys = zip(*((sizes.index(r["size"]), r["tflops"]) for r in mine), strict=True)
        ax.plot(xs, ys, marker="o", label=backend)
        noisy = [(sizes.index(r["size"]), r["tflops"]) for r in mine if r.get("noisy")]
        if noisy:
            nx, ny = zip(*noisy, strict=True)
            label = "noisy" if not any_noisy else None
            ax.scatter(nx, ny, s=90, facecolors="none", edgecolors="red", zorder=3, label=label)
            any_noisy = True
    return any_noisy


# --------------------------------------------------------------------------- compare


def compare(paths_a: list[str], paths_b: list[str], threshold_pct: float) -> str:
    """B's runs against A's runs, every matching case judged by the one change rule
    (bench_change: threshold, run-to-run floor, launch-bound rows never a change)."""
    a_docs = [common.read_results(p, "bench result") for p in paths_a]
    b_docs = [common.read_results(p, "bench result") for p in paths_b]
    floors = change.load_floors()

    def who(docs: list[dict[str, Any]], paths: list[str]) -> str:
        prov = docs[0].get("provenance", {})
        return (
            f"{', '.join(paths)} (torch {prov.get('torch')}, {prov.get('device_name')}"
            f"{f'; {len(docs)} runs' if len(docs) > 1 else ''})"
        )

    lines = [
        f"A: {who(a_docs, paths_a)}",
        f"B: {who(b_docs, paths_b)}",
        f"speedup = A median / B median (>1: B faster); faster/slower only beyond "
        f"{threshold_pct:g}% and the run-to-run allowance (floors: {floors['source']})",
        "",
    ]
    rows = change.compare_runs(
        [d["results"] for d in a_docs], [d["results"] for d in b_docs], threshold_pct, floors
    )
    if not rows:
        raise common.UsageError(
            f"nothing to compare: no case ran successfully in both {paths_a[0]} and {paths_b[0]}"
            + (" (and every --compare-runs file)" if len(paths_a) > 1 else "")
        )
    header = ("size", "dtype", "causal", "backend", "pass", "A ms", "B ms", "speedup", "allowed")
    header = (*header, "")
    table = [
        (
            r.get("size") or "?",
            r["dtype"],
            "yes" if r["causal"] else "no",
            r["backend"],
            r["pass"],
            f"{r['a_ms']:.4f}",
            f"{r['b_ms']:.4f}",
            f"{r['speedup']:.3f}x",
            f"{r['allowance_pct']:.0f}%",
            "" if r["verdict"] == "same" else r["verdict"],
        )
        for r in rows
    ]
    lines += common.text_table(header, table)
    counts, geo = change.tally(rows)
    lines += [
        "",
        f"{len(rows)} matching cases: {counts['faster']} faster, {counts['slower']} slower, "
        f"{counts['noisy']} noisy (beyond {threshold_pct:g}% but within run-to-run variation: "
        f"rerun with more runs), {counts['launch-bound']} launch-bound (GPU idle most of the "
        f"timed interval: not a kernel change), {counts['same']} same; "
        f"geometric-mean speedup {geo or 1.0:.3f}x",
    ]
    return "\n".join(lines)
