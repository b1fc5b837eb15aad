"""Retry policy: which failed calls are sent again, and after how long.

Place in the map (docs/architecture.md, "Runtime"): consulted by an agent after each failed call
when the workload asks for retries (``retries > 0``; off by default, because a load generator
that retries quietly hides the failures it should measure). A strategy only: it computes
decisions and delays from a record; the agent sleeps and sends. Every attempt is recorded as
its own row (``attempt``, ``retry_of``).
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm.record import RequestRecord, Status

#: Longest wait before a retry, whatever Retry-After or the backoff say.
MAX_RETRY_DELAY_S = 60.0


def is_retryable(record: RequestRecord) -> bool:
    """A failure that may pass on a second try: the server was busy or broken (429, 5xx), the
    connection failed, a deadline passed, or the stream broke. A 4xx other than 429 says the
    request itself is wrong, and a cancelled call belongs to a run that is stopping."""
    if record.status is Status.HTTP_ERROR:
        code = record.http_status or 0
        return code == 429 or code >= 500
    return record.status in (Status.CONNECT_ERROR, Status.TIMEOUT, Status.STREAM_ERROR)


def retry_delay_s(record: RequestRecord, retry: int, backoff_s: float) -> float:
    """Seconds to wait before retry number ``retry`` (1-based): the server's ``Retry-After``
    when it sent one, else ``backoff_s * 2**(retry - 1)``; at most MAX_RETRY_DELAY_S."""
    after = record.extra.get("retry_after_s")
    delay = float(after) if isinstance(after, (int, float)) else backoff_s * 2 ** (retry - 1)
    return min(max(delay, 0.0), MAX_RETRY_DELAY_S)


def retry_request_id(first_request_id: str, retry: int) -> str:
    """The request_id of retry ``retry`` of a request (``<first>~retry<k>``)."""
    return f"{first_request_id}~retry{retry}"


@dataclass(frozen=True)
class RetryPolicy:
    """How a source retries a failed call: ``retries`` times at most (0: never), the first after
    ``backoff_s`` (doubling), or the server's Retry-After."""

    retries: int = 0
    backoff_s: float = 0.5
