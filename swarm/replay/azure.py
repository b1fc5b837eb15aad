"""Azure LLM inference traces (CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``) as timed plans.

Place in the map (docs/architecture.md, "Replay"): a flat format (``timed``), as Azure's public
LLM inference traces (Azure/AzurePublicDataset, ``AzureLLMInferenceTrace_*.csv``) give it:
timestamps are date-times; there is no prefix information, so every prompt is unique.
"""

from __future__ import annotations

from pathlib import Path

from swarm.errors import InputError
from swarm.replay.format import Peek, ReadOptions, TraceFormat
from swarm.replay.plan import ReplayPlan
from swarm.replay.reading import BadLines
from swarm.replay.timed import csv_rows, flat_plan, iso_seconds

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def read_azure(source: str, options: ReadOptions) -> ReplayPlan:
    p = Path(source)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    bad = BadLines(p, options.skip_bad_lines)
    rows = csv_rows(p, bad, COLUMNS, iso_seconds())
    return flat_plan(p, FORMAT.name, rows, options.filters, bad, block_tokens=512)


def detect(peek: Peek) -> bool:
    return peek.file_with(".csv") and "ContextTokens" in peek.first_line


FORMAT = TraceFormat(
    name="azure",
    title="Azure LLM inference CSV (.csv)",
    detect=detect,
    read=read_azure,
    filters=True,
    sessions=False,
    default_mode="timed",
)
