"""Clocks of a target run's process: where it runs, and its wall clock against the driver's.

Place in the map (docs/architecture.md, "Runtime"): ``Placement`` is handed to a source and the
Dispatcher by the executor (in process: the defaults; a Ray worker: its index, the agreed
start and its clock offset); ``wall_minus_perf_ns`` is read once per process so that every
wall time of its records is converted with the same reading.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


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
