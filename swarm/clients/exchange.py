"""One request's exchange with a server over a Transport, timing every read.

Place in the map (docs/architecture.md, "Clients"): inside the EngineClient. ``HttpEngineClient.send`` builds the
record; ``run_exchange`` here posts the bytes through the transport's endpoint
(``clients.transport``: swarm's own HTTP/1.1 client or aiohttp) and reads the answer into the
StreamDecoder, timing every network read. Every failure leaves it as ``ExchangeFailure`` (a
status and an error text): the transports map their own exceptions, this module maps an HTTP
error response and a bad stream (``ChunkError``, ``SSEError``). Cancellation passes through.

Both transports share the reading (``StreamReading``): split each read into SSE events, count
or decode them, and give every content event the read's arrival time. With aiohttp a task
iterates the reads; with ``h1`` the same code runs inside the connection's read.

A request that dies on a *reused* keep-alive connection before any byte of a response was
never seen by the server (it had closed the idle connection): the transport sends it again on
a fresh connection, clock restarted (``Call.restart``). A failure on a fresh connection is
never sent again.
"""

from __future__ import annotations

import email.utils
import html
import itertools
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from swarm.clients.dialects import CONTENT_KEYS, ChunkError, StreamDecoder, plain_events_in
from swarm.clients.sse import SSEError, SSEParser
from swarm.clients.transport import Endpoint, ExchangeFailure
from swarm.engines.emulated import REPLICA_HEADER
from swarm.jsoncodec import loads
from swarm.record import Status

_perf_ns = time.perf_counter_ns

_SENT_STAMP = re.compile(rb'"swarm_sent_ns":(\d+)')

#: Bytes of an error response's body kept for its text.
ERROR_BODY_BYTES = 65536


class Deadlines(Protocol):
    """What the reading needs of the client's watchdog."""

    def read_at(self, read_ns: int) -> None:
        """A read arrived at ``read_ns``; raises ``ExchangeFailure`` when the silence before it
        ran past a deadline."""

    def first_token_seen(self) -> None: ...


class Call:
    """The mutable part of one send: its clock anchors (restarted on a resend), the HTTP
    status once known, and extra facts for the record."""

    __slots__ = ("extra", "http_status", "replica", "sent_wall", "t0", "wall_clock")

    def __init__(self, wall_clock: Callable[[], int]) -> None:
        self.wall_clock = wall_clock
        self.sent_wall = wall_clock()
        self.t0 = _perf_ns()
        self.http_status: int | None = None
        #: the replica that answered, where the response names it (``REPLICA_HEADER``)
        self.replica: str | None = None
        self.extra: dict[str, Any] = {}

    def restart(self) -> None:
        self.sent_wall = self.wall_clock()
        self.t0 = _perf_ns()


