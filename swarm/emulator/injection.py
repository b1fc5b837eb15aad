"""How the emulator's server applies injected faults (the aiohttp side of ``faults``).

Place in the map (docs/architecture.md, "The emulator"): ``faults`` decides (seeded draws, counts); this
module acts: it replaces a response with an error status, waits out slow headers, stalls, cuts
or corrupts a stream halfway, and resets new connections as soon as they are accepted.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

from aiohttp import web

from swarm.emulator.faults import FaultInjector, FaultSpec
from swarm.emulator.formats import error_body
from swarm.engines.dialects import dumps

#: What SGLang's native ``/generate`` gets: the error statuses and slow headers.
NATIVE_FAULTS = frozenset({"http_500", "http_503", "http_429", "slow_headers"})


def _error(message: str, status: int, kind: str) -> web.Response:
    return web.Response(
        body=dumps(error_body(message, status, kind)), status=status, content_type="application/json"
    )


async def fault_for(
    faults: FaultInjector | None,
    request: web.Request,
    body: dict[str, Any],
    kinds: frozenset[str] | None = None,
) -> tuple[str | None, web.Response | None]:
    """The fault drawn for this request, and the response that replaces it when the fault is
    an error status. Slow headers are waited out here. A 500 echoes the request's
    Authorization header, as some proxies do, so tests can check the client redacts it."""
    if faults is None:
        return None, None
    kind = faults.draw(
        stream=bool(body.get("stream")), kinds=kinds, request_id=request.headers.get("X-Request-Id")
    )
    spec = faults.spec
    if kind == "http_500":
        echo = request.headers.get("Authorization")
        text = "injected fault: internal server error" + (f" (Authorization: {echo})" if echo else "")
        return kind, _error(text, 500, "InternalServerError")
    if kind == "http_503":
        return kind, _error("injected fault: service unavailable", 503, "ServiceUnavailableError")
    if kind == "http_429":
        resp = _error("injected fault: too many requests", 429, "RateLimitError")
        resp.headers["Retry-After"] = str(spec.retry_after_s)
        return kind, resp
    if kind == "slow_headers":
        await asyncio.sleep(spec.slow_headers_s)
    return kind, None


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
