"""API dialects: how a request is written and how its streamed answer is read.

Place in the map (docs/architecture.md, "Clients"): inside the EngineClient. Three dialects:

- ``openai-chat``: ``POST /v1/chat/completions`` with ``messages``; content in
  ``choices[].delta.content`` (streamed) or ``choices[].message.content``.
- ``openai-completions``: ``POST /v1/completions`` with one ``prompt`` string; content in
  ``choices[].text``.
- ``sglang-generate``: SGLang's native ``POST /generate`` with ``text`` and
  ``sampling_params``; each streamed event carries the *cumulative* text so far (unless the
  server runs with incremental output), and ``meta_info`` carries token counts, including
  ``cached_tokens`` always.

A decoder consumes one event payload at a time and says whether it carried generated content;
it accumulates the text, the finish reason and the server-reported usage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from swarm.engines.engine import Engine
from swarm.errors import InputError
from swarm.jsoncodec import loads
from swarm.request import ChatMessage
from swarm.texts import as_str

PATHS: dict[str, str] = {
    "openai-chat": "/v1/chat/completions",
    "openai-completions": "/v1/completions",
    "sglang-generate": "/generate",
}

#: Separator between message contents when a dialect takes one prompt string. Siblings keep
#: their shared prefix, because each prompt is its parent's prompt plus more parts.
PART_SEPARATOR = "\n\n"


class ChunkError(ValueError):
    """A streamed event that cannot be understood (invalid JSON, or an error object)."""


def render_prompt(messages: tuple[ChatMessage, ...]) -> str:
    """The single prompt string that non-chat dialects send for ``messages``."""
    return PART_SEPARATOR.join(as_str(m.content) for m in messages)


def build_body(
    dialect: str,
    profile: Engine,
    *,
    model: str,
    messages: tuple[ChatMessage, ...],
    max_tokens: int | None,
    stream: bool,
    temperature: float,
    ignore_eos: bool,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body for one request, holding only fields the engine accepts."""
    extras: dict[str, Any] = {}
    if ignore_eos and "ignore_eos" in profile.extra_fields:
        extras["ignore_eos"] = True
    if extra_body:
        extras.update(extra_body)
    if dialect == "sglang-generate":
        params: dict[str, Any] = {"temperature": temperature, **extras}
        if max_tokens is not None:
            params["max_new_tokens"] = max_tokens
        return {"text": render_prompt(messages), "sampling_params": params, "stream": stream}
    body: dict[str, Any] = {"model": model, "stream": stream, "temperature": temperature}
    if dialect == "openai-chat":
        body["messages"] = [{"role": m.role, "content": as_str(m.content)} for m in messages]
    else:
        body["prompt"] = render_prompt(messages)
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if stream and profile.stream_usage_option:
        body["stream_options"] = {"include_usage": True}
    unknown = set(extras) - profile.extra_fields
    if unknown:
        # Only fields the engine is known to accept; e.g. TensorRT-LLM answers 400 to others.
        raise InputError(
            f"{profile.title} does not accept request field(s) {sorted(unknown)}; "
            f"accepted extras: {sorted(profile.extra_fields)}"
        )
    body.update(extras)
    return body


@dataclass(slots=True)
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


