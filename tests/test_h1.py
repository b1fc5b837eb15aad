"""swarm's HTTP/1.1 client: response framing for any split of the bytes, and its pool."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.clients.h1 import H1Broken, H1Exchange, H1NoResponse, H1Pool, H1ProtocolError


class FakeConnection:
    """What an H1Exchange needs of its connection, recording what it was told."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.uses = 1
        self.aborted = False
        self.unexpected_bytes = False
        self.done = False

    def unexpected(self) -> None:
        self.unexpected_bytes = True

    def abort(self) -> None:
        self.aborted = True

    def exchange_done(self, exchange: H1Exchange) -> None:
        self.done = True


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


def _chunked(body: bytes, sizes: list[int]) -> bytes:
    out, pos = [], 0
    for size in sizes:
        if pos >= len(body):
            break
        piece = body[pos : pos + max(1, size)]
        pos += len(piece)
        out.append(b"%x\r\n%s\r\n" % (len(piece), piece))
    if pos < len(body):
        out.append(b"%x;ext=1\r\n%s\r\n" % (len(body) - pos, body[pos:]))
    return b"".join(out) + b"0\r\nX-Trailer: 1\r\n\r\n"


async def _run(pieces: list[bytes], *, stream: bool = True) -> tuple[H1Exchange, bytes, FakeConnection]:
    loop = asyncio.get_running_loop()
    conn = FakeConnection(loop)
    exchange = H1Exchange(conn)  # type: ignore[arg-type]
    got: list[bytes] = []

    async def consume() -> bytes:
        await exchange.headers()
        if stream:
            await exchange.stream(lambda data, stamp, lag: bool(got.append(data)))
            return b"".join(got)
        return await exchange.read()

    task = asyncio.ensure_future(consume())
    for i, piece in enumerate(pieces):
        exchange.feed(piece, i)
        await asyncio.sleep(0)
    exchange.connection_lost(None)
    return exchange, await asyncio.wait_for(task, 5), conn


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=300), sizes=st.lists(st.integers(1, 50), max_size=10),
       cuts=st.lists(st.integers(0, 10_000), max_size=12), stream=st.booleans())  # fmt: skip
def test_chunked_body_is_the_same_for_any_split(
    body: bytes, sizes: list[int], cuts: list[int], stream: bool
) -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(
        body, sizes
    )

    async def main() -> None:
        exchange, got, conn = await _run(_split(raw, cuts), stream=stream)
        assert got == body and exchange.status == 200 and exchange.complete and exchange.keep_alive
        assert conn.done and not conn.unexpected_bytes

    asyncio.run(main())


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=200), cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_content_length_body_for_any_split(body: bytes, cuts: list[int]) -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n%s" % (len(body), body)

    async def main() -> None:
        exchange, got, _ = await _run(_split(raw, cuts))
        assert got == body and exchange.complete and exchange.keep_alive

    asyncio.run(main())


