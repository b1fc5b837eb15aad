"""One load point of a sweep: its steady-state window, its figures in that window, its validity.

Place in the map (docs/architecture.md, "Sweeps"; its analysis, which reads folders on disk
only): pure functions from one target's trace rows (the trace schema) to a ``SteadyWindow``, a
``PointFigures`` and a ``Validity``; the curves and verdicts over many points are in
``sweep.curves``. Latency figures come from the functions of ``metrics`` (whose docstrings hold
each formula) applied to the window's rows.

Conventions:

- A request is **in flight** from ``sent_ns`` to its end ``sent_ns + e2e_ns`` (a row without
  ``e2e_ns`` ends when it was sent: it adds nothing), whatever its status.
- A request is **in a window** when its ``sent_ns`` lies in ``[start_ns, end_ns]`` (both ends
  included). Rates are counts of those requests over the window's length, so the whole-run
  window (first send to last end, ``whole_run_window``) gives ``metrics.throughput``'s
  requests/s and output tokens/s.
- A **task** is a session (rows sharing a non-empty ``session_id``). It **completed** when none
  of its rows was ``cancelled`` (a session cut by a hard stop has its requests in flight
  cancelled; the trace cannot tell a session cut by a soft stop from a finished one). Its
  completion instant is its last end (``max(sent_ns + e2e_ns)``), its completion time that
  instant minus its first ``scheduled_ns``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from swarm.analysis import metrics as m
from swarm.analysis.figures import Distribution
from swarm.analysis.fleet import fleet_figures
from swarm.record import LATE_NS

#: The default share of the median in-flight level that marks the steady state.
STEADY_FRACTION = 0.8


@dataclass(frozen=True)
class SteadyWindow:
    """A span of one run, ``[start_ns, end_ns]`` in wall-clock ns, and the rows sent in it.

    ``rule`` names how it was chosen; for ``steady_window`` also the time-weighted median
    in-flight level (``level_median``), the share asked for (``fraction``) and the level a
    request count had to reach (``threshold``).
    """

    start_ns: int
    end_ns: int
    requests: int
    rule: str
    level_median: float | None = None
    fraction: float | None = None
    threshold: float | None = None

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def contains(self, ns: np.ndarray) -> np.ndarray:
        return (ns >= self.start_ns) & (ns <= self.end_ns)

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "duration_s": self.duration_s}


def _ints(table: pa.Table, name: str) -> np.ndarray:
    """An integer column as int64, nulls as 0 (wall-clock ns stay exact: no float64)."""
    return np.asarray(pc.fill_null(table[name], 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _ends_ns(table: pa.Table) -> np.ndarray:
    """Each row's end: ``sent_ns + e2e_ns`` (``sent_ns`` without an ``e2e_ns``)."""
    return _ints(table, "sent_ns") + _ints(table, "e2e_ns")


def in_flight_levels(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The requests in flight as a step function: ``(times, levels)`` where ``levels[i]``
    requests are in flight on ``[times[i], times[i+1])`` (``len(times) == len(levels) + 1``;
    times are wall-clock ns; at an instant where some end and others start, the net count)."""
    sent = _ints(table, "sent_ns")
    ends = _ends_ns(table)
    times, where = np.unique(np.concatenate([sent, ends]), return_inverse=True)
    delta = np.zeros(times.size, dtype=np.int64)
    np.add.at(delta, where, np.concatenate([np.ones(sent.size, np.int64), -np.ones(ends.size, np.int64)]))
    return times, np.cumsum(delta)[:-1]


def steady_window(table: pa.Table, fraction: float = STEADY_FRACTION) -> SteadyWindow:
    """The steady state of one run: from the first instant the requests in flight reach a
    threshold to the last instant they fall below it.

    With ``L(t)`` the requests in flight (``in_flight_levels``) over the span from the first
    send to the last end:

    - ``R`` = the time-weighted median of ``L``: the smallest level ``l`` such that ``L(t) <= l``
      for at least half of the span;
    - threshold ``θ = max(fraction × R, 1)``;
    - ``start`` = the first instant with ``L(t) >= θ``, ``end`` = the instant ``L`` last falls
      below ``θ``.

    Dips below ``θ`` between ``start`` and ``end`` stay inside the window: an open loop (Poisson
    arrivals) wanders around its mean, a closed loop (max in flight) sits at its cap, and both
    lose only the ramp-up and the drain. The median is the level the run spent most of its
    time near, so a ramp and a drain shorter than the plateau do not move it.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction {fraction}: expected a share in (0, 1]")
    if table.num_rows == 0:
        return SteadyWindow(0, 0, 0, rule="steady: no requests", fraction=fraction)
    times, levels = in_flight_levels(table)
    durations = np.diff(times)
    rule = f"steady: requests in flight >= max({fraction:g} x time-weighted median, 1)"
    if durations.sum() == 0:  # every request ended as it was sent: no level to judge
        return fixed_window(table, int(times[0]), int(times[-1]), rule=rule + " (no time in flight)")
    order = np.argsort(levels, kind="stable")
    cum = np.cumsum(durations[order])
    median = float(levels[order[int(np.searchsorted(cum, cum[-1] / 2, side="left"))]])
    threshold = max(fraction * median, 1.0)
    above = np.flatnonzero(levels >= threshold)
    window = fixed_window(table, int(times[above[0]]), int(times[above[-1] + 1]), rule=rule)
    return SteadyWindow(
        window.start_ns, window.end_ns, window.requests, rule=rule,
        level_median=median, fraction=fraction, threshold=threshold,
    )  # fmt: skip


def whole_run_window(table: pa.Table) -> SteadyWindow:
    """The whole run: the first ``sent_ns`` to the last end (``metrics.span_s``'s span)."""
    if table.num_rows == 0:
        return SteadyWindow(0, 0, 0, rule="whole run: no requests")
    return fixed_window(table, int(pc.min(table["sent_ns"]).as_py()), int(_ends_ns(table).max()))


def fixed_window(table: pa.Table, start_ns: int, end_ns: int, rule: str = "whole run") -> SteadyWindow:
    """A window given by its ends, with the count of ``table``'s rows sent inside it."""
    sent = _ints(table, "sent_ns")
    return SteadyWindow(start_ns, end_ns, int(((sent >= start_ns) & (sent <= end_ns)).sum()), rule=rule)


def rows_in(table: pa.Table, window: SteadyWindow) -> pa.Table:
    """The rows whose ``sent_ns`` lies in the window."""
    return table.filter(pa.array(window.contains(_ints(table, "sent_ns"))))


@dataclass(frozen=True)
class Tasks:
    """Tasks (sessions) that completed inside a window: how many, per hour of window, and
    their completion times (first ``scheduled_ns`` to last end, ms)."""

    completed: int
    per_hour: float | None
    completion_ms: Distribution

    def as_dict(self) -> dict[str, Any]:
        return {
            "completed": self.completed,
            "per_hour": self.per_hour,
            "completion_ms": self.completion_ms.as_dict(),
        }


def tasks_in(table: pa.Table, window: SteadyWindow) -> Tasks:
    """Tasks that completed inside ``window``, from every row of ``table`` (a task may start
    before the window): ``completed`` = sessions without a ``cancelled`` row whose last end
    lies in ``[start_ns, end_ns]``; ``per_hour = completed / (duration_s / 3600)``;
    ``completion_ms`` = ``(last end − first scheduled_ns) / 1e6`` of those sessions."""
    return _tasks_of(_completions_ms(table, window), window.duration_s)


def _tasks_of(completion_ms: np.ndarray, seconds: float) -> Tasks:
    hours = seconds / 3600
    completed = int(completion_ms.size)
    return Tasks(completed, completed / hours if hours > 0 else None, Distribution.of(completion_ms))


def _completions_ms(table: pa.Table, window: SteadyWindow) -> np.ndarray:
    """The completion times (ms) of the tasks that completed inside ``window`` (``tasks_in``)."""
    none = np.zeros(0)
    if table.num_rows == 0 or "session_id" not in table.column_names:
        return none
    ids = np.asarray(table["session_id"].to_numpy(zero_copy_only=False), dtype=object)
    keep = ids != ""
    if not keep.any():
        return none
    names, group = np.unique(ids[keep], return_inverse=True)
    origin = int(_ints(table, "scheduled_ns")[keep].min())
    scheduled = _ints(table, "scheduled_ns")[keep] - origin  # small ints: exact as float64
    ends = _ends_ns(table)[keep] - origin
    cancelled = np.asarray(pc.equal(table["status"], "cancelled").to_numpy(zero_copy_only=False))[keep]
    first = np.full(names.size, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(names.size, np.iinfo(np.int64).min, dtype=np.int64)
    cut = np.zeros(names.size, dtype=bool)
    np.minimum.at(first, group, scheduled)
    np.maximum.at(last, group, ends)
    np.logical_or.at(cut, group, cancelled.astype(bool))
    done = ~cut & window.contains(last + origin)
    return (last[done] - first[done]).astype(np.float64) / 1e6


@dataclass(frozen=True)
class Misses:
    """Prompt tokens the engine computed, split by cause, over the ok rows that carry all of
    ``prompt_tokens``, ``cached_tokens``, ``prompt_tokens_est`` and
    ``ideal_cached_tokens_est`` (``rows``):

    - ``compulsory_tokens`` = Σ (``prompt_tokens_est − ideal_cached_tokens_est``): no earlier
      request had that prefix, the ideal cache misses them too;
    - ``lost_tokens`` = Σ max(``ideal_cached_tokens_est − cached_tokens``, 0): the ideal says
      reusable, the engine recomputed them (eviction, policy or routing); a row where the
      engine reused more than the ideal adds 0;
    - ``compulsory_share`` and ``lost_share``: each over ``compulsory + lost``;
    - ``realised_tokens`` = Σ (``prompt_tokens − cached_tokens``), the engine's own count of
      misses. The split is in the client's token counts (``*_est``), so ``compulsory + lost``
      equals it only where the client's tokenizer matches the engine's.
    """

    rows: int
    compulsory_tokens: int
    lost_tokens: int
    compulsory_share: float | None
    lost_share: float | None
    realised_tokens: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def misses(table: pa.Table) -> Misses:
    """``Misses`` of ``table``'s rows (see the type for each formula)."""
    ok = m.ok_rows(table)
    cols = ("prompt_tokens", "cached_tokens", "prompt_tokens_est", "ideal_cached_tokens_est")
    present = np.ones(ok.num_rows, dtype=bool)
    for c in cols:
        present &= np.asarray(pc.is_valid(ok[c]).to_numpy(zero_copy_only=False), dtype=bool)
    prompt, cached, est, ideal = (_ints(ok, c)[present] for c in cols)
    compulsory = int((est - ideal).sum())
    lost = int(np.maximum(ideal - cached, 0).sum())
    total = compulsory + lost
    return Misses(
        rows=int(present.sum()),
        compulsory_tokens=compulsory,
        lost_tokens=lost,
        compulsory_share=compulsory / total if total else None,
        lost_share=lost / total if total else None,
        realised_tokens=int((prompt - cached).sum()),
    )


@dataclass(frozen=True)
class PointGoodput:
    """Requests in the window meeting the SLO (``metrics.good_mask``): how many, their share,
    and per second of window, as requests and as their output tokens."""

    slo: str
    good: int
    good_fraction: float | None
    per_s: float | None
    tokens_per_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PointFigures:
    """The figures of one target at one load point, over the requests sent in ``window``.

    - ``requests_per_s`` = requests / ``window.duration_s``; ``output_tokens_per_s`` = Σ
      ``completion_tokens`` of their ok rows / ``window.duration_s``
    - ``tasks``: ``tasks_in`` (per hour, completion time)
    - ``ttft_ms``, ``itl_ms``, ``tpot_ms``, ``e2e_ms``, ``lag_ms``: the ``metrics`` functions
    - ``interactivity_tokens_per_s``: output tokens per second of one stream, the median over
      ok rows with a positive TPOT of ``1000 / tpot_ms``
    - ``hit_ratio``, ``ideal_hit_ratio``: ``metrics.cache``; ``hit_vs_ideal`` = their ratio
    - ``misses``: ``misses`` (compulsory vs lost)
    - ``error_rate``: ``metrics.errors``; ``goodput`` when an SLO was given
    """

    window: SteadyWindow
    requests: int
    ok: int
    requests_per_s: float | None
    output_tokens_per_s: float | None
    tasks: Tasks
    ttft_ms: Distribution
    itl_ms: Distribution
    tpot_ms: Distribution
    e2e_ms: Distribution
    lag_ms: Distribution
    interactivity_tokens_per_s: float | None
    hit_ratio: float | None
    ideal_hit_ratio: float | None
    hit_vs_ideal: float | None
    misses: Misses
    error_rate: float | None
    goodput: PointGoodput | None = None
    #: the client's own lag behind the kernel's receive stamps (``metrics.client_lag_ms``)
    client_lag_ms: Distribution = field(default_factory=lambda: Distribution.of(np.zeros(0)))
    #: a fleet's point (rows naming two replicas or more, ``analysis.fleet``): ``replicas``,
    #: ``imbalance``, ``routed_away_share`` (of the missed prompt tokens) and
    #: ``routed_away_of_prompt``; None for one server
    fleet: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            out[key] = value.as_dict() if hasattr(value, "as_dict") else value
        return out

    def flat(self) -> dict[str, float]:
        """Every numeric figure by its dotted path in ``as_dict`` (``"ttft_ms.p99"``,
        ``"tasks.per_hour"``, ``"goodput.per_s"``); None values left out. The names the
        curves (``sweep.curves``) read."""
        out: dict[str, float] = {}

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, dict):
                for k, v in value.items():
                    walk(f"{prefix}.{k}" if prefix else str(k), v)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                out[prefix] = float(value)

        walk("", self.as_dict())
        return out


def point_figures(table: pa.Table, window: SteadyWindow, slo: m.SLO | None = None) -> PointFigures:
    """The figures of ``table`` (one target's rows) in ``window``; the whole-run figures are
    ``point_figures(table, whole_run_window(table))``."""
    figures = _figures(rows_in(table, window), window, tasks_in(table, window), slo)
    return replace(figures, fleet=fleet_point([(table, window)]))


def repeat_tables(table: pa.Table) -> list[pa.Table]:
    """``table``'s rows split by repeat (``swarm run --repeat N``), in repeat order; ``[table]``
    when it holds one run."""
    reps = m.repeats(table)
    if reps is None:
        return [table]
    return [table.filter(pa.array(reps == r)) for r in np.unique(reps)]


def pooled_window(windows: list[SteadyWindow]) -> SteadyWindow:
    """The windows of a point's repeats as one: the first one's start, the sum of their lengths
    (``duration_s``), the sum of their requests. Its ends bound no rows: ``pooled_figures``
    takes each repeat's rows from its own window."""
    if len(windows) == 1:
        return windows[0]
    first = windows[0]
    length_ns = sum(w.end_ns - w.start_ns for w in windows)
    return SteadyWindow(
        first.start_ns, first.start_ns + length_ns, sum(w.requests for w in windows),
        rule=f"{first.rule}; each of {len(windows)} repeats in its own window, their lengths summed",
        level_median=first.level_median, fraction=first.fraction, threshold=first.threshold,
    )  # fmt: skip


def pooled_figures(parts: list[tuple[pa.Table, SteadyWindow]], slo: m.SLO | None = None) -> PointFigures:
    """The figures of a point measured over several repeats, each repeat's rows (``table``) in its
    own ``window``: every distribution over the pooled rows, every rate over the summed window
    lengths (``pooled_window``), the tasks completed in each repeat's window pooled. One part:
    ``point_figures``."""
    if len(parts) == 1:
        return point_figures(*parts[0], slo)
    window = pooled_window([w for _, w in parts])
    rows = pa.concat_tables([rows_in(t, w) for t, w in parts])
    completions = np.concatenate([_completions_ms(t, w) for t, w in parts])
    figures = _figures(rows, window, _tasks_of(completions, window.duration_s), slo)
    return replace(figures, fleet=fleet_point(parts))


def _figures(rows: pa.Table, window: SteadyWindow, tasks: Tasks, slo: m.SLO | None) -> PointFigures:
    """``PointFigures`` of ``rows`` (those sent in ``window``), rates over its length."""
    ok = m.ok_rows(rows)
    seconds = window.duration_s
    tokens = float(pc.sum(pc.fill_null(ok["completion_tokens"], 0)).as_py() or 0) if ok.num_rows else 0.0
    tpot = m.tpot_ms(rows)
    tpot = tpot[tpot > 0]
    cache = m.cache(rows)
    hit, ideal = cache["hit_ratio"], cache["ideal_hit_ratio"]
    good = None
    if slo is not None:
        mask = m.good_mask(rows, slo)
        completion = np.asarray(pc.fill_null(rows["completion_tokens"], 0).to_numpy(zero_copy_only=False))
        n_good = int(mask.sum())
        good = PointGoodput(
            slo=slo.describe(),
            good=n_good,
            good_fraction=n_good / rows.num_rows if rows.num_rows else None,
            per_s=n_good / seconds if seconds > 0 else None,
            tokens_per_s=float(completion[mask].sum()) / seconds if seconds > 0 else None,
        )
    return PointFigures(
        window=window,
        requests=rows.num_rows,
        ok=ok.num_rows,
        requests_per_s=rows.num_rows / seconds if seconds > 0 else None,
        output_tokens_per_s=tokens / seconds if seconds > 0 else None,
        tasks=tasks,
        ttft_ms=Distribution.of(m.ttft_ms(rows)),
        itl_ms=Distribution.of_ns(lambda: m.itl_ns_pieces(m.table_batches(rows)(m.ITL_COLUMNS))),
        tpot_ms=Distribution.of(m.tpot_ms(rows)),
        e2e_ms=Distribution.of(m.e2e_ms(rows)),
        lag_ms=Distribution.of(m.lag_ms(rows)),
        interactivity_tokens_per_s=float(np.median(1000.0 / tpot)) if tpot.size else None,
        hit_ratio=None if hit is None else float(hit),
        ideal_hit_ratio=None if ideal is None else float(ideal),
        hit_vs_ideal=float(hit) / float(ideal) if hit is not None and ideal else None,
        misses=misses(rows),
        error_rate=m.errors(rows)["error_rate"],
        goodput=good,
        client_lag_ms=Distribution.of_ns(
            lambda: m.client_lag_ns_pieces(m.table_batches(rows)(m.CLIENT_LAG_COLUMNS))
        ),
    )


def fleet_point(parts: list[tuple[pa.Table, SteadyWindow]]) -> dict[str, Any] | None:
    """A fleet's figures at a point (``analysis.fleet.fleet_figures``): each repeat's rows in its
    window counted, the rows before seeding what the replicas had seen; None where they name
    fewer than two replicas."""
    tables = [t for t, _ in parts]
    if any("replica" not in t.column_names or "block_hashes" not in t.column_names for t in tables):
        return None
    windows: dict[int, tuple[int, int]] = {}
    for table, window in parts:
        repeats = pc.unique(table["repeat"]).to_pylist() if "repeat" in table.column_names else [0]
        for repeat in repeats:
            windows[int(repeat or 0)] = (window.start_ns, window.end_ns + 1)  # the window holds its end
    fleet = fleet_figures(pa.concat_tables(tables) if len(tables) > 1 else tables[0], windows_ns=windows)
    if fleet is None:
        return None
    prompt = sum(r.prompt_tokens for r in fleet.replicas)
    return {
        "replicas": len(fleet.replicas),
        "imbalance": fleet.imbalance,
        "routed_away_share": fleet.share("routed_away"),
        "routed_away_of_prompt": sum(r.routed_away for r in fleet.replicas) / prompt if prompt else None,
    }


@dataclass(frozen=True)
class Validity:
    """Whether a point may stand on the curves, and if not, every reason in words."""

    valid: bool
    reasons: tuple[str, ...] = ()
    #: the only reason is that the generator fell behind its schedule
    late_only: bool = False

    @property
    def reason(self) -> str | None:
        return "; ".join(self.reasons) or None

    def as_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "reasons": list(self.reasons), "late_only": self.late_only}


