"""``swarm compare``: the side-by-side matrix of targets, with who leads and by how much.

Place in the map (docs/architecture.md, "Analysis"): one column per target (of one run with several
targets, or of several runs), one row per dimension, and a delta column naming the leader and
the ratio to the runner-up: for a "lower is better" figure ``runner-up / leader``, for a
"higher is better" one ``leader / runner-up`` (so a ratio is always >= 1); below
``1 + TIE_WITHIN`` it is a tie, with no leader, and so is a lead whose 95 % interval
(``intervals``: bootstrap over the targets' repeats, else their sessions, paired when they share
them) reaches 1.0. Runs are compared only when their workloads
are the same (``report.workload_identity``: a dependent replay of a run is the same workload
as the run): otherwise ``WorkloadMismatch``, naming the differing fields in words, unless
forced, and then the result carries the warning. Each run's own report warnings are repeated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from swarm.analysis import metrics as m
from swarm.analysis.figures import Distribution, TargetFigures
from swarm.analysis.fleet import FleetFigures
from swarm.analysis.intervals import FIGURES, Interval, Units, ratio_interval
from swarm.analysis.report import LoadedRun, build_run_report, workload_differences, workload_identity
from swarm.analysis.reuse_loss import default_block_tokens, reuse_loss
from swarm.errors import InputError

#: A lead smaller than this share (2 %) is a tie: the noise between two runs of one workload.
TIE_WITHIN = 0.02


class WorkloadMismatch(InputError):
    """Runs with different workloads; comparing them would compare traffic, not engines."""


@dataclass(frozen=True)
class Dimension:
    """One row of the matrix: its name, unit, which way is better ("lower", "higher", or ""
    for a figure shown with no leader) and how to get it from a target's figures."""

    name: str
    unit: str
    better: str
    get: Callable[[TargetFigures], float | int | None]


def _first(fig: TargetFigures) -> Distribution:
    return fig.first_call_ttft_ms or Distribution()


def _branch(fig: TargetFigures) -> Distribution:
    return fig.branch_call_ttft_ms or Distribution()


def _completion(fig: TargetFigures) -> Distribution:
    return fig.sessions.completion_ms if fig.sessions is not None else Distribution()


DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("requests", "", "", lambda f: f.requests),
    Dimension("peak output tokens/s", "tok/s", "higher", lambda f: f.throughput.peak_output_tokens_per_s),
    Dimension("output tokens/s", "tok/s", "higher", lambda f: f.throughput.output_tokens_per_s),
    Dimension("TTFT p50, first calls", "ms", "lower", lambda f: _first(f).p50),
    Dimension("TTFT p95, first calls", "ms", "lower", lambda f: _first(f).p95),
    Dimension("TTFT p99, first calls", "ms", "lower", lambda f: _first(f).p99),
    Dimension("TTFT p50, branch calls", "ms", "lower", lambda f: _branch(f).p50),
    Dimension("TTFT p95, branch calls", "ms", "lower", lambda f: _branch(f).p95),
    Dimension("TTFT p99, branch calls", "ms", "lower", lambda f: _branch(f).p99),
    Dimension("TTFT p50, all calls", "ms", "lower", lambda f: f.ttft_ms.p50),
    Dimension("ITL p50", "ms", "lower", lambda f: f.itl_ms.p50),
    Dimension("ITL p99", "ms", "lower", lambda f: f.itl_ms.p99),
    Dimension("E2E p50", "ms", "lower", lambda f: f.e2e_ms.p50),
    Dimension("agent task completion p50", "ms", "lower", lambda f: _completion(f).p50),
    Dimension("agent task completion p95", "ms", "lower", lambda f: _completion(f).p95),
    Dimension("cache hit ratio", "", "higher", lambda f: f.cache.hit_ratio),
    Dimension("ideal hit ratio", "", "", lambda f: f.cache.ideal_hit_ratio),
    Dimension("prefill tokens saved", "tok", "higher", lambda f: f.cache.prefill_tokens_saved),
    Dimension("goodput", "req/s", "higher", lambda f: f.goodput.request_goodput_per_s if f.goodput else None),
    Dimension("goodput share", "", "higher", lambda f: f.goodput.good_fraction if f.goodput else None),
    Dimension("error rate", "", "lower", lambda f: f.errors.error_rate),
    Dimension("dispatch lag p99", "ms", "lower", lambda f: f.lag_ms.p99),
)


