"""Path efficiency: streamed chunks/s through swarm's whole path beside a bare aiohttp loop.

Both read the same streams from one zero-delay emulator process (``--timing zero``), with the
same number of requests in flight, one after the other in this one process:

- baseline: a plain ``aiohttp`` loop that posts the same body and only reads the stream
  (``iter_any``), counting nothing but bytes;
- swarm: ``HttpEngineClient.send`` (SSE parsing, JSON decoding, a chunk time per read, usage,
  the RequestRecord) and every record written by a ``ParquetTraceSink``.

The figure is content events per second (requests x output tokens / elapsed), so both sides
count the same events however the network groups them. Each side runs twice, alternating,
and keeps its better run (this machine is shared).
"""

from __future__ import annotations

import asyncio
import tempfile
import time

from bench.common import Row

REQUESTS, TOKENS, IN_FLIGHT = 1500, 200, 32


async def _bare(url: str, body: bytes) -> float:
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

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(REQUESTS)))
        return REQUESTS * TOKENS / (time.perf_counter() - t0)


async def _swarm(url: str) -> float:
    from swarm.engines.client import EngineRequest, HttpEngineClient, open_transport
    from swarm.engines.dialects import ChatMessage
    from swarm.engines.profiles import get_profile
    from swarm.trace.sink import ParquetTraceSink

    sem = asyncio.Semaphore(IN_FLIGHT)
    request = EngineRequest(messages=(ChatMessage("user", "count to many"),), max_tokens=TOKENS)
    with tempfile.TemporaryDirectory() as tmp:
        sink = ParquetTraceSink(tmp, writer="bench")
        async with open_transport(url) as session:  # what swarm run uses: its own HTTP/1.1 client
            client = HttpEngineClient(session, url, get_profile("sglang"), model="m")
            payload = client.encode(request)
            bad = 0

            async def one() -> None:
                nonlocal bad
                async with sem:
                    record = await client.send(request, payload)
                bad += not record.ok
                sink.write(record)

            t0 = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(REQUESTS)))
            sink.close()
            elapsed = time.perf_counter() - t0
        if bad:
            raise RuntimeError(f"{bad} requests failed")
    return REQUESTS * TOKENS / elapsed


def run() -> list[Row]:
    from swarm.emulator.process import EmulatorProcess
    from swarm.engines.dialects import dumps

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
    bare: list[float] = []
    full: list[float] = []
    with EmulatorProcess(["--engine", "sglang", "--timing", "zero", "--cache-tokens", "0"]) as emu:
        for _ in range(2):
            bare.append(asyncio.run(_bare(emu.url, body)))
            full.append(asyncio.run(_swarm(emu.url)))
    ratio = max(full) / max(bare)
    return [
        Row(
            f"path efficiency: chunks/s, swarm's full path vs bare aiohttp ({IN_FLIGHT} in flight)",
            max(full),
            "chunks/s",
            baseline=max(bare),
            ratio=ratio,
            target=">= 0.8",
            met=ratio >= 0.8,
        )
    ]
