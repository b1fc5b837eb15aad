"""The one typed set of per-target figures that every view of a run draws from.

Place in the map (docs/architecture.md, "Analysis"): ``target_figures`` computes a target's
figures once, from its trace rows, with the functions of ``metrics`` (whose docstrings hold
each formula); the closing summary of ``swarm run`` / ``swarm replay`` (``summary``), ``swarm
report`` (``report``, rendered by ``cli.report`` and ``html`` through the row spec of
``rows``) and ``swarm compare`` (``compare``) all read these objects. ``as_dict`` gives each
one's JSON shape (the keys ``swarm report --json`` has always had).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from swarm.analysis import metrics as m
from swarm.analysis.fleet import FleetFigures
from swarm.analysis.intervals import Interval
from swarm.analysis.order_stats import NsPieces, ns_distribution
from swarm.trace.reader import rows_kept


@dataclass(frozen=True)
class Distribution:
    """``metrics.distribution`` of some values: count, mean, exact percentiles and max
    (None where there are no values)."""

    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p99_9: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: np.ndarray, *, scratch: bool = False) -> Distribution:
        """``metrics.distribution`` of ``values`` (``scratch``: theirs to reorder)."""
        return cls.of_dict(m.distribution(values, scratch=scratch))

    @classmethod
    def of_ns(cls, pieces: NsPieces) -> Distribution:
        """``order_stats.ns_distribution`` of nanosecond values given a piece at a time, in
        milliseconds (a run's ITLs: never laid out in one array)."""
        return cls.of_dict(ns_distribution(pieces))

    @classmethod
    def of_dict(cls, d: dict[str, float | int | None]) -> Distribution:
        """A ``metrics.distribution`` dict as a Distribution."""
        return cls(
            count=int(d["count"] or 0), mean=_opt(d["mean"]), p50=_opt(d["p50"]), p90=_opt(d["p90"]),
            p95=_opt(d["p95"]), p99=_opt(d["p99"]), p99_9=_opt(d["p99.9"]), max=_opt(d["max"]),
        )  # fmt: skip

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "count": self.count, "mean": self.mean, "p50": self.p50, "p90": self.p90, "p95": self.p95,
            "p99": self.p99, "p99.9": self.p99_9, "max": self.max,
        }  # fmt: skip


def _opt(value: float | int | None) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Throughput:
    """``metrics.throughput``: output and total tokens/s and requests/s over the span, and the
    peak output tokens/s over 1 s windows."""

    output_tokens_per_s: float | None
    total_tokens_per_s: float | None
    requests_per_s: float | None
    peak_output_tokens_per_s: float | None

    def as_dict(self) -> dict[str, float | None]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ErrorCounts:
    """``metrics.errors``: rows per status (sorted by status), each status's share, and the
    share of rows not ``ok``."""

    by_status: dict[str, int]
    rates: dict[str, float]
    error_rate: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"by_status": dict(self.by_status), "rates": dict(self.rates), "error_rate": self.error_rate}


@dataclass(frozen=True)
class CacheFigures:
    """``metrics.cache``: realised and ideal prefix-cache hit ratios, prefill tokens saved,
    and how many rows they rest on."""

    hit_ratio: float | None
    ideal_hit_ratio: float | None
    prefill_tokens_saved: int
    reporting_rows: int

    @classmethod
    def of(cls, table: pa.Table) -> CacheFigures:
        c = m.cache(table)
        return cls(
            hit_ratio=_opt(c["hit_ratio"]),
            ideal_hit_ratio=_opt(c["ideal_hit_ratio"]),
            prefill_tokens_saved=int(c["prefill_tokens_saved"] or 0),
            reporting_rows=int(c["reporting_rows"] or 0),
        )

    def as_dict(self) -> dict[str, float | int | None]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SessionFigures:
    """``metrics.sessions``: agent sessions (non-empty ``session_id``), their task completion
    times and calls per session."""

    count: int
    completion_ms: Distribution
    calls: Distribution

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "completion_ms": self.completion_ms.as_dict(),
            "calls": self.calls.as_dict(),
        }


