"""The vLLM twin with sliding-window layers (vLLM's hybrid KV cache manager).

What each expectation rests on: vLLM's ``v1/core`` (``SlidingWindowManager``: a hit needs the
sliding blocks of the last ``cdiv(window - 1, block)`` blocks before it, searched from the
right; blocks wholly out of the window are freed once computed; ``free`` frees a group's
blocks in reverse; unhashed blocks are reused first), and what ``swarm calibrate`` measured of
vLLM's CPU build serving Gemma 3 270M (a window of 512; 3 full and 15 sliding layers, so
1 + 5 KV groups) with ``--num-gpu-blocks-override 200`` on 2026-12-03: 10 fresh prompts of
463 tokens, sent one after another, left the first cached (384 tokens), 11 did not (an earlier
session measured 5 and 6 with 100 blocks).
"""

from __future__ import annotations

import pytest
from test_emulator_scheduler import Arrival, simulate, tokens

from swarm.emulator.block_cache import BlockCache
from swarm.emulator.config import EmulatorConfig
from swarm.emulator.engine_model import EngineModel

#: Gemma 3 270M on vLLM's CPU build: 128-token blocks, a 512-token window, 5 sliding groups
GEMMA3 = {"engine": "vllm", "block_tokens": 128, "swa_tokens": 512, "swa_groups": 5}


def test_a_hit_needs_the_sliding_parts_of_its_last_window() -> None:
    # blocks of 4, a window of 9: a hit needs the sliding parts of its last cdiv(8, 4) = 2 blocks
    cache = BlockCache(block_tokens=4, swa_tokens=9, swa_groups=2)
    seq = tokens("s", 24)
    cache.insert(seq)
    assert cache.size_blocks == 6 + 2 * 6  # every block computed: full and sliding parts
    probe = seq + tokens("q", 4)
    assert cache.match(probe) == 24
    # the sliding parts out of the window (blocks 0-3: freed once computed) go first
    assert cache.evict(4 * 2 * 4) == 4 * 2 * 4
    assert cache.size_blocks == 6 + 2 * 2
    assert cache.match(probe) == 24  # the window's are still there
    # the window's tail sliding part goes next: no 2 sliding blocks in a row are left, no hit
    cache.evict(1)
    assert cache.match(probe) == 0
    assert cache.match(seq[:8] + tokens("r", 4)) == 0  # blocks 0-1 lost their sliding parts too


def test_a_hit_never_covers_a_prompts_last_token() -> None:
    cache = BlockCache(block_tokens=4, swa_tokens=9, swa_groups=2)
    seq = tokens("s", 16)
    cache.insert(seq)
    assert cache.match(seq) == 12  # vLLM computes at least the last token: 3 blocks, not 4
    assert cache.match([*seq, "x"]) == 16


def test_without_sliding_layers_the_block_cache_is_unchanged() -> None:
    cache = BlockCache(block_tokens=4)
    seq = tokens("s", 16)
    cache.insert(seq)
    held = cache.lock(seq)
    assert (
        cache.match(seq) == 16
        and cache.size_blocks == 4
        and held.chain == cache._chain(seq)
        and held.swa_at == []
    )


def test_a_request_frees_its_out_of_window_blocks_when_it_has_computed_them() -> None:
    """vLLM frees a running request's sliding blocks out of its window at its next step (they
    join the free queue then, after whatever finished before): a request running while another
    finishes keeps its older blocks' sliding parts until it lets go of them, and they go after
    the finished one's."""
    cache = BlockCache(block_tokens=4, swa_tokens=9, swa_groups=2)
    running, finished = tokens("r", 24), tokens("f", 8)
    cache.insert(running)
    held = cache.lock(running)  # admitted: every sliding part held while it computes
    assert held.swa_at == list(range(6))
    cache.insert(finished)  # another request finishes: its blocks are free
    cache.trim(held, 24)  # the next step: blocks 0-3 leave the window
    assert held.swa_at == [4, 5]
    cache.evict(1)  # the oldest free block: the finished one's tail, in its first sliding group
    assert cache.match([*finished, "x"]) == 4 and cache.match([*running, "x"]) == 24


def test_a_running_request_holds_its_window_in_the_sliding_groups() -> None:
    sim = simulate([Arrival(0.0, tokens("p", 970), 4)], **GEMMA3, kv_capacity_tokens=200 * 128)
    gen = sim.gens[0]
    assert gen.output and not sim.preemptions
    # 8 full-attention blocks; in each of 5 sliding groups the blocks from (970 - 511) // 128 = 3
    model_used = (8 + 5 * (8 - 3)) * 128
    from swarm.emulator.scheduler import Scheduler

    scheduler: Scheduler[object] = Scheduler(gen._model.scheduler.policy, 200 * 128)  # type: ignore[arg-type]
    assert scheduler.kv(gen) == model_used


