"""One exchange's response, parsed by httptools (llhttp) where the bytes arrive.

Place in the map (docs/architecture.md, "Clients"): under ``clients.h1``, whose connection
(``H1Connection``) feeds every network read of a response to an ``H1Exchange`` here, inside the
connection's read (``H1Connection._readable``). llhttp frames the response (status line, headers,
``Content-Length`` or chunked body, 1xx heads before the final one); this module adds what
llhttp leaves to its caller:

- one delivery per network read: the body pieces llhttp hands over while it parses one read are
  joined and go to the consumer once, with that read's time;
- a limit on the response head (``MAX_HEAD_BYTES``; llhttp has none of its own);
- the end of a body that runs to the end of the connection (no ``Content-Length``, not
  chunked): httptools has no end-of-input call, so ``connection_lost`` says that body ended;
- 1xx heads skipped, and only ``HTTP/1.x`` answers taken;
- llhttp's errors turned into ``H1ProtocolError`` in swarm's words ("not an HTTP/1.x status
  line", "malformed header line", "bad Content-Length", "bad chunk size", "chunk data longer
  than its size"), llhttp's own reason after them;
- bytes after the end of a response: the connection is told (``unexpected``) and not reused
  (bare CRLFs right behind it in the same read excepted: llhttp skips those).

llhttp replaced a hand-written parser, the exchange being 3.5-8 times faster with it on the
same reads (``python -m bench h1-parse``, docs/performance.md). It is stricter than that
parser was: a bare LF for CRLF, whitespace after a chunk size, a folded header,
``Content-Length`` beside ``Transfer-Encoding`` and a 101 answer are errors.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Protocol

import httptools

#: Longest response head (status line and headers, 1xx heads before it included) accepted.
MAX_HEAD_BYTES = 64 * 1024

#: ``on_body(data, read_ns, lag_ns)``: a read's body bytes, its receive time on
#: ``perf_counter_ns`` and the client's lag behind it (-1: timed in user space); returns True
#: once the response has shown content (its first token)
BodyCallback = Callable[[bytes, int, int], bool]


class H1NoResponse(ConnectionError):
    """The connection closed or reset before any byte of the response."""


class H1Broken(ConnectionError):
    """The connection closed or reset in the middle of a response."""


class H1ProtocolError(ValueError):
    """The server sent something that is not HTTP/1.x."""


class ExchangeConnection(Protocol):
    """What an ``H1Exchange`` needs of its connection (``clients.h1.H1Connection``)."""

    loop: asyncio.AbstractEventLoop
    uses: int

    def unexpected(self) -> None: ...

    def abort(self) -> None: ...

    def exchange_done(self, exchange: H1Exchange) -> None: ...


class _MoreBytes(Exception):
    """Raised in a parser callback: a second response began after this exchange's ended (it
    reaches ``feed`` as llhttp's ``HttpParserCallbackError``)."""


_PARSE_ERRORS = (httptools.HttpParserError, H1ProtocolError)
_STATUS_WORDS = ("HTTP/", "version", "status", "response line", "dot")
_HEADER_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\r\n]*")
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*([^\r\n]*)")


def _is_chunked(transfer_encoding: str) -> bool:
    """Whether chunked is the last coding (how llhttp reads ``Transfer-Encoding``)."""
    return transfer_encoding.rsplit(",", 1)[-1].strip().lower() == "chunked"


def _parse_error(exc: Exception, in_head: bool, head: bytes) -> H1ProtocolError:
    """Swarm's words for what llhttp (or a callback of ours) rejected; ``head``: the reads of the
    head so far, from the start of the current one (1xx heads before it cut off)."""
    if isinstance(exc, H1ProtocolError):
        return exc
    cause = exc.__context__  # an exception raised in one of our callbacks
    if isinstance(cause, H1ProtocolError):
        return cause
    if cause is not None:
        return H1ProtocolError(f"parser callback failed: {type(cause).__name__}: {cause}")
    reason = str(exc)
    if not in_head:
        if "chunk data" in reason:
            return H1ProtocolError(f"chunk data longer than its size ({reason})")
        if "chunk" in reason:
            return H1ProtocolError(f"bad chunk size ({reason})")
        if "header" in reason:
            return H1ProtocolError(f"malformed trailer line ({reason})")
        return H1ProtocolError(f"bad body framing ({reason})")
    first, _, rest = head.split(b"\r\n\r\n", 1)[0].partition(b"\r\n")
    if "Content-Length" in reason:
        found = _CONTENT_LENGTH.search(head)
        value = found.group(1).decode("latin-1") if found else ""
        return H1ProtocolError(f"bad Content-Length: {value!r} ({reason})")
    if "Upgrade" in reason:  # a 101: swarm asks for no protocol switch
        return H1ProtocolError(f"101 Switching Protocols, which swarm never asks for ({reason})")
    if b"\r\n" not in head or any(word in reason for word in _STATUS_WORDS):
        return H1ProtocolError(f"not an HTTP/1.x status line: {first[:100]!r} ({reason})")
    bad = next((line for line in rest.split(b"\r\n") if not _HEADER_LINE.fullmatch(line)), None)
    where = f": {bad[:100]!r}" if bad else ""
    return H1ProtocolError(f"malformed header line{where} ({reason})")


