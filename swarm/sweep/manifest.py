"""The sweep manifest: ``<sweep folder>/sweep.json``.

Place in the map (docs/architecture.md, "Sweeps"; its analysis, which reads folders on disk
only): part of the trace contract, like the run manifest. A sweep folder holds one run folder
per load point and target (``runs/<run_id>/``, each an ordinary swarm run with its own manifest)
and this file, which says what the sweep is (the load knob, the ladder, the stop rules, the
SLOs, the definition's digest that a re-run must match to resume), which point ran where and how
it ended, and why the sweep stopped. It is rewritten atomically after every point, so a sweep
killed at any moment leaves a readable file."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swarm.errors import InputError
from swarm.trace.storage import RunStorage

SWEEP_MANIFEST_NAME = "sweep.json"
#: run outcomes that make a point done: a re-run of the sweep skips it
DONE_STATUSES = ("complete", "stopped")


class PointRun(BaseModel):
    """One load point against one target: one run folder."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(description="the point's place on the ladder, from 0")
    load: float = Field(description="the knob's value at this point")
    target: str = Field(description="the target's name")
    run_dir: str = Field(description="the run folder, relative to the sweep folder")
    status: str = Field(
        default="running",
        description="the run's status: running (or killed while it ran), complete, stopped, interrupted, failed",
    )
    status_reason: str | None = Field(default=None, description="why, when not complete")
    cache_reset: str = Field(
        default="none",
        description="how the target's prefix cache was emptied before the point: the endpoint "
        "called, or 'none' (the engine has no such endpoint; reuse of an earlier point may count)",
    )
    stop_rule: str | None = Field(
        default=None, description="auto ladders: the stop rule this point met for its target, if any"
    )

    @property
    def done(self) -> bool:
        return self.status in DONE_STATUSES


class SweepManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sweep_id: str = Field(description="the sweep folder's name")
    swarm_version: str
    kind: str = Field(description="run (agent swarms) or replay")
    knob: str = Field(description="the load knob: agents, max_in_flight, rate, sessions, speed")
    ladder: list[float] = Field(default_factory=list, description="fixed ladder: the loads in order")
    auto: dict[str, Any] | None = Field(default=None, description="auto ladder: start, factor, limits")
    stop_rules: dict[str, Any] = Field(default_factory=dict, description="auto ladders: the stop rules")
    slos: list[str] = Field(default_factory=list, description="SLOs as given (NAME:VALUE)")
    steady_fraction: float = Field(description="the steady-state window's fraction (docs/sweeps.md)")
    cliff_fraction: float = Field(description="the eviction cliff's fraction of the low-load hit")
    kv_budget_tokens: int | None = Field(
        default=None, description="the targets' prefix-cache budget in tokens when known (emulators)"
    )
    definition_digest: str = Field(description="digest of what the sweep measures; a re-run must match it")
    definition: dict[str, Any] = Field(default_factory=dict, description="the sweep's definition")
    targets: list[str] = Field(default_factory=list, description="target names, in the order they run")
    seed: int | None = Field(default=None, description="the workload's seed, the same at every point")
    status: str = Field(default="running", description="running, complete, interrupted, failed")
    status_reason: str | None = None
    stopped_by: dict[str, str] = Field(
        default_factory=dict, description="auto ladders: per target, the rule that ended its climb"
    )
    points: list[PointRun] = Field(default_factory=list)
    created_at: str = ""
    finished_at: str | None = None

    def write(self, folder: str | RunStorage) -> None:
        """Write atomically (temp file + move): readers never see half a manifest."""
        storage = folder if isinstance(folder, RunStorage) else RunStorage.at(folder)
        storage.write_bytes(SWEEP_MANIFEST_NAME, (self.model_dump_json(indent=2) + "\n").encode("utf-8"))

    @classmethod
    def read(cls, folder: str | RunStorage) -> SweepManifest:
        storage = folder if isinstance(folder, RunStorage) else RunStorage.at(folder)
        where = storage.path(SWEEP_MANIFEST_NAME)
        try:
            data = json.loads(storage.read_bytes(SWEEP_MANIFEST_NAME).decode("utf-8"))
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{where}: no sweep manifest (is this a sweep folder?)") from exc
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{where}: not a readable JSON file: {exc}") from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in exc.errors()[:3]
            )
            raise InputError(f"{where}: not a swarm sweep manifest: {problems}") from None

    def latest(self, index: int, target: str) -> PointRun | None:
        """The last attempt at (point, target), if any."""
        found = [p for p in self.points if p.index == index and p.target == target]
        return found[-1] if found else None

    def done_runs(self) -> list[PointRun]:
        """Per (point, target), its done attempt, in ladder then target order."""
        out: dict[tuple[int, str], PointRun] = {}
        for p in self.points:
            if p.done:
                out[(p.index, p.target)] = p
        order = {name: i for i, name in enumerate(self.targets)}
        return sorted(out.values(), key=lambda p: (p.index, order.get(p.target, len(order))))


def is_sweep_folder(location: str) -> bool:
    """Whether ``location`` holds a sweep manifest."""
    try:
        return RunStorage.at(location).exists(SWEEP_MANIFEST_NAME)
    except (OSError, ValueError):
        return False