@dataclass
class Comparison:
    columns: list[str]
    rows: list[dict[str, Any]]  # dimension, unit, better, values (per column), leader, ratio
    workloads: dict[str, dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    emulated: dict[str, bool] = field(default_factory=dict)
    #: per column, where its prefix reuse was lost (``reuse_loss``)
    reuse: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per column that is a fleet, how much of its prompt was missed for routing (``routing``)
    routing: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per column, whether it is a simulated run's (``swarm simulate``)
    simulated: dict[str, bool] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "columns": self.columns,
            "rows": self.rows,
            "workloads": self.workloads,
            "warnings": self.warnings,
            "emulated": self.emulated,
            "reuse": self.reuse,
            "routing": self.routing,
            "simulated": self.simulated,
        }


def routing(fleet: FleetFigures) -> dict[str, Any]:
    """A fleet's hit and its routed-away misses, both over its prompt tokens (``fleet``)."""
    prompt = sum(r.prompt_tokens for r in fleet.replicas)
    routed = sum(r.routed_away for r in fleet.replicas)
    return {
        "replicas": len(fleet.replicas),
        "imbalance": fleet.imbalance,
        "hit": fleet.hit,
        "routed_away_of_prompt": routed / prompt if prompt else None,
        "routed_away_of_misses": fleet.share("routed_away"),
    }


