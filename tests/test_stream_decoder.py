"""StreamDecoder's fast path (plain content events counted without parsing) gives exactly what
the full parse gives, and never hides an error."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swarm.clients.dialects import ChunkError, StreamDecoder
from swarm.engines.registry import get_engine


def chat(
    content: str | None = None, *, reason: str | None = None, usage: dict | None = None, sep: str = ","
) -> bytes:  # type: ignore[type-arg]
    delta = {} if content is None else {"content": content}
    obj: dict = {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
    }  # type: ignore[type-arg]
    if usage is not None:
        obj["usage"] = usage
    return json.dumps(obj, separators=(sep, ":" if sep == "," else ": ")).encode()


USAGE = {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}
EVENTS = [
    chat(""),  # role / empty piece
    chat(" a"),
    chat(' "finish_reason":null, "usage":{ inside text'),  # escaped quotes: still one content piece
    chat(" b", sep=", "),  # spaces after separators: not plain, parsed
    chat(" c", usage={"prompt_tokens": 1}),  # usage on a content event (vLLM continuous usage)
    chat(" d"),
    chat(None, reason="length"),
    b'{"choices":[],"usage":' + json.dumps(USAGE).encode() + b"}",
]


def _decode(payloads: list[bytes], keep_text: bool, reads: list[int]) -> tuple[int, StreamDecoder]:
    decoder = StreamDecoder("openai-chat", get_engine("vllm"), keep_text=keep_text)
    count, start = 0, 0
    for end in [*reads, len(payloads)]:
        if end > start:
            count += decoder.feed_many(payloads[start:end])
            start = end
    return count, decoder


@given(st.lists(st.integers(min_value=0, max_value=len(EVENTS)), max_size=5).map(sorted))
def test_fast_path_matches_the_full_parse_for_any_grouping(reads: list[int]) -> None:
    fast, fd = _decode(EVENTS, keep_text=False, reads=reads)
    full, td = _decode(EVENTS, keep_text=True, reads=reads)
    assert fast == full == 5
    assert fd.finish_reason == td.finish_reason == "length"
    assert fd.usage == td.usage and fd.usage.cached_tokens == 4 and fd.usage.completion_tokens == 3


def test_many_plain_events_are_counted() -> None:
    payloads = [chat(""), *(chat(f" w{i}") for i in range(500)), chat(None, reason="stop")]
    count, decoder = _decode(payloads, keep_text=False, reads=[])
    assert count == 500 and decoder.finish_reason == "stop"


@pytest.mark.parametrize(
    "bad",
    [b'{"error":{"message":"out of KV cache"}}', b'{"object":"error","message":"bad"}', b"{not json", b"[1]"],
)
def test_errors_among_plain_events_are_raised(bad: bytes) -> None:
    payloads = [chat(" a"), chat(" b"), bad, chat(" c")]
    for keep_text in (False, True):
        with pytest.raises(ChunkError):
            _decode(payloads, keep_text=keep_text, reads=[])
