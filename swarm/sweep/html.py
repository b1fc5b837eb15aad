"""``swarm report SWEEP_DIR --html``: a sweep's report as one self-contained page that opens offline.

Place in the map (docs/architecture.md, "Sweeps"; its analysis, which reads folders on disk
only): draws the dict of ``sweep.report.build_sweep_report`` and computes nothing of its own.
The page holds a header (the sweep, its SLOs, the steady-state rule, the KV budget), one table
of points per target (the headline figures of ``sweep.report.HEADLINE`` plus the compulsory
share of misses and the engine's KV usage and queue over the steady window; invalid points
marked, with their reasons), four plots drawn as inline SVG with ``svgplot.line_chart`` (the two
Pareto fronts, realised / ideal hit against load with the eviction cliff found and predicted,
goodput or output tokens/s against load with capacity at SLO and crossovers), and the verdicts
(capacity and its ratios, cliffs, crossovers, invalid points). A marker on a plot (a cliff, a
capacity, a crossover) is a two-point vertical series with the class ``mark`` beside ``series``,
so a test tells data from marks. A missing value shows as "–"; a plot with nothing to show is
left out and the page says why. No script, no external resource."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from swarm.analysis.svgplot import PALETTE, Series, line_chart
from swarm.sweep.report import HEADLINE

#: what a missing value shows as
MISSING = "–"
#: the line every page with an emulated target carries
EMULATOR_NOTE = "figures from swarm's engine emulator, a model of an engine - not measurements of one"

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 28px; } h3 { font-size: 15px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td.valid { text-align: left; }
tr.invalid td { background: #fde8e8; color: #822; }
tr.invalid td.valid { font-weight: 600; }
dl.header { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; }
dl.header dt { font-weight: 600; } dl.header dd { margin: 0; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
figure.plot { margin: 0; border: 1px solid #eee; padding: 6px; }
figcaption { font-weight: 600; margin-bottom: 4px; }
.tick { font-size: 10px; fill: #555; } .axis { font-size: 11px; fill: #333; }
.legend { font-size: 12px; max-width: 640px; } .key { margin-right: 12px; white-space: nowrap; }
.key svg { vertical-align: middle; margin-right: 4px; }
.note { color: #666; } .warn { color: #a40; }
"""

#: the points table's columns after load and validity: (heading, figure in a point's
#: ``figures``, or ``engine.KEY`` for the engine's gauges, format)
_PERCENT = {"hit_ratio", "ideal_hit_ratio", "hit_vs_ideal", "misses.lost_share", "misses.compulsory_share"}


def _columns(with_goodput: bool, with_cache_use: bool = False) -> list[tuple[str, str, str]]:
    cols: list[tuple[str, str, str]] = []
    for heading, figure in HEADLINE:
        if figure == "goodput.per_s" and not with_goodput:
            continue
        spec = ".1%" if figure in _PERCENT else ".0f" if figure == "tasks.per_hour" else ".1f"
        cols.append((heading, figure, spec))
        if figure == "misses.lost_share":
            cols.append(("compulsory", "misses.compulsory_share", ".1%"))
    cols.append(("KV use", "engine.kv_usage", ".1%"))
    if with_cache_use:  # swarm's emulator: how full its prefix cache is
        cols.append(("cache use", "engine.cache_usage", ".0%"))
    return [*cols, ("queue", "engine.queue", ".1f")]


def _num(value: Any) -> float | None:
    """``value`` as a finite float, or None (None, text, NaN, inf, bools)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def _fmt(value: Any, spec: str = ".1f") -> str:
    """A value as escaped text: "–" for None, ``spec`` for a number, ``str`` otherwise."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if isinstance(value, float) and math.isnan(value):
            return MISSING
        if isinstance(value, float) and math.isinf(value):
            return "inf"
        return html.escape(format(value, spec))
    return html.escape(str(value))


def _load(value: Any) -> str:
    return _fmt(value, "g")


def _e(value: Any) -> str:
    return html.escape(str(value))


def _figure(point: Mapping[str, Any], name: str) -> Any:
    """One figure of a point: ``engine.KEY`` from its engine gauges, otherwise from its
    ``figures`` (the task completion time in seconds, as the terminal table shows it)."""
    if name.startswith("engine."):
        return (point.get("engine") or {}).get(name.removeprefix("engine."))
    value = (point.get("figures") or {}).get(name)
    seconds = _num(value) if name == "tasks.completion_ms.p50" else None
    return value if seconds is None else seconds / 1000


def _targets(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(n): (t or {}) for n, t in (report.get("targets") or {}).items()}


