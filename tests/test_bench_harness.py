"""The benchmark harness's contract: its JSON rows, and the send stamps its client-delay case uses."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from swarm.emulator import EmulatorThread
from swarm.engines.client import EngineRequest, HttpEngineClient, open_http_session
from swarm.engines.dialects import ChatMessage
from swarm.engines.profiles import get_profile

ROOT = Path(__file__).resolve().parents[1]


def test_bench_json_rows_have_the_tracked_fields() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "ingest", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)
    assert rows and all(
        set(r) == {"case", "figure", "unit", "baseline", "ratio", "target", "met"} for r in rows
    )
    assert rows[0]["figure"] > 0 and isinstance(rows[0]["met"], bool)


def test_unknown_bench_case_is_refused() -> None:
    out = subprocess.run([sys.executable, "-m", "bench", "nope"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and "unknown case" in out.stderr


def test_send_stamps_give_one_non_negative_delay_per_content_event(
    emulator: Callable[..., EmulatorThread],
) -> None:
    emu = emulator(engine="sglang", timing="fixed", first_token_ms=5, token_ms=2, stamp_chunks=True)

    async def main() -> tuple[object, object]:
        async with open_http_session() as session:
            request = EngineRequest(messages=(ChatMessage("user", "hi"),), max_tokens=12)
            measured = HttpEngineClient(session, emu.url, get_profile("sglang"), measure_send_stamps=True)
            plain = HttpEngineClient(session, emu.url, get_profile("sglang"))
            return await measured.send(request), await plain.send(request)

    record, plain = asyncio.run(main())
    delays = record.extra["stamp_delays_ns"]  # type: ignore[attr-defined]
    assert record.ok and len(delays) == len(record.chunk_ns) == 12  # type: ignore[attr-defined]
    assert all(d >= 0 for d in delays)  # one monotonic clock: received after sent
    assert plain.extra == {} and plain.ok  # type: ignore[attr-defined]
