"""Inline SVG charts for the results page, written as text: grouped bars and lines. No plotting
library: the page stays small and opens from file://, and every value is in a <title> (hover)."""

from __future__ import annotations

import html
import math
from typing import NamedTuple

PALETTE = {"flash": "#1f77b4", "ck": "#9467bd", "efficient": "#2ca02c", "cudnn": "#ff7f0e"}
PALETTE["math"] = "#7f7f7f"
OTHER = ("#8c564b", "#e377c2", "#17becf", "#bcbd22")
FONT = 'font-family="sans-serif" font-size="10"'
LEFT, TOP, PLOT_H = 46, 8, 150
_DASHED = 'stroke="#000" stroke-dasharray="4,3"'
STROKES = {  # outline per flag, first match wins
    "noisy": ' stroke="#d62728" stroke-width="1.5"',
    "slower": ' stroke="#d62728" stroke-width="1.5"',
    "launch-bound": ' stroke="#000" stroke-width="1" stroke-dasharray="2,1"',
    "faster": ' stroke="#2ca02c" stroke-width="1.5"',
}


class Bar(NamedTuple):
    value: float | None  # None: nothing to draw
    series: str  # colour (the backend)
    shade: int = 0  # which result set: lighter for later sets
    title: str = ""
    flags: tuple[str, ...] = ()  # noisy, launch-bound, faster, slower


def color(series: str, index: int = 0) -> str:
    return PALETTE.get(series, OTHER[index % len(OTHER)])


def nice_max(value: float) -> float:
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    return next(s * exp for s in (1, 2, 2.5, 5, 10) if value <= s * exp)


def _fmt(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _text(x: float | str, y: float | str, label: str, extra: str = "") -> str:
    anchor = "" if "text-anchor" in extra else ' text-anchor="middle"'
    return f'<text x="{x}" y="{y}"{anchor}{extra} {FONT}>{html.escape(label)}</text>'


def _hline(width: int, y: float, style: str) -> str:
    return f'<line x1="{LEFT}" x2="{width - 6}" y1="{_fmt(y)}" y2="{_fmt(y)}" {style}/>'


def _frame(width: int, height: int, chart_id: str, top_value: float, y_label: str) -> list[str]:
    """The svg element, the horizontal grid with its values, and the y axis's label."""
    out = [
        f'<svg class="chart" id="{html.escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
    ]
    for tick in range(5):
        y = TOP + PLOT_H - PLOT_H * tick / 4
        out.append(_hline(width, y, 'stroke="#ddd"'))
        out.append(_text(LEFT - 3, _fmt(y + 3), f"{top_value * tick / 4:g}", ' text-anchor="end"'))
    turn = f' transform="translate(10,{TOP + PLOT_H / 2}) rotate(-90)"'
    return [*out, f'<text{turn} text-anchor="middle" {FONT}>{html.escape(y_label)}</text>']


def _rect(bar: Bar, x: float, width: float, top_value: float, shades: int) -> str:
    h = PLOT_H * min(bar.value or 0.0, top_value) / top_value
    opacity = 1.0 - 0.6 * bar.shade / (shades - 1) if shades > 1 else 1.0
    fade = f' fill-opacity="{opacity:.2f}"' if opacity < 1 else ""
    stroke = next((STROKES[f] for f in STROKES if f in bar.flags), "")
    return (
        f'<rect x="{_fmt(x)}" y="{_fmt(TOP + PLOT_H - h)}" width="{_fmt(width)}" '
        f'height="{_fmt(max(h, 0.5))}" fill="{color(bar.series)}"{fade}{stroke}>'
        f"<title>{html.escape(bar.title)}</title></rect>"
    )


def grouped_bars(
    groups: list[tuple[str, list[Bar]]],
    y_label: str,
    shades: int = 1,
    reference: float | None = None,
    chart_id: str = "",
) -> str:
    """One cluster of bars per group (x); a dashed line at `reference` (1.0 for speedups)."""
    per_group = max((len(bars) for _g, bars in groups), default=1) or 1
    bar_w = max(2.0, min(14.0, 520.0 / max(1, per_group * len(groups))))
    group_w = per_group * bar_w + 12
    width = int(LEFT + group_w * len(groups) + 10)
    slanted = any(len(label) > max(4, group_w / 6) for label, _b in groups)
    values = [b.value for _g, bars in groups for b in bars if b.value is not None]
    top_value = nice_max(max([*values, reference or 0.0], default=1.0))
    out = _frame(width, TOP + PLOT_H + (90 if slanted else 34), chart_id, top_value, y_label)
    y_at = TOP + PLOT_H + 14
    for gi, (label, bars) in enumerate(groups):
        x0 = LEFT + gi * group_w + 6
        out += [
            _rect(bar, x0 + bi * bar_w, bar_w - 1, top_value, shades)
            for bi, bar in enumerate(bars)
            if bar.value is not None
        ]
        x_mid = _fmt(x0 + per_group * bar_w / 2)
        turn = f' text-anchor="end" transform="rotate(-35 {x_mid} {y_at})"' if slanted else ""
        out.append(_text(x_mid, y_at, label, turn))
    if reference is not None:
        out.append(_hline(width, TOP + PLOT_H * (1 - reference / top_value), _DASHED))
    out.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + PLOT_H}" stroke="#666"/>')
    return "".join([*out, "</svg>"])


def line_chart(
    x_labels: list[str], series: dict[str, list[float | None]], y_label: str, chart_id: str = ""
) -> str:
    """One line per series over the x labels (result sets in time order)."""
    step = 90
    width = int(LEFT + step * max(1, len(x_labels) - 1) + 60)
    values = [v for vs in series.values() for v in vs if v is not None]
    top_value = nice_max(max(values, default=1.0))
    out = _frame(width, TOP + PLOT_H + 34, chart_id, top_value, y_label)
    out += [_text(LEFT + 20 + i * step, TOP + PLOT_H + 14, x) for i, x in enumerate(x_labels)]
    for index, (name, ys) in enumerate(series.items()):
        points = [
            (_fmt(LEFT + 20 + i * step), _fmt(TOP + PLOT_H - PLOT_H * y / top_value), y)
            for i, y in enumerate(ys)
            if y is not None
        ]
        hue, label = color(name, index), html.escape(name)
        if points:
            path = " ".join(f"{x},{y}" for x, y, _v in points)
            out.append(f'<polyline fill="none" stroke="{hue}" stroke-width="2" points="{path}"/>')
        out += [
            f'<circle class="point" cx="{x}" cy="{y}" r="3" fill="{hue}" data-series="{label}" '
            f'data-value="{value:g}"><title>{label}: {value:g}</title></circle>'
            for x, y, value in points
        ]
    return "".join([*out, "</svg>"])


def legend(series: list[str]) -> str:
    items = "".join(
        f'<span class="key"><i style="background:{color(s, i)}"></i>{html.escape(s)}</span>'
        for i, s in enumerate(series)
    )
    return f'<div class="legend">{items}</div>'
