"""A small streaming HTTP/1.1 client on asyncio Protocols: the hot path to plaintext targets.

Place in the map (docs/architecture.md): under the EngineClient, beside aiohttp (which still serves
``https://`` targets, the probe and the scrapers). Why a client of our own: with aiohttp every
network read of a stream wakes the reading task through a StreamReader, and at hundreds of
streams those wake-ups are most of a core and the tail of the client's own delay
(docs/performance.md). Here the response is parsed where the bytes arrive, in the protocol's
``data_received``: the status line and headers, then the body (``Content-Length``, chunked, or
to the end of the connection), handed to the exchange's ``on_body`` callback together with
the time of the read. The sending task awaits once for the headers and once for the end.

Scope, on purpose: one request at a time per connection (no pipelining), keep-alive reuse,
``Connection: close`` honoured, 1xx responses skipped, no redirects, no compression, no TLS.

``H1Pool`` keeps idle keep-alive connections per (host, port). ``H1Pool.exchange`` returns
an ``H1Exchange`` whose connection says whether it was reused, which the EngineClient needs:
a request that dies on a reused connection before any response byte was never seen by the
server and may be sent again.

``H1Pool`` is a ``Transport`` (``engines.transport``): ``H1Pool.endpoint`` gives an
``H1Endpoint`` whose ``post`` sends (and sends again, once, on a fresh connection when a
reused one was found closed) and returns an ``H1Response``. Those two map this module's
exceptions to ``ExchangeFailure`` in ``h1_failure``.
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

from swarm.engines.transport import DEAD_POOLED_RETRIES, ExchangeFailure, ReadCallback, no_response
from swarm.record import Status

log = logging.getLogger(__name__)

#: Longest status line plus headers accepted.
MAX_HEAD_BYTES = 64 * 1024

_perf_ns = time.perf_counter_ns


class H1ConnectError(OSError):
    """The connection could not be made (refused, unreachable, timed out)."""


class H1NoResponse(ConnectionError):
    """The connection closed or reset before any byte of the response."""


class H1Broken(ConnectionError):
    """The connection closed or reset in the middle of a response."""


class H1ProtocolError(ValueError):
    """The server sent something that is not HTTP/1.x."""


BodyCallback = Callable[[bytes, int], None]


class H1Exchange:
    """One request and its response on one connection.

    ``headers()`` waits for the status and headers; then either ``stream(on_body)`` (every
    read's body bytes go to ``on_body(data, read_perf_ns)`` inside the protocol callback, and
    the call returns at the end of the body) or ``read(limit)`` (the body, at most ``limit``
    bytes, as one bytes object).
    """

    __slots__ = (
        "_body_done",
        "_buffer",
        "_buffered",
        "_chunk_left",
        "_chunk_state",
        "_conn",
        "_content_left",
        "_error",
        "_got_any",
        "_head",
        "_head_done",
        "_limit",
        "_loop",
        "_mode",
        "_on_body",
        "_pending",
        "_stage",
        "headers_map",
        "keep_alive",
        "status",
    )

    def __init__(self, conn: H1Connection) -> None:
        self._conn = conn
        self._loop = conn.loop
        self._head = bytearray()
        self._head_done: asyncio.Future[None] = self._loop.create_future()
        self._body_done: asyncio.Future[None] = self._loop.create_future()
        self._stage = "head"  # head, body, done
        self._mode = "length"  # length, chunked, close
        self._content_left = 0
        self._chunk_state = "size"  # size, data, data_end, trailer
        self._chunk_left = 0
        self._on_body: BodyCallback | None = None
        self._pending: list[tuple[bytes, int]] = []  # body read before a consumer was set
        self._buffer: list[bytes] | None = None
        self._buffered = 0
        self._limit = 0
        self._error: BaseException | None = None
        self._got_any = False
        self.status = 0
        self.headers_map: dict[str, str] = {}
        self.keep_alive = True

    @property
    def reused(self) -> bool:
        return self._conn.uses > 1

    # -- what the sending task awaits ---------------------------------------------------------

    async def headers(self) -> tuple[int, dict[str, str]]:
        await self._head_done
        return self.status, self.headers_map

    async def stream(self, on_body: BodyCallback) -> None:
        """Hand every read's body bytes to ``on_body`` until the body ends."""
        pending, self._pending = self._pending, []
        self._on_body = on_body
        for data, stamp in pending:
            on_body(data, stamp)
        await self._body_done

    async def read(self, limit: int = 1 << 20) -> bytes:
        """The body (at most ``limit`` bytes kept; the rest is read and dropped)."""
        self._buffer = []
        self._limit = limit
        pending, self._pending = self._pending, []
        for data, _ in pending:
            self._keep(data)
        await self._body_done
        return b"".join(self._buffer)

    def _keep(self, data: bytes) -> None:
        assert self._buffer is not None
        room = self._limit - self._buffered
        if room > 0:
            piece = data[:room]
            self._buffer.append(piece)
            self._buffered += len(piece)

    # -- fed by the connection ----------------------------------------------------------------

    def feed(self, data: bytes, stamp: int) -> None:
        """Bytes from the network (called by the protocol; never raises)."""
        if self._stage == "done":
            self._conn.unexpected()
            return
        self._got_any = True
        try:
            if self._stage == "head":
                data = self._feed_head(data)
                if self._stage == "done":  # a response without a body
                    if data:
                        self._conn.unexpected()
                    self._finish()
                    return
                if not data:
                    return
            body = self._feed_body(data)
        except (H1ProtocolError, ValueError) as exc:
            self.fail(exc if isinstance(exc, H1ProtocolError) else H1ProtocolError(str(exc)))
            self._conn.abort()
            return
        if body:
            self._deliver(body, stamp)
        if self._stage == "done":
            self._finish()

    def _deliver(self, body: bytes, stamp: int) -> None:
        on_body = self._on_body
        if on_body is not None:
            try:
                on_body(body, stamp)
            except Exception as exc:  # the consumer's own error (bad stream): it ends the exchange
                self.fail(exc)
                self._conn.abort()
        elif self._buffer is not None:
            self._keep(body)
        else:
            self._pending.append((body, stamp))

    def _feed_head(self, data: bytes) -> bytes:
        self._head += data
        while True:
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > MAX_HEAD_BYTES:
                    raise H1ProtocolError(f"response head longer than {MAX_HEAD_BYTES} bytes")
                return b""
            head = bytes(self._head[:end])
            rest = bytes(self._head[end + 4 :])
            self._head.clear()
            lines = head.split(b"\r\n")
            parts = lines[0].split(b" ", 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
                raise H1ProtocolError(f"not an HTTP/1.x status line: {lines[0][:100]!r}")
            status = int(parts[1])
            if 100 <= status < 200:  # informational: another head follows
                self._head += rest
                continue
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(b":")
                if not sep:
                    raise H1ProtocolError(f"malformed header line: {line[:100]!r}")
                key = name.strip().lower().decode("latin-1")
                text = value.strip().decode("latin-1")
                headers[key] = f"{headers[key]}, {text}" if key in headers else text
            self.status, self.headers_map = status, headers
            connection = headers.get("connection", "").lower()
            self.keep_alive = ("close" not in connection) and (
                parts[0] == b"HTTP/1.1" or "keep-alive" in connection
            )
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._mode = "chunked"
            elif "content-length" in headers:
                try:
                    self._content_left = int(headers["content-length"])
                except ValueError:
                    raise H1ProtocolError(f"bad Content-Length: {headers['content-length']!r}") from None
                self._mode = "length"
            else:
                self._mode = "close"
                self.keep_alive = False
            self._stage = "body"
            if status in (204, 304) or (self._mode == "length" and self._content_left == 0):
                self._stage = "done"
            if not self._head_done.done():
                self._head_done.set_result(None)
            return rest

    def _feed_body(self, data: bytes) -> bytes:
        if self._mode == "close":
            return data
        if self._mode == "length":
            if len(data) >= self._content_left:
                body, extra = data[: self._content_left], data[self._content_left :]
                self._content_left = 0
                self._stage = "done"
                if extra:
                    self._conn.unexpected()
                return body
            self._content_left -= len(data)
            return data
        return self._dechunk(data)

    def _dechunk(self, data: bytes) -> bytes:
        """Chunked transfer coding: the payload bytes in ``data`` (any split is fine)."""
        out: list[bytes] = []
        pos, n = 0, len(data)
        buf = data
        if self._chunk_state == "size" and not self._head:
            # the common case: whole chunks, each "<hex size>\r\n<data>\r\n", one after another
            find = buf.find
            while True:
                nl = find(b"\r\n", pos)
                if nl < 0:
                    break
                try:
                    size = int(buf[pos:nl], 16)
                except ValueError:  # an extension, or garbage: the general path says which
                    break
                start = nl + 2
                stop = start + size
                if size == 0 or stop + 2 > n or buf[stop : stop + 2] != b"\r\n":
                    break  # the last chunk, a chunk split over reads, or a framing error
                out.append(buf[start:stop])
                pos = stop + 2
            if pos == n:
                return out[0] if len(out) == 1 else b"".join(out)
        while pos < n:
            state = self._chunk_state
            if state == "data":
                take = min(self._chunk_left, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._chunk_left -= take
                if self._chunk_left == 0:
                    self._chunk_state = "data_end"
                continue
            # size, data_end and trailer are line-based: gather a whole line first
            end = buf.find(b"\n", pos)
            if end < 0:
                self._head += buf[pos:]
                if len(self._head) > MAX_HEAD_BYTES:
                    raise H1ProtocolError("chunk-size line too long")
                break
            if self._head:
                line = bytes(self._head) + buf[pos:end]
                self._head.clear()
            else:
                line = buf[pos:end]
            pos = end + 1
            line = line.rstrip(b"\r")
            if state == "size":
                size_text = line.split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise H1ProtocolError(f"bad chunk size {size_text[:40]!r}") from None
                if size == 0:
                    self._chunk_state = "trailer"
                else:
                    self._chunk_left = size
                    self._chunk_state = "data"
            elif state == "data_end":
                if line:
                    raise H1ProtocolError("chunk data longer than its size")
                self._chunk_state = "size"
            else:  # trailer: lines until an empty one
                if not line:
                    self._stage = "done"
                    if pos < n:
                        self._conn.unexpected()
                    break
        return b"".join(out) if len(out) != 1 else out[0]

    def _finish(self) -> None:
        if not self._head_done.done():
            self._head_done.set_result(None)
        if not self._body_done.done():
            self._body_done.set_result(None)
        self._conn.exchange_done(self)

    def fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        for fut in (self._head_done, self._body_done):
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # marked retrieved: the sender may have stopped listening

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._stage == "done":
            return
        if self._stage == "body" and self._mode == "close":
            self._stage = "done"  # the end of the connection is the end of the body
            self.keep_alive = False
            self._finish()
            return
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "closed by the server"
        if not self._got_any:
            self.fail(H1NoResponse(why))
        elif self._stage == "head":
            self.fail(H1Broken(f"{why} in the middle of the response head"))
        else:
            self.fail(H1Broken(f"{why} in the middle of the body"))

    @property
    def complete(self) -> bool:
        return self._stage == "done" and self._error is None


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
        conn = exchange._conn
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