class StreamReading:
    """Turns the reads of one streamed response into decoded events and ``chunk_ns``."""

    __slots__ = (
        "_feed_many",
        "_key",
        "_parse",
        "call",
        "chunk_lag_ns",
        "chunk_ns",
        "decoder",
        "done",
        "last_read_ns",
        "parser",
        "stamp_delays",
        "user_timed",
        "watchdog",
    )

    def __init__(
        self,
        decoder: StreamDecoder,
        chunk_ns: list[int],
        call: Call,
        watchdog: Deadlines,
        stamp_delays: list[int] | None,
    ) -> None:
        self.decoder = decoder
        self.chunk_ns = chunk_ns
        self.call = call
        self.watchdog = watchdog
        self.stamp_delays = stamp_delays
        #: per content event, the client's lag behind its receive stamp (user-space time of its
        #: read minus the kernel's stamp; 0 for an event timed in user space)
        self.chunk_lag_ns: list[int] = []
        #: content events timed in user space (no kernel stamp for their read)
        self.user_timed = 0
        #: the receive time of the latest read (the end of the body, once it has ended)
        self.last_read_ns = 0
        self.parser = SSEParser()
        self.done = False
        #: the content key when events are only counted (no text kept): reads are then counted
        #: on their raw bytes where they can be
        self._key = None if decoder.keep_text else CONTENT_KEYS.get(decoder.dialect)
        self._feed_many = decoder.feed_many
        self._parse = self.parser.feed

    def on_read(self, data: bytes, read_ns: int, lag_ns: int = -1) -> bool:
        """One network read arrived at ``read_ns`` (perf_counter_ns: the kernel's receive stamp,
        or the user-space time of the read when ``lag_ns`` is -1), ``lag_ns`` before the client
        read it. True once the response has shown content."""
        self.last_read_ns = read_ns
        self.watchdog.read_at(read_ns)
        if self._key is not None and self.parser.idle and data.endswith(b"\n\n"):
            count = self._count_raw(data)
            if count is not None:
                if count:
                    self._add_chunks(count, read_ns, lag_ns)
                return bool(self.chunk_ns)
        payloads = self._parse(data)
        if not payloads:
            return bool(self.chunk_ns)
        if b"[DONE]" in payloads:
            # in stream order, as the raw path reads them: a bad event before the [DONE]
            # ends the read before the [DONE] is seen
            at = payloads.index(b"[DONE]")
            count = self._feed_many(payloads[:at]) if at else 0
            self.done = True
            payloads = [p for p in payloads if p != b"[DONE]"]
            rest = payloads[at:]
            count += self._feed_many(rest) if rest else 0
        else:
            count = self._feed_many(payloads)
        if self.stamp_delays is not None:
            self.stamp_delays += [read_ns - int(m) for p in payloads for m in _SENT_STAMP.findall(p)]
        if count:
            self._add_chunks(count, read_ns, lag_ns)
        return bool(self.chunk_ns)

    def _add_chunks(self, count: int, read_ns: int, lag_ns: int) -> None:
        chunk_ns = self.chunk_ns
        if not chunk_ns:
            self.watchdog.first_token_seen()
        chunk_ns.extend(itertools.repeat(read_ns - self.call.t0, count))  # one read, one time
        if lag_ns < 0:
            self.user_timed += count
            lag_ns = 0
        self.chunk_lag_ns.extend(itertools.repeat(lag_ns, count))

    def _count_raw(self, data: bytes) -> int | None:
        """A read of whole events, counted without splitting it into events: the events at
        either end that are not plain content (role, finish reason, usage, ``[DONE]``) are
        peeled off and decoded, the middle is checked and counted on the raw bytes. None when
        the read is not made of single-line ``data:`` events (the caller parses it instead). A
        read of one plain event (the usual read where events come apart) is checked once: the
        front's check, which is the back's and the middle's too."""
        key = self._key
        assert key is not None
        n = len(data)
        head: list[bytes] = []
        lo = 0
        first_end = -1  # the end of the first plain event, once found
        while lo < n:  # events at the front that are not plain content
            end = data.find(b"\n\n", lo)
            if not data.startswith(b"data: ", lo) or data.find(b"\n", lo, end) >= 0:
                return None
            if plain_events_in(data, lo, end + 2, key) == 1:
                first_end = end + 2
                break
            head.append(data[lo + 6 : end])
            lo = end + 2
        tail: list[bytes] = []
        hi = n
        while hi > lo:  # and at the back
            if hi == first_end:  # the plain event the front stopped at: checked
                break
            start = data.rfind(b"\n\n", lo, hi - 2)
            start = lo if start < 0 else start + 2
            if not data.startswith(b"data: ", start) or data.find(b"\n", start, hi - 2) >= 0:
                return None
            if plain_events_in(data, start, hi, key) == 1:
                break
            tail.append(data[start + 6 : hi - 2])
            hi = start
        if hi <= lo:
            middle: int | None = 0
        elif hi == first_end:  # one plain event between the ends
            middle = 1
        else:
            middle = plain_events_in(data, lo, hi, key)
        if middle is None:
            return None
        count = 0
        for payload in (*head, *reversed(tail)):  # in stream order: a later usage wins
            if payload == b"[DONE]":
                self.done = True
            elif self.decoder.feed(payload):
                count += 1
        if self.stamp_delays is not None:
            self._note_stamps(data)
        return count + middle

    def _note_stamps(self, data: bytes) -> None:
        """The bench's delays: this read's time minus each event's send stamp (``--stamp-chunks``)."""
        assert self.stamp_delays is not None
        now = self.last_read_ns
        self.stamp_delays += [now - int(m) for m in _SENT_STAMP.findall(data)]

    def finish(self) -> None:
        """The body ended: decode what the parser still holds; a stream needs its [DONE]."""
        feed = self.decoder.feed
        for payload in self.parser.close():
            if payload == b"[DONE]":
                self.done = True
            elif feed(payload):
                self._add_chunks(1, _perf_ns(), -1)
        if not self.done:
            raise ExchangeFailure(Status.STREAM_ERROR, "stream ended without [DONE]", self.call.http_status)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), None if unusable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")


