"""How the emulator's server applies injected faults (the aiohttp side of ``faults``).

Place in the map (docs/architecture.md, "The emulator"): ``faults`` decides (seeded draws, counts); this
module acts: it replaces a response with an error status, waits out slow headers, stalls, cuts
or corrupts a stream halfway, and resets new connections as soon as they are accepted.
``fault_for`` draws a request's fault and gives it as a ``RequestFault``, whose methods the
answer writers (``responses``) call at the points where a fault can strike; they know nothing
of fault kinds.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from swarm.emulator.faults import FaultInjector, FaultSpec
from swarm.emulator.formats import error_body
from swarm.jsoncodec import dumps

#: What SGLang's native ``/generate`` gets: the error statuses and slow headers.
NATIVE_FAULTS = frozenset({"http_500", "http_503", "http_429", "slow_headers"})


def _error(message: str, status: int, kind: str) -> web.Response:
    return web.Response(
        body=dumps(error_body(message, status, kind)), status=status, content_type="application/json"
    )


@dataclass(frozen=True, slots=True)
class RequestFault:
    """The fault drawn for one request, applied where the answer reaches each point.

    Any drawn kind splits a stream's write at half its tokens (``half_tokens``), also a kind
    that then does nothing there (the stream's chunks stay as they were before this class)."""

    kind: str
    spec: FaultSpec
    request: web.Request

    async def stall_first(self) -> None:
        """Before the first token (a streamed answer) or the whole answer (an unstreamed one)."""
        if self.kind == "stall_first":
            await asyncio.sleep(self.spec.stall_s)

    def cut_whole_answer(self) -> None:
        """An unstreamed answer, generated: a cut resets the connection before the body."""
        if self.kind == "cut":
            abort_connection(self.request)
            raise asyncio.CancelledError  # nothing more to send on a dead connection

    def half_tokens(self, max_new_tokens: int) -> int:
        """The token count after which ``at_half`` strikes."""
        return max(1, max_new_tokens // 2)

    async def at_half(self, resp: web.StreamResponse, event_prefix: bytes) -> None:
        """Halfway through a stream (after exactly ``half_tokens``, however they were batched)."""
        await mid_stream_fault(self.request, resp, self.kind, self.spec, event_prefix)

    @property
    def drops_done(self) -> bool:
        """Whether the stream ends without its final event, usage and ``[DONE]``."""
        return self.kind == "no_done"


async def fault_for(
    faults: FaultInjector | None,
    request: web.Request,
    body: dict[str, Any],
    kinds: frozenset[str] | None = None,
) -> tuple[RequestFault | None, web.Response | None]:
    """The fault drawn for this request (None: none), and the response that replaces it when
    the fault is an error status. Slow headers are waited out here. A 500 echoes the
    request's Authorization header, as some proxies do, so tests can check the client
    redacts it."""
    if faults is None:
        return None, None
    kind = faults.draw(
        stream=bool(body.get("stream")), kinds=kinds, request_id=request.headers.get("X-Request-Id")
    )
    if kind is None:
        return None, None
    spec = faults.spec
    fault = RequestFault(kind, spec, request)
    if kind == "http_500":
        echo = request.headers.get("Authorization")
        text = "injected fault: internal server error" + (f" (Authorization: {echo})" if echo else "")
        return fault, _error(text, 500, "InternalServerError")
    if kind == "http_503":
        return fault, _error("injected fault: service unavailable", 503, "ServiceUnavailableError")
    if kind == "http_429":
        resp = _error("injected fault: too many requests", 429, "RateLimitError")
        resp.headers["Retry-After"] = str(spec.retry_after_s)
        return fault, resp
    if kind == "slow_headers":
        await asyncio.sleep(spec.slow_headers_s)
    return fault, None


def abort_connection(request: web.Request) -> None:
    """Reset the request's connection (a cut mid-stream, as a crashed server would)."""
    transport = request.transport
    if transport is not None:
        transport.abort()


async def mid_stream_fault(
    request: web.Request, resp: web.StreamResponse, fault: str, spec: FaultSpec, prefix: bytes
) -> None:
    """Halfway through a stream: stall, cut, or send a broken or oversized event. ``prefix``
    is the start of a content event, so a malformed event looks like the real ones."""
    if fault == "stall_mid":
        await asyncio.sleep(spec.stall_s)
    elif fault == "cut":
        abort_connection(request)
        raise asyncio.CancelledError  # the connection is gone; end the handler
    elif fault == "malformed":
        await resp.write(prefix + b'"cut short\n\n')
    elif fault == "oversized":
        await resp.write(b"data: " + b"x" * spec.oversized_bytes + b"\n\n")


class _Reset(asyncio.Protocol):
    """A connection refused by the ``refuse`` fault: reset (RST) as soon as it is accepted."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        if isinstance(transport, asyncio.Transport):
            transport.abort()
        else:
            transport.close()


class FaultySite(web.TCPSite):
    """A TCP site that resets the new connections the fault injector picks."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, faults: FaultInjector) -> None:
        super().__init__(runner, host, port, backlog=4096)
        self._faults = faults

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site; the listening is done here
        server = self._runner.server
        assert server is not None
        faults = self._faults

        def protocol() -> asyncio.BaseProtocol:
            return _Reset() if faults.refuse_connection() else server()

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(protocol, self._host, self._port, backlog=4096)
