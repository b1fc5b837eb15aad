"""Line charts as inline SVG: what the HTML report draws its plots with.

Place in the map (docs/architecture.md, "Analysis"): a report must open offline as one file, so plots are
SVG written here rather than a plotting library's JavaScript. Each data series is one
``<path class="series">`` with ``data-series`` (its label) and ``data-points`` (its number of
points), so a test (or a person with the browser's inspector) can tell that a plot has data.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
WIDTH, HEIGHT = 640, 320
#: styles of a page of tables and these plots (the reports' HTML pages share them)
PAGE_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
figure.plot { margin: 0; border: 1px solid #eee; padding: 6px; }
figcaption { font-weight: 600; margin-bottom: 4px; }
.tick { font-size: 10px; fill: #555; } .axis { font-size: 11px; fill: #333; }
.legend { font-size: 12px; } .key { margin-right: 12px; white-space: nowrap; }
.key svg { vertical-align: middle; margin-right: 4px; }
.note { color: #666; } .warn { color: #a40; }
"""
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 44


@dataclass(frozen=True)
class Series:
    label: str
    x: Sequence[float]
    y: Sequence[float]
    dashed: bool = False
    markers: bool = False
    color: int | None = None  # palette index; default: the series' position


def cdf(values: np.ndarray | Sequence[float], max_points: int = 400) -> tuple[list[float], list[float]]:
    """Points of the empirical CDF of ``values`` (x sorted, y the fraction <= x), thinned to at
    most ``max_points`` evenly spaced ranks (the first and last always kept)."""
    arr = np.sort(np.asarray(values, dtype=np.float64))
    if arr.size == 0:
        return [], []
    ranks = np.unique(np.linspace(0, arr.size - 1, min(arr.size, max_points)).round().astype(np.int64))
    return arr[ranks].tolist(), ((ranks + 1) / arr.size).tolist()


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round numbers spanning [lo, hi]."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(s * magnitude for s in (1, 2, 2.5, 5, 10) if s * magnitude >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    value = start
    while value <= hi + step * 1e-9:
        if value >= lo - step * 1e-9:
            ticks.append(round(value, 10))
        value += step
    return ticks


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 10_000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def line_chart(
    plot_id: str,
    title: str,
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    y_min: float | None = None,
    y_max: float | None = None,
) -> str:
    """One ``<figure class="plot">`` with the series drawn over shared axes and a legend."""
    xs = [float(v) for s in series for v in s.x if math.isfinite(v)]
    ys = [float(v) for s in series for v in s.y if math.isfinite(v)]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    y_lo = y_min if y_min is not None else (min(min(ys), 0.0) if ys else 0.0)
    y_hi = y_max if y_max is not None else (max(ys) if ys else 1.0)
    x_ticks, y_ticks = nice_ticks(x_lo, x_hi), nice_ticks(y_lo, y_hi)
    if x_ticks:
        x_lo, x_hi = min(x_lo, x_ticks[0]), max(x_hi, x_ticks[-1])
    if y_ticks:
        y_lo, y_hi = min(y_lo, y_ticks[0]), max(y_hi, y_ticks[-1])
    if x_hi <= x_lo:
        x_hi = x_lo + 1
    if y_hi <= y_lo:
        y_hi = y_lo + 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w

    def py(y: float) -> float:
        return TOP + plot_h - (y - y_lo) / (y_hi - y_lo) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" role="img" aria-label="{html.escape(title)}">',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fff" stroke="#ccc"/>',
    ]
    for t in x_ticks:
        x = px(t)
        parts.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + plot_h}" stroke="#eee"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{TOP + plot_h + 16}" text-anchor="middle" class="tick">{_fmt(t)}</text>'
        )
    for t in y_ticks:
        y = py(t)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{_fmt(t)}</text>')
    parts.append(
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 6}" text-anchor="middle" class="axis">{html.escape(x_label)}</text>'
    )
    parts.append(
        f'<text x="14" y="{TOP + plot_h / 2}" text-anchor="middle" class="axis" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2})">{html.escape(y_label)}</text>'
    )
    legend = []
    for k, s in enumerate(series):
        color = PALETTE[(s.color if s.color is not None else k) % len(PALETTE)]
        points = [
            (px(float(x)), py(float(y)))
            for x, y in zip(s.x, s.y, strict=False)
            if math.isfinite(x) and math.isfinite(y)
        ]
        d = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(points))
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        parts.append(
            f'<path class="series" data-series="{html.escape(s.label)}" data-points="{len(points)}" '
            f'd="{d}" fill="none" stroke="{color}" stroke-width="2"{dash}/>'
        )
        if s.markers:
            parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>' for x, y in points]
        legend.append(
            f'<span class="key"><svg width="22" height="10"><line x1="0" y1="5" x2="22" y2="5" stroke="{color}" '
            f'stroke-width="2"{dash}/></svg>{html.escape(s.label)}</span>'
        )
    parts.append("</svg>")
    return (
        f'<figure class="plot" id="{html.escape(plot_id)}"><figcaption>{html.escape(title)}</figcaption>'
        + "".join(parts)
        + f'<div class="legend">{"".join(legend)}</div></figure>'
    )
