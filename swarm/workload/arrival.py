"""Arrival processes: when agents start, as target offsets from the run's start.

Place in the map (docs/architecture.md, "Workload"): strategies compute, runners sleep. An
``ArrivalSpec`` returns the start offsets (seconds) of ``n`` agents from a seeded NumPy
generator; the runner sleeps until each one and records any lateness as ``queue_ns``.

- ``all_at_once``: every agent at 0.
- ``poisson``: exponential gaps with mean ``1/rate`` (coefficient of variation 1).
- ``constant``: gaps of exactly ``1/rate``.
- ``gamma``: gamma gaps with mean ``1/rate`` and coefficient of variation ``cv``
  (shape ``1/cv**2``); ``cv > 1`` is burstier than Poisson, ``cv < 1`` more regular.
- ``ramp``: a Poisson process whose rate rises linearly from ``start_rate`` to ``rate``
  over ``ramp_s`` seconds and stays at ``rate`` after; arrival times come from unit-rate
  Poisson times mapped through the inverse of the cumulative rate.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swarm.errors import InputError

Process = Literal["all_at_once", "poisson", "constant", "gamma", "ramp"]


class ArrivalSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    process: Process = Field(default="poisson", description="how agents arrive")
    rate: float | None = Field(
        default=10.0, gt=0, description="agents per second (poisson, constant, gamma, ramp end)"
    )
    cv: float = Field(default=2.0, gt=0, le=20, description="gamma: coefficient of variation of the gaps")
    start_rate: float = Field(default=1.0, gt=0, description="ramp: rate at time 0")
    ramp_s: float = Field(default=30.0, gt=0, description="ramp: seconds to reach `rate`")

    @field_validator("process", mode="before")
    @classmethod
    def _all_is_all_at_once(cls, value: object) -> object:
        """``all`` (the command line's short form) is accepted for ``all_at_once`` in a spec too."""
        return "all_at_once" if value == "all" else value

    @model_validator(mode="after")
    def _needs_rate(self) -> ArrivalSpec:
        if self.process != "all_at_once" and self.rate is None:
            raise ValueError(f"{self.process} arrivals need a rate")
        return self

    def offsets(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Start offsets in seconds of ``n`` agents, non-decreasing, the first at its gap."""
        if n <= 0:
            return np.zeros(0)
        if self.process == "all_at_once":
            return np.zeros(n)
        rate = float(self.rate or 1.0)
        if self.process == "constant":
            return np.arange(n, dtype=float) / rate
        if self.process == "poisson":
            return np.cumsum(rng.exponential(1.0 / rate, n))
        if self.process == "gamma":
            shape = 1.0 / self.cv**2
            return np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), n))
        # ramp: cumulative intensity L(t) = r0 t + (r1 - r0) t^2 / (2T) for t <= T, then linear
        r0, r1, big_t = self.start_rate, rate, self.ramp_s
        unit = np.cumsum(rng.exponential(1.0, n))
        l_end = r0 * big_t + (r1 - r0) * big_t / 2
        out = np.empty(n)
        before = unit <= l_end
        a = (r1 - r0) / (2 * big_t)
        u = unit[before]
        if abs(a) < 1e-12:
            out[before] = u / r0
        else:
            out[before] = (-r0 + np.sqrt(r0 * r0 + 4 * a * u)) / (2 * a)
        out[~before] = big_t + (unit[~before] - l_end) / r1
        return out


def parse_arrival(text: str) -> ArrivalSpec:
    """CLI shorthand: ``all_at_once`` (or ``all``), ``poisson:RATE``, ``constant:RATE``,
    ``gamma:RATE,CV``, ``ramp:START,END,SECONDS``."""
    name, _, args = text.partition(":")
    values: list[float] = []
    try:
        values = [float(v) for v in args.split(",")] if args else []
    except ValueError:
        raise InputError(f"--arrival {text!r}: parameters must be numbers") from None
    if any(not math.isfinite(v) or v <= 0 for v in values):
        raise InputError(f"--arrival {text!r}: parameters must be positive numbers")
    try:
        if name in ("all", "all_at_once") and not values:
            return ArrivalSpec(process="all_at_once", rate=None)
        if name in ("poisson", "constant") and len(values) == 1:
            return ArrivalSpec(process=name, rate=values[0])  # type: ignore[arg-type]
        if name == "gamma" and len(values) == 2:
            return ArrivalSpec(process="gamma", rate=values[0], cv=values[1])
        if name == "ramp" and len(values) == 3:
            return ArrivalSpec(process="ramp", start_rate=values[0], rate=values[1], ramp_s=values[2])
    except ValueError as exc:
        raise InputError(f"--arrival {text!r}: {exc}") from None
    raise InputError(
        f"--arrival {text!r}: expected all_at_once, poisson:RATE, constant:RATE, gamma:RATE,CV or "
        "ramp:START,END,SECONDS"
    )
