"""The context of one target's run: what every executor and every worker is handed.

Place in the map (docs/architecture.md, "Runtime"): built once per target by the run frame
(``runtime.frame``) and passed whole to an Executor (in-process or Ray); a Ray worker gets
the picklable part of it (``TargetRun.for_worker``) plus its Placement. One object instead
of a long parameter list written out in every executor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from swarm.request import Timeouts
from swarm.runtime.live_stats import RunStats

if TYPE_CHECKING:
    from swarm.runtime.sources import RequestSource
    from swarm.trace.sink import TraceSink
    from swarm.trace.storage import RunStorage


@dataclass(frozen=True)
class ResolvedTarget:
    """A target with everything needed to send to it."""

    name: str
    url: str
    engine: str
    dialect: str
    model: str
    api_key_env: str | None = None
    api_key_file: str | None = None
    emulated: bool = False
    server_info: dict[str, Any] | None = None


@dataclass(frozen=True)
class SendLimits:
    """Limits on one target's sending that a source carries with it (a workload's spec, or
    the replay's flags). They hold for the whole target: a source split over workers gives
    each part its share (``split``)."""

    #: requests in flight at once; 0: no cap
    max_in_flight: int = 0
    #: requests sent at most
    max_requests: int | None = None
    #: no request is sent later than this after the start, seconds
    duration_s: float | None = None

    def usable_parts(self, parts: int) -> int:
        """How many parts the limits can be shared by: an in-flight cap of C cannot be split
        over more than C workers (each needs a slot)."""
        return max(1, min(parts, self.max_in_flight) if self.max_in_flight > 0 else parts)

    def split(self, parts: int) -> list[SendLimits]:
        """Each of ``parts`` parts' share: the caps divided as evenly as whole numbers allow."""
        return [
            SendLimits(
                max_in_flight=share(self.max_in_flight, parts, i) if self.max_in_flight > 0 else 0,
                max_requests=None if self.max_requests is None else share(self.max_requests, parts, i),
                duration_s=self.duration_s,
            )
            for i in range(parts)
        ]


def share(total: int, parts: int, i: int) -> int:
    """Part ``i``'s share of ``total`` over ``parts`` parts (the first ones get the remainder)."""
    return total // parts + (1 if i < total % parts else 0)


@dataclass
class TargetOutcome:
    requests: int
    #: sessions (agents, replayed sessions) started, and those that ran to their end
    agents_started: int
    agents_finished: int
    stop_reason: str | None
    interrupted: bool
    #: per-worker facts for the manifest (cluster executors)
    workers: list[dict[str, Any]] = field(default_factory=list)
    #: why the run stopped early on its own (circuit breaker, trace not writable); None if not
    halt_reason: str | None = None
    #: records made but not written (the trace could not be written)
    records_lost: int = 0
    #: records of requests sent by workers that were lost, never handed over or closed into a part
    records_lost_with_workers: int = 0


@dataclass
class TargetRun:
    """One source against one target: where records go, how requests are sent and stopped."""

    source: RequestSource
    target: ResolvedTarget
    sink: TraceSink
    stats: RunStats = field(default_factory=RunStats)
    run_id: str = ""
    timeouts: Timeouts = field(default_factory=Timeouts)
    #: the run folder (executors whose workers write their own parts write under it)
    storage: RunStorage | None = None
    #: prompts and outputs go to the trace (``--record-text``)
    keep_text: bool = False
    #: circuit breaker: stop when this share of the last ``error_window`` requests failed
    max_error_rate: float | None = None
    error_window: int = 100
    #: stamp when each request's bytes were handed to the socket (bench: the client's delay)
    measure_send_stamps: bool = False


def wall_minus_perf_ns(samples: int = 5) -> int:
    """``time_ns() - perf_counter_ns()`` now, from the tightest of ``samples`` readings (the
    wall clock read between two perf readings; a process preempted between them would move
    the difference by as long as it waited)."""
    best: tuple[int, int] | None = None
    for _ in range(samples):
        p1 = time.perf_counter_ns()
        wall = time.time_ns()
        p2 = time.perf_counter_ns()
        if best is None or p2 - p1 < best[0]:
            best = (p2 - p1, wall - (p1 + p2) // 2)
    assert best is not None
    return best[1]


@dataclass(frozen=True)
class Placement:
    """Where a target run's loop runs: the process's clock against the driver's, which
    worker it is, and when the agreed start is."""

    worker: int = 0
    #: the agreed start, ``perf_counter_ns`` of this process; None: now
    start_perf_ns: int | None = None
    #: this process's wall clock minus the driver's (records carry the driver's clock)
    clock_offset_ns: int = 0
    #: this worker runs only some sessions: count the prefixes they all share as sent
    seed_shared_prefixes: bool = False
    #: this process's wall clock minus its perf counter, read once: the start and every
    #: record's wall times are converted with the same reading
    wall_minus_perf_ns: int | None = None

    @staticmethod
    def at_driver_wall(
        start_wall_ns: int, clock_offset_ns: int, worker: int, seed_shared_prefixes: bool
    ) -> Placement:
        """The placement of a worker told to start at the driver's wall time ``start_wall_ns``."""
        mapping = wall_minus_perf_ns()
        start_perf = start_wall_ns + clock_offset_ns - mapping
        return Placement(worker, start_perf, clock_offset_ns, seed_shared_prefixes, mapping)

    def wall_clock(self) -> int:
        """The driver's wall clock now."""
        return time.time_ns() - self.clock_offset_ns
