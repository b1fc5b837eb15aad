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

**Draws from each unit's parts.** A figure made of what each unit gives it is drawn from
those parts, found once, not from a copy of the drawn rows: a percentile of values each row
gives (``POOLED``) from the units' values sorted once (``_Pooled``); the error rate, the cache
hit ratio and output tokens/s from each unit's sums (and its first send and last end); task
completion p50 from each unit's sessions. Each equals the figure of the drawn rows to the last
bit (integer sums in float64). Task completion over resampled requests (sessions cut across
units) is computed on the drawn rows.

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
from swarm.analysis.order_stats import percentile_of_ranks

RESAMPLES = 400
#: rows whose ITLs ``Units._itls_packed`` packs at a time
_PACK_ROWS = 4096
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
#: how many values each ``POOLED`` function takes from each row (``metrics``), in row order
_ROWS_OF: dict[Callable[[pa.Table], np.ndarray], Callable[[pa.Table], np.ndarray]] = {
    m.ttft_ms: lambda t: m.present_ok(t, "ttft_ns"),
    m.e2e_ms: lambda t: m.present_ok(t, "e2e_ns"),
    m.itl_ms: m.itl_counts,
}


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
        self._row_units: np.ndarray | None = None
        self._pooled: dict[Callable[[pa.Table], np.ndarray], _Pooled] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def row_units(self) -> np.ndarray:
        """The unit of each row of ``table`` (its position in ``keys``), found once."""
        if self._row_units is None:
            at = np.empty(len(self._order), dtype=np.int32)
            at[self._order] = np.repeat(np.arange(len(self.keys), dtype=np.int32), self._lengths)
            self._row_units = at
        return self._row_units

    def lengths(self) -> np.ndarray:
        """Each unit's rows, counted."""
        return self._lengths

    def unit_rows(self, i: int) -> pa.Table:
        """Unit ``i``'s rows."""
        start = int(self._starts[i])
        return self.table.take(pa.array(self._order[start : start + int(self._lengths[i])]))

    def pooled(self, of: Callable[[pa.Table], np.ndarray]) -> _Pooled:
        """``of``'s values of every unit's rows (``POOLED``), sorted once for each ``of``."""
        held = self._pooled.get(of)
        if held is None:
            held = self._itls_packed() if of is m.itl_ms else None
        if held is None:
            narrow = self.row_units().astype(_unit_type(len(self.keys)))
            units_of = np.repeat(narrow, _ROWS_OF[of](self.table))
            values = [np.asarray(of(self.table), dtype=np.float64)]
            if units_of.size != values[0].size:  # the counts must be the figure's own (``metrics``)
                size = values[0].size
                raise ValueError(f"{of.__name__} gave {size} values; its rows count {units_of.size}")
            held = _Pooled.sorting(values.pop(), units_of, len(self.keys))  # handed over, not kept here
        self._pooled[of] = held
        return held

    def _itls_packed(self) -> _Pooled | None:
        """``itl_ms``'s values pooled from one int64 each: its nanoseconds shifted up, its unit
        in the bits below, sorted in place, then split (a fleet run's 82 million ITLs took 32
        bytes each sorted by ``argsort``; this, 8, then 12 kept). The same values in the same
        order (``ns / 1e6`` is ``itl_ms``'s float and keeps the order of the ns). None where
        they do not fit (an ITL below 0 or past ``2 ** (63 − unit bits)`` ns)."""
        counts = m.itl_counts(self.table)
        unit_bits = max(1, (len(self.keys) - 1).bit_length())
        packed = np.empty(int(counts.sum()), dtype=np.int64)
        at = 0
        for ns in m.itl_ns_pieces(m.table_batches(self.table)(m.ITL_COLUMNS)):
            packed[at : at + ns.size] = ns
            at += ns.size
        if at != packed.size:  # the counts must be the figure's own (``metrics``)
            raise ValueError(f"itl_ms gave {at} values; its rows count {packed.size}")
        if packed.size and (int(packed.min()) < 0 or int(packed.max()) >= 1 << (63 - unit_bits)):
            return None
        rows, ends = self.row_units(), np.cumsum(counts)
        for r in range(0, len(rows), _PACK_ROWS):  # each value's unit below its ns, a few rows at a time
            lo = int(ends[r - 1]) if r else 0
            part = packed[lo : int(ends[min(r + _PACK_ROWS, len(rows)) - 1])]
            part <<= unit_bits
            part |= np.repeat(rows[r : r + _PACK_ROWS], counts[r : r + _PACK_ROWS])
        packed.sort()
        units = np.empty(packed.size, dtype=_unit_type(len(self.keys)))
        mask = (1 << unit_bits) - 1
        for lo in range(0, packed.size, _PACK_ROWS * 64):
            units[lo : lo + _PACK_ROWS * 64] = packed[lo : lo + _PACK_ROWS * 64] & mask
        packed >>= unit_bits
        return _Pooled(packed, units, len(self.keys), scale=1e6)

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
    ``SEED``: each figure's interval is the one it would get alone); a figure made of each
    unit's parts (``_by_unit``) is drawn from them, any other on the drawn rows, copied once
    per draw for all such figures."""
    units = units or Units(table)
    n = len(units)
    if n < MIN_UNITS:
        return {}
    by_unit = {name: draw for name, stat in stats.items() if (draw := _by_unit(units, stat)) is not None}
    on_rows = any(name not in by_unit for name in stats)
    rng = np.random.default_rng(SEED)
    values: dict[str, list[float]] = {name: [] for name in stats}
    for _ in range(RESAMPLES):
        picks = rng.integers(0, n, n)
        drawn = units.take(picks) if on_rows else None
        for name, stat in stats.items():
            value = by_unit[name](picks) if name in by_unit else stat(drawn)
            if value is not None:
                values[name].append(value)
    out = {}
    for name, kept in values.items():
        interval = percentile_interval(kept, units.kind, n)
        if interval is not None:
            out[name] = interval
    return out


#: a draw's figure from the units it picked (their positions in ``Units.keys``)
Draw = Callable[[np.ndarray], "float | None"]


def _drawn_figure(units: Units, stat: Stat) -> Draw:
    """``stat`` of the units picked by a draw: from each unit's own sums or values where the
    figure is made of them (``_by_unit``), else on their rows (``Units.take``)."""
    return _by_unit(units, stat) or (lambda picks: stat(units.take(picks)))


def _by_unit(units: Units, stat: Stat) -> Draw | None:
    """A draw's ``stat`` from what each unit gives it, found once, for the figures made of
    such parts (None for another): a percentile of ``POOLED`` values (``_Pooled``); the error
    rate and the cache hit ratio, as ratios of sums over the drawn units' rows; output tokens/s,
    the sum of their ok rows' tokens over their span (with repeats, the sum of the drawn
    repeats' spans); task completion p50 over the drawn units' sessions (sessions or repeats as
    units). Each is the figure ``FIGURES`` computes on ``Units.take``'s rows, to the last bit
    while sums stay below 2**53 (token counts and nanosecond spans are integers:
    ``tests/test_intervals.py`` holds them equal)."""
    n = len(units)
    if stat in _POOLED_BY_STAT:
        of, q = _POOLED_BY_STAT[stat]
        pooled = units.pooled(of)
        return lambda picks: pooled.percentile(np.bincount(picks, minlength=n), q)
    if stat is FIGURES["error rate"]:
        ok = _unit_sums(units, m.ok_mask(units.table).astype(np.float64))
        rows = units.lengths().astype(np.float64)
        return lambda picks: _error_rate(np.bincount(picks, minlength=n), rows, ok)
    if stat is FIGURES["cache hit ratio"]:
        return _hit_ratio(units)
    if stat is FIGURES["output tokens/s"]:
        return _tokens_per_s(units)
    if stat is FIGURES["agent task completion p50"]:
        return _completion(units)
    return None


def _unit_sums(units: Units, per_row: np.ndarray) -> np.ndarray:
    """Σ ``per_row`` (aligned with ``Units.table``) over each unit's rows."""
    return np.bincount(units.row_units(), weights=per_row, minlength=len(units))