@dataclass(frozen=True)
class Goodput:
    """``metrics.goodput``: requests meeting the SLO, their share, and request and token
    goodput per second."""

    slo: str
    good: int
    good_fraction: float | None
    request_goodput_per_s: float | None
    token_goodput_per_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class TargetFigures:
    """Every headline figure of one target, computed from its rows by ``target_figures``.

    ``agents`` (distinct ``session_id`` values over every row, an empty id included, see
    ``metrics.session_ids``) is the closing summary's count; the report shows ``sessions``
    instead, so ``as_dict`` leaves it out. ``first_call_ttft_ms``, ``branch_call_ttft_ms``
    and ``sessions`` are None when the rows lack the columns they need, ``goodput`` when no
    SLO was given; ``as_dict`` leaves those out then.
    """

    requests: int
    ok: int
    agents: int
    span_s: float | None
    ttft_ms: Distribution
    itl_ms: Distribution
    tpot_ms: Distribution
    e2e_ms: Distribution
    queue_ms: Distribution
    lag_ms: Distribution
    slot_wait_ms: Distribution
    throughput: Throughput
    errors: ErrorCounts
    cache: CacheFigures
    #: the client's own lag behind the kernel's receive stamps (``metrics.client_lag_ms``)
    client_lag_ms: Distribution = field(default_factory=lambda: Distribution.of(np.zeros(0)))
    #: rows per clock that timed them (``metrics.clocks``)
    clocks: dict[str, int] = field(default_factory=dict)
    first_call_ttft_ms: Distribution | None = None
    branch_call_ttft_ms: Distribution | None = None
    sessions: SessionFigures | None = None
    goodput: Goodput | None = None

    @property
    def cancelled(self) -> int:
        """Rows cut short by the run's own stop (status ``cancelled``)."""
        return self.errors.by_status.get("cancelled", 0)

    @property
    def failed(self) -> int:
        """Rows neither ``ok`` nor ``cancelled``: ``requests − ok − cancelled``."""
        return self.requests - self.ok - self.cancelled

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "requests": self.requests,
            "ok": self.ok,
            "span_s": self.span_s,
            "ttft_ms": self.ttft_ms.as_dict(),
            "itl_ms": self.itl_ms.as_dict(),
            "tpot_ms": self.tpot_ms.as_dict(),
            "e2e_ms": self.e2e_ms.as_dict(),
            "queue_ms": self.queue_ms.as_dict(),
            "lag_ms": self.lag_ms.as_dict(),
            "slot_wait_ms": self.slot_wait_ms.as_dict(),
            "client_lag": self.client_lag_ms.as_dict(),
            "clocks": dict(self.clocks),
            "throughput": self.throughput.as_dict(),
            "errors": self.errors.as_dict(),
            "cache": self.cache.as_dict(),
        }
        if self.first_call_ttft_ms is not None and self.branch_call_ttft_ms is not None:
            out["first_call_ttft_ms"] = self.first_call_ttft_ms.as_dict()
            out["branch_call_ttft_ms"] = self.branch_call_ttft_ms.as_dict()
        if self.sessions is not None:
            out["sessions"] = self.sessions.as_dict()
        if self.goodput is not None:
            out["goodput"] = self.goodput.as_dict()
        return out


def target_figures(
    table: pa.Table, slo: m.SLO | None = None, chunks: m.Batches | None = None
) -> TargetFigures:
    """The figures of one table (one target's rows); each from the ``metrics`` function its
    type names. Those over every chunk (ITL, client lag, the peak window's tokens) read the
    rows a piece at a time from ``chunks`` (``metrics.Batches``: the table's own rows by
    default; the closing summary reads them from the trace's files, and its table has no
    chunk columns)."""
    chunks = chunks or m.table_batches(table)
    has_parents = "parent_nodes" in table.column_names
    calls = m.first_and_branch_calls(table, ["status", "ttft_ns"]) if has_parents else None
    sessions = None
    if "session_id" in table.column_names:
        s = m.sessions(table)
        sessions = SessionFigures(
            count=int(s["calls"].size),
            completion_ms=Distribution.of(s["completion_ms"]),
            calls=Distribution.of(s["calls"]),
        )
    e = m.errors(table)
    return TargetFigures(
        requests=table.num_rows,
        ok=m.ok_count(table),
        agents=m.session_ids(table) if "session_id" in table.column_names else 0,
        span_s=m.span_s(table),
        ttft_ms=Distribution.of(m.ttft_ms(table)),
        itl_ms=Distribution.of_ns(lambda: m.itl_ns_pieces(chunks(m.ITL_COLUMNS))),
        tpot_ms=Distribution.of(m.tpot_ms(table)),
        e2e_ms=Distribution.of(m.e2e_ms(table)),
        queue_ms=Distribution.of(m.queue_ms(table)),
        lag_ms=Distribution.of(m.lag_ms(table)),
        slot_wait_ms=Distribution.of(m.slot_wait_ms(table)),
        client_lag_ms=Distribution.of_ns(lambda: m.client_lag_ns_pieces(chunks(m.CLIENT_LAG_COLUMNS))),
        clocks=m.clocks(table),
        throughput=Throughput(**m.throughput(table, chunks=chunks)),
        errors=ErrorCounts(by_status=e["by_status"], rates=e["rates"], error_rate=e["error_rate"]),
        cache=CacheFigures.of(table),
        first_call_ttft_ms=Distribution.of(m.ttft_ms(calls["first"])) if calls is not None else None,
        branch_call_ttft_ms=Distribution.of(m.ttft_ms(calls["branch"])) if calls is not None else None,
        sessions=sessions,
        goodput=Goodput(**m.goodput(table, slo)) if slo is not None else None,
    )


