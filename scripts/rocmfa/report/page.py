"""nox -s report -- INPUT... [--baseline INPUT] [--out DIR] [--index URL [--arch ARCH]]

DIR/results.html (self-contained) and its data DIR/results.json, from probe JSON files and
folders and a team index's report summaries. docs/attention-tools.md."""

from __future__ import annotations

import html
import json
import math
import string
import sys
import time
from collections import defaultdict, namedtuple
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import geometric_mean
from typing import Any

from rocmfa.plumbing.errors import UserError
from rocmfa.probes import bench
from rocmfa.report import inputs

THRESHOLD_PCT = 5.0
CHANGE_RULE = "faster/slower past the threshold and the row class's noise floor; never launch-bound"
PASS_NAMES = {"fwd": "forward", "bwd": "backward", "fwdbwd": "forward+backward"}
VERDICT_KINDS = ("backend_check", "validate", "upstream", "crosscheck")
ROOF_KEYS = ("peak_tflops", "peak_source", "memory_roof_gbps", "memory_roof_source")
STYLE = """body{font:13px/1.4 sans-serif;margin:18px;color:#222;max-width:1400px}h1{font-size:20px}
h2{font-size:16px;border-bottom:1px solid #ccc;margin-top:26px}h3{font-size:14px}
h4{font-size:12px;margin:6px 0}.cards,.figs{display:flex;flex-wrap:wrap;gap:8px}.why{color:#555}
.card{border:1px solid #bbb;border-radius:4px;padding:6px 9px;width:300px;break-inside:avoid}
.card,code{font-size:11px}.card b{font-size:12px}.base,.fail,.slower{color:#b00}.pass{color:#060}
table{border-collapse:collapse;font-size:11px;margin:4px 0}.pass,.fail{font-weight:bold}
td,th{border:1px solid #ddd;padding:2px 5px;text-align:left;vertical-align:top}.faster{color:#060}
td.n{text-align:right;font-variant-numeric:tabular-nums}.noisy,.launch-bound{color:#a60}
figure{margin:0;break-inside:avoid}.legend{font-size:11px;margin:4px 0}.key{margin-right:12px}
.key i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
@media print{body{margin:0;font-size:10px}nav{display:none}h2{break-after:avoid}}"""
CARD = string.Template("""GPU: $gpu ($arch), $compute_units CUs
platform: $platform ROCm $rocm / CUDA $cuda
torch: $torch @ $torch_commit
AOTriton: $aot_version @ $aot_commit
flash built in: $flash_built_in
host: $host
date: $date""")
# OVER_TIME and KERNELS take values already escaped
OVER_TIME = string.Template("""<h3>$machine</h3><p>$config_label: geometric mean TFLOP/s over \
the $cases cases every run has, per backend: a bar per run in time order ($runs), later ones \
lighter.</p>$legend$chart""")
KERNELS = string.Template("""<h3>$arch: AOTriton $aotriton_commit, triton $triton</h3>\
<p>$sampled of $jobs jobs in $wall_s s, $time; store $store</p>$table""")


# Inline SVG bar charts written as text (docs/attention-tools.md says why), values on hover
PALETTE = {
    "flash": "#1f77b4",
    "ck": "#9467bd",
    "efficient": "#2ca02c",
    "cudnn": "#ff7f0e",
    "math": "#7f7f7f",
}
OTHER = "#8c564b"  # a backend not in PALETTE
FONT = 'font-family="sans-serif" font-size="10"'
LEFT = 46
TOP = 8
PLOT_H = 150
STROKES = {  # outline: the first flag found here
    "noisy": ' stroke="#d62728" stroke-width="1.5"',
    "launch-bound": ' stroke="#000" stroke-width="1" stroke-dasharray="2,1"',
}
# value (None: not drawn), series (colour: backend), shade (later sets lighter), title, flags
Bar = namedtuple("Bar", "value series shade title flags", defaults=(0, "", ()))


