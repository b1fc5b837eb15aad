"""The Transport seam: both transports turn the same failure into the same ExchangeFailure.

Each test talks to a raw loopback server through ``open_transport(url, kind=...)`` for swarm's
HTTP/1.1 client and for aiohttp, at the transport's own face (``endpoint``, ``post``,
``Response.stream``), below the EngineClient.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest

from swarm.clients.client import HttpEngineClient, open_transport
from swarm.clients.dialects import ChunkError
from swarm.clients.h1 import H1Pool
from swarm.clients.transport import ExchangeFailure, Response, Transport
from swarm.engines.registry import get_engine
from swarm.errors import InputError
from swarm.record import Status

KINDS = ("h1", "aiohttp")
EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"tok"}}]}\n\n'
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, mode: str) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
    if mode == "reset_before_response":
        writer.transport.abort()
        return
    if mode == "not_http":
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        writer.close()
        return
    writer.write(HEAD + _chunk(EVENT) + _chunk(EVENT))
    await writer.drain()
    if mode == "reset_mid_stream":
        await asyncio.sleep(0.05)
        writer.transport.abort()
        return
    if mode == "bad_event":
        writer.write(_chunk(b"data: {not json\n\n") + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()
        return
    raise AssertionError(mode)


@contextlib.asynccontextmanager
async def serve(mode: str) -> AsyncIterator[str]:
    """A raw HTTP/1.1 server on a free loopback port answering every request with ``mode``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await _serve_one(reader, writer, mode)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


def _noop() -> None:
    pass


async def _post(transport: Transport, base_url: str) -> Response:
    url = base_url + "/v1/chat/completions"
    endpoint = transport.endpoint(url, {"Content-Type": "application/json"}, base_url=base_url, target="t")
    return await endpoint.post([b'{"model":"m"}'], "run/req-1", _noop)


async def _failure(kind: str, base_url: str) -> ExchangeFailure:
    """The failure a POST and a streamed read through transport ``kind`` end in."""
    reads: list[bytes] = []
    async with open_transport(base_url, kind=kind) as transport:
        with pytest.raises(ExchangeFailure) as caught:
            response = await _post(transport, base_url)
            try:
                await response.stream(lambda data, _ns, _lag: bool(reads.append(data)))
            finally:
                await response.close()
    return caught.value


@pytest.mark.parametrize("kind", KINDS)
async def test_a_refused_connection_is_a_connect_error(kind: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    failure = await _failure(kind, f"http://127.0.0.1:{port}")
    assert failure.status is Status.CONNECT_ERROR
    assert failure.error.startswith("cannot connect to ")
    assert isinstance(failure.__cause__, OSError)  # the library's exception is kept as the cause


@pytest.mark.parametrize("kind", KINDS)
async def test_a_reset_mid_stream_is_a_broken_connection(kind: str) -> None:
    async with serve("reset_mid_stream") as url:
        failure = await _failure(kind, url)
    assert failure.status is Status.STREAM_ERROR
    assert failure.error.startswith("connection broken: ")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_reset_before_any_response_on_a_fresh_connection_is_not_sent_again(kind: str) -> None:
    async with serve("reset_before_response") as url:
        failure = await _failure(kind, url)
    assert failure.status is Status.CONNECT_ERROR
    assert failure.error.startswith("connection closed by the server before a response: ")


@pytest.mark.parametrize("kind", KINDS)
async def test_an_answer_that_is_not_http_is_a_stream_error(kind: str) -> None:
    async with serve("not_http") as url:
        failure = await _failure(kind, url)
    assert failure.status is Status.STREAM_ERROR
    assert failure.error


@pytest.mark.parametrize("kind", KINDS)
async def test_the_read_callbacks_own_error_passes_through_unmapped(kind: str) -> None:
    """A bad stream is the exchange's to word (``ChunkError``), not the transport's."""

    def on_read(data: bytes, _ns: int, _lag: int) -> bool:
        if b"not json" in data:
            raise ChunkError("invalid JSON in stream event")
        return False

    async with serve("bad_event") as url, open_transport(url, kind=kind) as transport:
        response = await _post(transport, url)
        try:
            with pytest.raises(ChunkError, match="invalid JSON"):
                await response.stream(on_read)
        finally:
            await response.close()


async def test_the_http1_client_refuses_an_https_target_by_name() -> None:
    pool: Transport = H1Pool()
    try:
        with pytest.raises(InputError, match=r"^https://host:8443/v1/chat/completions: .*plain http only"):
            HttpEngineClient(pool, "https://user:secret@host:8443", get_engine("vllm"))
    finally:
        await pool.close()
