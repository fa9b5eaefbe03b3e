"""Inline SVG bar charts for the results page, written as text (no plotting library:
docs/attention-tools.md says why); every value is in a <title>, shown on hover."""

from __future__ import annotations

import html
import math
from typing import NamedTuple

PALETTE = {"flash": "#1f77b4", "ck": "#9467bd", "efficient": "#2ca02c", "cudnn": "#ff7f0e"}
PALETTE["math"] = "#7f7f7f"
OTHER = ("#8c564b", "#e377c2", "#17becf", "#bcbd22")
FONT = 'font-family="sans-serif" font-size="10"'
LEFT, TOP, PLOT_H = 46, 8, 150
STROKES = {  # a bar's outline: the first of its flags found here
    "noisy": ' stroke="#d62728" stroke-width="1.5"',
    "launch-bound": ' stroke="#000" stroke-width="1" stroke-dasharray="2,1"',
}


class Bar(NamedTuple):
    value: float | None  # None: nothing to draw
    series: str  # colour (the backend)
    shade: int = 0  # which result set: lighter for later sets
    title: str = ""
    flags: tuple[str, ...] = ()  # noisy, launch-bound


def color(series: str, index: int = 0) -> str:
    return PALETTE.get(series, OTHER[index % len(OTHER)])


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
                f'width="{_fmt(bar_w - 1)}" height="{_fmt(max(h, 0.5))}" fill="{color(bar.series)}"'
                + (f' fill-opacity="{fade:.2f}"' if fade < 1 else "")
                + next((STROKES[f] for f in STROKES if f in bar.flags), "")
                + f"><title>{html.escape(bar.title)}</title></rect>"
            )
        x, y = _fmt(x0 + per_group * bar_w / 2), TOP + PLOT_H + 14
        turn = f' text-anchor="end" transform="rotate(-35 {x} {y})"' if slanted else None
        out.append(_text(x, y, label, turn or ' text-anchor="middle"'))
    if ref is not None:
        dashed, y = ' stroke="#000" stroke-dasharray="4,3"', _fmt(TOP + PLOT_H * (1 - ref / top))
        out.append(hline(y, dashed))
    out.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + PLOT_H}" stroke="#666"/>')
    return "".join([*out, "</svg></figure>"])


def legend(series: list[str]) -> str:
    key = '<span class="key"><i style="background:{}"></i>{}</span>'
    items = "".join(key.format(color(s, i), html.escape(s)) for i, s in enumerate(series))
    return f'<div class="legend">{items}</div>'
