"""RayExecutor: a run's sessions spread over async Ray actors; the driver writes the trace.

Place in the map (docs/architecture.md, "Ray"): implements the Executor protocol of ``runtime.executor``
for every request source (agents, replays).

1. Workers: ``--workers N`` actors (default: the CPUs Ray reports, less one for the driver),
   placed by ``cluster.placement``: over every node that has CPUs, in proportion to them, each
   pinned softly to its node, with ``num_cpus`` set so all fit at once. Workers that do not
   all start within ``WORKER_START_S`` end the run with an error saying how many CPUs are free.
   The source deals its sessions over them (``RequestSource.split``: agents round-robin
   by id, replayed sessions round-robin in start order): a session stays on one worker, and an
   agent swarm's traffic is the same for any N.
2. Clocks: each worker's wall-clock offset to the driver is measured with five round-trip
   pings (the one with the smallest round trip wins: offset = worker time - midpoint). The
   driver picks a start instant 2 s ahead; each worker converts it to its own clock, and
   shifts the wall times in its records onto the driver's clock.
3. Every ``poll_s`` the driver drains each worker (``cluster.drains``): the records finished
   since the last drain (an Arrow batch, written at once), its cumulative stats (merged for
   the live view) and the sessions it finished. A drain that does not answer stays
   outstanding without holding up the others.
4. A worker that dies (its actor killed, its node lost) is noted: which, on which node, when,
   the sessions it cut (named), and the requests it sent whose records never came (counted
   lost: ``rows + lost = sent``). The run goes on with the others; everything drained before
   the death is in the trace, and with ``--worker-writes`` every part it closed.
5. SIGINT / SIGTERM: workers stop sending and cancel in-flight requests (recorded as
   ``cancelled``); the driver drains what is left and reports the run interrupted.
6. The circuit breaker (``--max-error-rate``) sees every drained record's status at the driver,
   so it judges the target over all workers; when it trips, or when the trace cannot be
   written, the workers are stopped as for a signal and the reason is the outcome's.
7. Workers are never detached: they belong to the driver's job, so a driver that dies (even by
   SIGKILL) ends the job and Ray kills its workers; the cluster is free for the next run.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from swarm.clients.client import read_api_key
from swarm.cluster.connection import DEFAULT_TIMEOUT_S, RayConnection
from swarm.cluster.drains import Drains, WorkerAccount
from swarm.cluster.placement import PlacementPlan, nodes_with_cpus, plan_placement
from swarm.cluster.worker import SwarmWorker, WorkerPayload
from swarm.errors import InputError
from swarm.runtime.clocks import Placement
from swarm.runtime.context import TargetOutcome, TargetRun
from swarm.runtime.live_stats import RunStats
from swarm.runtime.loop import stop_conditions_for
from swarm.runtime.sources import RequestSource
from swarm.runtime.stop import StopConditions
from swarm.trace.manifest import WorkerInfo
from swarm.trace.sink import PART_SUFFIX, REQUESTS_DIR
from swarm.trace.storage import RunStorage

log = logging.getLogger(__name__)

START_LEAD_S = 2.0
#: How long the workers may take to start (placed, imported, answering), seconds.
WORKER_START_S = 120.0


def runtime_env_for(address: str | None) -> dict[str, Any]:
    """What Ray ships to workers: swarm's own code for a remote cluster, nothing else.

    Never environment variables: API keys go to workers as call arguments only.
    """
    if not address or address == "local":
        return {}
    import swarm

    return {"py_modules": [str(Path(swarm.__file__).parent)]}


def measure_offset(actor: Any, pings: int = 5) -> tuple[int, int]:
    """(worker clock minus driver clock, round trip) in ns, from the fastest of ``pings``."""
    import ray

    best: tuple[int, int] | None = None
    for _ in range(pings):
        t0 = time.time_ns()
        remote = ray.get(actor.ping.remote())
        t1 = time.time_ns()
        sample = (remote - (t0 + t1) // 2, t1 - t0)
        if best is None or sample[1] < best[1]:
            best = sample
    assert best is not None
    return best


class RayExecutor:
    def __init__(
        self,
        workers: int | None = None,
        address: str | None = None,
        worker_writes: bool = False,
        poll_s: float = 0.5,
        connect_timeout_s: float = DEFAULT_TIMEOUT_S,
        flush_interval_s: float = 10.0,
        keep_workers: bool = False,
    ) -> None:
        if workers is not None and workers < 1:
            raise InputError("--workers must be at least 1")
        self.workers = workers
        self.address = address
        self.worker_writes = worker_writes
        self.poll_s = poll_s
        self.connect_timeout_s = connect_timeout_s
        #: how often workers that write their own parts close them (``--flush-interval``)
        self.flush_interval_s = flush_interval_s
        self._connection: RayConnection | None = None
        #: workers live from one ``run_target`` to the next (a sweep) and end at ``__exit__``
        self.keep_workers = keep_workers
        self._pool: list[Any] = []
        #: live actor handles of the target being run (tests kill one through this)
        self.actors: list[Any] = []

    def __enter__(self) -> RayExecutor:
        self._connect()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool:
            import ray

            for actor in self._pool:
                ray.kill(actor)
            self._pool = []
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _connect(self) -> None:
        """Start or join Ray unless this process already has it (a caller's own ray.init)."""
        import ray

        if ray.is_initialized() or self._connection is not None:
            return
        connection = RayConnection(self.address, self.connect_timeout_s)
        self._connection = connection.open(runtime_env_for(connection.address))

    def default_workers(self) -> int:
        import ray

        cpus = int(ray.cluster_resources().get("CPU", 1))
        return max(1, cpus - 1)

    def run_target(self, run: TargetRun) -> TargetOutcome:
        import ray

        self._connect()
        wanted = max(1, min(self.workers or self.default_workers(), run.source.session_count()))
        parts = run.source.split(wanted)  # fewer when a cap cannot be shared by that many
        n = len(parts)
        # kept workers are sized for the most a run may ask (--workers), so a later run that
        # wants more of them still fits beside the ones already placed
        most = max(n, self.workers or self.default_workers()) if self.keep_workers else n
        plan = plan_placement(nodes_with_cpus(ray.nodes()), most)
        if self.worker_writes and run.storage is None:
            raise InputError("--worker-writes needs a run folder")
        payloads = [
            WorkerPayload(
                run.for_worker(part),
                direct_output=run.storage.display if self.worker_writes and run.storage is not None else None,
                seed_shared_prefixes=n > 1,
                flush_interval_s=self.flush_interval_s,
            )
            for part in parts
        ]
        actors = self._actors_for(plan, payloads)
        self._start(actors, run, plan)
        accounts = self._accounts(actors, parts, run.target.name)
        # the driver judges the target over all workers: the circuit breaker lives here
        conditions = stop_conditions_for(run, Placement())
        drains = Drains(accounts, run.sink, run.stats, conditions)
        try:
            outcomes = self._drive(accounts, drains, conditions)
        finally:
            self._release(actors, accounts)
        if self.worker_writes and run.storage is not None:
            count_written_rows(accounts, outcomes, run.storage, run.target.name)
            drains.merge()
        return self._outcome(run, accounts, outcomes, conditions)

    def _actors_for(self, plan: PlacementPlan, payloads: list[WorkerPayload]) -> list[Any]:
        """One actor per payload: new ones, or (``keep_workers``) the pool's, each given its
        payload (a gone one replaced)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        remote_cls: Any = ray.remote(SwarmWorker)

        def new_actor(i: int) -> Any:
            return remote_cls.options(
                num_cpus=plan.cpus_each, scheduling_strategy=strategy_for(plan, i), max_concurrency=64
            ).remote(i, payloads[i])

        n = len(payloads)
        if not self.keep_workers:
            self.actors = [new_actor(i) for i in range(n)]
            return self.actors
        for i, actor in enumerate(self._pool[:n]):
            try:
                ray.get(actor.load.remote(i, payloads[i]), timeout=60)
            except (RayActorError, GetTimeoutError) as exc:  # gone since the last run: replace it
                log.warning("kept worker %d is gone (%s): starting another", i, type(exc).__name__)
                ray.kill(actor)
                self._pool[i] = new_actor(i)
        self._pool += [new_actor(i) for i in range(len(self._pool), n)]
        self.actors = self._pool[:n]
        return self.actors

    def _start(self, actors: list[Any], run: TargetRun, plan: PlacementPlan) -> None:
        """Hand every worker the API key (a call argument, never the runtime environment); the
        workers that do not all answer within WORKER_START_S are killed and the run refused."""
        import ray
        from ray.exceptions import GetTimeoutError

        key = read_api_key(run.target.api_key_env, run.target.api_key_file)
        try:
            ray.get([a.set_api_key.remote(key) for a in actors], timeout=WORKER_START_S)
        except GetTimeoutError:
            free = ray.available_resources().get("CPU", 0.0)
            for a in actors:
                ray.kill(a)
            self._pool, self.actors = [], []
            raise InputError(
                f"{len(actors)} Ray workers of {plan.cpus_each:g} CPU each did not all start within "
                f"{WORKER_START_S:g} s; the cluster has {free:g} CPUs free (are another run's workers "
                "holding them?); --workers sets how many"
            ) from None

    def _accounts(
        self, actors: list[Any], parts: Sequence[RequestSource], target: str
    ) -> list[WorkerAccount]:
        """The driver's account of each worker: where it runs and its clock's offset."""
        import ray

        infos: list[dict[str, Any]] = ray.get([a.describe.remote() for a in actors])
        accounts = []
        for i, info in enumerate(infos):
            offset_ns = measure_offset(actors[i])[0]
            info.update(
                target=target, worker=i, clock_offset_ns=offset_ns, alive=True,
                sessions=parts[i].session_count(), sessions_cut=0, requests=0,
            )  # fmt: skip
            accounts.append(WorkerAccount(i, actors[i], info, list(parts[i].session_ids())))
        return accounts

    def _drive(
        self, accounts: list[WorkerAccount], drains: Drains, conditions: StopConditions
    ) -> dict[int, TargetOutcome]:
        """Start every worker at one agreed instant and drain them until all have answered or
        are lost; SIGINT/SIGTERM stop them. Returns each answering worker's outcome."""
        import ray
        from ray.exceptions import RayError

        start_wall = time.time_ns() + int(START_LEAD_S * 1e9)
        pending = {a.actor.run.remote(start_wall, a.info["clock_offset_ns"]): a.index for a in accounts}
        outcomes: dict[int, TargetOutcome] = {}
        stop_sent = False

        def on_signal(signum: int, frame: FrameType | None) -> None:
            conditions.interrupt()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while pending:
                if conditions.cancelling and not stop_sent:
                    stop_sent = True
                    for a in drains.alive():
                        a.actor.stop.remote()
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=self.poll_s)
                drains.tick(wait_s=self.poll_s)
                for ref in ready:
                    i = pending.pop(ref)
                    try:
                        outcomes[i] = ray.get(ref)
                    except RayError as exc:  # the actor died, its node was lost, or its run raised
                        drains.lose(accounts[i], f"{type(exc).__name__}: {exc}")
                for ref in list(pending):
                    if not accounts[pending[ref]].alive:
                        pending.pop(ref)
            drains.final()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return outcomes

    def _release(self, actors: list[Any], accounts: list[WorkerAccount]) -> None:
        """Kill the run's workers, or (``keep_workers``) only the dead ones: the rest wait for
        the next run."""
        import ray

        if self.keep_workers:
            dead = {id(a.actor) for a in accounts if not a.alive}
            for a in actors:
                if id(a) in dead:
                    ray.kill(a)
            self._pool = [a for a in self._pool if id(a) not in dead]
        else:
            for a in actors:
                ray.kill(a)
        self.actors = []

    def _outcome(
        self,
        run: TargetRun,
        accounts: list[WorkerAccount],
        outcomes: dict[int, TargetOutcome],
        conditions: StopConditions,
    ) -> TargetOutcome:
        """The target's outcome over its workers, each worker's manifest entry settled."""
        for i, out in outcomes.items():
            if out.usage is not None:
                accounts[i].info.update(dataclasses.asdict(out.usage))
        for a in accounts:
            a.settle()
        run.stats.finished = True
        stop_requested = conditions.interrupted
        for o in outcomes.values():  # a worker that wrote its own parts and could not
            if o.halt_reason and conditions.halt_reason is None:
                conditions.halt(o.halt_reason)
        halt_reason = conditions.halt_reason
        interrupted = stop_requested or (halt_reason is None and any(o.interrupted for o in outcomes.values()))
        if interrupted:
            stop_reason: str | None = "interrupted"
        elif halt_reason is not None and not stop_requested:
            stop_reason = halt_reason
        else:
            stop_reason = next((o.stop_reason for o in outcomes.values() if o.stop_reason), None)
        return TargetOutcome(
            requests=sum(o.requests for o in outcomes.values()),
            sessions_started=run.stats.sessions_started,
            sessions_finished=run.stats.sessions_finished,
            stop_reason=stop_reason,
            interrupted=interrupted,
            workers=[WorkerInfo(**a.info) for a in accounts],
            halt_reason=halt_reason,
            records_lost=sum(o.records_lost for o in outcomes.values()),
            # a live worker loses records only when a drain's answer was lost on its way
            records_lost_with_workers=sum(a.lost for a in accounts),
        )


