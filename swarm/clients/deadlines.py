"""Request deadlines, grouped so that thousands in flight cost a few loop timers.

Place in the map (docs/architecture.md, "Clients"): the client's watchdog gives every request a
first-token deadline and a whole-request one, and a silence check once tokens flow. As loop
timers (``loop.call_later``) that is three heap entries made and cancelled per request, most
never due: 4-5 % of the client's CPU in the anchors' run. Here deadlines due within the same
``GRAIN_S`` share one loop timer, and a deadline is an entry in its bucket's set: made and
cancelled in a set operation. A deadline fires at most ``GRAIN_S`` after it is due, never
before; the watchdog also judges every deadline by the reads' receive stamps, so a late timer
changes no verdict.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Callable
from typing import Any

#: deadlines due within one grain share a loop timer
GRAIN_S = 0.01


class Deadline:
    """One armed deadline; ``cancel`` takes it out of its bucket."""

    __slots__ = ("_args", "_callback", "_cancelled", "_key", "_owner")

    def __init__(self, owner: Deadlines, key: int, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        self._owner = owner
        self._key = key
        self._callback = callback
        self._args = args
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True  # also when its bucket is firing: a later callback skips it
        self._owner._cancel(self)


class Deadlines:
    """The deadlines of one event loop (``for_loop``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # weakly: ``for_loop`` keys this on the loop, and a strong reference would keep both
        self._loop_ref = weakref.ref(loop)
        #: bucket key (due time / GRAIN_S, rounded up) -> its loop timer and live deadlines
        self._buckets: dict[int, tuple[asyncio.TimerHandle, set[Deadline]]] = {}

    def call_later(self, delay_s: float, callback: Callable[..., None], *args: Any) -> Deadline:
        """Call ``callback(*args)`` ``delay_s`` from now (at most ``GRAIN_S`` later)."""
        loop = self._loop_ref()
        assert loop is not None, "deadlines of a loop that is gone"
        key = math.ceil((loop.time() + delay_s) / GRAIN_S)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = (loop.call_at(key * GRAIN_S, self._fire, key), set())
        deadline = Deadline(self, key, callback, args)
        bucket[1].add(deadline)
        return deadline

    def _cancel(self, deadline: Deadline) -> None:
        bucket = self._buckets.get(deadline._key)
        if bucket is None or deadline not in bucket[1]:
            return  # fired already, or cancelled before
        live = bucket[1]
        live.discard(deadline)
        if not live:  # the bucket's timer is no longer needed: the loop's heap stays small
            bucket[0].cancel()
            del self._buckets[deadline._key]

    def _fire(self, key: int) -> None:
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            return
        for deadline in bucket[1]:
            if deadline._cancelled:  # by an earlier callback of this bucket
                continue
            try:
                deadline._callback(*deadline._args)
            except Exception as exc:  # one deadline's failure must not skip the others
                loop = self._loop_ref()
                assert loop is not None
                loop.call_exception_handler(
                    {"message": f"deadline callback {deadline._callback!r} failed", "exception": exc}
                )

    def pending(self) -> int:
        """How many deadlines are armed (for tests and checks)."""
        return sum(len(live) for _, live in self._buckets.values())


_PER_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Deadlines] = weakref.WeakKeyDictionary()


def for_loop(loop: asyncio.AbstractEventLoop) -> Deadlines:
    """The deadlines of ``loop`` (made on first use, gone with the loop)."""
    deadlines = _PER_LOOP.get(loop)
    if deadlines is None:
        deadlines = _PER_LOOP[loop] = Deadlines(loop)
    return deadlines
