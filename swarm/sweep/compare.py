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

#: a twin's figures held against its engine's (issue: engine twins), and the bound each must meet
#: the figures a twin's (or a simulation's) error is given for; the hit ratio last
ERROR_FIGURES = ("ttft_ms.p50", "ttft_ms.p99", "output_tokens_per_s", "e2e_ms.p50", "tasks.completion_ms.p50", "hit_ratio")
ERROR_BOUND = 0.15
#: a hit ratio within this many points of the engine's is within, whatever its relative error
#: (past a cliff both are near 0: 0.06 against 0.00 is -100 %)
HIT_DIFF_BOUND = 0.05

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
    simulated = [r["sweep"].get("simulated") is not None for r in reports]
    if len(set(simulated)) > 1:
        sides = ", ".join(f"{label} {'simulated' if sim else 'measured'}" for label, sim in zip(labels, simulated, strict=True))
        warnings.append(
            f"simulated and measured sweeps side by side ({sides}): their differences are the twins' "
            "model error, not a verdict between engines"
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
    for key in names[1:]:
        ratio = sc.capacity_ratio(series[names[0]]["capacity"], series[key]["capacity"])
        if ratio is not None:
            ratios[f"{key} / {names[0]}"] = ratio
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
        "errors": errors_against_first(
            curves, names, reports[0]["sweep"]["loads"],
            {k: (s["cliff"] or {}).get("load") for k, s in series.items()},
        ),
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


def _relative(reference: float | None, value: float | None) -> float | None:
    """``(value - reference) / reference``; 0 when both are 0 (a hit ratio both engines lost
    whole), None when only the reference is 0 or either is missing."""
    if reference is None or value is None:
        return None
    if reference == 0:
        return 0.0 if value == 0 else None
    return (value - reference) / reference


def _ladder_step(load: float | None, ladder: list[float]) -> float | None:
    """Where ``load`` falls on ``ladder``, in steps (1.5: halfway between the second and third)."""
    if load is None or not ladder:
        return None
    if load <= ladder[0]:
        return 0.0
    for i in range(1, len(ladder)):
        if load <= ladder[i]:
            return i - 1 + (load - ladder[i - 1]) / (ladder[i] - ladder[i - 1])
    return float(len(ladder) - 1)


def errors_against_first(
    curves: dict[str, tuple[int, list[sc.SweepPoint]]],
    names: list[str],
    ladder: list[float],
    cliffs: dict[str, float | None] | None = None,
) -> dict[str, Any]:
    """Each series' figures against the first's (the reference: the engine, when a twin's sweep
    is compared with it): per load both measured and per figure of ``ERROR_FIGURES``, the
    relative error ``(series - reference) / reference`` (and for the hit ratio its difference
    in points: within ``HIT_DIFF_BOUND`` it is within whatever its relative error); ``worst``,
    the largest error that counts, and whether it is within ``ERROR_BOUND``; and the eviction
    cliff's distance in ladder steps (within: at most one): each series' own (``cliffs``, as
    its sweep report found it), else found here from the points."""
    if len(names) < 2:
        return {}

    def cliff_of(key: str) -> float | None:
        if cliffs is not None and key in cliffs:
            return cliffs[key]
        found = sc.eviction_cliff(curves[key][1])
        return found.load if found else None

    ref_name = names[0]
    ref_points = {p.load: p for p in curves[ref_name][1]}
    ref_cliff = cliff_of(ref_name)
    out: dict[str, Any] = {"reference": ref_name, "bound": ERROR_BOUND, "series": {}}
    for key in names[1:]:
        rows, worst = [], 0.0
        for point in curves[key][1]:
            ref = ref_points.get(point.load)
            if ref is None:
                continue
            row: dict[str, Any] = {"load": point.load}
            for figure in ERROR_FIGURES:
                a, b = ref.figures.get(figure), point.figures.get(figure)
                err = _relative(a, b)
                row[figure] = err
                if figure == "hit_ratio":  # near nothing, a relative error says little: the points too
                    row["hit_ratio.diff"] = None if a is None or b is None else b - a
                    if row["hit_ratio.diff"] is not None and abs(row["hit_ratio.diff"]) <= HIT_DIFF_BOUND:
                        continue
                if err is not None:
                    worst = max(worst, abs(err))
            rows.append(row)
        cliff = cliff_of(key)
        ref_step = _ladder_step(ref_cliff, ladder)
        step = _ladder_step(cliff, ladder)
        cliff_steps = None if ref_step is None or step is None else step - ref_step
        out["series"][key] = {
            "by_load": rows,
            "worst": worst,
            "within": worst <= ERROR_BOUND
            and ((cliff_steps is not None and abs(cliff_steps) <= 1) or (ref_cliff is None and cliff is None)),
            "cliff_steps": cliff_steps,
            "cliffs": [ref_cliff, cliff],
        }
    return out


def twin_error(errors: dict[str, Any], twin: str) -> tuple[dict[str, float], float | None]:
    """From ``errors_against_first``'s result, the twin series' largest error per figure over
    the loads (relative, as a share; the hit ratio in points) and its cliff's distance in
    ladder steps: what a calibration file records of it (``HeldAgainst``)."""
    series = errors["series"][twin]
    worst: dict[str, float] = {}
    for row in series["by_load"]:
        for figure in ERROR_FIGURES:
            value = row.get("hit_ratio.diff") if figure == "hit_ratio" else row.get(figure)
            if value is not None:
                worst[figure] = max(worst.get(figure, 0.0), abs(float(value)))
    return worst, series["cliff_steps"]
