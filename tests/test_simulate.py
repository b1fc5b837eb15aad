"""``swarm simulate``: the virtual clock, the routing policies, the twin client, the CLI, and
the same twin run in real time (``swarm emulate`` over HTTP) and in virtual time agreeing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import random
import subprocess
import sys
import threading
from array import array
from pathlib import Path
from typing import Any

import pytest
from conftest import EmulatorProcess
from engine_workload import write_spec_files

from swarm.analysis.compare import routing_share
from swarm.emulator.config import EmulatorConfig
from swarm.emulator.radix_cache import RadixCache
from swarm.record import Status
from swarm.request import ChatMessage, EngineRequest, Timeouts
from swarm.sim.routing import CacheAware, LeastLoad, RoundRobin
from swarm.sim.twin_client import TwinClient, TwinFleet
from swarm.sim.virtual_loop import VirtualClock, VirtualTimeLoop

SWARM = [sys.executable, "-m", "swarm"]


def run_virtual(main: Any, clock: VirtualClock | None = None) -> Any:
    loop = VirtualTimeLoop(clock or VirtualClock(start_ns=0))
    try:
        return loop.run_until_complete(main)
    finally:
        loop.close()


# --- the virtual clock ---------------------------------------------------------------------------


def test_the_virtual_loop_runs_timers_in_their_order_and_moves_its_clock_to_each() -> None:
    clock = VirtualClock(start_ns=0)
    seen: list[tuple[str, float]] = []

    async def after(delay_s: float, tag: str) -> None:
        await asyncio.sleep(delay_s)
        seen.append((tag, asyncio.get_running_loop().time()))

    async def main() -> None:
        await asyncio.gather(after(3600, "hour"), after(0.5, "half"), after(10, "ten"), after(0.5, "half again"))

    run_virtual(main(), clock)
    assert [t for t, _ in seen] == ["half", "half again", "ten", "hour"]
    assert [at for _, at in seen] == pytest.approx([0.5, 0.5, 10, 3600], abs=1e-6)
    assert clock.elapsed_s == pytest.approx(3600, abs=1e-6)


def test_the_virtual_loop_runs_timers_of_one_instant_in_the_order_they_were_set() -> None:
    """Timers due at one instant run in the order they were set, whatever else is pending
    (asyncio's heap alone orders equals by its shape: a stretch's one timer against its steps'
    several once sent requests of one instant to a twin in another order)."""
    rng = random.Random(3)
    seen: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for i in range(200):
            for _ in range(rng.randint(0, 3)):  # other timers, before and after the instant
                loop.call_later(rng.choice([0.2, 0.7, 1.3, 2.0]) + rng.random(), lambda: None)
            loop.call_later(1.0, seen.append, i)
        await asyncio.sleep(3.5)

    run_virtual(main())
    assert seen == list(range(200))


def test_the_virtual_loop_still_takes_work_from_another_thread() -> None:
    """With no timer pending it waits for real descriptors: a thread's ``call_soon_threadsafe``."""

    async def main() -> int:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        threading.Thread(target=lambda: loop.call_soon_threadsafe(done.set_result, 7)).start()
        return await done

    assert run_virtual(main()) == 7


# --- routing ----------------------------------------------------------------------------------------


def test_round_robin_goes_in_turn_and_least_load_to_the_fewest_in_flight() -> None:
    rr = RoundRobin(3)
    assert [rr.choose(["a"], [0, 0, 0]) for _ in range(4)] == [0, 1, 2, 0]
    assert LeastLoad(3).choose(["a"], [4, 1, 2]) == 1


def test_cache_aware_follows_a_prefix_until_the_loads_part() -> None:
    """SGLang's router's rule (0.3.2): a prompt goes where its prefix was sent (match share
    above 0.3), one matched less to the least loaded replica, and any to the least loaded once
    loads part by more than 64 and 1.5x."""
    router = CacheAware(3)
    system_a, system_b = ["sys-a"] * 100, ["sys-b"] * 100
    assert router.choose([*system_a, "t1"], [0, 0, 0]) == 0  # nothing matched: the least loaded, first of equals
    assert router.choose([*system_b, "t1"], [1, 0, 0]) == 1  # no match: the least loaded
    assert router.choose([*system_a, "t2"], [1, 1, 0]) == 0  # 100 of 101 matched on 0
    assert router.choose([*system_b, "t2"], [1, 1, 0]) == 1
    assert router.choose(["other"] * 30 + system_a, [1, 1, 0]) == 2  # a shared tail is no prefix
    # replica 2 now holds the fewest tokens (31) but is the busiest: too little matched goes to
    # the least loaded, not to the smallest tree
    assert router.choose(["fresh"] * 50, [3, 2, 4]) == 1
    assert router.choose([*system_a, "t3"], [100, 20, 0]) == 2  # imbalanced: the least loaded


# --- the twin client --------------------------------------------------------------------------------


def _request(words: int, max_tokens: int = 4, text: str = "w", keep_text: bool = False) -> EngineRequest:
    return EngineRequest(
        messages=(ChatMessage("user", " ".join([text] * words)),), max_tokens=max_tokens, keep_text=keep_text
    )


