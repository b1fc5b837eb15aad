"""SwarmWorker: one Ray actor running its part of a request source (agents, replayed sessions).

Place in the map (docs/architecture.md, "Ray"): a thin shell around ``runtime.loop.drive``. The
driver calls ``run`` once (a long-running async call) and, while it runs, ``drain`` every
half second to take the records finished since the last call (as one Arrow batch) and the
worker's cumulative stats. ``stop`` cancels in-flight requests (recorded as ``cancelled``).
With ``direct_output`` the worker writes its own Parquet parts to shared storage instead.

This module does not import Ray: the executor wraps the class with ``ray.remote``, so it can
be tested in one process.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import resource
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from swarm.runtime.clocks import Placement
from swarm.runtime.context import ProcessUsage, TargetOutcome, TargetRun
from swarm.runtime.live_stats import RunStats
from swarm.runtime.loop import drive, stop_conditions_for
from swarm.runtime.stop import StopConditions
from swarm.trace.sink import ParquetTraceSink, RecordBuffer, TraceSink, TraceWriteError, records_to_batch
from swarm.trace.storage import RunStorage

log = logging.getLogger(__name__)


@dataclass
class WorkerPayload:
    """Everything a worker needs; plain data, shipped once when the actor is created."""

    #: the target run with this worker's part of the source (``TargetRun.for_worker``)
    run: TargetRun
    direct_output: str | None = None  # run folder (path or URI) the worker writes itself
    seed_shared_prefixes: bool = False  # several workers: see Placement
    flush_interval_s: float = 10.0  # direct_output: close a part at least this often


def ray_node() -> dict[str, str]:
    """This process's Ray node (``node_id``, ``node_ip``), or nothing outside Ray: Ray is
    imported only when this process already runs it (a worker actor)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return {}
    return {
        "node_id": ray.get_runtime_context().get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),
    }


def rss_bytes() -> int:
    """This process's resident memory now (``VmRSS``), or 0 where /proc is not there."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def peak_rss_bytes() -> int:
    """This process's peak resident memory: ``VmHWM`` of its own address space.

    Not ``ru_maxrss``: after fork + exec, Linux carries the parent's high-water mark into the
    child's ``ru_maxrss``, so a child of a large process would report the parent's size.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class SwarmWorker:
    def __init__(self, index: int, payload: WorkerPayload) -> None:
        self._api_key: str | None = None
        self._setup(index, payload)

    async def load(self, index: int, payload: WorkerPayload) -> None:
        """Take a new part to run (a sweep's next point): the worker starts afresh, its
        process (imports, warm pools of the interpreter) kept."""
        self._setup(index, payload)

    def _setup(self, index: int, payload: WorkerPayload) -> None:
        self.index = index
        self.payload = payload
        self.stats = RunStats()
        self._buffer = RecordBuffer()
        self._sink: TraceSink = self._buffer
        self._parquet: ParquetTraceSink | None = None
        if payload.direct_output:
            self._parquet = ParquetTraceSink(
                RunStorage.at(payload.direct_output),
                writer=f"{payload.run.target.name}-w{index}",
                keep_text=payload.run.keep_text,
                flush_interval_s=payload.flush_interval_s,
            )
            self._sink = self._parquet
        self._run = dataclasses.replace(payload.run, sink=self._sink, stats=self.stats)
        # made now, so a stop that arrives before ``run`` is not lost
        self._stop = StopConditions()
        self.sessions = payload.run.source.session_count()

    async def describe(self) -> dict[str, Any]:
        """Where this worker runs: host, pid, and under Ray its node's id and address."""
        return {"host": socket.gethostname(), "pid": os.getpid(), **ray_node()}

    async def ping(self) -> int:
        """This worker's wall clock, for the driver's offset measurement."""
        return time.time_ns()

    async def set_api_key(self, key: str | None) -> None:
        """The key travels as a call argument, never in Ray's runtime environment."""
        self._api_key = key

    async def run(self, start_wall_ns: int, offset_ns: int) -> TargetOutcome:
        """Run this worker's sessions, starting at the driver's wall time ``start_wall_ns``.

        ``offset_ns`` is this worker's clock minus the driver's: records carry wall times
        shifted onto the driver's clock.
        """
        start_rss = rss_bytes()
        start_cpu_s = time.process_time()
        placement = Placement.at_driver_wall(
            start_wall_ns, offset_ns, self.index, self.payload.seed_shared_prefixes
        )
        limits = stop_conditions_for(self._run, placement, breaker=False)  # the driver has the breaker
        self._stop.deadline_s, self._stop.max_requests = limits.deadline_s, limits.max_requests
        try:
            outcome = await drive(self._run, placement, stop=self._stop, api_key=self._api_key)
        finally:
            if self._parquet is not None:
                try:
                    self._parquet.close()
                except TraceWriteError as exc:
                    self._stop.halt(str(exc))
        return dataclasses.replace(
            outcome,
            halt_reason=self._stop.halt_reason,
            records_lost=self._sink.rows_lost,
            usage=ProcessUsage(start_rss, peak_rss_bytes(), time.process_time() - start_cpu_s),
        )

    async def drain(self) -> tuple[pa.RecordBatch | None, RunStats, list[str]]:
        """Records finished since the last call (one Arrow batch), the cumulative stats, and
        the ids of the sessions that ran to their end since the last call."""
        records = self._buffer.take()
        finished, self.stats.finished_sessions = self.stats.finished_sessions, []
        batch = records_to_batch(records, keep_text=self._run.keep_text) if records else None
        # a copy taken now: Ray may serialise the answer after this coroutine, while the
        # event loop goes on recording, and the stats must match the batch
        return batch, copy.deepcopy(self.stats), finished

    async def stop(self) -> None:
        self._stop.interrupt()
