"""What a simulation models: the engine twins, each as a fleet behind a routing policy.

Place in the map (docs/architecture.md, "Simulation"): ``swarm simulate``'s settings beside the
run's ``RunSpec`` (the same workload, limits and output). The twins are ``EmulatorConfig``s,
the settings ``swarm emulate`` serves (the CLI builds them from ``--engine``,
``--emulator-arg`` and a calibration file, as ``swarm run`` starts its embedded emulators).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swarm.cliflag import flag
from swarm.emulator.config import EmulatorConfig


class SimulationSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fleet: int = Field(
        default=1, ge=1, le=4096,
        description="each twin a fleet of this many replicas behind --routing (1: one engine, no router)",
        json_schema_extra=flag("--fleet", group="Simulation", metavar="N"),
    )  # fmt: skip
    routing: Literal["round_robin", "least_load", "cache_aware"] = Field(
        default="cache_aware",
        description="how a fleet's router picks a replica: in turn, the fewest in flight, or SGLang's "
        "router's cache-aware policy (sim/routing.py)",
        json_schema_extra=flag("--routing", group="Simulation"),
    )
    twins: list[EmulatorConfig] = Field(
        default_factory=list,
        description="the engine twins simulated, one target each (built from --engine and --emulator-arg)",
    )

    twin_errors: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="per engine whose twin is calibrated: its calibration file, and the twin's error against "
        "its engine when recorded there (swarm compare --record-error); stated beside the simulated figures",
    )

    def twin_names(self) -> list[str]:
        """Each twin's target name: ``twin-ENGINE`` (one twin per engine)."""
        return [f"twin-{config.engine}" for config in self.twins]

    @model_validator(mode="after")
    def _one_twin_per_engine(self) -> SimulationSpec:
        engines = [t.engine for t in self.twins]
        if len(set(engines)) < len(engines):
            raise ValueError(
                f"one twin per engine (given: {', '.join(engines)}): simulate other settings of one engine separately"
            )
        return self

    def only(self, name: str) -> SimulationSpec:
        """This simulation of the one twin named ``name`` (a sweep's point runs one target)."""
        names = self.twin_names()
        if name not in names:
            raise ValueError(f"no twin {name!r} (twins: {', '.join(names)})")
        return self.model_copy(update={"twins": [self.twins[names.index(name)]]})

    def manifest_entry(self) -> dict[str, Any]:
        """What the run's manifest says of it (``simulated``)."""
        return {
            "clock": "virtual",
            "fleet": self.fleet,
            "routing": self.routing if self.fleet > 1 else None,
            "twins": [
                {
                    "engine": t.engine,
                    **t.model_dump(mode="json", exclude_defaults=True, exclude={"host", "port"}),
                    **({"calibrated": self.twin_errors[t.engine]} if t.engine in self.twin_errors else {}),
                }
                for t in self.twins
            ],
        }
