"""BurstGPT traces (CSV with ``Timestamp`` in seconds, ``Request tokens``, ``Response tokens``) as timed plans.

Place in the map (docs/architecture.md, "Replay"): a flat format (``timed``), as the BurstGPT
release (HPMLL/BurstGPT) gives it; an optional ``Session ID`` column is kept as the session.
Prompts are unique (no prefix information).
"""

from __future__ import annotations

from swarm.replay.format import Peek, TraceFormat
from swarm.replay.timed import csv_reader, plain_seconds

NAME = "burstgpt"
COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


def detect(peek: Peek) -> bool:
    return peek.file_with(".csv") and "Request tokens" in peek.first_line


FORMAT = TraceFormat(
    name=NAME,
    title="BurstGPT CSV (.csv)",
    detect=detect,
    read=csv_reader(NAME, COLUMNS, plain_seconds, session_column="Session ID"),
    filters=True,
    sessions=True,
    default_mode="timed",
)
