"""TraceSink: Parquet parts that read back as one dataset, bounded memory, nothing lost."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from array import array
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.synthetic import synthetic_record
from swarm.trace.manifest import RunManifest, RunStatus, new_run_id
from swarm.trace.reader import list_parts, read_requests, unfinished_parts
from swarm.trace.schema import SCHEMA_VERSION, TRACE_SCHEMA
from swarm.trace.sink import ParquetTraceSink, records_to_batch


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    records = [synthetic_record(i) for i in range(100)]
    with ParquetTraceSink(tmp_path, batch_rows=7) as sink:
        for r in records:
            sink.write(r)
    table = read_requests(tmp_path)
    assert table.num_rows == 100
    assert table.schema.equals(TRACE_SCHEMA, check_metadata=False)
    rows = {row["request_id"]: row for row in table.to_pylist()}
    for r in records:
        row = rows[r.identity.request_id]
        assert row["status"] == r.status.value
        assert row["chunk_ns"] == list(r.chunk_ns)
        assert row["block_hashes"] == list(r.block_hashes)
        assert row["ttft_ns"] == r.ttft_ns and row["cached_tokens"] == r.cached_tokens
        assert row["parent_nodes"] == list(r.identity.parent_nodes)
    meta = pq.read_schema(list_parts(tmp_path)[0]).metadata
    assert meta[b"swarm.schema_version"] == str(SCHEMA_VERSION).encode()


def test_chunk_times_held_as_arrays_write_the_batch_tuples_write(tmp_path: Path) -> None:
    """A simulated record's ``chunk_ns`` is an ``array('q')``, read by its bytes: the batch is
    the one its tuples give, empty and one-time rows and 64-bit values included, in rows
    written one slice at a time; a batch of arrays and tuples together is Arrow's conversion."""
    records = [synthetic_record(i) for i in range(40)]
    records[3] = dataclasses.replace(records[3], chunk_ns=())
    records[5] = dataclasses.replace(records[5], chunk_ns=(2**62 + 7,))
    as_arrays = [dataclasses.replace(r, chunk_ns=array("q", r.chunk_ns)) for r in records]
    assert records_to_batch(as_arrays).equals(records_to_batch(records))
    mixed = [r if i % 2 else as_arrays[i] for i, r in enumerate(records)]
    assert records_to_batch(mixed).equals(records_to_batch(records))
    with ParquetTraceSink(tmp_path, batch_rows=16) as sink:
        for r in as_arrays:
            sink.write(r)
    rows = {row["request_id"]: row for row in read_requests(tmp_path).to_pylist()}
    assert [rows[r.identity.request_id]["chunk_ns"] for r in records] == [list(r.chunk_ns) for r in records]


def test_text_is_written_only_when_asked(tmp_path: Path) -> None:
    import dataclasses

    rec = dataclasses.replace(synthetic_record(0), prompt_parts=("sys", "task"), output_text="answer")
    with ParquetTraceSink(tmp_path / "a") as sink:
        sink.write(rec)
    with ParquetTraceSink(tmp_path / "b", keep_text=True) as sink:
        sink.write(rec)
    assert read_requests(tmp_path / "a").column("output_text").to_pylist() == [None]
    b = read_requests(tmp_path / "b")
    assert b.column("output_text").to_pylist() == ["answer"]
    assert b.column("prompt_parts").to_pylist() == [["sys", "task"]]


def test_parts_rotate_by_rows(tmp_path: Path) -> None:
    with ParquetTraceSink(tmp_path, batch_rows=10, part_rows=25, flush_interval_s=None) as sink:
        for i in range(100):
            sink.write(synthetic_record(i))
    parts = list_parts(tmp_path)
    assert len(parts) == 4  # 30, 30, 30, 10 rows (rotation after whole batches)
    assert read_requests(tmp_path).num_rows == 100


def test_flush_interval_closes_parts_on_a_virtual_clock(tmp_path: Path) -> None:
    now = [0.0]
    sink = ParquetTraceSink(tmp_path, batch_rows=1000, flush_interval_s=5.0, clock=lambda: now[0])
    for i in range(10):
        sink.write(synthetic_record(i))
    sink.maybe_rotate()
    sink.flush()  # waits for the writer thread
    assert list_parts(tmp_path) == []  # nothing due yet
    now[0] = 5.0
    sink.maybe_rotate()
    sink.flush()  # waits for the writer thread
    assert read_requests(tmp_path).num_rows == 10  # rows older than the interval are closed out
    sink.write(synthetic_record(10))
    now[0] = 7.0
    sink.maybe_rotate()
    sink.flush()  # waits for the writer thread
    assert read_requests(tmp_path).num_rows == 10
    sink.close()
    assert read_requests(tmp_path).num_rows == 11


