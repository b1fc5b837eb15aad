"""A discrete-event clock for asyncio: an event loop whose time is virtual.

Place in the map (docs/architecture.md, "Simulation"): what ``swarm simulate`` runs the same
Dispatcher, request sources and engine model in. asyncio already keeps its timers in a heap
ordered by due time; this loop's ``time()`` reads a ``VirtualClock``, and when nothing is
ready to run, its selector moves the clock to the next timer instead of waiting for it. So
every ``asyncio.sleep``, every engine step and every think time takes no wall time, and the
order of events is the order their times say.

Real file descriptors still work (the loop's own wake-up pipe, a thread handing work back with
``call_soon_threadsafe``): the selector polls them without waiting first (while callbacks are
ready, every ``POLL_EVERY_READY_TURNS`` turns; always before the clock moves), and waits for
them only when no timer is pending (nothing in the simulation could happen before they do).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors
from typing import Any

#: asyncio runs a timer when it is due within this of now (``BaseEventLoop._clock_resolution``):
#: on the virtual loop a nanosecond, as its clock's
CLOCK_RESOLUTION_S = 1e-9


class VirtualClock:
    """Nanoseconds that move only when told, from 0 (the run's wall times are its start's wall
    time plus these). Near 0, so that the loop's float seconds keep nanoseconds: a clock
    started at a host's uptime past 2**24 s (194 days) could not, and asyncio would find a timer
    due now never due."""

    def __init__(self, start_ns: int = 0) -> None:
        self.now_ns = start_ns
        self.start_ns = self.now_ns
        #: how many times the clock jumped (one per distinct instant the simulation visited)
        self.jumps = 0

    def advance_s(self, seconds: float) -> None:
        """Move on by ``seconds``, to the nearest nanosecond (the loop runs a timer due within a
        nanosecond of now)."""
        self.now_ns += max(round(seconds * 1e9), 1)
        self.jumps += 1

    def ns(self) -> int:
        return self.now_ns

    def seconds(self) -> float:
        return self.now_ns / 1e9

    @property
    def elapsed_s(self) -> float:
        return (self.now_ns - self.start_ns) / 1e9


#: with callbacks ready, the real descriptors are polled once in this many loop turns
POLL_EVERY_READY_TURNS = 32


class _VirtualSelector(selectors.DefaultSelector):
    """Polls the real descriptors; where the loop would wait ``timeout`` for its next timer,
    moves the clock by it instead."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock
        #: loop turns with callbacks ready since the descriptors were last polled
        self._unpolled = 0

    def select(self, timeout: float | None = None) -> list[tuple[Any, int]]:
        if timeout is not None and timeout <= 0:  # callbacks are ready: the loop goes on at once
            # a poll (a system call) every turn was 5 % of a simulation; what a thread hands
            # back waits a few turns instead, at the same instant (the clock does not move
            # before a poll)
            self._unpolled += 1
            if self._unpolled < POLL_EVERY_READY_TURNS:
                return []
        self._unpolled = 0
        ready: list[tuple[Any, int]] = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:  # no timer left: only another thread can bring work
            blocked: list[tuple[Any, int]] = super().select(None)
            return blocked
        self._clock.advance_s(timeout)
        return []


class _TimerInOrder(asyncio.TimerHandle):
    """A timer that runs after every timer due at the same instant and scheduled before it.
    asyncio's heap orders timers by due time alone, and among equals by the heap's shape, which
    depends on every other timer pending: two runs of one simulation whose engines set timers
    differently (a decode stretch's one against its steps' several) met requests sent at one
    instant in different orders."""

    __slots__ = ("_order",)

    def __init__(self, when: float, callback: Any, args: Any, loop: Any, context: Any, order: int) -> None:
        super().__init__(when, callback, args, loop, context=context)
        self._order = order

    def __lt__(self, other: object) -> bool:
        if isinstance(other, _TimerInOrder):
            mine, theirs = self._when, other._when  # type: ignore[attr-defined]
            return mine < theirs or (mine == theirs and self._order < other._order)
        return super().__lt__(other)  # type: ignore[operator]


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a ``VirtualClock``: sleeping costs nothing, and time passes only
    between events; events of one instant run in the order they were scheduled."""

    def __init__(self, clock: VirtualClock | None = None) -> None:
        self.clock = clock if clock is not None else VirtualClock()
        super().__init__(_VirtualSelector(self.clock))
        self._clock_resolution = CLOCK_RESOLUTION_S
        self._timers_set = itertools.count()

    def time(self) -> float:
        return self.clock.now_ns / 1e9

    def call_at(  # type: ignore[override]  # the base's signature, typed loosely
        self, when: float, callback: Any, *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        """``BaseEventLoop.call_at`` with a timer that keeps its place among equal due times."""
        return self.call_at_place(when, next(self._timers_set), callback, *args, context=context)

    def place(self) -> int:
        """A place among timers of one due time, as a timer set now would take (for
        ``call_at_place`` later): the order in which a caller's several deadlines were set,
        kept by one timer that stands for each in turn."""
        return next(self._timers_set)

    def call_at_place(
        self, when: float, place: int, callback: Any, *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        """``call_at`` with a timer at a place taken before (``place``)."""
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()  # type: ignore[attr-defined]
        timer = _TimerInOrder(when, callback, args, self, context, place)
        heapq.heappush(self._scheduled, timer)  # type: ignore[attr-defined]
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer
