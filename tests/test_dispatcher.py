"""The Dispatcher and StopConditions on a virtual clock: releases, the in-flight cap, stops."""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
from collections.abc import Iterator
from typing import Any

import pytest

from swarm.record import RequestIdentity, RequestRecord, Status
from swarm.request import ChatMessage, EngineRequest
from swarm.runtime.breaker import CircuitBreaker
from swarm.runtime.dispatcher import DISPATCH_SPIN_NS, Dispatcher, Outgoing, Scheduled
from swarm.runtime.stop import DURATION_REACHED, INTERRUPTED, REQUEST_LIMIT_REACHED, StopConditions
from swarm.trace.sink import RecordBuffer, TraceWriteError

MS = 1_000_000


class VirtualClock:
    """Virtual time: a sleep waits until the clock reaches its end; the clock jumps to the next
    wake-up whenever every task is waiting (a sleep of 0 moves it 1 us, as a turn of the loop)."""

    def __init__(self) -> None:
        self.now_ns = 1_000 * MS
        self._timers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = 0
        self._ticker: asyncio.Task[None] | None = None
        self._turns = 0  # sleeps of 0: a task is still busy, time must not jump

    def clock_ns(self) -> int:
        return self.now_ns

    def monotonic(self) -> float:
        return self.now_ns / 1e9

    def _advance(self, to_ns: int) -> None:
        self.now_ns = max(self.now_ns, to_ns)
        while self._timers and self._timers[0][0] <= self.now_ns:
            _, _, fut = heapq.heappop(self._timers)
            if not fut.done():
                fut.set_result(None)

    async def sleep(self, seconds: float) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick())
        if seconds <= 0:
            self._turns += 1
            self._advance(self.now_ns + 1_000)
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()
        self._seq += 1
        heapq.heappush(self._timers, (self.now_ns + int(seconds * 1e9), self._seq, fut))
        await fut

    async def _tick(self) -> None:
        while True:
            turns = self._turns
            for _ in range(20):  # let every runnable task run first
                await asyncio.sleep(0)
            if self._turns != turns:
                continue
            if not self._timers:
                if not asyncio.all_tasks() - {asyncio.current_task()}:
                    return
                continue
            self._advance(self._timers[0][0])


class FakeClient:
    """Answers each request after ``answer_ms`` of virtual time, with ``status``."""

    target = "t"
    profile: Any = None
    reads_token_ids = False
    reads_prompt_runs = False

    def __init__(self, clock: VirtualClock, answer_ms: float = 0.0, status: Status = Status.OK) -> None:
        self.clock = clock
        self.answer_ms = answer_ms
        self.status = status
        self.sent: list[tuple[str, int]] = []
        self.payloads: list[bytes | None] = []
        self.in_flight = 0
        self.most_in_flight = 0

    def encode(self, request: EngineRequest) -> bytes:
        return request.identity.request_id.encode()

    async def send(self, request: EngineRequest, payload: bytes | None = None) -> RequestRecord:
        self.sent.append((request.identity.request_id, self.clock.now_ns))
        self.payloads.append(payload)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.answer_ms:
                await self.clock.sleep(self.answer_ms / 1e3)
        except asyncio.CancelledError:
            self.in_flight -= 1
            return self._record(request, Status.CANCELLED)
        self.in_flight -= 1
        return self._record(request, self.status)

    def _record(self, request: EngineRequest, status: Status) -> RequestRecord:
        return RequestRecord(
            identity=request.identity,
            dialect="openai-chat",
            model="m",
            stream=True,
            scheduled_ns=request.scheduled_ns or 0,
            sent_ns=0,
            queue_ns=0,
            ttft_ns=None,
            e2e_ns=None,
            chunk_ns=(),
            status=status,
            http_status=503 if status is Status.HTTP_ERROR else None,
            slot_wait_ns=request.slot_wait_ns,
            ideal_cached_tokens_est=request.ideal_cached_tokens_est,
        )


def request(name: str, tokens: list[object] | None = None) -> Outgoing:
    req = EngineRequest(
        messages=(ChatMessage("user", name),), max_tokens=1, identity=RequestIdentity(request_id=name)
    )
    return Outgoing(req, tokens)


