"""The emulator's llama.cpp twin: slots, the RAM prompt cache, a sliding-window model's checkpoints.

Each expectation is what llama-server did or its code says (``tools/server/server-context.cpp``
and ``server-task.cpp``, build 0c1e570; docs/emulator.md), most measured on this machine with
Gemma 3 270M (a sliding window of 512): a repeated 48-token prompt came back with 43 cached
tokens (its checkpoint at 44, less one), and a chain of calls each extending the last reused
all but one token more each time.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable

import pytest
from test_emulator_scheduler import Arrival, simulate, tokens

from swarm.emulator.config import EmulatorConfig
from swarm.emulator.engine_model import EngineModel
from swarm.emulator.generation import PromptTooLong
from swarm.emulator.http_server import EmulatorThread
from swarm.emulator.slot_cache import SlotCache
from swarm.sweep import curves as sc
from swarm.sweep.compare import errors_against_first
from swarm.token_ids import TokenIds


def run_one(cache: SlotCache, prompt: TokenIds, output: TokenIds | None = None) -> int:
    """One request through ``cache`` as the engine model drives it: its cached tokens."""
    cached = cache.match(prompt)
    handle = cache.lock(prompt)
    cache.unlock(handle)
    cache.insert(prompt + output if output is not None else prompt)
    return cached


def test_a_repeated_prompt_reuses_all_but_its_last_token_or_its_checkpoint() -> None:
    plain = SlotCache(4)
    prompt = tokens("p", 48)
    assert run_one(plain, prompt) == 0
    assert run_one(plain, prompt) == 47  # the last prompt token is always computed
    swa = SlotCache(4, swa_tokens=512)
    assert run_one(swa, prompt) == 0
    assert run_one(swa, prompt) == 43  # llama-server with Gemma 3: back to its checkpoint at N - 4, less one
    assert run_one(swa, prompt) == 43  # the checkpoint at 44 taken again is still the newest


def test_past_the_window_the_whole_prefix_is_reused() -> None:
    """A prompt longer than the window: the window cache covers the prefix's last 512 tokens."""
    swa = SlotCache(1, swa_tokens=512)
    prompt = tokens("p", 800)
    run_one(swa, prompt)
    assert run_one(swa, prompt) == 799  # llama-server: 800 of 801 cached, the calibration's long prompts


def test_a_prefix_with_no_checkpoint_under_it_is_computed_again() -> None:
    """A short prompt sharing only a head with the slot's: no checkpoint at or before the
    shared part, so nothing is reused ("forcing full prompt re-processing")."""
    swa = SlotCache(1, swa_tokens=512)
    run_one(swa, tokens("s", 60) + tokens("a", 200))
    assert run_one(swa, tokens("s", 60) + tokens("b", 200)) == 0
    plain = SlotCache(1)
    run_one(plain, tokens("s", 60) + tokens("a", 200))
    assert run_one(plain, tokens("s", 60) + tokens("b", 200)) == 60


def test_the_slot_with_the_largest_shared_share_is_taken_else_the_least_recently_used() -> None:
    cache = SlotCache(3)
    a, b = tokens("a", 100), tokens("b", 100)
    first = cache.lock(a)  # all empty: the LRU pass, ties to the highest slot
    assert first == [2]
    cache.unlock(first)
    second = cache.lock(b)  # shares nothing with slot 2: LRU again, slot 1 (never used)
    assert second == [1]
    cache.unlock(second)
    assert cache.lock(a + tokens("x", 10)) == [2]  # 100 of 110 shared with slot 2
    # under the similarity threshold (10 %): the least recently used idle slot
    assert cache.choose(tokens("a", 5) + tokens("z", 95)).slot.index == 0  # type: ignore[union-attr]


def test_the_ram_prompt_cache_brings_back_a_prompt_its_slot_gave_up() -> None:
    with_ram = SlotCache(1, ram_tokens=10_000, cache_idle_slots=False)
    without = SlotCache(1)
    a, b = tokens("a", 300), tokens("b", 300)
    for cache in (with_ram, without):
        run_one(cache, a)
        run_one(cache, b)  # the one slot goes to b: a is saved to RAM first (with RAM)
    assert run_one(with_ram, a) == 299 and with_ram.loaded_tokens == 299
    assert run_one(without, a) == 0


def test_idle_slots_go_to_ram_and_a_unified_kv_empties_them() -> None:
    cache = SlotCache(2, ram_tokens=10_000, kv_unified=True)
    a = tokens("a", 200)
    run_one(cache, a)
    held = cache.lock(tokens("b", 200))  # a request starts: every idle slot is saved and emptied
    assert all(not s.tokens for s in cache.slots if not s.busy)
    assert [len(e.tokens) for e in cache.ram] == [200]
    cache.unlock(held)
    assert cache.match(a) == 199  # restored from RAM into a slot


def test_ram_keeps_its_newest_entries_within_its_room() -> None:
    cache = SlotCache(1, ram_tokens=500, cache_idle_slots=False)
    for tag in "abc":
        run_one(cache, tokens(tag, 300))
    assert [e.tokens[0] for e in cache.ram] == [tokens("b", 1)[0]]  # a went to make room for b


def test_requests_past_the_slots_wait_first_come_first_served() -> None:
    arrivals = [Arrival(0.0, tokens(f"r{i}-", 50), 4) for i in range(3)]
    sim = simulate(arrivals, engine="llamacpp", parallel=2)
    assert sim.peak_running == 2
    assert sim.ttft_s(2) > max(sim.token_s[0][-1], sim.token_s[1][-1]) - 1e-9  # after a slot freed


