"""``swarm compare``: the side-by-side matrix of targets, with who leads and by how much.

Place in the map (DESIGN.md, "Analysis"): one column per target (of one run with several
targets, or of several runs), one row per dimension, and a delta column naming the leader and
the ratio to the runner-up: for a "lower is better" figure ``runner-up / leader``, for a
"higher is better" one ``leader / runner-up`` (so a ratio is always >= 1). Runs are compared
only when their workloads are the same (``report.workload_identity``): otherwise
``WorkloadMismatch`` unless forced, and then the result carries the warning.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from swarm.analysis import metrics as m
from swarm.analysis.report import LoadedRun, workload_identity
from swarm.errors import InputError


class WorkloadMismatch(InputError):
    """Runs with different workloads; comparing them would compare traffic, not engines."""


@dataclass(frozen=True)
class Dimension:
    name: str
    unit: str
    better: str  # "lower", "higher" or "" (shown, no leader)
    get: Callable[[dict[str, Any]], float | None]


def _d(*path: str) -> Callable[[dict[str, Any]], float | None]:
    def get(figures: dict[str, Any]) -> float | None:
        value: Any = figures
        for key in path:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return None if value is None else float(value)

    return get


DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("requests", "", "", _d("requests")),
    Dimension("peak output tokens/s", "tok/s", "higher", _d("throughput", "peak_output_tokens_per_s")),
    Dimension("output tokens/s", "tok/s", "higher", _d("throughput", "output_tokens_per_s")),
    Dimension("TTFT p50, first calls", "ms", "lower", _d("first_call_ttft_ms", "p50")),
    Dimension("TTFT p95, first calls", "ms", "lower", _d("first_call_ttft_ms", "p95")),
    Dimension("TTFT p99, first calls", "ms", "lower", _d("first_call_ttft_ms", "p99")),
    Dimension("TTFT p50, branch calls", "ms", "lower", _d("branch_call_ttft_ms", "p50")),
    Dimension("TTFT p95, branch calls", "ms", "lower", _d("branch_call_ttft_ms", "p95")),
    Dimension("TTFT p99, branch calls", "ms", "lower", _d("branch_call_ttft_ms", "p99")),
    Dimension("TTFT p50, all calls", "ms", "lower", _d("ttft_ms", "p50")),
    Dimension("ITL p50", "ms", "lower", _d("itl_ms", "p50")),
    Dimension("ITL p99", "ms", "lower", _d("itl_ms", "p99")),
    Dimension("E2E p50", "ms", "lower", _d("e2e_ms", "p50")),
    Dimension("agent task completion p50", "ms", "lower", _d("sessions", "completion_ms", "p50")),
    Dimension("agent task completion p95", "ms", "lower", _d("sessions", "completion_ms", "p95")),
    Dimension("cache hit ratio", "", "higher", _d("cache", "hit_ratio")),
    Dimension("ideal hit ratio", "", "", _d("cache", "ideal_hit_ratio")),
    Dimension("prefill tokens saved", "tok", "higher", _d("cache", "prefill_tokens_saved")),
    Dimension("goodput", "req/s", "higher", _d("goodput", "request_goodput_per_s")),
    Dimension("goodput share", "", "higher", _d("goodput", "good_fraction")),
    Dimension("error rate", "", "lower", _d("errors", "error_rate")),
    Dimension("client queue p99", "ms", "lower", _d("queue_ms", "p99")),
)


@dataclass
class Comparison:
    columns: list[str]
    rows: list[dict[str, Any]]  # dimension, unit, better, values (per column), leader, ratio
    workloads: dict[str, dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    emulated: dict[str, bool] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "columns": self.columns,
            "rows": self.rows,
            "workloads": self.workloads,
            "warnings": self.warnings,
            "emulated": self.emulated,
        }


def lead(values: list[float | None], better: str) -> tuple[int | None, float | None]:
    """Index of the leading value and its ratio to the runner-up (>= 1; inf when the
    runner-up is 0 and the leader is not, for a "higher" figure, or the other way round)."""
    present = [(v, i) for i, v in enumerate(values) if v is not None and not math.isnan(v)]
    if better not in ("lower", "higher") or len(present) < 2:
        return None, None
    ordered = sorted(present, reverse=better == "higher")
    (best, i), (second, _) = ordered[0], ordered[1]
    if best == second:
        return None, 1.0
    if better == "lower":
        return i, (second / best) if best > 0 else math.inf
    return i, (best / second) if second > 0 else math.inf


def compare(runs: list[LoadedRun], slo: m.SLO | None = None, *, force: bool = False) -> Comparison:
    """The matrix for every target of ``runs``."""
    identities = {r.manifest.run_id: workload_identity(r.manifest) for r in runs}
    distinct = {repr(sorted(v.items())) for v in identities.values()}
    warnings = []
    if len(distinct) > 1:
        lines = "; ".join(f"{rid}: {ident}" for rid, ident in identities.items())
        message = f"the runs' workloads differ ({lines})"
        if not force:
            raise WorkloadMismatch(f"{message}; compare them anyway with --force")
        warnings.append(f"{message}: differences may come from the traffic, not the engines")
    columns: list[tuple[str, LoadedRun, str]] = []
    all_targets = [t for r in runs for t in r.targets()]
    for run in runs:
        for target in run.targets():
            label = target if all_targets.count(target) == 1 else f"{run.manifest.run_id}:{target}"
            columns.append((label, run, target))
    if len(columns) < 2:
        raise InputError("compare needs at least two targets (one run with several, or several runs)")
    figures = [m.summary_figures(run.rows_of(target), slo) for _, run, target in columns]
    emulated = {
        label: any(t.emulated for t in run.manifest.targets if t.name == target)
        for label, run, target in columns
    }
    rows = []
    for dim in DIMENSIONS:
        if dim.name.startswith("goodput") and slo is None:
            continue
        values = [dim.get(f) for f in figures]
        if all(v is None for v in values):
            continue
        leader, ratio = lead(values, dim.better)
        rows.append(
            {
                "dimension": dim.name,
                "unit": dim.unit,
                "better": dim.better,
                "values": values,
                "leader": columns[leader][0] if leader is not None else None,
                "ratio": ratio,
            }
        )
    return Comparison(
        columns=[c[0] for c in columns], rows=rows, workloads=identities, warnings=warnings, emulated=emulated
    )
