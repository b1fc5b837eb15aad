"""``swarm realism --html``: the comparison as one self-contained page.

Place in the map (docs/architecture.md, "Shape"): the realism table (``realism.RealismReport``)
and, per feature, the two empirical CDFs drawn as inline SVG (``analysis.svgplot``); no script,
no external resource. ``realism_section`` is the part another page can embed.
"""

from __future__ import annotations

import html

from swarm.analysis.svgplot import PAGE_CSS, Series, cdf, line_chart
from swarm.shape.realism import RealismReport

_CSS = PAGE_CSS + ".match { color: #060; } .near { color: #a60; } .far { color: #a00; font-weight: 600; }\n"


def _v(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "share":
        return f"{value:.2f}"
    return f"{value:,.0f}" if unit != "s" and abs(value) >= 10 else f"{value:.3g}"


def realism_section(
    report: RealismReport, candidate: dict[str, list[float]], reference: dict[str, list[float]]
) -> str:
    """The table and the CDF plots, as an HTML fragment."""
    head = "".join(
        f"<th>{h}</th>"
        for h in ("distribution", "n", "p10", "p50", "p90", "p99", "mean", "KS D", "5 % critical", "verdict")
    )
    body = []
    for r in report.rows:
        for side, stats in (("candidate", r.candidate), ("reference", r.reference)):
            first = side == "candidate"
            cells = [
                f"<td rowspan=2>{html.escape(r.label)} ({r.unit})</td>" if first else "",
                f"<td>{side}: {stats.count}</td>",
                *(f"<td>{_v(stats.quantiles[k], r.unit)}</td>" for k in ("p10", "p50", "p90", "p99")),
                f"<td>{_v(stats.mean, r.unit)}</td>",
            ]
            if first:
                d = "-" if r.ks is None else f"{r.ks:.3f}"
                crit = "-" if r.critical is None else f"{r.critical:.3f}"
                cells += [f"<td rowspan=2>{d}</td>", f"<td rowspan=2>{crit}</td>"]
                cells.append(f'<td rowspan=2 class="{html.escape(r.verdict)}">{html.escape(r.verdict)}</td>')
            body.append("<tr>" + "".join(cells) + "</tr>")
    plots = []
    for r in report.rows:
        series = [
            Series("candidate", *cdf(candidate[r.feature])),
            Series("reference", *cdf(reference[r.feature]), dashed=True),
        ]
        series = [s for s in series if len(s.x)]
        if series:
            plots.append(
                line_chart(
                    f"realism-{r.feature}",
                    f"{r.label}, CDF",
                    series,
                    x_label=r.unit,
                    y_label="fraction",
                    y_min=0,
                    y_max=1,
                )
            )
    far = f" (far: {', '.join(report.far)})" if report.far else ""
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in report.notes)
    return (
        f'<section id="realism"><h2>Realism: {html.escape(report.verdict)}{html.escape(far)}</h2>'
        f"<p>candidate: <code>{html.escape(report.candidate)}</code>; reference: "
        f"<code>{html.escape(report.reference)}</code></p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f"<ul>{notes}</ul>"
        f'<div class="plots">{"".join(plots)}</div></section>'
    )


def render_realism_html(
    report: RealismReport, candidate: dict[str, list[float]], reference: dict[str, list[float]]
) -> str:
    """The whole page."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>swarm realism</title>'
        f"<style>{_CSS}</style></head><body><h1>swarm realism</h1>"
        f"{realism_section(report, candidate, reference)}</body></html>"
    )
