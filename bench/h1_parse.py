"""HTTP/1.1 response parsing: the client's parser (httptools) beside the hand-written one it replaced.

Both parse the same streamed answer, byte for byte what the emulator sends for a 200-token
chat completion: an aiohttp response head, then a chunked SSE body of one chunk per event (role,
200 content events, finish, usage, ``[DONE]``) and the last chunk. The reads are cut three ways:

- ``1 chunk/read``: every event arrives alone (a client that keeps up);
- ``8 chunks/read``: events arrive in batches (a lagging client, or a fast engine);
- ``1460-byte reads``: cut at segment size, whatever the framing (chunks split over reads).

Each side does what the client needs from a response: status, lower-case headers (repeated ones
joined), keep-alive, and one body bytes object per read handed to a consumer (the SSE reader
wants a read's events together, with the read's time). The httptools side is the client's own
``H1Exchange`` (``clients/h1_parse.py``: llhttp and swarm's checks around it) fed by a stand-in
connection; the baseline is ``_PreviousExchange`` below, a copy of the hand-written parser the
client used before, kept in this file only for this comparison. Both must hand over the same
body bytes. The figure is CPU microseconds per response, best of ``REPEATS`` (the machine is
shared); the ratio is hand-written / httptools (above 1: httptools is faster).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from bench.common import Row
from swarm.clients.h1_parse import MAX_HEAD_BYTES, BodyCallback, H1Exchange, H1ProtocolError

TOKENS = 200
RESPONSES = 400
REPEATS = 5
SEGMENT_BYTES = 1460

_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\n"
    b"X-Request-Id: run-0123/9f8e7d6c5b4a3921\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"Date: Tue, 04 Mar 2025 10:00:00 GMT\r\n"
    b"Server: swarm-emulator\r\n\r\n"
)


def _events() -> list[bytes]:
    """The SSE events of one answer, as the emulator writes them (one write, one chunk)."""
    head = b'data: {"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1741082400,"model":"m",'
    events = [
        head
        + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
    ]
    for i in range(TOKENS):
        word = b'"tok%d"' % i if i == 0 else b'" tok%d"' % i
        events.append(
            head
            + b'"choices":[{"index":0,"delta":{"content":'
            + word
            + b'},"logprobs":null,"finish_reason":null}]}\n\n'
        )
    events.append(head + b'"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}\n\n')
    events.append(
        head + b'"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":200,"total_tokens":300}}\n\n'
    )
    events.append(b"data: [DONE]\n\n")
    return events  # fmt: skip


def _framed(events: list[bytes]) -> list[bytes]:
    """The chunks on the wire, the head in front of the first and the last chunk at the end."""
    chunks = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    chunks[0] = _HEAD + chunks[0]
    chunks[-1] += b"0\r\n\r\n"
    return chunks


def read_patterns() -> dict[str, list[bytes]]:
    chunks = _framed(_events())
    wire = b"".join(chunks)
    return {
        "1 chunk/read": chunks,
        "8 chunks/read": [b"".join(chunks[i : i + 8]) for i in range(0, len(chunks), 8)],
        f"{SEGMENT_BYTES}-byte reads": [
            wire[i : i + SEGMENT_BYTES] for i in range(0, len(wire), SEGMENT_BYTES)
        ],
    }


class _Connection:
    """What an exchange needs of its connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.uses = 1

    def unexpected(self) -> None:
        raise AssertionError("unexpected bytes")

    def abort(self) -> None:
        raise AssertionError("aborted")

    def exchange_done(self, exchange: object) -> None:
        pass


class _PreviousExchange:
    """THE PREVIOUS PARSER, kept only for this comparison: swarm's hand-written ``H1Exchange``
    (``clients/h1.py``, then ``engines/h1.py``, up to the switch to httptools), its construction and ``feed`` path byte
    for byte; the awaiting side (``headers``, ``stream``, ``read``, ``connection_lost``) left
    out, the bench not using it."""

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

    def __init__(self, conn: _Connection) -> None:
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
                on_body(body, stamp, -1)
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

    @property
    def complete(self) -> bool:
        return self._stage == "done" and self._error is None


def _hand_written(
    loop: asyncio.AbstractEventLoop, reads: list[bytes], sink: Callable[[bytes, int, int], bool]
) -> int:
    exchange = _PreviousExchange(_Connection(loop))
    exchange._on_body = sink  # what ``stream(on_body)`` sets
    for data in reads:
        exchange.feed(data, 0)
    assert exchange.complete
    return exchange.status


def _httptools(
    loop: asyncio.AbstractEventLoop, reads: list[bytes], sink: Callable[[bytes, int, int], bool]
) -> int:
    exchange = H1Exchange(_Connection(loop))
    exchange._on_body = sink  # what ``stream(on_body)`` sets
    for data in reads:
        exchange.feed(data, 0)
    assert exchange.complete
    return exchange.status


def _best_us(parse: Callable[..., int], loop: asyncio.AbstractEventLoop, reads: list[bytes]) -> float:
    """CPU microseconds per response, the best of ``REPEATS`` rounds of ``RESPONSES``."""

    def sink(_data: bytes, _ns: int, _lag: int) -> bool:
        pass

    best = float("inf")
    for _ in range(REPEATS):
        c0 = time.process_time()
        for _ in range(RESPONSES):
            parse(loop, reads, sink)
        best = min(best, (time.process_time() - c0) / RESPONSES * 1e6)
    return best


def _body(
    parse: Callable[..., int], loop: asyncio.AbstractEventLoop, reads: list[bytes]
) -> tuple[int, bytes]:
    got: list[bytes] = []
    status = parse(loop, reads, lambda data, _ns: got.append(data))
    return status, b"".join(got)


def run() -> list[Row]:
    loop = asyncio.new_event_loop()
    try:
        expected = b"".join(_events())
        rows = []
        for name, reads in read_patterns().items():
            for parse in (_hand_written, _httptools):
                if _body(parse, loop, reads) != (200, expected):
                    raise RuntimeError(f"{parse.__name__} parsed {name} wrongly")
            hand = llhttp = float("inf")
            for _ in range(2):  # alternating, best of each: this machine's noise is large
                hand = min(hand, _best_us(_hand_written, loop, reads))
                llhttp = min(llhttp, _best_us(_httptools, loop, reads))
            rows.append(
                Row(
                    f"h1-parse: response head + chunked SSE body ({TOKENS} tokens, {len(reads)} reads: "
                    f"{name}), previous hand-written vs the client's (httptools)",
                    hand,
                    "cpu-us/response",
                    baseline=llhttp,
                    ratio=hand / llhttp,
                )
            )
        return rows
    finally:
        loop.close()
