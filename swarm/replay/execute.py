"""``swarm replay``: a ReplayPlan sent to targets, written as a run of its own.

Place in the map (DESIGN.md, "replay"): the replay is a run (a new run folder, the same trace
schema) whose manifest says what it replays (``replay_of``: source, format, source run id,
mode, speed, filters, skipped lines).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from swarm.engines.client import Timeouts
from swarm.live_stats import RunStats
from swarm.record import RequestRecord
from swarm.replay.plan import ReplayPlan
from swarm.replay.runner import MODES, replay
from swarm.run import RunResult, TargetSpec, run_async_with_signals, run_on_targets
from swarm.runner import ResolvedTarget, TargetOutcome
from swarm.trace.sink import TraceSink
from swarm.trace.storage import RunStorage


def execute_replay(
    plan: ReplayPlan,
    targets: list[TargetSpec],
    *,
    mode: str | None = None,
    speed: float = 1.0,
    max_in_flight: int = 0,
    output_dir: str = "runs",
    record_text: bool = False,
    emulator_args: list[str] | None = None,
    filters: dict[str, Any] | None = None,
    on_target_start: Callable[[ResolvedTarget, RunStats], None] | None = None,
) -> RunResult:
    chosen_mode = mode or plan.default_mode
    if chosen_mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")

    def send(
        target: ResolvedTarget, sink: TraceSink, stats: RunStats, run_id: str, storage: RunStorage
    ) -> TargetOutcome:
        def on_record(record: RequestRecord) -> None:
            sink.write(record)
            sink.maybe_rotate()

        async def main(stop: asyncio.Event) -> tuple[int, bool]:
            sent = await replay(
                plan, target, on_record, mode=chosen_mode, speed=speed, max_in_flight=max_in_flight,
                run_id=run_id, stats=stats, timeouts=Timeouts(), stop=stop,
            )  # fmt: skip
            return sent, stop.is_set()

        sent, interrupted = run_async_with_signals(main)
        return TargetOutcome(
            requests=sent, agents_started=0, agents_finished=0,
            stop_reason="interrupted" if interrupted else None, interrupted=interrupted,
        )  # fmt: skip

    return run_on_targets(
        targets,
        output_dir=output_dir,
        record_text=record_text,
        emulator_args=emulator_args or [],
        manifest_fields={
            "kind": "replay",
            "replay_of": {
                "source": plan.source,
                "format": plan.source_format,
                "run_id": plan.source_run_id,
                "mode": chosen_mode,
                "speed": speed,
                "requests": len(plan.items),
                "filters": filters or {},
                "notes": plan.notes,
            },
        },
        send=send,
        on_target_start=on_target_start,
    )
