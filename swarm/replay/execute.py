"""``swarm replay``: a ReplayPlan sent to targets, written as a run of its own.

Place in the map (docs/architecture.md, "replay"): the replay is a run (a new run folder, the same trace
schema) whose manifest says what it replays (``replay_of``: source, format, source run id,
mode, speed, filters, skipped lines).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from swarm.breaker import CircuitBreaker
from swarm.engines.client import Timeouts
from swarm.live_stats import RunStats
from swarm.record import RequestRecord
from swarm.replay.plan import ReplayPlan
from swarm.replay.runner import MODES, replay
from swarm.run import RunResult, TargetSpec, run_async_with_signals, run_on_targets
from swarm.runner import ResolvedTarget, TargetOutcome
from swarm.trace.sink import TraceSink, TraceWriteError
from swarm.trace.storage import RunStorage

log = logging.getLogger(__name__)


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
    max_error_rate: float | None = None,
    error_window: int = 100,
) -> RunResult:
    chosen_mode = mode or plan.default_mode
    if chosen_mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")

    def send(
        target: ResolvedTarget, sink: TraceSink, stats: RunStats, run_id: str, storage: RunStorage
    ) -> TargetOutcome:
        breaker = CircuitBreaker(max_error_rate, error_window) if max_error_rate else None
        halt_reason: list[str] = []

        async def main(stop: asyncio.Event) -> tuple[int, bool]:
            def halt(reason: str) -> None:  # stop as for a signal, with a reason of our own
                if not halt_reason:
                    halt_reason.append(reason)
                    log.error("stopping the replay: %s", reason)
                    stop.set()

            def on_record(record: RequestRecord) -> None:
                try:
                    sink.write(record)
                    sink.maybe_rotate()
                except TraceWriteError as exc:
                    halt(str(exc))
                if breaker is not None:
                    reason = breaker.observe(record.status.value)
                    if reason is not None:
                        halt(reason)

            sent = await replay(
                plan, target, on_record, mode=chosen_mode, speed=speed, max_in_flight=max_in_flight,
                run_id=run_id, stats=stats, timeouts=Timeouts(), stop=stop,
            )  # fmt: skip
            return sent, stop.is_set() and not halt_reason

        sent, interrupted = run_async_with_signals(main)
        return TargetOutcome(
            requests=sent, agents_started=0, agents_finished=0,
            stop_reason="interrupted" if interrupted else (halt_reason[0] if halt_reason else None),
            interrupted=interrupted, halt_reason=halt_reason[0] if halt_reason else None,
        )  # fmt: skip

    return run_on_targets(
        targets,
        output_dir=output_dir,
        record_text=record_text,
        emulator_args=emulator_args or [],
        manifest_fields={
            "kind": "replay",
            # a swarm run's workload, replayed: the same seed and traffic hash as its source
            "seed": plan.source_seed,
            "spec_hash": plan.source_spec_hash,
            "workload_digests": plan.source_digests,
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
