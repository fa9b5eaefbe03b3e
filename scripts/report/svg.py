"""Inline SVG charts for the results page, written as text: grouped bars and lines.

No plotting library: the page must open from file:// with no network and stay small, and an
SVG drawn here is a few hundred bytes per bar, prints sharp at any size, and carries each
value in a <title> (shown on hover, offline) and in data-* attributes (read by the page's
browser test). matplotlib, which draws bench.png, would embed fonts and paths several times
larger per chart and give no hover values.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

PALETTE = {
    "flash": "#1f77b4",
    "ck": "#9467bd",
    "efficient": "#2ca02c",
    "cudnn": "#ff7f0e",
    "math": "#7f7f7f",
}
OTHER = ("#8c564b", "#e377c2", "#17becf", "#bcbd22")
FONT = 'font-family="sans-serif" font-size="10"'


def color(series: str, index: int = 0) -> str:
    return PALETTE.get(series, OTHER[index % len(OTHER)])


@dataclass
class Bar:
    value: float | None  # None: nothing to draw (not run, above peak)
    series: str  # colour (the backend)
    shade: int = 0  # which result set: lighter for later sets
    title: str = ""
    flags: tuple[str, ...] = ()  # noisy, launch-bound, faster, slower
    data: dict[str, str] = field(default_factory=dict)


def nice_max(value: float) -> float:
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exp:
            return step * exp
    return 10 * exp


def _fmt(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _attrs(data: dict[str, str]) -> str:
    return "".join(f' data-{k}="{html.escape(str(v))}"' for k, v in data.items())


def grouped_bars(
    groups: list[tuple[str, list[Bar]]],
    y_label: str,
    *,
    shades: int = 1,
    reference: float | None = None,
    chart_id: str = "",
) -> str:
    """One cluster of bars per group (x), bars in the given order; a dashed line at
    `reference` (1.0 on a speedup chart)."""
    per_group = max((len(bars) for _g, bars in groups), default=1) or 1
    bar_w = max(2.0, min(14.0, 520.0 / max(1, per_group * len(groups))))
    group_w = per_group * bar_w + 12
    left, top, plot_h = 46, 8, 150
    width = int(left + group_w * len(groups) + 10)
    slanted = any(len(label) > max(4, group_w / 6) for label, _b in groups)
    height = top + plot_h + (90 if slanted else 34)
    values = [b.value for _g, bars in groups for b in bars if b.value is not None]
    top_value = nice_max(max([*values, reference or 0.0], default=1.0))
    out = [
        f'<svg class="chart" id="{html.escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
    ]
    for tick in range(5):
        value = top_value * tick / 4
        y = top + plot_h - plot_h * tick / 4
        out.append(
            f'<line x1="{left}" x2="{width - 6}" y1="{_fmt(y)}" y2="{_fmt(y)}" stroke="#ddd"/>'
            f'<text x="{left - 3}" y="{_fmt(y + 3)}" text-anchor="end" {FONT}>{value:g}</text>'
        )
    out.append(
        f'<text transform="translate(10,{top + plot_h / 2}) rotate(-90)" text-anchor="middle" '
        f"{FONT}>{html.escape(y_label)}</text>"
    )
    for gi, (label, bars) in enumerate(groups):
        x0 = left + gi * group_w + 6
        for bi, bar in enumerate(bars):
            x = x0 + bi * bar_w
            if bar.value is None:
                continue
            h = plot_h * min(bar.value, top_value) / top_value
            y = top + plot_h - h
            opacity = 1.0 - 0.6 * (bar.shade / max(1, shades - 1)) if shades > 1 else 1.0
            fade = f' fill-opacity="{opacity:.2f}"' if opacity < 1 else ""
            stroke = ""
            if "noisy" in bar.flags or "slower" in bar.flags:
                stroke = ' stroke="#d62728" stroke-width="1.5"'
            elif "launch-bound" in bar.flags:
                stroke = ' stroke="#000" stroke-width="1" stroke-dasharray="2,1"'
            elif "faster" in bar.flags:
                stroke = ' stroke="#2ca02c" stroke-width="1.5"'
            out.append(
                f'<rect x="{_fmt(x)}" y="{_fmt(y)}" width="{_fmt(bar_w - 1)}" '
                f'height="{_fmt(max(h, 0.5))}" fill="{color(bar.series)}"{fade}{stroke}'
                f"{_attrs(bar.data)}>"
                f"<title>{html.escape(bar.title)}</title></rect>"
            )
        x_mid = _fmt(x0 + per_group * bar_w / 2)
        y_label_at = top + plot_h + 14
        turn = f' transform="rotate(-35 {x_mid} {y_label_at})"' if slanted else ""
        anchor = "end" if slanted else "middle"
        out.append(
            f'<text x="{x_mid}" y="{y_label_at}" text-anchor="{anchor}"{turn} {FONT}>'
            f"{html.escape(label)}</text>"
        )
    if reference is not None:
        y = top + plot_h - plot_h * reference / top_value
        out.append(
            f'<line x1="{left}" x2="{width - 6}" y1="{_fmt(y)}" y2="{_fmt(y)}" stroke="#000" '
            'stroke-dasharray="4,3"/>'
        )
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="#666"/>')
    out.append("</svg>")
    return "".join(out)


def line_chart(
    x_labels: list[str], series: dict[str, list[float | None]], y_label: str, chart_id: str = ""
) -> str:
    """One line per series over the x labels (result sets in time order)."""
    left, top, plot_h, step = 46, 8, 150, 90
    width = int(left + step * max(1, len(x_labels) - 1) + 60)
    height = top + plot_h + 34
    values = [v for vs in series.values() for v in vs if v is not None]
    top_value = nice_max(max(values, default=1.0))
    out = [
        f'<svg class="chart" id="{html.escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
    ]
    for tick in range(5):
        y = top + plot_h - plot_h * tick / 4
        out.append(
            f'<line x1="{left}" x2="{width - 6}" y1="{_fmt(y)}" y2="{_fmt(y)}" stroke="#ddd"/>'
            f'<text x="{left - 3}" y="{_fmt(y + 3)}" text-anchor="end" {FONT}>'
            f"{top_value * tick / 4:g}</text>"
        )
    out.append(
        f'<text transform="translate(10,{top + plot_h / 2}) rotate(-90)" text-anchor="middle" '
        f"{FONT}>{html.escape(y_label)}</text>"
    )
    for i, label in enumerate(x_labels):
        out.append(
            f'<text x="{left + 20 + i * step}" y="{top + plot_h + 14}" text-anchor="middle" '
            f"{FONT}>{html.escape(label)}</text>"
        )
    for index, (name, ys) in enumerate(series.items()):
        points = [
            (left + 20 + i * step, top + plot_h - plot_h * y / top_value)
            for i, y in enumerate(ys)
            if y is not None
        ]
        if not points:
            continue
        path = " ".join(f"{_fmt(x)},{_fmt(y)}" for x, y in points)
        out.append(
            f'<polyline fill="none" stroke="{color(name, index)}" stroke-width="2" '
            f'points="{path}"/>'
        )
        for (x, y), value in zip(points, [v for v in ys if v is not None], strict=True):
            out.append(
                f'<circle class="point" cx="{_fmt(x)}" cy="{_fmt(y)}" r="3" '
                f'fill="{color(name, index)}" data-series="{html.escape(name)}" '
                f'data-value="{value:g}"><title>{html.escape(name)}: {value:g}</title></circle>'
            )
    out.append("</svg>")
    return "".join(out)


def legend(series: list[str]) -> str:
    items = "".join(
        f'<span class="key"><i style="background:{color(s, i)}"></i>{html.escape(s)}</span>'
        for i, s in enumerate(series)
    )
    return f'<div class="legend">{items}</div>'
