"""The rows of the report's summary table and the columns of the closing summary, defined once.

Place in the map (docs/architecture.md, "Analysis"): a typed spec of what each row shows: its
label, its unit, how to get its values from a target's ``figures.TargetReport`` and how to
format them. The terminal view (``cli.report.report_tables``) and the HTML page
(``html``) both lay out ``REPORT_ROWS``; the closing summary table of ``swarm run`` /
``swarm replay`` lays out ``SUMMARY_COLUMNS`` over the JSON shape of ``summary``. Nothing
here computes a figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only for types: this module stays light for the CLI's startup
    from swarm.analysis.figures import Distribution, TargetReport

#: A value a row shows: a number, a text, or None (shown as "-").
Value = float | int | str | None


def fmt(value: Value, spec: str = ".1f") -> str:
    """A value as text: "-" for None, "inf" for an infinite float, ``spec`` for a float."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else format(value, spec)
    return str(value)


@dataclass(frozen=True)
class ReportRow:
    """One row of the report's table: ``label`` and ``unit`` (shown as "label (unit)"),
    ``get`` the row's values of one target (several values are shown joined by " / "),
    ``spec`` their format; ``slo_only`` rows are shown only when the report has an SLO."""

    label: str
    unit: str
    get: Callable[[TargetReport], tuple[Value, ...]]
    spec: str = ".1f"
    slo_only: bool = False

    def title(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label

    def cell(self, target: TargetReport) -> str:
        """This row's text for one target ("-" where a figure is missing)."""
        try:
            values = self.get(target)
        except (KeyError, TypeError, AttributeError):
            return "-"
        return " / ".join(fmt(v, self.spec) for v in values)


def _q(dist: Distribution | None, *names: str) -> tuple[Value, ...]:
    return tuple(None if dist is None else getattr(dist, n) for n in names)


def _errors(t: TargetReport) -> tuple[Value, ...]:
    kinds = ", ".join(f"{k} {v}" for k, v in t.figures.errors.by_status.items() if k != "ok")
    return (kinds or "0",)


def _server(t: TargetReport, *path: str) -> Value:
    value: Any = t.server
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, int | float | str) else None


REPORT_ROWS: tuple[ReportRow, ...] = (
    ReportRow("engine", "", lambda t: (t.engine,)),
    ReportRow("requests (ok)", "", lambda t: (f"{t.figures.requests} ({t.figures.ok})",)),
    ReportRow("errors", "", _errors),
    ReportRow("error rate", "", lambda t: (t.figures.errors.error_rate,), ".2%"),
    ReportRow(
        "TTFT p50 / p90 / p99 / p99.9 / max",
        "ms",
        lambda t: _q(t.figures.ttft_ms, "p50", "p90", "p99", "p99_9", "max"),
    ),
    ReportRow("ITL p50 / p99 / max", "ms", lambda t: _q(t.figures.itl_ms, "p50", "p99", "max")),
    ReportRow("TPOT p50 / p99 / max", "ms", lambda t: _q(t.figures.tpot_ms, "p50", "p99", "max")),
    ReportRow("E2E p50 / p99 / max", "ms", lambda t: _q(t.figures.e2e_ms, "p50", "p99", "max")),
    ReportRow(
        "TTFT first / branch calls p50",
        "ms",
        lambda t: _q(t.figures.first_call_ttft_ms, "p50") + _q(t.figures.branch_call_ttft_ms, "p50"),
    ),
    ReportRow(
        "dispatch lag p99 / slot wait p99",
        "ms",
        lambda t: _q(t.figures.lag_ms, "p99") + _q(t.figures.slot_wait_ms, "p99"),
        ".2f",
    ),
    ReportRow(
        "client lag p50 / p99 / max",
        "ms",
        lambda t: _q(t.figures.client_lag_ms, "p50", "p99", "max"),
        ".2f",
    ),
    ReportRow(
        "output / peak (1 s) / total tokens/s",
        "tok/s",
        lambda t: (
            t.figures.throughput.output_tokens_per_s,
            t.figures.throughput.peak_output_tokens_per_s,
            t.figures.throughput.total_tokens_per_s,
        ),
    ),
    ReportRow(
        "cache hit: client / ideal",
        "",
        lambda t: (t.figures.cache.hit_ratio, t.figures.cache.ideal_hit_ratio),
        ".1%",
    ),
    ReportRow("prefill tokens saved", "tok", lambda t: (t.figures.cache.prefill_tokens_saved,)),
    ReportRow("cache hit: server", "", lambda t: (_server(t, "cache_hit_ratio"),), ".1%"),
    ReportRow(
        "server queue mean / max",
        "",
        lambda t: (_server(t, "queue", "mean"), _server(t, "queue", "max")),
        ".2f",
    ),
    ReportRow(
        "agent sessions", "", lambda t: (None if t.figures.sessions is None else t.figures.sessions.count,)
    ),
    ReportRow(
        "agent task completion p50 / p95",
        "ms",
        lambda t: _q(None if t.figures.sessions is None else t.figures.sessions.completion_ms, "p50", "p95"),
    ),
    ReportRow(
        "calls per session (mean)",
        "",
        lambda t: _q(None if t.figures.sessions is None else t.figures.sessions.calls, "mean"),
    ),
    ReportRow(
        "goodput",
        "req/s",
        lambda t: (None if t.figures.goodput is None else t.figures.goodput.request_goodput_per_s,),
        ".2f",
        slo_only=True,
    ),
    ReportRow(
        "goodput share",
        "",
        lambda t: (None if t.figures.goodput is None else t.figures.goodput.good_fraction,),
        ".1%",
        slo_only=True,
    ),
)


def report_rows(with_slo: bool) -> list[ReportRow]:
    """The rows a report shows (the goodput rows only with an SLO)."""
    return [r for r in REPORT_ROWS if with_slo or not r.slo_only]


@dataclass(frozen=True)
class SummaryColumn:
    """One column of the closing summary table: its title, the ``summary`` JSON key it shows,
    its format, a scale (100 for a ratio shown in %) and a suffix."""

    title: str
    key: str
    spec: str = ""
    scale: float = 1.0
    suffix: str = ""

    def cell(self, row: dict[str, Any]) -> str:
        value = row.get(self.key)
        if value is None:
            return "-"
        if not self.spec:
            return str(value)
        return f"{value * self.scale:{self.spec}}{self.suffix}"


SUMMARY_COLUMNS: tuple[SummaryColumn, ...] = (
    SummaryColumn("requests", "requests"),
    SummaryColumn("errors", "errors"),
    SummaryColumn("cancelled", "cancelled"),
    SummaryColumn("agents", "agents"),
    SummaryColumn("TTFT p50", "ttft_p50_ms", ".1f", suffix=" ms"),
    SummaryColumn("TTFT p99", "ttft_p99_ms", ".1f", suffix=" ms"),
    SummaryColumn("ITL p50", "itl_p50_ms", ".1f", suffix=" ms"),
    SummaryColumn("out tok/s", "output_tokens_per_s", ",.0f"),
    SummaryColumn("cache hit", "cache_hit_ratio", ".1f", 100.0, "%"),
    SummaryColumn("ideal hit", "ideal_hit_ratio", ".1f", 100.0, "%"),
    SummaryColumn("lag p99", "lag_p99_ms", ".1f", suffix=" ms"),
)
