"""The emulator's answers: OpenAI chat and completions (whole or streamed) and SGLang's ``/generate``.

Place in the map (docs/architecture.md, "The emulator"): called by the HTTP server's handlers
(``server``) once a request is parsed, its fault drawn and its generation submitted. Three
things are kept apart here:

- the per-format differences of the OpenAI answers (``OpenAIFormat``: ``CHAT`` and
  ``COMPLETION``: id prefix, object names, where the text goes, the chat's opening role event);
- the byte templates of the streamed content events (``EventTemplate``): one event per token,
  built by joining bytes, not by encoding a dict per token;
- where a drawn fault strikes, through the ``RequestFault`` methods (``injection``), which
  know the kinds.

``stream_answer`` is the hot path: per write of tokens it makes one list, one event per token
and one ``write``; a request without a fault costs one comparison per write for it.
"""

from __future__ import annotations

import time
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from swarm.emulator.config import EmulatorConfig
from swarm.emulator.formats import generate_meta, usage
from swarm.emulator.generation import Generation
from swarm.emulator.injection import RequestFault
from swarm.jsoncodec import dumps

DONE = b"data: [DONE]\n\n"
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
#: the end of a content event after its text; with a send-time stamp, its start before the stamp
_CONTENT_TAIL = b'"logprobs":null,"finish_reason":null}]}\n\n'
_STAMPED_TAIL_HEAD = b'"logprobs":null,"finish_reason":null}],"swarm_sent_ns":'


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumps(obj), status=status, content_type="application/json")


def sse(obj: Any) -> bytes:
    """One server-sent event carrying ``obj`` as JSON."""
    return b"data: " + dumps(obj) + b"\n\n"


async def _drain(gen: Generation) -> None:
    async with aclosing(gen.tokens()) as stream:
        async for _ in stream:
            pass


# -- OpenAI formats ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenAIFormat:
    """What differs between a chat and a completions answer (subclassed once per format)."""

    #: prefix of the answer's id
    id_prefix: str
    #: ``object`` of a whole answer and of a streamed event
    object: str
    chunk_object: str
    #: a content event's bytes before the JSON string of its text, and right after it
    content_open: bytes
    content_close: bytes

    def whole_choice(self, text: str) -> dict[str, Any]:
        """The one choice of an unstreamed answer."""
        raise NotImplementedError

    def final_choice(self) -> dict[str, Any]:
        """The choice of a stream's last event (finish reason, no text)."""
        raise NotImplementedError

    def opening_event(self, head: dict[str, Any]) -> bytes | None:
        """The event before the first token, if the format has one."""
        return None


@dataclass(frozen=True, slots=True)
class ChatFormat(OpenAIFormat):
    """``/v1/chat/completions``: text in ``message`` / ``delta``, an opening role event."""

    def whole_choice(self, text: str) -> dict[str, Any]:
        return {
            "index": 0,
            "finish_reason": "length",
            "logprobs": None,
            "message": {"role": "assistant", "content": text},
        }

    def final_choice(self) -> dict[str, Any]:
        return {"index": 0, "logprobs": None, "finish_reason": "length", "delta": {}}

    def opening_event(self, head: dict[str, Any]) -> bytes | None:
        return sse(
            {
                **head,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
            }
        )


@dataclass(frozen=True, slots=True)
class CompletionFormat(OpenAIFormat):
    """``/v1/completions``: text in ``text``, no opening event."""

    def whole_choice(self, text: str) -> dict[str, Any]:
        return {"index": 0, "finish_reason": "length", "logprobs": None, "text": text}

    def final_choice(self) -> dict[str, Any]:
        return {"index": 0, "logprobs": None, "finish_reason": "length", "text": ""}


CHAT = ChatFormat(
    id_prefix="chatcmpl-",
    object="chat.completion",
    chunk_object="chat.completion.chunk",
    content_open=b'"delta":{"content":',
    content_close=b"},",
)
COMPLETION = CompletionFormat(
    id_prefix="cmpl-",
    object="text_completion",
    chunk_object="text_completion",
    content_open=b'"text":',
    content_close=b",",
)


