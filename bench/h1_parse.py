"""HTTP/1.1 response parsing: swarm's hand-written parser (``engines.h1``) beside httptools (llhttp).

Both parse the same streamed answer, byte for byte what the emulator sends for a 200-token
chat completion: an aiohttp response head, then a chunked SSE body of one chunk per event (role,
200 content events, finish, usage, ``[DONE]``) and the last chunk. The reads are cut three ways:

- ``1 chunk/read``: every event arrives alone (a client that keeps up);
- ``8 chunks/read``: events arrive in batches (a lagging client, or a fast engine);
- ``1460-byte reads``: cut at segment size, whatever the framing (chunks split over reads).

Each side does what a client needs from a response: status, lower-case headers (repeated ones
joined), keep-alive, and one body bytes object per read handed to a consumer (the SSE reader
wants a read's events together, with the read's time). The hand-written side is ``H1Exchange``
itself fed by a stand-in connection; the httptools side is an ``HttpResponseParser`` whose
``on_body`` pieces are joined per read, with the same two futures per response that an exchange
holds. Both must hand over the same body bytes. The figure is CPU microseconds per response,
best of ``REPEATS`` (the machine is shared); the ratio is hand-written / httptools (above 1:
httptools is faster). Skipped, with a note, when httptools is not installed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from bench.common import Row

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
    """What an ``H1Exchange`` needs of its connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.uses = 1

    def unexpected(self) -> None:
        raise AssertionError("unexpected bytes")

    def abort(self) -> None:
        raise AssertionError("aborted")

    def exchange_done(self, exchange: object) -> None:
        pass


def _hand_written(
    loop: asyncio.AbstractEventLoop, reads: list[bytes], sink: Callable[[bytes, int], None]
) -> int:
    from swarm.engines.h1 import H1Exchange

    exchange = H1Exchange(_Connection(loop))  # type: ignore[arg-type]
    exchange._on_body = sink  # what ``stream(on_body)`` sets
    for data in reads:
        exchange.feed(data, 0)
    assert exchange.complete
    return exchange.status


class _Httptools:
    """A response parsed by httptools, delivered per read as ``H1Exchange`` delivers it."""

    __slots__ = ("body_done", "done", "head_done", "headers", "keep_alive", "parser", "pieces", "status")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        import httptools

        self.head_done: asyncio.Future[None] = loop.create_future()
        self.body_done: asyncio.Future[None] = loop.create_future()
        self.headers: dict[str, str] = {}
        self.pieces: list[bytes] = []
        self.status = 0
        self.keep_alive = True
        self.done = False
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = self.headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        self.head_done.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        self.done = True
        self.body_done.set_result(None)


def _httptools(
    loop: asyncio.AbstractEventLoop, reads: list[bytes], sink: Callable[[bytes, int], None]
) -> int:
    response = _Httptools(loop)
    feed = response.parser.feed_data
    pieces = response.pieces
    for data in reads:
        feed(data)
        if pieces:
            sink(pieces[0] if len(pieces) == 1 else b"".join(pieces), 0)
            pieces.clear()
    assert response.done
    return response.status


def _best_us(parse: Callable[..., int], loop: asyncio.AbstractEventLoop, reads: list[bytes]) -> float:
    """CPU microseconds per response, the best of ``REPEATS`` rounds of ``RESPONSES``."""

    def sink(_data: bytes, _ns: int) -> None:
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
    try:
        import httptools  # noqa: F401 - only whether it is there
    except ImportError:
        return [Row("h1-parse (skipped: httptools is not installed; pip install httptools)", None, "-")]
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
                    f"{name}), hand-written vs httptools",
                    hand,
                    "cpu-us/response",
                    baseline=llhttp,
                    ratio=hand / llhttp,
                )
            )
        return rows
    finally:
        loop.close()
