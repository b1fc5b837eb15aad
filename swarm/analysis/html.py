"""``swarm report --html``: the report as one self-contained page that opens offline.

Place in the map (docs/architecture.md, "Analysis"): the same figures as the terminal view and
``--json`` (``report.build_run_report``), in the same rows (``rows.REPORT_ROWS``), plus plots drawn as inline SVG (``svgplot``): TTFT and
E2E CDFs per target, TTFT by tree depth, cache hit ratio realised vs ideal by depth, output
throughput and requests in flight over time, agent task completion CDF, and the engine's own
cache hit ratio and queue length where they were scraped. A plot with nothing to show is left
out and the page says why. No script, no external resource.
"""

from __future__ import annotations

import html
from typing import Any

from swarm.analysis import metrics as m
from swarm.analysis.figures import RunReport, breakdown
from swarm.analysis.report import LoadedRun
from swarm.analysis.rows import fmt, report_rows
from swarm.analysis.svgplot import PAGE_CSS, Series, cdf, line_chart


def _f(value: Any, spec: str = ".1f") -> str:
    return html.escape(fmt(value, spec))


def _summary_table(report: RunReport) -> str:
    """The report's table: ``rows.REPORT_ROWS``, one column per target."""
    targets = report.targets
    names = list(targets)
    head = "".join(
        f"<th>{html.escape(n + (' (emulated)' if targets[n].emulated else ''))}</th>" for n in names
    )
    body = "".join(
        f"<tr><td>{html.escape(row.title())}</td>"
        + "".join(f"<td>{html.escape(row.cell(targets[n]))}</td>" for n in names)
        + "</tr>"
        for row in report_rows(report.slo is not None)
    )
    return f"<table><tr><th>figure</th>{head}</tr>{body}</table>"


class _Plots:
    """The page's plots, and a line for each one that had nothing to draw."""

    def __init__(self) -> None:
        self.plots: list[str] = []
        self.missing: list[str] = []

    def add(self, plot_id: str, title: str, series: list[Series], why_empty: str, **kwargs: Any) -> None:
        if any(len(s.x) for s in series):
            self.plots.append(line_chart(plot_id, title, [s for s in series if len(s.x)], **kwargs))
        else:
            self.missing.append(f"{title}: {why_empty}")


def _depth_series(tables: dict[str, Any]) -> tuple[list[Series], list[Series]]:
    """TTFT p50/p90 by depth, and the realised vs ideal hit ratio by depth, per target."""
    depth_series: list[Series] = []
    cache_series: list[Series] = []
    for k, (n, table) in enumerate(tables.items()):
        rows = breakdown(table, "depth")
        if len(rows) <= 1:
            continue
        with_ttft = [r for r in rows if r.ttft_ms.p50 is not None]
        x = [r.value for r in with_ttft]
        depth_series.append(Series(f"{n} p50", x, [r.ttft_ms.p50 or 0.0 for r in with_ttft], markers=True, color=k))
        depth_series.append(Series(f"{n} p90", x, [r.ttft_ms.p90 or 0.0 for r in with_ttft], dashed=True, color=k))
        with_cache = [r for r in rows if r.cache.hit_ratio is not None]
        if with_cache:
            cache_series.append(
                Series(
                    f"{n} realised", [r.value for r in with_cache], [r.cache.hit_ratio or 0.0 for r in with_cache],
                    markers=True, color=k,
                )
            )  # fmt: skip
            ideal = [r for r in with_cache if r.cache.ideal_hit_ratio is not None]
            cache_series.append(
                Series(
                    f"{n} ideal", [r.value for r in ideal], [r.cache.ideal_hit_ratio or 0.0 for r in ideal],
                    dashed=True, color=k,
                )
            )  # fmt: skip
    return depth_series, cache_series


def _client_plots(p: _Plots, tables: dict[str, Any]) -> None:
    """Latency CDFs, by depth, over time, and task completion: from the trace's rows."""
    names = list(tables)
    p.add(
        "ttft-cdf", "TTFT, CDF per target",
        [Series(n, *cdf(m.ttft_ms(tables[n]))) for n in names], "no successful request",
        x_label="TTFT (ms)", y_label="fraction of requests", y_min=0, y_max=1,
    )  # fmt: skip
    p.add(
        "e2e-cdf", "E2E latency, CDF per target",
        [Series(n, *cdf(m.e2e_ms(tables[n]))) for n in names], "no successful request",
        x_label="E2E (ms)", y_label="fraction of requests", y_min=0, y_max=1,
    )  # fmt: skip
    depth_series, cache_series = _depth_series(tables)
    p.add(
        "ttft-depth", "TTFT by tree depth (where prefix reuse shows)", depth_series,
        "every request is at one depth", x_label="depth", y_label="TTFT (ms)",
    )  # fmt: skip
    p.add(
        "cache-depth", "Prefix-cache hit ratio by depth: realised (solid) vs ideal (dashed)", cache_series,
        "no depth breakdown, or the engine reported no cached tokens", x_label="depth", y_label="hit ratio",
        y_min=0, y_max=1,
    )  # fmt: skip
    timelines = {n: m.timeline(tables[n]) for n in names}
    p.add(
        "throughput-time", "Output tokens/s over time (1 s bins)",
        [Series(n, timelines[n]["t_s"], timelines[n]["output_tokens_per_s"]) for n in names], "no request",
        x_label="seconds from the target's first send", y_label="output tokens/s",
    )  # fmt: skip
    p.add(
        "inflight-time", "Requests in flight over time",
        [Series(n, timelines[n]["t_s"], timelines[n]["in_flight"]) for n in names], "no request",
        x_label="seconds from the target's first send", y_label="requests in flight",
    )  # fmt: skip
    p.add(
        "completion-cdf", "Agent task completion time, CDF per target",
        [Series(n, *cdf(m.sessions(tables[n])["completion_ms"] / 1000)) for n in names],
        "no agent sessions (an imported trace has none)", x_label="task completion (s)",
        y_label="fraction of agent sessions", y_min=0, y_max=1,
    )  # fmt: skip