def describe_error_body(body: bytes, content_type: str) -> str:
    """A short human text for an HTTP error body: the JSON error message, or HTML as text."""
    text = body.decode("utf-8", errors="replace")
    if "json" in content_type or text.lstrip().startswith(("{", "[")):
        try:
            obj = loads(body)
        except ValueError:
            pass
        else:
            if isinstance(obj, dict):
                err = obj.get("error", obj.get("detail", obj.get("message")))
                if isinstance(err, dict):
                    err = err.get("message", err)
                if err is not None:
                    return str(err)
    if "html" in content_type or "<html" in text[:200].lower():
        text = html.unescape(_TAG.sub(" ", text))
    return _SPACE.sub(" ", text).strip()


def http_error(status: int, raw: bytes, headers: Mapping[str, str], call: Call) -> ExchangeFailure:
    """The failure of an HTTP error response: its text (JSON message or HTML as text) and its
    ``Retry-After``, which is kept for a retry policy. ``headers`` keys are lower case."""
    text = describe_error_body(raw, headers.get("content-type", ""))
    retry_after = parse_retry_after(headers.get("retry-after"))
    if retry_after is not None:
        call.extra["retry_after_s"] = retry_after
        text += f" (Retry-After: {retry_after:g} s)"
    return ExchangeFailure(Status.HTTP_ERROR, f"HTTP {status}: {text}", status)


def whole_answer(
    raw: bytes, decoder: StreamDecoder, chunk_ns: list[int], call: Call, watchdog: Deadlines
) -> None:
    """A response that was not streamed: one JSON object, one entry in ``chunk_ns``."""
    now = _perf_ns() - call.t0
    watchdog.first_token_seen()
    try:
        obj = loads(raw)
    except ValueError as exc:
        raise ChunkError(f"invalid JSON response: {raw[:200]!r}") from exc
    if not isinstance(obj, dict):
        raise ChunkError(f"response is not a JSON object: {raw[:200]!r}")
    if decoder.feed_object(obj):
        chunk_ns.append(now)


async def run_exchange(
    endpoint: Endpoint, body: list[bytes], request_id: str | None, stream: bool, reading: StreamReading
) -> None:
    """Post ``body`` (taken out of its list) to ``endpoint`` and read the answer into
    ``reading``. Raises ``ExchangeFailure`` for every failed request."""
    call = reading.call
    response = await endpoint.post(body, request_id, call.restart)
    try:
        status = call.http_status = response.status
        call.replica = response.headers.get(REPLICA_HEADER)
        if status >= 400:
            raise http_error(status, await response.read(ERROR_BODY_BYTES), response.headers, call)
        if stream:
            await response.stream(reading.on_read)
            reading.finish()
        else:
            whole_answer(await response.read(None), reading.decoder, reading.chunk_ns, call, reading.watchdog)
    except (ChunkError, SSEError) as exc:
        raise ExchangeFailure(Status.STREAM_ERROR, str(exc), call.http_status) from exc
    finally:
        await response.close()
