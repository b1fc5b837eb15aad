"""Two sweeps side by side: ``swarm compare SWEEP_A SWEEP_B``.

Place in the map (docs/architecture.md, "Sweeps"; its analysis, which reads folders on disk
only): from two sweep reports (``sweep.report.build_sweep_report``) it builds one dict: a
**series** per (sweep, target), named ``<sweep label>:<target>``; per series its verdicts
(capacity at SLO, eviction cliff, predicted cliff, peak output tokens/s and tasks/hour over
valid points); the capacity ratio of every series to the first; the crossovers between series of
different sweeps on the crossover figure (goodput/s with SLOs in both, else output tokens/s);
and, per load both sweeps measured, the headline figures of every series (with their 95 %
intervals where the points were repeated, ``--repeat``). Sweeps over different
knobs cannot be compared (an ``InputError``); sweeps whose base workload differs are compared
with a warning naming it."""

from __future__ import annotations

from itertools import combinations
from typing import Any

from swarm.errors import InputError
from swarm.sweep import curves as sc
from swarm.sweep.report import CROSSOVER_TIE

#: per-load figures set side by side
LOAD_FIGURES = (
    "output_tokens_per_s", "tasks.per_hour", "ttft_ms.p99", "itl_ms.p50", "hit_vs_ideal", "goodput.per_s",
)  # fmt: skip


def _points(target: dict[str, Any]) -> list[sc.SweepPoint]:
    return [
        sc.SweepPoint(p["load"], p["figures"], p["valid"], "; ".join(p["reasons"]) or None)
        for p in target["points"]
    ]


def _peak(points: list[dict[str, Any]], figure: str) -> float | None:
    values = [p["figures"][figure] for p in points if p["valid"] and p["figures"].get(figure) is not None]
    return max(values) if values else None


def compare_sweeps(reports: list[dict[str, Any]], labels: list[str]) -> dict[str, Any]:
    """The comparison of ``reports`` (two or more), labelled ``labels`` (see the docstring)."""
    if len(reports) < 2:
        raise InputError("compare needs two sweep folders")
    knobs = {r["sweep"]["knob"] for r in reports}
    if len(knobs) > 1:
        raise InputError(
            f"the sweeps vary different knobs ({', '.join(sorted(knobs))}): their loads are not comparable"
        )
    warnings: list[str] = []
    kinds = {r["sweep"]["kind"] for r in reports}
    if len(kinds) > 1:
        warnings.append(f"the sweeps send different kinds of traffic: {', '.join(sorted(kinds))}")
    bases = {r["sweep"].get("base_digest") for r in reports}
    if len(bases) > 1:
        warnings.append(
            "the sweeps send different workloads (base digests "
            + ", ".join(str(r["sweep"].get("base_digest")) for r in reports)
            + "): their differences are not only the engines'"
        )
    seeds = {r["sweep"].get("seed") for r in reports}
    if len(seeds) > 1:
        warnings.append(f"the sweeps' workloads have different seeds: {sorted(map(str, seeds))}")
    series: dict[str, dict[str, Any]] = {}
    curves: dict[str, tuple[int, list[sc.SweepPoint]]] = {}
    intervals: dict[str, dict[float, dict[str, Any]]] = {}  # per series, per load (points of repeats)
    for i, (report, label) in enumerate(zip(reports, labels, strict=True)):
        for name, target in report["targets"].items():
            key = f"{label}:{name}"
            series[key] = {
                "sweep": label,
                "target": name,
                "engine": target.get("engine"),
                "capacity": target.get("capacity"),
                "cliff": target.get("cliff"),
                "predicted_cliff": target.get("predicted_cliff"),
                "peak_output_tokens_per_s": _peak(target["points"], "output_tokens_per_s"),
                "peak_tasks_per_hour": _peak(target["points"], "tasks.per_hour"),
                "invalid_points": sum(1 for p in target["points"] if not p["valid"]),
            }
            curves[key] = (i, _points(target))
            intervals[key] = {p["load"]: p.get("intervals") or {} for p in target["points"]}
    names = list(series)
    ratios: dict[str, float] = {}
    first_cap = (series[names[0]]["capacity"] or {}).get("load") if names else None
    for key in names[1:]:
        cap = (series[key]["capacity"] or {}).get("load")
        if first_cap and cap:
            ratios[f"{key} / {names[0]}"] = cap / first_cap
    with_slo = all(r["sweep"]["slos"] for r in reports)
    figure = "goodput.per_s" if with_slo else "output_tokens_per_s"
    crossings = []
    for a, b in combinations(names, 2):
        if curves[a][0] == curves[b][0]:
            continue  # within one sweep: its own report has them
        for c in sc.crossovers(a, curves[a][1], b, curves[b][1], figure, tie_within=CROSSOVER_TIE):
            crossings.append({"series": [a, b], **c.as_dict()})
    loads = sorted(set.intersection(*[set(r["sweep"]["loads"]) for r in reports])) if reports else []
    by_load = []
    for load in loads:
        row: dict[str, Any] = {"load": load, "series": {}}
        for key, (_i, pts) in curves.items():
            point = next((p for p in pts if p.load == load), None)
            if point is not None:
                row["series"][key] = {
                    "valid": point.valid,
                    **{f: point.figures.get(f) for f in LOAD_FIGURES},
                }
                spread = {f: v for f, v in intervals[key].get(load, {}).items() if f in LOAD_FIGURES}
                if spread:
                    row["series"][key]["intervals"] = spread
        by_load.append(row)
    return {
        "sweeps": [
            {"label": label, "folder": r["sweep"]["folder"]} for r, label in zip(reports, labels, strict=True)
        ],
        "knob": next(iter(knobs)),
        "series": series,
        "capacity_ratios": ratios,
        "crossover_figure": figure,
        "crossovers": crossings,
        "by_load": by_load,
        "warnings": warnings,
    }
