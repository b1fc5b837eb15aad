"""A small streaming HTTP/1.1 client on raw sockets in the event loop: the hot path to plaintext targets.

Place in the map (docs/architecture.md, "Clients"): under the EngineClient, beside aiohttp (which still serves
``https://`` targets, the probe and the scrapers). Why a client of our own: with aiohttp every
network read of a stream wakes the reading task through a StreamReader, and at hundreds of
streams those wake-ups are most of a core and the tail of the client's own delay
(docs/performance.md). Here the response is parsed where the bytes arrive, in the connection's read
(``H1Connection._readable``), by httptools (llhttp) in ``clients.h1_parse``: the status line and headers,
then the body (``Content-Length``, chunked, or to the end of the connection), handed to the
exchange's ``on_body`` callback together with the time of the read. The sending task awaits
once for the headers and once for the end. Each connection owns its socket and reads it with
``recvmsg`` (``loop.add_reader``), so every read carries the kernel's receive stamp
(``clients.rx_stamps``): the time of the read is that stamp, and the read's lag behind it goes
along.

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
from swarm.clients.rx_stamps import ANCILLARY_BYTES, CLOCKS, arrival_watcher, enable, stamp_of
from swarm.clients.transport import DEAD_POOLED_RETRIES, ExchangeFailure, ReadCallback, no_response
from swarm.record import Status

log = logging.getLogger(__name__)

_perf_ns = time.perf_counter_ns


class H1ConnectError(OSError):
    """The connection could not be made (refused, unreachable, timed out)."""


#: Bytes asked of one read. ``recvmsg`` allocates them before it reads and shrinks the result
#: to what came: at 256 KiB (what asyncio's transports ask) the allocation is over glibc's mmap
#: threshold (128 KiB) until the process has freed a mapping that large, which raises it; until
#: then every read maps fresh pages (10 us against 1.4 us a 200-byte read on this project's
#: 2-core machine). 64 KiB is under it in any process; a longer response takes more reads.
READ_BYTES = 64 * 1024


class H1Connection:
    """One keep-alive TCP connection; carries one exchange at a time.

    The connection owns its socket and reads it itself, with ``recvmsg``, so that every read
    comes with the kernel's receive stamp (``clients.rx_stamps``): each read's bytes go to the
    exchange with that stamp (on ``perf_counter_ns``) and the read's own lag (user-space time
    minus the stamp; -1 when the kernel gave no stamp and the read is timed in user space).
    With ``watch_first``, from the response head until its first token the process's arrival
    watcher notes every arrival on the socket, and reads are cut at those arrivals so the first
    token keeps its own stamp however late the loop reads it.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, key: tuple[str, int], sock: socket.socket) -> None:
        self.loop = loop
        self.key = key
        self.sock = sock
        self.fd = sock.fileno()
        self.current: H1Exchange | None = None
        self.closed = False
        self.uses = 0
        self.idle_since = 0.0
        #: the kernel stamps this socket's reads
        self.stamped = False
        #: have the arrival watcher note arrivals from the response head to its first token
        self.watch_first = False
        #: bytes read since the connection was made (the kernel's ``bytes_received`` at the end
        #: of the last read)
        self.received = 0
        #: arrivals the watcher noted: (bytes received, stamp on perf_counter_ns)
        self.arrivals: list[tuple[int, int]] = []
        self._watched = False
        self._out: memoryview | None = None
        loop.add_reader(self.fd, self._readable)

    # -- reading ------------------------------------------------------------------------------

    def _readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(READ_BYTES, ANCILLARY_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        now = _perf_ns()
        if not data:
            self._lost(None)
            return
        stamp = stamp_of(ancillary) if ancillary else None
        if stamp is None:
            read_ns, lag_ns = now, -1
        else:
            read_ns = min(CLOCKS.to_perf_ns(stamp, now), now)
            lag_ns = now - read_ns
        start = self.received
        self.received = start + len(data)
        current = self.current
        if current is None:
            self.unexpected()
            return
        if self.arrivals:
            seen = self._feed_by_arrival(current, data, start, read_ns, now)
        else:
            seen = current.feed(data, read_ns, lag_ns)
        if seen:
            if self._watched:
                self._unwatch()
        elif self.watch_first and not self._watched and current.in_body:
            self._watch()  # the head is in: the next arrival is likely the first token

    def _feed_by_arrival(self, current: H1Exchange, data: bytes, start: int, read_ns: int, now: int) -> bool:
        """Feed ``data`` (stream bytes from ``start``) cut where the watcher saw arrivals end,
        each piece with its own arrival's stamp; the rest with the read's."""
        arrivals, self.arrivals = self.arrivals, []
        end = start + len(data)
        at = start
        seen = False
        for received, stamp_ns in arrivals:
            if received <= at:
                continue  # read already
            if received >= end:
                if received > end:
                    self.arrivals.append((received, stamp_ns))  # beyond this read: for the next
                continue
            stamp_ns = min(stamp_ns, read_ns)
            seen = current.feed(data[at - start : received - start], stamp_ns, now - stamp_ns)
            at = received
        if at < end:
            seen = current.feed(data[at - start :], read_ns, now - read_ns)
        return seen

    def _note_arrival(self, received: int, stamp_ns: int) -> None:
        """The watcher's note (called in its thread): bytes received so far, and when."""
        self.arrivals.append((received, stamp_ns))

    def _watch(self) -> None:
        self._watched = arrival_watcher().watch(self.sock, self._note_arrival)

    def _unwatch(self) -> None:
        self._watched = False
        arrival_watcher().unwatch(self.sock)

    # -- writing ------------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._lost(exc)
            return
        if sent < len(data):
            self._out = memoryview(data)[sent:]
            self.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        out = self._out
        if out is None:
            self.loop.remove_writer(self.fd)
            return
        try:
            sent = self.sock.send(out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        out = out[sent:]
        if len(out):
            self._out = out
        else:
            self._out = None
            self.loop.remove_writer(self.fd)

    # -- the end ------------------------------------------------------------------------------

    def _lost(self, exc: Exception | None) -> None:
        """The connection ended under us (closed by the server, reset): the exchange hears now."""
        current, self.current = self.current, None
        self._close()
        if current is not None:
            current.connection_lost(exc)

    def unexpected(self) -> None:
        """Bytes the protocol did not ask for: the connection cannot be trusted any more."""
        self.abort()

    def abort(self) -> None:
        """Close the connection now; an exchange still on it hears of it on the next turn."""
        current, self.current = self.current, None
        self._close()
        if current is not None:
            self.loop.call_soon(current.connection_lost, None)

    def _close(self) -> None:
        self.closed = True
        if self.sock.fileno() < 0:
            return
        if self._watched:
            self._unwatch()
        self.loop.remove_reader(self.fd)
        if self._out is not None:
            self._out = None
            self.loop.remove_writer(self.fd)
        self.sock.close()

    def start(self, request: bytes) -> H1Exchange:
        assert self.current is None
        self.uses += 1
        exchange = H1Exchange(self)
        if self.closed:  # closed or reset between the connect and now (a refusing server)
            exchange.fail(H1NoResponse("closed by the server"))
            return exchange
        self.current = exchange
        self.arrivals.clear()
        self._write(request)
        return exchange

    def exchange_done(self, exchange: H1Exchange) -> None:
        if self.current is exchange:
            self.current = None
        if self._watched:
            self._unwatch()
        if not exchange.keep_alive:
            self.abort()


async def connect(
    loop: asyncio.AbstractEventLoop, key: tuple[str, int], *, receive_stamps: bool, watch_first: bool = False
) -> H1Connection:
    """A new connection to ``key`` (host, port), its reads stamped by the kernel if asked, and
    with ``watch_first`` its arrivals noted until each response's first token."""
    host, port = key
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        conn = H1Connection(loop, key, sock)
        conn.stamped = receive_stamps and enable(sock)
        conn.watch_first = conn.stamped and watch_first
        return conn
    raise error or OSError(f"no address for {host}")


class H1Pool:
    """Keep-alive connections per (host, port), opened on demand.

    ``exchange(host, port, request)`` sends ``request`` (the complete request bytes) on an
    idle connection or a new one. Call ``release(exchange)`` when done with the response: a
    complete exchange on a keep-alive connection returns it to the pool, anything else closes
    it. Must be used inside one running event loop; ``await close()`` closes every connection.
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float | None = 10.0,
        keepalive_s: float = 60.0,
        receive_stamps: bool = True,
        watch_first_token: bool = False,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        #: read the kernel's receive stamp of every read (``clients.rx_stamps``); off: user space
        self.receive_stamps = receive_stamps
        #: the arrival watcher dates each first token by its own arrival (``clients.rx_stamps``)
        self.watch_first_token = watch_first_token
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
        opening = connect(loop, key, receive_stamps=self.receive_stamps, watch_first=self.watch_first_token)
        try:
            if self.connect_timeout_s is None:
                conn = await opening
            elif hasattr(asyncio, "timeout"):  # 3.11: a timer on this task (wait_for makes a task per connect)
                async with asyncio.timeout(self.connect_timeout_s):
                    conn = await opening
            else:
                conn = await asyncio.wait_for(opening, self.connect_timeout_s)
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