class H1Exchange:
    """One request and its response on one connection.

    ``headers()`` waits for the status and headers; then either ``stream(on_body)`` (every
    read's body bytes go to ``on_body(data, read_ns, lag_ns)`` inside the connection's read, and
    the call returns at the end of the body) or ``read(limit)`` (the body, at most ``limit``
    bytes, as one bytes object).

    The exchange is itself the parser's protocol object: its ``on_*`` members are llhttp's
    callbacks, ``on_body`` being the bound ``append`` of the current read's body pieces (no
    Python frame per chunk).
    """

    __slots__ = (
        "_body_done",
        "_buffer",
        "_buffered",
        "_conn",
        "_error",
        "_got_any",
        "_head",
        "_head_done",
        "_limit",
        "_loop",
        "_on_body",
        "_parser",
        "_pending",
        "_pieces",
        "_stage",
        "headers_map",
        "keep_alive",
        "on_body",
        "status",
    )

    def __init__(self, conn: ExchangeConnection) -> None:
        self._conn = conn
        self._loop = conn.loop
        self._head = bytearray()  # the reads of the head so far: its limit, and the error texts
        self._head_done: asyncio.Future[None] = self._loop.create_future()
        self._body_done: asyncio.Future[None] = self._loop.create_future()
        self._stage = "head"  # head, body, done
        self._pieces: list[bytes] = []  # body bytes of the read being parsed
        self.on_body = self._pieces.append
        self._on_body: BodyCallback | None = None
        self._pending: list[tuple[bytes, int, int]] = []  # body read before a consumer was set
        self._buffer: list[bytes] | None = None
        self._buffered = 0
        self._limit = 0
        self._error: BaseException | None = None
        self._got_any = False
        self.status = 0
        self.headers_map: dict[str, str] = {}
        self.keep_alive = True
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)

    @property
    def connection(self) -> ExchangeConnection:
        return self._conn

    @property
    def in_body(self) -> bool:
        """The response head has been read, the body has not ended."""
        return self._stage == "body"

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
        for data, stamp, lag in pending:
            on_body(data, stamp, lag)
        await self._body_done

    async def read(self, limit: int = 1 << 20) -> bytes:
        """The body (at most ``limit`` bytes kept; the rest is read and dropped)."""
        self._buffer = []
        self._limit = limit
        pending, self._pending = self._pending, []
        for data, _, _ in pending:
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

    def feed(self, data: bytes, stamp: int, lag: int = -1) -> bool:
        """Bytes from the network, read at ``stamp`` (``lag`` behind it; called by the
        connection; never raises). True once the response needs no arrival stamps any more:
        its consumer saw content, it is read whole, or it ended."""
        parser = self._parser
        if parser is None:  # the response has ended, or failed (the connection is closing)
            if self._stage == "done":
                self._conn.unexpected()
            return True
        pieces = self._pieces
        try:
            if self._stage == "head":
                self._got_any = True
                self._head += data
                parser.feed_data(data)
                if self._stage == "head" and len(self._head) > MAX_HEAD_BYTES:
                    raise H1ProtocolError(f"response head longer than {MAX_HEAD_BYTES} bytes")
            else:
                parser.feed_data(data)
        except _PARSE_ERRORS as exc:
            if self._stage != "done":
                pieces.clear()
                self.fail(_parse_error(exc, self._stage == "head", bytes(self._head)))
                self._conn.abort()
                return True
            self._conn.unexpected()  # more than the response: the rest of it is still good
        seen = self._buffer is not None
        if pieces:  # this read's body, as one bytes object
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            on_body = self._on_body
            if on_body is None:
                self._hold(body, stamp, lag)
            else:
                try:
                    seen = on_body(body, stamp, lag)
                except Exception as exc:  # the consumer's own error (bad stream): it ends the exchange
                    self.fail(exc)
                    self._conn.abort()
                    return True
        if self._stage == "done":
            self._finish()
            return True
        return seen

    def _hold(self, body: bytes, stamp: int, lag: int) -> None:
        """Body bytes before ``stream`` set a consumer: into ``read``'s buffer, or kept for later."""
        if self._buffer is not None:
            self._keep(body)
        else:
            self._pending.append((body, stamp, lag))

    # -- llhttp's callbacks (inside ``feed_data``) --------------------------------------------

    def on_message_begin(self) -> None:
        if self._stage == "done":
            raise _MoreBytes
        self.headers_map = {}  # after a 1xx head: its headers are not the answer's

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.strip().decode("latin-1")  # llhttp keeps trailing whitespace
        headers = self.headers_map
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None
        status = parser.get_status_code()
        if status < 200:  # informational: llhttp ends it here, and another head follows
            return
        if not self._head.startswith(b"HTTP/1.") or not parser.get_http_version().startswith("1."):
            first = bytes(self._head.split(b"\r\n", 1)[0][:100])
            raise H1ProtocolError(f"not an HTTP/1.x status line: {first!r}")
        self.status = status
        self.keep_alive = parser.should_keep_alive()
        self._head.clear()
        self._stage = "body"
        if not self._head_done.done():
            self._head_done.set_result(None)

    def on_message_complete(self) -> None:
        if self._stage == "body":
            self._stage = "done"
        else:  # a 1xx head (no body): the next head's bytes start after its blank line
            end = self._head.find(b"\r\n\r\n")
            del self._head[: end + 4 if end >= 0 else 0]

    # -- the end ------------------------------------------------------------------------------

    def _finish(self) -> None:
        self._parser = None  # the parser holds the exchange's callbacks: no cycle left behind
        if not self._head_done.done():
            self._head_done.set_result(None)
        if not self._body_done.done():
            self._body_done.set_result(None)
        self._conn.exchange_done(self)

    def fail(self, exc: BaseException) -> None:
        self._parser = None
        if self._error is None:
            self._error = exc
        for fut in (self._head_done, self._body_done):
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # marked retrieved: the sender may have stopped listening

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._stage == "done":
            return
        headers = self.headers_map
        if (
            self._stage == "body"
            and "content-length" not in headers
            and not _is_chunked(headers.get("transfer-encoding", ""))
        ):
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