async def test_body_to_the_end_of_the_connection() -> None:
    exchange, got, _ = await _run([b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello ", b"world"])
    assert got == b"hello world" and exchange.complete and not exchange.keep_alive


async def test_connection_close_header_is_honoured() -> None:
    exchange, _, _ = await _run([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"])
    assert exchange.complete and not exchange.keep_alive


async def test_headers_are_lower_case_and_repeated_ones_joined() -> None:
    exchange, _, _ = await _run(
        [b"HTTP/1.1 429 Too Many\r\nRetry-After: 3\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 0\r\n\r\n"]
    )
    assert exchange.status == 429 and exchange.headers_map["retry-after"] == "3"
    assert exchange.headers_map["x-a"] == "1, 2"


@pytest.mark.parametrize(
    ("pieces", "error", "text"),
    [
        ([], H1NoResponse, "closed by the server"),
        ([b"HTTP/1.1 200 OK\r\nContent-Le"], H1Broken, "in the middle of the response head"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"], H1Broken, "in the middle of the body"),
        (
            [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"],
            H1Broken,
            "in the middle of the body",
        ),
        ([b"SSH-2.0-OpenSSH\r\n\r\n"], H1ProtocolError, "not an HTTP/1.x status line"),
        ([b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"], H1ProtocolError, "malformed header line"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"], H1ProtocolError, "bad Content-Length"),
        ([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"], H1ProtocolError, "bad chunk size"),
        (
            [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc\r\n"],
            H1ProtocolError,
            "longer than its size",
        ),
        ([b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20_000], H1ProtocolError, "longer than"),
    ],
)
async def test_broken_responses_raise_their_own_errors(pieces: list[bytes], error: type, text: str) -> None:
    with pytest.raises(error, match=text):
        await _run(pieces)


async def test_a_consumer_error_ends_the_exchange() -> None:
    loop = asyncio.get_running_loop()
    conn = FakeConnection(loop)
    exchange = H1Exchange(conn)  # type: ignore[arg-type]
    exchange.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n", 0)
    await exchange.headers()

    def bad(data: bytes, stamp: int, lag: int) -> bool:
        raise ValueError("bad event")

    task = asyncio.ensure_future(exchange.stream(bad))
    await asyncio.sleep(0)
    exchange.feed(b"oops", 1)
    with pytest.raises(ValueError, match="bad event"):
        await task
    assert conn.aborted


async def test_read_times_are_the_reads_times() -> None:
    loop = asyncio.get_running_loop()
    exchange = H1Exchange(FakeConnection(loop))  # type: ignore[arg-type]
    exchange.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nab", 10)  # body before a consumer
    seen: list[tuple[bytes, int]] = []
    task = asyncio.ensure_future(exchange.stream(lambda d, t, lag: bool(seen.append((d, t)))))
    await asyncio.sleep(0)
    exchange.feed(b"cd", 20)
    exchange.feed(b"ef", 30)
    await task
    assert seen == [(b"ab", 10), (b"cd", 20), (b"ef", 30)]


async def test_pool_reuses_keep_alive_connections_and_drops_closed_ones() -> None:
    served: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            length = int(
                next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
            )
            await reader.readexactly(length)
            n += 1
            served.append(n)
            close = n == 2  # the second request of a connection is answered with Connection: close
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                + (b"Connection: close\r\n" if close else b"")
                + b"\r\nok"
            )
            await writer.drain()
            if close:
                break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = H1Pool()
    try:
        reused = []
        for _ in range(4):
            exchange = await pool.exchange(
                "127.0.0.1", port, b"POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\nx"
            )
            await exchange.headers()
            assert await exchange.read() == b"ok"
            reused.append(exchange.reused)
            pool.release(exchange)
            await asyncio.sleep(0.01)
        assert reused == [False, True, False, True]  # a new connection after each close
        assert pool.opened == 2
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()


async def test_a_connection_reset_before_the_request_is_no_response_at_once() -> None:
    """A refusing server resets a connection just accepted; the reset can be handled before the
    request is written. The request then fails as 'no response' at once, instead of waiting
    on a dead connection until a deadline (a timeout row for a request no server saw)."""
    import socket
    import struct

    from swarm.clients.h1 import H1Connection

    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    conn = H1Connection(loop, ("127.0.0.1", 1), ours)
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    theirs.close()  # the peer goes: the connection reads its end
    for _ in range(20):
        await asyncio.sleep(0.01)
        if conn.closed:
            break
    assert conn.closed
    exchange = conn.start(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    with pytest.raises(H1NoResponse, match="closed by the server"):
        await asyncio.wait_for(exchange.headers(), 1)
    assert not exchange.reused


def test_a_connect_that_hangs_fails_after_the_pools_connect_timeout() -> None:
    """A server whose accept queue is full drops new handshakes, so a connect waits: the pool
    gives up after its connect timeout with an error saying so, and the task goes on."""
    import socket

    from swarm.clients.h1 import H1ConnectError

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)  # never accepted: the queue fills with the first connection or two
    port = server.getsockname()[1]
    filler: list[socket.socket] = []

    async def main() -> str:
        loop = asyncio.get_running_loop()
        for _ in range(4):  # fill the accept queue (its size is the backlog plus one or so)
            sock = socket.socket()
            sock.setblocking(False)
            filler.append(sock)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", port)), 0.2)
            except asyncio.TimeoutError:
                break
            except OSError:  # a kernel that refuses past the queue (tcp_abort_on_overflow)
                pytest.skip("the kernel refuses handshakes past the accept queue")
        else:
            pytest.skip("the kernel kept accepting handshakes")
        pool = H1Pool(connect_timeout_s=0.3)
        with pytest.raises(H1ConnectError, match=r"timed out after 0\.3 s"):
            await pool.exchange("127.0.0.1", port, b"GET / HTTP/1.1\r\n\r\n")
        await asyncio.sleep(0)  # the task itself was not left cancelled
        return "went on"

    try:
        assert asyncio.run(main()) == "went on"
    finally:
        for sock in filler:
            sock.close()
        server.close()