def _fmt(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _text(x: float | str, y: float | str, label: str, extra: str = ' text-anchor="middle"') -> str:
    return f'<text x="{x}" y="{y}"{extra} {FONT}>{html.escape(label)}</text>'


def grouped_bars(groups: dict, y_label: str, shades: int, ref, chart_id: str, title="") -> str:
    """A <figure>: a cluster of bars per group (x), a dashed line at `ref` (1.0, a roof)."""
    per_group = max(map(len, groups.values()), default=1) or 1
    bar_w = max(2.0, min(14.0, 520.0 / max(1, per_group * len(groups))))
    group_w = per_group * bar_w + 12
    width = int(LEFT + group_w * len(groups) + 10)
    slanted = any(len(label) > max(4, group_w / 6) for label in groups)
    height = TOP + PLOT_H + (90 if slanted else 34)
    top = max([b.value for bars in groups.values() for b in bars if b.value] + [ref or 0.0])
    exp = 10 ** math.floor(math.log10(top)) if 0 < top < math.inf else 1.0
    top = next((s * exp for s in (1, 2, 2.5, 5, 10) if top <= s * exp), 1.0)  # 1-2-2.5-5 x 10^n
    out = [
        f"<figure><h4>{html.escape(title)}</h4>" if title else "<figure>",
        f'<svg class="chart" id="{html.escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
    ]
    hline = f'<line x1="{LEFT}" x2="{width - 6}" y1="{{0}}" y2="{{0}}"{{1}}/>'.format  # (y, style)
    for tick in range(5):
        y = TOP + PLOT_H - PLOT_H * tick / 4
        out.append(hline(_fmt(y), ' stroke="#ddd"'))
        out.append(_text(LEFT - 3, _fmt(y + 3), f"{top * tick / 4:g}", ' text-anchor="end"'))
    turn = f' transform="translate(10,{TOP + PLOT_H / 2}) rotate(-90)" text-anchor="middle"'
    out.append(f"<text{turn} {FONT}>{html.escape(y_label)}</text>")
    for gi, (label, bars) in enumerate(groups.items()):
        x0 = LEFT + gi * group_w + 6
        for bi, bar in enumerate(b for b in bars if b.value is not None):
            h = PLOT_H * min(bar.value, top) / top
            fade = 1.0 - 0.6 * bar.shade / (shades - 1) if shades > 1 else 1.0
            out.append(
                f'<rect x="{_fmt(x0 + bi * bar_w)}" y="{_fmt(TOP + PLOT_H - h)}" '
                f'width="{_fmt(bar_w - 1)}" height="{_fmt(max(h, 0.5))}"'
                f' fill="{PALETTE.get(bar.series, OTHER)}"'
                + (f' fill-opacity="{fade:.2f}"' if fade < 1 else "")
                + next((STROKES[f] for f in STROKES if f in bar.flags), "")
                + f"><title>{html.escape(bar.title)}</title></rect>"
            )
        x = _fmt(x0 + per_group * bar_w / 2)
        y = TOP + PLOT_H + 14
        turn = f' text-anchor="end" transform="rotate(-35 {x} {y})"' if slanted else None
        out.append(_text(x, y, label, turn or ' text-anchor="middle"'))
    if ref is not None:
        y = _fmt(TOP + PLOT_H * (1 - ref / top))
        out.append(hline(y, ' stroke="#000" stroke-dasharray="4,3"'))
    out.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + PLOT_H}" stroke="#666"/>')
    return "".join([*out, "</svg></figure>"])


def svg_legend(series: list[str]) -> str:
    key = '<span class="key"><i style="background:{}"></i>{}</span>'
    items = "".join(key.format(PALETTE.get(s, OTHER), html.escape(s)) for s in series)
    return f'<div class="legend">{items}</div>'


