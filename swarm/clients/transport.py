"""The Transport seam: how one request's bytes reach a server and its answer comes back.

Place in the map (docs/architecture.md, "Clients"): inside the EngineClient, under the exchange
(``clients.exchange.run_exchange``). Two implementations: swarm's own HTTP/1.1 client
(``clients.h1.H1Pool``, for ``http://``) and an aiohttp session
(``clients.aiohttp_transport.AiohttpTransport``, for ``https://``); ``clients.client.open_transport``
picks one.

A transport opens a streaming POST and hands back its response; the response streams its body
to a callback (every network read, with the read's ``perf_counter_ns``) or reads it whole, and
is closed. Each implementation turns its own library's exceptions into ``ExchangeFailure``
(a record status and an error text) before they leave it, so the client has one failure type
to catch; what a transport lets through unchanged is cancellation and the read callback's own
errors (``ChunkError``, ``SSEError``: a bad stream, which the exchange maps), and a bug of ours.

The failures, the same for both transports:

- the connection cannot be made (refused, unreachable, connect timed out): ``connect_error``;
- the server closed or reset it before any byte of a response: ``connect_error``, "connection
  closed by the server before a response: ..." (on a *reused* keep-alive connection the
  transport first sends again on a fresh one, calling ``on_resend``: the server never saw it);
- closed or reset in the middle of a response: ``stream_error``, "connection broken: ...";
- not HTTP: ``stream_error``, "invalid HTTP response: ..." (h1) or aiohttp's own words;
- a read timeout of the library: ``timeout``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from swarm.record import Status

#: A pooled connection can be found dead on use this many times in a row before a send gives up.
DEAD_POOLED_RETRIES = 3

#: ``on_read(data, read_ns, lag_ns)``: one network read, its receive time on ``perf_counter_ns``
#: (the kernel's stamp where the transport has it) and how long after it the client read it (-1:
#: the transport has no stamp and ``read_ns`` is the user-space time of the read); returns True
#: once the response has shown content
ReadCallback = Callable[[bytes, int, int], bool]


class ExchangeFailure(Exception):
    """Ends a request early with a status and an error text."""

    def __init__(self, status: Status, error: str, http_status: int | None = None) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.http_status = http_status


def no_response(exc: BaseException) -> ExchangeFailure:
    """The failure of a connection closed or reset before any byte of a response."""
    return ExchangeFailure(
        Status.CONNECT_ERROR,
        f"connection closed by the server before a response: {type(exc).__name__}: {exc}",
    )


class Response(Protocol):
    """One response, its status line and headers read. Raises ``ExchangeFailure`` on failure."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """The response headers, names in lower case."""
        ...

    async def stream(self, on_read: ReadCallback) -> None:
        """Hand every network read of the body to ``on_read`` until the body ends."""
        ...

    async def read(self, limit: int | None) -> bytes:
        """The body as one bytes object (at most ``limit`` bytes; None: the transport's own
        bound)."""
        ...

    async def close(self) -> None:
        """Give the connection back (a complete keep-alive exchange) or close it."""
        ...


class Endpoint(Protocol):
    """One URL of one transport, with the headers every request to it carries."""

    async def post(
        self, body: list[bytes], request_id: str | None, on_resend: Callable[[], None]
    ) -> Response:
        """Send a POST of the bytes in ``body`` (taken out of the list, so that the caller's
        frame does not keep them while the answer streams), with ``X-Request-Id: request_id``
        when given, and wait for the response's status and headers. ``on_resend`` is called
        before the request is sent again after its pooled connection was found closed."""
        ...


class Transport(Protocol):
    """The connections of a process to its targets (``clients.client.open_transport``)."""

    def endpoint(self, url: str, headers: Mapping[str, str], *, base_url: str, target: str) -> Endpoint:
        """Where ``HttpEngineClient`` posts: ``url`` with ``headers`` (``base_url`` and
        ``target`` name it in error texts and logs). Raises ValueError, saying why, when this
        transport cannot reach ``url``."""
        ...

    async def close(self) -> None: ...
