"""The emulator's per-engine behaviour objects, its OpenAI formats and streamed-event templates."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from swarm.emulator import behaviour as beh
from swarm.emulator.behaviour import SGLANG, TRTLLM, VLLM, engine_behaviour
from swarm.emulator.block_cache import BlockCache
from swarm.emulator.config import EmulatorConfig
from swarm.emulator.faults import FaultSpec
from swarm.emulator.http_server import _Handlers
from swarm.emulator.injection import RequestFault
from swarm.emulator.radix_cache import RadixCache
from swarm.emulator.responses import CHAT, COMPLETION, EventTemplate, OpenAIFormat, sse
from swarm.jsoncodec import dumps


def test_lookup_by_config() -> None:
    assert engine_behaviour(EmulatorConfig(engine="sglang")) is SGLANG
    assert engine_behaviour(EmulatorConfig(engine="trtllm")) is TRTLLM
    assert engine_behaviour(EmulatorConfig(engine="vllm")) is VLLM
    assert engine_behaviour(EmulatorConfig(engine="llamacpp")) is beh.LLAMACPP
    assert set(beh.BEHAVIOURS) == {"sglang", "trtllm", "vllm", "llamacpp"}


def test_cache_kind_and_pages() -> None:
    cfg = EmulatorConfig(engine="trtllm", block_tokens=16, cache_capacity_tokens=320)
    cache = TRTLLM.make_cache(cfg)
    assert isinstance(cache, BlockCache)
    assert cache.block_tokens == 16 and cache.capacity_blocks == 20
    assert TRTLLM.page_tokens(cfg) == 16
    assert isinstance(SGLANG.make_cache(EmulatorConfig()), RadixCache)
    assert SGLANG.page_tokens(cfg) == 1
    # each block engine's own size unless the config sets one: vLLM's CPU build uses 128
    assert TRTLLM.page_tokens(EmulatorConfig(engine="trtllm")) == 32
    assert VLLM.page_tokens(EmulatorConfig(engine="vllm")) == 128
    vllm_cache = VLLM.make_cache(EmulatorConfig(engine="vllm", cache_capacity_tokens=1280))
    assert isinstance(vllm_cache, BlockCache) and vllm_cache.capacity_blocks == 10


@pytest.mark.parametrize(
    ("behaviour", "page", "matched", "prompt", "expected"),
    [
        (SGLANG, 1, 100, 100, 99),  # the last prompt token is always computed
        (SGLANG, 1, 40, 100, 40),
        (SGLANG, 1, 0, 0, 0),
        (TRTLLM, 32, 64, 64, 32),  # cap 63 rounds down to one block
        (TRTLLM, 32, 64, 65, 64),
        (TRTLLM, 32, 32, 100, 32),
        (TRTLLM, 32, 96, 31, 0),
        (VLLM, 128, 256, 273, 256),  # measured on vLLM's CPU build: 256 of 273
        (VLLM, 128, 256, 256, 128),  # a whole prompt cached: its last block is computed again
    ],
)
def test_cached_tokens_cap(
    behaviour: beh.EngineBehaviour, page: int, matched: int, prompt: int, expected: int
) -> None:
    assert behaviour.cached_tokens(matched, prompt, page) == expected


def test_usage_reports_cached_tokens_as_each_engine() -> None:
    on, off = EmulatorConfig(cache_report=True), EmulatorConfig(cache_report=False)
    assert SGLANG.reports_cached_tokens(on, 5)
    assert not SGLANG.reports_cached_tokens(on, 0)
    assert not SGLANG.reports_cached_tokens(off, 5)
    assert SGLANG.cache_report(off) is False
    for cfg in (on, off):  # trtllm has no switch: always, also 0
        assert TRTLLM.reports_cached_tokens(cfg, 0)
        assert TRTLLM.cache_report(cfg) is True
        assert VLLM.reports_cached_tokens(cfg, 0)  # as with --enable-prompt-tokens-details


def test_request_fields_and_plain_answers() -> None:
    assert SGLANG.chat_fields is None and SGLANG.completion_fields is None
    assert TRTLLM.chat_fields is not None and "messages" in TRTLLM.chat_fields
    assert TRTLLM.completion_fields is not None and "prompt" in TRTLLM.completion_fields
    assert "messages" not in TRTLLM.completion_fields
    assert (SGLANG.health_text, TRTLLM.health_text) == ("OK", "")
    assert (SGLANG.owned_by, TRTLLM.owned_by) == ("sglang", "tensorrt_llm")


@pytest.mark.parametrize("behaviour", [SGLANG, TRTLLM, VLLM])
def test_routes_name_existing_handlers_once(behaviour: beh.EngineBehaviour) -> None:
    routes = (*beh.COMMON_ROUTES, *behaviour.routes)
    assert len({(r.method, r.path) for r in routes}) == len(routes)
    for r in routes:
        assert callable(getattr(_Handlers, r.handler, None)), r
    paths = {r.path: r.handler for r in routes}
    assert paths["/metrics"] == ("iteration_stats" if behaviour is TRTLLM else "prometheus")
    assert ("/generate" in paths) == (behaviour is SGLANG)
    assert ("/version" in paths) == (behaviour is not SGLANG)
    assert ("/reset_prefix_cache" in paths) == (behaviour is VLLM)


def test_metric_names_are_each_engines() -> None:
    for behaviour, prefix in ((SGLANG, "sglang:"), (TRTLLM, "trtllm_"), (VLLM, "vllm:")):
        names = [m.name for m in behaviour.metrics] + [h.name for h in behaviour.histograms]
        assert len(set(names)) == len(names)
        assert all(n.startswith(prefix) for n in names)
    assert {h.meaning for h in TRTLLM.histograms} == {"ttft", "e2e", "tpot", "queue"}


def test_only_the_behaviour_module_branches_on_the_engine() -> None:
    folder = Path(beh.__file__).parent
    branching = [
        p.name
        for p in sorted(folder.glob("*.py"))
        if p.name != "behaviour.py" and re.search(r"\.engine\s*(==|!=|in\s)", p.read_text())
    ]
    assert branching == []


# -- OpenAI formats and byte templates -------------------------------------------------------------

HEAD = {"id": "x-1", "object": "o", "created": 7, "model": "m\u00e9"}


def _event(raw: bytes) -> dict[str, Any]:
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    out: dict[str, Any] = json.loads(raw[6:-2])
    return out


@pytest.mark.parametrize("fmt", [CHAT, COMPLETION])
def test_event_template_matches_a_dict_event(fmt: OpenAIFormat) -> None:
    """A templated content event is byte for byte the event a dict would encode to."""
    t = EventTemplate.for_answer(fmt, HEAD)
    text = ' q"\\\u00fc'
    raw = t.prefix + dumps(text) + t.suffix
    content: dict[str, Any] = {"delta": {"content": text}} if fmt is CHAT else {"text": text}
    choice = {"index": 0, **content, "logprobs": None, "finish_reason": None}
    assert raw == sse({**HEAD, "choices": [choice]})
    stamped = t.prefix + b'"a"' + t.stamp_head + b"%d}\n\n" % 123
    assert _event(stamped)["swarm_sent_ns"] == 123
    assert _event(stamped)["choices"][0]["finish_reason"] is None


def test_formats_differ_only_where_the_apis_do() -> None:
    assert (CHAT.id_prefix, COMPLETION.id_prefix) == ("chatcmpl-", "cmpl-")
    assert (CHAT.object, CHAT.chunk_object) == ("chat.completion", "chat.completion.chunk")
    assert COMPLETION.object == COMPLETION.chunk_object == "text_completion"
    assert CHAT.whole_choice("hi")["message"] == {"role": "assistant", "content": "hi"}
    assert COMPLETION.whole_choice("hi")["text"] == "hi"
    assert CHAT.final_choice()["delta"] == {} and COMPLETION.final_choice()["text"] == ""
    opening = CHAT.opening_event(HEAD)
    assert opening is not None
    assert _event(opening)["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert COMPLETION.opening_event(HEAD) is None


def test_request_fault_points() -> None:
    spec = FaultSpec()
    no_done = RequestFault("no_done", spec, request=None)  # type: ignore[arg-type]
    assert no_done.drops_done
    assert not RequestFault("cut", spec, request=None).drops_done  # type: ignore[arg-type]
    assert no_done.half_tokens(10) == 5
    assert no_done.half_tokens(1) == 1
    no_done.cut_whole_answer()  # not a cut: nothing happens
