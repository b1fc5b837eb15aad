"""Incremental Server-Sent Events parser for streamed LLM responses.

Place in the map (docs/architecture.md, "Clients"): inside the EngineClient. Network reads arrive split at arbitrary
byte positions; ``SSEParser.feed`` takes each read and returns the ``data`` payloads of the
events it completed, the same events whatever the split (tested with hypothesis). It follows
the parts of the WHATWG event-stream format that LLM servers use: lines end with LF, CRLF or CR;
lines starting with ``:`` are comments (keep-alives); several ``data:`` lines of one event are
joined with LF; a blank line ends an event. Other fields (``event``, ``id``, ``retry``) are
ignored. ``[DONE]`` is an ordinary payload here; the client decides what it means.
"""

from __future__ import annotations

#: A line longer than this is an error rather than a memory leak (a server gone wrong).
DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024


class SSEError(ValueError):
    """The byte stream is not a usable event stream."""


class SSEParser:
    """Feed bytes, get complete events' data payloads (bytes, without the ``data:`` prefix)."""

    __slots__ = ("_data", "_max_line", "_tail")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._tail: bytes | bytearray = b""  # an unfinished line (may end with a lone CR)
        self._data: list[bytes] = []  # data lines of the event being built
        self._max_line = max_line_bytes

    @property
    def idle(self) -> bool:
        """No event is half-read: the next byte starts a new line of a new event."""
        return not self._tail and not self._data

    def feed(self, chunk: bytes) -> list[bytes]:
        """Consume ``chunk``; return the payloads of every event completed by it."""
        tail = self._tail
        if tail:
            if b"\n" not in chunk and b"\r" not in chunk:
                # a line that goes on over many reads: grow it in place (joining it again on
                # every read would copy a long line quadratically), and refuse one too long
                if len(tail) + len(chunk) > self._max_line:
                    self._tail = b""
                    raise SSEError(f"event-stream line longer than {self._max_line} bytes")
                if not isinstance(tail, bytearray):
                    self._tail = tail = bytearray(tail)
                tail += chunk
                return []
            chunk = (bytes(tail) if isinstance(tail, bytearray) else tail) + chunk
        if not self._data and b"\r" not in chunk:
            return self._feed_blocks(chunk)
        return self._feed_lines(chunk)

    def _feed_blocks(self, buf: bytes) -> list[bytes]:
        """The common case, no event half-read and LF line ends: split at blank lines, and an
        event that is one ``data: `` line is its payload without looking at its lines."""
        blocks = buf.split(b"\n\n")
        rest = blocks.pop()
        body_len = len(buf) - len(rest)
        events: list[bytes]
        if (
            blocks
            and buf.startswith(b"data: ")
            and buf.count(b"\n", 0, body_len) == 2 * len(blocks)
            and buf.count(b"\n\ndata: ", 0, body_len) == len(blocks) - 1
        ):
            # every complete event is one "data: " line (no other newline among them)
            events = [block[6:] for block in blocks]
            self._tail = b""
            if rest:
                events += self._feed_lines(rest)
            return events
        events = []
        for block in blocks:
            if block[:6] == b"data: " and b"\n" not in block:
                events.append(block[6:])
            elif block:  # comments, several lines, other fields: the general path
                events += self._feed_lines(block + b"\n\n")
        self._tail = b""
        if rest:
            events += self._feed_lines(rest)
        return events

    def _feed_lines(self, buf: bytes) -> list[bytes]:
        if b"\r" in buf:
            # A CR at the very end may be the first half of a CRLF: keep it for the next read.
            held = buf.endswith(b"\r")
            if held:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if held:
                buf += b"\r"
        lines = buf.split(b"\n")
        self._tail = lines.pop()
        if len(self._tail) > self._max_line:
            raise SSEError(f"event-stream line longer than {self._max_line} bytes")
        events: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data = self._data = []
                continue
            if line[0] == 0x3A:  # ':' comment / keep-alive
                continue
            if line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value[:1] == b" " else value)
            elif line == b"data":
                data.append(b"")
            # other fields (event, id, retry) carry nothing the client uses
        return events

    def close(self) -> list[bytes]:
        """End of stream: return an event left unterminated by a final blank line, if any.

        Servers sometimes close without the final blank line; the event is still returned so
        the client can judge it (e.g. a missing ``[DONE]``).
        """
        events = self.feed(b"\n\n") if (self._tail or self._data) else []
        self._tail = b""
        self._data = []
        return events