def set_model(set_id: str, docs: dict[str, inputs.Doc], base_sources: set) -> dict[str, Any]:
    ident = next(iter(docs.values())).identity
    data = docs["bench"].data if "bench" in docs else {}
    prov = data.get("provenance") or {}
    kept = ("passed", "agree", "counts", "summary", "verdict", "failures", "profiler_summary")
    verdicts = {k: {f: docs[k].data.get(f) for f in kept} for k in VERDICT_KINDS if k in docs}
    return {
        "id": set_id,
        "label": f"{set_id} {ident.get('gpu')} · torch {ident.get('torch')} · {ident.get('date')}",
        "baseline": any(d.source in base_sources for d in docs.values()),
        "identity": ident,
        "files": {kind: doc.source for kind, doc in sorted(docs.items())},
        "config_label": inputs.bench_config(data) if data else None,
        **{k: prov.get(k) for k in ROOF_KEYS},  # the bench run's peaks and memory roof
        "bench": data.get("results", []),
        "verdicts": verdicts,
    }


def ok_rows(model: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in model["bench"] if r.get("status") == "ok" and r.get("median_ms")]


def comparisons(models: list[dict[str, Any]], floors: dict[str, Any]) -> tuple[list, list]:
    """Each bench set against the first baseline set of its configuration; those not compared."""
    bases: dict[str, dict[str, Any]] = {}
    for model in (m for m in models if m["baseline"] and m["bench"]):
        bases.setdefault(model["config_label"], model)
    compared = []
    not_compared = []
    for model in models if bases else []:
        if not model["bench"] or model in bases.values():
            continue
        base = bases.get(model["config_label"])
        rows = base and bench.compare_runs([base["bench"]], [model["bench"]], THRESHOLD_PCT, floors)
        if rows:
            counts, geo = bench.tally(rows)
            pair = {
                "baseline": base["id"],
                "set": model["id"],
                "counts": counts,
                "geomean_speedup": geo and round(geo, 4),
                "rows": rows,
            }
            compared.append(pair)
            continue
        known = "; ".join(f"{b['id']}: {b['config_label']}" for b in bases.values())
        why = f"no baseline of its bench configuration ({model['config_label']}); baseline {known}"
        if base:
            why = f"no case ran in both it and baseline {base['id']}"
        not_compared.append({"input": model["files"]["bench"], "why": why})
    return compared, not_compared