def _points(target: Mapping[str, Any]) -> list[dict[str, Any]]:
    return sorted(target.get("points") or [], key=lambda p: _num(p.get("load")) or 0.0)


def is_emulated(name: str, target: Mapping[str, Any]) -> bool:
    """Whether a target is swarm's emulator: its name starts with ``emulator-``, or its entry
    says so (``emulated`` true, or an engine naming the emulator)."""
    engine = str(target.get("engine") or "")
    return name.startswith("emulator-") or target.get("emulated") is True or "emulator" in engine


# ---------------------------------------------------------------------------- header


def _slos_text(slos: Any) -> str:
    if not slos:
        return "none"
    if isinstance(slos, str):
        return slos
    if isinstance(slos, Mapping):
        return ", ".join(f"{k}:{v}" for k, v in slos.items())
    if isinstance(slos, Iterable):
        return ", ".join(str(s) for s in slos)
    return str(slos)


def _header(report: Mapping[str, Any]) -> str:
    s = report.get("sweep") or {}
    status = _e(s.get("status", MISSING))
    if s.get("status_reason"):
        status += f" ({_e(s['status_reason'])})"
    rows: list[tuple[str, str]] = [
        ("sweep", _e(s.get("sweep_id", MISSING))),
        ("kind", _e(s.get("kind", MISSING))),
        ("knob (load)", _e(s.get("knob", MISSING))),
        ("loads", ", ".join(_load(v) for v in s.get("loads") or []) or MISSING),
        ("status", status),
        ("seed", _fmt(s.get("seed"), "d") if isinstance(s.get("seed"), int) else _fmt(s.get("seed"))),
        ("SLOs", _e(_slos_text(s.get("slos")))),
        ("SLO percentile", _fmt(s.get("slo_percentile"))),
        ("steady-state window", _fmt(s.get("steady_rule"))),
        ("eviction cliff rule", _cliff_rule(s.get("cliff_fraction"))),
    ]
    budget = s.get("kv_budget_tokens")
    if budget is not None:
        rows.append(("KV budget", f"{_fmt(budget, ',')} tokens"))
    if s.get("folder"):
        rows.append(("folder", _e(s["folder"])))
    body = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<dl class="header">{body}</dl>'


def _cliff_rule(fraction: Any) -> str:
    if _num(fraction) is None:
        return MISSING
    return (
        f"realised / ideal hit falls below {_fmt(fraction, 'g')} x its value at the lowest valid load "
        "(interpolated between the two points around it)"
    )


# ---------------------------------------------------------------------------- tables


def _points_table(name: str, target: Mapping[str, Any], with_goodput: bool) -> str:
    with_cache_use = any((p.get("engine") or {}).get("cache_usage") is not None for p in _points(target))
    cols = _columns(with_goodput, with_cache_use)
    head = "<tr><th>load</th><th>valid</th>" + "".join(f"<th>{_e(h)}</th>" for h, _, _ in cols) + "</tr>"
    body: list[str] = []
    for p in _points(target):
        valid = bool(p.get("valid", True))
        reasons = "; ".join(str(r) for r in p.get("reasons") or []) or "no reason given"
        cell = "yes" if valid else f"NO: {html.escape(reasons)}"
        body.append(
            f'<tr class="{"valid" if valid else "invalid"}" data-load="{_load(p.get("load"))}">'
            f'<td>{_load(p.get("load"))}</td><td class="valid">{cell}</td>'
            + "".join(f"<td>{_fmt(_figure(p, fig), spec)}</td>" for _, fig, spec in cols)
            + "</tr>"
        )
    engine = target.get("engine")
    title = _e(name) + (f" ({_e(engine)})" if engine else "")
    if is_emulated(name, target):
        title += " (emulated)"
    stopped = target.get("stopped_by")
    stop = f'<p class="note">Ladder stopped early: {_e(stopped)}.</p>' if stopped else ""
    if not body:
        return f'<h3>{title}</h3><p class="note">No point done for this target.</p>{stop}'
    return (
        f'<h3>{title}</h3><table class="points" data-target="{_e(name)}">{head}{"".join(body)}</table>{stop}'
    )


# ---------------------------------------------------------------------------- plots


def _xy(
    points: Iterable[Mapping[str, Any]], x: Callable[[Mapping[str, Any]], Any], y: str
) -> tuple[list[float], list[float]]:
    """The (x, y) pairs of the valid points that have both values."""
    xs: list[float] = []
    ys: list[float] = []
    for p in points:
        if not p.get("valid", True):
            continue
        vx, vy = _num(x(p)), _num(_figure(p, y))
        if vx is not None and vy is not None:
            xs.append(vx)
            ys.append(vy)
    return xs, ys