def _error_rate(counts: np.ndarray, rows: np.ndarray, ok: np.ndarray) -> float | None:
    """``metrics.errors``' ``error_rate`` of the drawn rows: (rows − ok rows) / rows."""
    total, good = int(counts @ rows), int(counts @ ok)
    return (total - good) / total if total else None


def _hit_ratio(units: Units) -> Draw:
    """``metrics.cache``' ``hit_ratio`` of the drawn rows: Σ cached / Σ prompt tokens over the
    ok rows that report both."""
    rows, n = units.table, len(units)
    prompt, cached = m.numeric(rows, "prompt_tokens"), m.numeric(rows, "cached_tokens")
    reporting = m.ok_mask(rows) & ~np.isnan(prompt) & ~np.isnan(cached)
    p = _unit_sums(units, np.where(reporting, prompt, 0.0))
    c = _unit_sums(units, np.where(reporting, cached, 0.0))

    def draw(picks: np.ndarray) -> float | None:
        counts = np.bincount(picks, minlength=n)
        p_sum = float(counts @ p)
        return float(counts @ c) / p_sum if p_sum else None

    return draw


def _tokens_per_s(units: Units) -> Draw:
    """``metrics.output_tokens_per_s`` of the drawn rows: Σ ``completion_tokens`` of ok rows
    / ``span_s`` (the drawn repeats' spans summed, each drawn one a repeat of its own; else
    the first send to the last end of all the drawn rows)."""
    rows, n = units.table, len(units)
    tokens = m.numeric(rows, "completion_tokens")
    done = _unit_sums(units, np.where(m.ok_mask(rows) & ~np.isnan(tokens), tokens, 0.0))
    sent_ns = np.asarray(rows["sent_ns"].to_numpy(zero_copy_only=False), dtype=np.int64)
    ends_ns = sent_ns + np.nan_to_num(m.numeric(rows, "e2e_ns"), nan=0.0).astype(np.int64)
    at = units.row_units()
    first_ns, last_ns = np.full(n, np.iinfo(np.int64).max), np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(first_ns, at, sent_ns)
    np.maximum.at(last_ns, at, ends_ns)

    def draw(picks: np.ndarray) -> float | None:
        if units.kind == "repeats":
            span_ns = int((last_ns[picks] - first_ns[picks]).sum())
        else:
            span_ns = int(last_ns[picks].max() - first_ns[picks].min())
        span_s = float(span_ns) / 1e9
        if not span_s > 0:
            return None
        return float(np.bincount(picks, minlength=n) @ done) / span_s

    return draw


