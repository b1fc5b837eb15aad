"""A sweep's report: every point's figures per target, the fronts, capacity at SLO, the cliff.

Place in the map (docs/architecture.md, "Sweeps"; its analysis, which reads folders on disk
only): reads a sweep folder (``sweep.json`` and its run folders, see ``sweep.manifest``)
and builds one JSON-ready dict that ``swarm report SWEEP_DIR`` prints, writes as ``--json`` or
draws as ``--html`` (``sweep.html``), and that ``swarm compare SWEEP_A SWEEP_B`` sets side by
side. Per point: the steady-window figures (``sweep.point_figures``), the whole-run figures
beside them, validity, and the engine's gauges averaged over the window
(``engine_metrics.window_means``). Over points (``sweep.curves``): the Pareto fronts, capacity
at SLO (with the ratio between targets), the eviction cliff with the KV usage there, the cliff
predicted from the working set against the KV budget (``working_set``), and crossovers."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from swarm.analysis import metrics as m
from swarm.analysis.engine_metrics import read_server_metrics, window_means
from swarm.analysis.intervals import Interval
from swarm.errors import InputError
from swarm.sweep import curves as sc
from swarm.sweep.manifest import PointRun, SweepManifest
from swarm.sweep.point_figures import (
    PointFigures,
    SteadyWindow,
    Validity,
    point_validity,
    pooled_figures,
    repeat_tables,
    steady_window,
    whole_run_window,
)
from swarm.sweep.point_intervals import point_intervals
from swarm.sweep.working_set import WorkingSet, predicted_cliff_load, working_set
from swarm.trace.manifest import RunManifest
from swarm.trace.reader import read_requests_tolerant, without_warmups

log = logging.getLogger(__name__)

#: the two Pareto fronts: (name, x goal, y goal)
FRONTS = (
    ("throughput_vs_interactivity", sc.Goal("interactivity_tokens_per_s", "higher"), sc.Goal("output_tokens_per_s", "higher")),
    ("tasks_vs_completion_time", sc.Goal("tasks.completion_ms.p50", "lower"), sc.Goal("tasks.per_hour", "higher")),
)  # fmt: skip
#: the figures of the whole run kept beside the window's
WHOLE_RUN_FIGURES = (
    "requests_per_s", "output_tokens_per_s", "tasks.per_hour", "ttft_ms.p99", "hit_vs_ideal", "error_rate",
)  # fmt: skip
#: a lead smaller than this share of the larger value is a tie, not a crossover (as ``swarm compare``)
CROSSOVER_TIE = 0.02
#: knobs whose load is the number of live sessions (the working-set prediction applies)
SESSION_KNOBS = ("agents", "sessions")


def slo_bounds(slo: m.SLO, percentile: str) -> list[sc.SloBound]:
    """Each SLO as a bound on that percentile of its figure (``"ttft_ms.p99" <= 500``)."""
    return [
        sc.SloBound(f"{name}.{percentile}", limit)
        for name, limit in slo.__dict__.items()
        if limit is not None
    ]


@dataclass(frozen=True)
class PointResult:
    """One target at one load: figures in the steady window and over the whole run."""

    index: int
    load: float
    target: str
    run_dir: str
    figures: PointFigures
    whole: PointFigures
    validity: Validity
    engine: dict[str, Any]
    working: WorkingSet | None
    #: how the target's prefix cache was emptied before the point (the sweep manifest's record)
    cache_reset: str | None = None
    #: how many times the point was run (``--repeat``); its figures pool them
    repeats: int = 1
    #: from three repeats: the 95 % interval over them of each figure of ``INTERVAL_FIGURES``
    intervals: dict[str, Interval] = field(default_factory=dict)

    def sweep_point(self) -> sc.SweepPoint:
        flat = self.figures.flat()
        for key in ("kv_usage", "cache_usage", "queue", "running"):
            if self.engine.get(key) is not None:
                flat[f"engine.{key}"] = float(self.engine[key])
        return sc.SweepPoint(
            self.load, flat, self.validity.valid, self.validity.reason, late_only=self.validity.late_only
        )

    def as_dict(self) -> dict[str, Any]:
        whole = self.whole.flat()
        return {
            "index": self.index,
            "load": self.load,
            "run_dir": self.run_dir,
            "valid": self.validity.valid,
            "reasons": list(self.validity.reasons),
            "late_only": self.validity.late_only,
            "window": self.figures.window.as_dict(),
            "figures": self.figures.flat(),
            "whole_run": {k: whole.get(k) for k in WHOLE_RUN_FIGURES},
            "engine": self.engine,
            "working_set": self.working.as_dict() if self.working else None,
            "cache_reset": self.cache_reset,
            "repeats": self.repeats,
            "intervals": {k: v.as_dict() for k, v in self.intervals.items()},
        }


def point_result(
    run_dir: str | Path,
    *,
    index: int,
    load: float,
    target: str,
    slo: m.SLO | None,
    steady_fraction: float,
    max_error_rate: float,
) -> PointResult:
    """The figures of ``target``'s rows in one point's run folder. A run of several repeats
    (``--repeat N``) has each repeat's steady window found on its own rows, the figures pooled
    over them (``point_figures.pooled_figures``) and, from three repeats, each headline figure's
    95 % interval over the repeats (``point_intervals``)."""
    table, _bad = read_requests_tolerant(str(run_dir))
    table, _warmups = without_warmups(table)  # mid-life starts' warm-up calls: in no figure
    if table.num_rows and "target" in table.column_names:
        table = table.filter(pc.equal(table["target"], target))
    parts = [
        (t, steady_window(t, steady_fraction) if t.num_rows else whole_run_window(t)) for t in repeat_tables(table)
    ]
    figures = pooled_figures(parts, slo)
    samples = read_server_metrics(str(run_dir))
    engine: dict[str, Any] = {}
    if samples is not None and samples.num_rows:
        engine = _engine_means(samples.filter(pc.equal(samples["target"], target)), [w for _, w in parts])
    first = parts[0][0]
    return PointResult(
        index=index, load=load, target=target, run_dir=str(run_dir), figures=figures,
        whole=pooled_figures([(t, whole_run_window(t)) for t, _ in parts], slo),
        validity=point_validity(figures, max_error_rate=max_error_rate), engine=engine,
        working=working_set(first) if first.num_rows else None, repeats=len(parts),
        intervals=point_intervals(parts, INTERVAL_FIGURES, slo),
    )  # fmt: skip


def _engine_means(samples: pa.Table, windows: list[SteadyWindow]) -> dict[str, Any]:
    """The engine's gauges averaged over each window (``window_means``), then over the windows
    that have a value (a point's repeats: one window each)."""
    each = [window_means(samples, w.start_ns, w.end_ns) for w in windows]
    out = dict(each[0])
    for key, value in out.items():
        if key.endswith("_metric"):
            continue
        values = [e[key] for e in each if e.get(key) is not None]
        out[key] = sum(values) / len(values) if values else value
    return out


def _slo_of(slos: list[str]) -> m.SLO | None:
    try:
        return m.parse_slos(slos) if slos else None
    except ValueError as exc:
        raise InputError(str(exc)) from None


def load_points(
    folder: str | Path, manifest: SweepManifest, slo: m.SLO | None, warnings: list[str] | None = None
) -> dict[str, list[PointResult]]:
    """Every done point of the sweep whose run folder is there, per target in the manifest's
    order; a done point whose folder is gone is left out with a line in ``warnings``."""
    max_error_rate = float(manifest.stop_rules.get("max_error_rate", 0.05))
    out: dict[str, list[PointResult]] = {name: [] for name in manifest.targets}
    for run in manifest.done_runs():
        where = Path(folder) / run.run_dir
        if not (where / "manifest.json").exists():
            if warnings is not None:
                warnings.append(
                    f"{run.target} at {run.load:g}: its run folder {where} is gone (re-run the sweep)"
                )
            continue
        result = point_result(
            where, index=run.index, load=run.load, target=run.target, slo=slo,
            steady_fraction=manifest.steady_fraction, max_error_rate=max_error_rate,
        )  # fmt: skip
        out.setdefault(run.target, []).append(replace(result, cache_reset=run.cache_reset))
    return out


def _manifest_warnings(manifest: SweepManifest) -> list[str]:
    """Points that failed (and were not run again since) and points that started warm."""
    out: list[str] = []
    done = {(p.index, p.target) for p in manifest.done_runs()}
    for p in manifest.points:
        if p.status == "failed" and (p.index, p.target) not in done:
            out.append(f"{p.target} at {p.load:g}: the point failed: {p.status_reason}")
    warm = [p for p in manifest.done_runs() if p.cache_reset == "none" or p.cache_reset.startswith("failed")]
    for p in warm:
        how = "the engine has no way to empty its prefix cache" if p.cache_reset == "none" else p.cache_reset
        if p.index > 0:
            out.append(
                f"{p.target} at {p.load:g}: started warm ({how}); reuse of the earlier point's prompts may count"
            )
    return out


def base_digest(manifest: SweepManifest) -> str:
    """A digest of what every point of the sweep sends (its base workload or replay; whether it
    is simulated is not what it sends)."""
    base = {k: v for k, v in (manifest.definition.get("base") or {}).items() if k != "simulated"}
    text = json.dumps(base, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _engine_of(folder: str | Path, runs: list[PointRun], target: str) -> str | None:
    for run in runs:
        if run.target == target:
            try:
                info = RunManifest.read(Path(folder) / run.run_dir).targets
            except (OSError, ValueError, InputError):
                continue
            return next((t.engine for t in info if t.name == target), None)
    return None


def _cliff_entry(points: list[PointResult], fraction: float) -> dict[str, Any] | None:
    cliff = sc.eviction_cliff([p.sweep_point() for p in points], fraction)
    if cliff is None:
        return None
    out = cliff.as_dict()
    below = next((p for p in points if p.load == cliff.between[1]), None)
    out["kv_usage_there"] = below.engine.get("kv_usage") if below else None
    out["cache_usage_there"] = below.engine.get("cache_usage") if below else None
    return out


def _predicted(points: list[PointResult], budget: int | None, knob: str) -> dict[str, Any] | None:
    """The cliff predicted from the working set at the lowest point (valid, or late only: token
    counts do not depend on the pace) against the budget."""
    if budget is None or knob not in SESSION_KNOBS:
        return None
    base = next(
        (p for p in points if (p.validity.valid or p.validity.late_only) and p.working is not None), None
    )
    if base is None or base.working is None:
        return None
    load = predicted_cliff_load(base.working, budget)
    return {
        "load": load, "budget_tokens": budget, "from_load": base.load, **base.working.as_dict(),
        "assumes": f"every one of the {knob} live at once (arrivals spread over time keep fewer live)",
    }  # fmt: skip


def build_sweep_report(folder: str | Path, slos: list[str] | None = None) -> dict[str, Any]:
    """The whole report of a sweep folder as a JSON-ready dict (see the module docstring).
    ``slos`` judge the points instead of the sweep's own (for a fixed ladder they decide
    nothing about which points ran)."""
    manifest = SweepManifest.read(str(folder))
    if slos is not None:
        manifest.slos = list(slos)
    slo = _slo_of(manifest.slos)
    warnings = _manifest_warnings(manifest)
    points = load_points(folder, manifest, slo, warnings)
    analysis = manifest.definition.get("analysis") or manifest.definition.get("sweep") or {}
    percentile = str(analysis.get("slo_percentile", "p99"))
    bounds = slo_bounds(slo, percentile) if slo else []
    targets: dict[str, Any] = {}
    for name, pts in points.items():
        curve = [p.sweep_point() for p in pts]
        fronts = {key: [p.load for p in sc.pareto_front(curve, x, y)] for key, x, y in FRONTS}
        verdict = sc.fewest_at_slo if manifest.knob in sc.FLEET_KNOBS else sc.capacity_at_slo
        capacity = verdict(curve, bounds).as_dict() if bounds else None
        targets[name] = {
            "engine": _engine_of(folder, manifest.points, name),
            "points": [p.as_dict() for p in pts],
            "fronts": fronts,
            "capacity": capacity,
            "cliff": _cliff_entry(pts, manifest.cliff_fraction),
            "predicted_cliff": _predicted(pts, manifest.kv_budget_tokens, manifest.knob),
            "stopped_by": manifest.stopped_by.get(name),
        }
    names = list(targets)
    crossings: list[dict[str, Any]] = []
    ratios: dict[str, Any] = {}
    figure = "goodput.per_s" if slo else "output_tokens_per_s"
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            for c in sc.crossovers(
                a,
                [p.sweep_point() for p in points[a]],
                b,
                [p.sweep_point() for p in points[b]],
                figure,
                tie_within=CROSSOVER_TIE,
            ):
                crossings.append({"targets": [a, b], **c.as_dict()})
    if bounds and len(names) >= 2:
        first = names[0]
        for n in names[1:]:
            ratio = sc.capacity_ratio(targets[first]["capacity"], targets[n]["capacity"])
            if ratio is not None:
                ratios[f"{n} / {first}"] = ratio
    invalid = [
        f"{name} at {p['load']:g}: {'; '.join(p['reasons'])}"
        for name, t in targets.items()
        for p in t["points"]
        if not p["valid"]
    ]
    return {
        "sweep": {
            "folder": str(folder),
            "sweep_id": manifest.sweep_id,
            "kind": manifest.kind,
            "knob": manifest.knob,
            "status": manifest.status,
            "status_reason": manifest.status_reason,
            "seed": manifest.seed,
            "slos": manifest.slos,
            "slo_percentile": percentile,
            "steady_rule": steady_rule_text(manifest.steady_fraction),
            "cliff_fraction": manifest.cliff_fraction,
            "kv_budget_tokens": manifest.kv_budget_tokens,
            "base_digest": base_digest(manifest),
            "loads": sorted({p.load for pts in points.values() for p in pts}),
            "simulated": (manifest.definition.get("base") or {}).get("simulated"),
        },
        "targets": targets,
        "crossover_figure": figure,
        "crossover_tie_within": CROSSOVER_TIE,
        "crossovers": crossings,
        "capacity_ratios": ratios,
        "invalid_points": invalid,
        "warnings": warnings,
    }


def steady_rule_text(fraction: float) -> str:
    return (
        f"from the first time requests in flight reach {fraction:g} x their time-weighted median "
        f"to the last time they are at or above it (requests sent in between)"
    )


#: the headline columns of the terminal table: (column, figure name in ``figures``)
HEADLINE = (
    ("req/s", "requests_per_s"), ("out tok/s", "output_tokens_per_s"), ("tasks/h", "tasks.per_hour"),
    ("task p50 s", "tasks.completion_ms.p50"), ("TTFT p50", "ttft_ms.p50"), ("TTFT p99", "ttft_ms.p99"),
    ("ITL p50", "itl_ms.p50"), ("TPOT p99", "tpot_ms.p99"), ("tok/s/stream", "interactivity_tokens_per_s"),
    ("hit", "hit_ratio"), ("ideal", "ideal_hit_ratio"), ("hit/ideal", "hit_vs_ideal"),
    ("lost", "misses.lost_share"), ("goodput/s", "goodput.per_s"),
)  # fmt: skip


#: the figures a point of three or more repeats gives with a 95 % interval (``point_intervals``)
INTERVAL_FIGURES = tuple(figure for _, figure in HEADLINE)


def headline_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (target, load) with the headline figures (None where absent), the KV usage
    and validity: what the terminal table prints. A point of several repeats adds ``repeats``
    and, under ``_intervals``, each column's 95 % interval as ``(low, high)``."""
    rows: list[dict[str, Any]] = []
    for name, t in report["targets"].items():
        for p in t["points"]:
            row: dict[str, Any] = {"target": name, "load": p["load"]}
            if p.get("repeats", 1) > 1:
                row["repeats"] = p["repeats"]
            intervals: dict[str, tuple[float, float]] = {}
            for column, figure in HEADLINE:
                scale = 1000 if figure == "tasks.completion_ms.p50" else 1
                value = p["figures"].get(figure)
                row[column] = value / scale if value is not None else None
                interval = (p.get("intervals") or {}).get(figure)
                if interval is not None:
                    intervals[column] = (interval["low"] / scale, interval["high"] / scale)
            if intervals:
                row["_intervals"] = intervals
            if "fleet.imbalance" in p["figures"]:
                row["routed away"] = p["figures"].get("fleet.routed_away_share")
                row["imbalance"] = p["figures"]["fleet.imbalance"]
            row["KV use"] = p["engine"].get("kv_usage")
            if p["engine"].get("cache_usage") is not None:
                row["cache use"] = p["engine"]["cache_usage"]
            row["valid"] = "yes" if p["valid"] else "NO: " + "; ".join(p["reasons"])
            rows.append(row)
    return rows