def dispatcher(
    clock: VirtualClock, client: FakeClient, stop: StopConditions | None = None, **kw: Any
) -> tuple[Dispatcher, RecordBuffer]:
    sink = RecordBuffer()
    d = Dispatcher(
        client,  # type: ignore[arg-type]
        sink,
        stop or StopConditions(clock=clock.monotonic),
        clock_ns=clock.clock_ns,
        sleep=clock.sleep,
        **kw,
    )
    return d, sink


def sends(d: Dispatcher, names_due_ms: list[tuple[str, float]]) -> list[Scheduled]:
    def runner(name: str) -> Any:
        async def run(out: Outgoing | None, due: int) -> None:
            await d.send(request(name))

        return run

    return [Scheduled(int(due * MS), runner(name)) for name, due in names_due_ms]


def test_entries_are_released_at_their_due_time_all_due_at_once_together() -> None:
    clock = VirtualClock()
    client = FakeClient(clock)
    d, sink = dispatcher(clock, client)
    schedule = sends(d, [("a", 0), ("b", 5), ("c", 5), ("d", 5), ("e", 120)])
    asyncio.run(d.run(schedule))
    sent = dict(client.sent)
    start = d.start_perf_ns
    assert [n for n, _ in client.sent] == ["a", "b", "c", "d", "e"]  # in due order
    assert sent["b"] == sent["c"] == sent["d"]  # one release for everything due at one instant
    for name, due_ms in (("a", 0), ("b", 5), ("e", 120)):
        assert 0 <= sent[name] - (start + due_ms * MS) < DISPATCH_SPIN_NS  # never early, on time
    assert [r.identity.request_id for r in sink.records] == ["a", "b", "c", "d", "e"]
    assert d.stats.requests == 5 and d.stats.finished


def test_prepared_entries_take_their_ideal_in_release_order() -> None:
    clock = VirtualClock()
    client = FakeClient(clock)
    d, sink = dispatcher(clock, client)
    prompts = {"a": ["s", "x"], "b": ["s", "x", "y"], "c": ["s", "z"]}

    def entry(name: str, due_ms: float) -> Scheduled:
        async def run(out: Outgoing | None, due: int) -> None:
            assert out is not None and out.tokens is None  # built ahead, ideal already taken
            await d.send(out)

        return Scheduled(int(due_ms * MS), run, prepare=lambda due: request(name, prompts[name]))

    asyncio.run(d.run([entry("a", 0), entry("b", 1500), entry("c", 3000)]))
    ideal = {r.identity.request_id: r.ideal_cached_tokens_est for r in sink.records}
    assert ideal == {"a": 0, "b": 2, "c": 1}


def test_a_stepped_preparation_lets_the_loop_turn_between_its_steps() -> None:
    """A mid-life session's history is built ahead a step at a time: whatever else is due
    (another agent's send, a read) runs between two steps, and the session starts once all
    of them are done."""
    clock = VirtualClock()
    client = FakeClient(clock)
    d, sink = dispatcher(clock, client)
    order: list[str] = []

    async def other(i: int) -> None:
        order.append(f"other{i}")

    def steps() -> Iterator[None]:
        for i in range(3):
            asyncio.get_running_loop().create_task(other(i))  # ready at the loop's next turn
            order.append(f"step{i}")
            yield

    async def start(out: Outgoing | None, due: int) -> None:
        order.append("start")
        await d.send(request("m"))

    asyncio.run(d.run([Scheduled(2_000 * MS, start, prepare_steps=steps, prepares_request=False)]))
    assert order == ["step0", "other0", "step1", "other1", "step2", "other2", "start"]
    assert [r.identity.request_id for r in sink.records] == ["m"] and d.prepared_late == 0


class LateTimers(VirtualClock):
    """A loop whose timers wake ``late_ns`` after they are due, as asyncio's do (it polls in
    whole milliseconds, rounded up)."""

    def __init__(self, late_ns: int) -> None:
        super().__init__()
        self.late_ns = late_ns

    async def sleep(self, seconds: float) -> None:
        await super().sleep(seconds + self.late_ns / 1e9 if seconds > 0 else 0)


@pytest.mark.parametrize("precise", [True, False])
def test_a_send_instant_is_met_though_timers_wake_late(precise: bool) -> None:
    clock = LateTimers(late_ns=900_000)
    d, _ = dispatcher(clock, FakeClient(clock))

    async def main() -> int:
        due = clock.clock_ns() + 20 * MS
        await d.sleep_until(due, precise=precise)
        return clock.clock_ns() - due

    late_ns = asyncio.run(main())
    if precise:  # woken early, the loop turned (1 us a turn here) until the instant
        assert 0 <= late_ns <= 1_000
    else:
        assert late_ns == 900_000