def over_time(models: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per machine and bench configuration run twice or more: geo. mean TFLOP/s per backend."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for model in (m for m in models if m["bench"]):
        groups[inputs.machine_key(model["identity"]), model["config_label"]].append(model)
    at = bench.CASE_FIELDS.index("backend")
    out = []
    for (machine, config), members in ((k, v) for k, v in groups.items() if len(v) > 1):
        rated = [
            {bench.case_key(r): r["tflops"] for r in ok_rows(m) if r.get("tflops")} for m in members
        ]
        common = set.intersection(*(set(r) for r in rated))
        series = {
            b: [round(geometric_mean(r[k] for k in common if k[at] == b), 3) for r in rated]
            for b in sorted({k[at] for k in common})
        }
        group = {
            "machine": " ".join(str(x) for x in machine if x),
            "config_label": config,
            "sets": [m["id"] for m in members],
            "dates": [m["identity"].get("date") for m in members],
            "cases": len(common),
            "series": series,
        }
        out.append(group)
    return out


def build(docs: list, rejected: list, baseline_docs: Sequence = ()) -> dict[str, Any]:
    """The merged data of the page (results.json)."""
    every = [*baseline_docs, *docs]
    base_sources = {d.source for d in baseline_docs}
    sets, duplicates = inputs.group([d for d in every if d.kind != "kernel_check"])
    models = [set_model(f"S{n}", s, base_sources) for n, s in enumerate(sets, 1)]
    floors = bench.load_floors()
    compared, not_compared = comparisons(models, floors)
    rule = {"threshold_pct": THRESHOLD_PCT, "text": CHANGE_RULE, "floors": floors["source"]}
    return {
        "schema": inputs.PAGE_SCHEMA,
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "change_rule": rule,
        "sets": models,
        "flop_convention": bench.FLOP_CONVENTION,
        "comparisons": compared,
        "not_compared": not_compared,
        "over_time": over_time(models),
        "not_shown": [{"input": r.source, "why": r.why} for r in rejected + duplicates],
        "kernel_checks": [d.data for d in every if d.kind == "kernel_check"],
    }


def esc(value: Any) -> str:
    return html.escape("-" if value is None else str(value))


def td(value: Any, cls: str = "", mark: str = "") -> str:
    """A cell; numbers as the JSON holds them (the browser test reads them back)."""
    return f'<td class="{cls}">{esc(value)}{mark}</td>' if cls else f"<td>{esc(value)}{mark}</td>"


def table(cls: str, head: Sequence[str], rows: Sequence[Sequence[str]], attrs: str = "") -> str:
    cells = ["".join(f"<th>{esc(h)}</th>" for h in head), *("".join(r) for r in rows)]
    return f'<table class="{cls}"{attrs}>' + "".join(f"<tr>{c}</tr>" for c in cells) + "</table>"


def card(model: dict[str, Any]) -> str:
    ident = model["identity"]
    aot = ident.get("aotriton") or {}
    known = {**ident, "aot_version": aot.get("version"), "aot_commit": aot.get("commit")}
    values = defaultdict(lambda: "-", {k: v for k, v in known.items() if v not in (None, "")})
    for commit in ("torch_commit", "aot_commit"):
        values[commit] = str(values[commit])[:12]
    patches = ", ".join(f"{k} {str(v)[:12]}" for k, v in (ident.get("patches") or {}).items())
    more = [("wheel set", ident.get("wheel_set")), ("patches", patches)]
    for dtype, peak in (model["peak_tflops"] or {}).items():
        source = (model["peak_source"] or {}).get(dtype)  # computed: ..., or table fallback ...
        shown = f"{peak} TFLOP/s ({source})" if peak else f"unknown ({source})"
        more.append((f"peak {dtype}", shown))
    roof, roof_source = model["memory_roof_gbps"], model["memory_roof_source"]
    more.append(("memory roof", f"{roof} GB/s ({roof_source})" if roof else roof_source))
    more.append(("bench", model["config_label"]))
    lines = [*CARD.substitute(values).splitlines(), *(f"{k}: {v}" for k, v in more if v)]
    body = "".join(f"<br>{esc(line)}" for line in lines)
    base = ' <span class="base">baseline</span>' if model["baseline"] else ""
    label = f"<b>{esc(model['label'])}</b>{base}"
    return f'<div class="card" id="card-{model["id"]}">{label}{body}</div>'


def verdict_cell(verdict: dict[str, Any] | None) -> str:
    if not verdict:
        return "<td>-</td>"
    passed = verdict["agree"] if verdict["passed"] is None else verdict["passed"]
    mark = {True: '<span class="pass">PASS</span>', False: '<span class="fail">FAIL</span>'}
    shown = f"{mark.get(passed, '?')} {esc(verdict['summary'] or verdict['verdict'])}"
    if verdict["counts"]:
        shown += f"<br>counts: {esc(json.dumps(verdict['counts'], sort_keys=True))}"
    if verdict["profiler_summary"]:
        shown += f"<br>{esc(verdict['profiler_summary'])}"
    return f"<td>{shown}</td>"


def bench_bar(model: dict[str, Any], row: dict[str, Any], shade: int) -> Bar:
    flags = tuple(f for f in ("noisy", "launch-bound") if row.get(f.replace("-", "_")))
    if row.get("bound") == "memory":
        value = row.get("gbps")
        rate = f"GB/s, {row.get('pct_roof')}% of the memory roof"
    else:
        value = row.get("tflops")
        rate = f"TFLOP/s, {row.get('pct_peak')}% of peak"
    title = f"{model['id']} {row['size']} {row['backend']}: {row['median_ms']} ms, {value} {rate}"
    return Bar(value, row["backend"], shade, title + "".join(f" [{f}]" for f in flags), flags)


def bench_figures(members: list, index: list[dict], first: dict, memory: bool, prefix: str) -> str:
    """A chart per pass/dtype/causal of the compute-bound (TFLOP/s) or memory-bound rows (GB/s)."""
    panels: dict[tuple, dict[str, list[Bar]]] = defaultdict(lambda: defaultdict(list))
    for key, row in first.items():
        if (row.get("bound") == "memory") == memory:
            shades = enumerate(zip(members, index, strict=True))
            bars = [bench_bar(m, rows[key], shade) for shade, (m, rows) in shades if key in rows]
            panels[row["pass"], row["dtype"], bool(row["causal"])][row["size"]] += bars
    roof = next((m["memory_roof_gbps"] for m in members if memory and m["memory_roof_gbps"]), None)
    unit = "GB/s" if memory else "TFLOP/s"
    figs = []
    for (pass_name, dtype, causal), groups in sorted(
        panels.items(), key=lambda p: (bench.PASSES.index(p[0][0]), p[0])
    ):
        kind = "causal" if causal else "non-causal"
        roof_note = f" · memory-bound, roof {roof:g} GB/s" if roof else ""
        title = f"{PASS_NAMES[pass_name]} · {dtype} · {kind}{roof_note}"
        chart_id = f"{prefix}-{pass_name}-{dtype}-{int(causal)}"
        figs.append(grouped_bars(groups, unit, len(members), roof, chart_id, title))
    return "".join(figs)


def case_rows(index: list[dict], extra: Callable, per_set: Callable, blank: int) -> tuple:
    """Each case of `index` once: its first row; its cells (case, `extra`, `per_set` per set)."""
    first: dict[tuple, dict[str, Any]] = {}
    for rows in index:
        first.update({k: r for k, r in rows.items() if k not in first})
    cells = []
    for k, row in first.items():
        per = [per_set(r[k]) if k in r else ["<td>-</td>"] * blank for r in index]
        cells.append([*map(td, bench.case_cells(row)), *extra(row), *(c for p in per for c in p)])
    return first, cells


def bench_cells(row: dict[str, Any]) -> list[str]:
    mark = ("*" if row.get("noisy") else "") + ("†" if row.get("launch_bound") else "")
    pct = row.get("pct_roof") if row.get("bound") else row.get("pct_peak")
    return [td(row["median_ms"], "", mark), td(row.get("tflops")), td(row.get("gbps")), td(pct)]


def bench_section(models: list[dict[str, Any]]) -> str:
    by_config: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for model in (m for m in models if m["bench"]):
        by_config[model["config_label"]].append(model)
    parts = []
    for ci, (label, members) in enumerate(by_config.items()):
        index = [{bench.case_key(r): r for r in ok_rows(m)} for m in members]
        first, rows = case_rows(index, lambda r: [td(r.get("bound"))], bench_cells, 4)
        sets = ", ".join(m["id"] for m in members)
        units = ("ms", "TF/s", "GB/s", "% roof")
        heads = [*bench.CASE_HEAD, "bound", *(f"{m['id']} {u}" for m in members for u in units)]
        memory = bench_figures(members, index, first, True, f"bench-mem-{ci}")
        figs = bench_figures(members, index, first, False, f"bench-{ci}")
        legend = svg_legend(list(dict.fromkeys(r["backend"] for r in first.values())))
        numbers = table("bench-table", heads, rows, f' data-sets="{sets}"')
        memory = memory and (
            "<h4>Memory-bound rows (FLOP/byte under the ridge point): GB/s against the memory "
            f'roof (dashed)</h4><div class="figs">{memory}</div>'
        )
        parts.append(
            f"<h3>{esc(label)}</h3><p>Result sets {sets}: within a backend in this order, later "
            "ones lighter. Red outline (* in the table): noisy row; dashed (†): launch-bound, the "
            f'GPU idled most of the timed interval.</p>{legend}<div class="figs">{figs}</div>'
            f"{memory}<details><summary>numbers: median ms, TFLOP/s, GB/s, % of the binding roof "
            f"({len(first)} cases)</summary>{numbers}</details>"
        )
    return "".join(parts) or "<p>No bench result.</p>"


def comparison_section(comps: list[dict[str, Any]]) -> str:
    """Verdict counts and geo. mean speedups per set, a chart per pass, every case's speedup."""
    charts: dict[str, dict[str, list[Bar]]] = defaultdict(lambda: defaultdict(list))
    for shade, comp in enumerate(comps):
        kept = defaultdict(list)
        for r in (r for r in comp["rows"] if r["verdict"] != "launch-bound"):
            kept[r["pass"], r["backend"]].append(r["speedup"])
        for (pass_name, backend), speedups in kept.items():
            geo = round(geometric_mean(speedups), 4)
            title = f"{comp['set']} {backend} {pass_name}: {geo}x"
            charts[pass_name][backend].append(Bar(geo, backend, shade, title))
    figs = [
        grouped_bars(charts[p], "speedup (x)", len(comps), 1.0, f"speedup-{p}", t)
        for p, t in PASS_NAMES.items()
        if p in charts
    ]
    index = [{bench.case_key(r): r for r in c["rows"]} for c in comps]
    speedup = lambda r: [td(r["speedup"], r["verdict"], f" {r['verdict']}")]  # noqa: E731
    first, rows = case_rows(index, lambda r: [td(r["a_ms"])], speedup, 1)
    summary = []
    for c in comps:
        counts = [td(c["counts"].get(v, 0)) for v in bench.VERDICTS]
        summary.append([td(c["set"]), td(c["baseline"]), *counts, td(c["geomean_speedup"])])
    head = ["set", "baseline", *bench.VERDICTS, "geo. mean speedup"]
    legend = svg_legend(list(dict.fromkeys(r["backend"] for c in comps for r in c["rows"])))
    case_head = [*bench.CASE_HEAD, "baseline ms", *(c["set"] for c in comps)]
    every = table("speedup-table", case_head, rows)
    return (
        "<p>Speedup = baseline median / median (&gt;1: faster than the baseline). Verdicts by the "
        "change rule above; launch-bound rows are left out of the means.</p>"
        f'{table("comparisons", head, summary)}{legend}<div class="figs">{"".join(figs)}</div>'
        f"<details><summary>every case ({len(first)})</summary>{every}</details>"
    )


def time_section(groups: list[dict[str, Any]]) -> str:
    parts = []
    for ti, group in enumerate(groups):
        runs = [f"{s} {str(d)[5:16]}" for s, d in zip(group["sets"], group["dates"], strict=True)]
        bars = {
            b: [Bar(v, b, i, f"{runs[i]} {b}: {v} TFLOP/s") for i, v in enumerate(values)]
            for b, values in group["series"].items()
        }
        chart = grouped_bars(bars, "TFLOP/s (geo. mean)", len(runs), None, f"time-{ti}")
        shown = {k: esc(group[k] or "") for k in ("machine", "config_label", "cases")}
        shown["runs"] = esc(", ".join(runs))
        legend = svg_legend(list(group["series"]))
        parts.append(OVER_TIME.substitute(shown, legend=legend, chart=chart))
    return "".join(parts) or "<p>No machine has two runs of one bench configuration.</p>"


def kernel_check_section(checks: list[dict[str, Any]]) -> str:
    """Per kernel check (nox -s kernel_check), each family's jobs, sample and kernel-store hits."""
    fields = ("jobs", "sampled", "compiled", "from_store", "seconds")
    head = ["family", *(f.replace("_", " ") for f in fields)]
    parts = []
    for check in checks:
        shown = defaultdict(lambda: "-", {k: esc(v) for k, v in check.items() if v is not None})
        shown["aotriton_commit"] = shown["aotriton_commit"][:12]
        families = sorted(check["families"].items())
        rows = [[td(n), *(td(family.get(f), f"n {f}") for f in fields)] for n, family in families]
        parts.append(KERNELS.substitute(shown, table=table("kernels", head, rows)))
    return "".join(parts)


def render(data: dict[str, Any]) -> str:
    models = data["sets"]
    item = '<li><code>{}</code>: <span class="why">{}</span></li>'
    listed = {
        k: "".join(item.format(esc(n["input"]), esc(n["why"])) for n in data[k])
        for k in ("not_shown", "not_compared")
    }
    verdicts = [
        [td(m["id"]), *(verdict_cell(m["verdicts"].get(k)) for k in VERDICT_KINDS)] for m in models
    ]
    heads = ["set", "backend_check", "validate", "validate --upstream", "crosscheck"]
    baseline = comparison_section(data["comparisons"]) if data["comparisons"] else ""
    if listed["not_compared"]:
        baseline += f"<p>Shown above, not compared:</p><ul>{listed['not_compared']}</ul>"
    not_shown = listed["not_shown"] and f"<ul>{listed['not_shown']}</ul>"
    sections = [  # (id, title, body); those without a body left out
        ("identity", "Result sets", f'<div class="cards">{"".join(card(m) for m in models)}</div>'),
        ("verdicts", "Verdicts", table("verdicts", heads, verdicts)),
        ("bench", "Bench", bench_section(models)),
        ("baseline", "Against the baseline", baseline),
        ("over-time", "One machine over time", time_section(data["over_time"])),
        ("kernels", "AOTriton kernel checks", kernel_check_section(data["kernel_checks"])),
        ("not-shown", "Not shown, and why", not_shown or "<p>Every input is shown.</p>"),
    ]
    sections = [s for s in sections if s[2]]
    rule = data["change_rule"]
    title = f"SDPA results: {len(models)} result sets"
    nav = " · ".join(f'<a href="#{i}">{esc(t)}</a>' for i, t, _b in sections)
    body = "".join(f'<section id="{i}"><h2>{esc(t)}</h2>{b}</section>' for i, t, b in sections)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
        f'content="width=device-width,initial-scale=1"><title>{title}</title><style>{STYLE}'
        f"</style></head><body><h1>{title}</h1><p>Generated {data['generated']} by <code>nox -s "
        f"report</code>. FLOPs: {esc(data['flop_convention'])}. Change rule: {esc(rule['text'])} "
        f"(threshold {rule['threshold_pct']:g}%; floors: {esc(rule['floors'])}).</p>"
        f"<nav>{nav}</nav>{body}</body></html>\n"
    )


