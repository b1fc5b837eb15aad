"""Exporter: a swarm run as Mooncake JSON lines, for tools that replay that format.

Place in the map (DESIGN.md, "replay"). One line per request of one target, in scheduled
order: ``timestamp`` (ms from the first request's ``scheduled_ns``), ``input_length``
(``prompt_tokens_est``), ``output_length`` (``completion_tokens``, or ``max_tokens`` when the
server did not report it) and ``hash_ids``: one id per 512-token block of the prompt. A
block's id is the run's chained 64-token block hash at the block's last 64-token block (the
last, possibly partial, block of the prompt for its final block), so equal ids mean an equal
prefix up to that block; ids are numbered 0, 1, 2, ... in order of first appearance, as in
the published Mooncake traces.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import IO

import pyarrow.compute as pc

from swarm.errors import InputError
from swarm.prefix import BLOCK_TOKENS
from swarm.trace.manifest import RunManifest
from swarm.trace.reader import read_requests
from swarm.trace.storage import RunStorage

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


def export_mooncake(run_dir: str, out: IO[str], target: str | None = None) -> int:
    """Write one target of a run as Mooncake JSONL to ``out``; returns the number of lines."""
    storage = RunStorage.at(run_dir)
    try:
        manifest = RunManifest.read(storage)
    except FileNotFoundError as exc:
        raise InputError(str(exc)) from None
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
