"""Curves and verdicts over a sweep's load points: Pareto fronts, capacity at SLO, the eviction
cliff, crossovers.

Place in the map (docs/architecture.md, "Sweeps"; its analysis, which reads folders on disk
only): pure functions over lists of ``SweepPoint`` (a load value, a point's figures by name, its
validity), one list per target; the points' figures come from ``sweep.point_figures``
(``PointFigures.flat`` names them: ``"output_tokens_per_s"``, ``"ttft_ms.p99"``,
``"tasks.per_hour"``, ``"hit_vs_ideal"``, ``"goodput.per_s"``, ...).

Rules every function shares: invalid points are left out (the generator's own delay never
passes for the engine's); a point without the figure a function reads is left out of that
function; points are taken in increasing load. "Interpolated" means linearly, on the load axis,
between the two points that bracket the crossing of the figure in question.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

from swarm.sweep.point_figures import PointFigures, Validity

Better = Literal["higher", "lower"]


@dataclass(frozen=True)
class SweepPoint:
    """One target at one load: the load knob's value, its figures by name, whether it is valid
    and why not."""

    load: float
    figures: Mapping[str, float] = field(default_factory=dict)
    valid: bool = True
    reason: str | None = None
    #: invalid only because the generator fell behind: its cache figures still stand (the
    #: engine counts cached tokens whatever the pace), so the eviction cliff keeps it
    late_only: bool = False

    @classmethod
    def of(cls, load: float, figures: PointFigures, validity: Validity) -> SweepPoint:
        return cls(
            load=load, figures=figures.flat(), valid=validity.valid, reason=validity.reason,
            late_only=validity.late_only,
        )  # fmt: skip

    def value(self, figure: str) -> float | None:
        return self.figures.get(figure)

    def as_dict(self) -> dict[str, Any]:
        return {"load": self.load, "figures": dict(self.figures), "valid": self.valid, "reason": self.reason}


@dataclass(frozen=True)
class Goal:
    """A figure and which way is better."""

    figure: str
    better: Better = "higher"

    def at_least_as_good(self, a: float, b: float) -> bool:
        return a >= b if self.better == "higher" else a <= b


@dataclass(frozen=True)
class SloBound:
    """A bound a figure must meet: ``value <= limit`` when lower is better, ``value >= limit``
    when higher is better; a point without the figure fails it."""

    figure: str
    limit: float
    better: Better = "lower"

    def met(self, value: float | None) -> bool:
        if value is None:
            return False
        return value <= self.limit if self.better == "lower" else value >= self.limit

    def describe(self) -> str:
        return f"{self.figure} {'<=' if self.better == 'lower' else '>='} {self.limit:g}"


def _in_order(points: Iterable[SweepPoint], *figures: str, keep_late: bool = False) -> list[SweepPoint]:
    """Valid points (and with ``keep_late`` those invalid only for lateness) that have every
    named figure, by increasing load."""
    return sorted(
        (
            p
            for p in points
            if (p.valid or (keep_late and p.late_only)) and all(p.value(f) is not None for f in figures)
        ),
        key=lambda p: p.load,
    )


def _at(load_a: float, value_a: float, load_b: float, value_b: float, level: float) -> float:
    """The load where the line through ``(load_a, value_a)`` and ``(load_b, value_b)`` reaches
    ``level``: ``load_a + (level − value_a) / (value_b − value_a) × (load_b − load_a)``."""
    if value_b == value_a:
        return load_a
    return load_a + (level - value_a) / (value_b - value_a) * (load_b - load_a)


def pareto_front(points: Iterable[SweepPoint], x: Goal, y: Goal) -> list[SweepPoint]:
    """The valid points no other valid point dominates, in load order. ``q`` dominates ``p``
    when ``q`` is at least as good as ``p`` on both figures and better on one (equal points
    dominate neither)."""
    pts = _in_order(points, x.figure, y.figure)

    def xy(p: SweepPoint) -> tuple[float, float]:
        vx, vy = p.value(x.figure), p.value(y.figure)
        assert vx is not None and vy is not None
        return vx, vy

    def dominates(q: SweepPoint, p: SweepPoint) -> bool:
        (qx, qy), (px, py) = xy(q), xy(p)
        return x.at_least_as_good(qx, px) and y.at_least_as_good(qy, py) and (qx, qy) != (px, py)

    return [p for p in pts if not any(dominates(q, p) for q in pts)]


#: knobs of a simulated fleet (``--simulate``), not of what is sent: the twins' replicas. More
#: of it is more capacity, not more load: its verdict is ``fewest_at_slo``
FLEET_KNOBS: tuple[str, ...] = ("replicas",)


@dataclass(frozen=True)
class Capacity:
    """The highest load meeting every SLO bound.

    - ``load``: the interpolated load, or None when the lowest valid point already fails
      (capacity below the ladder), or the top load when no point fails (``at_least`` is then
      True: the capacity is at least that);
    - ``limiting``: the bound that failed first (None when none failed);
    - ``between``: the last passing and first failing loads the value was interpolated
      between.
    """

    load: float | None
    at_least: bool = False
    limiting: str | None = None
    between: tuple[float, float] | None = None
    #: the fewest of a knob that adds capacity (replicas: ``fewest_at_slo``) rather than the
    #: most load; ``at_most``: the lowest point already met every SLO
    fewest: bool = False
    at_most: bool = False

    def describe(self) -> str:
        if self.fewest:
            if self.load is None:
                return "no valid point" if self.limiting is None else f"above the top load: it still fails {self.limiting}"
            if self.at_most:
                return f"at most the lowest load {self.load:g}: every point met the SLOs"
            tested = f", between {self.between[0]:g} and {self.between[1]:g} tested" if self.between else ""
            return f"{self.load:g} (limited by {self.limiting}{tested})"
        if self.load is None:
            if self.limiting is None:
                return "no valid point"
            return f"below the lowest load: it already fails {self.limiting}"
        if self.at_least:
            return f"at least the top load {self.load:g}: no point failed an SLO"
        return f"{self.load:g} (limited by {self.limiting})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "load": self.load,
            "at_least": self.at_least,
            "limiting": self.limiting,
            "between": list(self.between) if self.between else None,
            "fewest": self.fewest,
            "at_most": self.at_most,
            "text": self.describe(),
        }


def capacity_at_slo(points: Iterable[SweepPoint], bounds: Sequence[SloBound]) -> Capacity:
    """The load at which the first SLO bound breaks, walking valid points by load.

    With ``a`` the last point meeting every bound and ``b`` the first that does not, each bound
    ``b`` fails gives the load where its figure crosses its limit on the line from ``a`` to
    ``b`` (``a``'s value meets the limit, ``b``'s does not, so that load lies in ``[a, b]``; a
    figure ``b`` lacks gives ``a``'s load); the capacity is the lowest of those. Points past the
    first failure are not looked at: a load that passes again above a failing one is not
    capacity."""
    pts = _in_order(points)
    if not pts:
        return Capacity(load=None)
    last_pass: SweepPoint | None = None
    for p in pts:
        failed = [b for b in bounds if not b.met(p.value(b.figure))]
        if not failed:
            last_pass = p
            continue
        if last_pass is None:
            return Capacity(load=None, limiting=failed[0].describe())
        a = last_pass
        crossings = []
        for b in failed:
            va, vb = a.value(b.figure), p.value(b.figure)
            load = a.load if va is None or vb is None else _at(a.load, va, p.load, vb, b.limit)
            crossings.append((load, b.describe()))
        load, limiting = min(crossings, key=lambda c: c[0])
        return Capacity(load=load, limiting=limiting, between=(a.load, p.load))
    return Capacity(load=pts[-1].load, at_least=True)


def capacity_ratio(base: Mapping[str, Any] | None, other: Mapping[str, Any] | None) -> float | None:
    """How much more ``other`` carries than ``base`` at their SLOs (``Capacity.as_dict``s):
    the ratio of their capacities, or for the fewest replicas each needs, its inverse (half the
    replicas is twice the capacity). None where either has no value, or they differ in kind."""
    if not base or not other or bool(base.get("fewest")) != bool(other.get("fewest")):
        return None
    a, b = base.get("load"), other.get("load")
    if not a or not b:
        return None
    return float(a) / float(b) if base.get("fewest") else float(b) / float(a)


def fewest_at_slo(points: Iterable[SweepPoint], bounds: Sequence[SloBound], *, whole: bool = True) -> Capacity:
    """The least of a knob that adds capacity (a fleet's replicas) at which every SLO bound
    holds, walking valid points by load: with ``b`` the first point meeting every bound and
    ``a`` the valid point before it, each bound ``a`` fails gives the load where its figure
    crosses its limit on the line from ``a`` to ``b``, and the value is the highest of those
    (every bound must hold); a figure either lacks gives ``b``'s load; with ``whole`` (replicas
    come whole), that load rounded up. The lowest point meeting them all gives ``at_most``; none
    meeting them, no value and the bound the top point fails."""
    pts = _in_order(points)
    if not pts:
        return Capacity(load=None, fewest=True)
    before: SweepPoint | None = None
    for p in pts:
        failed = [b for b in bounds if not b.met(p.value(b.figure))]
        if failed:
            before = p
            continue
        if before is None:
            return Capacity(load=p.load, fewest=True, at_most=True)
        crossings = []
        for b in bounds:
            if b.met(before.value(b.figure)):
                continue
            va, vb = before.value(b.figure), p.value(b.figure)
            load = p.load if va is None or vb is None else _at(before.load, va, p.load, vb, b.limit)
            crossings.append((load, b.describe()))
        load, limiting = max(crossings, key=lambda c: c[0])
        if not math.isfinite(load):  # a figure that is not a number: no crossing to find
            load = p.load
        if whole:
            load = float(min(math.ceil(load - 1e-9), p.load))
        return Capacity(load=load, limiting=limiting, between=(before.load, p.load), fewest=True)
    last = pts[-1]
    return Capacity(
        load=None, limiting=next(b.describe() for b in bounds if not b.met(last.value(b.figure))), fewest=True
    )


@dataclass(frozen=True)
class Cliff:
    """Where ``figure`` first fell below ``fraction`` of its value at the lowest valid load
    (``base``): the interpolated ``load``, the ``threshold`` (``fraction × base``) and the two
    loads it lies between."""

    load: float
    figure: str
    fraction: float
    base: float
    threshold: float
    between: tuple[float, float]

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "between": list(self.between)}


def eviction_cliff(
    points: Iterable[SweepPoint], fraction: float = 0.5, figure: str = "hit_vs_ideal"
) -> Cliff | None:
    """The load at which ``figure`` (by default realised hit / ideal hit) first falls below
    ``fraction × base``, ``base`` being its value at the lowest valid load; interpolated
    between the point before and the first point below (``_at``). None when it never does, or
    when there are fewer than two points or the base is not positive.

    Unlike the timing curves, it keeps points that are invalid only because the generator fell
    behind its schedule (``SweepPoint.late_only``): hit ratios are the engine's counts of cached
    tokens, which a late generator does not distort (it lowers the pace, not which contexts are
    live). Points invalid for any other reason are left out."""
    pts = _in_order(points, figure, keep_late=True)
    if len(pts) < 2:
        return None
    base = pts[0].value(figure)
    assert base is not None
    if base <= 0:
        return None
    threshold = fraction * base
    for a, b in pairwise(pts):
        va, vb = a.value(figure), b.value(figure)
        assert va is not None and vb is not None
        if vb < threshold:
            return Cliff(
                load=_at(a.load, va, b.load, vb, threshold), figure=figure, fraction=fraction,
                base=base, threshold=threshold, between=(a.load, b.load),
            )  # fmt: skip
    return None


@dataclass(frozen=True)
class Crossover:
    """Where one target's figure overtakes the other's: the interpolated ``load``, who led
    before and who leads after, and the two loads it lies between."""

    load: float
    figure: str
    leader_before: str
    leader_after: str
    between: tuple[float, float]

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "between": list(self.between)}


def crossovers(
    a_name: str,
    a_points: Iterable[SweepPoint],
    b_name: str,
    b_points: Iterable[SweepPoint],
    figure: str = "goodput.per_s",
    tie_within: float = 0.0,
) -> list[Crossover]:
    """Every load at which the lead on ``figure`` changes hands, in load order (empty: one
    target leads, or ties, throughout).

    Over the loads where both targets have a valid point with the figure, ``d = a − b``. A
    crossover lies between consecutive loads whose ``d`` have opposite signs, at the load where
    the line between them reaches 0: ``L1 + d1 / (d1 − d2) × (L2 − L1)``. A tie (``d = 0``) at
    a load is skipped over: the crossover is the tie's load when the signs either side
    differ. With ``tie_within`` > 0, a difference of at most that share of the larger value
    (``|a − b| ≤ tie_within × max(|a|, |b|)``) is a tie: noise between equals is no crossover."""
    b_at = {p.load: p for p in _in_order(b_points, figure)}
    diffs: list[tuple[float, float]] = []
    for p in _in_order(a_points, figure):
        q = b_at.get(p.load)
        if q is not None:
            va, vb = p.value(figure), q.value(figure)
            assert va is not None and vb is not None
            d = va - vb
            if abs(d) <= tie_within * max(abs(va), abs(vb)):
                d = 0.0
            diffs.append((p.load, d))
    out: list[Crossover] = []
    prev: tuple[float, float] | None = None  # the last load with d != 0
    tie: float | None = None  # the first tie since then
    for load, d in diffs:
        if d == 0:
            tie = load if tie is None else tie
            continue
        if prev is not None and (prev[1] > 0) != (d > 0):
            at = tie if tie is not None else _at(prev[0], prev[1], load, d, 0.0)
            leaders = (a_name, b_name) if prev[1] > 0 else (b_name, a_name)
            out.append(Crossover(at, figure, leaders[0], leaders[1], between=(prev[0], load)))
        prev, tie = (load, d), None
    return out
