"""Azure LLM inference traces (CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``) as timed plans.

Place in the map (docs/architecture.md, "Replay"): a flat format (``timed``), as Azure's public
LLM inference traces (Azure/AzurePublicDataset, ``AzureLLMInferenceTrace_*.csv``) give it:
timestamps are date-times; there is no prefix information, so every prompt is unique.
"""

from __future__ import annotations

from swarm.replay.format import Peek, TraceFormat
from swarm.replay.timed import csv_reader, iso_seconds

NAME = "azure"
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def detect(peek: Peek) -> bool:
    return peek.file_with(".csv") and "ContextTokens" in peek.first_line


FORMAT = TraceFormat(
    name=NAME,
    title="Azure LLM inference CSV (.csv)",
    detect=detect,
    read=csv_reader(NAME, COLUMNS, iso_seconds),
    filters=True,
    sessions=False,
    default_mode="timed",
)
