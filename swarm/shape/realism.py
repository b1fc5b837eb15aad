"""Realism: how close one workload's shape is to another's, distribution by distribution.

Place in the map (docs/architecture.md, "Shape"): ``swarm realism`` compares a candidate (a run,
or a spec read offline) with a reference (usually a real trace), over the ``features``.

Per feature: count, mean and quantiles (p10, p50, p90, p99) of each side, and the
Kolmogorov-Smirnov distance ``D = max_x |F_candidate(x) - F_reference(x)|`` between the two
empirical CDFs (0: the same distribution; 1: no overlap). A row's verdict:

- ``match``: ``D <= MATCH_D``, or D below the 5 % critical value
  ``1.358 * sqrt((n + m) / (n * m))`` (the samples cannot tell the two apart);
- ``near``: ``D <= NEAR_D``;
- ``far``: beyond;
- ``few``: a side has fewer than ``MIN_VALUES`` values, too few to judge (shown, not judged);
  ``n/a``: a side has none (e.g. no request with parents).

The overall verdict, over the judged rows: ``close`` when every one matches, ``partly`` when
none is far, ``far`` otherwise (naming the far rows); ``unknown`` when no row could be judged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from swarm.shape.features import FEATURES, comparable_features, comparable_features_note
from swarm.shape.table import ShapeTable

MATCH_D = 0.15
NEAR_D = 0.3
MIN_VALUES = 10
QUANTILES = (0.1, 0.5, 0.9, 0.99)


def ks_distance(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    x, y = np.sort(np.asarray(a, dtype=np.float64)), np.sort(np.asarray(b, dtype=np.float64))
    if not x.size or not y.size:
        return math.nan
    grid = np.concatenate([x, y])
    fx = np.searchsorted(x, grid, side="right") / x.size
    fy = np.searchsorted(y, grid, side="right") / y.size
    return float(np.max(np.abs(fx - fy)))


def critical_d(n: int, m: int) -> float:
    """The 5 % critical value of D for samples of n and m values."""
    return 1.358 * math.sqrt((n + m) / (n * m)) if n and m else math.nan


@dataclass(frozen=True)
class SideStats:
    count: int
    mean: float | None
    quantiles: dict[str, float | None]

    @classmethod
    def of(cls, values: Sequence[float]) -> SideStats:
        arr = np.asarray(values, dtype=np.float64)
        if not arr.size:
            return cls(0, None, {f"p{round(q * 100)}": None for q in QUANTILES})
        qs = np.quantile(arr, QUANTILES)
        return cls(
            int(arr.size),
            float(arr.mean()),
            {f"p{round(q * 100)}": float(v) for q, v in zip(QUANTILES, qs, strict=True)},
        )


@dataclass(frozen=True)
class RealismRow:
    feature: str
    label: str
    unit: str
    candidate: SideStats
    reference: SideStats
    ks: float | None
    critical: float | None
    verdict: str  # match, near, far, few, n/a


@dataclass
class RealismReport:
    candidate: str
    reference: str
    rows: list[RealismRow]
    verdict: str
    far: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def row(self, feature: str) -> RealismRow:
        return next(r for r in self.rows if r.feature == feature)


def _verdict(d: float, critical: float, n: int, m: int) -> str:
    if math.isnan(d):
        return "n/a"
    if min(n, m) < MIN_VALUES:
        return "few"
    if d <= MATCH_D or d <= critical:
        return "match"
    return "near" if d <= NEAR_D else "far"


def compare(
    candidate: ShapeTable,
    reference: ShapeTable,
    candidate_values: dict[str, list[float]] | None = None,
    reference_values: dict[str, list[float]] | None = None,
) -> RealismReport:
    """The realism report of ``candidate`` against ``reference`` (see the module docstring);
    the values, when given, are ``comparable_features``'."""
    if candidate_values is None or reference_values is None:
        cv, rv, alone = comparable_features(candidate, reference)
    else:
        cv, rv, alone = candidate_values, reference_values, comparable_features_note(candidate, reference)
    rows = []
    for name, (label, unit) in FEATURES.items():
        a, b = cv[name], rv[name]
        d, crit = ks_distance(a, b), critical_d(len(a), len(b))
        rows.append(
            RealismRow(
                feature=name, label=label, unit=unit, candidate=SideStats.of(a), reference=SideStats.of(b),
                ks=None if math.isnan(d) else d, critical=None if math.isnan(crit) else crit,
                verdict=_verdict(d, crit, len(a), len(b)),
            )
        )  # fmt: skip
    far = [r.feature for r in rows if r.verdict == "far"]
    judged = [r for r in rows if r.verdict not in ("n/a", "few")]
    if not judged:
        verdict = "unknown"
    elif far:
        verdict = "far"
    elif all(r.verdict == "match" for r in judged):
        verdict = "close"
    else:
        verdict = "partly"
    notes = [f"candidate: {n}" for n in candidate.notes] + [f"reference: {n}" for n in reference.notes]
    if alone:
        notes.append(alone)
    missing = [r.feature for r in rows if r.verdict == "n/a"]
    if missing:
        notes.append(f"not compared (a side has no values): {', '.join(missing)}")
    few = [r.feature for r in rows if r.verdict == "few"]
    if few:
        notes.append(f"not judged (fewer than {MIN_VALUES} values on a side): {', '.join(few)}")
    return RealismReport(candidate.source, reference.source, rows, verdict, far, notes)


def _num(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "share":
        return f"{v:.2f}"
    if unit == "s":
        return f"{v:.3g}"
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.3g}"


def text_table(report: RealismReport) -> str:
    """The report as a plain-text table (one line per feature, candidate / reference)."""
    header = ["feature", "n cand/ref", "p10", "p50", "p90", "p99", "KS D", "verdict"]
    lines = [header]
    for r in report.rows:
        qs = [
            f"{_num(r.candidate.quantiles[k], r.unit)} / {_num(r.reference.quantiles[k], r.unit)}"
            for k in ("p10", "p50", "p90", "p99")
        ]
        d = "-" if r.ks is None else f"{r.ks:.3f}"
        lines.append(
            [f"{r.label} ({r.unit})", f"{r.candidate.count} / {r.reference.count}", *qs, d, r.verdict]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    out = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in lines
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)
