"""Exact percentiles of nanosecond values read a piece at a time, in bounded memory.

Place in the map (docs/architecture.md, "Analysis"): ``ns_distribution`` is
``metrics.distribution`` of values that come in pieces from a function that can give them
again (a run's inter-token latencies and client lag: one value per chunk, 82 million in a
simulated fleet run of 4,800 agents for five minutes, hundreds of millions at the sizes
simulation is for), in milliseconds (``value / 1e6``). Its count, percentiles and max are
those ``distribution`` finds over the values laid end to end, to the last bit; its mean is
the exact sum's, rounded once. What it holds does not grow with the values' count: at most
``HELD_VALUES`` values in the first pass, then one count per bucket; in the second, the
distinct values of the (at most ten) buckets needed, each with its count:

1. One pass counts the values, sums them exactly (integers) and keeps their largest. While
   they are few (``HELD_VALUES``), it keeps them too, and the percentiles are numpy's over
   them; past that, it counts how many fall in each of ``2**20`` buckets instead (a bucket:
   a float64's sign, exponent and top 8 bits of mantissa, so buckets are in the values'
   order and each spans 1/256 of its magnitude).
2. Each order statistic a percentile needs (numpy's 'linear' method: the two ranks around
   ``(count − 1) × q / 100``) lies in a bucket the counts name; a second pass keeps only
   the values of those buckets, each distinct value once with how often it came, and
   finds them there.

``numpy_lerp`` is numpy's interpolation between two order statistics, the same operations
in the same order; ``analysis.intervals`` draws its percentiles through it too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from swarm.analysis.metrics import PERCENTILES, distribution, percentile_key

#: values held as they come (32 MiB of int64) before they are counted in buckets instead
HELD_VALUES = 1 << 22
#: a bucket is a value's float64 bits but the lowest ``_BUCKET_SHIFT``: 2**20 buckets
_BUCKET_SHIFT = 44
_BUCKETS = 1 << (64 - _BUCKET_SHIFT)

NsPieces = Callable[[], Iterable[np.ndarray]]
"""Gives a figure's values (int64 nanoseconds) again, a piece at a time, each time called."""


def numpy_lerp(a: float, b: float, gamma: float) -> float:
    """``np.percentile``'s linear interpolation from ``a`` (the lower order statistic) to
    ``b`` by ``gamma``: from the nearer end, as numpy's ``_lerp`` computes it."""
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def percentile_of_ranks(kth: Callable[[int], float], count: int, q: float) -> float:
    """The ``q``th percentile (0-100) of ``count`` values whose ``k``th in order (from 0) is
    ``kth(k)``, as ``np.percentile`` ('linear') finds it."""
    virtual = (count - 1) * (q / 100)  # numpy's virtual index
    below = math.floor(virtual)
    lo = min(below, count - 1)
    a = kth(lo)
    b = a if lo + 1 > count - 1 else kth(lo + 1)
    return numpy_lerp(a, b, virtual - below)


def _ranks(count: int) -> list[int]:
    """The order statistics ``PERCENTILES`` read, for ``count`` values."""
    ranks: set[int] = set()
    for q in PERCENTILES:
        lo = min(math.floor((count - 1) * (q / 100)), count - 1)
        ranks.update((lo, min(lo + 1, count - 1)))
    return sorted(ranks)


def _buckets(values: np.ndarray) -> np.ndarray:
    """Each value's bucket, in the values' order: the top bits of its float64 with the sign
    bit set for values at or above 0 and every bit flipped for those below."""
    bits = values.astype(np.float64).view(np.uint64)
    if values.min() >= 0:  # the usual case: the sign bit clear, set in place
        bits >>= np.uint64(_BUCKET_SHIFT)
        bits |= np.uint64(1 << (63 - _BUCKET_SHIFT))
        return bits.view(np.int64)
    keys = np.where(bits >> np.uint64(63), ~bits, bits | np.uint64(1 << 63))
    return (keys >> np.uint64(_BUCKET_SHIFT)).astype(np.int64)


def _exact_sum(values: np.ndarray) -> int:
    """The sum of int64 values, exact (as two sums that cannot overflow: their high and low
    32 bits)."""
    high = int(np.sum(values >> 32, dtype=np.int64))
    low = int(np.sum(values & 0xFFFFFFFF, dtype=np.int64))
    return (high << 32) + low