@dataclass(frozen=True)
class BreakdownRow:
    """One value of a breakdown column (``metrics.breakdown``): its rows, ok rows, TTFT and
    E2E distributions and cache figures."""

    value: Any
    requests: int
    ok: int
    ttft_ms: Distribution
    e2e_ms: Distribution
    cache: CacheFigures

    def as_dict(self, key: str) -> dict[str, Any]:
        return {
            key: self.value,
            "requests": self.requests,
            "ok": self.ok,
            "ttft_ms": self.ttft_ms.as_dict(),
            "e2e_ms": self.e2e_ms.as_dict(),
            "cache": self.cache.as_dict(),
        }


def breakdown(table: pa.Table, key: str) -> list[BreakdownRow]:
    """``metrics.breakdown`` of ``table`` by column ``key``, typed."""
    out = []
    table = table.select([c for c in dict.fromkeys((key, *m.BREAKDOWN_COLUMNS)) if c in table.column_names])
    for value in m.group_values(table, key):
        rows = m.subset(table, key, value)
        out.append(
            BreakdownRow(
                value=value,
                requests=rows.num_rows,
                ok=m.ok_count(rows),
                ttft_ms=Distribution.of(m.ttft_ms(rows)),
                e2e_ms=Distribution.of(m.e2e_ms(rows)),
                cache=CacheFigures.of(rows),
            )
        )
    return out


@dataclass(frozen=True)
class TargetReport:
    """One target of a report: its engine, whether it is swarm's emulator, its figures, its
    breakdowns (by the ``report.BREAKDOWN_KEYS`` with more than one value) and the engine's
    own figures where they were scraped (``server.target_figures``, a plain dict)."""

    engine: str
    emulated: bool
    figures: TargetFigures
    breakdowns: dict[str, list[BreakdownRow]] = field(default_factory=dict)
    server: dict[str, Any] | None = None
    #: the 95 % interval of each figure that has one (``intervals.FIGURES``), by its name
    intervals: dict[str, Interval] = field(default_factory=dict)
    #: a fleet's figures per replica (``fleet.fleet_figures``), for a target behind a router
    fleet: FleetFigures | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "fleet": self.fleet.as_dict() if self.fleet is not None else None,
            "engine": self.engine,
            "emulated": self.emulated,
            "figures": self.figures.as_dict(),
            "breakdowns": {k: [r.as_dict(k) for r in rows] for k, rows in self.breakdowns.items()},
            "server": self.server,
            "intervals": {k: v.as_dict() for k, v in self.intervals.items()},
        }


@dataclass(frozen=True)
class RunReport:
    """A whole report: the run's identity (``run``, a plain dict), the SLO in words, each
    target, and the warnings a reader must see first (``report.run_warnings``)."""

    run: dict[str, Any]
    slo: str | None
    targets: dict[str, TargetReport]
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "slo": self.slo,
            "targets": {name: t.as_dict() for name, t in self.targets.items()},
            "warnings": list(self.warnings),
        }


def first_engine(table: pa.Table) -> str:
    """The ``engine`` of a table's first row ("" when it has none)."""
    return str(table["engine"][0].as_py()) if table.num_rows else ""


def target_names(table: pa.Table) -> list[str]:
    """Distinct ``target`` values, sorted."""
    return sorted(set(table["target"].to_pylist()))


def rows_of(table: pa.Table, target: str) -> pa.Table:
    """The rows of ``target``: the table itself when they are all its (no copy of a large
    run's chunk times for its one target)."""
    rows = rows_kept(table, pc.equal(table["target"], target))
    assert isinstance(rows, pa.Table)
    return rows
