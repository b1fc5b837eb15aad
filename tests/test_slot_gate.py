"""The in-flight cap's slots: first come first served, a cancelled waiter loses its place, and a
slot handed to a waiter cancelled before it ran goes on to the next."""

from __future__ import annotations

import asyncio

import pytest

from swarm.runtime.slot_gate import SlotGate


async def _holder(gate: SlotGate, name: str, order: list[str], hold: asyncio.Event) -> None:
    await gate.acquire()
    order.append(name)
    try:
        await hold.wait()
    finally:
        gate.release()


def test_waiters_get_slots_in_arrival_order() -> None:
    async def main() -> list[str]:
        gate, order, hold = SlotGate(2), [], asyncio.Event()
        tasks = [asyncio.create_task(_holder(gate, f"w{i}", order, hold)) for i in range(6)]
        await asyncio.sleep(0)
        assert order == ["w0", "w1"] and gate.locked()
        hold.set()
        await asyncio.gather(*tasks)
        assert not gate.locked()
        return order

    assert asyncio.run(main()) == [f"w{i}" for i in range(6)]


def test_a_cancelled_waiter_loses_its_place_and_no_slot() -> None:
    async def main() -> None:
        gate, order, hold = SlotGate(1), [], asyncio.Event()
        first = asyncio.create_task(_holder(gate, "a", order, hold))
        await asyncio.sleep(0)
        gone = asyncio.create_task(_holder(gate, "b", order, hold))
        last = asyncio.create_task(_holder(gate, "c", order, hold))
        await asyncio.sleep(0)
        gone.cancel()
        hold.set()
        await asyncio.gather(first, last)
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert order == ["a", "c"]
        # the one slot came back
        await gate.acquire()
        assert gate.locked()
        gate.release()
        assert not gate.locked()

    asyncio.run(main())


def test_a_slot_handed_to_a_waiter_cancelled_before_it_ran_goes_on() -> None:
    async def main() -> None:
        gate = SlotGate(1)
        await gate.acquire()
        handed = asyncio.create_task(gate.acquire())
        after = asyncio.create_task(gate.acquire())
        await asyncio.sleep(0)
        gate.release()  # the slot goes to `handed`'s future...
        handed.cancel()  # ...whose task is cancelled before it resumes
        with pytest.raises(asyncio.CancelledError):
            await handed
        await asyncio.wait_for(after, 1.0)  # the slot went on to the next waiter
        assert gate.locked()
        gate.release()
        assert not gate.locked()

    asyncio.run(main())


def test_a_gate_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        SlotGate(0)
