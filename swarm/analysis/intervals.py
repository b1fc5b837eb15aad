"""Intervals: a run's figures, and the ratios between targets, with 95 % bootstrap intervals.

Place in the map (docs/architecture.md, "Analysis"): read by ``report`` (each target's figures)
and ``compare`` (each ratio, and whether a lead is a tie). Trace files only.

**Units.** What is resampled is what varies between measurements of one engine: a target's
repeats when its rows hold two or more (``swarm run --repeat N``: run-to-run noise, the
machine's and the engine's); else its sessions (one run: how much the figure owes to which
sessions the workload drew; the machine's own drift is not in it); else its requests (a flat
replay, no sessions). Each interval says which (``units``) and how many (``n``).

**Bootstrap.** ``RESAMPLES`` times, draw as many units as there are, with replacement, from a
generator seeded by ``SEED`` (the same trace gives the same interval), and recompute the
figure on the rows of the drawn units (a unit drawn twice counts twice); the interval is the
2.5th and 97.5th percentiles of those figures. A figure that cannot be computed on a draw (no
ok row) leaves that draw out; an interval needs ``MIN_UNITS`` units.

**Ratios.** ``ratio = figure(leader) / figure(runner-up)`` as ``compare.lead`` orients it (>= 1:
for a "lower is better" figure the runner-up's over the leader's). Two targets that share their
units (the same repeats, or the sessions of one seeded workload) are drawn together, paired:
the same units for both in each draw, which cancels what the units have in common; otherwise
each is drawn on its own. A lead whose interval reaches 1.0 is a tie.

The figures (``FIGURES``, by ``compare``'s dimension names; their formulas are ``metrics``'):
output tokens/s; TTFT p50 and p99 of all calls; ITL p50 and p99; E2E p50; agent task completion
p50; cache hit ratio; error rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from swarm.analysis import metrics as m

RESAMPLES = 400
SEED = 20_261_202
CONFIDENCE = 0.95
#: fewer units than this give no interval (a resample of 1 or 2 units says nothing)
MIN_UNITS = 3

Stat = Callable[[pa.Table], "float | None"]


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def _completion_p50(t: pa.Table) -> float | None:
    return _pct(m.sessions(t)["completion_ms"], 50) if "session_id" in t.column_names else None


#: name (as ``compare.DIMENSIONS`` names it) -> the figure of a table
FIGURES: dict[str, Stat] = {
    "output tokens/s": m.output_tokens_per_s,
    "TTFT p50, all calls": lambda t: _pct(m.ttft_ms(t), 50),
    "TTFT p99, all calls": lambda t: _pct(m.ttft_ms(t), 99),
    "ITL p50": lambda t: _pct(m.itl_ms(t), 50),
    "ITL p99": lambda t: _pct(m.itl_ms(t), 99),
    "E2E p50": lambda t: _pct(m.e2e_ms(t), 50),
    "agent task completion p50": _completion_p50,
    "cache hit ratio": lambda t: m.cache(t)["hit_ratio"],
    "error rate": lambda t: m.errors(t)["error_rate"],
}


#: the figures that are a percentile of values each row gives alone (a TTFT, an E2E, the ITLs
#: within a row): on a draw, its units' values laid end to end are the drawn rows' values, so a
#: unit's are found once, not on every draw; name -> (the values of a table, the percentile)
POOLED: dict[str, tuple[Callable[[pa.Table], np.ndarray], float]] = {
    "TTFT p50, all calls": (m.ttft_ms, 50),
    "TTFT p99, all calls": (m.ttft_ms, 99),
    "ITL p50": (m.itl_ms, 50),
    "ITL p99": (m.itl_ms, 99),
    "E2E p50": (m.e2e_ms, 50),
}
#: the same, by the figure's function in ``FIGURES``
_POOLED_BY_STAT = {FIGURES[name]: pooled for name, pooled in POOLED.items()}


@dataclass(frozen=True)
class Interval:
    """A 95 % interval of a figure (or a ratio), over ``n`` units of kind ``units``."""

    low: float
    high: float
    units: str  # repeats, sessions or requests
    n: int

    def spans(self, value: float) -> bool:
        return self.low <= value <= self.high

    def as_dict(self) -> dict[str, float | int | str]:
        return {"low": self.low, "high": self.high, "units": self.units, "n": self.n}


#: the columns ``FIGURES`` read: a draw copies these alone (the rest, lists of parents and
#: client lags among them, would be copied ``RESAMPLES`` times for nothing)
FIGURE_COLUMNS = frozenset({
    "status", "sent_ns", "ttft_ns", "e2e_ns", "chunk_ns", "prompt_tokens", "completion_tokens",
    "cached_tokens", "prompt_tokens_est", "ideal_cached_tokens_est", "session_id", "repeat",
})  # fmt: skip


class Units:
    """One target's rows grouped by unit (see the module docstring): ``keys`` and, per key, the
    positions of its rows (``table``: the rows, their ``FIGURE_COLUMNS`` only)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table.select([c for c in table.column_names if c in FIGURE_COLUMNS])
        reps = m.repeats(table)
        if reps is not None:
            self.kind, labels = "repeats", reps.astype(object)
        elif "session_id" in table.column_names and table.num_rows and (m.session_keys(table) != "").all():
            self.kind, labels = "sessions", m.session_keys(table)
        else:
            self.kind, labels = "requests", np.arange(table.num_rows).astype(object)
        order = np.argsort(labels.astype(str), kind="stable")
        sorted_labels = labels[order].astype(str)
        keys, starts = np.unique(sorted_labels, return_index=True)
        self.keys: list[str] = [str(k) for k in keys]
        #: row positions sorted by unit; unit i is order[starts[i] : starts[i] + lengths[i]]
        self._order = order
        self._starts = starts.astype(np.int64)
        self._lengths = np.diff(np.append(self._starts, len(order))).astype(np.int64)
        self._values: dict[Callable[[pa.Table], np.ndarray], list[np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def values(self, of: Callable[[pa.Table], np.ndarray]) -> list[np.ndarray]:
        """``of`` each unit's rows, in the order of ``keys`` (found once for each ``of``)."""
        held = self._values.get(of)
        if held is None:
            held = self._values[of] = [
                of(self.table.take(pa.array(self._order[start : start + length])))
                for start, length in zip(self._starts.tolist(), self._lengths.tolist(), strict=True)
            ]
        return held

    def take(self, picks: np.ndarray) -> pa.Table:
        """The rows of the picked units (by position in ``keys``), a unit picked twice twice and
        each pick a unit of its own (its repeat, or its session id, renamed by its place among
        the picks): a repeat drawn twice adds its span twice to a rate, a session drawn twice
        counts as two sessions."""
        lengths = self._lengths[picks]
        total = int(lengths.sum())
        if total == 0:
            return self.table.slice(0, 0)
        # positions start, start + 1, ... of each picked unit, laid end to end
        shift = np.repeat(self._starts[picks] - (np.cumsum(lengths) - lengths), lengths)
        out = self.table.take(pa.array(self._order[shift + np.arange(total)]))
        place = np.repeat(np.arange(len(picks)), lengths)
        if self.kind == "repeats":
            return out.set_column(out.schema.get_field_index("repeat"), "repeat", pa.array(place, pa.int32()))
        if self.kind == "sessions":
            renamed = pc.binary_join_element_wise(out["session_id"], pa.array(place.astype(str)), "#")
            return out.set_column(out.schema.get_field_index("session_id"), "session_id", renamed)
        return out


def percentile_interval(values: list[float], kind: str, n: int) -> Interval | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if len(finite) < RESAMPLES // 2:  # most draws could not compute it
        return None
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(np.asarray(finite), [tail, 100 - tail])
    return Interval(float(low), float(high), kind, n)


def figure_interval(table: pa.Table, stat: Stat, units: Units | None = None) -> Interval | None:
    """The 95 % interval of ``stat`` over ``table``'s units (None: too few units)."""
    return figure_intervals(table, {"figure": stat}, units).get("figure")


def figure_intervals(table: pa.Table, stats: dict[str, Stat], units: Units | None = None) -> dict[str, Interval]:
    """The 95 % interval of each of ``stats`` over ``table``'s units, those with one (none with
    too few units). Every figure is computed on the same draws (one generator seeded by
    ``SEED``: each figure's interval is the one it would get alone), each draw's rows copied
    once for all of them; a figure of ``POOLED`` is the percentile of its units' own values laid
    end to end, found once per unit."""
    units = units or Units(table)
    n = len(units)
    if n < MIN_UNITS:
        return {}
    pooled = {name: _drawn_figure(units, stat) for name, stat in stats.items() if stat in _POOLED_BY_STAT}
    on_rows = any(name not in pooled for name in stats)
    rng = np.random.default_rng(SEED)
    values: dict[str, list[float]] = {name: [] for name in stats}
    for _ in range(RESAMPLES):
        picks = rng.integers(0, n, n)
        drawn = units.take(picks) if on_rows else None
        for name, stat in stats.items():
            value = pooled[name](picks) if name in pooled else stat(drawn)
            if value is not None:
                values[name].append(value)
    out = {}
    for name, kept in values.items():
        interval = percentile_interval(kept, units.kind, n)
        if interval is not None:
            out[name] = interval
    return out


def _drawn_figure(units: Units, stat: Stat) -> Callable[[np.ndarray], float | None]:
    """``stat`` of the units picked by a draw: over their values laid end to end for a figure
    of ``POOLED``, else on their rows."""
    if stat in _POOLED_BY_STAT:
        of, q = _POOLED_BY_STAT[stat]
        held = units.values(of)
        return lambda picks: _pct(np.concatenate([held[i] for i in picks.tolist()]), q)
    return lambda picks: stat(units.take(picks))


def _ratio(leader: float, runner_up: float, better: str) -> float:
    """``compare.lead``'s ratio: the runner-up over the leader when lower is better, else the
    leader over the runner-up."""
    top, bottom = (runner_up, leader) if better == "lower" else (leader, runner_up)
    return top / bottom if bottom > 0 else math.inf


def ratio_interval(
    leader: pa.Table, runner_up: pa.Table, stat: Stat, better: str,
    leader_units: Units | None = None, runner_units: Units | None = None,
) -> Interval | None:  # fmt: skip
    """The 95 % interval of the leader's ratio to the runner-up (oriented as ``compare.lead``:
    >= 1 for the point figures), paired when the two share their units."""
    a, b = leader_units or Units(leader), runner_units or Units(runner_up)
    if min(len(a), len(b)) < MIN_UNITS:
        return None
    rng = np.random.default_rng(SEED)
    paired = a.kind == b.kind and a.keys == b.keys
    where = {k: i for i, k in enumerate(b.keys)}
    figure_a, figure_b = _drawn_figure(a, stat), _drawn_figure(b, stat)
    values: list[float] = []
    for _ in range(RESAMPLES):
        picks_a = rng.integers(0, len(a), len(a))
        picks_b = np.array([where[a.keys[i]] for i in picks_a]) if paired else rng.integers(0, len(b), len(b))
        fa, fb = figure_a(picks_a), figure_b(picks_b)
        if fa is None or fb is None:
            continue
        values.append(_ratio(fa, fb, better))
    kind = f"{a.kind}, paired" if paired else a.kind
    return percentile_interval(values, kind, len(a))


def target_intervals(table: pa.Table) -> dict[str, Interval]:
    """Every figure of ``FIGURES`` with its interval, for one target's rows (those with none
    left out)."""
    return figure_intervals(table, FIGURES)