class _Bucket:
    """The distinct values of one bucket with how often each came, merged as pieces come."""

    def __init__(self) -> None:
        self.values = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)
        self._pending: list[np.ndarray] = []
        self._pending_n = 0

    def add(self, values: np.ndarray) -> None:
        if values.size:
            self._pending.append(values)
            self._pending_n += values.size
            # merged when the new values outnumber a sixteenth of those held before, or the
            # distinct ones kept: memory a few times that, the merges' work linear overall
            if self._pending_n > max(HELD_VALUES // 16, self.values.size):
                self._merge()

    def _merge(self) -> None:
        if not self._pending:
            return
        new = np.concatenate(self._pending)
        self._pending, self._pending_n = [], 0
        values, inverse = np.unique(np.concatenate([self.values, new]), return_inverse=True)
        weights = np.concatenate([self.counts, np.ones(new.size, dtype=np.int64)])
        self.values = values
        self.counts = np.bincount(inverse, weights=weights, minlength=values.size).astype(np.int64)

    def kth(self, k: int) -> int:
        """The ``k``th (from 0) of the bucket's values in order."""
        self._merge()
        return int(self.values[int(np.searchsorted(np.cumsum(self.counts), k, side="right"))])


def ns_distribution(pieces: NsPieces) -> dict[str, float | int | None]:
    """``metrics.distribution`` of every value ``pieces`` gives, ``/ 1e6`` (nanoseconds to
    milliseconds): the same keys, count, percentiles and max; the mean is ``Σ values / (count
    × 1e6)`` from the exact sum, rounded once (numpy's mean of the milliseconds rounds each
    value and its partial sums). ``pieces`` is read once, or twice past ``HELD_VALUES``."""
    count, total, most = 0, 0, None
    held: list[np.ndarray] | None = []
    in_bucket = np.zeros(0, dtype=np.int64)
    for piece in pieces():
        values = np.asarray(piece, dtype=np.int64)
        if not values.size:
            continue
        count += values.size
        total += _exact_sum(values)
        top = int(values.max())
        most = top if most is None else max(most, top)
        if held is not None:
            held.append(values)
            if count <= HELD_VALUES:
                continue
            values = np.concatenate(held)
            held, in_bucket = None, np.zeros(_BUCKETS, dtype=np.int64)
        in_bucket += np.bincount(_buckets(values), minlength=_BUCKETS)
    if held is not None or most is None:  # few: numpy's percentiles over them all
        laid_out = np.concatenate(held).astype(np.float64) / 1e6 if held else np.zeros(0)
        out = distribution(laid_out, scratch=True)
    else:
        out = _from_buckets(pieces, in_bucket, count, float(most) / 1e6)
    if count:
        out["mean"] = total / (count * 1_000_000)
    return out


def _from_buckets(pieces: NsPieces, in_bucket: np.ndarray, count: int, most_ms: float) -> dict[str, Any]:
    """The percentiles from each value's bucket counted (``in_bucket``): a second pass keeps
    the values of the buckets that hold the order statistics needed."""
    cum = np.cumsum(in_bucket)
    where: dict[int, tuple[int, int]] = {}  # rank: its bucket, its place among the bucket's
    for k in _ranks(count):
        b = int(np.searchsorted(cum, k, side="right"))
        where[k] = (b, k - (int(cum[b - 1]) if b else 0))
    kept = {b: _Bucket() for b, _ in where.values()}
    wanted = np.fromiter(kept, dtype=np.int64)
    for piece in pieces():
        values = np.asarray(piece, dtype=np.int64)
        if not values.size:
            continue
        buckets = _buckets(values)
        hit = np.isin(buckets, wanted)
        if not hit.any():
            continue
        values, buckets = values[hit], buckets[hit]
        for b, bucket in kept.items():
            bucket.add(values[buckets == b])

    def kth(k: int) -> float:
        b, within = where[k]
        return float(kept[b].kth(within)) / 1e6

    out: dict[str, Any] = {"count": count, "mean": None}
    for q in PERCENTILES:
        out[percentile_key(q)] = percentile_of_ranks(kth, count, q)
    out["max"] = most_ms
    return out
