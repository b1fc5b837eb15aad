"""The engine model's counters: what ``/metrics`` states of an emulated engine.

Place in the map (docs/architecture.md, "The emulator"): kept by ``engine_model.EngineModel`` as
it admits, steps and finishes requests; written as Prometheus text and engine JSON by
``formats``; read by ``swarm report``'s step check (``analysis.engine_metrics``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

#: Histogram bucket upper bounds in seconds, for the Prometheus latency metrics.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    total: float = 0.0
    n: int = 0

    def observe(self, value_s: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_S, value_s)] += 1
        self.total += value_s
        self.n += 1


@dataclass
class EngineStats:
    """Counters for ``/metrics`` (cumulative since start)."""

    requests_total: int = 0
    requests_finished: int = 0
    prompt_tokens_total: int = 0
    cached_tokens_total: int = 0
    generation_tokens_total: int = 0
    ttft: Histogram = field(default_factory=Histogram)
    e2e: Histogram = field(default_factory=Histogram)
    queue: Histogram = field(default_factory=Histogram)
    tpot: Histogram = field(default_factory=Histogram)
    #: ``batch`` timing: steps run, their modelled and their actual duration (an emulator
    #: that cannot keep its model on a busy CPU shows it here: actual > modelled)
    steps: int = 0
    step_model_s: float = 0.0
    step_actual_s: float = 0.0
    #: tokens after each request's first emitted by steps, and Σ per such token of the modelled
    #: time since its request's previous token: the model's ITL as a client measures it (every
    #: step between two tokens counts, a prefill step that pauses decodes included; first
    #: tokens, which a client counts in TTFT, are left out)
    step_tokens: int = 0
    step_token_model_s: float = 0.0
    #: running requests preempted for lack of KV (``emulator.scheduler``)
    preemptions: int = 0
    #: cached tokens loaded from the host tier
    host_loaded_tokens: int = 0
