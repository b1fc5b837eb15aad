"""The runner: a workload's agents against one target, in one asyncio loop.

Place in the map (docs/architecture.md, "Scheduler"): the loop that sleeps. It starts each agent at its
arrival offset (computed by the Workload's ArrivalProcess), shares one connection pool (swarm's
own HTTP/1.1 client for http://, aiohttp for https://: ``engines.client.open_transport``), one
EngineClient, one PrefixIndex (for ``ideal_cached_tokens_est``) and one RequestGate (in-flight
cap, request limit, duration) among the agents, and hands every record to ``on_record``.
The same loop runs in the in-process executor and inside each Ray worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarm.agent import AgentEnv, AgentRun, RequestGate
from swarm.breaker import CircuitBreaker
from swarm.engines.client import HttpEngineClient, Timeouts, open_transport, read_api_key
from swarm.engines.profiles import get_profile
from swarm.live_stats import RunStats
from swarm.prefix import PrefixIndex
from swarm.quiet_gc import AgentRunCollector
from swarm.record import RequestRecord
from swarm.workload import Workload

log = logging.getLogger(__name__)


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


@dataclass
class TargetOutcome:
    requests: int
    agents_started: int
    #: agents whose topology ran to its end (not cut short by a stop)
    agents_finished: int
    stop_reason: str | None
    interrupted: bool
    #: per-worker facts for the manifest (cluster executors)
    workers: list[dict[str, Any]] = field(default_factory=list)
    #: why the run stopped early on its own (circuit breaker, trace not writable); None if not
    halt_reason: str | None = None
    #: records made but not written (the trace could not be written)
    records_lost: int = 0


class Halt:
    """A reason to stop a target's run early, raised from inside its loop: the circuit breaker
    tripped, or the trace cannot be written. The first reason wins. ``run_agents`` stops new
    requests and cancels those in flight when it trips (like an interrupt, but not one)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._event: asyncio.Event | None = None

    def trip(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            log.error("stopping the run: %s", reason)
            if self._event is not None:
                self._event.set()

    async def wait(self) -> None:
        if self._event is None:
            self._event = asyncio.Event()
        if self.reason is not None:
            return
        await self._event.wait()


async def run_agents(
    workload: Workload,
    agent_ids: Sequence[int],
    target: ResolvedTarget,
    on_record: Callable[[RequestRecord], None],
    *,
    stats: RunStats | None = None,
    run_id: str = "",
    worker: int = 0,
    start_perf_ns: int | None = None,
    wall_at: Callable[[int], int] | None = None,
    wall_clock: Callable[[], int] | None = None,
    timeouts: Timeouts | None = None,
    stop: asyncio.Event | None = None,
    api_key: str | None = None,
    seed_shared_prefixes: bool = False,
    measure_send_stamps: bool = False,
    record_text: bool = True,
    halt: Halt | None = None,
    breaker: CircuitBreaker | None = None,
) -> TargetOutcome:
    """Run the given agents of ``workload`` against ``target``; returns when all have ended.

    ``start_perf_ns`` is the agreed start instant (perf_counter_ns of this process); agent *i*
    starts at ``start + offset_i``. ``wall_at`` (perf ns to wall ns) and ``wall_clock`` give
    the wall clock of ``scheduled_ns`` and ``sent_ns``; a cluster worker passes its clock
    shifted onto the driver's. Setting ``stop`` stops new requests and cancels those in
    flight (their records say ``cancelled``); tripping ``halt`` does the same with a reason
    (``breaker``, fed with every record, trips it). ``seed_shared_prefixes`` counts the prefixes
    sessions share (system prompts) as already sent, for ``ideal_cached_tokens_est`` on a
    worker that runs only some of the sessions.
    """
    spec = workload.spec
    stats = stats if stats is not None else RunStats()
    loop = asyncio.get_running_loop()
    start = start_perf_ns if start_perf_ns is not None else time.perf_counter_ns()
    deadline = None
    if spec.duration_s is not None:
        deadline = time.monotonic() + (start - time.perf_counter_ns()) / 1e9 + spec.duration_s
    gate = RequestGate(spec.max_in_flight, spec.max_requests, deadline)

    halt = halt if halt is not None else Halt()

    def record_and_count(record: RequestRecord) -> None:
        stats.add(record)
        on_record(record)
        if breaker is not None:
            reason = breaker.observe(record.status.value)
            if reason is not None:
                halt.trip(reason)

    # The garbage collector while agents run (quiet_gc.AgentRunCollector): what was alive
    # before is left out of its passes (a full pass over it took 70+ ms at 500 agents), and
    # full passes over the agents' own coroutines and tasks run once a minute, not whenever
    # the heap grows by a quarter (130-190 ms each at 2,000 agents): either is a stall every
    # stream in flight sees as late chunks.
    collector = AgentRunCollector().start()
    try:
        async with open_transport(
            target.url, connect_timeout_s=(timeouts or Timeouts()).connect_s
        ) as session:
            client = HttpEngineClient(
                session,
                target.url,
                get_profile(target.engine),
                target=target.name,
                dialect=target.dialect,
                model=target.model,
                timeouts=timeouts,
                api_key=api_key
                if api_key is not None
                else read_api_key(target.api_key_env, target.api_key_file),
                wall_clock=wall_clock or time.time_ns,
                measure_send_stamps=measure_send_stamps,
            )
            index = PrefixIndex()
            if seed_shared_prefixes:
                for prefix in workload.shared_prefixes():
                    index.observe(prefix)
            env = AgentEnv(
                client=client,
                tokenizer=workload.tokenizer,
                index=index,
                gate=gate,
                on_record=record_and_count,
                context=spec.context,
                stream=spec.stream,
                run_id=run_id,
                worker=worker,
                record_text=record_text,
                retries=spec.retries,
                retry_backoff_s=spec.retry_backoff_s,
                on_failure=spec.on_failure,
            )
            if wall_at is not None:
                env.wall_at = wall_at
            env.in_flight = [0]
            order = sorted(agent_ids, key=lambda i: (workload.start_offsets_s[i], i))
            tasks: set[asyncio.Task[None]] = set()
            finished = 0

            async def one(agent_id: int, start_ns: int) -> None:
                nonlocal finished
                stats.agents_started += 1
                agent = AgentRun(workload.agent(agent_id), env)
                try:
                    await agent.run(start_ns)
                finally:
                    if agent.cut_short:
                        stats.agents_cut += 1
                    else:
                        finished += 1
                        stats.agents_done += 1

            async def launcher() -> None:
                for agent_id in order:
                    due = start + int(workload.start_offsets_s[agent_id] * 1e9)
                    delay = (due - time.perf_counter_ns()) / 1e9
                    if delay > 0:
                        await asyncio.sleep(delay)
                    if gate.stopped or (gate.deadline_s is not None and time.monotonic() >= gate.deadline_s):
                        gate.stop(gate.stop_reason or "duration reached")
                        break
                    task = loop.create_task(one(agent_id, due))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)

            async def in_flight_sampler() -> None:
                last_full = time.monotonic()
                while True:
                    stats.in_flight = env.in_flight[0]
                    await asyncio.sleep(0.2)
                    if time.monotonic() - last_full >= collector.full_every_s:
                        collector.full_collection()
                        last_full = time.monotonic()

            sampler = loop.create_task(in_flight_sampler())
            launch = loop.create_task(launcher())
            interrupted = False
            waiter = loop.create_task(stop.wait()) if stop is not None else None
            halted = loop.create_task(halt.wait())
            try:
                while not launch.done() or tasks:
                    pending: set[asyncio.Future[Any]] = {launch, *tasks} if not launch.done() else set(tasks)
                    if waiter is not None:
                        pending.add(waiter)
                    pending.add(halted)
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    stopping = waiter is not None and waiter.done()
                    if stopping or halted.done():
                        interrupted = stopping
                        gate.stop("interrupted" if stopping else halt.reason or "halted")
                        launch.cancel()
                        for t in list(tasks):
                            t.cancel()
                        await asyncio.gather(launch, *tasks, return_exceptions=True)
                        break
            finally:
                sampler.cancel()
                halted.cancel()
                if waiter is not None:
                    waiter.cancel()
            stats.in_flight = 0
            stats.finished = True
            return TargetOutcome(
                requests=gate.issued,
                agents_started=stats.agents_started,
                agents_finished=finished,
                stop_reason=gate.stop_reason,
                interrupted=interrupted,
                halt_reason=halt.reason,
            )

    finally:
        collector.stop()