@pytest.mark.parametrize(
    ("blocks", "prompts", "held"), [(200, 10, True), (200, 11, False), (100, 5, True), (100, 6, False)]
)
def test_the_twin_holds_as_many_prompts_as_vllm_did(blocks: int, prompts: int, held: bool) -> None:
    """vLLM's CPU build with a 200-block pool kept the first of 10 fresh 463-token prompts and
    lost it at 11 (the module docstring), with 100 blocks 5 and 6 (docs/emulator.md); held: more than half of it cached when sent again, as
    ``swarm calibrate``'s capacity phase counts). Each holds 3 hashed blocks in each of 6
    groups (18 of the pool); its unhashed tail block is reused first."""
    pool = (blocks - 1) * 128  # vLLM keeps one block as its null block
    arrivals = [Arrival(float(i), tokens(f"f{i}-", 463), 1) for i in range(prompts)]
    arrivals.append(Arrival(float(prompts), tokens("f0-", 463), 1))
    sim = simulate(arrivals, **GEMMA3, kv_capacity_tokens=pool, cache_capacity_tokens=pool)
    cached = sim.gens[-1].cached_tokens
    assert (2 * cached > 463) == held, cached
    if held:
        assert cached == 384  # its 3 full blocks, as vLLM reported


def test_sliding_groups_are_vllms_knob_and_need_a_window() -> None:
    with pytest.raises(ValueError, match="swa_groups is vllm's knob"):
        EmulatorConfig(engine="sglang", swa_groups=5)
    with pytest.raises(ValueError, match="swa_groups needs swa_tokens"):
        EmulatorConfig(engine="vllm", swa_groups=5)
    assert EmulatorConfig(engine="vllm", swa_tokens=512, swa_groups=5).swa_groups == 5


def _run_alone(model: EngineModel, prompt: list[str], max_new: int) -> list[str]:
    """One request through ``model`` on a virtual clock until it finishes: its output."""
    gen = model.submit(prompt, max_new, now_s=0.0)
    now = 0.0
    while model.running or model.waiting:
        plan, step_s = model.begin_step(now)
        now += step_s
        model.end_step(plan, now)
    return list(gen.output)


@pytest.mark.parametrize("layout", [GEMMA3, {"engine": "vllm", "block_tokens": 128}])
def test_a_finished_requests_last_token_is_not_cached(layout: dict[str, object]) -> None:
    """vLLM caches the blocks of computed tokens, and a request's last sampled token is never
    computed: a 504-token prompt with 8 tokens out, extended, came back from vLLM with 384
    cached tokens, not 512 (its fourth block one token short; tests/test_engine_twins.py's
    point at 4 agents, 2026-12-03)."""
    model = EngineModel(EmulatorConfig(**layout, timing="batch"))  # type: ignore[arg-type]
    prompt = tokens("p", 504)
    output = _run_alone(model, prompt, 8)
    assert len(output) == 8
    assert model._cached_for([*prompt, *output, *tokens("q", 15)]) == 384


def test_a_hit_holds_no_sliding_parts_before_its_window() -> None:
    """vLLM takes null blocks in the sliding groups before a hit's window: a request extending a
    cached sequence does not hold (nor free anew) the older blocks' sliding parts, so they stay
    older than what finished in between."""
    cache = BlockCache(block_tokens=4, swa_tokens=9, swa_groups=2)
    first, other = tokens("a", 24), tokens("c", 8)
    cache.insert(first)
    cache.insert(other)
    extended = [*first, *tokens("b", 12)]
    hit = cache.match(extended)
    assert hit == 24
    cache.insert(extended)
    held = cache.lock(extended, hit_tokens=hit)
    assert held.swa_at[0] == cache.swa_window_start(hit) == 4
    cache.trim(held, len(extended))
    cache.evict(2 * 4)  # blocks 0-3 of the first, out of every window, go before the other's
    assert cache.match([*other, "x"]) == 8


def test_a_long_output_keeps_only_its_window_out_of_the_cache() -> None:
    """A running request's output takes from the prefix cache its full-attention blocks and, in
    the sliding groups, only the blocks of its window."""
    from swarm.emulator.engine_model import Generation

    model = EngineModel(
        EmulatorConfig(
            **GEMMA3, timing="batch", kv_capacity_tokens=199 * 128, cache_capacity_tokens=199 * 128
        )
    )  # type: ignore[arg-type]
    gen = Generation(model, tokens("p", 463), 4000, 0.0)
    gen.output = tokens("o", 2000)
    model.running.append(gen)
    model._fit_cache_to_pool()
    # 463 + 2000 tokens: 20 blocks, 3 of them the prompt's full ones: 17 full-attention blocks
    # past it; the window holds blocks 15-19 (5) in each of 5 sliding groups
    assert model.cache.capacity_blocks == 199 - 17 - 5 * 5