def _count(value: Any, field: str) -> int:
    """A token count from a response: an integer (or an integral number), else ChunkError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise ChunkError(f"{field} is not a token count: {value!r:.80}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ChunkError(f"{field} is not a token count: {value!r:.80}")
        return int(value)
    return value


def read_openai_usage(obj: Mapping[str, Any], profile: Engine, usage: Usage) -> None:
    """Fill ``usage`` from an OpenAI-style response object (and llama.cpp's ``timings``)."""
    u = obj.get("usage")
    if isinstance(u, Mapping):
        if u.get("prompt_tokens") is not None:
            usage.prompt_tokens = _count(u["prompt_tokens"], "usage.prompt_tokens")
        if u.get("completion_tokens") is not None:
            usage.completion_tokens = _count(u["completion_tokens"], "usage.completion_tokens")
        details = u.get("prompt_tokens_details")
        if isinstance(details, Mapping) and details.get("cached_tokens") is not None:
            usage.cached_tokens = _count(
                details["cached_tokens"], "usage.prompt_tokens_details.cached_tokens"
            )
        elif usage.cached_tokens is None and profile.cached_absent_means_zero:
            usage.cached_tokens = 0
    timings = obj.get("timings")
    if (
        isinstance(timings, Mapping)
        and timings.get("cache_n") is not None
        and not usage.cached_tokens  # llama.cpp: prefer cache_n when usage says nothing (or 0)
    ):
        usage.cached_tokens = _count(timings["cache_n"], "timings.cache_n")


def _error_text(obj: Mapping[str, Any]) -> str | None:
    err = obj.get("error")
    if err is None:
        if obj.get("object") == "error":
            return str(obj.get("message", obj))
        return None
    if isinstance(err, Mapping):
        return str(err.get("message") or err)
    return str(err)


#: The key of a content piece in each OpenAI dialect's stream events, as bytes to search for.
CONTENT_KEYS = {"openai-chat": b'"content":"', "openai-completions": b'"text":"'}


def _all_plain_content(payloads: list[bytes], key: bytes) -> bool:
    """True when every event certainly carries a non-empty content piece and nothing else the
    decoder reads, judged from the bytes of all of them at once, without parsing: each has
    one ``key`` (the number of keys and of literal ``"finish_reason":null`` both equal the
    number of events), no key is followed by the closing quote (an empty piece), and there is
    no ``"usage":{``, ``"timings"`` or ``"error"``. A key's quotes cannot occur unescaped
    inside a JSON string, so a match is a real key. Anything else (spaces after colons, a
    finish reason, usage, an empty piece) is not plain and gets the full parse. (One event
    with two choices and one with none would pass; swarm never asks for several choices.)"""
    n = len(payloads)
    joined = payloads[0] if n == 1 else b"\n".join(payloads)
    return (
        joined.count(key) == n
        and joined.count(b'"finish_reason":null') == n
        and key + b'"' not in joined
        and b'"usage":{' not in joined
        and b'"timings"' not in joined
        and b'"error"' not in joined
    )


def plain_events_in(buf: bytes, lo: int, hi: int, key: bytes) -> int | None:
    """The number of events in ``buf[lo:hi]`` when it is nothing but complete plain content
    events, each one ``data: {...}\n\n`` line; None otherwise. The test of
    ``_all_plain_content`` made on the raw event stream, so a read need not be split into
    events, in as few passes over the bytes as it can: ``n - 1`` event boundaries and ``2n``
    line ends mean ``n`` one-line events; ``n`` content keys, ``n`` literal
    ``"finish_reason":null``, no empty piece, no ``"usage":{``. An event with an error or
    llama.cpp's timings has no content key or a finish reason, so it fails those counts."""
    if hi <= lo or not buf.startswith(b"data: ", lo) or not buf.endswith(b"\n\n", lo, hi):
        return None
    n = buf.count(b"\n\ndata: ", lo, hi) + 1
    if (
        buf.count(b"\n", lo, hi) == 2 * n
        and buf.count(key, lo, hi) == n
        and buf.count(b'"finish_reason":null', lo, hi) == n
        and buf.find(key + b'"', lo, hi) < 0
        and buf.find(b'"usage":{', lo, hi) < 0
        and buf.find(b"\r", lo, hi) < 0
    ):
        return n
    return None


def _find_not_plain(payloads: list[bytes], lo: int, hi: int, key: bytes, out: list[int]) -> None:
    """Append to ``out`` the indexes in [lo, hi) of events that are not plain (by halving)."""
    if hi <= lo or _all_plain_content(payloads[lo:hi], key):
        return
    if hi - lo == 1:
        out.append(lo)
        return
    mid = (lo + hi) // 2
    _find_not_plain(payloads, lo, mid, key, out)
    _find_not_plain(payloads, mid, hi, key, out)


@dataclass(slots=True)
class StreamDecoder:
    """Reads one response's events. ``feed`` returns True when an event carried content."""

    dialect: str
    profile: Engine
    cumulative: bool = True  # sglang-generate only
    #: keep the generated text (``text``); without it, plain content events are only counted
    keep_text: bool = True
    parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    _seen_chars: int = 0

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def feed(self, payload: bytes) -> bool:
        try:
            obj = loads(payload)
        except ValueError as exc:
            raise ChunkError(f"invalid JSON in stream event: {payload[:200]!r}") from exc
        if not isinstance(obj, dict):
            raise ChunkError(f"stream event is not a JSON object: {payload[:200]!r}")
        return self.feed_object(obj)

    def feed_many(self, payloads: list[bytes]) -> int:
        """Several events' payloads (one network read's); returns how many carried content.

        The hot path of a stream: the payloads are decoded with one JSON call (as an array;
        orjson's fixed cost per call is a large part of a small event's), and an error in any
        of them is found again one by one, so it is reported exactly as ``feed`` would."""
        if not self.keep_text and (key := CONTENT_KEYS.get(self.dialect)) is not None:
            return self._count_plain(payloads, key)
        return self._feed_parsed(payloads)

    def _count_plain(self, payloads: list[bytes], key: bytes) -> int:
        """Plain content events are counted without parsing; the others are parsed, in their
        order (a later usage overrides an earlier one). They are typically a read's first
        event (the role) and last ones (finish reason, usage): those are peeled off one by
        one, the middle is checked at once, and only a mixed middle is halved."""
        if len(payloads) <= 3 and _all_plain_content(payloads, key):  # a live stream's usual read
            return len(payloads)
        lo, hi = 0, len(payloads)
        other: list[int] = []
        while lo < hi and not _all_plain_content(payloads[lo : lo + 1], key):
            other.append(lo)
            lo += 1
        while hi > lo and not _all_plain_content(payloads[hi - 1 : hi], key):
            hi -= 1
            other.append(hi)
        if hi - lo > 2:  # (two or fewer left: both were checked plain above)
            _find_not_plain(payloads, lo + 1, hi - 1, key, other)
        count = len(payloads) - len(other)
        for i in sorted(other):
            count += self._feed_parsed([payloads[i]])
        return count

    def _feed_parsed(self, payloads: list[bytes]) -> int:
        if len(payloads) == 1:
            return 1 if self.feed(payloads[0]) else 0
        try:
            objs = loads(b"[" + b",".join(payloads) + b"]")
        except ValueError:
            objs = None
        if not isinstance(objs, list) or len(objs) != len(payloads):
            return sum(1 for p in payloads if self.feed(p))  # raises on the bad one
        count = 0
        feed_object = self.feed_object
        for obj, payload in zip(objs, payloads, strict=True):
            if type(obj) is not dict:
                raise ChunkError(f"stream event is not a JSON object: {payload[:200]!r}")
            if feed_object(obj):
                count += 1
        return count

    def feed_object(self, obj: dict[str, Any]) -> bool:
        if "error" in obj or obj.get("object") == "error":
            error = _error_text(obj)
            if error is not None:
                raise ChunkError(f"server error in stream: {error}")
        if self.dialect == "sglang-generate":
            return self._feed_generate(obj)
        content = False
        choices = obj.get("choices")
        if choices:
            chat = self.dialect == "openai-chat"
            for choice in choices:
                if chat:
                    delta = choice.get("delta") or choice.get("message") or {}
                    piece = delta.get("content") or delta.get("reasoning_content")
                else:
                    piece = choice.get("text")
                if piece:
                    self.parts.append(piece)
                    content = True
                reason = choice.get("finish_reason")
                if reason:
                    self.finish_reason = str(reason)
        if "usage" in obj or "timings" in obj:
            read_openai_usage(obj, self.profile, self.usage)
        return content

    def _feed_generate(self, obj: dict[str, Any]) -> bool:
        text = obj.get("text")
        content = False
        if isinstance(text, str):
            if self.cumulative:
                if len(text) > self._seen_chars:
                    self.parts.append(text[self._seen_chars :])
                    self._seen_chars = len(text)
                    content = True
            elif text:
                self.parts.append(text)
                content = True
        meta = obj.get("meta_info")
        if isinstance(meta, Mapping):
            if meta.get("prompt_tokens") is not None:
                self.usage.prompt_tokens = _count(meta["prompt_tokens"], "meta_info.prompt_tokens")
            if meta.get("completion_tokens") is not None:
                self.usage.completion_tokens = _count(
                    meta["completion_tokens"], "meta_info.completion_tokens"
                )
            if meta.get("cached_tokens") is not None:
                self.usage.cached_tokens = _count(meta["cached_tokens"], "meta_info.cached_tokens")
            reason = meta.get("finish_reason")
            if isinstance(reason, Mapping):
                self.finish_reason = str(reason.get("type"))
            elif reason:
                self.finish_reason = str(reason)
        return content
