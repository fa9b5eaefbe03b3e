"""`nox -s report -- INPUT... [--baseline INPUT] [--out DIR] [--index URL]`: one self-contained
HTML page (results.html: styles and SVG charts inline, no script, nothing fetched; opens from
file:// and prints) and the merged data (results.json) from any number of result sets.

Sections: an identity card per result set; verdicts (backend_check with its reason, validate
and upstream counts, the crosscheck); bench as grouped bars per pass / dtype / causal with one
bar per backend per result set (TFLOP/s; median and % of peak in the tables and on hover,
kernel time in the JSON; noisy rows outlined red, launch-bound rows dashed), memory-bound rows
in GB/s against the memory roof; with --baseline, each set against the baseline of its own
bench configuration, a speedup table and chart judged by the one change rule
(scripts/rocmfa/probes/bench_change.py); result
sets of one machine over time as a line per backend; and "not shown, and why" for every input
that could not be used (also one line each on the terminal). Exit non-zero only when nothing
was shown or --baseline cannot be used.
"""

from __future__ import annotations

import html
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from statistics import geometric_mean
from typing import Any

from rocmfa.plumbing.errors import UserError
from rocmfa.probes import bench_change as change
from rocmfa.probes.sdpa_common import Shape
from rocmfa.report import inputs, svg

PAGE_SCHEMA = inputs.PAGE_SCHEMA
THRESHOLD_PCT = 5.0
FLOP_CONVENTION = (
    "flash-attention convention: fwd = 4*B*Hq*Sq*Sk*D (causal: x0.5), "
    "bwd = 2.5 x fwd, fwd+bwd = 3.5 x fwd"
)
PASS_NAMES = {"fwd": "forward", "bwd": "backward", "fwdbwd": "forward+backward"}
STYLE = """
body{font:13px/1.4 sans-serif;margin:18px;color:#222;max-width:1400px}
h1{font-size:20px}h2{font-size:16px;border-bottom:1px solid #ccc;margin-top:26px}
h3{font-size:14px}h4{font-size:12px;margin:6px 0}
.cards{display:flex;flex-wrap:wrap;gap:8px}
.card{border:1px solid #bbb;border-radius:4px;padding:6px 9px;width:300px;font-size:11px}
.card b{font-size:12px}.card .base{color:#b00}
table{border-collapse:collapse;font-size:11px;margin:4px 0}
td,th{border:1px solid #ddd;padding:2px 5px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#060;font-weight:bold}.fail{color:#b00;font-weight:bold}
.faster{color:#060}.slower{color:#b00}.noisy,.launch-bound{color:#a60}
.figs{display:flex;flex-wrap:wrap;gap:10px}figure{margin:0;break-inside:avoid}
.legend{font-size:11px;margin:4px 0}.key{margin-right:12px}
.key i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.why{color:#555}code{font-size:11px}
@media print{body{margin:0;font-size:10px}nav{display:none}h2{break-after:avoid}
.card{break-inside:avoid}}
"""


def _text(value: Any) -> str:
    return html.escape("-" if value is None else str(value))


def _num(value: Any) -> str:
    """A number as the JSON holds it (the browser test reads these cells back)."""
    text = repr(value) if isinstance(value, float) else str(value)
    return "-" if value is None else html.escape(text)


def dims(row: dict[str, Any]) -> str:
    return "-" if row.get("batch") is None else Shape.of_row(row).dims()


# --- the model ----------------------------------------------------------------------------------


