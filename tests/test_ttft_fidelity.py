"""TTFT and ITL as measured by the client match what the emulator was told to do.

The emulator runs as its own process in ``fixed`` timing: first token 50 ms after arrival,
then one token every 10 ms. Medians of the client's TTFT and ITL must be within 2 ms of
that, with 1 stream and with 200 concurrent streams.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
from collections.abc import Callable

import pytest

from swarm.engines.client import EngineRequest, HttpEngineClient, open_http_session
from swarm.engines.dialects import ChatMessage
from swarm.engines.profiles import get_profile
from swarm.record import RequestRecord

TTFT_MS, ITL_MS, TOKENS = 50.0, 10.0, 30


async def run_streams(url: str, streams: int) -> list[RequestRecord]:
    async with open_http_session() as session:
        client = HttpEngineClient(session, url, get_profile("sglang"))
        # warm the connection pool so connect time is not part of the first request's TTFT
        await asyncio.gather(
            *(
                client.send(EngineRequest(messages=(ChatMessage("user", "warm"),), max_tokens=1))
                for _ in range(streams)
            )
        )
        # spread starts over one stream's lifetime: about `streams` are open at any moment
        lifetime_s = (TTFT_MS + ITL_MS * TOKENS) / 1000

        async def one(i: int) -> RequestRecord:
            await asyncio.sleep(lifetime_s * i / streams)
            req = EngineRequest(messages=(ChatMessage("user", f"stream {i} go"),), max_tokens=TOKENS)
            return await client.send(req)

        if streams == 1:  # one stream: nine requests one after another, for a median of nine
            return [await one(0) for _ in range(9)]
        records = await asyncio.gather(*(one(i) for i in range(streams)))
        records += await asyncio.gather(*(one(i) for i in range(streams)))
        return list(records)


def measure(url: str, streams: int) -> dict[str, object]:
    records = asyncio.run(run_streams(url, streams))
    return {
        "errors": [r.error for r in records if not r.ok][:3],
        "chunks": sorted({len(r.chunk_ns) for r in records}),
        "ttft_ms": statistics.median(r.ttft_ns / 1e6 for r in records if r.ttft_ns is not None),
        "itl_ms": statistics.median(
            (b - a) / 1e6 for r in records for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)
        ),
    }


@pytest.mark.parametrize("streams", [1, 200])
def test_ttft_and_itl_medians_within_2ms(emulator_process: Callable[..., object], streams: int) -> None:
    emu = emulator_process("--timing", "fixed", "--first-token-ms", str(TTFT_MS), "--token-ms", str(ITL_MS))
    # measured in a fresh interpreter: the test process's own heap (a long pytest session) would
    # add garbage-collection pauses that have nothing to do with swarm's client
    out = subprocess.run(
        [sys.executable, __file__, emu.url, str(streams)],  # type: ignore[attr-defined]
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout)
    assert result["errors"] == []
    assert result["chunks"] == [TOKENS]
    assert abs(result["ttft_ms"] - TTFT_MS) <= 2.0, result
    assert abs(result["itl_ms"] - ITL_MS) <= 2.0, result


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
