"""SwarmWorker: one Ray actor hosting many agents.

Place in the map (docs/architecture.md, "Scheduler" on Ray): a thin shell around ``run_agents``. The
driver calls ``run`` once (a long-running async call) and, while it runs, ``drain`` every
half second to take the records finished since the last call (as one Arrow batch) and the
worker's cumulative stats. ``stop`` cancels in-flight requests (recorded as ``cancelled``).
With ``direct_output`` the worker writes its own Parquet parts to shared storage instead.

This module does not import Ray: the executor wraps the class with ``ray.remote``, so it can
be tested in one process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from swarm.agent_profile import AgentProfile
from swarm.catalog import Catalog
from swarm.engines.client import Timeouts
from swarm.live_stats import RunStats
from swarm.record import RequestRecord
from swarm.runner import Halt, ResolvedTarget, run_agents
from swarm.topology import TopologyTemplate
from swarm.trace.sink import ParquetTraceSink, TraceWriteError, records_to_batch
from swarm.trace.storage import RunStorage
from swarm.workload import Workload, WorkloadSpec

log = logging.getLogger(__name__)


@dataclass
class WorkerPayload:
    """Everything a worker needs; plain data, shipped once when the actor is created."""

    workload: WorkloadSpec
    profiles: dict[str, AgentProfile]
    topologies: dict[str, TopologyTemplate]
    target: ResolvedTarget
    run_id: str
    timeouts: Timeouts
    keep_text: bool = False
    direct_output: str | None = None  # run folder (path or URI) the worker writes itself
    seed_shared_prefixes: bool = False  # several workers: see run_agents
    flush_interval_s: float = 10.0  # direct_output: close a part at least this often


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
        self.index = index
        self.payload = payload
        catalog = Catalog.preloaded(payload.profiles, payload.topologies)
        self.workload = Workload(payload.workload, catalog)
        self.stats = RunStats()
        self._records: list[RequestRecord] = []
        self._stop = asyncio.Event()
        self._halt = Halt()
        self._api_key: str | None = None
        self._sink: ParquetTraceSink | None = None
        if payload.direct_output:
            self._sink = ParquetTraceSink(
                RunStorage.at(payload.direct_output),
                writer=f"{payload.target.name}-w{index}",
                keep_text=payload.keep_text,
                flush_interval_s=payload.flush_interval_s,
            )
        self.sessions = 0
        self.records_total = 0

    async def describe(self) -> dict[str, Any]:
        return {"host": socket.gethostname(), "pid": os.getpid()}

    async def ping(self) -> int:
        """This worker's wall clock, for the driver's offset measurement."""
        return time.time_ns()

    async def set_api_key(self, key: str | None) -> None:
        """The key travels as a call argument, never in Ray's runtime environment."""
        self._api_key = key

    def _on_record(self, record: RequestRecord) -> None:
        self.records_total += 1
        if self._sink is not None:
            try:
                self._sink.write(record)
                self._sink.maybe_rotate()
            except TraceWriteError as exc:  # this worker's parts cannot be written: stop it
                self._halt.trip(str(exc))
        else:
            self._records.append(record)

    async def run(self, agent_ids: list[int], start_wall_ns: int, offset_ns: int) -> dict[str, Any]:
        """Run the given agents, starting at the driver's wall time ``start_wall_ns``.

        ``offset_ns`` is this worker's clock minus the driver's: records carry wall times
        shifted onto the driver's clock.
        """
        self.sessions = len(agent_ids)
        start_rss = rss_bytes()
        wall_now, perf_now = time.time_ns(), time.perf_counter_ns()
        start_perf = perf_now + (start_wall_ns + offset_ns - wall_now)
        driver_wall_at_perf0 = wall_now - offset_ns - perf_now

        def wall_at(perf_ns: int) -> int:
            return driver_wall_at_perf0 + perf_ns

        def wall_clock() -> int:
            return time.time_ns() - offset_ns

        try:
            outcome = await run_agents(
                self.workload,
                agent_ids,
                self.payload.target,
                self._on_record,
                stats=self.stats,
                run_id=self.payload.run_id,
                worker=self.index,
                start_perf_ns=start_perf,
                wall_at=wall_at,
                wall_clock=wall_clock,
                timeouts=self.payload.timeouts,
                stop=self._stop,
                api_key=self._api_key,
                seed_shared_prefixes=self.payload.seed_shared_prefixes,
                record_text=self.payload.keep_text,
                halt=self._halt,
            )
        finally:
            if self._sink is not None:
                try:
                    self._sink.close()
                except TraceWriteError as exc:
                    self._halt.trip(str(exc))
        result = asdict(outcome)
        result["halt_reason"] = self._halt.reason
        result["records_lost"] = self._sink.rows_lost if self._sink is not None else 0
        result["parts"] = list(self._sink.parts) if self._sink is not None else []
        result["peak_rss_bytes"] = peak_rss_bytes()
        result["start_rss_bytes"] = start_rss
        return result

    async def drain(self) -> tuple[pa.RecordBatch | None, RunStats]:
        """Records finished since the last call (one Arrow batch) and the cumulative stats."""
        records, self._records = self._records, []
        batch = records_to_batch(records, keep_text=self.payload.keep_text) if records else None
        return batch, self.stats

    async def stop(self) -> None:
        self._stop.set()