def set_model(result_set: inputs.ResultSet, baseline: bool) -> dict[str, Any]:
    ident = result_set.identity
    model: dict[str, Any] = dict.fromkeys(("config", "config_label", "peak_tflops", "peak_source"))
    model.update(
        id=result_set.id,
        label=f"{result_set.id} {ident.get('gpu')} · torch {ident.get('torch')} · "
        f"{ident.get('date')}",
        baseline=baseline,
        identity=ident,
        files={kind: doc.source for kind, doc in sorted(result_set.docs.items())},
        verdicts={},
        bench=[],
    )
    bench = result_set.docs.get("bench")
    if bench is not None:
        prov = bench.data.get("provenance") or {}
        model["config"] = inputs.bench_config(bench.data)
        model["config_label"] = inputs.config_label(model["config"])
        model["peak_tflops"] = prov.get("peak_tflops")
        model["peak_source"] = prov.get("peak_source")
        model["memory_roof_gbps"] = prov.get("memory_roof_gbps")
        model["memory_roof_source"] = prov.get("memory_roof_source")
        model["timer"] = (bench.data.get("settings") or {}).get("timer")
        model["bench"] = [r for r in bench.data["results"] if isinstance(r, dict)]
    for kind in ("backend_check", "validate", "upstream", "crosscheck"):
        doc = result_set.docs.get(kind)
        if doc is None:
            continue
        data = doc.data
        model["verdicts"][kind] = {
            "passed": data.get("passed", data.get("agree")),
            "summary": data.get("summary") or data.get("verdict"),
            "counts": data.get("counts"),
            "failures": data.get("failures"),
            "profiler": data.get("profiler_summary"),
        }
    return model


def ok_rows(model: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in model["bench"] if r.get("status") == "ok" and r.get("median_ms")]


def config_key(model: dict[str, Any]) -> str:
    return json.dumps(model["config"], sort_keys=True)


def comparisons(
    bases: dict[str, dict[str, Any]],
    models: list[dict[str, Any]],
    not_compared: list[dict[str, str]],
) -> list[dict[str, Any]]:
    """Every other bench set against the baseline of its own configuration (bases: config ->
    the first baseline set of it); a set without one is shown, not compared, and said so."""
    floors = change.load_floors()
    out: list[dict[str, Any]] = []
    for model in models if bases else []:
        if not model["bench"] or any(model is b for b in bases.values()):
            continue
        source = model["files"].get("bench", model["id"])
        base = bases.get(config_key(model))
        if base is None:
            known = "; ".join(f"{b['id']}: {b['config_label']}" for b in bases.values())
            why = f"no baseline of its bench configuration ({model['config_label']}); "
            why += f"baseline {known}"
            not_compared.append({"input": source, "why": why})
            continue
        rows = change.compare_runs([ok_rows(base)], [ok_rows(model)], THRESHOLD_PCT, floors)
        if not rows:
            why = f"no case ran in both it and baseline {base['id']}"
            not_compared.append({"input": source, "why": why})
            continue
        counts, geo = change.tally(rows)
        speedup = None if geo is None else round(geo, 4)
        out.append({"baseline": base["id"], "set": model["id"], "counts": counts,
                    "geomean_speedup": speedup, "rows": rows})  # fmt: skip
    return out


