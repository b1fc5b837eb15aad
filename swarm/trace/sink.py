"""TraceSink: streams RequestRecords into Parquet parts in bounded batches.

Place in the map (docs/architecture.md, "The trace"): the TraceSink seam, fed by the Dispatcher (or, on a cluster, by the
driver with batches from workers). Memory stays flat however long the run: records are
appended as row tuples into a buffer of at most ``batch_rows`` rows, which a writer thread
turns into one Parquet row group and writes out (the caller's event loop does not wait for
Arrow or the disk). A part file is written under
a ``.inprogress`` name and renamed to ``part-<writer>-<seq>.parquet`` when closed, so every
file that carries the ``.parquet`` suffix is complete and readable; parts rotate every
``part_rows`` rows, and at the latest every ``flush_interval_s`` seconds of wall time, which
bounds what an abrupt kill can take away.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import operator
import os
import threading
import time
from array import array
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from swarm.record import IDENTITY_COLUMNS, RECORD_COLUMNS, RequestRecord
from swarm.trace.schema import TRACE_SCHEMA
from swarm.trace.storage import RunStorage

log = logging.getLogger(__name__)

REQUESTS_DIR = "requests"
PART_SUFFIX = ".parquet"
INPROGRESS_SUFFIX = ".inprogress"


class TraceWriteError(OSError):
    """The trace could not be written (a full disk, a lost mount, permissions). Parts closed
    before the failure stay complete and readable; the rows not written are counted."""


class TraceSink(Protocol):
    """Where finished RequestRecords go. ``write`` and ``write_batch`` raise TraceWriteError
    when the trace cannot be written; ``failure`` then says why and ``rows_lost`` counts the
    rows handed over that never reached storage."""

    rows_lost: int
    failure: str | None

    def write(self, record: RequestRecord) -> None: ...

    def write_batch(self, batch: pa.RecordBatch) -> None: ...

    def maybe_rotate(self) -> None: ...

    def close(self) -> None: ...


class RecordBuffer:
    """A TraceSink that keeps records in memory: tests and library callers read ``records``;
    a cluster worker hands them to the driver with ``take`` (the driver writes them)."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.rows_lost = 0
        self.failure: str | None = None

    def write(self, record: RequestRecord) -> None:
        self.records.append(record)

    def write_batch(self, batch: pa.RecordBatch) -> None:
        raise TypeError("a RecordBuffer holds records, not Arrow batches")

    def maybe_rotate(self) -> None:
        return None

    def close(self) -> None:
        return None

    def take(self) -> list[RequestRecord]:
        """The records written since the last ``take``."""
        taken, self.records = self.records, []
        return taken


def records_to_batch(records: list[RequestRecord], *, keep_text: bool = False) -> pa.RecordBatch:
    """Convert records to one Arrow batch of the trace schema (used to ship them between processes)."""
    return _rows_to_batch([_row(record) for record in records], keep_text)


_TEXT_COLUMNS = ("prompt_parts", "prompt_roles", "output_text")
#: a record's trace columns, identity first, read in one C call each (a row is a tuple, and the
#: rows become columns once per batch: far cheaper per record than appending to 45 lists)
_IDENTITY_ROW = operator.attrgetter(*IDENTITY_COLUMNS)
_RECORD_ROW = operator.attrgetter(*RECORD_COLUMNS)
_ROW_NAMES = (*IDENTITY_COLUMNS, *RECORD_COLUMNS)
_STATUS_AT = _ROW_NAMES.index("status")
_TEXT_AT = frozenset(_ROW_NAMES.index(name) for name in _TEXT_COLUMNS)


def _row(record: RequestRecord) -> tuple[Any, ...]:
    row: tuple[Any, ...] = _IDENTITY_ROW(record.identity) + _RECORD_ROW(record)
    return row


def _rows_to_table(rows: list[tuple[Any, ...]], keep_text: bool, slice_rows: int) -> pa.Table:
    """Rows as a table of batches of ``slice_rows`` rows (one conversion call per slice and
    column: the interpreter lock is held for no longer than one of them)."""
    return pa.Table.from_batches(
        [_rows_to_batch(rows[i : i + slice_rows], keep_text) for i in range(0, len(rows), slice_rows)],
        schema=TRACE_SCHEMA,
    )