def report(opts: Any, rest: Sequence[str]) -> int:
    """Write results.html and results.json; say on stderr what was left out and why."""
    started = time.perf_counter()
    if "--help" in rest or "-h" in rest:  # after the options' own help (noxfile._call)
        print(__doc__)
        raise SystemExit(0)
    if flags := [a for a in rest if a.startswith("-")]:
        raise UserError(f"report: unknown option {flags[0]} (see: nox -s report -- --help)")
    if not rest and not opts.index:
        raise UserError("report: give INPUT (a folder or a probe's JSON file) or --index URL")
    docs, rejected = inputs.read_paths(list(rest))
    if opts.index:
        found, left = inputs.read_index(opts.index, opts.arch)
        docs, rejected = docs + found, rejected + left
    baseline_docs, left = inputs.read_paths([opts.baseline]) if opts.baseline else ([], [])
    if opts.baseline:
        unusable = left and not Path(opts.baseline).is_dir()
        if unusable or not any(d.kind == "bench" for d in baseline_docs):
            why = left[0].why if unusable else "holds no bench result"
            raise UserError(f"report: --baseline {opts.baseline}: {why}")
        rejected += [inputs.Rejected(r.source, f"(baseline) {r.why}") for r in left]
        docs = [d for d in docs if d.source not in {b.source for b in baseline_docs}]
    data = build(docs, rejected, baseline_docs)
    for what, key in (("not shown", "not_shown"), ("shown, not compared", "not_compared")):
        for entry in data[key]:
            print(f"report: {what}: {entry['input']}: {entry['why']}", file=sys.stderr)
    if not data["sets"]:
        why = f"{len(data['not_shown'])} input(s) left out, listed above"
        raise UserError(f"report: nothing could be shown ({why})")
    out = Path(opts.out or "results-page")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.html").write_text(render(data), encoding="utf-8")
    (out / "results.json").write_text(json.dumps(data, separators=(",", ":")) + "\n")
    shown = f"{len(data['sets'])} result set(s), {len(data['not_shown'])} input(s) not shown"
    took = f"{time.perf_counter() - started:.2f} s"
    print(f"report: wrote {out}/results.html and results.json: {shown}, {took}")
    return 0
