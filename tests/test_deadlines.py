"""The watchdog's deadlines: due ones fire (never before they are due, at most a grain after),
cancelled ones never, and a bucket whose deadlines are all cancelled leaves no loop timer."""

from __future__ import annotations

import asyncio

from swarm.clients import deadlines
from swarm.clients.deadlines import GRAIN_S, Deadlines


def test_deadlines_fire_when_due_and_not_when_cancelled() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        d = Deadlines(loop)
        fired: list[tuple[str, float]] = []
        start = loop.time()
        d.call_later(0.03, lambda name: fired.append((name, loop.time() - start)), "a")
        gone = d.call_later(0.03, lambda name: fired.append((name, loop.time() - start)), "b")
        d.call_later(0.06, lambda name: fired.append((name, loop.time() - start)), "c")
        gone.cancel()
        gone.cancel()  # twice is harmless
        assert d.pending() == 2
        await asyncio.sleep(0.2)
        assert [name for name, _ in fired] == ["a", "c"]
        assert fired[0][1] >= 0.03 - loop._clock_resolution  # type: ignore[attr-defined]
        assert fired[1][1] >= 0.06 - loop._clock_resolution  # type: ignore[attr-defined]
        assert d.pending() == 0

    asyncio.run(main())


def test_a_cancelled_bucket_leaves_no_loop_timer() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        d = Deadlines(loop)
        timers_before = len(loop._scheduled)  # type: ignore[attr-defined]
        # the loop's clock held still while they are armed: on a busy machine the 400 calls
        # took long enough to straddle one more grain (102 timers, not 101)
        now = loop.time()
        loop.time = lambda: now  # type: ignore[method-assign]
        try:
            armed = [d.call_later(100.0 + i * GRAIN_S / 4, lambda: None) for i in range(400)]
        finally:
            del loop.time
        # 400 deadlines over 100 grains: about a hundred loop timers, not 400
        assert len(loop._scheduled) - timers_before <= 101  # type: ignore[attr-defined]
        for one in armed:
            one.cancel()
        assert d.pending() == 0
        live = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        assert len(live) == timers_before

    asyncio.run(main())


def test_one_failing_callback_does_not_skip_the_others() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        errors: list[object] = []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx["exception"]))
        d = deadlines.for_loop(loop)
        assert deadlines.for_loop(loop) is d
        fired: list[str] = []

        def boom() -> None:
            raise RuntimeError("boom")

        d.call_later(0.0, boom)
        d.call_later(0.0, fired.append, "after")
        await asyncio.sleep(0.05)
        assert len(errors) == 1
        return fired

    assert asyncio.run(main()) == ["after"]


def test_a_deadline_cancelled_by_another_of_its_bucket_does_not_fire() -> None:
    async def main() -> list[str]:
        d = Deadlines(asyncio.get_running_loop())
        fired: list[str] = []
        later: list[deadlines.Deadline] = []

        def fire(name: str) -> None:
            fired.append(name)
            for one in later:
                one.cancel()

        loop = asyncio.get_running_loop()
        a = d.call_later(0.02, fire, "a")
        # aim at the middle of a's grain: two equal delays straddle a grain's edge now and then
        b = d.call_later(a._key * deadlines.GRAIN_S - loop.time() - deadlines.GRAIN_S / 2, fire, "b")
        assert a._key == b._key
        later.extend([a, b])  # whichever runs first (a set's order) cancels the other
        await asyncio.sleep(0.1)
        return fired

    assert len(asyncio.run(main())) == 1


def test_a_loops_deadlines_go_with_the_loop() -> None:
    import gc

    async def main() -> None:
        deadlines.for_loop(asyncio.get_running_loop()).call_later(0.0, lambda: None)
        await asyncio.sleep(0.05)

    before = len(deadlines._PER_LOOP)
    for _ in range(3):
        asyncio.run(main())
    gc.collect()
    assert len(deadlines._PER_LOOP) <= before
