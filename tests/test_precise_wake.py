"""PreciseWake: tasks woken at their instants by a kernel timer, never before, in order, with
no spinning of the loop."""

from __future__ import annotations

import asyncio
import random
import sys
import time

import pytest

from swarm.runtime.precise_wake import PreciseWake

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


def test_sleepers_wake_at_or_after_their_instants_in_order_and_without_spinning() -> None:
    async def main() -> tuple[list[int], list[tuple[int, int]], int, int]:
        loop = asyncio.get_running_loop()
        wake = PreciseWake.create(loop)
        assert wake is not None
        now = time.perf_counter_ns()
        instants = [now + ms * 1_000_000 for ms in random.Random(1).sample(range(5, 60), 12)]
        woke: list[tuple[int, int]] = []
        order: list[int] = []

        async def sleeper(at: int) -> None:
            await wake.until(at)
            woke.append((at, time.perf_counter_ns()))
            order.append(at)

        iterations = 0
        original = loop._run_once  # type: ignore[attr-defined]

        def counted() -> None:
            nonlocal iterations
            iterations += 1
            original()

        loop._run_once = counted  # type: ignore[attr-defined]
        try:
            await asyncio.gather(*(sleeper(at) for at in instants))
        finally:
            loop._run_once = original  # type: ignore[attr-defined]
            wake.close()
        return order, woke, iterations, wake.wakes

    order, woke, iterations, wakes = asyncio.run(main())
    assert order == sorted(order)
    assert all(now >= at for at, now in woke)
    assert wakes <= 12 + 2  # one wake per instant (a few more if two fell close)
    assert iterations < 100  # a spin turns the loop thousands of times in 60 ms


def test_a_cancelled_sleeper_does_not_hold_the_others_and_close_lets_the_rest_go() -> None:
    async def main() -> None:
        wake = PreciseWake.create(asyncio.get_running_loop())
        assert wake is not None
        now = time.perf_counter_ns()
        first = asyncio.ensure_future(wake.until(now + 5_000_000))
        second = asyncio.ensure_future(wake.until(now + 15_000_000))
        late = asyncio.ensure_future(wake.until(now + 60_000_000_000))
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.wait_for(second, 5)
        assert time.perf_counter_ns() >= now + 15_000_000
        await wake.until(now)  # an instant passed: at once
        wake.close()
        await asyncio.wait_for(late, 5)  # let go at the close, not cancelled

    asyncio.run(main())


def test_the_dispatcher_reaches_a_send_instant_by_the_timer(tmp_path: object) -> None:
    """On the real clock ``sleep_until(precise=True)`` is woken by the timer, not a spin."""
    from swarm.runtime.dispatcher import Dispatcher
    from swarm.runtime.stop import StopConditions

    async def main() -> None:
        d = Dispatcher(client=None, sink=None, stop=StopConditions())  # type: ignore[arg-type]
        d._wake = PreciseWake.create(asyncio.get_running_loop())
        assert d._wake is not None
        at = time.perf_counter_ns() + 20_000_000
        await d.sleep_until(at, precise=True)
        assert time.perf_counter_ns() >= at and d._wake.wakes == 1
        d._wake.close()

    asyncio.run(main())
