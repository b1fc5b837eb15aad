"""Exporters: a swarm run as Mooncake JSON lines (for tools that replay that format), or as
CSV (for a spreadsheet).

Place in the map (docs/architecture.md, "Replay"). A file is written under a temporary name beside it
and moved into place once whole, so a failed export leaves no file, or the one there before.

CSV: one row per request (every target, or ``--target``), in scheduled order, with the trace's
scalar columns; ``parent_nodes`` joined by ``;``, and ``chunks`` (the number of content
chunks) in place of the per-chunk times. Lists of numbers and the text columns stay in the
Parquet trace.

Mooncake: one line per request of one target, in scheduled order: ``timestamp`` (ms from the first request's ``scheduled_ns``), ``input_length``
(``prompt_tokens_est``), ``output_length`` (``completion_tokens``, or ``max_tokens`` when the
server did not report it) and ``hash_ids``: one id per 512-token block of the prompt. A
block's id is the run's chained 64-token block hash at the block's last 64-token block (the
last, possibly partial, block of the prompt for its final block), so equal ids mean an equal
prefix up to that block; ids are numbered 0, 1, 2, ... in order of first appearance, as in
the published Mooncake traces.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from swarm.errors import InputError
from swarm.trace.manifest import RunManifest
from swarm.trace.reader import read_requests
from swarm.trace.storage import RunStorage
from swarm.workload.prefix import BLOCK_TOKENS

MOONCAKE_BLOCK = 512


def mooncake_lines(
    rows: Iterable[tuple[int, int, int, tuple[int, ...]]], block_tokens: int = BLOCK_TOKENS
) -> Iterator[dict[str, object]]:
    """Rows of (scheduled_ns, input_length, output_length, chained block hashes) to Mooncake
    objects, in the order given."""
    if MOONCAKE_BLOCK % block_tokens:
        raise ValueError(f"{MOONCAKE_BLOCK} is not a multiple of the run's block size {block_tokens}")
    per = MOONCAKE_BLOCK // block_tokens
    ids: dict[int, int] = {}
    t0: int | None = None
    for scheduled_ns, n_in, n_out, hashes in rows:
        t0 = scheduled_ns if t0 is None else t0
        out_ids = []
        for k in range(-(-n_in // MOONCAKE_BLOCK)):
            at = min((k + 1) * per - 1, len(hashes) - 1)
            if at < 0:
                break
            out_ids.append(ids.setdefault(hashes[at], len(ids)))
        yield {
            "timestamp": round((scheduled_ns - t0) / 1e6),
            "input_length": n_in,
            "output_length": n_out,
            "hash_ids": out_ids,
        }


FORMATS = ("mooncake", "csv")
#: Trace columns left out of the CSV (lists of numbers, and text).
CSV_LEFT_OUT = ("chunk_ns", "chunk_lag_ns", "block_hashes", "parent_nodes", "prompt_parts", "prompt_roles", "output_text")


def export_run(run_dir: str, fmt: str, output: Path | None, target: str | None = None) -> int:
    """Write ``run_dir`` as ``fmt`` to ``output`` (stdout when None), whole or not at all;
    returns the number of requests written."""
    if output is None:
        if fmt == "csv":
            return _write_csv(csv_table(run_dir, target), sys.stdout.buffer)
        return export_mooncake(run_dir, sys.stdout, target)
    output = Path(output)
    folder = output.parent if str(output.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"--output {output}: no folder {folder}")
    table = csv_table(run_dir, target) if fmt == "csv" else None  # a bad run: nothing is written
    fd, tmp_name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=folder)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            if table is not None:
                count = _write_csv(table, f)
            else:
                text = io.TextIOWrapper(f, encoding="utf-8", newline="\n")
                count = export_mooncake(run_dir, text, target)
                text.flush()
                text.detach()
        # a new file gets the mode any file made here gets (mkstemp's is owner-only); a file
        # written over keeps its own
        os.chmod(tmp, output.stat().st_mode & 0o7777 if output.exists() else 0o666 & ~_umask())
        os.replace(tmp, output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return count


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _manifest(storage: RunStorage) -> RunManifest:
    try:
        return RunManifest.read(storage)
    except FileNotFoundError as exc:
        raise InputError(str(exc)) from None


def csv_table(run_dir: str, target: str | None = None) -> pa.Table:
    """The run's rows for CSV: scalar columns, ``parent_nodes`` joined, ``chunks`` counted."""
    storage = RunStorage.at(run_dir)
    _manifest(storage)  # a run folder, and a whole one
    table = read_requests(storage)
    if target is not None:
        table = table.filter(pc.equal(table["target"], target))
        if table.num_rows == 0:
            raise InputError(f"{run_dir}: no requests for target {target!r}")
    table = table.sort_by([("scheduled_ns", "ascending"), ("request_id", "ascending")])
    parents = pa.array([";".join(p) for p in table["parent_nodes"].to_pylist()], pa.string())
    chunks = pc.fill_null(pc.list_value_length(table["chunk_ns"]), 0)
    out = table.select([n for n in table.column_names if n not in CSV_LEFT_OUT])
    out = out.add_column(out.column_names.index("node") + 1, "parent_nodes", parents)
    return out.add_column(out.column_names.index("e2e_ns") + 1, "chunks", chunks)


def _write_csv(table: pa.Table, sink: IO[bytes]) -> int:
    pacsv.write_csv(table, sink)
    return int(table.num_rows)


def export_mooncake(run_dir: str, out: IO[str], target: str | None = None) -> int:
    """Write one target of a run as Mooncake JSONL to ``out``; returns the number of lines."""
    storage = RunStorage.at(run_dir)
    manifest = _manifest(storage)
    table = read_requests(
        storage,
        columns=[
            "target",
            "scheduled_ns",
            "prompt_tokens_est",
            "prompt_tokens",
            "completion_tokens",
            "max_tokens",
            "block_hashes",
        ],
    )
    names = [t.name for t in manifest.targets] or sorted(set(table["target"].to_pylist()))
    chosen = target or (names[0] if names else None)
    rows = table.filter(pc.equal(table["target"], chosen)).to_pylist() if chosen else []
    if not rows:
        raise InputError(f"{run_dir}: no requests for target {chosen!r}")
    rows.sort(key=lambda r: r["scheduled_ns"])
    count = 0
    for obj in mooncake_lines(
        (
            r["scheduled_ns"],
            r["prompt_tokens_est"] or r["prompt_tokens"] or 0,
            r["completion_tokens"] if r["completion_tokens"] is not None else (r["max_tokens"] or 0),
            tuple(r["block_hashes"]),
        )
        for r in rows
    ):
        out.write(json.dumps(obj) + "\n")
        count += 1
    return count
