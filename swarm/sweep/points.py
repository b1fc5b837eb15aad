"""What one sweep point runs: an agent swarm or a replay with the knob set to the point's load.

Place in the map (docs/architecture.md, "Sweeps"): the two ``PointLauncher``s the runner calls
once per (point, target). Each holds the base spec (a ``RunSpec``, or a ``ReplaySpec`` and its
plan, read once); ``with_load`` sets the knob on a copy of it, the one way a load is set, and
``launch`` runs it. Nothing else changes between points: the same workload, the same seed, the
same replay, so every target at every point gets like-for-like traffic.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from swarm.clients.client import redact_url
from swarm.errors import InputError
from swarm.launch import execute_replay, execute_run, execute_simulation, replay_plan_for
from swarm.runtime.executor import Executor
from swarm.runtime.frame import RunResult
from swarm.runtime.replay_source import group_sessions
from swarm.runtime.specs import ReplaySpec, RunSpec, TargetSpec
from swarm.sim.spec import SimulationSpec
from swarm.sweep.spec import AGENT_KNOBS, FLEET_KNOBS, INTEGER_KNOBS, KNOB_PATHS, REPLAY_KNOBS
from swarm.workload.catalog import Catalog
from swarm.workload.workload import Workload, check_mix

#: fields that say where and how a run executes, not what it measures
_PLACEMENT_FIELDS = {
    "targets", "output_dir", "executor", "workers", "address", "ray_timeout_s", "worker_writes",
    "flush_interval_s", "emulator_args", "record_text",
}  # fmt: skip

S = TypeVar("S", bound=BaseModel)


def with_load(spec: S, knob: str, load: float) -> S:
    """A copy of ``spec`` with ``knob`` (``KNOB_PATHS``) set to ``load`` (a whole number for
    the whole-number knobs)."""
    if knob in FLEET_KNOBS:  # the simulated fleet's, not the spec's (``_fleet_of``)
        return spec
    *parents, name = KNOB_PATHS[knob]
    out = spec.model_copy(deep=True)
    holder: Any = out
    for part in parents:
        holder = getattr(holder, part)
    setattr(holder, name, int(load) if knob in INTEGER_KNOBS else float(load))
    return out


def _simulated_definition(simulation: SimulationSpec) -> dict[str, Any]:
    """What a simulated sweep's points share: the manifest's entry, with the routing policy even
    for a fleet of one (a ``replicas`` ladder grows it: two policies are two sweeps)."""
    return {**simulation.manifest_entry(), "routing": simulation.routing}


def _check_replicas(knob: str, loads: list[float] | None, simulation: SimulationSpec | None) -> None:
    """A ``replicas`` ladder's top is a fleet the simulation takes (``SimulationSpec.fleet``)."""
    if knob in FLEET_KNOBS and loads and simulation is not None:
        try:
            SimulationSpec.model_validate({**simulation.model_dump(), "fleet": int(max(loads))})
        except ValidationError as exc:
            raise InputError(f"--ladder {knob}=...: {exc.errors()[0]['msg']}") from None


def _fleet_of(simulation: SimulationSpec | None, knob: str, load: float, target: TargetSpec) -> SimulationSpec:
    """The twin ``target`` names, alone, with the point's replicas where the knob is theirs."""
    assert simulation is not None
    twin = simulation.only(target.name)
    return twin.model_copy(update={"fleet": int(load)}) if knob in FLEET_KNOBS else twin


def _check_fleet_knob(knob: str, simulation: SimulationSpec | None) -> None:
    if knob in FLEET_KNOBS and simulation is None:
        raise InputError(
            f"--ladder {knob}=...: the replicas of a simulated fleet (--simulate); a real fleet's are its "
            "servers: start each size and sweep it as a --target"
        )


def _one_target(spec: S, target: TargetSpec, output_dir: str) -> S:
    """``spec`` sent to ``target`` alone, its run folder under ``output_dir``."""
    return spec.model_copy(update={"targets": [target], "output_dir": output_dir})


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