def over_time(models: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per machine and bench configuration with two or more runs: per backend, the geometric
    mean TFLOP/s over the cases every one of those runs has."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for model in models:
        if model["bench"]:
            key = (
                inputs.machine_key(model["identity"]),
                json.dumps(model["config"], sort_keys=True),
            )
            groups.setdefault(key, []).append(model)
    out = []
    for (machine, _config), members in groups.items():
        if len(members) < 2:
            continue
        rated = [
            {change.case_key(r): r["tflops"] for r in ok_rows(m) if r.get("tflops")}
            for m in members
        ]
        common = set.intersection(*(set(r) for r in rated))
        backends = sorted({key[change.CASE_FIELDS.index("backend")] for key in common})
        series = {}
        for backend in backends:
            keys = [k for k in common if k[change.CASE_FIELDS.index("backend")] == backend]
            series[backend] = [round(geometric_mean(r[k] for k in keys), 3) for r in rated]
        out.append(
            {
                "machine": " ".join(str(x) for x in machine if x),
                "config_label": members[0]["config_label"],
                "sets": [m["id"] for m in members],
                "dates": [m["identity"].get("date") for m in members],
                "cases": len(common),
                "series": series,
            }
        )
    return out


def build(
    docs: list[inputs.Doc],
    rejected: list[inputs.Rejected],
    baseline_docs: list[inputs.Doc] | None = None,
) -> dict[str, Any]:
    """The merged data of the page."""
    baseline_docs = baseline_docs or []
    checks = [d.data for d in [*baseline_docs, *docs] if d.kind == "kernel_check"]
    docs = [d for d in docs if d.kind != "kernel_check"]
    baseline_docs = [d for d in baseline_docs if d.kind != "kernel_check"]
    sets, duplicates = inputs.group([*baseline_docs, *docs])
    base_sources = {d.source for d in baseline_docs}
    not_shown = [{"input": r.source, "why": r.why} for r in [*rejected, *duplicates]]
    models = [
        set_model(s, baseline=any(d.source in base_sources for d in s.docs.values())) for s in sets
    ]
    bases: dict[str, dict[str, Any]] = {}
    for model in models:
        if model["baseline"] and model["bench"]:
            bases.setdefault(config_key(model), model)
    not_compared: list[dict[str, str]] = []
    return {
        "schema": PAGE_SCHEMA,
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "flop_convention": FLOP_CONVENTION,
        "change_rule": {
            "threshold_pct": THRESHOLD_PCT,
            "floors": change.load_floors()["source"],
            "text": "faster/slower only beyond the threshold and the run-to-run floor of the "
            "row's class; launch-bound rows are never a change",
        },
        "sets": models,
        "comparisons": comparisons(bases, models, not_compared),
        "not_compared": not_compared,
        "over_time": over_time(models),
        "kernel_checks": checks,
        "not_shown": not_shown,
    }


def cells(row: dict[str, Any], *fields: str, numbers: bool = False) -> str:
    if numbers:
        return "".join(f'<td class="n {f}">{_num(row.get(f))}</td>' for f in fields)
    return "".join(f"<td>{_text(row.get(f))}</td>" for f in fields)


def header(words: str, *more: str) -> str:
    return "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in [*words.split(), *more])


# --- the page -----------------------------------------------------------------------------------


def card(model: dict[str, Any]) -> str:
    ident = model["identity"]
    aot = ident.get("aotriton") or {}
    lines = [
        (
            "GPU",
            f"{ident.get('gpu')} ({ident.get('arch') or '-'}), "
            f"{ident.get('compute_units', '-')} CUs",
        ),
        (
            "platform",
            f"{ident.get('platform')} ROCm {ident.get('rocm') or '-'} / "
            f"CUDA {ident.get('cuda') or '-'}",
        ),
        ("torch", f"{ident.get('torch')} @ {str(ident.get('torch_commit') or '-')[:12]}"),
        ("AOTriton", f"{aot.get('version') or '-'} @ {str(aot.get('commit') or '-')[:12]}"),
        ("flash built in", ident.get("flash_built_in")),
        ("host", ident.get("host")),
        ("date", ident.get("date")),
    ]
    if ident.get("wheel_set"):
        lines.append(("wheel set", ident["wheel_set"]))
    if ident.get("patches"):
        lines.append(
            ("patches", ", ".join(f"{k} {str(v)[:12]}" for k, v in ident["patches"].items()))
        )
    for dtype, peak in (model.get("peak_tflops") or {}).items():
        source = (model.get("peak_source") or {}).get(dtype, "")
        kind = "computed" if str(source).startswith("computed") else "table"
        shown = f"{peak} TFLOP/s ({kind}: {source})" if peak else f"unknown ({source})"
        lines.append((f"peak {dtype}", shown))
    if model.get("memory_roof_gbps") or model.get("memory_roof_source"):
        roof = model.get("memory_roof_gbps")
        lines.append(
            ("memory roof", f"{roof} GB/s ({model.get('memory_roof_source')})" if roof else "-")
        )
    if model.get("config_label"):
        lines.append(("bench", model["config_label"]))
    body = "".join(f"<br>{html.escape(k)}: {_text(v)}" for k, v in lines)
    base = ' <span class="base">baseline</span>' if model["baseline"] else ""
    label = html.escape(model["label"])
    return f'<div class="card" id="card-{model["id"]}"><b>{label}</b>{base}{body}</div>'


def verdict_cell(verdict: dict[str, Any] | None) -> str:
    if not verdict:
        return "<td>-</td>"
    passed = verdict.get("passed")
    mark = {True: '<span class="pass">PASS</span>', False: '<span class="fail">FAIL</span>'}.get(
        passed, "?"
    )
    counts = verdict.get("counts")
    extra = f"<br>counts: {_text(json.dumps(counts, sort_keys=True))}" if counts else ""
    prof = f"<br>{_text(verdict['profiler'])}" if verdict.get("profiler") else ""
    return f"<td>{mark} {_text(verdict.get('summary'))}{extra}{prof}</td>"


CASE_HEADER = "size B,H,S,D dtype causal backend pass"


def case_cells(row: dict[str, Any]) -> str:
    return (
        cells(row, "size")
        + f"<td>{dims(row)}</td>"
        + cells(row, "dtype")
        + f"<td>{'yes' if row.get('causal') else 'no'}</td>"
        + cells(row, "backend", "pass")
    )


def memory_bound(row: dict[str, Any]) -> bool:
    return row.get("bound") == "memory"


def bench_bar(model: dict[str, Any], row: dict[str, Any], shade: int) -> svg.Bar:
    flags = tuple(
        f
        for f, on in (("noisy", row.get("noisy")), ("launch-bound", row.get("launch_bound")))
        if on
    )
    if memory_bound(row):
        value = row.get("gbps")
        rate = f"{row.get('gbps')} GB/s, {row.get('pct_roof')}% of the memory roof"
    else:
        value = row.get("tflops")
        rate = f"{row.get('tflops')} TFLOP/s, {row.get('pct_peak')}% of peak"
    return svg.Bar(
        value,
        row["backend"],
        shade,
        f"{model['id']} {row['size']} {row['backend']}: {row['median_ms']} ms, {rate}"
        + "".join(f" [{f}]" for f in flags),
        flags,
    )


def bench_charts(
    members: list[dict[str, Any]],
    index: list[dict[tuple, dict[str, Any]]],
    first: dict[tuple, dict[str, Any]],
    memory: bool,
    chart_prefix: str,
) -> list[str]:
    """A chart per pass / dtype / causal (x: size; a bar per backend per set) of the
    compute-bound rows in TFLOP/s, or (memory) of the memory-bound rows in GB/s with the
    first set's memory roof as a dashed line."""
    cases = [k for k, r in first.items() if memory_bound(r) == memory]
    backends = list(dict.fromkeys(first[k]["backend"] for k in cases))
    panels = sorted(
        {(first[k]["pass"], first[k]["dtype"], bool(first[k]["causal"])) for k in cases},
        key=lambda p: (list(PASS_NAMES).index(p[0]) if p[0] in PASS_NAMES else 9, p[1], p[2]),
    )
    sizes = list(dict.fromkeys(first[k]["size"] for k in cases))
    roof = next((m.get("memory_roof_gbps") for m in members if m.get("memory_roof_gbps")), None)
    figs = []
    for pass_name, dtype, causal in panels:
        groups = []
        for size in sizes:
            key_of = {
                first[k]["backend"]: k
                for k in cases
                if (first[k]["size"], first[k]["pass"], first[k]["dtype"])
                == (size, pass_name, dtype)
                and bool(first[k]["causal"]) == causal
            }
            bars = [
                bench_bar(model, rows[key_of[backend]], shade)
                for backend in backends
                if backend in key_of
                for shade, (model, rows) in enumerate(zip(members, index, strict=True))
                if key_of[backend] in rows
            ]
            if bars:
                groups.append((size, bars))
        title = (
            f"{PASS_NAMES.get(pass_name, pass_name)} · {dtype} · "
            f"{'causal' if causal else 'non-causal'}"
            + (f" · memory-bound, roof {roof:g} GB/s" if memory and roof else "")
        )
        chart = svg.grouped_bars(
            groups,
            "GB/s" if memory else "TFLOP/s",
            shades=len(members),
            reference=roof if memory else None,
            chart_id=f"{chart_prefix}-{pass_name}-{dtype}-{int(causal)}",
        )
        figs.append(f"<figure><h4>{html.escape(title)}</h4>{chart}</figure>")
    return figs


def bench_section(models: list[dict[str, Any]]) -> str:
    """Per bench configuration: charts of the compute-bound rows (TFLOP/s) and, where there are
    memory-bound rows, of those in GB/s against the memory roof; one table of every case with
    each set's median, TFLOP/s, GB/s and % of the binding roof."""
    by_config: dict[str, list[dict[str, Any]]] = {}
    for model in models:
        if model["bench"]:
            by_config.setdefault(model["config_label"], []).append(model)
    parts = []
    for ci, (label, members) in enumerate(by_config.items()):
        index = [{change.case_key(r): r for r in ok_rows(m)} for m in members]
        cases = list(dict.fromkeys(k for rows in index for k in rows))
        first = {k: next(rows[k] for rows in index if k in rows) for k in cases}
        backends = list(dict.fromkeys(first[k]["backend"] for k in cases))
        figs = bench_charts(members, index, first, False, f"bench-{ci}")
        memory_figs = bench_charts(members, index, first, True, f"bench-mem-{ci}")
        head = header(
            CASE_HEADER,
            "bound",
            *(f"{m['id']} {w}" for m in members for w in ("ms", "TF/s", "GB/s", "% roof")),
        )
        body = []
        for key in cases:
            values = []
            for rows in index:
                row = rows.get(key)
                if row is None:
                    values.append("<td>-</td>" * 4)
                    continue
                mark = ("*" if row.get("noisy") else "") + ("†" if row.get("launch_bound") else "")
                pct = row.get("pct_roof") if row.get("bound") else row.get("pct_peak")
                values.append(
                    f"<td>{_num(row['median_ms'])}{mark}</td><td>{_num(row.get('tflops'))}</td>"
                    f"<td>{_num(row.get('gbps'))}</td><td>{_num(pct)}</td>"
                )
            bound = first[key].get("bound")
            body.append(
                f"<tr>{case_cells(first[key])}<td>{_text(bound)}</td>{''.join(values)}</tr>"
            )
        sets_line = ", ".join(m["id"] for m in members)
        memory = (
            f"<h4>Memory-bound rows (FLOP/byte under the ridge point): GB/s against the memory "
            f'roof (dashed)</h4><div class="figs">{"".join(memory_figs)}</div>'
            if memory_figs
            else ""
        )
        parts.append(
            f"<h3>{html.escape(label)}</h3><p>Result sets {sets_line}: within a backend in this "
            "order, later ones lighter. Red outline (* in the table): noisy row; dashed (†): "
            "launch-bound, the GPU idled most of the timed interval.</p>"
            f'{svg.legend(backends)}<div class="figs">{"".join(figs)}</div>{memory}'
            f"<details><summary>numbers: median ms, TFLOP/s, GB/s, % of the binding roof "
            f'({len(cases)} cases)</summary><table class="bench-table" data-sets="{sets_line}">'
            f"{head}</tr>{''.join(body)}</table></details>"
        )
    return "".join(parts) or "<p>No bench result.</p>"


def speedup_charts(comps: list[dict[str, Any]]) -> list[str]:
    """A chart per pass: x backend, one bar per result set, the geometric-mean speedup of its
    rows that are not launch-bound."""
    figs = []
    for pass_name in PASS_NAMES:
        mine = [[r for r in c["rows"] if r["pass"] == pass_name] for c in comps]
        groups = []
        for backend in dict.fromkeys(r["backend"] for rows in mine for r in rows):
            bars = []
            for shade, (comp, rows) in enumerate(zip(comps, mine, strict=True)):
                kept = [
                    r["speedup"]
                    for r in rows
                    if r["backend"] == backend and r["verdict"] != "launch-bound"
                ]
                if kept:
                    geo = round(geometric_mean(kept), 4)
                    title = f"{comp['set']} {backend} {pass_name}: {geo}x"
                    bars.append(svg.Bar(geo, backend, shade, title))
            if bars:
                groups.append((backend, bars))
        if groups:
            chart = svg.grouped_bars(
                groups,
                "speedup (x)",
                shades=len(comps),
                reference=1.0,
                chart_id=f"speedup-{pass_name}",
            )
            figs.append(f"<figure><h4>{PASS_NAMES[pass_name]}</h4>{chart}</figure>")
    return figs


def comparison_section(data: dict[str, Any]) -> str:
    """Against the baseline: per result set the counts and geometric-mean speedups (a chart per
    pass), and one table of every case's speedup and verdict."""
    comps = data["comparisons"]
    summary = "".join(
        f"<tr><td>{c['set']}</td><td>{c['baseline']}</td>"
        + "".join(f"<td>{c['counts'].get(v, 0)}</td>" for v in change.VERDICTS)
        + f"<td>{_num(c['geomean_speedup'])}</td></tr>"
        for c in comps
    )
    figs = speedup_charts(comps)
    rows_by_case: dict[tuple, dict[str, dict[str, Any]]] = {}
    first: dict[tuple, dict[str, Any]] = {}
    for comp in comps:
        for r in comp["rows"]:
            key = change.case_key(r)
            first.setdefault(key, r)
            rows_by_case.setdefault(key, {})[comp["set"]] = r
    body = "".join(
        f"<tr>{case_cells(first[key])}<td>{_num(first[key]['a_ms'])}</td>"
        + "".join(
            (
                f'<td class="{found[c["set"]]["verdict"]}">{_num(found[c["set"]]["speedup"])} '
                f"{found[c['set']]['verdict']}</td>"
            )
            if c["set"] in found
            else "<td>-</td>"
            for c in comps
        )
        + "</tr>"
        for key, found in rows_by_case.items()
    )
    backends = list(dict.fromkeys(r["backend"] for c in comps for r in c["rows"]))
    return (
        "<p>Speedup = baseline median / median (&gt;1: faster than the baseline). Verdicts by the "
        "change rule above; launch-bound rows are left out of the means.</p>"
        '<table class="comparisons">'
        + header("set baseline", *change.VERDICTS, "geo. mean speedup")
        + f"</tr>{summary}</table>{svg.legend(backends)}"
        f'<div class="figs">{"".join(figs)}</div><details><summary>every case ({len(first)})'
        '</summary><table class="speedup-table">'
        + header(CASE_HEADER, "baseline ms", *(c["set"] for c in comps))
        + f"</tr>{body}</table></details>"
    )


def time_section(data: dict[str, Any]) -> str:
    parts = []
    for ti, group in enumerate(data["over_time"]):
        labels = [f"{s} {str(d)[5:16]}" for s, d in zip(group["sets"], group["dates"], strict=True)]
        chart = svg.line_chart(
            labels, group["series"], "TFLOP/s (geo. mean)", chart_id=f"time-{ti}"
        )
        parts.append(
            f"<h3>{html.escape(group['machine'])}</h3>"
            f"<p>{html.escape(group['config_label'] or '')}: "
            f"geometric mean TFLOP/s over the {group['cases']} cases every run has, per backend."
            f"</p>{svg.legend(list(group['series']))}<figure>{chart}</figure>"
        )
    return "".join(parts) or "<p>No machine has two runs of one bench configuration.</p>"


def kernel_check_section(checks: list[dict[str, Any]]) -> str:
    """AOTriton kernel checks (nox -s kernel_check, or build_aotriton's): per family, the
    generator's jobs and the sample compiled or fetched from the kernel store."""
    parts = []
    head = header("family jobs sampled compiled", "from store", "seconds")
    for check in checks:
        rows = "".join(
            f"<tr><td>{html.escape(name)}</td>"
            + cells(f, "jobs", "sampled", "compiled", "from_store", "seconds", numbers=True)
            + "</tr>"
            for name, f in sorted(check["families"].items())
            if isinstance(f, dict)
        )
        parts.append(
            f"<h3>{html.escape(str(check['arch']))}: AOTriton "
            f"{html.escape(str(check.get('aotriton_commit', '?'))[:12])}, triton "
            f"{html.escape(str(check.get('triton', '?')))}</h3>"
            f"<p>{_num(check.get('sampled'))} of {_num(check.get('jobs'))} jobs in "
            f"{_num(check.get('wall_s'))} s, {html.escape(str(check.get('time', '')))}; store "
            f"{html.escape(str(check.get('store', 'none')))}</p>"
            f'<table class="kernels">{head}{rows}</table>'
        )
    return "".join(parts)


def verdicts_table(models: list[dict[str, Any]]) -> str:
    kinds = ("backend_check", "validate", "upstream", "crosscheck")
    rows = "".join(
        f"<tr><td>{m['id']}</td>{''.join(verdict_cell(m['verdicts'].get(k)) for k in kinds)}</tr>"
        for m in models
    )
    return (
        '<table class="verdicts"><tr><th>set</th><th>backend_check</th><th>validate</th>'
        f"<th>validate --upstream</th><th>crosscheck</th></tr>{rows}</table>"
    )


def render(data: dict[str, Any]) -> str:
    models = data["sets"]
    not_shown, not_compared = (
        "".join(
            f"<li><code>{html.escape(n['input'])}</code>: "
            f'<span class="why">{html.escape(n["why"])}</span></li>'
            for n in data.get(key, [])
        )
        for key in ("not_shown", "not_compared")
    )
    sections = [
        ("identity", "Result sets", f'<div class="cards">{"".join(card(m) for m in models)}</div>'),
        ("verdicts", "Verdicts", verdicts_table(models)),
        ("bench", "Bench", bench_section(models)),
    ]
    if data["comparisons"] or not_compared:
        shown = comparison_section(data) if data["comparisons"] else ""
        if not_compared:
            shown += f"<p>Shown above, not compared:</p><ul>{not_compared}</ul>"
        sections.append(("baseline", "Against the baseline", shown))
    sections.append(("over-time", "One machine over time", time_section(data)))
    if data.get("kernel_checks"):
        sections.append(
            ("kernels", "AOTriton kernel checks", kernel_check_section(data["kernel_checks"]))
        )
    sections.append(
        (
            "not-shown",
            "Not shown, and why",
            f"<ul>{not_shown}</ul>" if not_shown else "<p>Every input is shown.</p>",
        )
    )
    nav = " · ".join(f'<a href="#{sid}">{html.escape(title)}</a>' for sid, title, _b in sections)
    body = "".join(
        f'<section id="{sid}"><h2>{html.escape(title)}</h2>{content}</section>'
        for sid, title, content in sections
    )
    rule = data["change_rule"]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>SDPA results: {len(models)} result sets</title><style>{STYLE}</style></head><body>"
        f"<h1>SDPA results: {len(models)} result sets</h1>"
        f"<p>Generated {data['generated']} by <code>nox -s report</code>. FLOPs: "
        f"{html.escape(data['flop_convention'])}. Change rule: {html.escape(rule['text'])} "
        f"(threshold {rule['threshold_pct']:g}%; floors: {html.escape(rule['floors'])}).</p>"
        f"<nav>{nav}</nav>{body}</body></html>\n"
    )


