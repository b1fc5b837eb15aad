"""Sending a ReplayPlan: timed (open loop) or dependent (keeping the DAG).

Place in the map (docs/architecture.md, "replay"). ``timed``: item *i* is sent at ``start + offset_i /
speed`` whatever happens to the others. ``dependent``: an item with parents is sent when all
its parents' replayed requests have finished, plus its recorded gap divided by ``speed``, so
a slower engine never receives a child before its parent; items without parents keep their
timed offsets. Every request gets the same accounting as a swarm run: prompt token estimate,
64-token block hashes and the ideal cached tokens (longest prefix shared with any prompt sent
before it in this replay).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from swarm.agent import wait_for_slot
from swarm.engines.client import EngineRequest, HttpEngineClient, Timeouts, open_transport, read_api_key
from swarm.engines.dialects import ChatMessage
from swarm.engines.profiles import get_profile
from swarm.live_stats import RunStats
from swarm.prefix import PrefixIndex, block_hashes
from swarm.quiet_gc import QuietCollector
from swarm.record import RequestRecord
from swarm.replay.blocktext import prompt_words
from swarm.replay.plan import ReplayItem, ReplayPlan
from swarm.runner import ResolvedTarget

log = logging.getLogger(__name__)

MODES = ("timed", "dependent")
#: Prompts are built and encoded this long before their send time.
PREPARE_LEAD_NS = 1_000_000_000
#: The dispatcher wakes this long before a send is due and yields until it is: asyncio sleeps
#: in whole milliseconds, so a plain timer wakes up to 1 ms late.
DISPATCH_SPIN_NS = 1_500_000
#: The dispatcher sleeps at most this long at a time (to run due garbage collections).
DISPATCH_SLICE_NS = 50_000_000
#: A garbage collection runs only if the next send is at least this far away.
GC_QUIET_NS = 30_000_000
#: A preparation starts only if it would end this long before the next send is due.
PREPARE_MARGIN_NS = 2_000_000


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


@dataclass(slots=True)
class Prepared:
    """A request ready to go: its record fields, its tokens (for the ideal) and its body."""

    request: EngineRequest
    tokens: list[object]
    payload: bytes


def item_messages(item: ReplayItem) -> tuple[ChatMessage, ...]:
    """The prompt of an item: its recorded parts, or one user message of its block text."""
    return _item_prompt(item)[0]


def _item_prompt(item: ReplayItem) -> tuple[tuple[ChatMessage, ...], list[str] | None]:
    """The messages, and for a synthesised prompt its words (its tokens for the word tokenizer)."""
    if item.prompt_parts is not None:
        roles = item.prompt_roles or ("user",) * len(item.prompt_parts)
        return tuple(
            ChatMessage(role, text) for role, text in zip(roles, item.prompt_parts, strict=False)
        ), None
    words = prompt_words(item.block_ids, item.block_tokens, item.prompt_tokens, tail_seed=str(item.index))
    return (ChatMessage("user", " ".join(words)),), words


async def replay(
    plan: ReplayPlan,
    target: ResolvedTarget,
    on_record: Callable[[RequestRecord], None],
    *,
    mode: str = "timed",
    speed: float = 1.0,
    max_in_flight: int = 0,
    run_id: str = "",
    stats: RunStats | None = None,
    timeouts: Timeouts | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Send every item of ``plan``; returns the number of requests sent."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    if speed <= 0:
        raise ValueError("speed must be positive")
    async with open_transport(target.url, connect_timeout_s=(timeouts or Timeouts()).connect_s) as session:
        client = HttpEngineClient(
            session, target.url, get_profile(target.engine), target=target.name, dialect=target.dialect,
            model=target.model, timeouts=timeouts, api_key=read_api_key(target.api_key_env, target.api_key_file),
        )  # fmt: skip
        replayer = _Replayer(
            plan, client, on_record, mode=mode, speed=speed, max_in_flight=max_in_flight, run_id=run_id,
            stats=stats if stats is not None else RunStats(), stop=stop,
        )  # fmt: skip
        return await replayer.run()


class _Replayer:
    """The state of one replay against one target.

    Items whose send time is known in advance (every item in timed mode; items without parents
    in dependent mode) are prepared in send order, ``PREPARE_LEAD_NS`` ahead, and never just
    before a send is due: building a prompt of tens of thousands of tokens takes milliseconds,
    during which the event loop could not send. The items due in the first
    ``PREPARE_LEAD_NS`` are prepared before the clock starts. One dispatcher releases them at
    their send times, all that are due at once (a timer per item would not do: asyncio polls
    with whole milliseconds, so each of several timers microseconds apart costs a 1 ms wait),
    and a task exists only per request in flight. A dependent item is started when its last
    parent finishes.
    """

    def __init__(
        self,
        plan: ReplayPlan,
        client: HttpEngineClient,
        on_record: Callable[[RequestRecord], None],
        *,
        mode: str,
        speed: float,
        max_in_flight: int,
        run_id: str,
        stats: RunStats,
        stop: asyncio.Event | None,
    ) -> None:
        self.client = client
        self.on_record = on_record
        self.speed = speed
        self.run_id = run_id
        self.stats = stats
        self.stop = stop
        self.sem = asyncio.Semaphore(max_in_flight) if max_in_flight > 0 else None
        self.index = PrefixIndex()
        self.wall0 = time.time_ns() - time.perf_counter_ns()  # wall clock = perf counter + wall0
        self.start = time.perf_counter_ns()
        self.sent = 0
        self.total = len(plan.items)
        self.finished = 0
        self.all_finished = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.end_perf: dict[int, int] = {}
        known = {it.index for it in plan.items}
        self.fixed = sorted(
            (it for it in plan.items if mode == "timed" or not any(p in known for p in it.parents)),
            key=lambda it: it.offset_s,
        )
        self.due_rel = [int(it.offset_s / speed * 1e9) for it in self.fixed]
        fixed_ids = {it.index for it in self.fixed}
        self.waiting_parents: dict[int, int] = {}
        self.children: dict[int, list[ReplayItem]] = {}
        for it in plan.items:
            if it.index in fixed_ids:
                continue
            parents = [p for p in it.parents if p in known]
            self.waiting_parents[it.index] = len(parents)
            for p in parents:
                self.children.setdefault(p, []).append(it)
        self.prepared: dict[int, Prepared] = {}
        self.ready: dict[int, asyncio.Event] = {}
        self.released: dict[int, asyncio.Event] = {}
        self.next_send = 0  # index into ``fixed`` of the next item the dispatcher releases
        self.cost = _PrepareCost()
        self.prepared_late = 0

    def prepare(self, item: ReplayItem, due_ns: int) -> Prepared:
        messages, words = _item_prompt(item)
        tokens: list[object] = []
        if words is not None:
            tokens.extend(words)  # the words are the tokens; no need to split them again
        else:
            for m in messages:
                tokens.extend(m.content.split())
        request = EngineRequest(
            messages=messages,
            max_tokens=item.max_tokens,
            identity=dataclasses.replace(
                item.identity, run_id=self.run_id, target=self.client.target, engine=self.client.profile.name
            ),
            scheduled_ns=self.wall0 + due_ns,
            prompt_tokens_est=len(tokens),
            block_hashes=block_hashes(tokens),  # type: ignore[arg-type]
            keep_text=item.prompt_parts is not None,
        )
        return Prepared(request, tokens, self.client.encode(request))

    def prepare_ahead(self, j: int) -> None:
        t0 = time.perf_counter_ns()
        item = self.fixed[j]
        p = self.prepare(item, self.start + self.due_rel[j])
        # these go out in this same order, so the ideal can be taken now, off the send path
        p.request = dataclasses.replace(p.request, ideal_cached_tokens_est=self.index.observe(p.tokens))
        p.tokens = []  # no longer needed; a long list would only cost the garbage collector
        self.prepared[item.index] = p
        if (event := self.ready.pop(item.index, None)) is not None:
            event.set()
        self.cost.learn(item.prompt_tokens, time.perf_counter_ns() - t0)

    async def run(self) -> int:
        if self.total == 0:
            return 0
        head = 0
        while head < len(self.fixed) and self.due_rel[head] < PREPARE_LEAD_NS:
            self.prepare_ahead(head)
            head += 1
        # the clock starts now; the early items get their true scheduled times
        shift = time.perf_counter_ns() - self.start
        self.start += shift
        for j in range(head):
            p = self.prepared[self.fixed[j].index]
            p.request = dataclasses.replace(p.request, scheduled_ns=p.request.scheduled_ns + shift)  # type: ignore[operator]
        loop = asyncio.get_running_loop()
        helpers: list[asyncio.Task[Any]] = [
            loop.create_task(self.preparer(head)),
            loop.create_task(self.dispatcher()),
        ]
        ends: list[asyncio.Task[Any]] = [loop.create_task(self.all_finished.wait())]
        if self.stop is not None:
            ends.append(loop.create_task(self.stop.wait()))
        try:
            await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
            if not self.all_finished.is_set():  # stopped
                for t in list(self.tasks):
                    t.cancel()
                await asyncio.gather(*self.tasks, return_exceptions=True)
        finally:
            for t in (*helpers, *ends):
                t.cancel()
        if self.prepared_late:
            log.warning(
                "%d of %d requests were not prepared by their send time and went late; "
                "the schedule is too dense for one process (try a lower --speed)",
                self.prepared_late, len(self.fixed),
            )  # fmt: skip
        return self.sent

    async def preparer(self, head: int) -> None:
        for j in range(head, len(self.fixed)):
            delay = (self.start + self.due_rel[j] - PREPARE_LEAD_NS - time.perf_counter_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            # keep clear of the next send: if it is due before this preparation would end, let
            # it (and its burst) go first
            while self.next_send < j:
                until_send = self.start + self.due_rel[self.next_send] - time.perf_counter_ns()
                if until_send > self.cost.estimate_ns(self.fixed[j].prompt_tokens) + PREPARE_MARGIN_NS:
                    break
                event = self.released.setdefault(self.fixed[self.next_send].index, asyncio.Event())
                await event.wait()
                await asyncio.sleep(PREPARE_MARGIN_NS / 1e9)  # the released sends write first
            self.prepare_ahead(j)
            await asyncio.sleep(0)

    async def dispatcher(self) -> None:
        loop = asyncio.get_running_loop()
        with QuietCollector() as collector:
            while self.next_send < len(self.fixed):
                due = self.start + self.due_rel[self.next_send]
                while (wake := due - DISPATCH_SPIN_NS - time.perf_counter_ns()) > 0:
                    # garbage is collected in quiet stretches, never just before a send
                    collector.collect_if_due(quiet=wake > GC_QUIET_NS)
                    await asyncio.sleep(min(wake, DISPATCH_SLICE_NS) / 1e9)
                collector.collect_if_due(quiet=False)
                while time.perf_counter_ns() < due:  # the last stretch: the loop keeps turning
                    await asyncio.sleep(0)
                now = time.perf_counter_ns()
                while self.next_send < len(self.fixed) and self.start + self.due_rel[self.next_send] <= now:
                    item = self.fixed[self.next_send]
                    self._spawn(loop, self.send_fixed(item))
                    if (event := self.released.pop(item.index, None)) is not None:
                        event.set()
                    self.next_send += 1
                await asyncio.sleep(0)  # let the released sends go before anything else

    def _spawn(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]) -> None:
        task = loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def send_fixed(self, item: ReplayItem) -> None:
        try:
            if item.index not in self.prepared:  # preparation fell behind (a huge burst)
                self.prepared_late += 1
                event = self.ready.setdefault(item.index, asyncio.Event())
                await event.wait()
            await self.send(item, self.prepared.pop(item.index))
        finally:
            self.item_finished(item)

    async def send_dependent(self, item: ReplayItem) -> None:
        try:
            parent_end = max(
                (self.end_perf[p] for p in item.parents if p in self.end_perf), default=self.start
            )
            due = parent_end + int(item.gap_s / self.speed * 1e9)
            prepared = self.prepare(item, due)
            delay = (due - time.perf_counter_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            await self.send(item, prepared)
        finally:
            self.item_finished(item)

    async def send(self, item: ReplayItem, prepared: Prepared) -> None:
        if self.stop is not None and self.stop.is_set():
            return
        slot_wait_ns = await wait_for_slot(self.sem) if self.sem is not None else 0
        try:
            request = prepared.request
            if slot_wait_ns:
                request = dataclasses.replace(request, slot_wait_ns=slot_wait_ns)
            if request.ideal_cached_tokens_est is None:
                request = dataclasses.replace(
                    request, ideal_cached_tokens_est=self.index.observe(prepared.tokens)
                )
            record = await self.client.send(request, prepared.payload)
            self.sent += 1
        finally:
            if self.sem is not None:
                self.sem.release()
        self.stats.add(record)
        self.on_record(record)

    def item_finished(self, item: ReplayItem) -> None:
        self.end_perf[item.index] = time.perf_counter_ns()
        self.finished += 1
        loop = asyncio.get_running_loop()
        for child in self.children.pop(item.index, ()):
            self.waiting_parents[child.index] -= 1
            if self.waiting_parents[child.index] == 0:
                self._spawn(loop, self.send_dependent(child))
        if self.finished == self.total:
            self.all_finished.set()
