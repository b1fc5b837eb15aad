"""Dispatcher: the one loop that sends a target run's requests, whatever their source.

Place in the map (docs/architecture.md, "Runtime"): one Dispatcher per target run per process (the
in-process executor, or each Ray worker). A RequestSource hands it a schedule (what is due when,
and how to build it ahead of time) and, from the tasks it starts, calls ``send``; the
Dispatcher owns the rest:

- **Timing.** Scheduled entries are released by one loop at their due times, all that are due
  at once (a timer per entry would not do: asyncio polls in whole milliseconds, so each of
  several timers microseconds apart costs a 1 ms wait). On a real clock it wakes
  ``DISPATCH_SPIN_NS`` early and a kernel timer wakes it at the instant (``PreciseWake``;
  without one, it yields the loop until it). Entries with a ``prepare`` step (a replayed prompt of tens of
  thousands of tokens takes milliseconds to build) are prepared in due order,
  ``PREPARE_LEAD_NS`` ahead, never just before a send is due, and those due in the first
  ``PREPARE_LEAD_NS`` before the clock starts. A send that a source's task waits for (an
  agent's call after its think time) is built just ahead of its instant and wakes on it
  (``send_on_time``).
- **The in-flight cap** (a semaphore; the wait for a slot is recorded as ``slot_wait_ns``), and
  **retries** of a retryable failure when the source asks for them (``send_retrying``).
- **The client** and the **ideal-reuse index** (``ideal_cached_tokens_est``: the longest prefix
  shared with any prompt sent before it in this run).
- **Records**: every record goes to the live stats, the TraceSink and the stop conditions (the
  circuit breaker); a sink that cannot write halts the run.
- **Stopping** (``StopConditions``): a soft stop ends releases and sends; a hard stop also
  cancels every task in flight (the client records its request as ``cancelled``).
- **Garbage collection** (``gc_policy``), by the kind of schedule: a *timed* schedule (entries
  built ahead: a timed replay) has automatic collection off while releases are pending, with
  collections run in quiet stretches (``QuietCollector``); for any other schedule (agent
  starts, a dependent replay's roots) ``AgentRunCollector`` freezes what was alive at the start, makes young passes rarer and runs a
  full pass once a minute (rarer where passes are long, or free next to nothing).

Clocks are injectable (``clock_ns``, ``sleep``) so the release logic runs on a virtual clock
in tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from swarm.record import RequestRecord, Status
from swarm.request import EngineRequest
from swarm.runtime.clocks import wall_minus_perf_ns as read_wall_minus_perf_ns
from swarm.runtime.gc_policy import AgentRunCollector, QuietCollector
from swarm.runtime.live_stats import RunStats
from swarm.runtime.precise_wake import PreciseWake
from swarm.runtime.retry import is_retryable, retry_delay_s
from swarm.runtime.slot_gate import SlotGate
from swarm.runtime.stop import StopConditions
from swarm.texts import SharedRun
from swarm.trace.sink import TraceSink, TraceWriteError
from swarm.workload.prefix import PrefixIndex

if TYPE_CHECKING:
    from swarm.clients.client import EngineClient

log = logging.getLogger(__name__)

#: Prompts with a ``prepare`` step are built this long before their send time.
PREPARE_LEAD_NS = 1_000_000_000
#: The release loop wakes this long before an entry is due, then waits for it on a kernel timer
#: (or, without one, yields until it).
DISPATCH_SPIN_NS = 1_500_000
#: The release loop sleeps at most this long at a time (to run due garbage collections).
DISPATCH_SLICE_NS = 50_000_000
#: A garbage collection runs only if the next release is at least this far away.
GC_QUIET_NS = 30_000_000
#: A preparation starts only if it would end this long before the next release is due.
PREPARE_MARGIN_NS = 2_000_000
#: How often the live stats' in-flight count is sampled, seconds.
SAMPLE_EVERY_S = 0.2


@dataclass(slots=True)
class Outgoing:
    """A request ready to send: the request, its tokens when its ideal reuse is still to be
    taken (at send time, in send order), and its encoded body when built ahead. ``send``
    takes both out of it."""

    request: EngineRequest
    tokens: Sequence[object] | None = None
    payload: bytes | None = None
    #: where ``tokens`` are stretches of a shared array (``PrefixIndex.observe``)
    shared: Sequence[SharedRun] = ()


@dataclass(slots=True)
class Scheduled:
    """An entry of a source's schedule: ``run(prepared, due_perf_ns)`` is started at
    ``due_ns`` after the start; ``prepare(due_perf_ns)`` builds its request ahead of time."""

    due_ns: int
    run: Callable[[Outgoing | None, int], Coroutine[Any, Any, None]]
    #: builds the entry's request ahead (a timed send), or with ``prepares_request`` False
    #: does other work ahead (a session's start: its history built) and returns None
    prepare: Callable[[int], Outgoing | None] | None = None
    #: the size of the preparation (prompt tokens), for the preparer's cost estimate
    prepare_tokens: int = 0
    #: whether ``prepare`` builds a request (a timed schedule) rather than a session's start
    prepares_request: bool = True
    #: a session's start's work done ahead in small steps (a mid-life session's history, a
    #: session's first prompts), the loop turning between them, so that no step holds another
    #: agent's send back for long (built whole, a 120-turn history held the loop for 40-65 ms);
    #: ``prepare`` is then None
    prepare_steps: Callable[[], Iterator[None]] | None = None
    #: the preparation only makes the start faster (a session's first prompts built ahead): the
    #: entries due before the clock starts skip it, and a release never waits for it
    prepare_optional: bool = False


class _PrepareCost:
    """How long preparing a prompt takes, per token: the slowest rate seen recently (a guess
    that errs long keeps preparations away from send times)."""

    def __init__(self) -> None:
        self.ns_per_token = 1_000.0

    def learn(self, tokens: int, elapsed_ns: int) -> None:
        rate = elapsed_ns / max(tokens, 1)
        if tokens >= 256:  # short prompts are dominated by fixed costs
            self.ns_per_token = max(rate, 0.9 * self.ns_per_token + 0.1 * rate)

    def estimate_ns(self, tokens: int) -> float:
        return self.ns_per_token * tokens + 200_000


def _take_payload(out: Outgoing) -> bytes | None:
    """``out``'s encoded body, no longer held by ``out`` (the client lets go of it once sent)."""
    payload, out.payload = out.payload, None
    return payload