def _completion(units: Units) -> Draw | None:
    """Task completion p50 of the drawn units' sessions: each session a unit (renamed when
    drawn twice, so each pick a session of its own), or the sessions of each repeat; rows
    resampled one by one (requests) have no such parts (None)."""
    n = len(units)
    if "session_id" not in units.table.column_names:
        return lambda picks: None
    if units.kind == "sessions":  # a unit's sessions: one, but for ids numpy's strings merge
        s = m.sessions(units.table)  # (a trailing NUL: ``Units`` groups ids as they are read)
        place = {k: i for i, k in enumerate(units.keys)}
        values = np.asarray(s["completion_ms"], dtype=np.float64)
        keys = np.asarray(s["keys"], dtype=object).astype(str)
        units_of = np.array([place[k] for k in keys], dtype=np.int64)
    elif units.kind == "repeats":
        each = [m.sessions(units.unit_rows(i))["completion_ms"] for i in range(n)]
        values = np.concatenate(each) if each else np.zeros(0)
        units_of = np.repeat(np.arange(n), [len(v) for v in each])
    else:
        return None
    pooled = _Pooled.sorting(values, units_of, n)
    return lambda picks: pooled.percentile(np.bincount(picks, minlength=n), 50)


def _unit_type(units: int) -> type[np.integer]:
    """The narrowest type a pooled value's unit fits (a value each: 82 million ITLs)."""
    return np.uint16 if units <= 1 << 16 else np.int32


class _Pooled:
    """Values of every unit, sorted once, with the unit that gave each. A draw's ``q``th
    percentile is the one ``np.percentile`` ('linear') finds over the drawn units' values laid
    end to end (a unit drawn twice, its values twice), found from how often each unit was
    drawn without laying them out: the sorted values are cut into blocks, each with how many
    values every unit has in it, so one product (units × blocks) finds the block holding an
    order statistic, and the drawn weights of that block's values find it there. (Laid out,
    a fleet run's 14 million inter-token latencies were copied and partitioned at each of
    ``RESAMPLES`` draws.)"""

    def __init__(self, values: np.ndarray, units: np.ndarray, n_units: int, scale: float = 1.0) -> None:
        """``values`` in order (each ``/ scale`` a value of the figure) and the unit of each."""
        self.values, self.units, self.scale = values, units, scale
        size = len(values)
        # blocks balancing the product (units × blocks) against a block's walk (size / blocks)
        blocks = max(1, min(size, round(math.sqrt(2 * size / max(n_units, 1)))))
        self.block = -(-size // blocks) if size else 1
        starts = range(0, size, self.block)
        self.per_block = np.zeros((n_units, len(starts)), dtype=np.float64)
        for b, at in enumerate(starts):
            self.per_block[:, b] = np.bincount(self.units[at : at + self.block], minlength=n_units)

    @classmethod
    def sorting(cls, values: np.ndarray, units_of: np.ndarray, n_units: int) -> _Pooled:
        """Of ``values`` in any order (handed over: freed once sorted) and their units."""
        order = np.argsort(values)  # ties in any order: the same values at each place
        ordered = values[order]
        del values  # one copy of them at a time besides the order
        units = units_of[order]
        del order
        return cls(ordered, units, n_units)

    def percentile(self, counts: np.ndarray, q: float) -> float | None:
        """The ``q``th percentile (0-100) of the values of units drawn ``counts`` times each."""
        cum = np.cumsum(counts.astype(np.float64) @ self.per_block).astype(np.int64)
        total = int(cum[-1]) if cum.size else 0
        if total == 0:
            return None
        return percentile_of_ranks(lambda k: self._kth(counts, cum, k), total, q)

    def _kth(self, counts: np.ndarray, cum: np.ndarray, k: int) -> float:
        """The ``k``th (from 0) of the drawn values in order."""
        b = int(np.searchsorted(cum, k, side="right"))
        before = int(cum[b - 1]) if b else 0
        seg = slice(b * self.block, (b + 1) * self.block)
        within = np.cumsum(counts[self.units[seg]])
        return float(self.values[seg][int(np.searchsorted(within, k - before, side="right"))]) / self.scale


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