def test_the_twin_client_records_what_the_twin_did_on_the_virtual_clock() -> None:
    """A step model of 10 ms + 1 ms a prefill token: a 50-token prompt's first token at the
    end of its 60 ms prefill step, then one token a 10 ms step (plus 0.05 ms a sequence); its
    repeat hits 49 tokens; a prompt past the twin's limit is a 400 row; one past the total
    timeout (or first-token timeout) a timeout row, and the twin's batch lets it go."""
    clock = VirtualClock(start_ns=0)
    config = EmulatorConfig(step_base_ms=10, prefill_ms_per_token=1.0, decode_ms_per_seq=0.0, max_prompt_tokens=200)

    async def main() -> list[Any]:
        fleet = TwinFleet(config)
        fleet.start()
        client = TwinClient(
            fleet, clock, target="t", engine="sglang", dialect="openai-chat", model="m",
            timeouts=Timeouts(total_s=0.5), wall_minus_perf_ns=0,
        )  # fmt: skip
        first = await client.send(_request(50))
        again = await client.send(_request(50))
        refused = await client.send(_request(500))
        late = await client.send(_request(20, max_tokens=1000, text="x"))
        client.timeouts = Timeouts(first_token_s=0.03)
        no_first = await client.send(_request(50, text="z"))
        client.timeouts = Timeouts()
        after = await client.send(_request(10, text="y"))
        await fleet.stop()
        return [first, again, refused, late, no_first, after, fleet.models[0]]

    first, again, refused, late, no_first, after, model = run_virtual(main(), clock)
    assert first.ok and first.clock == "virtual" and first.replica == "sim://sglang" and first.replica_from == "simulated"
    assert first.prompt_tokens == 50 and first.completion_tokens == 4 and first.cached_tokens == 0
    assert first.ttft_ns == 60_000_000 and tuple(first.chunk_ns) == (60_000_000, 70_000_000, 80_000_000, 90_000_000)
    assert first.e2e_ns == 90_000_000
    assert again.cached_tokens == 49 and again.ttft_ns == 11_000_000  # one uncached token
    assert (refused.status, refused.http_status, refused.ttft_ns) == (Status.HTTP_ERROR, 400, None)
    assert "maximum 200" in (refused.error or "")
    assert late.status is Status.TIMEOUT and late.e2e_ns == 500_000_000 and late.completion_tokens is None
    assert late.error == "request not finished within 0.5 s"
    assert no_first.status is Status.TIMEOUT and no_first.e2e_ns == 30_000_000
    assert no_first.error == "no first token within 0.03 s"
    assert after.ok and not model.running and not model.waiting  # the timed-out request left the batch


def test_a_laid_out_prompt_waits_unread_and_is_served_as_its_ids() -> None:
    """A prompt given as the arrays it is laid out from (``LaidOutIds``, as an agent gives a
    twin) is not made into one array while it waits in the twin's queue, and is served as the
    same ids given whole: the same chunk times, hits and output, a repeat hitting it alike."""
    from swarm.token_ids import LaidOutIds

    corpus = array("q", random.Random(3).choices(range(1, 1 << 40), k=400))
    own = array("q", [7, 8, 9])
    laid_out = [
        LaidOutIds([(corpus, 0, 120), (own, 0, 3), (corpus, 300, 330)]),
        LaidOutIds([(corpus, 0, 120), (own, 1, 3), (corpus, 200, 260)]),
        LaidOutIds([(corpus, 0, 120), (own, 0, 3), (corpus, 300, 330), (own, 0, 2)]),
    ]
    config = EmulatorConfig(
        step_base_ms=10, prefill_ms_per_token=1.0, decode_ms_per_seq=0.0, max_running_requests=1
    )

    def served(whole: bool) -> tuple[list[Any], list[bool]]:
        clock = VirtualClock(start_ns=0)

        async def main() -> tuple[list[Any], list[bool]]:
            fleet = TwinFleet(config)
            fleet.start()
            client = TwinClient(
                fleet, clock, target="t", engine="sglang", dialect="openai-chat", model="m",
                timeouts=Timeouts(), wall_minus_perf_ns=0,
            )  # fmt: skip
            sends = []
            for prompt in laid_out:
                given = prompt.ids() if whole else prompt
                request = dataclasses.replace(_request(len(prompt)), prompt_ids=given)
                sends.append(asyncio.ensure_future(client.send(request)))
            await asyncio.sleep(0.001)  # the first admitted (and its array let go), the others waiting
            model = fleet.models[0]
            unread = [gen._prompt is None for gen in (*model.running, *model.waiting)]
            records = await asyncio.gather(*sends)
            await fleet.stop()
            return list(records), unread

        return run_virtual(main(), clock)  # type: ignore[no-any-return]

    laid, unread = served(whole=False)
    whole, _ = served(whole=True)
    assert unread == [True, True, True]
    fields = ("status", "ttft_ns", "e2e_ns", "prompt_tokens", "cached_tokens", "completion_tokens")
    assert [[getattr(r, f) for f in fields] + [tuple(r.chunk_ns)] for r in laid] == [
        [getattr(r, f) for f in fields] + [tuple(r.chunk_ns)] for r in whole
    ]
    assert [r.prompt_tokens for r in laid] == [153, 182, 155] and laid[2].cached_tokens == 153
    for prompt in laid_out:
        ids = prompt.ids()
        assert len(prompt) == len(ids) and prompt.last(5) == ids[-5:] and prompt.last(999) == ids
    with pytest.raises(TypeError, match="64-bit"):
        LaidOutIds([(array("I", [1, 2]), 0, 2)]).ids()
    with pytest.raises(ValueError, match="hold 3 ids, not the 5"):
        LaidOutIds([(own, 0, 5)]).ids()


def test_a_silence_a_rounding_short_of_the_idle_limit_times_the_request_out() -> None:
    """The idle deadline checks the silence since the last token and re-arms for what is left:
    a silence short of the limit by a rounding (0.913898975 - 0.613898975 < 0.3) once re-armed a
    timer of 1e-17 s, which the virtual clock never reached, and the run hung. It times out."""
    import signal
    from array import array

    from swarm.sim.twin_client import _Deadlines

    class _Gen:  # a request whose last token came at 0.613898975 s, and no other since
        finished = False
        first_token_s = 0.0
        times = array("d", [0.613898975])

        def last_token_s(self) -> float:
            return self.times[-1]

    async def main() -> str | None:
        watch: list[Any] = []

        async def watched() -> None:
            watch.append(_Deadlines(_Gen(), Timeouts(idle_s=0.3)))  # type: ignore[arg-type]
            await asyncio.sleep(3600)

        try:
            await asyncio.ensure_future(watched())
        except asyncio.CancelledError:
            pass
        return watch[0].fired

    def hung(signum: int, frame: Any) -> None:
        raise RuntimeError("the virtual loop spun on a timer that never moved its clock")

    before = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        assert run_virtual(main()) == "stream stalled: no data for 0.3 s after the first token"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