def routing_share(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """Of the hit difference between two fleets (``routing``), the share their routed-away
    misses explain: ``(routed_b - routed_a) / (hit_a - hit_b)``, both over prompt tokens (a
    hit point lost to routing is a prompt token missed while another replica held it); None
    where the hits are equal."""
    if a["hit"] is None or b["hit"] is None or a["routed_away_of_prompt"] is None or b["routed_away_of_prompt"] is None:
        return None
    gap = a["hit"] - b["hit"]
    if abs(gap) < 1e-9:
        return None
    return (b["routed_away_of_prompt"] - a["routed_away_of_prompt"]) / gap


def lead(values: list[float | None], better: str, tie_within: float = 0.0) -> tuple[int | None, float | None]:
    """Index of the leading value and its ratio to the runner-up (>= 1; inf when the
    runner-up is 0 and the leader is not, for a "higher" figure, or the other way round).
    A ratio below ``1 + tie_within`` is a tie: no leader, and the ratio."""
    present = [(v, i) for i, v in enumerate(values) if v is not None and not math.isnan(v)]
    if better not in ("lower", "higher") or len(present) < 2:
        return None, None
    ordered = sorted(present, reverse=better == "higher")
    (best, i), (second, _) = ordered[0], ordered[1]
    if best == second:
        return None, 1.0
    if better == "lower":
        ratio = (second / best) if best > 0 else math.inf
    else:
        ratio = (best / second) if second > 0 else math.inf
    return (None, ratio) if ratio < 1 + tie_within else (i, ratio)


def _top_two(values: list[float | None], better: str) -> tuple[int, int] | None:
    """Positions of the best and second-best values (None: fewer than two, or no direction)."""
    present = [(v, i) for i, v in enumerate(values) if v is not None and not math.isnan(v)]
    if better not in ("lower", "higher") or len(present) < 2:
        return None
    ordered = sorted(present, reverse=better == "higher")
    return ordered[0][1], ordered[1][1]


def _lead_interval(
    dim: Dimension, values: list[float | None], columns: list[tuple[str, LoadedRun, str]], units: dict[int, Units]
) -> Interval | None:
    """The 95 % interval of the top value's ratio to the next (``intervals.ratio_interval``), for
    a dimension that has a resampled figure (``intervals.FIGURES``)."""
    stat = FIGURES.get(dim.name)
    top = _top_two(values, dim.better)
    if stat is None or top is None:
        return None
    for i in top:
        if i not in units:
            _, run, target = columns[i]
            units[i] = Units(run.rows_of(target))
    a, b = top
    return ratio_interval(units[a].table, units[b].table, stat, dim.better, units[a], units[b])


def compare(
    runs: list[LoadedRun], slo: m.SLO | None = None, *, force: bool = False, tie_within: float = TIE_WITHIN,
    intervals: bool = True, across_clocks: bool = False,
) -> Comparison:  # fmt: skip
    """The matrix for every target of ``runs``; a lead smaller than ``tie_within`` (a share:
    0.05 is 5 %), or whose 95 % interval (``intervals``: over repeats, or sessions) reaches 1.0,
    is a tie. The runs' own warnings (a generator that fell behind, an emulator that could not
    keep its model, failures) come first: they make a verdict suspect. Simulated columns beside
    measured ones name no leader unless ``across_clocks`` (``clocks_verdict``)."""
    named = [(r.manifest.run_id, r.manifest) for r in runs]
    identities = {rid: workload_identity(mf) for rid, mf in named}
    warnings = []
    differences = workload_differences(named) if len(runs) > 1 else []
    if differences:
        message = "the runs' workloads differ: " + "; ".join(differences)
        if not force:
            raise WorkloadMismatch(f"{message}; compare them anyway with --force")
        warnings.append(f"{message}: differences may come from the traffic, not the engines")
    reports = [build_run_report(run, slo, intervals=False) for run in runs]
    for run, report in zip(runs, reports, strict=True):
        prefix = f"{run.manifest.run_id}: " if len(runs) > 1 else ""
        warnings += [prefix + w for w in report.warnings]
    columns: list[tuple[str, LoadedRun, str]] = []
    all_targets = [t for r in runs for t in r.targets()]
    figures = []
    fleet_of: list[FleetFigures | None] = []
    for run, report in zip(runs, reports, strict=True):
        for target in run.targets():
            label = target if all_targets.count(target) == 1 else f"{run.manifest.run_id}:{target}"
            columns.append((label, run, target))
            figures.append(report.targets[target].figures)
            fleet_of.append(report.targets[target].fleet)
    if len(columns) < 2:
        raise InputError("compare needs at least two targets (one run with several, or several runs)")
    emulated = {
        label: any(t.emulated for t in run.manifest.targets if t.name == target)
        for label, run, target in columns
    }
    rows = []
    units: dict[int, Units] = {}
    for dim in DIMENSIONS:
        if dim.name.startswith("goodput") and slo is None:
            continue
        values = [None if (v := dim.get(f)) is None else float(v) for f in figures]
        if all(v is None for v in values):
            continue
        leader, ratio = lead(values, dim.better, tie_within)
        interval = _lead_interval(dim, values, columns, units) if intervals else None
        tie_by_interval = leader is not None and interval is not None and interval.low <= 1.0
        rows.append(
            {
                "dimension": dim.name,
                "unit": dim.unit,
                "better": dim.better,
                "values": values,
                "leader": columns[leader][0] if leader is not None and not tie_by_interval else None,
                "ratio": ratio,
                "tie": (leader is None and ratio is not None) or tie_by_interval,
                "interval": interval.as_dict() if interval is not None else None,
            }
        )
    reuse = {}
    for label, run, target in columns:
        info = next((t for t in run.manifest.targets if t.name == target), None)
        engine = info.engine if info else ""
        stated = (info.server_info or {}).get("block_tokens") if info else None
        block = int(stated or default_block_tokens(engine))
        reuse[label] = reuse_loss(run.rows_of(target), block, engine).as_dict()
    fleets = {
        label: routing(fleet) for (label, _, target), fleet in zip(columns, fleet_of, strict=True) if fleet is not None
    }
    simulated = {label: run.manifest.simulated is not None for label, run, _ in columns}
    if (note := clocks_verdict(simulated, rows, across_clocks)) is not None:
        warnings.insert(0, note)
    return Comparison(
        columns=[c[0] for c in columns], rows=rows, workloads=identities, warnings=warnings, emulated=emulated,
        reuse=reuse, routing=fleets, simulated=simulated,
    )  # fmt: skip


def clocks_verdict(simulated: dict[str, bool], rows: list[dict[str, Any]], across_clocks: bool) -> str | None:
    """Simulated columns beside measured ones: a simulated figure is a model's, so no row names a
    leader (``withheld``) unless ``across_clocks``; either way a warning naming each side (None
    when all columns are of one kind)."""
    if len(set(simulated.values())) < 2:
        return None
    sides = ", ".join(f"{label} {'simulated' if sim else 'measured'}" for label, sim in simulated.items())
    if across_clocks:
        return f"simulated and measured side by side ({sides}): leaders named as asked (--across-clocks)"
    for row in rows:
        if row["leader"] is not None:
            row["leader"], row["withheld"] = None, True
    return (
        f"simulated and measured side by side ({sides}): no leader named, as a simulated figure is a "
        "model's and a measured one a server's (--across-clocks to name them anyway)"
    )
