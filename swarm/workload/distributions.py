"""Distributions for spec files: token counts and think/tool times.

Place in the map (docs/architecture.md, "Workload"): used by agent profiles and the Workload. Each distribution is a
pydantic model (``dist: <kind>`` plus its parameters), validated when the spec is read, so an
impossible parameter (a negative rate, min above max) is refused before any request is sent.
Sampling takes a ``random.Random`` owned by the caller: the Workload seeds one per agent, so
samples are a pure function of (spec, seed).

``min`` and ``max`` clip every kind; integer-valued uses (token counts) round the sample.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Clipped(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min: float | None = Field(default=None, description="samples below are raised to this")
    max: float | None = Field(default=None, description="samples above are lowered to this")

    @model_validator(mode="after")
    def _bounds(self) -> _Clipped:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self

    def _draw(self, rng: random.Random) -> float:
        raise NotImplementedError

    def sample(self, rng: random.Random) -> float:
        value = self._draw(rng)
        if self.min is not None and value < self.min:
            value = self.min
        if self.max is not None and value > self.max:
            value = self.max
        return value

    def sample_int(self, rng: random.Random, floor: int = 0) -> int:
        return max(floor, round(self.sample(rng)))

    def mean(self) -> float:
        """The mean before clipping (for docs and sanity checks)."""
        raise NotImplementedError


class Constant(_Clipped):
    dist: Literal["constant"] = "constant"
    value: float = Field(ge=0, description="the value every sample takes")

    def _draw(self, rng: random.Random) -> float:
        return self.value

    def mean(self) -> float:
        return self.value


class Uniform(_Clipped):
    dist: Literal["uniform"] = "uniform"
    low: float = Field(ge=0)
    high: float = Field(ge=0)

    @model_validator(mode="after")
    def _order(self) -> Uniform:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is greater than high ({self.high})")
        return self

    def _draw(self, rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)

    def mean(self) -> float:
        return (self.low + self.high) / 2


class Normal(_Clipped):
    dist: Literal["normal"] = "normal"
    mean_: float = Field(alias="mean", ge=0)
    std: float = Field(gt=0)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def _draw(self, rng: random.Random) -> float:
        return max(0.0, rng.gauss(self.mean_, self.std))

    def mean(self) -> float:
        return self.mean_


class LogNormal(_Clipped):
    """Parametrised by its median and the sigma of the underlying normal (right-skewed sizes)."""

    dist: Literal["lognormal"] = "lognormal"
    median: float = Field(gt=0)
    sigma: float = Field(gt=0, le=5)

    def _draw(self, rng: random.Random) -> float:
        return rng.lognormvariate(math.log(self.median), self.sigma)

    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2)


class Exponential(_Clipped):
    dist: Literal["exponential"] = "exponential"
    mean_: float = Field(alias="mean", gt=0)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def _draw(self, rng: random.Random) -> float:
        return rng.expovariate(1.0 / self.mean_)

    def mean(self) -> float:
        return self.mean_


class Gamma(_Clipped):
    """Mean and coefficient of variation (cv > 1: burstier than exponential)."""

    dist: Literal["gamma"] = "gamma"
    mean_: float = Field(alias="mean", gt=0)
    cv: float = Field(gt=0, le=20)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def _draw(self, rng: random.Random) -> float:
        shape = 1.0 / self.cv**2
        return rng.gammavariate(shape, self.mean_ / shape)

    def mean(self) -> float:
        return self.mean_


class Empirical(_Clipped):
    """A recorded distribution (``swarm fit`` writes one where no simple shape fits): its values
    at evenly spaced probabilities 0, 1/k, ..., 1; a sample interpolates linearly between the
    two quantiles around a uniform draw."""

    dist: Literal["empirical"] = "empirical"
    quantiles: list[float] = Field(
        min_length=2, max_length=1001, description="values at probabilities 0, 1/k, ..., 1 (non-decreasing)"
    )

    @model_validator(mode="after")
    def _sorted(self) -> Empirical:
        q = self.quantiles
        if any(not math.isfinite(v) or v < 0 for v in q):
            raise ValueError("quantiles must be finite and not negative")
        if any(b < a for a, b in itertools.pairwise(q)):
            raise ValueError("quantiles must not decrease")
        return self

    def _draw(self, rng: random.Random) -> float:
        q = self.quantiles
        u = rng.random() * (len(q) - 1)
        i = min(int(u), len(q) - 2)
        return q[i] + (q[i + 1] - q[i]) * (u - i)

    def mean(self) -> float:
        q = self.quantiles
        return sum((a + b) / 2 for a, b in itertools.pairwise(q)) / (len(q) - 1)


Distribution = Annotated[
    Constant | Uniform | Normal | LogNormal | Exponential | Gamma | Empirical,
    Field(discriminator="dist"),
]
