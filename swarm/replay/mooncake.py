"""Mooncake traces (JSON lines with 512-token ``hash_ids``) as timed plans.

Place in the map (docs/architecture.md, "Replay"): a flat format (``timed``). Each line is
``{"timestamp": ms, "input_length", "output_length", "hash_ids"}`` (the format of
kvcache-ai/Mooncake's ``mooncake_trace.jsonl``), ``hash_ids`` naming the prompt's 512-token
blocks: equal leading ids are a shared prefix. At most ``ceil(input_length / 512)`` ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from swarm.errors import InputError
from swarm.replay.format import Peek, ReadOptions, TraceFormat
from swarm.replay.plan import ReplayPlan
from swarm.replay.reading import BadLines, int_field
from swarm.replay.timed import Row, flat_plan

BLOCK_TOKENS = 512


def _row(obj: object, line_no: int) -> Row:
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    t = obj.get("timestamp")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
        raise ValueError(f"field 'timestamp' must be a non-negative number of ms, got {t!r}")
    n_in = int_field(obj, "input_length")
    n_out = int_field(obj, "output_length")
    ids = obj.get("hash_ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError("field 'hash_ids' must be a list of integers")
    allowed = -(-n_in // BLOCK_TOKENS)
    if len(ids) > allowed:
        raise ValueError(
            f"{len(ids)} hash ids but input_length {n_in} allows at most {allowed} blocks of {BLOCK_TOKENS}"
        )
    return Row(line_no, float(t) / 1000.0, n_in, n_out, tuple(ids))


def _rows(path: Path, bad: BadLines) -> Iterator[Row]:
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = _row(json.loads(line), line_no)
            except json.JSONDecodeError as exc:
                bad.bad(line_no, f"not valid JSON ({exc.msg}); truncated line?")
                continue
            except (ValueError, OverflowError, RecursionError) as exc:
                bad.bad(line_no, str(exc) or type(exc).__name__)
                continue
            yield row


def read_mooncake(source: str, options: ReadOptions) -> ReplayPlan:
    p = Path(source)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    bad = BadLines(p, options.skip_bad_lines)
    return flat_plan(p, FORMAT.name, _rows(p, bad), options.filters, bad, BLOCK_TOKENS)


def detect(peek: Peek) -> bool:
    """A ``.jsonl`` or ``.json`` file that no structured format claimed (or one that is not there yet)."""
    return peek.path.suffix in (".jsonl", ".json") and not peek.is_dir


FORMAT = TraceFormat(
    name="mooncake",
    title="Mooncake JSON lines (.jsonl)",
    detect=detect,
    read=read_mooncake,
    filters=True,
    sessions=False,
    default_mode="timed",
)
