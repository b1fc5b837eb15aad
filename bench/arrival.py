"""Arrival accuracy: how late sends go on a Poisson schedule, at the highest rate sustained.

In one process (what one Ray worker runs), agents of one call each (16 output tokens, no think
time) arrive as a Poisson process against the zero-delay emulator; each request's lateness is
its ``queue_ns`` (sent minus scheduled). Rates double from 250/s for 6 s each; a rate is
sustained when the sends span at most 5 % more time than the schedule they follow. The figure is the p99 lateness at
the highest sustained rate.
"""

from __future__ import annotations

from pathlib import Path

from bench.common import Row, send_in_process

RATES = (250, 500, 1000, 2000)
SECONDS = 6.0


def at_rate(url: str, rate: float) -> tuple[float, float, float]:
    """(achieved send rate over the scheduled rate of this sample, p50 and p99 lateness ms)."""
    import numpy as np

    from swarm.record import RequestRecord
    from swarm.runtime.agent_source import AgentSource
    from swarm.runtime.context import ResolvedTarget
    from swarm.workload.arrival import ArrivalSpec
    from swarm.workload.catalog import Catalog
    from swarm.workload.workload import MixEntry, Workload, WorkloadSpec

    catalog = Catalog(agent_dirs=[Path(__file__).parent / "profiles"])
    agents = int(rate * SECONDS)
    spec = WorkloadSpec(
        agents=agents,
        mix=[
            MixEntry(
                profile="bench_agent", topology=str(Path(__file__).parent / "profiles" / "one_call.yaml")
            )
        ],
        arrival=ArrivalSpec(process="poisson", rate=rate),
    )
    records: list[RequestRecord] = []
    send_in_process(
        AgentSource(Workload(spec, catalog)),
        ResolvedTarget("t", url, "sglang", "openai-chat", "m"),
        records.append,
        keep_text=False,  # as `swarm run` without --record-text
    )
    sent = np.array([r.sent_ns for r in records], dtype=np.int64)
    scheduled = np.array([r.scheduled_ns for r in records], dtype=np.int64)
    sent_span, scheduled_span = int(sent.max() - sent.min()), int(scheduled.max() - scheduled.min())
    late = np.array([r.queue_ns for r in records], dtype=float) / 1e6
    kept_up = scheduled_span / sent_span if sent_span else 0.0
    return kept_up, float(np.percentile(late, 50)), float(np.percentile(late, 99))


def run() -> list[Row]:
    from swarm.emulator.process import EmulatorProcess

    best: tuple[float, float, float, float] | None = None
    with EmulatorProcess(["--engine", "sglang", "--timing", "zero", "--cache-tokens", "0"]) as emu:
        for rate in RATES:
            kept_up, p50, p99 = at_rate(emu.url, rate)
            if kept_up < 0.95:
                break
            best = (rate, kept_up, p50, p99)
    if best is None:
        return [Row("arrival accuracy: no rate sustained", None, "")]
    rate, _, p50, p99 = best
    return [
        Row(
            f"arrival accuracy: highest Poisson rate sustained (of {', '.join(map(str, RATES))}/s)",
            rate,
            "req/s",
        ),
        Row(f"arrival accuracy at {rate:g}/s: lateness p50", p50, "ms"),
        Row(f"arrival accuracy at {rate:g}/s: lateness p99", p99, "ms"),
    ]
