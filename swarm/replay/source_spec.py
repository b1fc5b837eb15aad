"""What to replay, as settings: a source, how to read it, and how to send it again.

Place in the map (docs/architecture.md, "Replay"): ``TraceSourceSpec`` is a recorded source and
how to read it (its format, filters, bad lines, a run folder's target): ``swarm replay``,
``swarm sweep --replay``, ``swarm fit`` and ``swarm realism`` read through it.
``ReplaySourceSpec`` adds what a replay does with the plan (mode, speed, copies, sessions in
progress, the waits' scale, the tokenizer); it is the ``replay:`` part of a ``ReplaySpec``
(``runtime/specs.py``). Every check of these settings is a constraint here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swarm.cliflag import flag
from swarm.errors import InputError
from swarm.fields import START_RATIOS_DEFAULT, StartAt, StartRatios, TokenizerPath
from swarm.replay.export import FORMATS as EXPORT_FORMATS
from swarm.replay.format import ReadOptions
from swarm.replay.formats import FORMATS, TRACE_FORMATS, load_plan
from swarm.replay.plan import ReplayPlan
from swarm.replay.reading import Filters, parse_window

_READ = "Replay source"


class TraceSourceSpec(BaseModel):
    """A run folder or a trace (file or folder), and how to read it."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(
        default="",
        description="a run folder, or a trace: " + "; ".join(FORMATS[n].title for n in TRACE_FORMATS),
    )
    format: str | None = Field(
        default=None,
        description=f"the source's trace format ({', '.join(FORMATS)}; default: from the source); "
        f"swarm export: the one to write ({' or '.join(EXPORT_FORMATS)}; default {EXPORT_FORMATS[0]})",
        json_schema_extra=flag("--format", group=_READ),
    )
    limit: int | None = Field(
        default=None, ge=1, description="flat traces: read the first N requests kept",
        json_schema_extra=flag("--limit", group=_READ),
    )  # fmt: skip
    window: str | None = Field(
        default=None, description="flat traces: START:END seconds from the trace start",
        json_schema_extra=flag("--window", group=_READ),
    )  # fmt: skip
    sample: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="flat traces: keep this fraction of requests, seeded (whole conversations where "
        "the format has them)",
        json_schema_extra=flag("--sample", group=_READ),
    )
    sample_seed: int = Field(
        default=0, description="seed of --sample", json_schema_extra=flag("--sample-seed", group=_READ)
    )
    skip_bad_lines: bool = Field(
        default=False,
        description="skip malformed lines (counted in the notes) instead of stopping",
        json_schema_extra=flag("--skip-bad-lines", group=_READ),
    )
    source_target: str | None = Field(
        default=None,
        description="a run folder: which of its recorded targets to read (default: the first; swarm "
        "export --format csv: all)",
        json_schema_extra=flag("--source-target", group=_READ),
    )

    @field_validator("window")
    @classmethod
    def _window(cls, value: str | None) -> str | None:
        try:
            parse_window(value)  # checked before anything is read
        except InputError:
            raise ValueError(f"{value!r}: expected START:END in seconds with START < END") from None
        return value

    def filters(self) -> Filters:
        return Filters(limit=self.limit, window=parse_window(self.window), sample=self.sample, seed=self.sample_seed)

    def read_options(self) -> ReadOptions:
        return ReadOptions(self.filters(), self.skip_bad_lines, self.source_target)

    def filters_record(self) -> dict[str, Any]:
        """The filters as the manifest's ``replay_of.filters`` records them."""
        return {"limit": self.limit, "window": self.window, "sample": self.sample, "seed": self.sample_seed}

    def load(self) -> ReplayPlan:
        """The source read into a plan (``replay.formats.load_plan``)."""
        return load_plan(self.source, self.format, self.read_options())


class ReplaySourceSpec(TraceSourceSpec):
    """A recorded source and what a replay does with it."""

    mode: Literal["timed", "dependent"] | None = Field(
        default=None,
        description="timed (recorded offsets, open loop) or dependent (keep the DAG; the default "
        "for run folders and agent traces)",
        json_schema_extra=flag("--mode", group=_READ),
    )
    speed: float = Field(
        default=1.0, gt=0, allow_inf_nan=False, description="time compression: 2 halves the gaps",
        json_schema_extra=flag("--speed", group=_READ),
    )  # fmt: skip
    tool_time_scale: float = Field(
        default=1.0,
        ge=0,
        allow_inf_nan=False,
        description="multiply the recorded tool and think waits between calls (0: none; agent traces)",
        json_schema_extra=flag("--tool-time-scale", group=_READ),
    )
    copies: int = Field(
        default=1,
        ge=1,
        description="play every recorded session N times over (copies get their own user content, "
        "share the system prompts)",
        json_schema_extra=flag("--copies", group=_READ),
    )
    max_sessions: int = Field(
        default=0,
        ge=0,
        description="keep at most N sessions in progress; the next starts when one ends (0: all at "
        "their offsets)",
        json_schema_extra=flag("--max-sessions", group=_READ),
    )
    tokenizer: TokenizerPath = None
    start_at: StartAt = None
    start_ratios: StartRatios = START_RATIOS_DEFAULT

    @model_validator(mode="after")
    def _mid_needs_dependencies(self) -> ReplaySourceSpec:
        if self.start_at == "mid" and self.mode == "timed":
            raise ValueError("start_at mid: a session's start follows its warm-up call; use mode dependent")
        return self

    def record(self, plan: ReplayPlan) -> dict[str, Any]:
        """What the manifest's ``replay_of`` says of this replay of ``plan`` (less the retries)."""
        return {
            "source": plan.source,
            "format": plan.source_format,
            "run_id": plan.source_run_id,
            "mode": self.mode or plan.default_mode,
            "speed": self.speed,
            "requests": len(plan.items),
            "copies": self.copies,
            "max_sessions": self.max_sessions,
            "tool_time_scale": self.tool_time_scale,
            "start_at": self.start_at or "begin",
            "start_ratios": list(self.start_ratios),
            "filters": self.filters_record(),
            "notes": plan.notes,
        }
