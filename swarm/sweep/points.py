"""What one sweep point runs: an agent swarm or a replay with the knob set to the point's load.

Place in the map (docs/architecture.md, "Sweeps"): the two ``PointLauncher``s the runner calls
once per (point, target). ``AgentPoints`` sets the knob on a copy of the ``RunSpec`` and calls
``launch.execute_run``; ``ReplayPoints`` sets it on the replay's settings and calls
``launch.execute_replay``. Nothing else changes between points: the same workload, the same
seed, the same replay, so every target at every point gets like-for-like traffic.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from swarm.clients.client import redact_url
from swarm.errors import InputError
from swarm.launch import execute_replay, execute_run
from swarm.replay.plan import ReplayPlan
from swarm.runtime.executor import Executor
from swarm.runtime.frame import RunResult
from swarm.runtime.replay_source import group_sessions
from swarm.runtime.specs import RunSpec, TargetSpec
from swarm.sweep.spec import AGENT_KNOBS, INTEGER_KNOBS, REPLAY_KNOBS
from swarm.workload.catalog import Catalog
from swarm.workload.workload import Workload, check_mix

#: RunSpec fields that say where and how a run executes, not what it measures
_PLACEMENT_FIELDS = {
    "targets", "output_dir", "executor", "workers", "address", "ray_timeout_s", "worker_writes",
    "flush_interval_s", "emulator_args",
}  # fmt: skip


class PointLauncher(Protocol):
    kind: str
    knobs: tuple[str, ...]
    seed: int | None

    def definition(self) -> dict[str, Any]:
        """What every point sends (for the sweep's digest: a re-run must send the same)."""
        ...

    def check_knob(self, knob: str, loads: list[float]) -> None:
        """An InputError when ``knob`` (or a load of a fixed ladder) cannot vary this base."""
        ...

    def run_point(
        self, knob: str, load: float, target: TargetSpec, executor: Executor, output_dir: str
    ) -> RunResult:
        """One run of the base with ``knob`` set to ``load`` against ``target`` alone."""
        ...


def _value(knob: str, load: float) -> float | int:
    return int(load) if knob in INTEGER_KNOBS else float(load)


class AgentPoints:
    """Agent swarms: ``agents`` (sessions), ``max_in_flight`` or arrival ``rate`` per point."""

    kind = "run"
    knobs = AGENT_KNOBS

    def __init__(self, spec: RunSpec, catalog: Catalog | None = None, source: str = "run spec") -> None:
        check_mix(spec.workload, catalog, source)
        self.spec = spec
        self.catalog = catalog
        self.source = source
        self.seed: int | None = spec.workload.seed
        self._digests = Workload(spec.workload, catalog).content_digests()

    def check_knob(self, knob: str, loads: list[float] | None = None) -> None:
        if knob not in self.knobs:
            raise InputError(f"an agent sweep's knob is one of {', '.join(self.knobs)}, not {knob}")
        if knob == "rate" and self.spec.workload.arrival.process == "all_at_once":
            raise InputError("a sweep over the arrival rate needs arrivals with a rate (not --arrival all)")

    def definition(self) -> dict[str, Any]:
        return {
            "spec": self.spec.model_dump(mode="json", exclude=_PLACEMENT_FIELDS),
            "workload_digests": self._digests,
        }

    def point_spec(self, knob: str, load: float) -> RunSpec:
        spec = self.spec.model_copy(deep=True)
        value = _value(knob, load)
        if knob == "agents":
            spec.workload.agents = int(value)
        elif knob == "max_in_flight":
            spec.workload.max_in_flight = int(value)
        elif knob == "rate":
            spec.workload.arrival.rate = float(value)
        return spec

    def run_point(
        self, knob: str, load: float, target: TargetSpec, executor: Executor, output_dir: str
    ) -> RunResult:
        spec = self.point_spec(knob, load)
        spec.targets = [target]
        spec.output_dir = output_dir
        return execute_run(spec, catalog=self.catalog, executor=executor, source=self.source)


class ReplayPoints:
    """Replays: ``max_sessions`` in progress (a closed loop), ``max_in_flight`` or ``speed`` per point.

    ``settings`` are ``execute_replay``'s keyword arguments (mode, speed, copies, retries, ...)
    other than the plan, targets, executor and output folder."""

    kind = "replay"
    knobs = REPLAY_KNOBS

    def __init__(self, plan: ReplayPlan, settings: dict[str, Any]) -> None:
        self.plan = plan
        self.settings = dict(settings)
        self.seed = plan.source_seed

    def check_knob(self, knob: str, loads: list[float] | None = None) -> None:
        if knob not in self.knobs:
            raise InputError(f"a replay sweep's knob is one of {', '.join(self.knobs)}, not {knob}")
        if knob == "max_sessions" and loads:
            sessions = len(group_sessions(self.plan.items)) * int(self.settings.get("copies", 1))
            if max(loads) > sessions:
                raise InputError(
                    f"--max-sessions {max(loads):g}: the replay has {sessions} sessions"
                    f"{' (with its copies)' if self.settings.get('copies', 1) > 1 else ''}; "
                    "more in progress at once than that is the same load (--copies N plays each N times)"
                )

    def definition(self) -> dict[str, Any]:
        h = hashlib.sha256()
        for item in self.plan.items:
            h.update(
                f"{item.identity.session_id}|{item.offset_s}|{item.prompt_tokens}|{item.max_tokens}|"
                f"{item.parents}|{item.block_ids}|{item.prompt_parts}\n".encode()
            )
        plain = {
            k: (v.model_dump(mode="json") if hasattr(v, "model_dump") else v)
            for k, v in self.settings.items()
            if k not in ("spec", "tokenizer", "on_target_start", "emulator_args", "record_text")
        }
        return {
            "source": redact_url(self.plan.source) if "://" in self.plan.source else self.plan.source,
            "format": self.plan.source_format,
            "requests": len(self.plan.items),
            "items_digest": h.hexdigest()[:16],
            "settings": plain,
        }

    def run_point(
        self, knob: str, load: float, target: TargetSpec, executor: Executor, output_dir: str
    ) -> RunResult:
        kwargs = dict(self.settings)
        value = _value(knob, load)
        if knob == "max_sessions":
            kwargs["max_sessions"] = int(value)
        elif knob == "max_in_flight":
            kwargs["max_in_flight"] = int(value)
        elif knob == "speed":
            kwargs["speed"] = float(value)
        return execute_replay(self.plan, [target], executor=executor, output_dir=output_dir, **kwargs)
