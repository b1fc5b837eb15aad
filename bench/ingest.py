"""Driver ingest: how many records a second the driver can take from workers and write.

A Ray worker hands the driver, every half second, the records finished since the last call as
one Arrow record batch (``records_to_batch``, made on the worker). The driver's part is to
receive that batch (Ray moves it as Arrow IPC) and give it to its ``ParquetTraceSink``. Here
the batches are made beforehand (the workers' cost), then timed: IPC serialisation and
deserialisation (what the transfer costs in CPU) and the sink's writes, Parquet files
included. With the records/s one worker produces (the scale case), the quotient says how many
workers one driver can keep up with.
"""

from __future__ import annotations

import tempfile
import time

from bench.common import Row

RECORDS, BATCH = 400_000, 5_000
TARGET = 100_000


def measure() -> float:
    import pyarrow as pa

    from bench.synthetic import synthetic_record
    from swarm.trace.sink import ParquetTraceSink, records_to_batch

    batches = [
        records_to_batch([synthetic_record(i + j) for j in range(BATCH)]) for i in range(0, 50_000, BATCH)
    ]
    rounds = RECORDS // (BATCH * len(batches))
    with tempfile.TemporaryDirectory() as tmp:
        sink = ParquetTraceSink(tmp, writer="driver")
        t0 = time.perf_counter()
        for _ in range(rounds):
            for batch in batches:
                sink_ = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink_, batch.schema) as writer:
                    writer.write_batch(batch)
                received = pa.ipc.open_stream(sink_.getvalue()).read_next_batch()
                sink.write_batch(received)
        sink.close()
        elapsed = time.perf_counter() - t0
    return rounds * len(batches) * BATCH / elapsed


def run(worker_records_per_s: float | None = None) -> list[Row]:
    rate = measure()
    rows = [
        Row(
            "driver ingest: records/s received and written",
            rate,
            "rec/s",
            target=f">= {TARGET:,}",
            met=rate >= TARGET,
        )
    ]
    if worker_records_per_s:
        rows.append(
            Row("driver ingest: workers one driver keeps up with", rate / worker_records_per_s, "workers")
        )
    return rows
