"""Failures become records with their own status and a truncated error text, never exceptions.

A purpose-built misbehaving server on loopback picks its misbehaviour from the request's
``model`` field.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
from aiohttp import web
from transports import TRANSPORT, transport  # noqa: F401 - each test runs once per transport

from swarm.clients.client import HttpEngineClient, open_transport
from swarm.engines.registry import get_engine
from swarm.record import MAX_ERROR_CHARS, RequestRecord, Status
from swarm.request import ChatMessage, EngineRequest, Timeouts

CONTENT = b'data: {"choices":[{"index":0,"delta":{"content":"tok"}}]}\n\n'


async def misbehave(request: web.Request) -> web.StreamResponse:
    mode = (await request.json())["model"]
    if mode == "json500":
        return web.json_response({"error": {"message": "engine exploded", "code": 500}}, status=500)
    if mode == "html503":
        return web.Response(
            status=503,
            text="<html><body><h1>503 Service Unavailable</h1><p>try later</p></body></html>",
            content_type="text/html",
        )
    if mode == "json400":
        return web.json_response({"object": "error", "message": "max_tokens must be positive"}, status=400)
    if mode == "huge500":
        return web.Response(status=500, text="x" * 10_000)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if mode == "cut":
        await resp.write(CONTENT * 2)
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return resp
    if mode == "badjson":
        await resp.write(CONTENT + b"data: {not json\n\n")
        await asyncio.sleep(0.05)
        return resp
    if mode == "stall":
        await resp.write(b": keep-alive\n\n")
        await asyncio.sleep(5)
        return resp
    if mode == "stall_mid":
        await resp.write(CONTENT)
        await asyncio.sleep(5)
        return resp
    if mode == "nodone":
        await resp.write(CONTENT * 3)
        await resp.write_eof()
        return resp
    if mode == "errorevent":
        await resp.write(CONTENT + b'data: {"error": {"message": "out of KV cache"}}\n\n')
        return resp
    if mode == "ok":
        await resp.write(CONTENT * 3 + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
    raise AssertionError(mode)


@contextlib.asynccontextmanager
async def serve(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[str]:
    """A chat-completions server on a free loopback port running ``handler``; yields its URL."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def bad_server() -> AsyncIterator[str]:
    async with serve(misbehave) as url:
        yield url


async def send(url: str, mode: str, timeouts: Timeouts | None = None) -> RequestRecord:
    async with open_transport(url, kind=TRANSPORT["kind"]) as session:
        client = HttpEngineClient(session, url, get_engine("vllm"), model=mode, timeouts=timeouts)
        return await client.send(EngineRequest(messages=(ChatMessage("user", "hi"),), max_tokens=4))


async def test_ok_stream_is_ok(bad_server: str) -> None:
    r = await send(bad_server, "ok")
    assert r.status is Status.OK and len(r.chunk_ns) == 3 and r.error is None


async def test_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = await send(f"http://127.0.0.1:{port}", "ok")
    assert r.status is Status.CONNECT_ERROR
    assert "cannot connect" in (r.error or "")
    assert r.ttft_ns is None and r.chunk_ns == ()


@pytest.mark.parametrize(
    ("mode", "http", "text"),
    [
        ("json500", 500, "HTTP 500: engine exploded"),
        ("html503", 503, "HTTP 503: 503 Service Unavailable try later"),
        ("json400", 400, "HTTP 400: max_tokens must be positive"),
    ],
)
async def test_http_errors(bad_server: str, mode: str, http: int, text: str) -> None:
    r = await send(bad_server, mode)
    assert r.status is Status.HTTP_ERROR
    assert r.http_status == http
    assert r.error == text


async def test_long_error_text_is_truncated(bad_server: str) -> None:
    r = await send(bad_server, "huge500")
    assert r.status is Status.HTTP_ERROR
    assert r.error is not None and len(r.error) <= MAX_ERROR_CHARS and r.error.endswith("[truncated]")


async def test_stream_cut_midway(bad_server: str) -> None:
    r = await send(bad_server, "cut")
    assert r.status is Status.STREAM_ERROR
    assert len(r.chunk_ns) == 2  # what arrived before the cut is kept
    assert r.error


async def test_invalid_json_chunk(bad_server: str) -> None:
    r = await send(bad_server, "badjson")
    assert r.status is Status.STREAM_ERROR
    assert "invalid JSON" in (r.error or "")


async def test_error_object_in_stream(bad_server: str) -> None:
    r = await send(bad_server, "errorevent")
    assert r.status is Status.STREAM_ERROR
    assert "out of KV cache" in (r.error or "")


async def test_stream_without_done(bad_server: str) -> None:
    r = await send(bad_server, "nodone")
    assert r.status is Status.STREAM_ERROR
    assert r.error == "stream ended without [DONE]"
    assert len(r.chunk_ns) == 3


async def test_stall_past_first_token_timeout(bad_server: str) -> None:
    r = await send(bad_server, "stall", Timeouts(first_token_s=0.2, total_s=3))
    assert r.status is Status.TIMEOUT
    assert r.error == "no first token within 0.2 s"
    assert r.e2e_ns is not None and 0.2e9 <= r.e2e_ns < 2e9
    # the test task itself is not left cancelled by the client's own timeout
    await asyncio.sleep(0)


async def test_stall_mid_stream_hits_total_timeout(bad_server: str) -> None:
    r = await send(bad_server, "stall_mid", Timeouts(first_token_s=0.2, total_s=0.4))
    assert r.status is Status.TIMEOUT
    assert r.error == "request not finished within 0.4 s"
    assert len(r.chunk_ns) == 1


