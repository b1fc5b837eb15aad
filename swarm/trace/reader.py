"""Reading a run's trace back: the parts of ``runs/<run_id>/requests/`` as one Arrow table.

Place in the map (DESIGN.md): the file side of the trace contract, used by analysis, replay
and tests. Only closed parts (``*.parquet``) are read; a part still being written carries an
``.inprogress`` suffix and is reported, not read.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from swarm.record import TRACE_SCHEMA
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
    """All request rows of a run as one table (empty table of the trace schema if none)."""
    storage = as_storage(run_dir)
    parts = list_parts(storage)
    if not parts:
        table = TRACE_SCHEMA.empty_table()
        return table.select(columns) if columns else table
    dataset = ds.dataset(
        [str(p) for p in parts], format="parquet", schema=TRACE_SCHEMA, filesystem=storage.fs
    )
    return dataset.to_table(columns=columns)