def test_a_sliding_window_prompt_computes_its_tail_in_steps_of_its_own() -> None:
    sim = simulate([Arrival(0.0, tokens("p", 600), 2)], engine="llamacpp", parallel=1, swa_tokens=512)
    # chunks 84, 512, 4 (breaks where 516 and 4 tokens are left), then one decode step
    assert sim.ttft_s(0) == pytest.approx(3 * 4.0 / 1000)
    plain = simulate([Arrival(0.0, tokens("p", 600), 2)], engine="llamacpp", parallel=1)
    assert plain.ttft_s(0) == pytest.approx(4.0 / 1000)


def test_a_step_that_emits_no_token_costs_less_and_overlap_takes_the_larger() -> None:
    base = {"engine": "llamacpp", "parallel": 1, "swa_tokens": 512, "prefill_ms_per_token": 0.1}
    sim = simulate([Arrival(0.0, tokens("p", 600), 1)], **base, step_emit_ms=3.0)
    # 84 tokens (no token out: 1 + 8.4), 512 (1 + 51.2), 4 (emits: 4 + 0.4)
    assert sim.ttft_s(0) == pytest.approx((9.4 + 52.2 + 4.4) / 1000)
    over = simulate([Arrival(0.0, tokens("p", 600), 1)], **base, step_emit_ms=3.0, step_overlap=True)
    assert over.ttft_s(0) == pytest.approx((8.4 + 51.2 + 4.0) / 1000)


def test_a_prompt_over_the_slot_context_is_refused() -> None:
    model = EngineModel(EmulatorConfig(engine="llamacpp", parallel=2, ctx_size=1024, timing="batch"))
    with pytest.raises(PromptTooLong, match="exceeds the available context size"):
        model.submit(tokens("p", 512), 4, now_s=0.0)  # a slot has pad256(1024 / 2) = 512
    model.submit(tokens("p", 511), 4, now_s=0.0)


def test_llamacpp_knobs_belong_to_the_llamacpp_profile() -> None:
    with pytest.raises(ValueError, match="parallel is llamacpp's knob"):
        EmulatorConfig(engine="vllm", parallel=2)


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def test_the_twin_serves_props_slots_and_slot_erase(emulator: Callable[..., EmulatorThread]) -> None:
    emu = emulator(engine="llamacpp", parallel=2, timing="zero")
    props = _get(emu.url + "/props")
    assert isinstance(props, dict) and props["total_slots"] == 2 and props["emulator"] is True
    body = json.dumps({"model": "m", "prompt": "one two three four five", "max_tokens": 2}).encode()
    request = urllib.request.Request(emu.url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert json.loads(resp.read())["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    slots = _get(emu.url + "/slots")
    assert isinstance(slots, list) and [s["id"] for s in slots] == [0, 1]
    held = [s for s in slots if s["n_prompt_tokens"]]
    assert len(held) == 1
    erase = urllib.request.Request(f"{emu.url}/slots/{held[0]['id']}?action=erase", method="POST")
    with urllib.request.urlopen(erase, timeout=10) as resp:
        assert json.loads(resp.read())["n_erased"] == held[0]["n_prompt_tokens"]
    metrics = urllib.request.urlopen(emu.url + "/metrics", timeout=10).read().decode()
    assert "llamacpp:prompt_tokens_total" in metrics and "llamacpp:requests_deferred" in metrics


# --- a twin's sweep against its engine's --------------------------------------------------------


def _points(figures: list[dict[str, float]]) -> list[sc.SweepPoint]:
    return [sc.SweepPoint(float(i + 1), f, True, None) for i, f in enumerate(figures)]


def test_errors_against_the_engine_per_load_and_the_cliff_in_ladder_steps() -> None:
    def fig(ttft: float, hit: float, vs_ideal: float) -> dict[str, float]:
        return {"ttft_ms.p50": ttft, "ttft_ms.p99": 2 * ttft, "output_tokens_per_s": 100.0, "e2e_ms.p50": ttft + 50,
                "hit_ratio": hit, "hit_vs_ideal": vs_ideal}  # fmt: skip

    engine = _points([fig(100, 0.8, 1.0), fig(100, 0.8, 1.0), fig(200, 0.0, 0.0), fig(400, 0.0, 0.0)])
    close = _points([fig(110, 0.8, 1.0), fig(95, 0.8, 1.0), fig(220, 0.0, 0.0), fig(380, 0.0, 0.0)])
    late = _points([fig(100, 0.8, 1.0), fig(100, 0.8, 1.0), fig(100, 0.8, 1.0), fig(120, 0.0, 0.0)])
    curves = {"engine": (0, engine), "close": (1, close), "late": (2, late)}
    out = errors_against_first(curves, ["engine", "close", "late"], [1.0, 2.0, 3.0, 4.0])
    assert out["reference"] == "engine"
    near = out["series"]["close"]
    assert near["by_load"][0]["ttft_ms.p50"] == pytest.approx(0.10)
    assert near["by_load"][2]["hit_ratio"] == 0.0  # both lost every hit: no error
    assert near["worst"] == pytest.approx(0.10) and near["cliff_steps"] == 0 and near["within"]
    far = out["series"]["late"]
    assert far["cliff_steps"] == pytest.approx(1.0) and far["worst"] == pytest.approx(0.7)
    assert not far["within"]  # the cliff a step late, but TTFT off by 70 %