def _rows_to_batch(rows: list[tuple[Any, ...]], keep_text: bool) -> pa.RecordBatch:
    """Rows of ``_row`` as one batch of the trace schema (text columns null without ``keep_text``)."""
    n = len(rows)
    by_column = zip(*rows, strict=True) if n else iter([()] * len(_ROW_NAMES))
    columns: dict[str, Any] = {}
    for at, (name, values) in enumerate(zip(_ROW_NAMES, by_column, strict=True)):
        if at == _STATUS_AT:
            columns[name] = [status.value for status in values]
        elif at in _TEXT_AT and not keep_text:
            columns[name] = None
        else:
            columns[name] = values
    arrays = [_column(columns[f.name], f.type, n) for f in TRACE_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=TRACE_SCHEMA)


#: list columns whose every value may be an ``array`` of this typecode, read in place
_ARRAY_LISTS = {pa.list_(pa.int64()): ("q", np.int64), pa.list_(pa.uint64()): ("Q", np.uint64)}


def _column(values: Any, kind: pa.DataType, n: int) -> pa.Array:
    """One column of a batch: nulls for a column left out; a list of int64 (uint64) whose every
    value is an ``array('q')`` (``array('Q')``): a simulated record's ``chunk_ns``, a thousand
    times a request, and an agent's ``block_hashes``) from their bytes joined, read in place,
    not as Python ints one by one; else Arrow's conversion."""
    if values is None:
        return pa.nulls(n, kind)
    typed = _ARRAY_LISTS.get(kind)
    if typed is not None and n and all(type(v) is array and v.typecode == typed[0] for v in values):
        ends = np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=n))
        if ends[-1] < 2**31:  # a list array's offsets are 32-bit
            offsets = np.zeros(n + 1, dtype=np.int32)
            offsets[1:] = ends
            return pa.ListArray.from_arrays(offsets, np.frombuffer(b"".join(values), dtype=typed[1]))
    return pa.array(values, type=kind)