def strategy_for(plan: PlacementPlan, i: int) -> Any:
    """Worker ``i``'s scheduling strategy: its planned node, softly (Ray places it elsewhere
    if that node is gone); SPREAD when the plan names no nodes."""
    if i >= len(plan.node_ids):
        return "SPREAD"
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(plan.node_ids[i], soft=True)


def count_written_rows(
    accounts: list[WorkerAccount], outcomes: dict[int, TargetOutcome], storage: RunStorage, target: str
) -> None:
    """With ``--worker-writes`` the rows are in the workers' own parts: a worker that ran to
    its end wrote all it recorded but what its outcome counts lost; a lost worker's rows are
    those of its closed parts (its statuses counted from them, for the manifest's counts)."""
    import pyarrow.parquet as pq

    names = storage.list(REQUESTS_DIR)
    for a in accounts:
        if a.alive and a.index in outcomes:
            out = outcomes[a.index]
            a.rows = out.requests - out.records_lost
            continue
        prefix = f"part-{target}-w{a.index}-"
        by_status: dict[str, int] = {}
        rows = 0
        for name in names:
            if not (name.startswith(prefix) and name.endswith(PART_SUFFIX)):
                continue
            column = pq.read_table(
                storage.path(f"{REQUESTS_DIR}/{name}"), columns=["status"], filesystem=storage.fs
            )
            for status in column["status"].to_pylist():
                by_status[status] = by_status.get(status, 0) + 1
            rows += column.num_rows
        a.rows = rows
        if a.stats is None:  # lost before its first drain
            a.stats = RunStats()
        # its counts are its rows; parts closed after its last drain hold requests sent since
        a.stats.by_status = by_status
        a.stats.requests = rows
        a.stats.requests_sent = max(a.stats.requests_sent, rows)
