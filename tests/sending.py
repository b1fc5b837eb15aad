"""Test support: a source sent to one target in this process, its records collected in memory."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from swarm.record import RequestRecord
from swarm.replay.plan import ReplayPlan
from swarm.runtime.agent_source import AgentSource
from swarm.runtime.context import ResolvedTarget, TargetOutcome, TargetRun
from swarm.runtime.loop import drive, stop_conditions_for
from swarm.runtime.replay_source import ReplaySource
from swarm.runtime.retry import RetryPolicy
from swarm.runtime.sources import RequestSource, SendLimits
from swarm.trace.sink import RecordBuffer
from swarm.workload.workload import Workload

#: An agent profile that keeps sending: short prompts, 8-token answers, 50 ms of thinking
#: between calls (the tests that kill something mid-run use it).
STEADY_PROFILE = """\
name: steady
system_prompt: {style: prose, tokens: 100}
task_tokens: {dist: constant, value: 20}
instruction_tokens: {dist: constant, value: 8}
output_tokens: {default: {dist: constant, value: 8}}
think_time_s: {dist: constant, value: 0.05}
"""


def send(
    source: RequestSource, target: ResolvedTarget, *, stop_after_s: float | None = None, **run: Any
) -> tuple[list[RequestRecord], TargetOutcome]:
    """Run ``source`` against ``target`` (text kept in the records unless told otherwise);
    ``stop_after_s``: interrupt the run that long after it began."""
    buffer = RecordBuffer()
    target_run = TargetRun(source, target, buffer, **{"keep_text": True, **run})

    async def main() -> TargetOutcome:
        stop = stop_conditions_for(target_run, _placement())
        if stop_after_s is not None:
            asyncio.get_running_loop().call_later(stop_after_s, stop.interrupt)
        return await drive(target_run, stop=stop)

    outcome = asyncio.run(main())
    return buffer.records, outcome


def _placement() -> Any:
    from swarm.runtime.clocks import Placement

    return Placement()


def send_agents(
    workload: Workload,
    target: ResolvedTarget,
    agent_ids: Sequence[int] | None = None,
    limits: SendLimits | None = None,
    retry: RetryPolicy | None = None,
    **run: Any,
) -> list[RequestRecord]:
    return send(AgentSource(workload, limits, retry, agent_ids), target, **run)[0]


def send_replay(
    plan: ReplayPlan,
    target: ResolvedTarget,
    *,
    stop_after_s: float | None = None,
    max_in_flight: int = 0,
    retries: int = 0,
    retry_backoff_s: float = 0.5,
    **source: Any,
) -> tuple[list[RequestRecord], TargetOutcome]:
    """``plan`` as a ReplaySource (``source``: its mode, speed, copies, ...) with an in-flight cap
    and retries as ``SendSpec`` would give them."""
    replay = ReplaySource(
        plan, limits=SendLimits(max_in_flight), retry=RetryPolicy(retries, retry_backoff_s), **source
    )
    return send(replay, target, stop_after_s=stop_after_s)


def replay_spec(targets: Sequence[Any], **settings: Any) -> Any:
    """A ``ReplaySpec`` sent in this process: ``settings`` named as its fields, the replay's
    (``mode``, ``speed``, ``copies``, ``tool_time_scale``, ...) and the sending's (``max_in_flight``,
    ``retries``, ``output_dir``, ...) alike."""
    from swarm.replay.source_spec import ReplaySourceSpec
    from swarm.runtime.specs import ReplaySpec

    replay = {k: settings.pop(k) for k in list(settings) if k in ReplaySourceSpec.model_fields}
    return ReplaySpec(targets=list(targets), replay=ReplaySourceSpec(**replay), **{"executor": "inprocess", **settings})


def replay_run(
    plan: ReplayPlan, targets: Sequence[Any], *, executor: Any = None, on_target_start: Any = None, **settings: Any
) -> Any:
    """``plan`` replayed by ``launch.execute_replay`` (``replay_spec``'s settings; ``executor``
    an Executor, or its name); the RunResult."""
    from swarm.launch import execute_replay, replay_plan_for

    if isinstance(executor, str):
        settings["executor"], executor = executor, None
    spec = replay_spec(targets, **settings)
    return execute_replay(
        spec, plan=replay_plan_for(spec, plan), executor=executor, on_target_start=on_target_start
    )


def replay_one_at_a_time(plan: ReplayPlan, url: str, output_dir: str) -> Any:
    """``plan`` replayed through ``execute_replay`` against the sglang emulator at ``url``, one
    request at a time, its waits scaled to 0; the run must complete with every request ok.
    Returns the run's request rows (a pyarrow Table)."""
    import pyarrow.compute as pc

    from swarm.runtime.specs import TargetSpec
    from swarm.trace.reader import read_requests

    result = replay_run(
        plan, [TargetSpec(name="emu", url=url, engine="sglang")], max_in_flight=1,
        output_dir=output_dir, tool_time_scale=0.0,
    )  # fmt: skip
    assert result.manifest.status.value == "complete"
    table = read_requests(result.run_dir)
    assert pc.all(pc.equal(table["status"], "ok")).as_py()
    return table


def sent_to_unbounded(wl: Workload, emulators: Any) -> list[RequestRecord]:
    """``wl`` sent to an emulator of its own (``emulators``: the conftest's factory) with an
    unbounded cache, one request in flight; every record ok."""
    emu = emulators(engine="sglang", timing="zero", cache_capacity_tokens=None)
    target = ResolvedTarget("t", emu.url, "sglang", "openai-chat", "m")
    records = send_agents(wl, target, limits=SendLimits(max_in_flight=1))
    assert records and all(r.ok for r in records)
    return records
