"""Replay timing: how closely timed mode keeps recorded gaps.

Two traces of 300 requests are replayed in timed mode against the zero-delay emulator, and the
figure is the p99 of each request's lateness (``queue_ns``: sent minus scheduled, which is
also its error on the recorded gap to the first request):

- Poisson arrivals at 30 requests/s with 200-token prompts, at speed 1 (target: p99 <= 5 ms);
- the first 300 requests of the Mooncake trace in ``../shared/traces`` at speed 10: bursts of
  about 15 requests on the same millisecond with 14,000-token prompts on average, which one
  event loop must send one after another.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np

from bench.common import Row

MOONCAKE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"


def _lateness_ms(plan: object, speed: float) -> np.ndarray:
    from swarm.emulator.process import EmulatorProcess
    from swarm.record import RequestRecord
    from swarm.replay.runner import replay
    from swarm.runner import ResolvedTarget

    records: list[RequestRecord] = []
    with EmulatorProcess(["--engine", "sglang", "--timing", "zero", "--cache-tokens", "0"]) as emu:
        target = ResolvedTarget("t", emu.url, "sglang", "openai-chat", "m")
        asyncio.run(replay(plan, target, records.append, mode="timed", speed=speed))  # type: ignore[arg-type]
    return np.array([r.queue_ns for r in records], dtype=float) / 1e6


def run() -> list[Row]:
    from swarm.replay.importers import Filters, import_trace
    from swarm.replay.plan import ReplayItem, ReplayPlan

    rows: list[Row] = []
    offsets = np.cumsum(np.random.default_rng(1).exponential(1 / 30, 300))
    items = [
        ReplayItem(index=i, offset_s=float(o), prompt_tokens=200, max_tokens=64, block_ids=(i,))
        for i, o in enumerate(offsets)
    ]
    plan = ReplayPlan(items=items, source="poisson", source_format="synthetic")
    rows += _rows("Poisson 30/s, 200-token prompts", _lateness_ms(plan, 1.0))
    if MOONCAKE.is_file():
        mooncake = import_trace(MOONCAKE, "mooncake", Filters(limit=300))
        rows += _rows("Mooncake first 300, speed 10", _lateness_ms(mooncake, 10.0))
    return rows


def _rows(label: str, late: np.ndarray) -> list[Row]:
    """Median and p99 lateness of one replay, the p99 against the 5 ms target."""
    p99 = float(np.percentile(np.abs(late), 99))
    return [
        Row(f"replay timed ({label}): lateness p50", float(np.percentile(late, 50)), "ms"),
        Row(f"replay timed ({label}): lateness p99", p99, "ms", target="<= 5 ms", met=p99 <= 5.0),
    ]


if __name__ == "__main__":
    print(json.dumps([r.__dict__ for r in run()]))