@pytest.mark.parametrize("start_ns", [72_099_863_748, 455_458_830_965, 209_137_370_698])
def test_a_first_token_deadline_met_by_idle_checks_times_out_at_its_own_instant(start_ns: int) -> None:
    """A request with no first token, checked for silence every 60 s (nothing to judge yet), is
    timed out at its first-token deadline to the nanosecond: the idle check set at 60 s for
    120 s, a rounding before the deadline from these starts, is run in the same turn of the
    loop, as two timers due within a nanosecond are, and does not move the clock a nanosecond
    past it (run alone, it did: 120 s and 1 ns)."""
    from swarm.sim.twin_client import _Deadlines

    class _Gen:  # a request that never emits
        finished = False
        first_token_s = None

        def last_token_s(self) -> None:
            return None

    clock = VirtualClock(start_ns=0)

    async def main() -> tuple[str | None, int]:
        await asyncio.sleep(start_ns / 1e9)
        began = clock.now_ns
        watch: list[Any] = []

        async def watched() -> None:
            timeouts = Timeouts(first_token_s=120.0, idle_s=60.0)
            watch.append(_Deadlines(_Gen(), timeouts))  # type: ignore[arg-type]
            await asyncio.sleep(3600)

        try:
            await asyncio.ensure_future(watched())
        except asyncio.CancelledError:
            pass
        return watch[0].fired, clock.now_ns - began

    fired, waited_ns = run_virtual(main(), clock)
    assert fired == "no first token within 120 s"
    assert waited_ns == 120_000_000_000


def _stretched_and_stepped(
    config: EmulatorConfig, stretch_steps: int, idle_s: float | None = None, total_s: float = 3.0,
    keep_text: bool = False,
) -> tuple[list[Any], Any, int]:
    """Ten requests against one twin: arrivals staggered (some in the middle of a stretch),
    outputs of different lengths, one past its total timeout mid-stream (its reader goes), and
    four late ones that the reserve, fallen by then, lets in beside it; the records, the twin,
    and the instants the clock visited."""
    clock = VirtualClock(start_ns=0)

    async def one(client: TwinClient, delay_s: float, words: int, max_tokens: int, text: str) -> Any:
        await asyncio.sleep(delay_s)
        return await client.send(_request(words, max_tokens, text, keep_text))

    async def main() -> tuple[list[Any], Any]:
        fleet = TwinFleet(config)
        for model in fleet.models:
            model.stretch_steps = stretch_steps
        fleet.start()
        client = TwinClient(
            fleet, clock, target="t", engine="sglang", dialect="openai-chat", model="m",
            timeouts=Timeouts(total_s=total_s, idle_s=idle_s), wall_minus_perf_ns=0,
        )  # fmt: skip
        sends = [
            (0.0, 40, 90, "a"), (0.013, 60, 30, "b"), (0.2, 40, 120, "a"), (0.37, 30, 700, "c"), (0.5, 20, 5, "d"),
            (1.9, 50, 70, "a"), *((2.0 + 0.03 * i, 20, 150, f"e{i}") for i in range(4)),
        ]  # fmt: skip
        records = await asyncio.gather(*(one(client, *send) for send in sends))
        await fleet.stop()
        return list(records), fleet.models[0]

    records, model = run_virtual(main(), clock)
    return records, model, clock.jumps


@pytest.mark.parametrize("kv_capacity_tokens", [100_000, 900])
def test_decode_stretches_give_the_records_of_steps_run_one_at_a_time(kv_capacity_tokens: int) -> None:
    """A twin that runs its decode steps by stretches (one event for many steps; the simulator's
    way) records what it records stepping one step at a time: every token at the same time, the
    same hits, the same timeout (a reader gone mid-stretch), the same preemptions where the KV
    runs short; in fewer instants of the clock. Steps whose length grows with the context."""
    config = EmulatorConfig(
        step_base_ms=5, prefill_ms_per_token=0.1, decode_ms_per_seq=0.3, decode_ms_per_context_token=0.001,
        kv_capacity_tokens=kv_capacity_tokens,
    )  # fmt: skip
    stepped, by_step, jumps_stepped = _stretched_and_stepped(config, 1)
    stretched, by_stretch, jumps_stretched = _stretched_and_stepped(config, 64)
    fields = ("status", "error", "ttft_ns", "e2e_ns", "chunk_ns", "cached_tokens", "completion_tokens")
    assert [[getattr(r, f) for f in fields] for r in stretched] == [[getattr(r, f) for f in fields] for r in stepped]
    assert [r.status for r in stepped].count(Status.TIMEOUT) == 1  # the 700-token answer, past 3 s
    assert by_stretch.stats.steps == by_step.stats.steps and by_stretch.stats.step_tokens == by_step.stats.step_tokens
    assert by_stretch.stats.preemptions == by_step.stats.preemptions
    assert (by_step.stats.preemptions > 0) == (kv_capacity_tokens < 1000)
    assert by_stretch.stats.step_model_s == pytest.approx(by_step.stats.step_model_s, rel=1e-12)
    assert by_stretch.stats.step_token_model_s == pytest.approx(by_step.stats.step_token_model_s, rel=1e-9)
    assert jumps_stretched < jumps_stepped / 3


@pytest.mark.parametrize("total_s", [1.662, 2.5, 3.0])
def test_a_request_gone_in_a_stretch_records_the_text_it_had_as_step_by_step(total_s: float) -> None:
    """The text of a request whose deadline passes in the middle of a decode stretch (before the
    step under way is known, or in it) is what it had by then stepping one step at a time: the
    stretch's steps ended by then counted, though not yet handed over."""
    config = EmulatorConfig(step_base_ms=5, prefill_ms_per_token=0.1, decode_ms_per_seq=0.3, kv_capacity_tokens=100_000)
    stepped = _stretched_and_stepped(config, 1, total_s=total_s, keep_text=True)[0]
    stretched = _stretched_and_stepped(config, 64, total_s=total_s, keep_text=True)[0]
    gone = [r for r in stepped if r.status is Status.TIMEOUT]
    assert gone and all(r.output_text for r in gone)  # went mid-answer
    assert [(r.status, r.output_text) for r in stretched] == [(r.status, r.output_text) for r in stepped]


def test_a_stretch_under_way_counts_its_ended_steps_against_the_idle_limit() -> None:
    """The idle deadline, checked in the middle of a decode stretch (a limit of 0.1 s, stretches
    of 64 steps of about 6 ms), sees the tokens of the stretch's steps ended by then, as it does
    stepping one step at a time: no stream stalls, and the records are the same."""
    config = EmulatorConfig(
        step_base_ms=5, prefill_ms_per_token=0.1, decode_ms_per_seq=0.3, kv_capacity_tokens=100_000
    )
    stepped, _, _ = _stretched_and_stepped(config, 1, idle_s=0.1)
    stretched, _, _ = _stretched_and_stepped(config, 64, idle_s=0.1)
    assert all(r.error is None or "stalled" not in r.error for r in stretched)
    fields = ("status", "error", "ttft_ns", "e2e_ns", "chunk_ns", "cached_tokens", "completion_tokens")
    seen = [[getattr(r, f) for f in fields] for r in stretched]
    assert seen == [[getattr(r, f) for f in fields] for r in stepped]


def _recency(cache: Any) -> list[Any]:
    """What a prefix cache would evict first to last: its nodes' paths (a radix tree) or its
    blocks (a block cache) in order of last use."""
    if isinstance(cache, RadixCache):
        nodes: list[tuple[int, tuple[int, ...]]] = []
        stack = [(cache.root, ())]
        while stack:
            node, path = stack.pop()
            for child in node.children.values():
                full = (*path, *child.key)
                nodes.append((child.last_access, full))
                stack.append((child, full))
        return [path for _, path in sorted(nodes)]
    return sorted(cache._blocks, key=lambda bid: cache._blocks[bid].last_access)


def _queued_and_stepped(
    config: EmulatorConfig, sends: list[tuple[float, EngineRequest, Timeouts]], stretch_steps: int
) -> tuple[list[Any], Any, dict[float, list[Any]], list[Any]]:
    """``sends`` (delay, request, its client's timeouts) against one twin; the records, the twin, its cache's order of
    use at each step's end (``_recency``, before the step's finished requests enter it), and
    the held queues of the stretches it ran (``EngineModel._run_stretch``'s)."""
    clock = VirtualClock(start_ns=0)
    held: list[Any] = []
    recency: dict[float, list[Any]] = {}

    async def one(client: TwinClient, delay_s: float, request: EngineRequest) -> Any:
        await asyncio.sleep(delay_s)
        return await client.send(request)

    async def main() -> tuple[list[Any], Any]:
        fleet = TwinFleet(config)
        model = fleet.models[0]
        model.stretch_steps = stretch_steps
        run_stretch = model._run_stretch

        async def spied(steps: int, anchor: float, queue: Any = None) -> float:
            held.append(queue)
            return await run_stretch(steps, anchor, queue)

        end_step = model.end_step

        def noted(plan: Any, now: float) -> int:  # the cache's order of use as each step ends
            recency[now] = _recency(model.cache)
            return end_step(plan, now)

        model._run_stretch = spied  # type: ignore[method-assign]
        model.end_step = noted  # type: ignore[method-assign]
        fleet.start()
        clients = {
            t: TwinClient(
                fleet, clock, target="t", engine=config.engine, dialect="openai-chat", model="m", timeouts=t,
                wall_minus_perf_ns=0,
            )
            for t in {send_timeouts for *_, send_timeouts in sends}
        }  # fmt: skip
        records = await asyncio.gather(*(one(clients[t], delay_s, request) for delay_s, request, t in sends))
        await fleet.stop()
        return list(records), model

    records, model = run_virtual(main(), clock)
    return records, model, recency, [h for h in held if h is not None]


def _shared_prefix_requests(
    n: int, every_s: float, seed: int, max_tokens: tuple[int, int], timeouts: Timeouts, patient: int
) -> list[tuple[float, EngineRequest, Timeouts]]:
    """``n`` requests ``every_s`` apart: one of three system prompts, then a turn of its own;
    after the first ``patient`` (which wait as long as it takes), each with ``timeouts``."""
    rng = random.Random(seed)
    return [
        (i * every_s, EngineRequest(
            messages=(ChatMessage("system", " ".join([f"s{i % 3}"] * 60)), ChatMessage("user", " ".join([f"u{i}"] * rng.randint(5, 40)))),
            max_tokens=rng.randint(*max_tokens),
        ), Timeouts() if i < patient else timeouts)
        for i in range(n)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "engine", "overrides", "n", "every_s", "patient"),
    [
        ("KV held, first requests timing out", "sglang", {"schedule_policy": "fcfs", "kv_capacity_tokens": 700}, 40, 0.02, 0),
        ("max running reached", "sglang", {"schedule_policy": "fcfs", "max_running_requests": 3}, 40, 0.02, 0),
        ("LPM queue shrinking past its threshold", "sglang", {"schedule_policy": "lpm", "kv_capacity_tokens": 900}, 170, 0.003, 20),
        ("a block cache's KV held", "trtllm", {"kv_capacity_tokens": 900}, 40, 0.02, 0),
        ("KV held, a host tier behind the cache", "sglang", {"kv_capacity_tokens": 700, "cache_capacity_tokens": 150, "host_cache_tokens": 900}, 40, 0.02, 0),
    ],
)
def test_decode_stretches_beside_a_queue_none_of_their_steps_admits_from_give_the_records_of_steps_run_one_at_a_time(
    case: str, engine: str, overrides: dict[str, Any], n: int, every_s: float, patient: int
) -> None:
    """An overloaded twin decodes by stretches while its queue waits, where no step of the
    stretch would admit from it (the KV held, the running requests' most, a queue taken in
    arrival order): the same records as stepping one step at a time (tokens at the same
    times, the same hits, the same timeouts of requests that waited too long, first ones
    among them), the same steps, and the prefix cache's order of last use the same (the
    admission checks of the steps not run one by one mark what they matched, in order)."""
    config = EmulatorConfig(**{
        "engine": engine, "step_base_ms": 5, "prefill_ms_per_token": 0.05, "decode_ms_per_seq": 0.3,
        "decode_ms_per_context_token": 0.001, "cache_capacity_tokens": 400, **overrides,
    })  # fmt: skip
    sends = _shared_prefix_requests(n, every_s, 7, (20, 120), Timeouts(first_token_s=0.8, total_s=4.0), patient)
    stepped, by_step, recency_stepped, _ = _queued_and_stepped(config, sends, 1)
    stretched, by_stretch, recency_stretched, held = _queued_and_stepped(config, sends, 64)
    fields = ("status", "error", "ttft_ns", "e2e_ns", "chunk_ns", "cached_tokens", "completion_tokens")
    assert [[getattr(r, f) for f in fields] for r in stretched] == [[getattr(r, f) for f in fields] for r in stepped]
    assert [r.status for r in stepped].count(Status.TIMEOUT) >= 3  # the queue's first ones among them
    assert by_stretch.stats.steps == by_step.stats.steps and by_stretch.stats.step_tokens == by_step.stats.step_tokens
    assert by_stretch.stats.preemptions == by_step.stats.preemptions
    assert by_stretch.stats.step_model_s == pytest.approx(by_step.stats.step_model_s, rel=1e-12)
    assert by_stretch.cache.evicted_tokens == by_step.cache.evicted_tokens > 0
    assert _recency(by_stretch.cache) == _recency(by_step.cache)
    # at the end of every step the stretches ran, the cache's order of use is the one stepping made
    assert recency_stretched.keys() < recency_stepped.keys()
    assert all(recency_stretched[at] == recency_stepped[at] for at in recency_stretched)
    assert len(held) >= 5 and len(recency_stretched) < len(recency_stepped) * 0.8  # stretches with a queue ran
    if case.startswith("max running"):
        assert all(h.queue.head is None for h in held)
    else:
        assert all(h.queue.head is not None for h in held)
    if case.startswith("KV held"):  # a first request went and the next did not fit either
        assert any(h.firsts for h in held)
    if case.startswith("LPM"):  # requests went until the engine would order the queue again
        assert any(h.spare is not None and h.spare < 0 for h in held)


