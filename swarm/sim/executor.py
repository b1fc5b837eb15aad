"""The simulation's Executor: a target run on a virtual clock against its engine twins.

Place in the map (docs/architecture.md, "Simulation"): the Executor ``swarm simulate`` hands to
the run frame. For each target run it makes a virtual event loop (``sim.virtual_loop``), the
target's fleet of twins (``sim.twin_client.TwinFleet``: the engine model ``swarm emulate``
serves, its step loop on the same loop) and a ``TwinClient``, and dispatches the run's source
through ``runtime.loop.dispatch``, the code every measured run goes through. A run's duration
is simulated time; the wall time it took and the events it visited are logged (and kept in
``accounts``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from swarm.emulator.config import EmulatorConfig
from swarm.engines.registry import get_engine
from swarm.runtime.clocks import Placement
from swarm.runtime.context import SIMULATED_SCHEME, ResolvedTarget, TargetOutcome, TargetRun
from swarm.runtime.executor import run_with_signals
from swarm.runtime.loop import dispatch, stop_conditions_for
from swarm.sim.spec import SimulationSpec
from swarm.sim.twin_client import TwinClient, TwinFleet
from swarm.sim.virtual_loop import VirtualClock, VirtualTimeLoop

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SimulationAccount:
    """What one simulated target run cost: simulated seconds, wall seconds, clock jumps, and
    the requests it sent."""

    target: str
    simulated_s: float
    wall_s: float
    events: int
    requests: int = 0

    @property
    def speedup(self) -> float:
        """Simulated seconds per wall second."""
        return self.simulated_s / self.wall_s if self.wall_s > 0 else float("inf")


def twin_targets(spec: SimulationSpec) -> list[ResolvedTarget]:
    """One target per twin, named ``twin-ENGINE`` (``twin-ENGINE-2`` for a second of one
    engine), at ``sim://ENGINE``; a fleet's replicas at ``sim://ENGINE/I``."""
    targets = []
    for name, config in zip(spec.twin_names(), spec.twins, strict=True):
        url = f"{SIMULATED_SCHEME}{name}"
        replicas = tuple(f"{url}/{i}" for i in range(spec.fleet)) if spec.fleet > 1 else ()
        engine = get_engine(config.engine)
        targets.append(
            ResolvedTarget(
                name=name, url=url, engine=config.engine, dialect=engine.default_dialect, model=config.model,
                emulated=True, replicas=replicas,
                server_info={"simulated": True, "block_tokens": config.block_tokens, "fleet": spec.fleet},
            )
        )  # fmt: skip
    return targets


class SimulatedExecutor:
    """Runs each target's run in virtual time against its twins (the module docstring)."""

    def __init__(self, spec: SimulationSpec) -> None:
        self.spec = spec
        self._configs: dict[str, EmulatorConfig] = {
            t.name: c for t, c in zip(twin_targets(spec), spec.twins, strict=True)
        }
        self.accounts: list[SimulationAccount] = []

    def __enter__(self) -> SimulatedExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run_target(self, run: TargetRun) -> TargetOutcome:
        target = run.target
        config = self._configs[target.name]
        clock = VirtualClock()
        placement = Placement(wall_minus_perf_ns=time.time_ns())  # wall = the start's + virtual ns
        stop = stop_conditions_for(run, placement, clock=clock.seconds, perf_ns=clock.ns)

        async def main() -> TargetOutcome:
            fleet = TwinFleet(config, self.spec.fleet, self.spec.routing, clock.seconds)
            fleet.names = list(target.replicas) or [target.url]
            fleet.start()
            client = TwinClient(
                fleet, clock, target=target.name, engine=target.engine, dialect=target.dialect,
                model=target.model, timeouts=run.timeouts, wall_minus_perf_ns=placement.wall_minus_perf_ns or 0,
            )  # fmt: skip
            try:
                return await dispatch(run, client, placement, stop, clock_ns=clock.ns, precise_release=False)
            finally:
                await fleet.stop()

        wall0 = time.perf_counter()
        outcome = run_with_signals(main, stop.interrupt, loop_factory=lambda: VirtualTimeLoop(clock))
        account = SimulationAccount(
            target.name, clock.elapsed_s, time.perf_counter() - wall0, clock.jumps, outcome.requests
        )
        self.accounts.append(account)
        log.info(
            "target %s: %.1f simulated s in %.1f wall s (%.0fx real time, %d clock events)",
            target.name, account.simulated_s, account.wall_s, account.speedup, account.events,
        )  # fmt: skip
        return outcome
