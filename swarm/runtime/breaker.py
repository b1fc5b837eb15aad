"""CircuitBreaker: stops a run that only measures a dead or broken server.

Place in the map (docs/architecture.md, "Runtime"): fed with the status of every finished request of a
target (by the Dispatcher in process, or by the Ray driver as batches arrive); when the share of
failures among the last ``window`` requests reaches ``max_error_rate`` it trips once, with a
reason that names the rate and the commonest failures. The run then stops sending to that
target, and the reason goes to the manifest. Cancelled requests (a run stopping) are not
failures of the server and are not counted. Off unless ``--max-error-rate`` is given.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable


class CircuitBreaker:
    """Trips when at least ``max_error_rate`` of the last ``window`` requests failed."""

    def __init__(self, max_error_rate: float, window: int = 100) -> None:
        if not 0 < max_error_rate <= 1:
            raise ValueError(f"max_error_rate must be in (0, 1], got {max_error_rate}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.max_error_rate = max_error_rate
        self.window = window
        self._recent: deque[str] = deque(maxlen=window)
        self._failed = 0  # failures among _recent
        self.reason: str | None = None

    def observe(self, status: str) -> str | None:
        """Count one finished request; returns the reason the first time the breaker trips."""
        if status == "cancelled" or self.reason is not None:
            return None
        recent = self._recent
        if len(recent) == self.window and recent[0] != "ok":
            self._failed -= 1
        recent.append(status)
        if status != "ok":
            self._failed += 1
        if len(recent) == self.window and self._failed >= self.max_error_rate * self.window:
            kinds = Counter(s for s in recent if s != "ok").most_common()
            detail = ", ".join(f"{k} {n}" for k, n in kinds)
            self.reason = (
                f"circuit breaker: {self._failed} of the last {self.window} requests failed "
                f"({self._failed / self.window:.0%}, limit {self.max_error_rate:.0%}: {detail})"
            )
            return self.reason
        return None

    def observe_many(self, statuses: Iterable[str]) -> str | None:
        """``observe`` each status in order; the reason if the breaker tripped on one of them."""
        for status in statuses:
            reason = self.observe(status)
            if reason is not None:
                return reason
        return None
