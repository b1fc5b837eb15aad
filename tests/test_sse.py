"""SSE parsing: the same events whatever the byte splits; comments, CRLF, [DONE]."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swarm.clients.sse import SSEError, SSEParser

STREAM = (
    b": keep-alive\n\n"
    b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
    b"data: line one\r\ndata: line two\r\n\r\n"
    b"event: ping\nid: 7\n\n"
    b": another comment\r"
    b"data:no-space\r\r"
    b'data: {"x": "caf\xc3\xa9"}\n\n'
    b"data: [DONE]\n\n"
)
EXPECTED = [
    b'{"choices":[{"delta":{"content":"Hel"}}]}',
    b"line one\nline two",
    b"no-space",
    b'{"x": "caf\xc3\xa9"}',
    b"[DONE]",
]


def parse_in_pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    parser = SSEParser()
    events: list[bytes] = []
    prev = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        events += parser.feed(data[prev:cut])
        prev = cut
    return events + parser.close()


def test_whole_stream() -> None:
    assert parse_in_pieces(STREAM, []) == EXPECTED


def test_byte_by_byte() -> None:
    assert parse_in_pieces(STREAM, list(range(len(STREAM)))) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_any_split_gives_same_events(cuts: list[int]) -> None:
    assert parse_in_pieces(STREAM, cuts) == EXPECTED


@given(
    st.lists(
        st.binary(min_size=0, max_size=30).filter(lambda b: b"\n" not in b and b"\r" not in b), max_size=8
    ),
    st.lists(st.integers(min_value=0, max_value=400), max_size=20),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
)
def test_random_payloads_round_trip(payloads: list[bytes], cuts: list[int], eol: bytes) -> None:
    data = b"".join(b"data: " + p + eol + eol for p in payloads)
    cuts = [c for c in cuts if c <= len(data)]
    assert parse_in_pieces(data, cuts) == payloads


def test_unterminated_last_event_is_returned_on_close() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\n\ndata: b") == [b"a"]
    assert parser.close() == [b"b"]


def test_oversized_line_is_an_error() -> None:
    parser = SSEParser(max_line_bytes=100)
    with pytest.raises(SSEError, match="longer than 100 bytes"):
        parser.feed(b"data: " + b"x" * 200)