class Dispatcher:
    def __init__(
        self,
        client: EngineClient,
        sink: TraceSink,
        stop: StopConditions,
        *,
        stats: RunStats | None = None,
        max_in_flight: int = 0,
        index: PrefixIndex | None = None,
        clock_offset_ns: int = 0,
        wall_minus_perf_ns: int | None = None,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        repeat: int = 0,
        precise_release: bool = True,
    ) -> None:
        self.client = client
        #: releases and sends at an instant are woken at it (``PreciseWake``, else a spin of the
        #: last ``DISPATCH_SPIN_NS``), and a send
        #: is built ahead of its instant (off on a virtual clock, which is at the instant when
        #: it wakes)
        self.precise_release = precise_release
        #: the repeat this run is of its target (``--repeat``), stamped on every record
        self.repeat = repeat
        self.sink = sink
        self.stop = stop
        self.stats = stats if stats is not None else RunStats()
        self.index = index if index is not None else PrefixIndex()
        self.clock_ns = clock_ns
        self._sleep = sleep
        self._sem = SlotGate(max_in_flight) if max_in_flight > 0 else None
        # the driver's wall clock = this process's perf counter + this
        mapping = wall_minus_perf_ns if wall_minus_perf_ns is not None else read_wall_minus_perf_ns()
        self._wall0 = mapping - clock_offset_ns
        self.start_perf_ns = clock_ns()
        self.in_flight = 0
        self.sent = 0
        self.prepared_late = 0
        self._tasks: set[asyncio.Task[None]] = set()
        #: tasks in ``sleep_until``, and those a stop woke (their sleep ends early, quietly)
        self._sleeping: set[asyncio.Task[Any]] = set()
        self._woken: set[asyncio.Task[Any]] = set()
        self._releasing = False
        self._idle: asyncio.Event | None = None
        self._collector = AgentRunCollector()
        #: how long a call takes to build and encode, per prompt token (``send_on_time``)
        self.build_cost = _PrepareCost()
        #: a send's instant reached by a kernel timer instead of a spin, on the real clock
        #: where the machine has one (``run`` makes it)
        self._wake: PreciseWake | None = None

    # -- for sources ---------------------------------------------------------------------------

    def wall_at(self, perf_ns: int) -> int:
        """The driver's wall clock at this process's ``perf_counter_ns`` reading."""
        return self._wall0 + perf_ns

    async def sleep_until(self, perf_ns: int, *, precise: bool = False) -> None:
        """Wait until ``perf_ns``; at once when the run has stopped sending, and no longer than
        until it does (``wake_sleepers``): whoever waits would send nothing more. ``precise``
        (a send's instant, on a real clock): sleep to ``DISPATCH_SPIN_NS`` before it and yield
        the loop until it, as the releaser does: a loop timer wakes 0-1 ms late (asyncio polls
        in whole milliseconds, rounded up), more on a busy virtual machine."""
        delay_ns = perf_ns - self.clock_ns()
        if delay_ns <= 0 or self.stop.stopped:
            return
        spin_ns = DISPATCH_SPIN_NS if precise and self.precise_release else 0
        task = asyncio.current_task()
        if task is None:
            await self._sleep(delay_ns / 1e9)
            return
        self._sleeping.add(task)
        try:
            if spin_ns and self._wake is not None:
                await self._wake.until(perf_ns)  # woken by the kernel at the instant: no spin
                return
            if delay_ns > spin_ns:
                await self._sleep((delay_ns - spin_ns) / 1e9)
            while spin_ns and self.clock_ns() < perf_ns and not self.stop.stopped:
                await self._sleep(0)  # the loop keeps turning: reads and other sends go on
        except asyncio.CancelledError:
            if task not in self._woken:
                raise
            self._woken.discard(task)
            uncancel = getattr(task, "uncancel", None)  # Python 3.11+: the cancel is answered
            if uncancel is not None:
                uncancel()
        finally:
            self._sleeping.discard(task)

    def wake_sleepers(self) -> None:
        """The run stopped sending: end every ``sleep_until`` now (a hard stop cancels the
        tasks instead)."""
        if self.stop.cancelling:
            return
        for task in list(self._sleeping):
            if task not in self._woken:
                self._woken.add(task)
                task.cancel()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Start a task the run waits for (and cancels on a hard stop)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def session_started(self) -> None:
        self.stats.sessions_started += 1

    def session_ended(self, cut: bool, session_id: str = "") -> None:
        """A session (an agent, a replayed session) ended: ran to its end, or cut by a stop."""
        if cut:
            self.stats.sessions_cut += 1
        else:
            self.stats.sessions_finished += 1
            if session_id:
                self.stats.finished_sessions.append(session_id)

    async def send(self, build: Outgoing | Callable[[int], Outgoing]) -> RequestRecord | None:
        """Send one request once a slot under the in-flight cap is free; None when the run no
        longer sends. ``build`` is called with the ns waited for the slot (0 if none)."""
        stop = self.stop
        if not stop.may_send():
            self.wake_sleepers()
            return None
        sem = self._sem
        slot_wait_ns = 0
        if sem is not None:
            if sem.locked():
                started = self.clock_ns()
                await sem.acquire()
                slot_wait_ns = self.clock_ns() - started
            else:
                await sem.acquire()
        try:
            if not stop.admit():
                self.wake_sleepers()
                return None
            if stop.stopped:  # this send reached the request limit: nobody waits for a next one
                self.wake_sleepers()
            self.in_flight += 1
            try:
                out = build(slot_wait_ns) if callable(build) else build
                del build
                # taken out of ``out``: neither the prompt's tokens nor its body are held while
                # the answer streams (thousands of agents in flight)
                request, tokens, shared = out.request, out.tokens, out.shared
                out.tokens, out.shared = None, ()
                if tokens is not None or (slot_wait_ns and request.slot_wait_ns != slot_wait_ns):
                    changes: dict[str, Any] = {"slot_wait_ns": slot_wait_ns}
                    if tokens is not None:
                        changes["ideal_cached_tokens_est"] = self.index.observe(tokens, shared)
                    request = dataclasses.replace(request, **changes)
                del tokens, shared
                self.stats.requests_sent += 1  # every send ends in exactly one record
                record = await self.client.send(request, _take_payload(out))
                self.sent += 1
            finally:
                self.in_flight -= 1
        finally:
            if sem is not None:
                sem.release()
        self.accept(record)
        return record

    def send_on_time(
        self,
        build: Callable[..., Outgoing],
        due_perf_ns: int,
        *,
        expected_tokens: int = 0,
        retries: int = 0,
        backoff_s: float = 0.5,
    ) -> Coroutine[Any, Any, tuple[RequestRecord | None, int]]:
        """``send_retrying`` at ``due_perf_ns``, its first attempt built ahead: on a real clock
        ``build(0, due_perf_ns, 0, ahead=True)`` runs (and its body is encoded) the estimated
        build time before the instant, with a margin, and the send wakes on it (``precise``).
        Built once woken, a prompt of ``expected_tokens`` 100k tokens is milliseconds of lag,
        and branches due together are built one after another; built ahead, it is held only
        for the lead. ``build(..., ahead=True)`` leaves the ideal reuse to be taken at the send
        (``Outgoing.tokens``). On a virtual clock the attempt is built at the instant, and
        with every slot under the in-flight cap taken once a slot is free (a prompt built
        ahead would be held while it waits). (``send_retrying``'s own coroutine: no frame of
        this one held for each call in flight.)"""
        return self.send_retrying(
            build, due_perf_ns, retries=retries, backoff_s=backoff_s, on_time_tokens=expected_tokens
        )

    async def _build_ahead(self, build: Callable[..., Outgoing], due_perf_ns: int, expected_tokens: int) -> Outgoing | None:
        """``send_on_time``'s first attempt, built (and its body encoded) ahead of its instant
        on a real clock; then the wait for the instant."""
        first: Outgoing | None = None
        if self.precise_release:
            lead_ns = int(self.build_cost.estimate_ns(expected_tokens)) + DISPATCH_SPIN_NS
            await self.sleep_until(due_perf_ns - lead_ns)
            if not self.stop.stopped and (self._sem is None or not self._sem.locked()):
                started = self.clock_ns()
                first = build(0, due_perf_ns, 0, ahead=True)
                if first.payload is None:  # built now (a body encoded with its prompt was built before)
                    first.payload = self.client.encode(first.request)
                    self.build_cost.learn(first.request.prompt_tokens_est or 0, self.clock_ns() - started)
        await self.sleep_until(due_perf_ns, precise=True)
        return first

    async def send_retrying(
        self,
        build: Callable[..., Outgoing],
        due_perf_ns: int,
        *,
        retries: int = 0,
        backoff_s: float = 0.5,
        first: Outgoing | None = None,
        on_time_tokens: int | None = None,
    ) -> tuple[RequestRecord | None, int]:
        """``send``, and send a retryable failure again up to ``retries`` times, after the
        server's Retry-After or a doubling backoff (``retry``). ``build(attempt, due_perf_ns,
        slot_wait_ns)`` makes each attempt (``first``, when given, is attempt 0 built ahead;
        with ``on_time_tokens``, the expected prompt tokens of ``send_on_time``, it is built
        ahead here). Returns the last record (None: the run stopped before an attempt) and how
        many attempts were sent."""
        if on_time_tokens is not None:
            first = await self._build_ahead(build, due_perf_ns, on_time_tokens)
        attempt = 0
        while True:
            if attempt == 0 and first is not None:
                record = await self.send(first)
            else:
                record = await self.send(functools.partial(build, attempt, due_perf_ns))
            if record is None:
                return None, attempt
            if (
                record.ok
                or record.status is Status.CANCELLED
                or attempt >= retries
                or not is_retryable(record)
            ):
                return record, attempt + 1
            attempt += 1
            wait_s = retry_delay_s(record, attempt, backoff_s)
            if wait_s > 0:
                await self.sleep_until(self.clock_ns() + int(wait_s * 1e9))
            due_perf_ns = self.clock_ns()

    def accept(self, record: RequestRecord) -> None:
        """A finished record: live stats, the trace, the stop conditions (circuit breaker)."""
        if self.repeat:
            record = record.with_identity(repeat=self.repeat)
        self.stats.add(record)
        try:
            self.sink.write(record)
            self.sink.maybe_rotate()
        except TraceWriteError as exc:
            self.stop.halt(str(exc))
        self.stop.observe(record.status.value)

    # -- running -------------------------------------------------------------------------------

    async def run(self, schedule: Sequence[Scheduled], start_perf_ns: int | None = None) -> None:
        """Release ``schedule`` (sorted by ``due_ns``) from the start and wait for every task the
        run started; a hard stop cancels them. ``start_perf_ns`` None: the clock starts once the
        first second's entries are prepared."""
        loop = asyncio.get_running_loop()
        self._idle = asyncio.Event()
        if self.precise_release and self.clock_ns is time.perf_counter_ns and self._sleep is asyncio.sleep:
            self._wake = PreciseWake.create(loop)
        # a timed schedule (built ahead) keeps its own collections off the send instants
        timed = any(entry.prepare is not None and entry.prepares_request for entry in schedule)
        if not timed:
            self._collector.start()
        release_run = _Release(self, schedule, timed)
        head = release_run.prepare_lead(start_perf_ns)
        helpers = [loop.create_task(release_run.preparer(head)), loop.create_task(self._sampler(timed))]
        if self.stop.seconds_left() is not None:
            helpers.append(loop.create_task(self._deadline_watch()))
        helpers[0].add_done_callback(self._helper_done)
        release = loop.create_task(release_run.releaser())
        self._releasing = True
        release.add_done_callback(self._release_done)
        hard = loop.create_task(self.stop.wait_hard())
        idle = loop.create_task(self._idle.wait())
        try:
            await asyncio.wait({hard, idle}, return_when=asyncio.FIRST_COMPLETED)
            if not idle.done():  # a hard stop: cancel everything in flight, and wait for it
                release.cancel()
                while self._tasks:
                    tasks = list(self._tasks)
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                await asyncio.gather(release, return_exceptions=True)
        finally:
            for t in (*helpers, hard, idle, release):
                t.cancel()
            if self._wake is not None:
                self._wake.close()
                self._wake = None
            if not timed:
                self._collector.stop()
            self.stats.in_flight = 0
            self.stats.finished = True
        if self.prepared_late:
            log.warning(
                "%d requests were not prepared by their send time and went late; the schedule "
                "is too dense for one process (fewer sends a second: a lower --speed or --arrival rate, or more workers)",
                self.prepared_late,
            )
        if release.done() and not release.cancelled() and release.exception() is not None:
            raise release.exception()  # type: ignore[misc]

    async def _deadline_watch(self) -> None:
        """At the run's duration, stop sending and wake every waiting source: an agent pausing
        for a tool time of minutes would otherwise hold the run open to send nothing."""
        while not self.stop.stopped_now():
            left = self.stop.seconds_left()
            await self._sleep(max(left if left is not None else 1.0, 0.001))
        self.wake_sleepers()

    async def _sampler(self, timed: bool) -> None:
        """The in-flight level into the live stats; for an untimed schedule, the collector's
        full collections."""
        while True:
            self.stats.in_flight = self.in_flight
            await asyncio.sleep(SAMPLE_EVERY_S)
            if not timed:
                self._collector.full_collection_if_due()

    def _helper_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("preparing requests failed", exc_info=exc)
            self.stop.halt(f"internal error preparing requests: {exc!r}")

    def _release_done(self, task: asyncio.Task[None]) -> None:
        self._releasing = False
        self._check_idle()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # a bug of ours: the run stops with it as its reason rather than hang or go on
            # with a session half sent
            log.error("a session's task failed", exc_info=exc)
            self.stop.halt(f"internal error in a session: {exc!r}")
        self._check_idle()

    def _check_idle(self) -> None:
        if not self._releasing and not self._tasks and self._idle is not None:
            self._idle.set()


