"""Arrival processes, checked statistically on fixed seeds.

Tolerances: with n = 20,000 gaps, the sample mean of exponential gaps has a relative standard
error of 1/sqrt(n) = 0.7%; we allow 3%. The coefficient of variation is allowed 5%.
"""

from __future__ import annotations

import numpy as np
import pytest

from swarm.errors import InputError
from swarm.workload.arrival import ArrivalSpec, parse_arrival

N = 20_000


def gaps(spec: ArrivalSpec, seed: int = 1) -> np.ndarray:
    times = spec.offsets(N, np.random.default_rng(seed))
    assert np.all(np.diff(times) >= 0)
    return np.diff(np.concatenate([[0.0], times]))


def test_all_at_once() -> None:
    assert not ArrivalSpec(process="all_at_once", rate=None).offsets(10, np.random.default_rng(0)).any()


def test_constant_is_exact() -> None:
    g = gaps(ArrivalSpec(process="constant", rate=8))
    assert np.allclose(g[1:], 1 / 8)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_poisson_mean_and_dispersion(seed: int) -> None:
    g = gaps(ArrivalSpec(process="poisson", rate=40), seed)
    assert g.mean() == pytest.approx(1 / 40, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.05)
    # counts per 1 s window: variance / mean ~ 1 for Poisson
    times = np.cumsum(g)
    counts = np.bincount(times.astype(int))[:-1]
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.15)


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_burstiness(cv: float) -> None:
    g = gaps(ArrivalSpec(process="gamma", rate=20, cv=cv))
    assert g.mean() == pytest.approx(1 / 20, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.06)


def test_ramp_follows_the_linear_rate() -> None:
    spec = ArrivalSpec(process="ramp", start_rate=10, rate=110, ramp_s=100)
    times = spec.offsets(N, np.random.default_rng(5))
    # expected arrivals in [0, T] = (r0 + r1) / 2 * T = 6000; in [0, T/2]: 10*50 + 100*50^2/(2*100) = 1750
    assert (times <= 100).sum() == pytest.approx(6000, rel=0.04)
    assert (times <= 50).sum() == pytest.approx(1750, rel=0.06)
    after = np.diff(times[times > 100])
    assert after.mean() == pytest.approx(1 / 110, rel=0.05)


def test_shorthand() -> None:
    assert parse_arrival("poisson:5").rate == 5
    g = parse_arrival("gamma:10,3")
    assert (g.process, g.rate, g.cv) == ("gamma", 10, 3)
    r = parse_arrival("ramp:1,50,60")
    assert (r.start_rate, r.rate, r.ramp_s) == (1, 50, 60)
    assert parse_arrival("all").process == "all_at_once"
    for bad in ("poisson", "poisson:-1", "gamma:1", "warp:3", "poisson:x"):
        with pytest.raises(InputError, match="--arrival"):
            parse_arrival(bad)
