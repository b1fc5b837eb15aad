"""The context of one target's run: what every executor and every worker is handed.

Place in the map (docs/architecture.md, "Runtime"): built once per target by the run frame
(``runtime.frame``) and passed whole to an Executor (in-process or Ray); a Ray worker gets
the picklable part of it (``cluster.worker.WorkerPayload``) plus its Placement, and hands back
a ``TargetOutcome``. One object instead of a long parameter list written out in every executor.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from swarm.request import Timeouts
from swarm.runtime.live_stats import RunStats

if TYPE_CHECKING:
    from swarm.runtime.sources import RequestSource
    from swarm.trace.manifest import WorkerInfo
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
    #: a fleet's replicas behind the router at ``url`` (base URLs; empty: one server)
    replicas: tuple[str, ...] = ()
    #: of each replica that names itself (``X-Swarm-Replica``), that name, by its URL
    replica_names: dict[str, str] = field(default_factory=dict)

    @property
    def simulated(self) -> bool:
        """An engine twin in virtual time (``swarm simulate``, a ``sim://`` URL): nothing to
        scrape or reset over HTTP; each run of it starts with empty caches."""
        return self.url.startswith(SIMULATED_SCHEME)


#: the URL scheme of a simulated target (``sim://ENGINE``; of a fleet's replica ``sim://ENGINE/I``)
SIMULATED_SCHEME = "sim://"


@dataclass(frozen=True)
class ProcessUsage:
    """What a worker's process used while it ran (Ray workers; the manifest's worker entry)."""

    start_rss_bytes: int = 0
    peak_rss_bytes: int = 0
    cpu_s: float = 0.0


@dataclass
class TargetOutcome:
    """How one target's run (or one Ray worker's part of it) ended: what the executor hands the
    run frame, and what a Ray worker hands the driver."""

    requests: int
    #: sessions (agents, replayed sessions) started, and those that ran to their end
    sessions_started: int
    sessions_finished: int
    stop_reason: str | None
    interrupted: bool
    #: the manifest's entry of each worker (cluster executors)
    workers: list[WorkerInfo] = field(default_factory=list)
    #: why the run stopped early on its own (circuit breaker, trace not writable); None if not
    halt_reason: str | None = None
    #: records made but not written (the trace could not be written)
    records_lost: int = 0
    #: records of requests sent by workers that were lost, never handed over or closed into a part
    records_lost_with_workers: int = 0
    #: a Ray worker's own process, measured by itself
    usage: ProcessUsage | None = None


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
    #: which repeat of this target this run is (``--repeat``): stamped on its records
    repeat: int = 0
    #: what times each read: ``kernel`` (its receive stamp, where the transport has it),
    #: ``watched`` (and each first token by its own arrival) or ``user``
    receive_clock: str = "watched"

    def for_worker(self, part: RequestSource) -> TargetRun:
        """What a Ray worker is shipped of this run: ``part`` of its source, everything else but
        the driver's sink, stats and run folder (the worker makes its own)."""
        from swarm.trace.sink import RecordBuffer

        return dataclasses.replace(self, source=part, sink=RecordBuffer(), stats=RunStats(), storage=None)