def slow_build(clock: VirtualClock, built_at: list[int], build_ms: float, tokens: list[object]) -> Any:
    def build(attempt: int, due: int, slot_wait_ns: int, *, ahead: bool = False) -> Outgoing:
        built_at.append(clock.clock_ns())
        clock.now_ns += int(build_ms * MS)  # building takes this long, on the loop
        out = request(f"n{attempt}", tokens if ahead else None)
        out.request = dataclasses.replace(out.request, prompt_tokens_est=1_000)
        return out

    return build


def test_a_call_is_built_ahead_of_its_instant_and_sent_on_it() -> None:
    """A call whose prompt takes 6 ms to build is built (and its body encoded) before its
    instant and sent on it, its ideal reuse taken at the send; the Outgoing holds neither
    tokens nor body once sent."""
    clock = LateTimers(late_ns=900_000)
    client = FakeClient(clock)
    d, sink = dispatcher(clock, client)
    built_at: list[int] = []
    build = slow_build(clock, built_at, 6, ["s", "x", "y"])
    d.index.observe(["s", "x"])

    async def main() -> int:
        due = clock.clock_ns() + 100 * MS
        record, attempts = await d.send_on_time(build, due, expected_tokens=10_000)
        assert record is not None and attempts == 1
        return due

    due = asyncio.run(main())
    (built,) = built_at
    assert built <= due - 6 * MS
    ((_, sent_ns),) = client.sent
    assert 0 <= sent_ns - due <= 1_000  # no build, no late timer in the lag
    assert client.payloads == [b"n0"]  # encoded ahead
    assert sink.records[0].ideal_cached_tokens_est == 2
    assert d.build_cost.ns_per_token == 6_000  # learned: 6 ms for 1,000 tokens


def test_on_a_virtual_clock_a_call_is_built_at_its_instant() -> None:
    clock = VirtualClock()
    client = FakeClient(clock)
    d, _ = dispatcher(clock, client, precise_release=False)
    built_at: list[int] = []

    async def main() -> int:
        due = clock.clock_ns() + 100 * MS
        await d.send_on_time(slow_build(clock, built_at, 6, ["s"]), due, expected_tokens=10_000)
        return due

    due = asyncio.run(main())
    assert built_at == [due] and client.payloads == [None]


def test_with_every_slot_taken_a_call_is_built_once_a_slot_is_free() -> None:
    """A prompt built ahead would be held while it waits for a slot under the in-flight cap."""
    clock = VirtualClock()
    client = FakeClient(clock, answer_ms=50)
    d, sink = dispatcher(clock, client, max_in_flight=1)
    built_at: list[int] = []

    async def main() -> None:
        start = clock.clock_ns()
        busy = asyncio.get_running_loop().create_task(d.send(request("busy")))
        await d.send_on_time(slow_build(clock, built_at, 1, ["s"]), start + 20 * MS)
        await busy

    asyncio.run(main())
    (built,) = built_at
    busy_end = client.sent[0][1] + 50 * MS
    assert built >= busy_end and client.payloads[-1] is None
    assert sink.records[-1].slot_wait_ns > 0


def test_in_flight_cap_holds_and_records_the_wait_for_a_slot() -> None:
    clock = VirtualClock()
    client = FakeClient(clock, answer_ms=100)
    d, sink = dispatcher(clock, client, max_in_flight=2)
    asyncio.run(d.run(sends(d, [(f"r{i}", 0) for i in range(5)])))
    assert client.most_in_flight == 2
    waits = sorted(r.slot_wait_ns for r in sink.records)
    assert waits[:2] == [0, 0] and waits[2] >= 100 * MS and waits[4] >= 200 * MS


def test_a_reached_duration_ends_releases_and_sends_but_not_what_is_in_flight() -> None:
    clock = VirtualClock()
    client = FakeClient(clock, answer_ms=50)
    stop = StopConditions(deadline_s=clock.monotonic() + 0.1, clock=clock.monotonic)
    d, sink = dispatcher(clock, client, stop)
    asyncio.run(d.run(sends(d, [("a", 0), ("b", 90), ("c", 200), ("d", 300)])))
    assert [r.identity.request_id for r in sink.records] == ["a", "b"]
    assert all(r.status is Status.OK for r in sink.records)  # b finished after the deadline
    assert stop.reason == DURATION_REACHED and not stop.interrupted and not stop.cancelling