class ParquetTraceSink:
    """Writes records of one writer (the driver, or one worker) under ``run_dir/requests/``.

    ``write`` is cheap (a row tuple appended to a buffer); every ``batch_rows`` rows the buffer
    goes to a writer thread, which turns it into one Arrow batch (one Parquet row group) and
    writes it, so the event loop that sends requests never waits for Arrow or the disk: at
    8,192 rows that was a 150 ms stall of every request in flight. The writer converts a batch
    ``SLICE_ROWS`` rows at a time (Arrow holds the interpreter lock while it reads Python
    objects; between slices the loop runs) and compresses and writes without the lock. Prompt
    and output text are written only with ``keep_text`` (``--record-text``). Use as a context
    manager, or call ``close`` in a ``finally``: closing flushes the buffer, waits for the
    writer and closes the open part, so nothing received is lost on an interrupt. A failure on
    the writer is raised by the next ``write`` (or ``flush``, ``close``), and every row not
    written is counted in ``rows_lost``.
    """

    #: rows converted to Arrow in one call on the writer thread
    SLICE_ROWS = 256
    #: batches handed to the writer and not yet written before ``write`` waits for the oldest
    #: (only a writer slower than the run's records makes the loop wait)
    MAX_PENDING = 2

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | RunStorage,
        *,
        writer: str = "driver",
        batch_rows: int = 8192,
        part_rows: int = 500_000,
        flush_interval_s: float | None = 10.0,
        compression: str = "zstd",
        keep_text: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if batch_rows < 1 or part_rows < 1:
            raise ValueError("batch_rows and part_rows must be >= 1")
        self.storage = run_dir if isinstance(run_dir, RunStorage) else RunStorage.at(run_dir)
        self.storage.makedirs(REQUESTS_DIR)
        self.writer = writer
        self.batch_rows = batch_rows
        self.part_rows = part_rows
        self.flush_interval_s = flush_interval_s
        self.compression = compression
        self.keep_text = keep_text
        self._clock = clock
        self._rows: list[tuple[Any, ...]] = []
        self._unclosed_since: float | None = None  # arrival of the oldest row not in a closed part
        # the writer thread's: the open part and the counts (read by others once it is idle)
        self._part_seq = 0
        self._part_writer: pq.ParquetWriter | None = None
        self._part_name: str | None = None
        self._part_rows_written = 0
        self.rows_written = 0
        #: rows handed to the sink that never reached a part (after a write failure)
        self.rows_lost = 0
        #: what went wrong, once writing failed; later writes are refused (and counted lost)
        self.failure: str | None = None
        self._failed_errno: int | None = None
        self._failure_raised = False  # the caller has been told (a later close stays quiet)
        self.parts: list[str] = []
        self._closed = False
        self._lock = threading.Lock()  # rows_lost and failure, changed by both threads
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: collections.deque[concurrent.futures.Future[None]] = collections.deque()

    # -- writing (the caller's thread) ---------------------------------------------------------

    def write(self, record: RequestRecord) -> None:
        """Buffer one record; hands a full buffer to the writer thread.

        Raises TraceWriteError when the trace cannot be written (then and on every later call).
        """
        if self._closed:
            raise RuntimeError("trace sink is closed")
        if self.failure is not None:
            self._refuse(1)
        self._rows.append(_row(record))
        if self._unclosed_since is None:
            self._unclosed_since = self._clock()
        if len(self._rows) >= self.batch_rows:
            self._hand_off(close_part=self._interval_passed())

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Write an Arrow batch of the trace schema (e.g. shipped from a worker) as it is."""
        if self._closed:
            raise RuntimeError("trace sink is closed")
        if self.failure is not None:
            self._refuse(batch.num_rows)
        if not batch.schema.equals(TRACE_SCHEMA, check_metadata=False):
            batch = batch.select(TRACE_SCHEMA.names).cast(TRACE_SCHEMA)
        if batch.num_rows:
            if self._unclosed_since is None:
                self._unclosed_since = self._clock()
            due = self._interval_passed()
            self._submit(self._write_rows, self._take_rows(), batch, due)
            if due:
                self._unclosed_since = None
        self._wait(0)

    def flush(self) -> None:
        """Write the buffered rows as one row group (rotating the part if it is due), and wait
        until the writer has written everything handed to it."""
        if self.failure is not None:
            self._refuse(0)
        if self._rows:
            self._hand_off(close_part=self._interval_passed())
        self._wait(0)

    def maybe_rotate(self) -> None:
        """Close out rows older than ``flush_interval_s`` into a closed part (call periodically).

        Bounds what an abrupt kill of the process can lose to one flush interval. The writer
        thread does the work; the caller does not wait for it.
        """
        if self.failure is None and self._interval_passed():
            self._hand_off(close_part=True)

    def close(self) -> None:
        """Flush everything, wait for the writer and close the open part. Safe to call more
        than once; a failure already raised is not raised again."""
        if self._closed:
            return
        self._closed = True
        raised_before = self._failure_raised
        try:
            if self.failure is None:
                self._submit(self._write_rows, self._take_rows(), None, True)
            self._wait(0)
        except TraceWriteError:
            if not raised_before:  # first seen here (the last rows' write): the caller hears of it
                raise
        finally:
            if self.failure is not None:
                self._count_lost(len(self._rows))
                self._rows = []
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def _take_rows(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows

    def _hand_off(self, *, close_part: bool) -> None:
        self._submit(self._write_rows, self._take_rows(), None, close_part)
        if close_part:
            self._unclosed_since = None
        self._wait(self.MAX_PENDING)

    def _submit(self, job: Callable[..., None], *args: Any) -> None:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"trace-{self.writer}")
        self._pending.append(self._pool.submit(job, *args))

    def _wait(self, most_pending: int) -> None:
        """Wait until at most ``most_pending`` batches are left to the writer; raise its failure."""
        pending = self._pending
        while pending and (len(pending) > most_pending or pending[0].done()):
            try:
                pending.popleft().result()  # the writer's TraceWriteError comes out here
            except TraceWriteError:
                self._failure_raised = True
                raise
        if self.failure is not None:
            self._refuse(0)

    def _refuse(self, rows: int) -> None:
        """Writing failed: the buffer and ``rows`` more are lost; raise TraceWriteError."""
        self._count_lost(len(self._rows) + rows)
        self._rows = []
        assert self.failure is not None
        self._failure_raised = True
        raise TraceWriteError(self._failed_errno, self.failure)

    def _count_lost(self, rows: int) -> None:
        with self._lock:
            self.rows_lost += rows

    def _interval_passed(self) -> bool:
        return (
            self.flush_interval_s is not None
            and self._unclosed_since is not None
            and self._clock() - self._unclosed_since >= self.flush_interval_s
        )

    # -- the writer thread -----------------------------------------------------------------------

    def _write_rows(self, rows: list[tuple[Any, ...]], batch: pa.RecordBatch | None, close_part: bool) -> None:
        """Write ``rows`` (then ``batch``) as row groups; close the part when due or asked."""
        left = len(rows) + (batch.num_rows if batch is not None else 0)
        if self.failure is not None:  # an earlier batch failed: these are lost too
            self._count_lost(left)
            return
        try:
            if rows:
                self._write(_rows_to_table(rows, self.keep_text, self.SLICE_ROWS), len(rows))
                left -= len(rows)
            if batch is not None:
                self._write(batch, batch.num_rows)
                left -= batch.num_rows
            if (close_part or self._part_rows_written >= self.part_rows) and self._part_writer is not None:
                self._close_part()
        except OSError as exc:  # pyarrow's IO errors are OSErrors
            self._fail(exc, left)
        except Exception as exc:  # a row Arrow refuses, a filesystem's own error: the same, named
            self._fail(OSError(None, f"{type(exc).__name__}: {exc}"), left, cause=exc)

    def _write(self, data: pa.RecordBatch | pa.Table, rows: int) -> None:
        if self._part_writer is None:
            self._open_part()
        assert self._part_writer is not None
        if isinstance(data, pa.Table):
            self._part_writer.write_table(data, row_group_size=max(rows, 1))
        else:
            self._part_writer.write_batch(data)
        self._part_rows_written += rows
        self.rows_written += rows

    def _open_part(self) -> None:
        name = f"part-{self.writer}-{self._part_seq:05d}{PART_SUFFIX}"
        self._part_seq += 1
        self._part_name = name
        tmp = self.storage.path(f"{REQUESTS_DIR}/{name}{INPROGRESS_SUFFIX}")
        self._part_writer = pq.ParquetWriter(
            tmp, TRACE_SCHEMA, compression=self.compression, filesystem=self.storage.fs
        )
        self._part_rows_written = 0

    def _close_part(self) -> None:
        assert self._part_writer is not None and self._part_name is not None
        name = self._part_name
        self._part_writer.close()
        self.storage.move(f"{REQUESTS_DIR}/{name}{INPROGRESS_SUFFIX}", f"{REQUESTS_DIR}/{name}")
        self.parts.append(name)
        log.debug("closed trace part %s (%d rows)", name, self._part_rows_written)
        self._part_rows_written = 0
        self._part_writer = None
        self._part_name = None

    def _fail(self, exc: OSError, unwritten: int, cause: BaseException | None = None) -> None:
        """Writing failed: drop the open part (its rows are lost; closed parts stay), refuse
        further writes, and raise TraceWriteError naming the folder and the cause."""
        lost_in_part = self._part_rows_written if self._part_writer is not None else 0
        if self._part_writer is not None:
            try:
                self._part_writer.close()
            except (OSError, pa.ArrowException):
                pass  # the part is torn whatever happens; what matters is said below
            self._part_writer = None
        self.rows_written -= lost_in_part
        self._part_rows_written = 0
        where = self.storage.path(REQUESTS_DIR)
        with self._lock:
            self.rows_lost += lost_in_part + unwritten
            self._failed_errno = exc.errno
            self.failure = f"cannot write the trace under {where}: {exc.strerror or exc}"
        log.error("%s", self.failure)
        raise TraceWriteError(exc.errno, self.failure) from (cause or exc)

    def __enter__(self) -> ParquetTraceSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