def test_a_full_buffer_goes_to_the_writer_thread_without_waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller (the loop that sends) hands a full batch over and goes on; only a writer two
    batches behind makes it wait, and closing waits for everything."""
    import threading

    release = threading.Event()
    started = threading.Event()
    real_write = ParquetTraceSink._write

    def slow_write(self: ParquetTraceSink, data: object, rows: int) -> None:
        started.set()
        assert release.wait(10)
        real_write(self, data, rows)  # type: ignore[arg-type]

    monkeypatch.setattr(ParquetTraceSink, "_write", slow_write)
    sink = ParquetTraceSink(tmp_path, batch_rows=10, flush_interval_s=None)
    for i in range(20):  # two full batches: the writer holds the first, the second waits
        sink.write(synthetic_record(i))
    assert started.wait(10)
    assert sink.rows_written == 0  # nothing written yet, and the caller was not held
    release.set()
    sink.write(synthetic_record(20))
    sink.close()
    assert sink.rows_written == 21 and sink.rows_lost == 0
    assert read_requests(tmp_path).num_rows == 21


def test_any_error_on_the_writer_thread_is_a_write_failure_with_every_row_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Arrow refusing a row is not an OSError: it still ends writing with a named failure, and
    every row handed over is either in a part or counted lost."""
    import swarm.trace.sink as sink_module
    from swarm.trace.sink import TraceWriteError

    real = sink_module._rows_to_table
    calls = [0]

    def second_batch_fails(rows: list[Any], keep_text: bool, slice_rows: int) -> Any:
        calls[0] += 1
        if calls[0] == 2:
            raise ValueError("a value Arrow cannot convert")
        return real(rows, keep_text, slice_rows)

    monkeypatch.setattr(sink_module, "_rows_to_table", second_batch_fails)
    sink = ParquetTraceSink(tmp_path, batch_rows=10, flush_interval_s=None)
    errors = []
    for i in range(45):  # every record is handed over, as the Dispatcher does, each refusal raised
        try:
            sink.write(synthetic_record(i))
        except TraceWriteError as exc:
            errors.append(str(exc))
    sink.close()  # told already: no second error
    assert errors and "ValueError: a value Arrow cannot convert" in errors[0]
    assert sink.failure is not None
    assert sink.rows_written + sink.rows_lost == 45 and sink.rows_written == 0  # the open part is torn


def test_a_failure_first_met_on_close_is_raised_by_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from swarm.trace.sink import TraceWriteError

    def no_space(self: ParquetTraceSink, data: object, rows: int) -> None:
        raise OSError(28, "No space left on device")

    sink = ParquetTraceSink(tmp_path, batch_rows=1000, flush_interval_s=None)
    for i in range(5):
        sink.write(synthetic_record(i))
    monkeypatch.setattr(ParquetTraceSink, "_write", no_space)
    with pytest.raises(TraceWriteError, match="No space left on device"):
        sink.close()
    sink.close()
    assert sink.rows_lost == 5 and sink.rows_written == 0


def test_interrupted_writer_leaves_readable_parts(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), ParquetTraceSink(tmp_path, batch_rows=16) as sink:
        for i in range(50):
            sink.write(synthetic_record(i))
        raise KeyboardInterrupt
    assert unfinished_parts(tmp_path) == []
    assert read_requests(tmp_path).num_rows == 50


def test_write_batch_from_another_process_format(tmp_path: Path) -> None:
    batch = records_to_batch([synthetic_record(i) for i in range(20)])
    with ParquetTraceSink(tmp_path) as sink:
        sink.write(synthetic_record(99))
        sink.write_batch(batch)
    table = read_requests(tmp_path)
    assert table.num_rows == 21


def test_manifest_round_trip(tmp_path: Path) -> None:
    m = RunManifest(run_id=new_run_id(), seed=7)
    m.write(tmp_path)
    m.status = RunStatus.COMPLETE
    m.counts = {"ok": 3}
    m.write(tmp_path)
    back = RunManifest.read(tmp_path)
    assert back.status is RunStatus.COMPLETE and back.counts == {"ok": 3} and back.seed == 7


def test_empty_run_reads_as_empty_table(tmp_path: Path) -> None:
    ParquetTraceSink(tmp_path).close()
    assert read_requests(tmp_path).num_rows == 0


MILLION = """
import sys
import psutil
from swarm.cluster.worker import peak_rss_bytes
from swarm.trace.sink import ParquetTraceSink
from bench.synthetic import synthetic_record
sink = ParquetTraceSink(sys.argv[1], part_rows=250_000, flush_interval_s=None)
for i in range(2000):
    sink.write(synthetic_record(i))
base = psutil.Process().memory_info().rss
for i in range(2000, 1_000_000):
    sink.write(synthetic_record(i))
sink.close()
peak = peak_rss_bytes()
print(peak - base, base, peak)
"""


@pytest.mark.slow
def test_a_million_records_with_flat_memory(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", MILLION, str(tmp_path)], capture_output=True, text=True, check=True
    )
    growth, base, peak = (int(x) for x in out.stdout.split())
    assert growth < 300 * 2**20, (
        f"peak RSS grew by {growth / 2**20:.0f} MB (base {base / 2**20:.0f} MB, peak {peak / 2**20:.0f} MB)"
    )
    parts = list_parts(tmp_path)
    assert len(parts) == 4
    assert pq.ParquetDataset([str(p) for p in parts]).read(columns=["request_id"]).num_rows == 1_000_000
    con = duckdb.connect()
    n, ok = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE status = 'ok') FROM read_parquet('{tmp_path}/requests/*.parquet')"
    ).fetchone()
    assert n == 1_000_000 and ok == 900_000
    assert isinstance(read_requests(tmp_path, columns=["ttft_ns"]), pa.Table)