def test_an_interrupt_cancels_what_is_in_flight_and_records_it() -> None:
    clock = VirtualClock()
    client = FakeClient(clock, answer_ms=1_000)
    stop = StopConditions(clock=clock.monotonic)
    d, sink = dispatcher(clock, client, stop)

    def entries() -> list[Scheduled]:
        out = sends(d, [("a", 0), ("b", 0), ("late", 5_000)])

        async def interrupt(_out: Outgoing | None, _due: int) -> None:
            stop.interrupt()

        return [*out[:2], Scheduled(10 * MS, interrupt), out[2]]

    asyncio.run(d.run(entries()))
    assert sorted((r.identity.request_id, r.status) for r in sink.records) == [
        ("a", Status.CANCELLED),
        ("b", Status.CANCELLED),
    ]
    assert stop.reason == INTERRUPTED and stop.interrupted and stop.halt_reason is None


def test_the_circuit_breaker_halts_with_its_reason() -> None:
    clock = VirtualClock()
    client = FakeClient(clock, answer_ms=10, status=Status.HTTP_ERROR)
    stop = StopConditions(breaker=CircuitBreaker(0.5, 4), clock=clock.monotonic)
    d, sink = dispatcher(clock, client, stop)
    asyncio.run(d.run(sends(d, [(f"r{i}", 20 * i) for i in range(20)])))
    assert len(sink.records) == 4  # the fourth failure in a window of four trips it
    assert stop.halt_reason is not None and stop.halt_reason.startswith("circuit breaker")
    assert stop.reason == stop.halt_reason and not stop.interrupted


def test_an_entry_that_cannot_start_halts_the_run_with_the_cause() -> None:
    """A session's start is made at its release (no coroutine around it): one that raises (a
    bug of ours) halts the run naming the cause, and nothing after it is sent."""
    clock = VirtualClock()
    client = FakeClient(clock, answer_ms=10)
    stop = StopConditions(clock=clock.monotonic)
    d, sink = dispatcher(clock, client, stop)

    def broken(_out: Outgoing | None, _due: int) -> Any:
        raise KeyError("no such agent")

    out = sends(d, [("a", 0), ("late", 50)])
    asyncio.run(d.run([out[0], Scheduled(10 * MS, broken), out[1]]))
    assert stop.halt_reason is not None and "no such agent" in stop.halt_reason
    assert [r.identity.request_id for r in sink.records] == ["a"]


class BrokenSink(RecordBuffer):
    def write(self, record: RequestRecord) -> None:
        self.rows_lost += 1
        self.failure = "disk full"
        raise TraceWriteError("disk full")


def test_a_trace_that_cannot_be_written_halts_the_run() -> None:
    clock = VirtualClock()
    client = FakeClient(clock, answer_ms=10)
    stop = StopConditions(clock=clock.monotonic)
    d = Dispatcher(client, BrokenSink(), stop, clock_ns=clock.clock_ns, sleep=clock.sleep)  # type: ignore[arg-type]
    asyncio.run(d.run(sends(d, [(f"r{i}", 100 * i) for i in range(5)])))
    assert stop.halt_reason == "disk full" and len(client.sent) == 1


def test_request_limit_and_first_reason_wins() -> None:
    stop = StopConditions(max_requests=2)
    assert stop.admit() and stop.admit() and not stop.admit()
    assert stop.reason == REQUEST_LIMIT_REACHED and not stop.cancelling
    stop.halt("later")
    assert stop.reason == REQUEST_LIMIT_REACHED and stop.halt_reason == "later" and stop.cancelling


def test_retries_resend_a_retryable_failure_with_new_ids() -> None:
    clock = VirtualClock()
    client = FakeClient(clock, answer_ms=1, status=Status.HTTP_ERROR)
    d, _ = dispatcher(clock, client)

    def build(attempt: int, due: int, slot_wait_ns: int) -> Outgoing:
        return request(f"x~retry{attempt}" if attempt else "x")

    async def run() -> tuple[RequestRecord | None, int]:
        return await d.send_retrying(build, clock.clock_ns(), retries=2, backoff_s=0.5)

    async def main() -> tuple[RequestRecord | None, int]:
        result: list[tuple[RequestRecord | None, int]] = []

        async def entry(_out: Outgoing | None, _due: int) -> None:
            result.append(await run())

        await d.run([Scheduled(0, entry)])
        return result[0]

    # a 503 is retryable: three attempts, backoff 0.5 s then 1 s
    record, attempts = asyncio.run(main())
    assert attempts == 3 and record is not None
    assert [n for n, _ in client.sent] == ["x", "x~retry1", "x~retry2"]
    gaps = [b - a for (_, a), (_, b) in zip(client.sent, client.sent[1:], strict=False)]
    assert gaps[0] >= 500 * MS and gaps[1] >= 1_000 * MS