def point_validity(figures: PointFigures, *, max_error_rate: float) -> Validity:
    """A point is invalid when its window holds no request, when the generator fell behind its
    schedule (the window's dispatch lag p99, ``queue_ns − slot_wait_ns``, above ``LATE_NS``:
    the rule of ``live_stats.behind_schedule`` and the report), or when its error share is above
    ``max_error_rate``, or when the client itself read late (``metrics.client_lag_flag``: its lag
    behind the kernel's receive stamps above 5 % of TTFT p50 and 1 ms). Waiting for the in-flight cap is
    the load asked for, not lateness; a point that is only late (the generator, or the client)
    is ``late_only``, and its cache figures still count."""
    reasons: list[str] = []
    if figures.requests == 0:
        reasons.append("no request was sent in the steady window")
    lag_p99 = figures.lag_ms.p99
    late = lag_p99 is not None and lag_p99 > LATE_NS / 1e6
    if late:
        reasons.append(
            f"the generator fell behind its schedule: dispatch lag p99 {lag_p99:g} ms > {LATE_NS / 1e6:g} ms"
        )
    lagged = m.client_lag_flag(figures.client_lag_ms.p99, figures.ttft_ms.p50)
    if lagged is not None:
        reasons.append(lagged)
    late_reasons = int(late) + int(lagged is not None)
    if figures.error_rate is not None and figures.error_rate > max_error_rate:
        reasons.append(f"error share {figures.error_rate:.1%} above the bound {max_error_rate:.1%}")
    return Validity(valid=not reasons, reasons=tuple(reasons), late_only=late_reasons == len(reasons) > 0)
