"""The aiohttp transport: ``https://`` targets (and any target, asked for), the probe's session.

Place in the map (docs/architecture.md, "Clients"): one implementation of the Transport seam
(``clients.transport``), beside swarm's own HTTP/1.1 client (``clients.h1``). It owns the
process's aiohttp session settings (``open_http_session``) and maps aiohttp's exceptions to
``ExchangeFailure`` here, in ``aiohttp_failure``, so nothing above it names an aiohttp class.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from swarm.clients.transport import (
    DEAD_POOLED_RETRIES,
    ExchangeFailure,
    ReadCallback,
    Transport,
    no_response,
)
from swarm.record import Status

log = logging.getLogger(__name__)

_perf_ns = time.perf_counter_ns


def open_http_session(
    *, max_connections: int = 20_000, connect_timeout_s: float | None = 10.0
) -> aiohttp.ClientSession:
    """The one aiohttp session of a process, with a pool sized for thousands of streams.

    Must be called inside a running event loop. Close it with ``await session.close()``.
    """
    connector = aiohttp.TCPConnector(
        limit=max_connections,
        limit_per_host=0,
        keepalive_timeout=60.0,
        ttl_dns_cache=300,
    )
    return aiohttp.ClientSession(
        connector=connector,
        trace_configs=[_connection_trace()],
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s),
        auto_decompress=False,
        read_bufsize=1 << 16,
        skip_auto_headers=("User-Agent",),
        headers={"User-Agent": "swarm-loadgen"},
    )


class PoolAttempt:
    """aiohttp trace context: whether the request got a pooled (reused) connection."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


def _connection_trace() -> aiohttp.TraceConfig:
    """Marks a ``PoolAttempt`` (passed as ``trace_request_ctx``) whose connection came from the pool."""

    async def on_reuse(_session: object, ctx: Any, _params: object) -> None:
        attempt = getattr(ctx, "trace_request_ctx", None)
        if isinstance(attempt, PoolAttempt):
            attempt.reused = True

    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(on_reuse)
    return trace


def aiohttp_failure(exc: aiohttp.ClientError | OSError, base_url: str) -> ExchangeFailure:
    """The exchange's failure for an exception of aiohttp's (or the socket's beneath it)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ExchangeFailure(Status.CONNECT_ERROR, f"cannot connect to {base_url}: {exc.os_error}")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ExchangeFailure(Status.CONNECT_ERROR, f"connect timed out: {exc}")
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return ExchangeFailure(Status.TIMEOUT, f"read timed out: {exc}")
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError)):
        return ExchangeFailure(Status.STREAM_ERROR, f"connection broken: {type(exc).__name__}: {exc}")
    if isinstance(exc, aiohttp.ClientError):
        return ExchangeFailure(Status.STREAM_ERROR, f"{type(exc).__name__}: {exc}")
    return ExchangeFailure(Status.CONNECT_ERROR, f"{type(exc).__name__}: {exc}")


class AiohttpResponse:
    """A response of aiohttp's behind the ``Response`` protocol."""

    __slots__ = ("_base_url", "_resp", "status")

    def __init__(self, resp: aiohttp.ClientResponse, base_url: str) -> None:
        self._resp = resp
        self._base_url = base_url
        self.status = resp.status

    @property
    def headers(self) -> Mapping[str, str]:
        return {k.lower(): v for k, v in self._resp.headers.items()}

    async def stream(self, on_read: ReadCallback) -> None:
        try:
            async for data in self._resp.content.iter_any():
                on_read(data, _perf_ns(), -1)  # no kernel stamps behind aiohttp
        except (aiohttp.ClientError, OSError) as exc:
            raise aiohttp_failure(exc, self._base_url) from exc

    async def read(self, limit: int | None) -> bytes:
        try:
            if limit is None:
                return await self._resp.read()
            return await self._resp.content.read(limit)
        except (aiohttp.ClientError, OSError) as exc:
            raise aiohttp_failure(exc, self._base_url) from exc

    async def close(self) -> None:
        try:
            self._resp.release()  # what leaving ``async with resp`` does
            await self._resp.wait_for_close()
        except (aiohttp.ClientError, OSError) as exc:
            raise aiohttp_failure(exc, self._base_url) from exc


class AiohttpEndpoint:
    """Posts to one URL through the session."""

    __slots__ = ("_base_url", "_headers", "_session", "_target", "_url")

    def __init__(
        self, session: aiohttp.ClientSession, url: str, headers: Mapping[str, str], base_url: str, target: str
    ) -> None:
        self._session = session
        self._url = url
        self._headers = dict(headers)
        self._base_url = base_url
        self._target = target

    async def post(
        self, body: list[bytes], request_id: str | None, on_resend: Callable[[], None]
    ) -> AiohttpResponse:
        headers = self._headers
        if request_id is not None:
            headers = {**headers, "X-Request-Id": request_id}
        payload = body.pop()
        try:
            for retry in range(DEAD_POOLED_RETRIES + 1):
                attempt = PoolAttempt()
                try:
                    resp = await self._session.post(
                        self._url, data=payload, headers=headers, trace_request_ctx=attempt
                    )
                    break
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                    if isinstance(exc, aiohttp.ClientConnectorError):
                        raise
                    if not attempt.reused or retry == DEAD_POOLED_RETRIES:
                        raise no_response(exc) from exc
                    log.debug(
                        "request to %s: pooled connection was closed (%s); sending again", self._target, exc
                    )
                    on_resend()
        except (aiohttp.ClientError, OSError) as exc:
            raise aiohttp_failure(exc, self._base_url) from exc
        return AiohttpResponse(resp, self._base_url)


class AiohttpTransport:
    """The ``Transport`` over one aiohttp session (closed with the transport)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    def endpoint(
        self, url: str, headers: Mapping[str, str], *, base_url: str, target: str
    ) -> AiohttpEndpoint:
        return AiohttpEndpoint(self.session, url, headers, base_url, target)

    async def close(self) -> None:
        await self.session.close()


def as_transport(connections: Transport | aiohttp.ClientSession) -> Transport:
    """A transport for ``HttpEngineClient``: an aiohttp session given as it is (the probe,
    tests, older callers) is wrapped; a transport is returned unchanged."""
    if isinstance(connections, aiohttp.ClientSession):
        return AiohttpTransport(connections)
    return connections
