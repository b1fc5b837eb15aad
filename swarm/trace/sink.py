"""TraceSink: streams RequestRecords into Parquet parts in bounded batches.

Place in the map (docs/architecture.md, "The trace"): the TraceSink seam, fed by the Dispatcher (or, on a cluster, by the
driver with batches from workers). Memory stays flat however long the run: records are
appended column by column into a buffer of at most ``batch_rows`` rows, which is turned into
one Arrow record batch (one Parquet row group) and written out. A part file is written under
a ``.inprogress`` name and renamed to ``part-<writer>-<seq>.parquet`` when closed, so every
file that carries the ``.parquet`` suffix is complete and readable; parts rotate every
``part_rows`` rows, and at the latest every ``flush_interval_s`` seconds of wall time, which
bounds what an abrupt kill can take away.
"""

from __future__ import annotations

import logging
import operator
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

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
    arrays = [
        pa.nulls(n, f.type) if columns[f.name] is None else pa.array(columns[f.name], type=f.type)
        for f in TRACE_SCHEMA
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=TRACE_SCHEMA)


class ParquetTraceSink:
    """Writes records of one writer (the driver, or one worker) under ``run_dir/requests/``.

    ``write`` is cheap (appends to column lists); every ``batch_rows`` rows the buffer becomes
    one row group. Prompt and output text are written only with ``keep_text`` (``--record-text``). Use as a context manager, or call ``close`` in a ``finally``: closing
    flushes the buffer and closes the open part, so nothing received is lost on an interrupt.
    """

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
        self._part_seq = 0
        self._part_writer: pq.ParquetWriter | None = None
        self._part_name: str | None = None
        self._part_rows_written = 0
        self._unclosed_since: float | None = None  # arrival of the oldest row not in a closed part
        self.rows_written = 0
        #: rows handed to the sink that never reached a part (after a write failure)
        self.rows_lost = 0
        #: what went wrong, once writing failed; later writes are refused (and counted lost)
        self.failure: str | None = None
        self.parts: list[str] = []
        self._closed = False

    # -- writing -----------------------------------------------------------------------------

    def write(self, record: RequestRecord) -> None:
        """Buffer one record; writes a row group when the buffer is full.

        Raises TraceWriteError when the trace cannot be written (then and on every later call).
        """
        if self._closed:
            raise RuntimeError("trace sink is closed")
        if self.failure is not None:
            self.rows_lost += 1
            raise TraceWriteError(self.failure)
        self._rows.append(_row(record))
        if self._unclosed_since is None:
            self._unclosed_since = self._clock()
        if len(self._rows) >= self.batch_rows:
            self.flush()

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Write an Arrow batch of the trace schema (e.g. shipped from a worker) as it is."""
        if self._closed:
            raise RuntimeError("trace sink is closed")
        if self.failure is not None:
            self.rows_lost += batch.num_rows
            raise TraceWriteError(self.failure)
        if not batch.schema.equals(TRACE_SCHEMA, check_metadata=False):
            batch = batch.select(TRACE_SCHEMA.names).cast(TRACE_SCHEMA)
        self.flush()
        if batch.num_rows:
            if self._unclosed_since is None:
                self._unclosed_since = self._clock()
            self._write_batch(batch)

    def flush(self) -> None:
        """Write the buffered rows as one row group, and rotate the part if it is due."""
        if self._rows:
            rows, self._rows = self._rows, []
            self._write_batch(_rows_to_batch(rows, self.keep_text))

    def _write_batch(self, batch: pa.RecordBatch) -> None:
        try:
            if self._part_writer is None:
                self._open_part()
            assert self._part_writer is not None
            self._part_writer.write_batch(batch)
        except OSError as exc:  # pyarrow's IO errors are OSErrors
            self.rows_lost += batch.num_rows
            self._fail(exc)
        self._part_rows_written += batch.num_rows
        self.rows_written += batch.num_rows
        if self._part_due():
            self._close_part()

    def _fail(self, exc: OSError) -> None:
        """Writing failed: drop the open part (its rows are lost; closed parts stay), refuse
        further writes, and raise TraceWriteError naming the folder and the cause."""
        lost_in_part = self._part_rows_written if self._part_writer is not None else 0
        if self._part_writer is not None:
            try:
                self._part_writer.close()
            except OSError:
                pass  # the part is torn whatever happens; what matters is said below
            self._part_writer = None
        self.rows_lost += lost_in_part + len(self._rows)
        self.rows_written -= lost_in_part
        self._rows = []
        self._part_rows_written = 0
        where = self.storage.path(REQUESTS_DIR)
        self.failure = f"cannot write the trace under {where}: {exc.strerror or exc}"
        log.error("%s", self.failure)
        raise TraceWriteError(exc.errno, self.failure) from exc

    def _part_due(self) -> bool:
        if self._part_rows_written >= self.part_rows:
            return True
        return self._interval_passed()

    def _interval_passed(self) -> bool:
        return (
            self.flush_interval_s is not None
            and self._unclosed_since is not None
            and self._clock() - self._unclosed_since >= self.flush_interval_s
        )

    def maybe_rotate(self) -> None:
        """Close out rows older than ``flush_interval_s`` into a closed part (call periodically).

        Bounds what an abrupt kill of the process can lose to one flush interval.
        """
        if self._interval_passed():
            self.flush()
            if self._part_writer is not None:
                self._close_part()

    # -- parts -------------------------------------------------------------------------------

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
        try:
            self._part_writer.close()
            self.storage.move(f"{REQUESTS_DIR}/{name}{INPROGRESS_SUFFIX}", f"{REQUESTS_DIR}/{name}")
        except OSError as exc:
            self._fail(exc)
        self.parts.append(name)
        log.debug("closed trace part %s (%d rows)", name, self._part_rows_written)
        self._part_rows_written = 0
        self._part_writer = None
        self._part_name = None
        self._unclosed_since = self._clock() if self._rows else None

    def close(self) -> None:
        """Flush everything and close the open part. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        if self.failure is not None:
            return
        try:
            self.flush()
        finally:
            if self._part_writer is not None and self.failure is None:
                self._close_part()

    def __enter__(self) -> ParquetTraceSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
