"""A small streaming HTTP/1.1 client on asyncio Protocols: the hot path to plaintext targets.

Place in the map (docs/architecture.md, "Clients"): under the EngineClient, beside aiohttp (which still serves
``https://`` targets, the probe and the scrapers). Why a client of our own: with aiohttp every
network read of a stream wakes the reading task through a StreamReader, and at hundreds of
streams those wake-ups are most of a core and the tail of the client's own delay
(docs/performance.md). Here the response is parsed where the bytes arrive, in the protocol's
``data_received``, by httptools (llhttp) in ``clients.h1_parse``: the status line and headers,
then the body (``Content-Length``, chunked, or to the end of the connection), handed to the
exchange's ``on_body`` callback together with the time of the read. The sending task awaits
once for the headers and once for the end.

Scope, on purpose: one request at a time per connection (no pipelining), keep-alive reuse,
``Connection: close`` honoured, 1xx responses skipped, no redirects, no compression, no TLS.

``H1Pool`` keeps idle keep-alive connections per (host, port). ``H1Pool.exchange`` returns
an ``H1Exchange`` whose connection says whether it was reused, which the EngineClient needs:
a request that dies on a reused connection before any response byte was never seen by the
server and may be sent again.

``H1Pool`` is a ``Transport`` (``clients.transport``): ``H1Pool.endpoint`` gives an
``H1Endpoint`` whose ``post`` sends (and sends again, once, on a fresh connection when a
reused one was found closed) and returns an ``H1Response``. Those two map this module's
exceptions (and ``h1_parse``'s, re-exported here) to ``ExchangeFailure`` in ``h1_failure``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import time
from collections.abc import Callable, Mapping
from typing import cast
from urllib.parse import urlsplit

from swarm.clients.h1_parse import H1Broken as H1Broken
from swarm.clients.h1_parse import H1Exchange as H1Exchange
from swarm.clients.h1_parse import H1NoResponse as H1NoResponse
from swarm.clients.h1_parse import H1ProtocolError as H1ProtocolError
from swarm.clients.transport import DEAD_POOLED_RETRIES, ExchangeFailure, ReadCallback, no_response
from swarm.record import Status

log = logging.getLogger(__name__)

_perf_ns = time.perf_counter_ns


class H1ConnectError(OSError):
    """The connection could not be made (refused, unreachable, timed out)."""


class H1Connection(asyncio.Protocol):
    """One keep-alive TCP connection; carries one exchange at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, key: tuple[str, int]) -> None:
        self.loop = loop
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.current: H1Exchange | None = None
        self.closed = False
        self.uses = 0
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # any event loop's stream transport (uvloop's, under Ray, is not an asyncio.Transport)
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        current = self.current
        if current is None:
            self.unexpected()
            return
        current.feed(data, _perf_ns())

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        current, self.current = self.current, None
        if current is not None:
            current.connection_lost(exc)

    def unexpected(self) -> None:
        """Bytes the protocol did not ask for: the connection cannot be trusted any more."""
        self.closed = True
        self.abort()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def start(self, request: bytes) -> H1Exchange:
        assert self.current is None and self.transport is not None
        self.uses += 1
        exchange = H1Exchange(self)
        if self.closed:  # closed or reset between the connect and now (a refusing server)
            exchange.fail(H1NoResponse("closed by the server"))
            return exchange
        self.current = exchange
        self.transport.write(request)
        return exchange

    def exchange_done(self, exchange: H1Exchange) -> None:
        if self.current is exchange:
            self.current = None
        if not exchange.keep_alive:
            self.closed = True
            if self.transport is not None:
                self.transport.close()


class H1Pool:
    """Keep-alive connections per (host, port), opened on demand.

    ``exchange(host, port, request)`` sends ``request`` (the complete request bytes) on an
    idle connection or a new one. Call ``release(exchange)`` when done with the response: a
    complete exchange on a keep-alive connection returns it to the pool, anything else closes
    it. Must be used inside one running event loop; ``await close()`` closes every connection.
    """

    def __init__(self, *, connect_timeout_s: float | None = 10.0, keepalive_s: float = 60.0) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self._idle: dict[tuple[str, int], collections.deque[H1Connection]] = {}
        self._all: set[H1Connection] = set()
        self.opened = 0

    async def exchange(self, host: str, port: int, request: bytes, *, fresh: bool = False) -> H1Exchange:
        key = (host, port)
        conn = None if fresh else self._take_idle(key)
        if conn is None:
            conn = await self._open(key)
        return conn.start(request)

    def _take_idle(self, key: tuple[str, int]) -> H1Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be closed
            if not conn.closed and now - conn.idle_since < self.keepalive_s:
                return conn
            conn.abort()
            self._all.discard(conn)
        return None

    async def _open(self, key: tuple[str, int]) -> H1Connection:
        loop = asyncio.get_running_loop()
        try:
            connect = loop.create_connection(lambda: H1Connection(loop, key), key[0], key[1])
            _, conn = await asyncio.wait_for(connect, self.connect_timeout_s)
        except asyncio.TimeoutError:
            raise H1ConnectError(
                f"connect to {key[0]}:{key[1]} timed out after {self.connect_timeout_s:g} s"
            ) from None
        except OSError as exc:
            raise H1ConnectError(f"cannot connect to {key[0]}:{key[1]}: {exc.strerror or exc}") from exc
        self.opened += 1
        self._all.add(conn)
        return conn

    def release(self, exchange: H1Exchange) -> None:
        conn = cast(H1Connection, exchange.connection)  # the pool's own: it started the exchange
        if exchange.complete and exchange.keep_alive and not conn.closed and conn.current is None:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(conn.key, collections.deque()).append(conn)
        else:
            conn.abort()
            self._all.discard(conn)

    def endpoint(self, url: str, headers: Mapping[str, str], *, base_url: str, target: str) -> H1Endpoint:
        """The ``Transport`` face: posts to ``url`` (plain http only)."""
        return H1Endpoint(self, url, headers, target)

    @property
    def idle_connections(self) -> int:
        return sum(len(d) for d in self._idle.values())

    async def close(self) -> None:
        for conn in list(self._all):
            conn.abort()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports' connection_lost run


