"""How long writing the trace holds up the event loop that sends requests.

A run's records go to its ``ParquetTraceSink`` on the loop that sends and reads (in process, or
on each Ray worker with ``--worker-writes``). Here one loop writes 10,000 records a second (500
every 50 ms, ``bench.synthetic`` records of 16 chunks) for 5 s, about six batches of 8,192 rows,
while a ticker that wakes every millisecond notes how late it woke: the stalls a request in
flight would see in its read times and its sends. Beside it, the same loop without a sink: the
ticker's own lateness on this machine. The garbage collector runs as in an agent run
(``AgentRunCollector``).
"""

from __future__ import annotations

import asyncio
import tempfile
import time

from bench.common import Row

RATE_PER_TICK, TICK_S, SECONDS = 500, 0.05, 5.0
TARGET_MS = 10.0


async def _measure(write: object) -> list[float]:
    from bench.synthetic import synthetic_record

    records = [synthetic_record(i) for i in range(RATE_PER_TICK)]
    late_ms: list[float] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            due = time.perf_counter() + 0.001
            await asyncio.sleep(0.001)
            late_ms.append((time.perf_counter() - due) * 1e3)

    task = asyncio.create_task(ticker())
    end = time.perf_counter() + SECONDS
    while time.perf_counter() < end:
        for record in records:
            write(record)  # type: ignore[operator]
        await asyncio.sleep(TICK_S)
    stop = True
    await task
    return late_ms


def measure(with_sink: bool) -> tuple[float, float]:
    """The ticker's lateness p99 and max, in ms."""
    import numpy as np

    from swarm.runtime.gc_policy import AgentRunCollector
    from swarm.trace.sink import ParquetTraceSink

    with tempfile.TemporaryDirectory() as tmp, AgentRunCollector():  # the collector of an agent run
        sink = ParquetTraceSink(tmp, writer="bench")
        late = asyncio.run(_measure(sink.write if with_sink else (lambda _record: None)))
        sink.close()
    values = np.array(late)
    return float(np.percentile(values, 99)), float(values.max())


def run() -> list[Row]:
    bare_p99, bare_max = measure(with_sink=False)
    p99, worst = measure(with_sink=True)
    tag = "loop stall while the trace is written (10,000 records/s)"
    worst_row = Row(f"{tag}: ticker lateness max", worst, "ms", baseline=bare_max)
    worst_row.ratio = worst / max(bare_max, 1e-9)
    worst_row.target, worst_row.met = f"<= {TARGET_MS:g} ms", worst <= TARGET_MS
    return [
        Row(f"{tag}: ticker lateness p99", p99, "ms", baseline=bare_p99, ratio=p99 / max(bare_p99, 1e-9)),
        worst_row,
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
