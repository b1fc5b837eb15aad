"""``swarm run`` and ``swarm replay`` as library calls: a source, an executor, the run frame.

Place in the map (docs/architecture.md, "Launch"): the CLI builds a spec and calls one of these.
``execute_run`` makes an AgentSource of the workload; ``execute_replay`` a ReplaySource of the
plan (its manifest says what it replays: ``replay_of``: source, format, source run id, mode,
speed, copies, filters, skipped lines). Both run on the in-process or the Ray executor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from swarm.errors import InputError
from swarm.replay.formats import scale_waits, trace_format
from swarm.replay.plan import ReplayPlan
from swarm.runtime.agent_source import AgentSource
from swarm.runtime.context import ResolvedTarget
from swarm.runtime.executor import Executor, InProcessExecutor
from swarm.runtime.frame import RunResult, run_on_targets
from swarm.runtime.live_stats import RunStats
from swarm.runtime.replay_source import MODES, ReplaySource
from swarm.runtime.specs import RunSpec, TargetSpec, timeouts_of
from swarm.workload.catalog import Catalog
from swarm.workload.tokenizer import Tokenizer
from swarm.workload.workload import Workload, check_mix


def make_executor(
    kind: str = "inprocess",
    *,
    workers: int | None = None,
    address: str | None = None,
    worker_writes: bool = False,
    ray_timeout_s: float = 60.0,
    flush_interval_s: float = 10.0,
    keep_workers: bool = False,
) -> Executor:
    """The executor ``kind`` names; ``keep_workers``: Ray workers live from one target run to the
    next (a sweep's points) instead of one set per run."""
    if kind == "inprocess":
        return InProcessExecutor()
    from swarm.cluster.executor import RayExecutor

    return RayExecutor(
        workers=workers, address=address, worker_writes=worker_writes,
        connect_timeout_s=ray_timeout_s, flush_interval_s=flush_interval_s, keep_workers=keep_workers,
    )  # fmt: skip


def _executor_of(spec: RunSpec) -> Executor:
    return make_executor(
        spec.executor, workers=spec.workers, address=spec.address, worker_writes=spec.worker_writes,
        ray_timeout_s=spec.ray_timeout_s, flush_interval_s=spec.flush_interval_s,
    )  # fmt: skip


def execute_run(
    spec: RunSpec,
    *,
    catalog: Catalog | None = None,
    executor: Executor | None = None,
    on_target_start: Callable[[ResolvedTarget, RunStats], None] | None = None,
    source: str = "run spec",
) -> RunResult:
    """Run ``spec``; returns the run folder and its final manifest. Profiles and topologies
    are resolved first (errors name ``source`` and the field), then targets are probed."""
    check_mix(spec.workload, catalog, source)
    workload = Workload(spec.workload, catalog)
    chosen = executor or _executor_of(spec)
    return run_on_targets(
        spec.targets,
        AgentSource(workload),
        chosen,
        output_dir=spec.output_dir,
        record_text=spec.record_text,
        emulator_args=spec.emulator_args,
        manifest_fields={
            "seed": spec.workload.seed,
            "spec": spec.model_dump(mode="json", exclude={"targets"}),
            "spec_hash": workload.traffic_hash(),
            "workload_digests": workload.content_digests(),
        },
        timeouts=timeouts_of(spec.timeouts),
        max_error_rate=spec.max_error_rate,
        error_window=spec.error_window,
        on_target_start=on_target_start,
        flush_interval_s=spec.flush_interval_s,
        metrics_interval_s=spec.metrics_interval_s,
    )


def execute_replay(
    plan: ReplayPlan,
    targets: list[TargetSpec],
    *,
    mode: str | None = None,
    speed: float = 1.0,
    copies: int = 1,
    max_sessions: int = 0,
    max_in_flight: int = 0,
    tokenizer: Tokenizer | None = None,
    retries: int = 0,
    retry_backoff_s: float = 0.5,
    executor: Executor | None = None,
    output_dir: str = "runs",
    record_text: bool = False,
    emulator_args: list[str] | None = None,
    filters: dict[str, Any] | None = None,
    on_target_start: Callable[[ResolvedTarget, RunStats], None] | None = None,
    max_error_rate: float | None = None,
    error_window: int = 100,
    spec: RunSpec | None = None,
    tool_time_scale: float = 1.0,
) -> RunResult:
    """Send ``plan`` to ``targets`` as a run of its own. ``spec`` (optional) gives the
    settings a run shares with replays: timeouts, metrics and flush intervals, and, when no
    ``executor`` is passed, the executor (without a spec: in process). ``tool_time_scale``
    multiplies the recorded waits between calls (``replay.formats.scale_waits``)."""
    chosen_mode = mode or plan.default_mode
    if tool_time_scale != 1.0:
        if not any(it.gap_s for it in plan.items):
            raise InputError(f"--tool-time-scale: {plan.source} records no waits between calls to scale")
        if chosen_mode == "timed" and trace_format(plan.source_format).offsets != "waits":
            raise InputError(
                "--tool-time-scale scales the waits between calls, which a timed replay does not keep "
                "(its offsets are recorded arrivals): use --mode dependent"
            )
        plan = scale_waits(plan, tool_time_scale)
    if chosen_mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    settings = spec or RunSpec()
    source = ReplaySource(
        plan, mode=chosen_mode, speed=speed, copies=copies, max_sessions=max_sessions,
        max_in_flight=max_in_flight, tokenizer=tokenizer, retries=retries, retry_backoff_s=retry_backoff_s,
    )  # fmt: skip
    return run_on_targets(
        targets,
        source,
        executor or (_executor_of(spec) if spec is not None else InProcessExecutor()),
        output_dir=output_dir,
        record_text=record_text,
        emulator_args=emulator_args or [],
        manifest_fields={
            "kind": "replay",
            # a swarm run's workload, replayed: the same seed and traffic hash as its source
            # (only when it is sent as recorded: once, not copied)
            "seed": plan.source_seed,
            "spec_hash": plan.source_spec_hash if copies == 1 else None,
            "workload_digests": plan.source_digests,
            "replay_of": {
                "source": plan.source,
                "format": plan.source_format,
                "run_id": plan.source_run_id,
                "mode": chosen_mode,
                "speed": speed,
                "requests": len(plan.items),
                "copies": copies,
                "retries": retries,
                "max_sessions": max_sessions,
                "tool_time_scale": tool_time_scale,
                "filters": filters or {},
                "notes": plan.notes,
            },
        },
        timeouts=timeouts_of(settings.timeouts),
        max_error_rate=max_error_rate,
        error_window=error_window,
        on_target_start=on_target_start,
        metrics_interval_s=settings.metrics_interval_s,
        flush_interval_s=settings.flush_interval_s,
    )


def summary_rows(run_dir: str | Any) -> dict[str, dict[str, Any]]:
    from swarm.analysis.summary import summarize_run

    return summarize_run(run_dir)
