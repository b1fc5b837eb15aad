"""One target run in one asyncio loop: the transport, the client, the stop conditions and the
Dispatcher around a request source.

Place in the map (docs/architecture.md, "Runtime"): what every executor runs, in process or inside
each Ray worker. It opens one connection pool to the target (``clients.client.open_transport``),
one EngineClient, one ideal-reuse index (seeded with the prefixes sessions share when this
process runs only some of them), builds the StopConditions from the source's limits and the
run's circuit breaker, starts the source on a Dispatcher and waits until it is done or stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from swarm.clients.client import EngineClient, HttpEngineClient, open_transport, read_api_key
from swarm.engines.registry import get_engine
from swarm.runtime.breaker import CircuitBreaker
from swarm.runtime.clocks import Placement
from swarm.runtime.context import TargetOutcome, TargetRun
from swarm.runtime.dispatcher import Dispatcher
from swarm.runtime.stop import StopConditions
from swarm.workload.prefix import PrefixIndex
from swarm.workload.tokenizer import as_token_ids


def stop_conditions_for(
    run: TargetRun,
    placement: Placement,
    *,
    breaker: bool = True,
    clock: Callable[[], float] = time.monotonic,
    perf_ns: Callable[[], int] = time.perf_counter_ns,
) -> StopConditions:
    """The stop conditions of ``run`` here: its duration counted from the agreed start, its
    request limit, and its circuit breaker (unless the driver keeps the breaker). ``clock``
    and ``perf_ns``: the run's clocks (a simulation's virtual one)."""
    limits = run.source.limits
    deadline_s = None
    if limits.duration_s is not None:
        perf_now = perf_ns()
        start = placement.start_perf_ns if placement.start_perf_ns is not None else perf_now
        deadline_s = clock() + (start - perf_now) / 1e9 + limits.duration_s
    return StopConditions(
        deadline_s=deadline_s,
        max_requests=limits.max_requests,
        breaker=CircuitBreaker(run.max_error_rate, run.error_window)
        if breaker and run.max_error_rate
        else None,
        clock=clock,
    )


async def drive(
    run: TargetRun,
    placement: Placement | None = None,
    *,
    stop: StopConditions | None = None,
    api_key: str | None = None,
) -> TargetOutcome:
    """Send everything ``run.source`` holds to ``run.target``; returns when it is all answered,
    or the run stopped (``stop``: interrupt or halt it from outside). ``api_key`` None: read
    from the target's environment variable or file."""
    placement = placement or Placement()
    stop = stop if stop is not None else stop_conditions_for(run, placement)
    target = run.target
    async with open_transport(
        target.url, connect_timeout_s=run.timeouts.connect_s, receive_clock=run.receive_clock
    ) as session:
        client = HttpEngineClient(
            session,
            target.url,
            get_engine(target.engine),
            target=target.name,
            dialect=target.dialect,
            model=target.model,
            timeouts=run.timeouts,
            api_key=api_key if api_key is not None else read_api_key(target.api_key_env, target.api_key_file),
            wall_clock=placement.wall_clock if placement.clock_offset_ns else time.time_ns,
            measure_send_stamps=run.measure_send_stamps,
        )
        return await dispatch(run, client, placement, stop)


async def dispatch(
    run: TargetRun,
    client: EngineClient,
    placement: Placement,
    stop: StopConditions,
    *,
    clock_ns: Callable[[], int] = time.perf_counter_ns,
    precise_release: bool = True,
) -> TargetOutcome:
    """``run.source`` sent through ``client`` by a Dispatcher on ``clock_ns`` (``drive``'s HTTP
    client on the real clock; a simulation's twins on its virtual one, where
    ``precise_release`` is off: nothing to spin for)."""
    source = run.source
    index = PrefixIndex()
    if placement.seed_shared_prefixes:
        for prefix in source.shared_prefixes():
            index.observe(as_token_ids(prefix))  # as the prompts' tokens are held: ids
    d = Dispatcher(
        client,
        run.sink,
        stop,
        stats=run.stats,
        max_in_flight=source.limits.max_in_flight,
        index=index,
        clock_offset_ns=placement.clock_offset_ns,
        wall_minus_perf_ns=placement.wall_minus_perf_ns,
        clock_ns=clock_ns,
        repeat=run.repeat,
        precise_release=precise_release,
    )
    started = source.start(d, run, placement)
    try:
        await d.run(started.schedule, placement.start_perf_ns)
    finally:
        started.finish()
    return TargetOutcome(
        requests=stop.issued,
        sessions_started=run.stats.sessions_started,
        sessions_finished=run.stats.sessions_finished,
        stop_reason=stop.reason,
        interrupted=stop.interrupted,
        halt_reason=stop.halt_reason,
    )
