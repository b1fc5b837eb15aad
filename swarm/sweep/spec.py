"""What a sweep is: the load knob, its ladder (fixed, or grown until a stop rule fires), the SLOs.

Place in the map (docs/architecture.md, "Sweeps"): the single source of truth of ``swarm sweep``'s
settings; the CLI builds a ``SweepSpec`` and ``sweep.runner.execute_sweep`` runs it. The base
of every point (the workload, or the replay) is the launcher's (``sweep.points``); this model
says only how the load changes from point to point and how the curves are judged.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swarm.cliflag import flag
from swarm.sweep.curves import FLEET_KNOBS  # declared beside the verdict it takes
from swarm.workload.showdown import SHOWDOWN_DURATION_S as RUN_SHOWDOWN_DURATION_S
from swarm.workload.showdown import SHOWDOWN_WORKLOAD as RUN_SHOWDOWN_WORKLOAD

_SWEEP = "Sweep"

Knob = Literal["agents", "max_in_flight", "rate", "max_sessions", "speed", "replicas"]
#: knobs for agent swarms, and for replays
AGENT_KNOBS: tuple[str, ...] = ("agents", "max_in_flight", "rate")
REPLAY_KNOBS: tuple[str, ...] = ("max_sessions", "max_in_flight", "speed")
#: knobs that take whole numbers
INTEGER_KNOBS: tuple[str, ...] = ("agents", "max_in_flight", "max_sessions", "replicas")
#: where each knob is in a point's spec (a ``RunSpec`` or a ``ReplaySpec``): the one way a
#: point sets its load (``sweep.points.with_load``)
KNOB_PATHS: dict[str, tuple[str, ...]] = {
    "agents": ("workload", "agents"),
    "max_in_flight": ("max_in_flight",),
    "rate": ("workload", "arrival", "rate"),
    "max_sessions": ("replay", "max_sessions"),
    "speed": ("replay", "speed"),
}


#: the emulated showdown (``swarm sweep`` with nothing given): ``swarm run``'s showdown
#: (``workload/showdown.py``: the study's tree of thought beside Claude Code sessions started
#: mid-life), every point's agents started 8 a second (all live within 4 s at the top of the
#: ladder, without the burst of all at once: 100k-token warm-ups in one instant made the first
#: sends of the others late) and measured for its window; the ladder crosses the eviction cliff
#: of the emulators' prefix cache (400,000 tokens, their default: about five Claude Code
#: sessions of 80k tokens)
SHOWDOWN_WORKLOAD: dict[str, Any] = {**RUN_SHOWDOWN_WORKLOAD, "arrival": {"process": "constant", "rate": 8.0}}
SHOWDOWN_LADDER = "agents=4,8,16,32"
SHOWDOWN_CACHE_TOKENS: int | None = None
SHOWDOWN_DURATION_S = RUN_SHOWDOWN_DURATION_S
#: the showdown's SLOs (at ``slo_percentile``, p99): what an interactive agent needs of a call,
#: so the sweep names a capacity at SLO per engine
SHOWDOWN_SLOS = ["ttft:2s", "itl:50ms"]
#: the showdown runs in this process unless --executor says otherwise: its emulators and the
#: generator share the machine, and it was measured so (README, "Sweeps")
SHOWDOWN_EXECUTOR = "inprocess"


def parse_ladder(text: str) -> tuple[str, list[float]]:
    """``KNOB=V1,V2,...`` as (knob, loads); an InputError naming ``--ladder`` otherwise."""
    from swarm.errors import InputError

    knob, sep, values = text.partition("=")
    knob = knob.strip().replace("-", "_")
    if not sep or knob not in (*KNOB_PATHS, *FLEET_KNOBS):
        raise InputError(
            f"--ladder {text!r}: expected KNOB=V1,V2,... with KNOB one of {', '.join((*KNOB_PATHS, *FLEET_KNOBS))}"
        )
    try:
        loads = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"--ladder {text!r}: expected numbers separated by commas, e.g. agents=4,8,16") from None
    if not loads:
        raise InputError(f"--ladder {text!r}: give at least one load")
    return knob, loads


class AutoLadder(BaseModel):
    """Grow the knob geometrically from ``start`` until every target meets a stop rule."""

    model_config = ConfigDict(extra="forbid")

    start: float = Field(gt=0, description="the first load")
    factor: float = Field(
        default=2.0, gt=1, description="--auto: each load is the last times this",
        json_schema_extra=flag("--factor", group=_SWEEP),
    )  # fmt: skip
    max_points: int = Field(
        default=8, ge=1, le=64, description="--auto: never more points than this",
        json_schema_extra=flag("--max-points", group=_SWEEP),
    )  # fmt: skip
    max_load: float | None = Field(
        default=None, gt=0, description="--auto: never a load above this",
        json_schema_extra=flag("--max-load", group=_SWEEP),
    )  # fmt: skip

    def load(self, index: int, integer: bool) -> float | None:
        """The load of point ``index``, or None past the limits. Whole-number knobs round up
        and always grow by at least one."""
        if index >= self.max_points:
            return None
        value = self.start * self.factor**index
        if integer:
            value = float(max(math.ceil(self.start * self.factor**index - 1e-9), int(self.start) + index))
        if self.max_load is not None and value > self.max_load * (1 + 1e-9):
            return None
        return value


class StopRules(BaseModel):
    """When an auto ladder stops climbing for a target (any rule; the first that fires is recorded)."""

    model_config = ConfigDict(extra="forbid")

    max_error_rate: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="--auto stops (and a point is invalid) above this error share",
        json_schema_extra=flag("--stop-error-rate", group=_SWEEP),
    )
    slo_factor: float = Field(
        default=2.0, ge=1, description="--auto stops when an SLO figure passes its bound times this",
        json_schema_extra=flag("--slo-factor", group=_SWEEP),
    )  # fmt: skip
    min_gain: float = Field(
        default=0.05,
        ge=0,
        description="--auto stops when output tokens/s rises by less than this share over the best earlier point",
        json_schema_extra=flag("--min-gain", group=_SWEEP),
    )
    stop_when_behind: bool = Field(
        default=True,
        description="the generator fell behind its schedule, or the client behind the kernel's receive "
        "stamps (the point is invalid)",
    )


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    knob: Knob = Field(description="the load knob")
    loads: list[float] = Field(default_factory=list, description="a fixed ladder, ascending")
    auto: AutoLadder | None = Field(default=None, description="grow the knob until a stop rule fires")
    stop: StopRules = Field(default_factory=StopRules)
    slos: list[str] = Field(
        default_factory=list, description='SLOs, NAME:VALUE ("ttft:500ms", "itl:50ms", "tpot:...", "e2e:...")'
    )
    slo_percentile: Literal["p50", "p90", "p99"] = Field(
        default="p99", description="a point meets an SLO when this percentile is within it",
        json_schema_extra=flag("--slo-percentile", group=_SWEEP),
    )  # fmt: skip
    steady_fraction: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="steady window: from the first time requests in flight reach this fraction of "
        "their time-weighted median to the last time they are at or above it",
        json_schema_extra=flag("--steady-fraction", group=_SWEEP),
    )
    cliff_fraction: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="eviction cliff: realised/ideal hit below this share of its low-load value",
        json_schema_extra=flag("--cliff-fraction", group=_SWEEP),
    )
    reset_cache: bool = Field(
        default=True, description="empty each target's prefix cache before each point, where the engine can",
        json_schema_extra=flag("--reset-cache", group=_SWEEP),
    )  # fmt: skip
    output: str | None = Field(
        default=None, description="the sweep folder; default sweeps/sweep-<digest of the definition>"
    )
    kv_budget_tokens: int | None = Field(
        default=None, ge=1, description="the targets' prefix-cache size in tokens, for the predicted cliff",
        json_schema_extra=flag("--kv-budget", group=_SWEEP),
    )  # fmt: skip

    @model_validator(mode="after")
    def _one_ladder(self) -> SweepSpec:
        if bool(self.loads) == (self.auto is not None):
            raise ValueError("give either a fixed ladder (loads) or auto, not both and not neither")
        if any(v <= 0 for v in self.loads):
            raise ValueError(f"loads must be positive: {self.loads}")
        if any(b <= a for a, b in zip(self.loads, self.loads[1:], strict=False)):
            raise ValueError(f"loads must be strictly ascending: {self.loads}")
        if self.knob in INTEGER_KNOBS and any(v != int(v) for v in self.loads):
            raise ValueError(f"{self.knob} takes whole numbers: {self.loads}")
        if self.knob in FLEET_KNOBS and self.auto is not None:
            raise ValueError(f"--auto grows a load until it breaks; {self.knob} adds capacity: give a fixed ladder")
        return self

    @property
    def integer(self) -> bool:
        return self.knob in INTEGER_KNOBS

    def load(self, index: int) -> float | None:
        """The load of point ``index``, or None when the ladder has no such point."""
        if self.auto is not None:
            return self.auto.load(index, self.integer)
        return self.loads[index] if index < len(self.loads) else None

    def measured_part(self) -> dict[str, Any]:
        """What decides which points run and what they send: the knob, the ladder, and for an
        auto ladder its stop rules, SLOs and percentile. Not where the sweep is written, nor
        what only judges the points afterwards (the window and cliff fractions, the budget, and
        a fixed ladder's SLOs): those can change on a re-run without measuring again."""
        exclude = {"output", "steady_fraction", "cliff_fraction", "kv_budget_tokens"}
        if self.auto is None:
            exclude |= {"slos", "slo_percentile", "stop"}
        return self.model_dump(mode="json", exclude=exclude)


def definition_digest(definition: dict[str, Any]) -> str:
    """A short digest of a sweep's definition (canonical JSON)."""
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def format_load(value: float) -> str:
    """A load as its folder and table label: whole numbers without a point."""
    return str(int(value)) if value == int(value) else f"{value:g}"