# --- the CLI ---------------------------------------------------------------------------------------


def _simulate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SWARM, "simulate", "--output", str(tmp_path / "runs"), "--json", "--no-progress", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _report(run_dir: str) -> dict[str, Any]:
    done = subprocess.run([*SWARM, "report", run_dir, "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


#: ``swarm simulate`` whose twins tokenise every prompt's text (``prompt_ids`` never read)
_TWINS_READ_TEXT = """
import sys
import swarm.sim.twin_client as twin
plain = twin.TwinClient.__init__
def reads_text(self, *args, **kwargs):
    plain(self, *args, **kwargs)
    self.reads_token_ids = False
twin.TwinClient.__init__ = reads_text
from swarm.cli import main
sys.argv = ["swarm", *sys.argv[1:]]
main()
"""


def test_the_ids_an_agent_gives_its_twin_are_its_prompts_words(tmp_path: Path) -> None:
    """The token ids an agent hands a twin (``prompt_ids``, in place of its text) are the ids of
    its messages' words: the emulated showdown (tree of thought and mid-life Claude Code
    sessions, whose long texts know their ids) simulated with the twins reading the ids and
    with them tokenising the text records the same prompts, hits and token times."""
    from swarm.emulator.tokens import tokenize_parts

    request = _request(30, text="w x")
    given = EngineRequest(messages=request.messages, max_tokens=4, prompt_ids=tokenize_parts(["q"] * 30))
    fleet = TwinFleet(EmulatorConfig())
    assert fleet.prompt_of(given) is given.prompt_ids  # read, not tokenised again
    assert fleet.prompt_of(request) == tokenize_parts([m.content for m in request.messages])
    args = ["simulate", "--agents", "12", "--duration", "20", "--json", "--no-progress"]
    runs = {}
    for name, head in (("ids", SWARM), ("text", [sys.executable, "-c", _TWINS_READ_TEXT])):
        done = subprocess.run([*head, *args, "--output", str(tmp_path / name)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[name] = json.loads(done.stdout)["run_dir"]
    import pyarrow.parquet as pq

    columns = ["request_id", "status", "prompt_tokens", "cached_tokens", "chunk_ns"]
    ids, text = (sorted(pq.read_table(Path(runs[n]) / "requests", columns=columns).to_pylist(), key=str) for n in ("ids", "text"))
    assert len(ids) > 50 and ids == text


#: ``swarm simulate`` that notes what its cache-aware router's tree holds at the end (into
#: the file named by ``SWARM_TREE_NOTE``), its routing given each prompt's corpus runs, or
#: not (``SWARM_NO_RUNS``)
_TREE_NOTED = """
import atexit, json, os, sys
import swarm.sim.router_tree as rt
import swarm.sim.twin_client as twin
from swarm.workload.edges import referenced
trees = []
plain = rt.TenantTree.__init__
def noted(self, *args, **kwargs):
    plain(self, *args, **kwargs)
    trees.append(self)
rt.TenantTree.__init__ = noted
if os.environ.get("SWARM_NO_RUNS"):
    route = twin.TwinFleet.route
    twin.TwinFleet.route = lambda self, prompt, runs=(): route(self, prompt)
def note():
    keys, stack = [], [n for t in trees for n in t.root.children.values()]
    while stack:
        node = stack.pop()
        keys.append(node.key)
        stack.extend(node.children.values())
    with open(os.environ["SWARM_TREE_NOTE"], "w") as out:
        json.dump({"refused": sum(t.runs_refused for t in trees), "held": sum(len(k) for k in keys),
                   "referenced": sum(referenced(k) for k in keys)}, out)
atexit.register(note)
from swarm.cli import main
sys.argv = ["swarm", *sys.argv[1:]]
main()
"""


def test_a_simulated_routers_tree_holds_the_corpus_runs_it_is_given_and_routes_alike(tmp_path: Path) -> None:
    """The agent gives a twin fleet, with a prompt's ids, where they are its long texts' corpus
    runs (``EngineRequest.prompt_runs``): the cache-aware router's tree holds those by
    reference, every run given is the prompt's there, and the fleet routes and serves every
    request as it does when the tree is given the prompts alone (the emulated showdown: mid-life
    Claude Code sessions and trees of thought). A fleet whose router keeps no prompts, or one
    twin, is given none."""
    import pyarrow.parquet as pq

    fleets = [TwinFleet(EmulatorConfig(), n, policy) for n, policy in ((1, "cache_aware"), (3, "round_robin"))]
    assert [f.keeps_prompts for f in fleets] == [False, False]
    assert TwinFleet(EmulatorConfig(), 3, "cache_aware").keeps_prompts

    args = ["simulate", "--agents", "16", "--duration", "20", "--fleet", "3", "--routing", "cache_aware"]
    rows, notes = {}, {}
    for name in ("runs", "whole"):
        env = {**os.environ, "SWARM_TREE_NOTE": str(tmp_path / f"{name}.json")}
        if name == "whole":
            env["SWARM_NO_RUNS"] = "1"
        command = [sys.executable, "-c", _TREE_NOTED, *args, "--json", "--no-progress"]
        done = subprocess.run(
            [*command, "--output", str(tmp_path / name)], capture_output=True, text=True, timeout=300, env=env
        )
        assert done.returncode == 0, done.stderr[-2000:]
        run_dir = Path(json.loads(done.stdout)["run_dir"])
        columns = ["request_id", "status", "replica", "cached_tokens", "chunk_ns"]
        rows[name] = sorted(pq.read_table(run_dir / "requests", columns=columns).to_pylist(), key=str)
        notes[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert len(rows["runs"]) > 50 and rows["runs"] == rows["whole"]
    assert len({r["replica"] for r in rows["runs"]}) == 6  # both twins' fleets, every replica
    runs, whole = notes["runs"], notes["whole"]
    assert runs["held"] == whole["held"] and whole["referenced"] == 0
    assert runs["refused"] == 0 and runs["referenced"] > runs["held"] / 2


def test_a_spec_with_a_url_or_a_bad_emulator_flag_is_refused_naming_it(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("targets:\n  - {name: real, url: 'http://127.0.0.1:9'}\n")
    done = _simulate(tmp_path, "--spec", str(spec))
    assert done.returncode == 2 and "cannot simulate a server at a URL" in done.stderr
    done = _simulate(tmp_path, "--emulator-arg=--no-such-flag")
    assert done.returncode == 2 and "--emulator-arg (the sglang twin): No such option: --no-such-flag" in done.stderr
    done = _simulate(tmp_path, "--emulator-arg=--replicas=3")
    assert done.returncode == 2 and "--fleet N" in done.stderr
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_a_simulated_fleet_shows_what_cache_aware_routing_keeps(tmp_path: Path) -> None:
    """Three sglang twins with room for a few sessions each, the same seeded swarm behind round
    robin and behind the cache-aware router: cache-aware keeps the higher hit and routes no
    prefix away, and the report attributes round robin's loss to routing; both runs say they are simulated, and compare
    (both simulated) names a leader."""
    write_spec_files(tmp_path)
    common = [
        "--engine", "sglang", "--fleet", "3", "--profile", str(tmp_path / "tiny_reasoner.yaml"),
        "--topology", str(tmp_path / "tot_2x2.yaml"), "--agents", "60", "--arrival", "poisson:20", "--seed", "3",
        "--emulator-arg=--kv-capacity-tokens=4000", "--emulator-arg=--cache-tokens=2400",
    ]  # fmt: skip
    runs = {}
    for policy in ("round_robin", "cache_aware"):
        done = _simulate(tmp_path, *common, "--routing", policy)
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout)
        assert out["simulation"][0]["simulated_s"] > 0
        runs[policy] = out["run_dir"]
    reports = {p: _report(d) for p, d in runs.items()}
    for report in reports.values():
        assert report["run"]["simulated"]["fleet"] == 3
        assert report["warnings"][0].startswith("simulated in virtual time")
    rr, ca = (reports[p]["targets"]["twin-sglang"]["fleet"] for p in ("round_robin", "cache_aware"))
    assert rr["attributed_by"] == "simulated" and len(rr["replicas"]) == 3
    # SGLang's router sends a prompt that matches little to the least loaded replica, the first
    # of equals: agents arriving fast enough to keep the three busy spread over them (0.887
    # against round robin's 0.850); at 6 a second one replica stayed idle, the other two caches
    # evicted, and the two policies tied (0.855 against 0.851)
    assert ca["hit"] > rr["hit"] + 0.02, (ca["hit"], rr["hit"])
    assert rr["miss_shares"]["routed_away"] > 0.2 and ca["miss_shares"]["routed_away"] == 0.0
    compared = subprocess.run(
        [*SWARM, "compare", runs["round_robin"], runs["cache_aware"], "--json"], capture_output=True, text=True, timeout=120
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr[-2000:]
    result = json.loads(compared.stdout)
    assert all(result["simulated"].values())
    hit_row = next(r for r in result["rows"] if r["dimension"] == "cache hit ratio")
    assert hit_row["leader"] is not None and hit_row["leader"].startswith(Path(runs["cache_aware"]).name)
    by_policy = dict(zip(("round_robin", "cache_aware"), result["routing"].values(), strict=True))
    share = routing_share(by_policy["cache_aware"], by_policy["round_robin"])
    assert share is not None and share > 0.5  # routing explains most of the hit gap


# --- one model, two clocks ------------------------------------------------------------------------

#: a slow step (60 ms, 0.5 ms a prefill token, 1 ms a sequence), so that what real time adds (the
#: client's and the server's own delays, a millisecond or two on a busy machine) stays a few
#: percent of every figure
SLOW_STEPS = ("--step-base-ms=60", "--prefill-ms-per-token=0.5", "--decode-ms-per-seq=1")
#: the figures held, and how close (a share of the real-time run's)
AGREEMENT = 0.05


def _figures(report: dict[str, Any]) -> dict[str, float]:
    (target,) = report["targets"].values()
    f = target["figures"]
    return {
        "TTFT p50": f["ttft_ms"]["p50"], "TTFT p99": f["ttft_ms"]["p99"], "E2E p50": f["e2e_ms"]["p50"],
        "output tok/s": f["throughput"]["output_tokens_per_s"], "hit": f["cache"]["hit_ratio"],
        "task completion p50": f["sessions"]["completion_ms"]["p50"],
    }  # fmt: skip


#: real-time runs tried for a reference the machine did not disturb
REFERENCE_TRIES = 3
#: a real-time run is a quiet reference when the emulator kept its steps within 2 % of its model
#: and the client sent and read within 10 ms of time at p99 (a sixth of a 60 ms step)
QUIET_OVERRUN = 1.02
QUIET_LAG_MS = 10.0
#: the bound for a reference the machine disturbed (lag past quiet): measured here, lags of 14,
#: 15 and 17 ms at p99 moved TTFT p50 by 6.9, 11.2 and 5.6 % (no steady slope to scale by)
LOUDEST = 0.15


def _disturbance(report: dict[str, Any]) -> tuple[float, float, str]:
    """How far a real-time run strayed from the twin's model because the machine was busy: the
    share of the emulator's steps over their modelled time, and the worse of the client's
    dispatch lag and its lag behind the kernel's receive stamps (p99, ms), as its report gives
    them; and those in words."""
    (target,) = report["targets"].values()
    overrun = ((target.get("server") or {}).get("emulator") or {}).get("step_overrun") or 1.0
    lag = target["figures"]["lag_ms"]["p99"] or 0.0
    read_lag = target["figures"]["client_lag"]["p99"] or 0.0
    words = f"step overrun {overrun:.3f}, dispatch lag p99 {lag:.1f} ms, read lag p99 {read_lag:.1f} ms"
    print(f"real-time run: {words}")
    return max(overrun - 1.0, 0.0), max(lag, read_lag), words


def _allowed_error(overrun: float, lag_ms: float) -> float:
    """The figures' agreement bound for a reference this disturbed: ``AGREEMENT`` when quiet,
    else ``LOUDEST``."""
    if overrun <= QUIET_OVERRUN - 1.0 and lag_ms <= QUIET_LAG_MS:
        return AGREEMENT
    return LOUDEST


def _held_errors(model: dict[str, float], measured: dict[str, float], allowed: float) -> dict[str, float]:
    """The model's error against a real run, ``(model - real) / real``, for each figure held at
    the bound ``allowed``: all of them for a quiet reference; a disturbed one's TTFT p99 is its
    few latest requests, which the machine's lag made late (with a CPU hog: 14 ms of lag, +14 %
    at p99 against +7 % at p50), so it is printed, not held."""
    errors = {k: (model[k] - measured[k]) / measured[k] for k in measured}
    print(f"errors: {errors}")
    return errors if allowed == AGREEMENT else {k: e for k, e in errors.items() if k != "TTFT p99"}


def test_the_same_twin_in_real_and_in_virtual_time_agrees(tmp_path: Path, emulator_process: Any) -> None:
    """The sglang twin served by ``swarm emulate`` and run against over HTTP in real time, and
    the same twin simulated: the same seeded swarm gives TTFT p50 and p99, E2E p50, output
    tokens/s, hit and task completion p50 within 5 % of each other (when the machine kept the
    real run's schedule; of up to 3 real runs, the first quiet one that agrees ends the tries,
    else the reference is the closest quiet one, or where none was quiet the closest of all,
    whose bound is 15 % and whose TTFT p99 is not held). ``swarm compare`` of the two says which
    is simulated and names no leader, unless told to (``--across-clocks``).

    The model runs first. A real run is tried again when it disagrees because 96 step-quantized
    TTFTs are clumpy: the median sits at a clump's edge (about 241 | 247-253 ms in both clocks),
    and a busy machine that moved a few of a real run's requests across a step's edge moved its
    median by 12 % once (219.5 ms against the model's 247, a run quiet by its lags). The price:
    a model that drifted 5-12 % passes if one of 3 real runs happens to land within 5 % of it."""
    write_spec_files(tmp_path)
    workload = [
        "--profile", str(tmp_path / "tiny_reasoner.yaml"), "--topology", str(tmp_path / "tot_2x2.yaml"),
        "--agents", "12", "--arrival", "constant:4", "--seed", "5", "--output", str(tmp_path / "runs"), "--json",
    ]  # fmt: skip
    simulated = subprocess.run(
        [*SWARM, "simulate", "--engine", "sglang", *(f"--emulator-arg={a}" for a in SLOW_STEPS), "--no-progress", *workload],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr[-3000:]
    model = _figures(_report(json.loads(simulated.stdout)["run_dir"]))
    tried: list[tuple[float, float, str, dict[str, float], str]] = []
    for _ in range(REFERENCE_TRIES):  # a fresh server each time: its cache starts empty
        emu: EmulatorProcess = emulator_process("--engine", "sglang", *SLOW_STEPS)
        real = subprocess.run(
            [*SWARM, "run", "--target", f"twin-sglang={emu.url}", "--engine", "sglang", "--executor", "inprocess",
             "--no-progress", *workload],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        emu.stop()
        assert real.returncode == 0, real.stderr[-3000:]
        real_dir = json.loads(real.stdout)["run_dir"]
        real_report = _report(real_dir)
        overrun, lag_ms, words = _disturbance(real_report)
        allowed = _allowed_error(overrun, lag_ms)
        measured = _figures(real_report)
        worst = max(abs(e) if e == e else math.inf for e in _held_errors(model, measured, allowed).values())  # NaN: worst
        print(f"real time: {measured}\nvirtual: {model}\nworst held error {worst:.1%}")
        tried.append((allowed, worst, real_dir, measured, words))
        if allowed == AGREEMENT and worst <= AGREEMENT:
            break
    allowed, _, real_dir, measured, words = min(tried, key=lambda t: (t[0], t[1]))
    runs = [real_dir, json.loads(simulated.stdout)["run_dir"]]
    assert measured["hit"] > 0.5 and measured["TTFT p50"] > 60  # the figures are the model's, not noise
    held = _held_errors(model, measured, allowed)
    assert all(abs(e) <= allowed for e in held.values()), (held, f"bound {allowed:.1%}: {words}")

    def compared(*extra: str) -> dict[str, Any]:
        done = subprocess.run([*SWARM, "compare", *runs, "--json", *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    withheld = compared()
    assert list(withheld["simulated"].values()) == [False, True]
    assert "no leader named" in withheld["warnings"][0]
    assert all(r["leader"] is None for r in withheld["rows"])
    named = compared("--across-clocks")
    assert any(r["leader"] is not None for r in named["rows"])


def test_a_simulated_sweep_climbs_the_twin_and_says_it_is_simulated(tmp_path: Path) -> None:
    """``swarm sweep --simulate``: every point a simulated run of the twin (its manifest says so),
    the sweep's report says it is simulated, and the twin's small cache shows its cliff."""
    write_spec_files(tmp_path)
    done = subprocess.run(
        [*SWARM, "sweep", "--simulate", "--engine", "sglang", "--ladder", "agents=2,8,32",
         "--profile", str(tmp_path / "tiny_reasoner.yaml"), "--topology", str(tmp_path / "tot_2x2.yaml"),
         "--arrival", "all_at_once", "--emulator-arg=--cache-tokens=1000", "--output", str(tmp_path / "sweep"),
         "--no-progress", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["sweep"]["simulated"]["twins"] == [{"engine": "sglang", "cache_capacity_tokens": 1000}]
    (twin,) = report["targets"].values()
    hits = [p["figures"]["hit_vs_ideal"] for p in twin["points"]]
    assert hits[0] > 0.95 and hits[-1] < 0.9, hits  # the cache keeps 2 sessions, not 32
    runs = sorted((tmp_path / "sweep" / "runs").glob("*/*/manifest.json"))
    assert len(runs) == 3 and all(json.loads(r.read_text())["simulated"]["clock"] == "virtual" for r in runs)


def test_a_simulated_sweep_over_replicas_names_the_fewest_meeting_the_slo(tmp_path: Path) -> None:
    """``--ladder replicas=1,2,4`` with ``--simulate``: each point the same swarm against a fleet
    of that many twins (its manifest says so), and the verdict the fewest replicas meeting the
    SLO (more replicas are more capacity). Without ``--simulate`` the knob is refused, and with
    ``--fleet`` beside it."""
    write_spec_files(tmp_path)
    workload = ["--profile", str(tmp_path / "tiny_reasoner.yaml"), "--topology", str(tmp_path / "tot_2x2.yaml"),
                "--agents", "24", "--arrival", "all_at_once", *(f"--emulator-arg={a}" for a in SLOW_STEPS)]  # fmt: skip
    done = subprocess.run(
        [*SWARM, "sweep", "--simulate", "--engine", "sglang", "--ladder", "replicas=1,2,4", *workload,
         "--slo", "ttft:1s", "--output", str(tmp_path / "sweep"), "--no-progress", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (twin,) = json.loads(done.stdout)["targets"].values()
    ttft = [p["figures"]["ttft_ms.p99"] for p in twin["points"]]
    assert ttft[0] > 1000 > ttft[-1], ttft  # one twin cannot, four can
    capacity = twin["capacity"]
    assert capacity["fewest"] and capacity["load"] in (2, 4) and capacity["limiting"] == "ttft_ms.p99 <= 1000", capacity
    fleets = [json.loads(r.read_text())["simulated"]["fleet"] for r in sorted((tmp_path / "sweep" / "runs").glob("*/*/manifest.json"))]
    assert sorted(fleets) == [1, 2, 4]
    sweep = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert sweep["definition"]["base"]["simulated"]["routing"] == "cache_aware"  # two policies, two sweeps
    shown = subprocess.run([*SWARM, "report", str(tmp_path / "sweep")], capture_output=True, text=True, timeout=120)
    assert "fewest replicas meeting the SLOs (ttft:1s)" in shown.stdout
    for extra, why in ((["--target", "x=http://127.0.0.1:9"], "replicas of a simulated fleet"),
                       (["--simulate", "--fleet", "2"], "drop --fleet")):  # fmt: skip
        refused = subprocess.run(
            [*SWARM, "sweep", "--ladder", "replicas=1,2", *extra, "--output", str(tmp_path / "no")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert refused.returncode == 2 and why in refused.stderr, refused.stderr[-2000:]


def test_what_a_simulation_cannot_model_is_refused(tmp_path: Path) -> None:
    done = _simulate(tmp_path, "--emulator-arg=--faults=error:0.1")
    assert done.returncode == 2 and "acts in the emulator's HTTP server" in done.stderr
    done = _simulate(tmp_path, "--engine", "sglang", "--engine", "sglang")
    assert done.returncode == 2 and "one twin per engine" in done.stderr
    done = subprocess.run(
        [*SWARM, "sweep", "--simulate", "--target", "x=http://127.0.0.1:9", "--output", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "cannot simulate a server at a URL" in done.stderr
    done = subprocess.run([*SWARM, "sweep", "--fleet", "3", "--output", str(tmp_path / "s")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--fleet apply with --simulate only" in done.stderr
    trace = str(MOONCAKE)
    done = subprocess.run(
        [*SWARM, "replay", trace, "--simulate", "--target", "x=http://127.0.0.1:9", "--output", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "cannot simulate a server at a URL" in done.stderr
    done = subprocess.run(
        [*SWARM, "replay", trace, "--routing", "round_robin", "--output", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "--routing apply with --simulate only" in done.stderr
    done = subprocess.run(
        [*SWARM, "replay", trace, "--simulate", "--workers", "3", "--output", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "--workers: how a real run sends" in done.stderr, done.stderr[-1000:]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "s").exists()


MOONCAKE = Path(__file__).parent / "data" / "mooncake_conversation_first300.jsonl"


def test_a_trace_replays_in_virtual_time_on_its_recorded_schedule(tmp_path: Path) -> None:
    """``swarm replay --simulate``: a public trace (Mooncake's first 300 requests, two minutes of
    arrivals) sent to the sglang twin in virtual time: every request scheduled at its recorded
    offset to the millisecond and sent then (no client lag), the rows and the manifest marked
    virtual, the report saying so, and the twin's cache reusing the trace's shared blocks."""
    done = subprocess.run(
        [*SWARM, "replay", str(MOONCAKE), "--simulate", "--engine", "sglang", "--no-progress", "--json",
         "--output", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    (account,) = result["simulation"]
    assert account["requests"] == 300 and account["simulated_s"] > 100  # the trace's last arrival: 2 min in
    run_dir = Path(result["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["simulated"]["clock"] == "virtual" and manifest["replay_of"]["format"] == "mooncake"
    import pyarrow.dataset as ds

    rows = ds.dataset(run_dir / "requests", format="parquet").to_table().to_pylist()
    recorded = sorted(json.loads(line)["timestamp"] for line in MOONCAKE.read_text().splitlines())
    start_ns = min(r["scheduled_ns"] for r in rows)
    assert sorted(round((r["scheduled_ns"] - start_ns) / 1e6) for r in rows) == [t - recorded[0] for t in recorded]
    assert all(r["sent_ns"] == r["scheduled_ns"] and r["clock"] == "virtual" for r in rows)
    assert sum(r["cached_tokens"] or 0 for r in rows) > 0  # the trace's hash ids share prefixes
    report = _report(str(run_dir))
    assert "simulated in virtual time" in report["warnings"][0]

    swept = subprocess.run(
        [*SWARM, "sweep", "--replay", str(MOONCAKE), "--limit", "60", "--simulate", "--engine", "sglang",
         "--ladder", "speed=1,4", "--output", str(tmp_path / "sweep"), "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert swept.returncode == 0, swept.stderr[-2000:]
    (twin,) = json.loads(swept.stdout)["targets"].values()
    assert [p["load"] for p in twin["points"]] == [1.0, 4.0]
    runs = sorted((tmp_path / "sweep" / "runs").glob("*/*/manifest.json"))
    assert len(runs) == 2 and all(json.loads(r.read_text())["simulated"]["clock"] == "virtual" for r in runs)
