"""PreciseWake: wake a task at an instant to the microsecond, without spinning the loop.

Place in the map (docs/architecture.md, "Runtime"): the Dispatcher's way to a send's instant
on a real clock. asyncio's timers wake 0-1 ms late (the selector's timeout is in whole
milliseconds, rounded up), so the Dispatcher used to sleep to 1.5 ms before an instant and
yield the loop until it: a busy wait, about a millisecond of CPU per send (half the client's
CPU per request at 500 steady agents). Here a Linux ``timerfd`` on ``CLOCK_MONOTONIC`` (the
clock of ``time.perf_counter_ns``), armed for the earliest waiting instant, makes the loop's
``epoll`` return at it; the tasks due by then are woken together, in the order they asked.

``PreciseWake.create`` gives None where there is no ``timerfd`` (not Linux): the Dispatcher
spins as before.
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import logging
import os
import sys
import time

log = logging.getLogger(__name__)

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create  # noqa: B018 - present?
        libc.timerfd_settime  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


class PreciseWake:
    """Tasks sleeping until instants of ``time.perf_counter_ns``, woken by one ``timerfd``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, libc: ctypes.CDLL, fd: int) -> None:
        self._loop, self._libc, self._fd = loop, libc, fd
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._armed_ns: int | None = None
        loop.add_reader(fd, self._fired)
        self.wakes = 0

    @classmethod
    def create(cls, loop: asyncio.AbstractEventLoop) -> PreciseWake | None:
        """One for ``loop``, or None where ``timerfd`` is not to be had."""
        libc = _libc()
        if libc is None:
            return None
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            log.debug("no timerfd (%s): sends spin to their instants", os.strerror(ctypes.get_errno()))
            return None
        try:
            return cls(loop, libc, fd)
        except (NotImplementedError, OSError, ValueError) as exc:  # a loop that cannot watch it
            os.close(fd)
            log.debug("timerfd not usable on this loop (%s): sends spin to their instants", exc)
            return None

    async def until(self, perf_ns: int) -> None:
        """Return at ``perf_ns`` (``time.perf_counter_ns``), or at once if it has passed."""
        if perf_ns <= time.perf_counter_ns():
            return
        future: asyncio.Future[None] = self._loop.create_future()
        heapq.heappush(self._waiting, (perf_ns, next(self._order), future))
        if self._armed_ns is None or perf_ns < self._armed_ns:
            self._arm(perf_ns)
        await future

    def _arm(self, perf_ns: int | None) -> None:
        spec = _Itimerspec()
        if perf_ns is not None:  # 0 disarms; an instant is never 0 on a running machine
            spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(max(perf_ns, 1), 1_000_000_000)
        if self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self._armed_ns = perf_ns

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            pass  # re-armed between the expiry and this read
        self.wakes += 1
        now = time.perf_counter_ns()
        waiting = self._waiting
        while waiting and waiting[0][0] <= now:
            _, _, future = heapq.heappop(waiting)
            if not future.done():  # not cancelled (a stop wakes sleepers by cancelling them)
                future.set_result(None)
        while waiting and waiting[0][2].done():
            heapq.heappop(waiting)
        try:
            self._arm(waiting[0][0] if waiting else None)
        except OSError as exc:  # never left hanging: the waiters go now, a little early
            log.error("re-arming the send timer failed: %s", exc)
            self._release_all()

    def _release_all(self) -> None:
        for _, _, future in self._waiting:
            if not future.done():
                future.set_result(None)
        self._waiting.clear()
        self._armed_ns = None

    def close(self) -> None:
        """Stop watching the timer and close it; tasks still waiting return now (their callers'
        own stop checks take over), not cancelled: nobody cancelled them."""
        if self._fd < 0:
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1
        self._release_all()