class AgentPoints:
    """Agent swarms: ``agents`` (sessions), ``max_in_flight`` or arrival ``rate`` per point."""

    kind = "run"
    knobs = AGENT_KNOBS

    def __init__(
        self, spec: RunSpec, catalog: Catalog | None = None, source: str = "run spec",
        simulation: SimulationSpec | None = None,
    ) -> None:  # fmt: skip
        check_mix(spec.workload, catalog, source)
        self.spec = spec
        #: every point simulated against these twins (``swarm sweep --simulate``), one at a time
        self.simulation = simulation
        self.catalog = catalog
        self.source = source
        self.seed: int | None = spec.workload.seed
        self._digests = Workload(spec.workload, catalog).content_digests()

    def check_knob(self, knob: str, loads: list[float] | None = None) -> None:
        if knob not in (*self.knobs, *FLEET_KNOBS):
            raise InputError(f"an agent sweep's knob is one of {', '.join((*self.knobs, *FLEET_KNOBS))}, not {knob}")
        _check_fleet_knob(knob, self.simulation)
        _check_replicas(knob, loads, self.simulation)
        if knob == "rate" and self.spec.workload.arrival.process == "all_at_once":
            raise InputError("a sweep over the arrival rate needs arrivals with a rate (not --arrival all)")

    def definition(self) -> dict[str, Any]:
        out = {
            "spec": self.spec.model_dump(mode="json", exclude=_PLACEMENT_FIELDS),
            "workload_digests": self._digests,
        }
        if self.simulation is not None:
            out["simulated"] = _simulated_definition(self.simulation)
        return out

    def run_point(
        self, knob: str, load: float, target: TargetSpec, executor: Executor, output_dir: str
    ) -> RunResult:
        if self.simulation is not None:  # the twin the target names, alone
            spec = with_load(self.spec, knob, load).model_copy(update={"output_dir": output_dir})
            twin = _fleet_of(self.simulation, knob, load, target)
            return execute_simulation(spec, twin, catalog=self.catalog, source=self.source)
        spec = _one_target(with_load(self.spec, knob, load), target, output_dir)
        return execute_run(spec, catalog=self.catalog, executor=executor, source=self.source)


class ReplayPoints:
    """Replays: ``max_sessions`` in progress (a closed loop), ``max_in_flight`` or ``speed`` per point.
    The plan is read once (and its waits scaled) for every point."""

    kind = "replay"
    knobs = REPLAY_KNOBS

    def __init__(self, spec: ReplaySpec, simulation: SimulationSpec | None = None) -> None:
        self.spec = spec
        self.plan = replay_plan_for(spec)
        self.seed = self.plan.source_seed
        #: every point simulated against these twins (``swarm sweep --replay --simulate``)
        self.simulation = simulation

    def check_knob(self, knob: str, loads: list[float] | None = None) -> None:
        if knob not in (*self.knobs, *FLEET_KNOBS):
            raise InputError(f"a replay sweep's knob is one of {', '.join((*self.knobs, *FLEET_KNOBS))}, not {knob}")
        _check_fleet_knob(knob, self.simulation)
        _check_replicas(knob, loads, self.simulation)
        copies = self.spec.replay.copies
        if knob == "max_sessions" and loads:
            sessions = len(group_sessions(self.plan.items)) * copies
            if max(loads) > sessions:
                raise InputError(
                    f"--max-sessions {max(loads):g}: the replay has {sessions} sessions"
                    f"{' (with its copies)' if copies > 1 else ''}; "
                    "more in progress at once than that is the same load (--copies N plays each N times)"
                )

    def definition(self) -> dict[str, Any]:
        h = hashlib.sha256()
        for item in self.plan.items:
            h.update(
                f"{item.identity.session_id}|{item.offset_s}|{item.prompt_tokens}|{item.max_tokens}|"
                f"{item.parents}|{item.block_ids}|{item.prompt_parts}\n".encode()
            )
        source = self.plan.source
        out = {
            "source": redact_url(source) if "://" in source else source,
            "format": self.plan.source_format,
            "requests": len(self.plan.items),
            "items_digest": h.hexdigest()[:16],
            "settings": self.spec.model_dump(mode="json", exclude=_PLACEMENT_FIELDS | {"replay"})
            | {"replay": self.spec.replay.model_dump(mode="json", exclude={"source"})},
        }
        if self.simulation is not None:
            out["simulated"] = _simulated_definition(self.simulation)
        return out

    def run_point(
        self, knob: str, load: float, target: TargetSpec, executor: Executor, output_dir: str
    ) -> RunResult:
        if self.simulation is not None:  # the twin the target names, alone
            spec = with_load(self.spec, knob, load).model_copy(update={"output_dir": output_dir})
            return execute_replay(spec, plan=self.plan, simulation=_fleet_of(self.simulation, knob, load, target))
        spec = _one_target(with_load(self.spec, knob, load), target, output_dir)
        return execute_replay(spec, plan=self.plan, executor=executor)
