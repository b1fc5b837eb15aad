"""A sweep point's figures with 95 % intervals over its repeats (``swarm sweep --repeat N``).

Place in the map (docs/architecture.md, "Sweeps"; its analysis, which reads folders on disk
only): called by ``sweep.report.point_result`` when a point's run holds three or more repeats.
The bootstrap is ``analysis.intervals``' over repeats: ``RESAMPLES`` times, draw as many repeats
as there are, with replacement (seeded by ``SEED``), and recompute the point's figures on the
drawn repeats, each in its own steady window (``point_figures.pooled_figures``: rows pooled,
window lengths summed; a repeat drawn twice counts twice); an interval is the 2.5th and 97.5th
percentiles of those figures. A draw is a multiset of repeats, so each distinct one is computed
once (10 of them for 3 repeats, 126 for 5).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from swarm.analysis import metrics as m
from swarm.analysis.intervals import MIN_UNITS, RESAMPLES, SEED, Interval, percentile_interval
from swarm.sweep.point_figures import SteadyWindow, pooled_figures


def point_intervals(
    parts: list[tuple[pa.Table, SteadyWindow]], names: Iterable[str], slo: m.SLO | None = None
) -> dict[str, Interval]:
    """The 95 % interval over repeats of each figure in ``names`` (``PointFigures.flat`` names)
    for a point whose repeats are ``parts`` (each repeat's rows and its steady window); empty
    with fewer than ``MIN_UNITS`` repeats, and a figure no draw could compute is left out."""
    n = len(parts)
    if n < MIN_UNITS:
        return {}
    rng = np.random.default_rng(SEED)
    computed: dict[tuple[int, ...], dict[str, float]] = {}
    draws: list[dict[str, float]] = []
    for _ in range(RESAMPLES):
        key = tuple(sorted(int(i) for i in rng.integers(0, n, n)))
        if key not in computed:
            computed[key] = pooled_figures([parts[i] for i in key], slo).flat()
        draws.append(computed[key])
    out: dict[str, Interval] = {}
    for name in names:
        interval = percentile_interval([d[name] for d in draws if name in d], "repeats", n)
        if interval is not None:
            out[name] = interval
    return out
