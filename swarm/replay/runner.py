"""Sending a ReplayPlan: timed (open loop) or dependent (keeping the DAG).

Place in the map (DESIGN.md, "replay"). ``timed``: item *i* is sent at ``start + offset_i /
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
import time
from collections.abc import Callable

from swarm.engines.client import EngineRequest, HttpEngineClient, Timeouts, open_http_session
from swarm.engines.dialects import ChatMessage
from swarm.engines.profiles import get_profile
from swarm.live_stats import RunStats
from swarm.prefix import PrefixIndex, block_hashes
from swarm.record import RequestRecord
from swarm.replay.blocktext import prompt_words
from swarm.replay.plan import ReplayItem, ReplayPlan
from swarm.runner import ResolvedTarget

MODES = ("timed", "dependent")
#: Prompts are built and encoded this long before their send time.
PREPARE_LEAD_NS = 1_000_000_000


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
    tokenizer_encode: Callable[[str], list[object]] | None = None,
) -> int:
    """Send every item of ``plan``; returns the number of requests sent."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    if speed <= 0:
        raise ValueError("speed must be positive")
    stats = stats if stats is not None else RunStats()
    encode = tokenizer_encode or (lambda text: list(text.split()))
    index = PrefixIndex()
    sem = asyncio.Semaphore(max_in_flight) if max_in_flight > 0 else None
    done: dict[int, asyncio.Event] = {it.index: asyncio.Event() for it in plan.items}
    end_perf: dict[int, int] = {}
    start = time.perf_counter_ns()
    wall0 = time.time_ns() - start
    sent = 0
    async with open_http_session(connect_timeout_s=(timeouts or Timeouts()).connect_s) as session:
        client = HttpEngineClient(
            session, target.url, get_profile(target.engine), target=target.name, dialect=target.dialect,
            model=target.model, timeouts=timeouts, api_key_env=target.api_key_env,
        )  # fmt: skip

        def prepare(item: ReplayItem, due: int) -> tuple[EngineRequest, list[object], bytes]:
            messages, words = _item_prompt(item)
            tokens: list[object] = []
            if words is not None and tokenizer_encode is None:
                tokens.extend(words)  # the words are the tokens; no need to split them again
            else:
                for m in messages:
                    tokens.extend(encode(m.content))
            request = EngineRequest(
                messages=messages,
                max_tokens=item.max_tokens,
                identity=dataclasses.replace(
                    item.identity, run_id=run_id, target=target.name, engine=target.engine
                ),
                scheduled_ns=wall0 + due,
                prompt_tokens_est=len(tokens),
                block_hashes=block_hashes(tokens),  # type: ignore[arg-type]
                keep_text=item.prompt_parts is not None,
            )
            return request, tokens, client.encode(request)

        # Items whose send time is known in advance (no parents, or timed mode) are prepared by
        # one task, in send order, PREPARE_LEAD_NS ahead: a send then waits at most for one
        # preparation in progress, never for a burst of them.
        fixed = [it for it in plan.items if mode == "timed" or not it.parents]
        fixed.sort(key=lambda it: it.offset_s)
        prepared: dict[int, tuple[EngineRequest, list[object], bytes]] = {}
        ready: dict[int, asyncio.Event] = {it.index: asyncio.Event() for it in fixed}

        async def preparer() -> None:
            for it in fixed:
                due = start + int(it.offset_s / speed * 1e9)
                delay = (due - PREPARE_LEAD_NS - time.perf_counter_ns()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
                request, tokens, payload = prepare(it, due)
                # these go out in this same order, so the ideal can be taken now, off the send path
                request = dataclasses.replace(request, ideal_cached_tokens_est=index.observe(tokens))
                prepared[it.index] = (request, tokens, payload)
                ready[it.index].set()
                await asyncio.sleep(0)

        # One dispatcher releases the prepared items at their send times: every item due by the
        # time it wakes goes at once. (A timer per item would not do: asyncio polls with whole
        # milliseconds, so each of several timers a few microseconds apart costs a 1 ms wait.)
        go: dict[int, asyncio.Event] = {it.index: asyncio.Event() for it in fixed}

        async def dispatcher() -> None:
            i = 0
            while i < len(fixed):
                due = start + int(fixed[i].offset_s / speed * 1e9)
                delay = (due - time.perf_counter_ns()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
                now = time.perf_counter_ns()
                while i < len(fixed) and start + int(fixed[i].offset_s / speed * 1e9) <= now:
                    go[fixed[i].index].set()
                    i += 1
                await asyncio.sleep(0)  # let the released sends go before anything else

        async def one(item: ReplayItem) -> None:
            nonlocal sent
            try:
                if item.index in ready:
                    await ready[item.index].wait()
                    request, tokens, payload = prepared.pop(item.index)
                    await go[item.index].wait()
                else:
                    for p in item.parents:
                        await done[p].wait()
                    due = max(end_perf.get(p, start) for p in item.parents) + int(item.gap_s / speed * 1e9)
                    request, tokens, payload = prepare(item, due)
                    delay = (due - time.perf_counter_ns()) / 1e9
                    if delay > 0:
                        await asyncio.sleep(delay)
                if stop is not None and stop.is_set():
                    return
                if sem is not None:
                    await sem.acquire()
                try:
                    if request.ideal_cached_tokens_est is None:
                        request = dataclasses.replace(request, ideal_cached_tokens_est=index.observe(tokens))
                    record = await client.send(request, payload)
                    sent += 1
                finally:
                    if sem is not None:
                        sem.release()
                stats.add(record)
                on_record(record)
            finally:
                end_perf[item.index] = time.perf_counter_ns()
                done[item.index].set()

        prep_task = asyncio.get_running_loop().create_task(preparer())
        dispatch_task = asyncio.get_running_loop().create_task(dispatcher())
        tasks = [asyncio.get_running_loop().create_task(one(it)) for it in plan.items]
        stopper = asyncio.get_running_loop().create_task(stop.wait()) if stop is not None else None
        try:
            pending: set[asyncio.Task[None]] = set(tasks)
            while pending:
                waiting: set[asyncio.Task[None] | asyncio.Task[bool]] = set(pending)
                if stopper is not None:
                    waiting.add(stopper)
                finished, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                pending.difference_update(finished)
                if stopper is not None and stopper in finished:
                    for t in tasks:
                        t.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    break
        finally:
            prep_task.cancel()
            dispatch_task.cancel()
            if stopper is not None:
                stopper.cancel()
    return sent
