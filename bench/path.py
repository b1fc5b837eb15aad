"""Path efficiency: streamed chunks/s through swarm's whole path beside two bare loops.

All read the same streams from one zero-delay emulator process (``--timing zero``), with the
same number of requests in flight, one after the other in this one process:

- baseline (transport included): a plain ``aiohttp`` loop that posts the same body and only
  reads the stream (``iter_any``), counting nothing but bytes: what a user of aiohttp would
  write; the target (swarm >= 0.8 of it) is held against this one;
- baseline (same transport kind): a bare HTTP/1.1 protocol on keep-alive connections that
  reads each chunked response as bytes until its last chunk: the floor for a client of
  swarm's own kind, so the ratio to it is swarm's per-event work alone (parsing, timing,
  records, the trace), without the choice of transport mixed in;
- swarm: ``HttpEngineClient.send`` (SSE parsing, JSON decoding, a chunk time per read, usage,
  the RequestRecord) and every record written by a ``ParquetTraceSink``.

The figure is content events per second of this process's CPU time (requests x output tokens
/ CPU seconds): what one event costs the client, which is what decides whether the client
saturates before the engine. Wall-clock events/s are shown too, but on this 2-core machine they
also measure the emulator (the other process) and the neighbours' load. Both sides count the
same events however the network groups them. The sides run alternately, REPEATS times each,
and each keeps its best run (the machine is shared).
"""

from __future__ import annotations

import asyncio
import tempfile
import time

from bench.common import Row

REQUESTS, TOKENS, IN_FLIGHT = 1500, 200, 32
#: alternating runs of each side; the figures are the best of each
REPEATS = 5


async def _bare(url: str, body: bytes) -> tuple[float, float]:
    import aiohttp

    sem = asyncio.Semaphore(IN_FLIGHT)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one() -> None:
            async with (
                sem,
                session.post(
                    url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
                ) as resp,
            ):
                async for _ in resp.content.iter_any():
                    pass

        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one() for _ in range(REQUESTS)))
        return _rates(t0, c0)


class _BareH1(asyncio.Protocol):
    """One keep-alive connection that reads each chunked response as bytes only, until the
    body's last chunk (``0\\r\\n\\r\\n``): the least an HTTP/1.1 client of swarm's kind can do."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] | None = None
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.tail = (self.tail + data)[-5:]
        if self.tail == b"0\r\n\r\n" and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc}"))


async def _bare_h1(url: str, body: bytes) -> tuple[float, float]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    loop = asyncio.get_running_loop()
    conns = [(await loop.create_connection(_BareH1, host, port))[1] for _ in range(IN_FLIGHT)]

    async def serve(proto: _BareH1, n: int) -> None:
        assert proto.transport is not None
        for _ in range(n):
            proto.done, proto.tail = loop.create_future(), b""
            proto.transport.write(request)
            await proto.done

    share = [REQUESTS // IN_FLIGHT + (i < REQUESTS % IN_FLIGHT) for i in range(IN_FLIGHT)]
    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(serve(p, n) for p, n in zip(conns, share, strict=True)))
    rates = _rates(t0, c0)
    for p in conns:
        if p.transport is not None:
            p.transport.close()
    return rates


def _rates(t0: float, c0: float) -> tuple[float, float]:
    """(events per wall second, events per CPU second of this process) since ``t0``/``c0``."""
    events = REQUESTS * TOKENS
    return events / (time.perf_counter() - t0), events / max(time.process_time() - c0, 1e-9)


async def _swarm(url: str) -> tuple[float, float]:
    from swarm.clients.client import HttpEngineClient, open_transport
    from swarm.engines.registry import get_engine
    from swarm.request import ChatMessage, EngineRequest
    from swarm.trace.sink import ParquetTraceSink

    sem = asyncio.Semaphore(IN_FLIGHT)
    request = EngineRequest(messages=(ChatMessage("user", "count to many"),), max_tokens=TOKENS)
    with tempfile.TemporaryDirectory() as tmp:
        sink = ParquetTraceSink(tmp, writer="bench")
        async with open_transport(url) as session:  # what swarm run uses: its own HTTP/1.1 client
            client = HttpEngineClient(session, url, get_engine("sglang"), model="m")
            payload = client.encode(request)
            bad = 0

            async def one() -> None:
                nonlocal bad
                async with sem:
                    record = await client.send(request, payload)
                bad += not record.ok
                sink.write(record)

            t0, c0 = time.perf_counter(), time.process_time()
            await asyncio.gather(*(one() for _ in range(REQUESTS)))
            sink.close()
            rates = _rates(t0, c0)
        if bad:
            raise RuntimeError(f"{bad} requests failed")
    return rates


def run() -> list[Row]:
    from swarm.emulator.process import EmulatorProcess
    from swarm.jsoncodec import dumps

    body = dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "count to many"}],
            "max_tokens": TOKENS,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
    )
    bare: list[tuple[float, float]] = []
    bare_h1: list[tuple[float, float]] = []
    full: list[tuple[float, float]] = []
    with EmulatorProcess(["--engine", "sglang", "--timing", "zero", "--cache-tokens", "0"]) as emu:
        for _ in range(REPEATS):  # alternating, best of each: this machine's noise is large
            bare.append(asyncio.run(_bare(emu.url, body)))
            bare_h1.append(asyncio.run(_bare_h1(emu.url, body)))
            full.append(asyncio.run(_swarm(emu.url)))
    cpu_full, cpu_bare = max(f[1] for f in full), max(b[1] for b in bare)
    cpu_h1 = max(b[1] for b in bare_h1)
    wall_full, wall_bare = max(f[0] for f in full), max(b[0] for b in bare)
    ratio = cpu_full / cpu_bare
    return [
        Row(
            "path overhead: chunks per client CPU-s, swarm's full path vs bare HTTP/1.1 reading "
            f"(same transport kind, bytes only; {IN_FLIGHT} in flight)",
            cpu_full,
            "chunks/cpu-s",
            baseline=cpu_h1,
            ratio=cpu_full / cpu_h1,
        ),
        Row(
            f"path efficiency: chunks per client CPU-s, swarm's full path vs bare aiohttp ({IN_FLIGHT} in flight)",
            cpu_full,
            "chunks/cpu-s",
            baseline=cpu_bare,
            ratio=ratio,
            target=">= 0.8",
            met=ratio >= 0.8,
        ),
        Row(
            "path efficiency: chunks/s wall clock (both also wait on the emulator)",
            wall_full,
            "chunks/s",
            baseline=wall_bare,
            ratio=wall_full / wall_bare,
        ),
    ]
