"""Reading a run's trace back: the parts of ``runs/<run_id>/requests/`` as one Arrow table.

Place in the map (docs/architecture.md, "The trace"): the file side of the trace contract, used by analysis, replay
and tests. Only closed parts (``*.parquet``) are read; a part still being written carries an
``.inprogress`` suffix and is reported, not read. A closed part that cannot be read (a disk
that filled, a copy cut short) stops ``read_requests`` with its name; reports read around it
(``read_requests_tolerant``) and say what is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from swarm.errors import InputError
from swarm.trace.schema import TRACE_SCHEMA
from swarm.trace.sink import INPROGRESS_SUFFIX, PART_SUFFIX, REQUESTS_DIR
from swarm.trace.storage import RunStorage

RunLocation = str | os.PathLike[str] | RunStorage


def as_storage(run_dir: RunLocation) -> RunStorage:
    """A run location (path, URI or RunStorage) as a RunStorage."""
    return run_dir if isinstance(run_dir, RunStorage) else RunStorage.at(run_dir)


def list_parts(run_dir: RunLocation) -> list[Path]:
    """Closed part files of a run, in name order (paths within the run's filesystem)."""
    storage = as_storage(run_dir)
    if not storage.exists(REQUESTS_DIR):
        raise FileNotFoundError(
            f"{storage.path(REQUESTS_DIR)}: no requests folder (is this a run directory?)"
        )
    names = [n for n in storage.list(REQUESTS_DIR) if n.endswith(PART_SUFFIX)]
    return [Path(storage.path(f"{REQUESTS_DIR}/{n}")) for n in names]


def unfinished_parts(run_dir: RunLocation) -> list[Path]:
    """Parts left open by a process that did not close them (e.g. killed)."""
    storage = as_storage(run_dir)
    names = [n for n in storage.list(REQUESTS_DIR) if n.endswith(INPROGRESS_SUFFIX)]
    return [Path(storage.path(f"{REQUESTS_DIR}/{n}")) for n in names]


def read_requests(run_dir: RunLocation, columns: list[str] | None = None) -> pa.Table:
    """All request rows of a run as one table (empty table of the trace schema if none).

    A part that cannot be read (truncated, damaged) is an InputError naming it: for tools that
    must not go on with part of a trace (export, replay). ``read_requests_tolerant`` reads
    around it instead."""
    table, bad = read_requests_tolerant(run_dir, columns)
    if bad:
        first = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise InputError(f"{first.path}: cannot read this trace part{more}: {first.error}")
    return table


def request_batches(
    run_dir: RunLocation, columns: list[str], batch_rows: int, *, target: str | None = None
) -> Iterator[pa.RecordBatch]:
    """The request rows of a run, ``batch_rows`` at most at a time, in ``read_requests``'s
    order (parts in name order): for a figure that reads every chunk of a large run without
    holding them all (one row group's columns are decoded at a time). With ``target``, row
    groups whose statistics say they hold none of its rows are not read (a run writes each
    target's rows to parts of their own); the rows given still include other targets' where a
    group holds several. A part older than a column asked for gives it as nulls, as
    ``read_requests`` does. A part that cannot be read is an InputError naming it, as in
    ``read_requests``."""
    storage = as_storage(run_dir)
    for part in list_parts(storage):
        try:
            with storage.fs.open_input_file(str(part)) as stream:
                file = pq.ParquetFile(stream)
                if set(columns) <= set(file.schema_arrow.names):
                    groups = _groups_holding(file, target)
                    batches = file.iter_batches(batch_size=batch_rows, row_groups=groups, columns=columns)
                else:  # an older part: the dataset fills the columns it lacks
                    batches = _dataset(storage, [part]).to_batches(columns=columns, batch_size=batch_rows)
                yield from batches
        except (pa.ArrowException, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}"[:300]
            raise InputError(f"{part}: cannot read this trace part: {reason}") from exc


def _groups_holding(file: pq.ParquetFile, target: str | None) -> list[int]:
    """The row groups of ``file`` that may hold ``target``'s rows (all, without ``target`` or
    without statistics of the column)."""
    meta = file.metadata
    every = list(range(meta.num_row_groups))
    if target is None or not meta.num_row_groups:
        return every
    first = meta.row_group(0)
    at = next((i for i in range(meta.num_columns) if first.column(i).path_in_schema == "target"), None)
    if at is None:
        return every
    kept = []
    for g in every:
        stats = meta.row_group(g).column(at).statistics
        if stats is None or not stats.has_min_max or stats.min <= target <= stats.max:
            kept.append(g)
    return kept


@dataclass(frozen=True)
class BadPart:
    """A closed part that could not be read: where, how big, why."""

    path: str
    size_bytes: int
    error: str


def read_requests_tolerant(
    run_dir: RunLocation, columns: list[str] | None = None, *, rows: pc.Expression | None = None
) -> tuple[pa.Table, list[BadPart]]:
    """The rows of every part that can be read, and the parts that cannot (named, with their
    size and the reason): for reports, which show what there is and say what is missing.
    ``rows``: only the rows this expression keeps (``NOT_WARMUP``), filtered as they are read
    rather than copied after."""
    storage = as_storage(run_dir)
    parts = list_parts(storage)
    empty = TRACE_SCHEMA.empty_table()
    if not parts:
        return (empty.select(columns) if columns else empty), []
    try:  # the usual case: every part whole, read as one dataset
        table = _dataset(storage, parts).to_table(columns=columns, filter=rows)
        give_back_arrow_memory()
        return table, []
    except (pa.ArrowException, OSError):
        pass
    tables, bad = [], []
    for part in parts:
        try:
            tables.append(_dataset(storage, [part]).to_table(columns=columns, filter=rows))
        except (pa.ArrowException, OSError) as exc:
            bad.append(BadPart(str(part), part_size(storage, part), f"{type(exc).__name__}: {exc}"[:300]))
    if not tables:
        return (empty.select(columns) if columns else empty), bad
    give_back_arrow_memory()
    return pa.concat_tables(tables), bad


def give_back_arrow_memory() -> None:
    """Hand the memory Arrow's pool kept from tables no longer held (a read's decoding, a copy
    filtered from a table since dropped) back to the system: reading a trace of 14 million
    chunk times (a 115 MB table) left the process 428 MB larger, 154 MB after this; what the
    figures make from it (numpy's arrays) cannot reuse the pool's pages."""
    pa.default_memory_pool().release_unused()


def _dataset(storage: RunStorage, parts: list[Path]) -> ds.Dataset:
    return ds.dataset([str(p) for p in parts], format="parquet", schema=TRACE_SCHEMA, filesystem=storage.fs)


def part_size(storage: RunStorage, path: Path) -> int:
    """A file's size in bytes (0 when it cannot be told)."""
    try:
        return int(storage.fs.get_file_info(str(path)).size or 0)
    except OSError:
        return 0


#: the column that marks a warm-up call (``RequestIdentity.warmup``; null in older traces)
WARMUP_COLUMN = "warmup"
#: the rows ``without_warmups`` keeps, as a filter of a read (``read_requests_tolerant``'s ``rows``)
NOT_WARMUP = ~pc.field(WARMUP_COLUMN) | pc.field(WARMUP_COLUMN).is_null()


def warmup_count(run_dir: RunLocation, bad: list[BadPart] | None = None) -> int:
    """How many rows of a run's parts are warm-ups (the one column read), less those of the
    ``bad`` parts (left out of the rows read: their warm-ups are none of the rows')."""
    storage = as_storage(run_dir)
    left_out = {b.path for b in bad or ()}
    parts = [p for p in list_parts(storage) if str(p) not in left_out]
    if not parts:
        return 0
    table = _dataset(storage, parts).to_table(columns=[WARMUP_COLUMN])
    return int(pc.sum(pc.fill_null(table[WARMUP_COLUMN], False)).as_py() or 0) if table.num_rows else 0


def rows_kept(rows: pa.Table | pa.RecordBatch, keep: pa.Array | pa.ChunkedArray) -> pa.Table | pa.RecordBatch:
    """``rows.filter(keep)`` (a null keeps none), but ``rows`` themselves when ``keep`` keeps
    every row: no copy of a large run's chunk lists to drop nothing."""
    if len(rows) and pc.all(keep, skip_nulls=False).as_py():
        return rows
    return rows.filter(keep)


def without_warmups(table: pa.Table) -> tuple[pa.Table, int]:
    """``table`` less its warm-up rows (sessions started mid-life re-send their history first;
    no headline figure counts them), and how many were dropped. A table without the column
    (an older trace, or a selection without it) has none."""
    if WARMUP_COLUMN not in table.column_names or table.num_rows == 0:
        return table, 0
    kept = rows_kept(table, pc.invert(pc.fill_null(table[WARMUP_COLUMN], False)))
    assert isinstance(kept, pa.Table)
    return kept, table.num_rows - kept.num_rows