class _Release:
    """One run of a schedule: the preparer builds timed requests ahead of their send instants
    (never just before a release), the releaser starts every entry at its due instant."""

    def __init__(self, d: Dispatcher, schedule: Sequence[Scheduled], timed: bool) -> None:
        self.d = d
        self.schedule = schedule
        self.timed = timed
        self.prepared: dict[int, Outgoing | None] = {}
        self.ready: dict[int, asyncio.Event] = {}
        self.released: dict[int, asyncio.Event] = {}
        self.cost = _PrepareCost()
        #: the next entry to release
        self.next = 0

    def prepare_ahead(self, j: int) -> None:
        d, entry = self.d, self.schedule[j]
        assert entry.prepare is not None
        t0 = d.clock_ns()
        out = entry.prepare(d.start_perf_ns + entry.due_ns)
        if out is not None and out.tokens is not None:
            # released in this same order, so the ideal can be taken now, off the send path
            ideal = d.index.observe(out.tokens, out.shared)
            out.request = dataclasses.replace(out.request, ideal_cached_tokens_est=ideal)
            out.tokens, out.shared = None, ()
        self._prepared_now(j, out)
        self.cost.learn(entry.prepare_tokens, d.clock_ns() - t0)

    def _prepared_now(self, j: int, out: Outgoing | None) -> None:
        self.prepared[j] = out
        if (event := self.ready.pop(j, None)) is not None:
            event.set()

    def prepare_lead(self, start_perf_ns: int | None) -> int:
        """Prepare the entries due in the first ``PREPARE_LEAD_NS``; with no agreed start the
        clock starts once they are ready (their times shifted to it). Returns the first entry
        left to the preparer."""
        d, schedule = self.d, self.schedule
        start = start_perf_ns if start_perf_ns is not None else d.clock_ns()
        d.start_perf_ns = start
        head = 0
        while head < len(schedule) and schedule[head].due_ns < PREPARE_LEAD_NS:
            steps = schedule[head].prepare_steps
            if schedule[head].prepare is not None:
                self.prepare_ahead(head)
            elif steps is not None and not schedule[head].prepare_optional:
                for _ in steps():
                    pass
                self.prepared[head] = None
            head += 1
        if start_perf_ns is None:  # the clock starts now; the early entries get their true times
            shift = d.clock_ns() - start
            d.start_perf_ns = start + shift
            for out in self.prepared.values():
                if out is None:
                    continue
                scheduled = out.request.scheduled_ns
                if scheduled is not None:
                    out.request = dataclasses.replace(out.request, scheduled_ns=scheduled + shift)
        return head

    async def preparer(self, head: int) -> None:
        d, schedule = self.d, self.schedule
        for j in range(head, len(schedule)):
            entry = schedule[j]
            if d.stop.stopped:  # nothing more is released: nothing to prepare
                return
            if entry.prepare_steps is not None:
                if entry.prepare_optional and j < self.next:
                    continue  # released without it
                await d.sleep_until(d.start_perf_ns + entry.due_ns - PREPARE_LEAD_NS)
                for _ in entry.prepare_steps():
                    await d._sleep(0)  # whatever is due (a send, a read) goes between two steps
                if not entry.prepare_optional:
                    self._prepared_now(j, None)
                continue
            if entry.prepare is None:
                continue
            await d.sleep_until(d.start_perf_ns + entry.due_ns - PREPARE_LEAD_NS)
            # keep clear of the next release: if it is due before this preparation would end,
            # let it (and its burst) go first
            while self.next < j:
                until = d.start_perf_ns + schedule[self.next].due_ns - d.clock_ns()
                if until > self.cost.estimate_ns(entry.prepare_tokens) + PREPARE_MARGIN_NS:
                    break
                await self.released.setdefault(self.next, asyncio.Event()).wait()
                await d._sleep(PREPARE_MARGIN_NS / 1e9)  # the released sends write first
            self.prepare_ahead(j)
            await d._sleep(0)

    @staticmethod
    def _waits_for_preparation(entry: Scheduled) -> bool:
        """Whether ``entry`` starts with what its preparation made (not an optional one)."""
        return entry.prepare is not None or (entry.prepare_steps is not None and not entry.prepare_optional)

    async def start_entry(self, j: int, due: int) -> None:
        entry = self.schedule[j]
        out: Outgoing | None = None
        if self._waits_for_preparation(entry):
            if j not in self.prepared:  # preparation fell behind (a huge burst)
                self.d.prepared_late += 1
                await self.ready.setdefault(j, asyncio.Event()).wait()
            out = self.prepared.pop(j)
        await entry.run(out, due)

    async def releaser(self) -> None:
        d, schedule = self.d, self.schedule
        quiet = QuietCollector() if self.timed else None
        spin_ns = DISPATCH_SPIN_NS if d.precise_release else 0
        with quiet or contextlib.nullcontext():
            while self.next < len(schedule):
                due = d.start_perf_ns + schedule[self.next].due_ns
                while (wake := due - spin_ns - d.clock_ns()) > 0:
                    if d.stop.stopped_now():  # a soft stop ends the releases at once
                        return
                    # garbage is collected in quiet stretches, never just before a release
                    if quiet is not None:
                        quiet.collect_if_due(quiet=wake > GC_QUIET_NS)
                    await d._sleep(min(wake, DISPATCH_SLICE_NS) / 1e9)
                if quiet is not None:
                    quiet.collect_if_due(quiet=False)
                if d._wake is not None:  # the last stretch: the kernel's timer wakes us at it
                    await d._wake.until(due)
                while d.clock_ns() < due:  # or the loop keeps turning
                    await d._sleep(0)
                if d.stop.stopped_now():
                    return
                self._release_due(d.clock_ns())
                await d._sleep(0)  # let the released tasks go before anything else

    def _release_due(self, now: int) -> None:
        """Start every entry due by ``now``, in order."""
        d, schedule = self.d, self.schedule
        while self.next < len(schedule):
            j = self.next
            entry_due = d.start_perf_ns + schedule[j].due_ns
            if entry_due > now:
                break
            entry = schedule[j]
            if self._waits_for_preparation(entry) and j not in self.prepared:
                d.spawn(self.start_entry(j, entry_due))  # its preparation fell behind: waits for it
            else:  # no coroutine of the release's own around the entry's: a frame less an agent
                out = self.prepared.pop(j) if self._waits_for_preparation(entry) else None
                try:
                    started = entry.run(out, entry_due)
                except Exception as exc:  # a bug of ours: the run stops with it as its reason
                    log.error("schedule entry %d failed to start", j, exc_info=exc)
                    d.stop.halt(f"internal error starting schedule entry {j}: {exc!r}")
                    return
                d.spawn(started)
            if (event := self.released.pop(j, None)) is not None:
                event.set()
            self.next += 1
