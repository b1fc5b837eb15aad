"""BurstGPT traces (CSV with ``Timestamp`` in seconds, ``Request tokens``, ``Response tokens``) as timed plans.

Place in the map (docs/architecture.md, "Replay"): a flat format (``timed``), as the BurstGPT
release (HPMLL/BurstGPT) gives it; an optional ``Session ID`` column is kept as the session.
Prompts are unique (no prefix information).
"""

from __future__ import annotations

from pathlib import Path

from swarm.errors import InputError
from swarm.replay.format import Peek, ReadOptions, TraceFormat
from swarm.replay.plan import ReplayPlan
from swarm.replay.reading import BadLines
from swarm.replay.timed import csv_rows, flat_plan, plain_seconds

COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


def read_burstgpt(source: str, options: ReadOptions) -> ReplayPlan:
    p = Path(source)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    bad = BadLines(p, options.skip_bad_lines)
    rows = csv_rows(p, bad, COLUMNS, plain_seconds, session_column="Session ID")
    return flat_plan(p, FORMAT.name, rows, options.filters, bad, block_tokens=512)


def detect(peek: Peek) -> bool:
    return peek.file_with(".csv") and "Request tokens" in peek.first_line


FORMAT = TraceFormat(
    name="burstgpt",
    title="BurstGPT CSV (.csv)",
    detect=detect,
    read=read_burstgpt,
    filters=True,
    sessions=False,
    default_mode="timed",
)