# -- the Transport seam ----------------------------------------------------------------------

#: Bytes of a body read whole (``H1Response.read(None)``).
READ_LIMIT_BYTES = 1 << 20


def h1_failure(exc: OSError | H1ProtocolError) -> ExchangeFailure:
    """The exchange's failure for an exception of this module's (or the socket's beneath it)."""
    if isinstance(exc, H1ConnectError):
        return ExchangeFailure(Status.CONNECT_ERROR, str(exc))
    if isinstance(exc, H1Broken):
        return ExchangeFailure(Status.STREAM_ERROR, f"connection broken: {exc}")
    if isinstance(exc, H1ProtocolError):
        return ExchangeFailure(Status.STREAM_ERROR, f"invalid HTTP response: {exc}")
    return ExchangeFailure(Status.CONNECT_ERROR, f"{type(exc).__name__}: {exc}")


class H1Response:
    """An exchange whose status and headers have arrived, behind the ``Response`` protocol."""

    __slots__ = ("_exchange", "_pool", "headers", "status")

    def __init__(self, pool: H1Pool, exchange: H1Exchange) -> None:
        self._pool = pool
        self._exchange = exchange
        self.status = exchange.status
        self.headers = exchange.headers_map

    async def stream(self, on_read: ReadCallback) -> None:
        try:
            await self._exchange.stream(on_read)
        except (OSError, H1ProtocolError) as exc:
            raise h1_failure(exc) from exc

    async def read(self, limit: int | None) -> bytes:
        try:
            return await self._exchange.read(READ_LIMIT_BYTES if limit is None else limit)
        except (OSError, H1ProtocolError) as exc:
            raise h1_failure(exc) from exc

    async def close(self) -> None:
        self._pool.release(self._exchange)


class H1Endpoint:
    """Posts to one plain-http URL; the request head up to its per-request headers is built once."""

    __slots__ = ("_head", "_host", "_pool", "_port", "_target")

    def __init__(self, pool: H1Pool, url: str, headers: Mapping[str, str], target: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError("swarm's HTTP/1.1 client speaks plain http only")
        self._pool = pool
        self._target = target
        self._host = parts.hostname or ""
        self._port = parts.port or 80
        netloc = f"{self._host}:{self._port}" if parts.port else self._host
        lines = [f"POST {parts.path or '/'} HTTP/1.1", f"Host: {netloc}", "User-Agent: swarm-loadgen"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\n").encode("latin-1")

    async def post(
        self, body: list[bytes], request_id: str | None, on_resend: Callable[[], None]
    ) -> H1Response:
        """The request's bytes are let go once the response has begun (thousands of streams in
        flight would otherwise each keep their prompt twice, for as long as they stream)."""
        head = self._head
        if request_id is not None:
            head += b"X-Request-Id: " + request_id.encode("ascii") + b"\r\n"
        payload = body.pop()
        request = head + b"Content-Length: %d\r\n\r\n" % len(payload) + payload
        del payload
        pool = self._pool
        try:
            for retry in range(DEAD_POOLED_RETRIES + 1):
                exchange = await pool.exchange(self._host, self._port, request, fresh=retry > 0)
                try:
                    await exchange.headers()
                except H1NoResponse as exc:
                    pool.release(exchange)
                    if not exchange.reused or retry == DEAD_POOLED_RETRIES:
                        raise no_response(exc) from exc
                    log.debug(
                        "request to %s: pooled connection was closed (%s); sending again", self._target, exc
                    )
                    on_resend()
                    continue
                except BaseException:
                    pool.release(exchange)
                    raise
                return H1Response(pool, exchange)
        except (OSError, H1ProtocolError) as exc:
            raise h1_failure(exc) from exc
        raise AssertionError("unreachable: the last try returns or raises")
