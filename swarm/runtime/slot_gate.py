"""The in-flight cap's slots (``--max-in-flight``), handed over in arrival order.

Place in the map (docs/architecture.md, "Runtime"): the Dispatcher takes a slot before each send
and gives it back after. ``asyncio.Semaphore`` does the same, but its release walks its queue of
waiters from the front past every one already woken and not yet run: with thousands of agents
queued behind a cap of hundreds, a burst of finished requests made each release walk hundreds
of futures (88 on average in the anchors' run at 250 in flight, 3 % of the client's CPU). Here a
release hands its slot straight to the first waiter still waiting, so it never walks more than
the waiters cancelled since.
"""

from __future__ import annotations

import asyncio
from collections import deque


class SlotGate:
    """``limit`` slots; ``acquire`` waits first-come first-served while none is free."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("a slot gate needs at least one slot")
        self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        """No slot is free now (an ``acquire`` would wait)."""
        return self._free == 0

    async def acquire(self) -> None:
        if self._free > 0:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot, then cancelled before it ran: pass it on
            raise

    def release(self) -> None:
        """Give a slot back: to the first waiter still waiting, else to the free count."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():  # one cancelled while it waited has left the queue
                waiter.set_result(None)
                return
        self._free += 1