async def test_outside_cancellation_is_recorded(bad_server: str) -> None:
    task = asyncio.create_task(send(bad_server, "stall"))
    await asyncio.sleep(0.2)
    task.cancel()
    r = await task
    assert r.status is Status.CANCELLED


async def test_api_key_from_env_is_sent_and_never_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.Response(status=401, text=f"bad key {request.headers.get('Authorization')}")

    monkeypatch.setenv("SWARM_TEST_KEY", "sk-planted-secret")
    async with serve(echo) as url, open_transport(url, kind=TRANSPORT["kind"]) as session:
        client = HttpEngineClient(session, url, get_engine("vllm"), api_key_env="SWARM_TEST_KEY")
        r = await client.send(EngineRequest(messages=(ChatMessage("user", "hi"),), max_tokens=1))
    assert seen == ["Bearer sk-planted-secret"]
    assert r.status is Status.HTTP_ERROR
    assert "sk-planted-secret" not in repr(r) and "[REDACTED]" in (r.error or "")


class _ClosingServer:
    """A raw HTTP/1.1 server that advertises keep-alive but, on the ``drop_on``-th request of a
    connection, closes it without answering (what a client sees when a server closed a pooled
    connection that the pool handed out again before noticing)."""

    def __init__(self, drop_on: int) -> None:
        self.drop_on = drop_on
        self.connections = 0
        self.answered = 0
        self.dropped = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                served += 1
                if served == self.drop_on:
                    self.dropped += 1
                    return
                body = CONTENT * 2 + b"data: [DONE]\n\n"
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )
                await writer.drain()
                self.answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


async def _with_closing_server(drop_on: int, sends: int) -> tuple[_ClosingServer, list[RequestRecord]]:
    server = _ClosingServer(drop_on)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        async with open_transport("http://", kind=TRANSPORT["kind"]) as session:
            client = HttpEngineClient(session, f"http://127.0.0.1:{port}", get_engine("llamacpp"))
            records = []
            for _ in range(sends):  # one after another: each reuses the previous connection
                records.append(
                    await client.send(EngineRequest(messages=(ChatMessage("user", "hi"),), max_tokens=2))
                )
    finally:
        listener.close()
        await listener.wait_closed()
    return server, records


def test_a_dead_pooled_connection_is_retried_on_a_fresh_one() -> None:
    server, records = asyncio.run(_with_closing_server(drop_on=2, sends=3))
    assert [r.status for r in records] == [Status.OK] * 3
    assert all(len(r.chunk_ns) == 2 for r in records)
    assert server.dropped >= 1 and server.answered == 3  # each request answered exactly once
    assert server.connections >= 2


def test_a_connection_closed_on_its_first_request_is_a_failure_not_a_retry() -> None:
    server, records = asyncio.run(_with_closing_server(drop_on=1, sends=2))
    # no response at all: the connection failed (the fault injector's "refuse" looks the same)
    assert [r.status for r in records] == [Status.CONNECT_ERROR] * 2
    assert all(
        (r.error or "").startswith("connection closed by the server before a response: ") for r in records
    )
    assert server.connections == 2 and server.answered == 0  # one attempt per request, no more


async def test_a_bug_in_the_client_is_a_row_not_a_lost_request(
    bad_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import swarm.clients.client as client_module

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(client_module, "run_exchange", broken)
    r = await send(bad_server, "ok")
    assert r.status is Status.CLIENT_ERROR and r.error == "swarm client error: RuntimeError: boom"


@contextlib.contextmanager
def paced_server(pieces: list[tuple[float, bytes]]) -> Iterator[str]:
    """A one-request SSE server on its own thread (it keeps its pace while the client's loop is
    blocked): after the request, each ``(delay_s, event)`` in turn, then the end of the body."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(65536)
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
            body = head.split(b"\r\n\r\n", 1)[1]
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            for delay_s, event in pieces:
                time.sleep(delay_s)
                conn.sendall(b"%x\r\n%s\r\n" % (len(event), event))
            conn.sendall(b"0\r\n\r\n")
            with contextlib.suppress(OSError):
                conn.recv(1)  # until the client closes

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        thread.join(timeout=5)


@pytest.mark.parametrize(
    ("pieces", "timeouts", "error"),
    [
        ([(0, CONTENT), (0.5, CONTENT), (0, b"data: [DONE]\n\n")], Timeouts(idle_s=0.25, total_s=5),
         "stream stalled: no data for 0.25 s after the first token"),
        ([(0.5, CONTENT), (0, b"data: [DONE]\n\n")], Timeouts(first_token_s=0.25, total_s=5),
         "no first token within 0.25 s"),
    ],
    ids=["stall_mid", "stall_first"],
)  # fmt: skip
async def test_a_stall_is_a_timeout_though_the_client_was_too_busy_to_see_its_timer(
    pieces: list[tuple[float, bytes]], timeouts: Timeouts, error: str
) -> None:
    """The server goes silent past a deadline while the client's loop is blocked (a busy
    machine): when the loop comes back, the rest of the answer and the deadline's timer are
    both due. The verdict follows when the data arrived, not which the loop ran first."""
    with paced_server(pieces) as url:
        asyncio.get_running_loop().call_later(0.1, time.sleep, 1.0)  # blocks through the silence
        r = await send(url, "any", timeouts)
    assert r.status is Status.TIMEOUT and r.error == error, (r.status, r.error)
