"""StopConditions: every reason a target's sending ends before its sources run out, in one place.

Place in the map (docs/architecture.md, "Runtime"): owned by the Dispatcher of one target run (and,
on a cluster, by the driver for what only it sees). Two kinds of stop:

- **Soft** (no new sends; requests in flight finish): the run's duration is reached, or its
  request limit. Checked before every send, with an injectable clock; the Dispatcher also
  watches the deadline (``seconds_left``) and then wakes every source that waits (a tool time,
  a think time): it would send nothing more, so it must not hold the run open.
- **Hard** (no new sends, and requests in flight are cancelled, recorded as ``cancelled``):
  a signal (``interrupt``: SIGINT/SIGTERM, or a driver's stop), or a halt with a reason of its
  own: the circuit breaker tripped (``observe`` feeds it every record's status), or the trace
  cannot be written.

The first reason wins and is the run's ``stop_reason``; ``halt_reason`` is set only by a halt.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from swarm.runtime.breaker import CircuitBreaker

log = logging.getLogger(__name__)

DURATION_REACHED = "duration reached"
REQUEST_LIMIT_REACHED = "request limit reached"
INTERRUPTED = "interrupted"


class StopConditions:
    def __init__(
        self,
        *,
        deadline_s: float | None = None,
        max_requests: int | None = None,
        breaker: CircuitBreaker | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: on ``clock``: no send starts at or after it
        self.deadline_s = deadline_s
        self.max_requests = max_requests
        self.breaker = breaker
        self._clock = clock
        #: sends admitted so far
        self.issued = 0
        self.reason: str | None = None
        self.halt_reason: str | None = None
        self.interrupted = False
        self._hard = False
        self._event: asyncio.Event | None = None

    @property
    def stopped(self) -> bool:
        """No new sends (any kind of stop)."""
        return self.reason is not None

    @property
    def cancelling(self) -> bool:
        """A hard stop: requests in flight are being cancelled."""
        return self._hard

    def _stop(self, reason: str, hard: bool) -> None:
        if self.reason is None:
            self.reason = reason
        if hard and not self._hard:
            self._hard = True
            if self._event is not None:
                self._event.set()

    def seconds_left(self) -> float | None:
        """Seconds until the duration is reached, on this object's clock (None: no duration)."""
        return None if self.deadline_s is None else self.deadline_s - self._clock()

    def stopped_now(self) -> bool:
        """Whether the run has stopped, for any reason, checking the duration first (a reached
        duration is a soft stop, recorded as such)."""
        if self.deadline_s is not None and self._clock() >= self.deadline_s:
            self._stop(DURATION_REACHED, hard=False)
        return self.stopped

    def may_send(self) -> bool:
        """Whether a send may start now; a reached duration or request limit stops the run."""
        if self.stopped_now():
            return False
        if self.max_requests is not None and self.issued >= self.max_requests:
            self._stop(REQUEST_LIMIT_REACHED, hard=False)
            return False
        return True

    def admit(self) -> bool:
        """``may_send``, and count the send when it may; the send that reaches the request
        limit stops the run at once (soft: it and the others in flight finish), so sources
        waiting for their next call can be woken rather than waited for."""
        if not self.may_send():
            return False
        self.issued += 1
        if self.max_requests is not None and self.issued >= self.max_requests:
            self._stop(REQUEST_LIMIT_REACHED, hard=False)
        return True

    def interrupt(self) -> None:
        """A signal (or the driver) asks the run to end now."""
        self.interrupted = True
        self._stop(INTERRUPTED, hard=True)

    def halt(self, reason: str) -> None:
        """End the run now for a reason of its own (breaker, trace not writable); first wins."""
        if self.halt_reason is None:
            self.halt_reason = reason
            log.error("stopping the run: %s", reason)
        self._stop(reason, hard=True)

    def observe(self, status: str) -> None:
        """One finished request's status, for the circuit breaker."""
        if self.breaker is not None:
            reason = self.breaker.observe(status)
            if reason is not None:
                self.halt(reason)

    def observe_many(self, statuses: Iterable[str]) -> None:
        if self.breaker is not None:
            reason = self.breaker.observe_many(statuses)
            if reason is not None:
                self.halt(reason)

    async def wait_hard(self) -> None:
        """Returns once a hard stop (interrupt or halt) happened."""
        if self._event is None:
            self._event = asyncio.Event()
        if self._hard:
            return
        await self._event.wait()
