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


def list_parts(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Closed part files of a run, in name order."""
    directory = Path(run_dir) / REQUESTS_DIR
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no requests folder (is this a run directory?)")
    return sorted(p for p in directory.iterdir() if p.name.endswith(PART_SUFFIX))


def unfinished_parts(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Parts left open by a process that did not close them (e.g. killed)."""
    directory = Path(run_dir) / REQUESTS_DIR
    return sorted(p for p in directory.glob(f"*{INPROGRESS_SUFFIX}"))


def read_requests(run_dir: str | os.PathLike[str], columns: list[str] | None = None) -> pa.Table:
    """All request rows of a run as one table (empty table of the trace schema if none)."""
    parts = list_parts(run_dir)
    if not parts:
        table = TRACE_SCHEMA.empty_table()
        return table.select(columns) if columns else table
    dataset = ds.dataset([str(p) for p in parts], format="parquet", schema=TRACE_SCHEMA)
    return dataset.to_table(columns=columns)
