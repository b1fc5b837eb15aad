"""A trace format, as one registered entry: how to tell its files, how to read them, what they hold.

Place in the map (docs/architecture.md, "Replay"): each format module (``mooncake``, ``azure``,
``burstgpt``, ``bailian_trace``, ``agentic_coding_trace``, ``trtllm_trace``, ``aiperf_dag``,
``otel_spans``, and ``from_run`` for swarm's own run folders) ends with one ``FORMAT``; the
registry (``formats``) lists them in the order detection tries them. ``Peek`` is what detection
sees of a source: each file is read at most once, however many formats look at it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

from swarm.replay.plan import ReplayPlan
from swarm.replay.reading import Filters


@dataclass(frozen=True)
class ReadOptions:
    """How to read a source: filters (flat traces), bad lines skipped or not, and for a run
    folder which recorded target."""

    filters: Filters = field(default_factory=Filters)
    skip_bad_lines: bool = False
    source_target: str | None = None


class Peek:
    """What format detection may look at in a source, each piece read once on first use."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.path = Path(source)
        self.is_dir = self.path.is_dir()
        self.is_file = self.path.is_file()

    @property
    def remote(self) -> bool:
        """A URI (``s3://...``): only a run folder can be there."""
        return "://" in self.source

    @cached_property
    def run_folder(self) -> bool:
        """A folder with a run's ``manifest.json``."""
        return self.is_dir and (self.path / "manifest.json").exists()

    @cached_property
    def document_folder(self) -> bool:
        """A folder of trace documents (not a run folder)."""
        return self.is_dir and not self.run_folder

    def has(self, pattern: str) -> bool:
        return self.is_dir and any(self.path.glob(pattern))

    @cached_property
    def first_document(self) -> str | None:
        """A document folder's first ``.json`` file (by name), as text."""
        if not self.document_folder:
            return None
        first = min((f for f in self.path.glob("*.json") if f.is_file()), default=None)
        return None if first is None else first.read_text(encoding="utf-8", errors="replace")

    @cached_property
    def text(self) -> str:
        """The whole file, as text (empty for a folder)."""
        return self.path.read_text(encoding="utf-8", errors="replace") if self.is_file else ""

    @cached_property
    def first_line(self) -> str:
        """The file's first non-blank line (a byte-order mark dropped)."""
        if not self.is_file:
            return ""
        with self.path.open(encoding="utf-8", errors="replace") as f:
            line = next((line for line in f if line.strip()), "")
        return line.removeprefix("\ufeff")

    def file_with(self, suffix: str) -> bool:
        return self.is_file and self.path.suffix == suffix


def json_object(text: str) -> dict[str, object] | None:
    """``text`` parsed as one JSON object, or None (detection never raises on bad input)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class TraceFormat:
    """One trace format: its name (``--format``), how to tell and read its sources, and what
    its plans hold."""

    name: str
    #: what its sources are, for help and errors (``"JSON lines (.jsonl)"``)
    title: str
    detect: Callable[[Peek], bool]
    read: Callable[[str, ReadOptions], ReplayPlan]
    #: what a timed replay's offsets are: recorded arrivals, or sums of the recorded waits
    #: between calls (agent execution traces: ``--tool-time-scale`` scales them too)
    offsets: Literal["arrivals", "waits"] = "arrivals"
    #: whether ``--limit``, ``--window`` and ``--sample`` apply
    filters: bool = False
    #: whether its requests come in sessions (conversations, agents) that a dependent replay keeps
    sessions: bool = True
    default_mode: Literal["timed", "dependent"] = "dependent"