def _on(loads: Iterable[Any], value: Any) -> bool:
    v = _num(value)
    return v is not None and any(
        (lv := _num(load)) is not None and math.isclose(lv, v, rel_tol=1e-9, abs_tol=1e-12) for load in loads
    )


def _mark(label: str, x: float, y_lo: float, y_hi: float, color: int) -> Series:
    """A vertical marker at ``x`` across the plot's data range, drawn as a two-point series."""
    return Series(label, [x, x], [y_lo, y_hi], dashed=True, color=color)


def _chart(plot_id: str, title: str, series: Sequence[Series], marks: Sequence[Series], **kwargs: Any) -> str:
    """``line_chart`` of the series and marks; the marks' paths get the class ``mark``."""
    chart = line_chart(plot_id, title, [*series, *marks], **kwargs)
    for m in marks:
        label = html.escape(m.label)
        chart = chart.replace(
            f'<path class="series" data-series="{label}"',
            f'<path class="series mark" data-series="{label}"',
            1,
        )
    return chart


class _Plots:
    """The plots drawn so far, and the ones left out with why."""

    def __init__(self) -> None:
        self.drawn: list[str] = []
        self.missing: list[str] = []

    def add(
        self,
        plot_id: str,
        title: str,
        series: list[Series],
        why_empty: str,
        marks: Sequence[Series] = (),
        notes: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        data = [s for s in series if len(s.x)]
        if not data:
            self.missing.append(f"{title}: {why_empty}")
            return
        caption = "".join(f'<p class="note">{html.escape(n)}</p>' for n in notes)
        self.drawn.append(
            f'<div class="chart">{_chart(plot_id, title, data, marks, **kwargs)}{caption}</div>'
        )


def _front_plot(
    plots: _Plots,
    targets: dict[str, dict[str, Any]],
    *,
    plot_id: str,
    title: str,
    front: str,
    x: Callable[[Mapping[str, Any]], Any],
    y: str,
    x_label: str,
    y_label: str,
) -> None:
    series: list[Series] = []
    notes: list[str] = []
    for k, (name, t) in enumerate(targets.items()):
        pts = _points(t)
        xs, ys = _xy(pts, x, y)
        series.append(Series(f"{name}: valid points by load", xs, ys, dashed=True, markers=True, color=k))
        on_front = (t.get("fronts") or {}).get(front) or []
        fxs, fys = _xy([p for p in pts if _on(on_front, p.get("load"))], x, y)
        ordered = sorted(zip(fxs, fys, strict=True))
        series.append(
            Series(
                f"{name}: Pareto front",
                [a for a, _ in ordered],
                [b for _, b in ordered],
                markers=True,
                color=k,
            )
        )
        notes.append(f"{name}: front at loads {', '.join(f'{v:g}' for v in on_front) or 'none'}")
    plots.add(
        plot_id,
        title,
        series,
        "no valid point has both figures",
        notes=notes,
        x_label=x_label,
        y_label=y_label,
    )


def _hit_plot(plots: _Plots, targets: dict[str, dict[str, Any]], mark_color: int) -> None:
    series: list[Series] = []
    marks: list[Series] = []
    notes: list[str] = []
    for k, (name, t) in enumerate(targets.items()):
        xs, ys = _xy(_points(t), lambda p: p.get("load"), "hit_vs_ideal")
        series.append(Series(f"{name}: realised / ideal hit", xs, ys, markers=True, color=k))
    ys_all = [v for s in series for v in s.y]
    if not ys_all:
        plots.add("hit-vs-load", "Realised / ideal hit vs load", [], "no valid point has a hit ratio")
        return
    top = max(1.0, *ys_all)
    predicted_seen: set[float] = set()
    for k, (name, t) in enumerate(targets.items()):
        cliff = t.get("cliff") or {}
        at = _num(cliff.get("load"))
        if at is not None:
            kv = cliff.get("kv_usage_there")
            marks.append(_mark(f"{name}: cliff at {at:.3g} (KV use there {_fmt(kv, '.1%')})", at, 0, top, k))
            notes.append(
                f"{name}: eviction cliff at {at:.3g} (between {_between(cliff.get('between'))}); "
                f"KV usage there {_fmt(kv, '.1%')}"
            )
        else:
            notes.append(f"{name}: no eviction cliff in the loads swept")
        pred = _num((t.get("predicted_cliff") or {}).get("load"))
        if pred is not None and round(pred, 9) not in predicted_seen:
            predicted_seen.add(round(pred, 9))
            marks.append(
                _mark(f"predicted cliff at {pred:.3g} (working set vs KV budget)", pred, 0, top, mark_color)
            )
    plots.add(
        "hit-vs-load",
        "Realised / ideal hit vs load, eviction cliff found (target's colour) and predicted",
        series,
        "no valid point has a hit ratio",
        marks=marks,
        notes=notes,
        x_label="load",
        y_label="realised hit / ideal hit",
        y_min=0,
        y_max=top,
    )


def _capacity_plot(
    plots: _Plots, report: Mapping[str, Any], targets: dict[str, dict[str, Any]], mark_color: int
) -> None:
    figure = str(report.get("crossover_figure") or "output_tokens_per_s")
    label = "goodput/s (requests meeting the SLO)" if figure == "goodput.per_s" else "output tokens/s"
    series: list[Series] = []
    for k, (name, t) in enumerate(targets.items()):
        xs, ys = _xy(_points(t), lambda p: p.get("load"), figure)
        series.append(Series(name, xs, ys, markers=True, color=k))
    ys_all = [v for s in series for v in s.y]
    top = max(ys_all) if ys_all else 1.0
    marks: list[Series] = []
    notes: list[str] = []
    for k, (name, t) in enumerate(targets.items()):
        cap = t.get("capacity")
        if not cap:
            continue
        at = _num(cap.get("load"))
        if at is not None:
            sign = ">= " if cap.get("at_least") else "<= " if cap.get("at_most") else ""
            marks.append(_mark(f"{name}: {_verdict_name(cap)} {sign}{at:.3g}", at, 0, top, k))
        notes.append(f"{name}: {_verdict_name(cap)} {cap.get('text') or MISSING}")
    for c in report.get("crossovers") or []:
        at = _num(c.get("load"))
        if at is not None and str(c.get("figure") or figure) == figure:
            marks.append(
                _mark(f"crossover: {c.get('leader_after')} leads from {at:.3g}", at, 0, top, mark_color)
            )
    if not any(t.get("capacity") for t in targets.values()):
        notes.append("no SLO given: no capacity at SLO")
    plots.add(
        "capacity-vs-load",
        f"{label} vs load, capacity at SLO and crossovers marked",
        series,
        f"no valid point has {figure}",
        marks=marks,
        notes=notes,
        x_label="load",
        y_label=label,
    )


def _between(between: Any) -> str:
    if isinstance(between, Sequence) and not isinstance(between, str) and len(between) == 2:
        return f"{_load(between[0])} and {_load(between[1])}"
    return MISSING


# ---------------------------------------------------------------------------- verdicts


def _verdicts(report: Mapping[str, Any], targets: dict[str, dict[str, Any]]) -> str:
    knob = str((report.get("sweep") or {}).get("knob") or "load")
    fewest = any((t.get("capacity") or {}).get("fewest") for t in targets.values())
    heading = f"Fewest {_e(knob)} meeting the SLOs" if fewest else "Capacity at SLO"
    out: list[str] = [f"<h3>{heading}</h3><ul>"]
    for name, t in targets.items():
        cap = t.get("capacity")
        text = cap.get("text") if cap else "no SLO given"
        out.append(f"<li>{_e(name)}: {_fmt(text)}</li>")
    out.append("</ul>")
    ratios = report.get("capacity_ratios") or {}
    if ratios:
        out.append(
            "<p>Capacity ratios"
            + (f" (from the {_e(knob)} each needs: half as many is twice the capacity)" if fewest else "")
            + ": "
            + ", ".join(f"{_e(k)} = {_fmt(v, '.2f')}x" for k, v in ratios.items())
            + "</p>"
        )
    out.append("<h3>Eviction cliff</h3><ul>")
    for name, t in targets.items():
        cliff = t.get("cliff") or {}
        if _num(cliff.get("load")) is not None:
            found = (
                f"found at {knob} = {_fmt(cliff['load'], '.3g')} (between {_between(cliff.get('between'))}: "
                f"{_e(cliff.get('figure', 'hit_vs_ideal'))} fell below {_fmt(cliff.get('threshold'), '.3g')}"
                f" = {_fmt(cliff.get('fraction'), 'g')} x {_fmt(cliff.get('base'), '.3g')}); "
                f"KV usage there {_fmt(cliff.get('kv_usage_there'), '.1%')}"
            )
        else:
            found = "none found in the loads swept"
        pred = t.get("predicted_cliff") or {}
        if _num(pred.get("load")) is not None:
            predicted = (
                f"predicted at {_fmt(pred['load'], '.3g')} (working set at load {_load(pred.get('from_load'))}: "
                f"{_fmt(pred.get('per_session_tokens'), '.0f')} tokens per session + "
                f"{_fmt(pred.get('shared_tokens'), '.0f')} shared, against a KV budget of "
                f"{_fmt(pred.get('budget_tokens'), ',')} tokens)"
            )
        elif pred:
            predicted = "not predicted: a session adds no context of its own"
        else:
            predicted = "not predicted (needs a KV budget and a knob of agents or max_sessions)"
        out.append(f"<li>{_e(name)}: {found}; {predicted}</li>")
    out.append("</ul>")
    figure = _e(report.get("crossover_figure") or MISSING)
    crossings = report.get("crossovers") or []
    out.append(f"<h3>Crossovers on {figure}</h3>")
    if crossings:
        out.append("<ul>")
        for c in crossings:
            pair = " vs ".join(_e(n) for n in c.get("targets") or []) or MISSING
            out.append(
                f"<li>{pair}: {_e(c.get('leader_after', MISSING))} overtakes {_e(c.get('leader_before', MISSING))}"
                f" at {knob} = {_fmt(c.get('load'), '.3g')} (between {_between(c.get('between'))})</li>"
            )
        out.append("</ul>")
    else:
        out.append('<p class="note">None: one target leads throughout, or they tie.</p>')
    invalid = report.get("invalid_points") or []
    out.append("<h3>Invalid points (left out of the curves)</h3>")
    if invalid:
        out.append('<ul class="invalid">' + "".join(f"<li>{_e(i)}</li>" for i in invalid) + "</ul>")
    else:
        out.append('<p class="note">None.</p>')
    warnings = report.get("warnings") or []
    if warnings:
        out.append("<h3>Warnings</h3>")
        out.append('<ul class="invalid">' + "".join(f"<li>{_e(w)}</li>" for w in warnings) + "</ul>")
    return "".join(out)


# ---------------------------------------------------------------------------- page


def render_sweep_html(report: dict[str, Any]) -> str:
    """The whole page for a sweep report (``sweep.report.build_sweep_report``'s dict)."""
    sweep = report.get("sweep") or {}
    targets = _targets(report)
    extra_color = len(targets) % len(PALETTE)
    with_goodput = bool(sweep.get("slos")) or any(
        _num((p.get("figures") or {}).get("goodput.per_s")) is not None
        for t in targets.values()
        for p in t.get("points") or []
    )
    plots = _Plots()
    _front_plot(
        plots, targets, plot_id="front-throughput-interactivity",
        title="Pareto front: output tokens/s vs interactivity (tokens/s per stream)",
        front="throughput_vs_interactivity", x=lambda p: _figure(p, "interactivity_tokens_per_s"),
        y="output_tokens_per_s", x_label="tokens/s per stream (1000 / TPOT median)", y_label="output tokens/s",
    )  # fmt: skip
    _front_plot(
        plots, targets, plot_id="front-tasks-completion",
        title="Pareto front: tasks/hour vs task completion time p50",
        front="tasks_vs_completion_time", x=lambda p: _figure(p, "tasks.completion_ms.p50"),
        y="tasks.per_hour", x_label="task completion time p50 (s)", y_label="tasks/hour",
    )  # fmt: skip
    _hit_plot(plots, targets, extra_color)
    _capacity_plot(plots, report, targets, extra_color)
    emulated = [n for n, t in targets.items() if is_emulated(n, t)]
    warn = ""
    if emulated:
        warn = f'<p class="warn emulator">{_e(", ".join(emulated))}: {html.escape(EMULATOR_NOTE, quote=False)}.</p>'
    tables = "".join(_points_table(n, t, with_goodput) for n, t in targets.items())
    sweep_id = _e(sweep.get("sweep_id", "sweep"))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>swarm sweep {sweep_id}</title>
<style>{_CSS}</style></head>
<body>
<h1>swarm sweep: {sweep_id}</h1>
{_header(report)}
{warn}
<h2>Points (steady window; latencies in ms, task completion in s)</h2>
{tables or '<p class="note">No target in this sweep.</p>'}
<h2>Plots (valid points only)</h2>
<div class="plots">{"".join(plots.drawn)}</div>
{"".join(f'<p class="note">Not plotted: {html.escape(t)}.</p>' for t in plots.missing)}
<h2>Verdicts</h2>
{warn}
{_verdicts(report, targets)}
</body></html>
"""


def _verdict_name(capacity: Mapping[str, Any]) -> str:
    """What a target's SLO verdict is: the most load it carries, or the fewest of a knob that
    adds capacity (replicas) it needs."""
    return "fewest meeting the SLOs" if capacity.get("fewest") else "capacity at SLO"
