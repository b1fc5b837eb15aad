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
from swarm.runtime.sources import RequestSource
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
    workload: Workload, target: ResolvedTarget, agent_ids: Sequence[int] | None = None, **run: Any
) -> list[RequestRecord]:
    return send(AgentSource(workload, agent_ids), target, **run)[0]


def send_replay(
    plan: ReplayPlan, target: ResolvedTarget, *, stop_after_s: float | None = None, **source: Any
) -> tuple[list[RequestRecord], TargetOutcome]:
    return send(ReplaySource(plan, **source), target, stop_after_s=stop_after_s)


def replay_one_at_a_time(plan: ReplayPlan, url: str, output_dir: str) -> Any:
    """``plan`` replayed through ``execute_replay`` against the sglang emulator at ``url``, one
    request at a time, its waits scaled to 0; the run must complete with every request ok.
    Returns the run's request rows (a pyarrow Table)."""
    import pyarrow.compute as pc

    from swarm.launch import execute_replay
    from swarm.runtime.specs import TargetSpec
    from swarm.trace.reader import read_requests

    result = execute_replay(
        plan, [TargetSpec(name="emu", url=url, engine="sglang")], max_in_flight=1,
        output_dir=output_dir, tool_time_scale=0.0,
    )  # fmt: skip
    assert result.manifest.status.value == "complete"
    table = read_requests(result.run_dir)
    assert pc.all(pc.equal(table["status"], "ok")).as_py()
    return table
