"""Replay timing: how closely timed mode keeps recorded gaps.

Two traces of 300 requests are replayed in timed mode against the zero-delay emulator. Two
figures per trace, p50 and p99 over its requests:

- gap error: for consecutive requests (in scheduled order), the replayed gap between their
  sends minus the recorded gap (divided by the speed), in absolute value: how well the
  replay keeps the recorded gaps (target: p99 <= 5 ms);
- lateness (``queue_ns``: sent minus scheduled, i.e. the error on the gap to the first
  request): the stricter figure, as errors add up within a burst.

The traces:

- Poisson arrivals at 30 requests/s with 200-token prompts, at speed 1 (target: p99 <= 5 ms);
- the first 300 requests of the Mooncake trace (the project's test data) at speed 10: bursts of
  about 15 requests on the same millisecond with 14,000-token prompts on average, which one
  event loop must send one after another.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.common import Row, invalid_because, labelled, send_in_process

#: the first 300 requests of the Mooncake conversation trace, in the project's test data
MOONCAKE = Path(__file__).resolve().parents[1] / "tests" / "data" / "mooncake_conversation_first300.jsonl"


def _replay_ms(plan: object, speed: float) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Scheduled and sent times of each request (ms, in scheduled order), and why the figures
    cannot be met (requests missing or failed), or None."""
    from swarm.emulator.process import EmulatorProcess
    from swarm.record import RequestRecord
    from swarm.runtime.context import ResolvedTarget
    from swarm.runtime.replay_source import ReplaySource

    records: list[RequestRecord] = []
    with EmulatorProcess(["--engine", "sglang", "--timing", "zero", "--cache-tokens", "0"]) as emu:
        target = ResolvedTarget("t", emu.url, "sglang", "openai-chat", "m")
        send_in_process(ReplaySource(plan, mode="timed", speed=speed), target, records.append)  # type: ignore[arg-type]
    records.sort(key=lambda r: (r.scheduled_ns, r.sent_ns))
    scheduled = np.array([r.scheduled_ns for r in records], dtype=float) / 1e6
    sent = scheduled + np.array([r.queue_ns for r in records], dtype=float) / 1e6
    expected = len(plan.items)  # type: ignore[attr-defined]
    why = invalid_because(expected=expected, requests=len(records), ok=sum(r.ok for r in records))
    return scheduled, sent, why


def run() -> list[Row]:
    from swarm.replay.plan import ReplayItem, ReplayPlan

    rows: list[Row] = []
    offsets = np.cumsum(np.random.default_rng(1).exponential(1 / 30, 300))
    items = [
        ReplayItem(index=i, offset_s=float(o), prompt_tokens=200, max_tokens=64, block_ids=(i,))
        for i, o in enumerate(offsets)
    ]
    plan = ReplayPlan(items=items, source="poisson", source_format="synthetic")
    rows += _rows("Poisson 30/s, 200-token prompts", *_replay_ms(plan, 1.0))
    rows += mooncake_rows(MOONCAKE)
    return rows


def mooncake_rows(path: Path) -> list[Row]:
    """The Mooncake case, or one row that says it was skipped and why (never no row at all)."""
    from swarm.replay.formats import import_trace
    from swarm.replay.reading import Filters

    label = "Mooncake first 300, speed 10"
    if not path.is_file():
        return [Row(f"replay timed ({label}): skipped, no trace at {path}", None, "-")]
    mooncake = import_trace(path, "mooncake", Filters(limit=300))
    return _rows(label, *_replay_ms(mooncake, 10.0))


def _rows(label: str, scheduled_ms: np.ndarray, sent_ms: np.ndarray, why: str | None = None) -> list[Row]:
    """Gap error and lateness of one replay, p50 and p99; the gap error's p99 against 5 ms
    (met only when every request was sent and answered ok)."""
    gap_error = np.abs(np.diff(sent_ms) - np.diff(scheduled_ms))
    late = sent_ms - scheduled_ms
    p99_gap = float(np.percentile(gap_error, 99))
    label = labelled(label, why)
    return [
        Row(f"replay timed ({label}): gap error p50", float(np.percentile(gap_error, 50)), "ms"),
        Row(
            f"replay timed ({label}): gap error p99",
            p99_gap,
            "ms",
            target="<= 5 ms",
            met=why is None and p99_gap <= 5.0,
        ),
        Row(f"replay timed ({label}): lateness p50", float(np.percentile(late, 50)), "ms"),
        Row(f"replay timed ({label}): lateness p99", float(np.percentile(late, 99)), "ms"),
    ]


if __name__ == "__main__":
    print(json.dumps([r.__dict__ for r in run()]))
