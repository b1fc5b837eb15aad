"""TTFT and ITL as the client records them are consistent with what the emulator did, on any
machine however busy.

The emulator runs as its own process in ``fixed`` timing (first token 50 ms after a request
arrives, then one every 10 ms on absolute times) with ``--stamp-chunks``: every content event
carries the emulator's send time (CLOCK_MONOTONIC, which the client's ``perf_counter_ns``
shares on one host). What must hold, with 1 stream and with 200 concurrent streams:

- every content event is received no earlier than the emulator sent it (the client stamps
  arrivals, not something before them), and one stamp per recorded chunk;
- a request's TTFT is at least the 50 ms the emulator waited, and its last chunk comes no
  sooner than 50 + 29 x 10 ms after sending (a token is never sent early);
- ``ttft_ns`` is the first chunk's offset.

How *close* the client comes (the receive delay's p50 / p99) is a magnitude of the machine:
``python -m bench client-delay`` measures it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from swarm.clients.client import HttpEngineClient, open_http_session
from swarm.engines.registry import get_engine
from swarm.record import RequestRecord
from swarm.request import ChatMessage, EngineRequest

TTFT_MS, ITL_MS, TOKENS = 50, 10, 30


async def run_streams(url: str, streams: int) -> list[RequestRecord]:
    async with open_http_session() as session:
        client = HttpEngineClient(session, url, get_engine("sglang"), measure_send_stamps=True)
        lifetime_s = (TTFT_MS + ITL_MS * TOKENS) / 1000

        async def one(i: int) -> RequestRecord:
            await asyncio.sleep(lifetime_s * i / streams)  # about `streams` open at any moment
            req = EngineRequest(messages=(ChatMessage("user", f"stream {i} go"),), max_tokens=TOKENS)
            return await client.send(req)

        if streams == 1:
            return [await one(0) for _ in range(5)]
        return list(await asyncio.gather(*(one(i) for i in range(streams))))


def measure(url: str, streams: int) -> dict[str, object]:
    records = asyncio.run(run_streams(url, streams))
    return {
        "errors": [r.error for r in records if not r.ok][:3],
        "chunks": sorted({len(r.chunk_ns) for r in records}),
        "stamps": sorted({len(r.extra.get("stamp_delays_ns") or []) for r in records}),
        "min_stamp_delay_ns": min(d for r in records for d in r.extra.get("stamp_delays_ns") or [0]),
        "min_ttft_ns": min(r.ttft_ns or 0 for r in records),
        "min_last_chunk_ns": min(r.chunk_ns[-1] if r.chunk_ns else 0 for r in records),
        "ttft_is_first_chunk": all(r.ttft_ns == r.chunk_ns[0] for r in records if r.chunk_ns),
    }


@pytest.mark.parametrize("streams", [1, 200])
def test_recorded_times_never_precede_the_emulators(
    emulator_process: Callable[..., object], streams: int
) -> None:
    emu = emulator_process(
        "--timing", "fixed", "--first-token-ms", str(TTFT_MS), "--token-ms", str(ITL_MS), "--stamp-chunks"
    )
    out = subprocess.run(
        [sys.executable, __file__, emu.url, str(streams)],  # type: ignore[attr-defined]
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout)
    assert result["errors"] == []
    assert result["chunks"] == [TOKENS] and result["stamps"] == [TOKENS]
    assert result["min_stamp_delay_ns"] >= 0, result
    assert result["min_ttft_ns"] >= TTFT_MS * 1_000_000, result
    assert result["min_last_chunk_ns"] >= (TTFT_MS + (TOKENS - 1) * ITL_MS) * 1_000_000, result
    assert result["ttft_is_first_chunk"]


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