# --- the session --------------------------------------------------------------------------------


def report(opts: Any, rest: Sequence[str]) -> int:
    """nox -s report: read the inputs, write results.html and results.json, say what was left
    out. UserError when nothing could be shown."""
    started = time.perf_counter()
    if "--help" in rest or "-h" in rest:  # after the options' own help (noxfile._call)
        print(__doc__)
        raise SystemExit(0)
    flags = [a for a in rest if a.startswith("-")]
    if flags:
        raise UserError(f"report: unknown option {flags[0]} (see: nox -s report -- --help)")
    if not rest and not opts.index:
        raise UserError("report: give INPUT (a folder or a probe's JSON file) or --index URL")
    docs, rejected = inputs.read_paths(list(rest))
    if opts.index:
        found, left = inputs.read_index(opts.index, opts.arch)
        docs += found
        rejected += left
    baseline_docs: list[inputs.Doc] = []
    if opts.baseline:
        baseline_docs, left = inputs.read_paths([opts.baseline])
        if (left and not Path(opts.baseline).is_dir()) or not any(
            d.kind == "bench" for d in baseline_docs
        ):
            why = left[0].why if left else "holds no bench result"
            raise UserError(f"report: --baseline {opts.baseline}: {why}")
        rejected += [inputs.Rejected(r.source, f"(baseline) {r.why}") for r in left]
        known = {d.source for d in baseline_docs}
        docs = [d for d in docs if d.source not in known]
    data = build(docs, rejected, baseline_docs)
    for entry in data["not_shown"]:
        print(f"report: not shown: {entry['input']}: {entry['why']}", file=sys.stderr)
    for entry in data["not_compared"]:
        print(f"report: shown, not compared: {entry['input']}: {entry['why']}", file=sys.stderr)
    if not data["sets"]:
        raise UserError(
            f"report: nothing could be shown ({len(data['not_shown'])} input(s) left out, "
            "listed above)"
        )
    out = Path(opts.out or "results-page")
    out.mkdir(parents=True, exist_ok=True)
    page = out / "results.html"
    page.write_text(render(data), encoding="utf-8")
    (out / "results.json").write_text(
        json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8"
    )
    print(
        f"report: wrote {page} ({page.stat().st_size / 1024:.0f} KiB) and {out / 'results.json'}: "
        f"{len(data['sets'])} result set(s), {len(data['not_shown'])} input(s) not shown, "
        f"{time.perf_counter() - started:.2f} s"
    )
    return 0
