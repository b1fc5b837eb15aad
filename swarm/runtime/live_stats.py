"""Live run statistics: bounded, mergeable counters for the progress display.

Place in the map (docs/architecture.md, "Runtime"): fed by the Dispatcher with every record, read by the CLI's live view
(and, on a cluster, merged from all workers). They are approximate views for watching a run;
the figures that count are computed afterwards from the trace. Latencies go into a log-bucket
histogram (buckets 5% wide from 10 us to ~1 h), so percentiles are within one bucket.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from swarm.record import LATE_NS, RequestRecord, Status

_MIN_NS = 10_000  # 10 us
_GROWTH = 1.05
_BUCKETS = 540  # 10 us * 1.05**540 ~ 2.7e11 ns


def behind_schedule(stats: RunStats) -> bool:
    """The rule every "fell behind its schedule" warning uses (live view, end of run, report):
    the dispatch lag's p99 is above ``LATE_NS``. A few late sends in a run are noise; one in a
    hundred is a generator that cannot keep up."""
    p99 = stats.lag.quantile_ns(0.99)
    return p99 is not None and p99 > LATE_NS


@dataclass
class LogHistogram:
    counts: list[int] = field(default_factory=lambda: [0] * (_BUCKETS + 1))
    n: int = 0

    def add(self, value_ns: int) -> None:
        i = 0 if value_ns <= _MIN_NS else min(_BUCKETS, int(math.log(value_ns / _MIN_NS, _GROWTH)) + 1)
        self.counts[i] += 1
        self.n += 1

    def quantile_ns(self, q: float) -> float | None:
        if self.n == 0:
            return None
        rank = q * (self.n - 1)
        seen = 0
        for i, c in enumerate(self.counts):
            seen += c
            if seen > rank:
                return _MIN_NS * _GROWTH ** max(i - 0.5, 0)
        return _MIN_NS * _GROWTH**_BUCKETS

    def merge(self, other: LogHistogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.n += other.n


@dataclass
class RunStats:
    """Counters of one target's run so far (one process, or merged over workers)."""

    #: records made (every sent request ends in exactly one record)
    requests: int = 0
    #: requests handed to the client so far, answered or not: ``requests`` plus those in flight
    requests_sent: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    sessions_started: int = 0
    sessions_finished: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prompt_tokens_est: int = 0
    ideal_cached_tokens: int = 0
    completion_tokens: int = 0
    chunks: int = 0
    lag_ns_max: int = 0
    #: requests whose dispatch lag was above LATE_NS (the generator could not keep up);
    #: waiting for a free slot under the in-flight cap is not lateness
    late: int = 0
    #: requests that waited for a free slot under the in-flight cap
    slot_waits: int = 0
    #: agents whose run was cut short (interrupted or halted), not counted in ``sessions_finished``
    sessions_cut: int = 0
    #: the run's sending has ended (its last request is answered): rates become averages
    finished: bool = False
    ttft: LogHistogram = field(default_factory=LogHistogram)
    lag: LogHistogram = field(default_factory=LogHistogram)
    #: per request read with kernel stamps, the client's worst lag behind them (its
    #: ``chunk_lag_ns`` maximum)
    client_lag: LogHistogram = field(default_factory=LogHistogram)
    #: ids of the sessions that ran to their end since a Ray worker last handed its stats over
    #: (the driver keeps them, to name the sessions a lost worker cut); not merged
    finished_sessions: list[str] = field(default_factory=list)

    def add(self, r: RequestRecord) -> None:
        self.requests += 1
        key = r.status.value
        self.by_status[key] = self.by_status.get(key, 0) + 1
        self.chunks += len(r.chunk_ns)
        lag = r.queue_ns - r.slot_wait_ns
        self.lag.add(max(lag, 0))
        self.lag_ns_max = max(self.lag_ns_max, lag)
        if lag > LATE_NS:
            self.late += 1
        if r.slot_wait_ns > 0:
            self.slot_waits += 1
        if r.status is Status.OK:
            if r.ttft_ns is not None:
                self.ttft.add(r.ttft_ns)
            if r.chunk_lag_ns:
                self.client_lag.add(max(r.chunk_lag_ns))
            if r.prompt_tokens is not None and r.cached_tokens is not None:
                self.prompt_tokens += r.prompt_tokens
                self.cached_tokens += r.cached_tokens
            self.completion_tokens += r.completion_tokens or 0
            if r.prompt_tokens_est is not None and r.ideal_cached_tokens_est is not None:
                self.prompt_tokens_est += r.prompt_tokens_est
                self.ideal_cached_tokens += r.ideal_cached_tokens_est

    @property
    def cancelled(self) -> int:
        """Requests cut short by the run stopping (Ctrl-C, a halt): not the engine's errors."""
        return self.by_status.get("cancelled", 0)

    @property
    def errors(self) -> int:
        """Requests that failed: neither ok nor cancelled by the run."""
        return self.requests - self.by_status.get("ok", 0) - self.cancelled

    def merge(self, other: RunStats) -> None:
        for name in (
            "requests", "requests_sent", "in_flight", "sessions_started", "sessions_finished", "sessions_cut", "prompt_tokens",
            "cached_tokens", "prompt_tokens_est", "ideal_cached_tokens", "completion_tokens", "chunks", "late",
            "slot_waits",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for k, v in other.by_status.items():
            self.by_status[k] = self.by_status.get(k, 0) + v
        self.lag_ns_max = max(self.lag_ns_max, other.lag_ns_max)
        self.ttft.merge(other.ttft)
        self.lag.merge(other.lag)
        self.client_lag.merge(other.client_lag)

    def replace_with(self, other: RunStats) -> None:
        """Take ``other``'s values (the driver's view of merged worker stats)."""
        self.__dict__.update(other.__dict__)

    def snapshot(self) -> dict[str, Any]:
        def ms(v: float | None) -> float | None:
            return None if v is None else v / 1e6

        return {
            "requests": self.requests,
            "in_flight": self.in_flight,
            "errors": self.errors,
            "cancelled": self.cancelled,
            "sessions_started": self.sessions_started,
            "sessions_finished": self.sessions_finished,
            "sessions_cut": self.sessions_cut,
            "completion_tokens": self.completion_tokens,
            "ttft_p50_ms": ms(self.ttft.quantile_ns(0.5)),
            "ttft_p99_ms": ms(self.ttft.quantile_ns(0.99)),
            "lag_p99_ms": ms(self.lag.quantile_ns(0.99)),
            "client_lag_p99_ms": ms(self.client_lag.quantile_ns(0.99)),
            "late": self.late,
            "slot_waits": self.slot_waits,
            "cache_hit_ratio": self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None,
            "ideal_hit_ratio": self.ideal_cached_tokens / self.prompt_tokens_est
            if self.prompt_tokens_est
            else None,
        }
