"""``swarm run`` and ``swarm replay`` as library calls: a spec, a source, an executor, the run frame.

Place in the map (docs/architecture.md, "Launch"): the CLI builds a spec and calls one of these.
``execute_run`` makes an AgentSource of a ``RunSpec``'s workload; ``execute_replay`` a
ReplaySource of a ``ReplaySpec``'s recorded source (its manifest says what it replays:
``replay_of``: source, format, source run id, mode, speed, copies, filters, skipped lines).
Both send as the spec's ``SendSpec`` part says, on the in-process or the Ray executor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swarm.errors import InputError
from swarm.replay.formats import scale_waits, trace_format
from swarm.replay.plan import ReplayPlan
from swarm.runtime.agent_source import AgentSource
from swarm.runtime.executor import Executor, InProcessExecutor
from swarm.runtime.frame import OnTargetStart, RunResult, run_on_targets
from swarm.runtime.replay_source import ReplaySource
from swarm.runtime.specs import ReplaySpec, RunSpec, SendSpec
from swarm.sim.spec import SimulationSpec
from swarm.workload.catalog import Catalog
from swarm.workload.textsynth import SIMULATED_WORD_TEXT_FROM_WORDS
from swarm.workload.tokenizer import get_tokenizer
from swarm.workload.workload import Workload, check_mix

if TYPE_CHECKING:
    from swarm.sim.executor import SimulatedExecutor


def make_executor(spec: SendSpec, *, keep_workers: bool = False) -> Executor:
    """The executor ``spec`` names; ``keep_workers``: Ray workers live from one target run to the
    next (a sweep's points) instead of one set per run."""
    if spec.executor == "inprocess":
        return InProcessExecutor()
    from swarm.cluster.executor import RayExecutor

    return RayExecutor(
        workers=spec.workers, address=spec.address, worker_writes=spec.worker_writes,
        connect_timeout_s=spec.ray_timeout_s, flush_interval_s=spec.flush_interval_s, keep_workers=keep_workers,
    )  # fmt: skip


def execute_run(
    spec: RunSpec,
    *,
    catalog: Catalog | None = None,
    executor: Executor | None = None,
    on_target_start: OnTargetStart | None = None,
    source: str = "run spec",
) -> RunResult:
    """Run ``spec``; returns the run folder and its final manifest. Profiles and topologies
    are resolved first (errors name ``source`` and the field), then targets are probed."""
    check_mix(spec.workload, catalog, source)
    workload = Workload(spec.workload, catalog)
    return run_on_targets(
        AgentSource(workload, spec.limits(), spec.retry()),
        spec,
        executor or make_executor(spec),
        manifest_fields={
            "seed": spec.workload.seed,
            "spec": spec.model_dump(mode="json", exclude={"targets"}),
            "spec_hash": workload.traffic_hash(),
            "workload_digests": workload.content_digests(),
        },
        on_target_start=on_target_start,
    )


def execute_simulation(
    spec: RunSpec,
    simulation: SimulationSpec,
    *,
    catalog: Catalog | None = None,
    on_target_start: OnTargetStart | None = None,
    source: str = "run spec",
    executor: SimulatedExecutor | None = None,
) -> RunResult:
    """``spec``'s workload sent, in virtual time, to ``simulation``'s engine twins (one target
    each, ``swarm simulate``); the run folder is an ordinary one whose manifest says
    ``simulated``. A spec with targets (URLs) or the Ray executor is refused: a simulation
    models twins, in this process. ``executor``: one made of ``simulation`` (its ``accounts``
    say what each target's run cost)."""
    from swarm.sim.executor import SimulatedExecutor, twin_targets

    _simulable(spec, simulation)
    check_mix(spec.workload, catalog, source)
    workload = Workload(spec.workload, catalog, word_text_from=SIMULATED_WORD_TEXT_FROM_WORDS)
    return run_on_targets(
        AgentSource(workload, spec.limits(), spec.retry()),
        spec,
        executor if executor is not None else SimulatedExecutor(simulation),
        manifest_fields={
            "seed": spec.workload.seed,
            "spec": spec.model_dump(mode="json", exclude={"targets"}),
            "spec_hash": workload.traffic_hash(),
            "workload_digests": workload.content_digests(),
            "simulated": simulation.manifest_entry(),
        },
        on_target_start=on_target_start,
        resolved=twin_targets(simulation),
    )


def _simulable(spec: RunSpec | ReplaySpec, simulation: SimulationSpec) -> None:
    """Refuses what a simulation cannot model: a server at a URL, Ray, no twin."""
    if spec.targets:
        raise InputError(
            f"a simulation models engine twins and cannot simulate a server at a URL "
            f"({', '.join(t.name for t in spec.targets)}): name the twins with --engine, or send over HTTP"
        )
    if spec.executor != "inprocess":
        raise InputError("a simulation runs in this process: --executor ray does not apply")
    if not simulation.twins:
        raise InputError("a simulation needs an engine twin to simulate")


def replay_plan_for(spec: ReplaySpec, plan: ReplayPlan | None = None) -> ReplayPlan:
    """The plan a replay sends: ``plan`` (already read) or the spec's source read, with the
    recorded waits scaled by ``tool_time_scale``."""
    replay = spec.replay
    plan = plan if plan is not None else replay.load()
    if replay.tool_time_scale == 1.0:
        return plan
    if not any(it.gap_s for it in plan.items):
        raise InputError(f"--tool-time-scale: {plan.source} records no waits between calls to scale")
    if (replay.mode or plan.default_mode) == "timed" and trace_format(plan.source_format).offsets != "waits":
        raise InputError(
            "--tool-time-scale scales the waits between calls, which a timed replay does not keep "
            "(its offsets are recorded arrivals): use --mode dependent"
        )
    return scale_waits(plan, replay.tool_time_scale)


def replay_source_for(spec: ReplaySpec, plan: ReplayPlan) -> ReplaySource:
    """The request source of a replay of ``plan`` (already scaled: ``replay_plan_for``)."""
    replay = spec.replay
    mode = replay.mode or plan.default_mode
    if replay.start_at == "mid" and mode != "dependent":
        raise InputError(
            f"--start-at mid: {plan.source} replays {mode} (its format's default); sessions started "
            "mid-life follow their warm-up call: give --mode dependent (a trace with sessions and parents)"
        )
    return ReplaySource(
        plan, mode=mode, speed=replay.speed, copies=replay.copies,
        max_sessions=replay.max_sessions, limits=spec.limits(), retry=spec.retry(),
        tokenizer=get_tokenizer(replay.tokenizer),
        start_ratios=replay.start_ratios if replay.start_at == "mid" else None,
    )  # fmt: skip


def replay_manifest_fields(spec: ReplaySpec, plan: ReplayPlan) -> dict[str, Any]:
    """What a replay's manifest says of its source: a swarm run's workload replayed keeps its
    seed and traffic hash (only when it is sent as recorded: once, not copied)."""
    return {
        "kind": "replay",
        "seed": plan.source_seed,
        "spec_hash": plan.source_spec_hash if spec.replay.copies == 1 else None,
        "workload_digests": plan.source_digests,
        "replay_of": {**spec.replay.record(plan), "retries": spec.retries},
    }


def execute_replay(
    spec: ReplaySpec,
    *,
    plan: ReplayPlan | None = None,
    executor: Executor | None = None,
    on_target_start: OnTargetStart | None = None,
    simulation: SimulationSpec | None = None,
) -> RunResult:
    """Send ``spec``'s recorded source as a run of its own; ``plan``: that source already read
    and its waits scaled (``replay_plan_for``: a sweep reads it once for all its points). With
    ``simulation``, sent in virtual time to its engine twins (``swarm replay --simulate``; the
    refusals of ``execute_simulation``), ``executor`` then one made of it."""
    chosen = plan if plan is not None else replay_plan_for(spec)
    fields = replay_manifest_fields(spec, chosen)
    if simulation is None:
        return run_on_targets(
            replay_source_for(spec, chosen), spec, executor or make_executor(spec),
            manifest_fields=fields, on_target_start=on_target_start,
        )  # fmt: skip
    from swarm.sim.executor import SimulatedExecutor, twin_targets

    _simulable(spec, simulation)
    return run_on_targets(
        replay_source_for(spec, chosen), spec,
        executor if isinstance(executor, SimulatedExecutor) else SimulatedExecutor(simulation),
        manifest_fields={**fields, "simulated": simulation.manifest_entry()},
        on_target_start=on_target_start, resolved=twin_targets(simulation),
    )  # fmt: skip


def summary_rows(run_dir: str | Any) -> dict[str, dict[str, Any]]:
    from swarm.analysis.summary import summarize_run

    return summarize_run(run_dir)