@dataclass(frozen=True, slots=True)
class EventTemplate:
    """The bytes around a token's text in a streamed content event of one answer.

    An event is ``prefix + dumps(text) + suffix``; with send-time stamps, the suffix is
    ``stamp_head + b"%d}\\n\\n" % ns`` of the write's time."""

    prefix: bytes
    suffix: bytes
    stamp_head: bytes

    @classmethod
    def for_answer(cls, fmt: OpenAIFormat, head: dict[str, Any]) -> EventTemplate:
        close = fmt.content_close
        return cls(
            prefix=b"data: " + dumps(head)[:-1] + b',"choices":[{"index":0,' + fmt.content_open,
            suffix=close + _CONTENT_TAIL,
            stamp_head=close + _STAMPED_TAIL_HEAD,
        )


# -- OpenAI answers ------------------------------------------------------------------------------


async def whole_answer(
    config: EmulatorConfig,
    gen: Generation,
    fmt: OpenAIFormat,
    rid: str,
    created_s: int,
    fault: RequestFault | None,
) -> web.Response:
    """An unstreamed answer, sent once the generation has finished."""
    await _drain(gen)
    if fault is not None:
        await fault.stall_first()
        fault.cut_whole_answer()
    return json_response(
        {
            "id": rid,
            "object": fmt.object,
            "created": created_s,
            "model": config.model,
            "choices": [fmt.whole_choice(" ".join(gen.output_words()))],
            "usage": usage(config, gen),
        }
    )


async def stream_answer(
    request: web.Request,
    config: EmulatorConfig,
    gen: Generation,
    fmt: OpenAIFormat,
    rid: str,
    created_s: int,
    *,
    include_usage: bool,
    fault: RequestFault | None,
) -> web.StreamResponse:
    """A streamed answer: one event per token; tokens that came out together (a lagging
    reader) are sent in one write."""
    resp = web.StreamResponse(headers=_SSE_HEADERS)
    await resp.prepare(request)
    head = {"id": rid, "object": fmt.chunk_object, "created": created_s, "model": config.model}
    opening = fmt.opening_event(head)
    if opening is not None:
        await resp.write(opening)
    template = EventTemplate.for_answer(fmt, head)
    prefix = template.prefix
    suffix = template.suffix
    stamp_head = template.stamp_head if config.stamp_chunks else None
    first = True
    sent = 0
    # a fault strikes after exactly half the tokens, however they were batched; -1: never
    half = -1
    if fault is not None:
        half = fault.half_tokens(gen.max_new)
        await fault.stall_first()
    async with aclosing(gen.tokens()) as stream:
        async for words in stream:
            if stamp_head is not None:  # the send time of this write, on every event of it
                suffix = stamp_head + b"%d}\n\n" % time.perf_counter_ns()
            events = []
            for word in words:
                events.append(prefix + dumps(word if first else " " + word) + suffix)
                first = False
            before, sent = sent, sent + len(words)
            if before < half <= sent:
                assert fault is not None
                await resp.write(b"".join(events[: half - before]))
                await fault.at_half(resp, prefix)
                events = events[half - before :]
            if events:
                await resp.write(b"".join(events))
    if fault is not None and fault.drops_done:
        await resp.write_eof()
        return resp
    await resp.write(sse({**head, "choices": [fmt.final_choice()]}))
    if include_usage:
        await resp.write(sse({**head, "choices": [], "usage": usage(config, gen)}))
    await resp.write(DONE)
    await resp.write_eof()
    return resp


# -- SGLang's native /generate -------------------------------------------------------------------


async def generate_answer(gen: Generation, rid: str, start_s: float) -> web.Response:
    """An unstreamed ``/generate`` answer; ``start_s`` is the request's ``time.monotonic()``."""
    await _drain(gen)
    return json_response(
        {
            "text": " ".join(gen.output_words()),
            "meta_info": generate_meta(gen, rid, True, time.monotonic() - start_s),
        }
    )


async def generate_stream(
    request: web.Request, gen: Generation, rid: str, start_s: float
) -> web.StreamResponse:
    """A streamed ``/generate`` answer: each event carries the whole text so far."""
    resp = web.StreamResponse(headers=_SSE_HEADERS)
    await resp.prepare(request)
    async with aclosing(gen.tokens()) as stream:
        async for _ in stream:
            done = gen.finished
            await resp.write(
                sse(
                    {
                        "text": " ".join(gen.output_words()),
                        "meta_info": generate_meta(gen, rid, done, time.monotonic() - start_s),
                    }
                )
            )
    await resp.write(DONE)
    await resp.write_eof()
    return resp