@pytest.mark.parametrize("stopped_before", [True, False])
def test_a_stopped_run_sends_nothing_more(stopped_before: bool) -> None:
    clock = VirtualClock()
    client = FakeClient(clock)
    stop = StopConditions(clock=clock.monotonic)
    if stopped_before:
        stop.interrupt()
    d, _ = dispatcher(clock, client, stop)
    asyncio.run(d.run(sends(d, [("a", 0), ("b", 10)])))
    assert (len(client.sent) == 0) is stopped_before


def test_a_reached_duration_ends_the_run_without_waiting_for_the_next_release() -> None:
    clock = VirtualClock()
    client = FakeClient(clock, answer_ms=5)
    stop = StopConditions(deadline_s=clock.monotonic() + 0.1, clock=clock.monotonic)
    d, sink = dispatcher(clock, client, stop)
    asyncio.run(d.run(sends(d, [("a", 0), ("later", 3_600_000)])))
    assert [r.identity.request_id for r in sink.records] == ["a"]
    assert clock.now_ns - d.start_perf_ns < 200 * MS  # not an hour


@pytest.mark.parametrize("limit", ["duration", "requests"])
def test_a_soft_stop_wakes_sources_that_wait_so_a_long_pause_does_not_hold_the_run(limit: str) -> None:
    """An agent that pauses for an hour (a tool time) between its calls: the run ends at its
    duration (or its request limit), not an hour later; the call after the pause is not sent,
    while one in flight at the stop still finishes."""
    clock = VirtualClock()
    client = FakeClient(clock, answer_ms=50)
    if limit == "duration":
        stop = StopConditions(deadline_s=clock.monotonic() + 0.1, clock=clock.monotonic)
    else:
        stop = StopConditions(max_requests=2, clock=clock.monotonic)
    d, sink = dispatcher(clock, client, stop)
    resumed = []

    def agent(name: str, pause_s: float) -> Any:
        async def run(out: Outgoing | None, due: int) -> None:
            await d.send(request(f"{name}-1"))
            await d.sleep_until(d.clock_ns() + int(pause_s * 1e9))
            resumed.append(name)
            await d.send(request(f"{name}-2"))

        return run

    # with a request limit of 2 both pause for an hour once they have sent: the limit itself wakes them
    busy_pause_s = 0.08 if limit == "duration" else 3600.0
    schedule = [Scheduled(0, agent("slow", 3600.0)), Scheduled(40 * MS, agent("busy", busy_pause_s))]
    asyncio.run(d.run(schedule))
    assert clock.now_ns - d.start_perf_ns < 1_000 * MS  # not an hour
    assert sorted(resumed) == ["busy", "slow"]  # both woke, and sent nothing more
    assert sorted(r.identity.request_id for r in sink.records) == ["busy-1", "slow-1"]
    assert all(r.status is Status.OK for r in sink.records)


@pytest.mark.parametrize("where", ["session", "preparation"])
def test_a_bug_in_a_source_halts_the_run_with_its_reason(where: str) -> None:
    clock = VirtualClock()
    client = FakeClient(clock, answer_ms=1_000)
    stop = StopConditions(clock=clock.monotonic)
    d, sink = dispatcher(clock, client, stop)

    def broken(_due: int) -> Outgoing:
        raise ValueError("cannot build")

    async def run_broken(_out: Outgoing | None, _due: int) -> None:
        raise ValueError("cannot build")

    async def send_it(out: Outgoing | None, _due: int) -> None:
        await d.send(out or request("x"))

    schedule = [*sends(d, [("a", 0)])]
    if where == "session":
        schedule.append(Scheduled(10 * MS, run_broken))
    else:
        schedule.append(Scheduled(1_500 * MS, send_it, prepare=broken))
    asyncio.run(d.run(schedule))
    assert stop.halt_reason is not None and "cannot build" in stop.halt_reason
    assert [(r.identity.request_id, r.status) for r in sink.records] == [("a", Status.CANCELLED)]