def _server_plots(p: _Plots, report: RunReport) -> None:
    """The engines' own cache hit ratio and queue over time, where their metrics were scraped."""
    server = {n: s for n in report.targets if (s := report.targets[n].server)}
    if not server:
        p.missing.append("engine-side metrics: none were scraped for this run")
        return
    p.add(
        "server-cache-time", "Engine-reported cache hit ratio over time",
        [Series(n, s["cache_timeline"]["t_s"], s["cache_timeline"]["hit_ratio"]) for n, s in server.items()],
        "the engines' metrics have no cache counters", x_label="seconds from the target's first send",
        y_label="hit ratio", y_min=0, y_max=1,
    )  # fmt: skip
    p.add(
        "server-queue-time", "Engine-reported queue length over time",
        [Series(n, s["queue"]["t_s"], s["queue"]["values"]) for n, s in server.items() if s.get("queue")],
        "the engines' metrics have no queue gauge", x_label="seconds from the target's first send",
        y_label="requests waiting",
    )  # fmt: skip


def _breakdown_tables(report: RunReport) -> list[str]:
    out = []
    for n, target in report.targets.items():
        for key, brows in target.breakdowns.items():
            head = (
                "<tr><th>"
                + html.escape(key)
                + "</th><th>requests</th><th>TTFT p50</th><th>TTFT p99</th><th>E2E p50</th><th>cache hit</th><th>ideal</th></tr>"
            )
            body = "".join(
                f"<tr><td>{_f(r.value)}</td><td>{r.requests}</td><td>{_f(r.ttft_ms.p50)}</td>"
                f"<td>{_f(r.ttft_ms.p99)}</td><td>{_f(r.e2e_ms.p50)}</td>"
                f"<td>{_f(r.cache.hit_ratio, '.1%')}</td><td>{_f(r.cache.ideal_hit_ratio, '.1%')}</td></tr>"
                for r in brows
            )
            out.append(f"<h3>{html.escape(n)} by {html.escape(key)} (ms)</h3><table>{head}{body}</table>")
    return out


def render_html(run: LoadedRun, report: RunReport) -> str:
    """The whole page for ``report`` (built from ``run`` by ``build_run_report``)."""
    names = list(report.targets)
    p = _Plots()
    _client_plots(p, {n: run.rows_of(n) for n in names})
    _server_plots(p, report)
    info = report.run
    emulated = [n for n in names if report.targets[n].emulated]
    notes = []
    if emulated:
        notes.append(
            f"Targets {', '.join(emulated)} are swarm's built-in emulator, not a real engine: its figures "
            "describe a model of an engine on this machine."
        )
    notes += [w[:1].upper() + w[1:] + "." for w in report.warnings]
    breakdown_html = _breakdown_tables(report)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>swarm report {html.escape(info["run_id"])}</title>
<style>{PAGE_CSS}</style></head>
<body>
<h1>swarm report: {html.escape(info["run_id"])}</h1>
<p>{html.escape(info["kind"])} · status {html.escape(str(info["status"]))} · created {html.escape(str(info["created_at"]))}
· workload {html.escape(", ".join(f"{k}={v}" for k, v in info["workload"].items()))}
{("· SLO " + html.escape(report.slo)) if report.slo else ""}</p>
{"".join(f'<p class="warn">{html.escape(t)}</p>' for t in notes)}
<h2>Summary (from the trace; latencies in ms)</h2>
{_summary_table(report)}
<h2>Plots</h2>
<div class="plots">{"".join(p.plots)}</div>
{"".join(f'<p class="note">Not plotted: {html.escape(t)}.</p>' for t in p.missing)}
<h2>Breakdowns</h2>
{"".join(breakdown_html) or '<p class="note">Every request has the same depth, role, profile, topology and system prompt.</p>'}
</body></html>
"""
