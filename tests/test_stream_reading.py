"""Counting a read on its raw bytes gives what splitting it into events and parsing them gives."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.clients.dialects import ChunkError, StreamDecoder
from swarm.clients.exchange import Call, ExchangeFailure, StreamReading
from swarm.clients.sse import SSEError
from swarm.engines.registry import get_engine


class Watch:
    def __init__(self) -> None:
        self.last_read_ns = 0
        self.first = 0

    def read_at(self, read_ns: int) -> None:
        self.last_read_ns = read_ns

    def first_token_seen(self) -> None:
        self.first += 1


def events(dialect: str) -> st.SearchStrategy[bytes]:
    chat = dialect == "openai-chat"

    def content(text: str) -> bytes:
        import json

        piece = json.dumps(text)
        if chat:
            return (
                b'{"id":"x","choices":[{"index":0,"delta":{"content":'
                + piece.encode()
                + b'},"finish_reason":null}]}'
            )
        return b'{"id":"x","choices":[{"index":0,"text":' + piece.encode() + b',"finish_reason":null}]}'

    plain = st.text(min_size=1, max_size=6).map(lambda t: b"data: " + content(t) + b"\n\n")
    others = st.sampled_from(
        [
            b"data: " + content("") + b"\n\n",  # the role event: empty content
            b'data: {"id":"x","choices":[{"index":0,"delta":{},"text":"","finish_reason":"length"}]}\n\n',
            b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}\n\n',
            b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}\n\n',
            b"data: [DONE]\n\n",
            b": keep-alive\n\n",
            b'data: {"id":"x",\ndata: "choices":[]}\n\n',
            b'data:{"choices":[{"text":"y","delta":{"content":"y"},"finish_reason":null}]}\n\n',
            b'data: {"error":{"message":"boom"}}\n\n',
            b"data: {not json\n\n",
            b"event: ping\ndata: {}\n\n",
            # a content event whose data goes on over a second line, inside its string: not JSON
            b'data: {"choices":[{"index":0,"delta":{"content":"a\ndata: b"},"text":"a\ndata: b","finish_reason":null}]}\n\n',
        ]
    )
    return st.one_of(plain, plain, plain, others)


def _read(data: bytes, dialect: str, cuts: list[int], raw: bool) -> tuple[object, ...]:
    decoder = StreamDecoder(dialect, get_engine("sglang"), keep_text=False)
    call = Call(lambda: 0)
    call.t0 = 0
    chunk_ns: list[int] = []
    reading = StreamReading(decoder, chunk_ns, call, Watch(), None)
    if not raw:
        reading._key = None  # the parse-everything path
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    try:
        for i, (a, b) in enumerate(itertools.pairwise(points)):
            if b > a:
                reading.on_read(data[a:b], 1000 + i)
        reading.finish()
        outcome: object = "ok"
    except (ChunkError, SSEError, ExchangeFailure) as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    u = decoder.usage
    return (
        outcome,
        tuple(chunk_ns),
        reading.done,
        decoder.finish_reason,
        u.prompt_tokens,
        u.completion_tokens,
        u.cached_tokens,
    )


@settings(max_examples=400, deadline=None)
@given(data=st.data(), dialect=st.sampled_from(["openai-chat", "openai-completions"]),
       cuts=st.lists(st.integers(0, 100_000), max_size=6))  # fmt: skip
def test_raw_counting_equals_parsing(data: st.DataObject, dialect: str, cuts: list[int]) -> None:
    stream = b"".join(data.draw(st.lists(events(dialect), max_size=25)))
    assert _read(stream, dialect, cuts, raw=True) == _read(stream, dialect, cuts, raw=False)


def test_a_read_of_a_whole_answer_is_counted_without_splitting() -> None:
    role = b'data: {"choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}\n\n'
    word = b'data: {"choices":[{"index":0,"delta":{"content":"w"},"finish_reason":null}]}\n\n'
    end = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":200}}\n\n'
    stream = role + word * 200 + end + usage + b"data: [DONE]\n\n"
    decoder = StreamDecoder("openai-chat", get_engine("sglang"), keep_text=False)
    call = Call(lambda: 0)
    call.t0 = 0
    chunk_ns: list[int] = []
    reading = StreamReading(decoder, chunk_ns, call, Watch(), None)

    def no_split(data: bytes) -> list[bytes]:
        raise AssertionError("the read was split into events")

    reading._parse = no_split
    reading.on_read(stream, 1000)
    reading.finish()
    assert chunk_ns == [1000] * 200 and reading.done
    assert (decoder.finish_reason, decoder.usage.prompt_tokens, decoder.usage.completion_tokens) == (
        "length",
        5,
        200,
    )


def test_an_error_event_before_done_ends_the_read_before_done_on_both_paths() -> None:
    """Found by the property above: the parsing path used to mark a stream done before feeding
    the events in front of its [DONE], so a bad event there left the paths disagreeing."""
    content = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n'
    stream = content + b'data: {"error":{"message":"boom"}}\n\n' + b"data: [DONE]\n\n"
    for cuts in ([], [len(content) + 3]):
        raw = _read(stream, "openai-chat", cuts, raw=True)
        parsed = _read(stream, "openai-chat", cuts, raw=False)
        assert raw == parsed
        assert str(raw[0]).startswith("ChunkError") and raw[2] is False
