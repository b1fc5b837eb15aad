"""The emulator as a client sees it: cached tokens per profile, quirks, metrics, endpoints."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import aiohttp
import pytest

from swarm.clients.client import HttpEngineClient, open_http_session
from swarm.emulator.engine_model import STEP_CATCHUP_S
from swarm.emulator.http_server import EmulatorThread
from swarm.engines.registry import get_engine
from swarm.record import RequestRecord, Status
from swarm.request import ChatMessage, EngineRequest

Factory = Callable[..., EmulatorThread]


def prefix(n: int, tag: str = "p") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


async def send_pair(
    url: str, engine: str, dialect: str, n: int, **kw: object
) -> tuple[RequestRecord, RequestRecord]:
    async with open_http_session() as session:
        client = HttpEngineClient(session, url, get_engine(engine), dialect=dialect)
        shared = prefix(n)
        out = []
        for q in ("alpha beta gamma", "delta epsilon"):
            req = EngineRequest(
                messages=(ChatMessage("system", shared), ChatMessage("user", q)),
                max_tokens=4,
                **kw,  # type: ignore[arg-type]
            )
            out.append(await client.send(req))
        return out[0], out[1]


@pytest.mark.parametrize("dialect", ["openai-chat", "openai-completions", "sglang-generate"])
@pytest.mark.parametrize("n", [1, 31, 100, 257])
def test_sglang_radix_reports_shared_prefix_exactly(emulator: Factory, dialect: str, n: int) -> None:
    emu = emulator(engine="sglang")
    first, second = asyncio.run(send_pair(emu.url, "sglang", dialect, n))
    assert first.status is Status.OK and second.status is Status.OK, (first.error, second.error)
    assert first.cached_tokens == 0
    assert second.prompt_tokens == n + 2
    assert second.cached_tokens == n


@pytest.mark.parametrize("dialect", ["openai-chat", "openai-completions"])
@pytest.mark.parametrize("n", [1, 31, 32, 100, 257])
def test_trtllm_blocks_report_full_blocks_only(emulator: Factory, dialect: str, n: int) -> None:
    emu = emulator(engine="trtllm")
    first, second = asyncio.run(send_pair(emu.url, "trtllm", dialect, n))
    assert first.status is Status.OK and second.status is Status.OK, (first.error, second.error)
    assert first.cached_tokens == 0
    assert second.cached_tokens == n // 32 * 32


def test_non_streamed_requests_report_the_same(emulator: Factory) -> None:
    emu = emulator(engine="sglang")
    _first, second = asyncio.run(send_pair(emu.url, "sglang", "openai-chat", 50, stream=False))
    assert second.cached_tokens == 50 and second.completion_tokens == 4
    assert second.ttft_ns == second.chunk_ns[0] and len(second.chunk_ns) == 1


def test_generated_tokens_enter_the_cache(emulator: Factory) -> None:
    emu = emulator(engine="sglang")

    async def go() -> tuple[RequestRecord, RequestRecord]:
        async with open_http_session() as session:
            client = HttpEngineClient(session, emu.url, get_engine("sglang"))
            parent_msgs = (ChatMessage("system", prefix(40)), ChatMessage("user", "think"))
            parent = await client.send(EngineRequest(messages=parent_msgs, max_tokens=12, keep_text=True))
            assert parent.output_text
            child_msgs = (
                *parent_msgs,
                ChatMessage("assistant", parent.output_text),
                ChatMessage("user", "go on"),
            )
            child = await client.send(EngineRequest(messages=child_msgs, max_tokens=3))
            return parent, child

    parent, child = asyncio.run(go())
    assert parent.completion_tokens == 12
    # 40 + 1 prompt words and 11 of the 12 generated words are cached (the last one was sampled,
    # never computed: SGLang caches ``(origin_input_ids + output_ids)[:-1]``); the rest is new
    assert child.cached_tokens == 41 + 11
    assert child.prompt_tokens == 41 + 12 + 2


def test_sglang_omits_cached_details_when_zero_and_trtllm_always_sends(emulator: Factory) -> None:
    sg, trt = emulator(engine="sglang"), emulator(engine="trtllm")

    async def usage(url: str) -> dict:
        async with aiohttp.ClientSession() as s:
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": "fresh words only"}],
                "max_tokens": 2,
            }
            async with s.post(url + "/v1/chat/completions", json=body) as r:
                return (await r.json())["usage"]

    assert "prompt_tokens_details" not in asyncio.run(usage(sg.url))
    assert asyncio.run(usage(trt.url))["prompt_tokens_details"] == {"cached_tokens": 0}


def test_trtllm_rejects_unknown_fields_and_stream_usage_needs_option(emulator: Factory) -> None:
    trt = emulator(engine="trtllm")

    async def go() -> tuple[int, str, bytes]:
        async with aiohttp.ClientSession() as s:
            bad = {"model": "m", "messages": [{"role": "user", "content": "x"}], "regex": "a+"}
            async with s.post(trt.url + "/v1/chat/completions", json=bad) as r:
                status, text = r.status, await r.text()
            plain = {
                "model": "m",
                "messages": [{"role": "user", "content": "x"}],
                "max_tokens": 2,
                "stream": True,
            }
            async with s.post(trt.url + "/v1/chat/completions", json=plain) as r:
                stream = await r.read()
            return status, text, stream

    status, text, stream = asyncio.run(go())
    assert status == 400 and "regex" in text
    assert b'"usage"' not in stream and stream.endswith(b"data: [DONE]\n\n")


def test_client_gets_usage_in_stream_from_trtllm(emulator: Factory) -> None:
    trt = emulator(engine="trtllm")
    _first, second = asyncio.run(send_pair(trt.url, "trtllm", "openai-chat", 64))
    assert second.prompt_tokens == 66 and second.completion_tokens == 4 and second.cached_tokens == 64


def test_metrics_use_engine_names_and_endpoints_exist(emulator: Factory) -> None:
    sg, trt = emulator(engine="sglang"), emulator(engine="trtllm")
    asyncio.run(send_pair(sg.url, "sglang", "openai-chat", 40))
    asyncio.run(send_pair(trt.url, "trtllm", "openai-chat", 64))

    async def get(url: str) -> tuple[int, str]:
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            return r.status, await r.text()

    status, text = asyncio.run(get(sg.url + "/metrics"))
    assert status == 200
    assert "sglang:cached_tokens_total{" in text and "sglang:prompt_tokens_total{" in text
    cached = next(ln for ln in text.splitlines() if ln.startswith("sglang:cached_tokens_total"))
    assert float(cached.split()[-1]) == 40
    status, text = asyncio.run(get(trt.url + "/prometheus/metrics"))
    assert status == 200 and "trtllm_kv_cache_hit_rate{" in text
    status, text = asyncio.run(get(trt.url + "/metrics"))
    assert status == 200 and "kvCacheStats" in text
    for path in ("/health", "/v1/models", "/get_server_info", "/server_info"):
        assert asyncio.run(get(sg.url + path))[0] == 200, path
    status, text = asyncio.run(get(trt.url + "/version"))
    assert status == 200 and '"emulator":true' in text
    assert asyncio.run(get(trt.url + "/generate"))[0] in (404, 405)


def test_trtllm_perf_metrics_state_each_requests_reused_and_missed_blocks(emulator: Factory) -> None:
    """TensorRT-LLM's ``/perf_metrics``: each request finished since the last read, with its
    KV blocks (total, new, reused from the cache, missed) and its times; drained on read."""
    trt = emulator(engine="trtllm")
    first, second = asyncio.run(send_pair(trt.url, "trtllm", "openai-chat", 64))

    async def get(url: str) -> tuple[int, object]:
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            return r.status, await r.json(content_type=None) if r.status == 200 else None

    status, entries = asyncio.run(get(trt.url + "/perf_metrics"))
    assert status == 200 and isinstance(entries, list) and len(entries) == 2
    kv = [e["perf_metrics"]["kv_cache_metrics"] for e in entries]
    for record, blocks in zip((first, second), kv, strict=True):
        assert record.cached_tokens is not None and record.prompt_tokens is not None
        assert blocks["num_reused_blocks"] == record.cached_tokens // 32
        assert blocks["num_reused_blocks"] + blocks["num_missed_blocks"] == -(-record.prompt_tokens // 32)
        assert blocks["num_new_allocated_blocks"] == blocks["num_total_allocated_blocks"] - blocks["num_reused_blocks"]
    assert kv[0]["num_reused_blocks"] == 0 and kv[1]["num_reused_blocks"] == 2  # the shared 64 tokens
    times = entries[1]["perf_metrics"]["timing_metrics"]
    assert times["arrival_time"] <= times["first_scheduled_time"] <= times["first_token_time"] <= times["last_token_time"]
    assert asyncio.run(get(trt.url + "/perf_metrics")) == (200, [])  # drained
    assert asyncio.run(get(emulator(engine="sglang").url + "/perf_metrics"))[0] == 404


def test_flush_cache_drops_the_prefix(emulator: Factory) -> None:
    sg = emulator(engine="sglang")
    asyncio.run(send_pair(sg.url, "sglang", "openai-chat", 40))

    async def flush() -> int:
        async with aiohttp.ClientSession() as s, s.post(sg.url + "/flush_cache") as r:
            return r.status

    assert asyncio.run(flush()) == 200
    first, second = asyncio.run(send_pair(sg.url, "sglang", "openai-chat", 40))
    assert first.cached_tokens == 0 and second.cached_tokens == 40


def test_kv_capacity_makes_requests_wait(emulator: Factory) -> None:
    # capacity for one request at a time: the second waits for the first to finish
    emu = emulator(engine="sglang", kv_capacity_tokens=50, step_base_ms=5.0)

    async def go() -> list[RequestRecord]:
        async with open_http_session() as session:
            client = HttpEngineClient(session, emu.url, get_engine("sglang"))
            reqs = [
                EngineRequest(messages=(ChatMessage("user", prefix(20, t)),), max_tokens=10)
                for t in ("a", "b")
            ]
            return list(await asyncio.gather(*(client.send(r) for r in reqs)))

    a, b = asyncio.run(go())
    assert a.ok and b.ok
    assert a.ttft_ns is not None and b.ttft_ns is not None
    slow, fast = sorted((a, b), key=lambda r: r.sent_ns + (r.ttft_ns or 0), reverse=True)
    assert fast.ttft_ns is not None and slow.ttft_ns is not None
    # the waiting one's first token comes after the other's 9 further steps of 5 ms and its own
    # prefill step (on the wall clock, so how late either was sent does not matter); the step
    # loop times steps from its plan, so a first token emitted late is made up by the steps
    # after it, up to STEP_CATCHUP_S (under a CPU hog: 44.7 ms between the two, once)
    gap_ns = slow.sent_ns + slow.ttft_ns - (fast.sent_ns + fast.ttft_ns)
    assert gap_ns >= 9 * 5_000_000 - STEP_CATCHUP_S * 1e9


def test_prefill_cost_counts_only_uncached_tokens(emulator: Factory) -> None:
    emu = emulator(engine="sglang", step_base_ms=1.0, prefill_ms_per_token=0.2, decode_ms_per_seq=0.0)
    first, second = asyncio.run(send_pair(emu.url, "sglang", "openai-chat", 400))
    assert first.ttft_ns is not None and second.ttft_ns is not None
    # first: ~402 * 0.2 ms = 80 ms of prefill; second: 2 uncached tokens, ~1.4 ms
    assert first.ttft_ns > 70_000_000
    assert second.ttft_ns < first.ttft_ns / 4


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="no scheduling policies on this platform")
def test_the_embedded_emulator_does_not_preempt_the_generator() -> None:
    """``swarm run``'s embedded emulator runs under SCHED_BATCH: a request it is woken by does
    not take the sending generator's core (on loopback a 0.02 ms send took 0.5-1.1 ms)."""
    from swarm.emulator.process import EmulatorProcess

    with EmulatorProcess(["--engine", "sglang"]) as emu:
        assert os.sched_getscheduler(emu.proc.pid) == os.SCHED_BATCH
    assert os.sched_getscheduler(0) != os.SCHED_BATCH  # the generator keeps its own policy
