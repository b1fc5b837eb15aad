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


def test_a_hit_needs_the_sliding_parts_of_the_tail_before_it() -> None:
    # blocks of 4, a window of 9: a hit needs the sliding parts of its last cdiv(8, 4) = 2 blocks,
    # and vLLM hashes only those of a prompt's tail before its last token's block
    cache = BlockCache(block_tokens=4, swa_tokens=9, swa_groups=2)
    seq = tokens("s", 22)  # 5 full blocks; its last token in block 5
    cache.insert(seq)
    assert cache.size_blocks == 5 + 2 * 2  # full parts, and blocks 3-4 in each sliding group
    probe = seq + tokens("q", 6)
    assert cache.match(probe) == 20
    assert cache.match(seq[:12] + tokens("r", 4)) == 0  # no sliding parts before the tail
    cache.evict(1)  # the tail's last block, in the first sliding group, goes first
    assert cache.match(probe) == 0


def test_a_hit_never_covers_a_prompts_last_token() -> None:
    """vLLM computes at least a prompt's last token, so the same prompt sent again hits up to
    the block that token is in, and that is the one boundary whose tail it keeps
    (``replay_boundaries``): a longer prompt over a block-aligned one hits there too."""
    cache = BlockCache(block_tokens=4, swa_tokens=9, swa_groups=2)
    seq = tokens("s", 16)
    cache.insert(seq)
    assert cache.match(seq) == 12  # 3 blocks, not 4
    assert cache.match([*seq, *tokens("x", 1)]) == 12


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
    """vLLM frees a running request's sliding blocks out of its window at its next step: those
    of its prompt's tail join the free queue then (after whatever finished before it), the
    others were never hashed and are not cached at all."""
    cache = BlockCache(block_tokens=4, swa_tokens=9, swa_groups=2)
    running, finished = tokens("r", 24), tokens("f", 8)
    cache.insert(running)
    held = cache.lock(running)  # admitted: every sliding part held while it computes
    assert held.swa_at == list(range(6))
    assert cache.size_blocks == 6 + 2 * 6
    cache.insert(finished)  # another request finishes: its blocks are free
    cache.trim(held, 24)  # the next step: blocks 0-3 leave the window
    assert held.swa_at == [4, 5]
    assert cache.size_blocks == 6 + 2 * 6 - 2 * 3 + 2 + 2 * 1  # blocks 0-2 uncached; the finished one: 2 blocks, its tail
    cache.evict(1)  # the oldest free part: the finished one's tail, not block 3's freed after it
    assert cache.match([*finished, *tokens("x", 1)]) == 0 and cache.match([*running, *tokens("x", 1)]) == 20


def test_a_prompt_that_lost_its_tail_computes_its_sliding_parts_anew() -> None:
    """A hit shorter than the full-attention blocks stored (its sliding tail evicted) computes
    every block past it anew in every group, holding them while it prefills, as vLLM allocates
    them (its KV events, 2026-12-03: such a call's admission evicted 48 blocks' worth); the
    copies stored there stay in the pool, evictable, until they go; the sliding tail before
    where the full-attention match stopped is kept (vLLM's ``shared_prefix_boundary``); the
    parts out of the new tail go back uncached at its next step."""
    cache = BlockCache(block_tokens=4, swa_tokens=9, swa_groups=2)
    seq = tokens("s", 22)
    cache.insert(seq)  # 5 full parts, blocks 3-4's sliding parts in 2 groups
    cache.evict(4 * 4)  # the tail's 4 sliding parts go: no hit on it
    assert cache.size_blocks == 5
    longer = [*seq, *tokens("t", 10)]
    assert cache.match(longer) == 0
    held = cache.admit(longer, 0)
    assert held.swa_at == list(range(8))
    # 8 blocks in every group, as computed from 0; and the 5 full copies stored before
    assert cache.size_blocks == 8 + 2 * 8 + 5
    cache.trim(held, len(longer))
    # kept: the junction's tail (blocks 3-4) and the new prompt's (5-6); the window holds
    # 6-7; blocks 0-2 went back to the pool
    assert held.swa_at == [6, 7]
    assert cache.size_blocks == 8 + 2 * 5 + 5
    cache.unlock(held)
    assert cache.size_blocks == 8 + 2 * 4 + 5  # block 7 is past the prompt's tail: not cached
    assert cache.match([*longer, *tokens("x", 1)]) == 28
    assert cache.match([*seq[:20], *tokens("u", 8)]) == 20  # the junction serves a sibling
    cache.evict(5 * 4)  # the stale copies are the oldest: they go first
    assert cache.size_blocks == 8 + 2 * 4 and cache.match([*longer, *tokens("x", 1)]) == 28


def test_a_shared_prefix_is_hit_from_the_third_request_on() -> None:
    """A prompt's own sliding tail is its replay tail only, so a second prompt sharing its first
    1,024 tokens finds no hit; its full-attention match pins the tail before that junction
    (vLLM's ``shared_prefix_boundary``), and the third hits it."""
    shared = tokens("sys", 1024)
    arrivals = [Arrival(100.0 * i, [*shared, *tokens(f"u{i}-", 500)], 2) for i in range(3)]
    sim = simulate(arrivals, **GEMMA3, kv_capacity_tokens=199 * 128, cache_capacity_tokens=199 * 128)
    assert [g.cached_tokens for g in sim.gens] == [0, 0, 1024]


def test_a_running_request_holds_its_window_in_the_sliding_groups() -> None:
    sim = simulate([Arrival(0.0, tokens("p", 970), 4)], **GEMMA3, kv_capacity_tokens=200 * 128)
    gen = sim.gens[0]
    assert gen.n_out and not sim.preemptions
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
    with pytest.raises(ValueError, match="swa_tokens on vllm needs swa_groups"):
        EmulatorConfig(engine="vllm", swa_tokens=512)
    assert EmulatorConfig(engine="vllm", swa_tokens=512, swa_groups=5).swa_groups == 5
    assert EmulatorConfig(engine="llamacpp", swa_tokens=512).swa_tokens == 512  # slots: no groups


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
    cached prompt holds (and computes) the sliding parts from its hit's window on only."""
    cache = BlockCache(block_tokens=4, swa_tokens=9, swa_groups=2)
    first = tokens("a", 22)
    cache.insert(first)
    extended = [*first, *tokens("b", 14)]
    hit = cache.match(extended)
    assert hit == 20
    cache.insert(extended)
    held = cache.lock(extended, hit_tokens=hit)
    assert held.swa_at == list(range(cache.swa_window_start(hit), 9)) == list(range(3, 9))
    assert cache.size_blocks == 9 + 2 * 6  # nothing in the sliding groups before block 3


def test_a_long_output_keeps_only_its_window_out_of_the_cache() -> None:
    """A running request's output takes from the prefix cache its full-attention blocks and, in
    the sliding groups, only the blocks of its window."""
    from swarm.emulator.generation import Generation

    model = EngineModel(
        EmulatorConfig(
            **GEMMA3, timing="batch", kv_capacity_tokens=199 * 128, cache_capacity_tokens=199 * 128
        )
    )  # type: ignore[arg-type]
    gen = Generation(model, tokens("p", 463), 4000, 0.0)
    gen.n_out = 2000
    model.running.append(gen)
    model._fit_cache_to_pool()
    # 463 + 2000 tokens: 20 blocks, 3 of them the prompt's full ones: 17 full-attention blocks
    # past it; the window holds blocks 15-19 (5) in each of 5 sliding groups
    assert model.cache.capacity_blocks == 199 - 17 - 5 * 5


def _chained_agents(agents: int, calls: int, **config: object) -> dict[tuple[int, int], int]:
    """``agents`` agents on a virtual clock, each sending ``calls`` calls one after another (a
    981-token prompt of its own, then each call its last one's prompt and output and 15 tokens
    more; 8 tokens out): the cached tokens of each (agent, call)."""
    model = EngineModel(EmulatorConfig(timing="batch", **config))  # type: ignore[arg-type]
    live = {a: (0, model.submit(tokens(f"a{a}-", 981), 8, now_s=0.0)) for a in range(agents)}
    cached: dict[tuple[int, int], int] = {}
    now = 0.0
    while model.running or model.waiting:
        plan, step_s = model.begin_step(now)
        now += step_s
        model.end_step(plan, now)
        for a, (call, gen) in list(live.items()):
            if not gen.finished:
                continue
            cached[(a, call)] = gen.cached_tokens
            del live[a]
            if call + 1 < calls:
                prompt = [*gen.prompt, *gen.output, *tokens(f"a{a}c{call}-", 15)]
                live[a] = (call + 1, model.submit(prompt, 8, now_s=now))
    return cached


def test_at_the_pools_edge_the_twin_loses_the_prefixes_vllm_lost() -> None:
    """docs/emulator.md's sweep point at 6 agents (3 chained calls of ~1,000 tokens each, a pool
    of 199 blocks): vLLM's KV cache events (2026-12-03) showed each new prompt's admission taking
    48 blocks (every block of every group, its hit being 0) and so evicting the tail of the
    agent that finished before: of the 12 later calls one hit, in two runs. A twin that reused
    the full-attention blocks of a prompt it could not hit, and counted the sliding parts out
    of its tail as cached, kept 5 of them."""
    cached = _chained_agents(
        6, 3, **GEMMA3, kv_capacity_tokens=199 * 128, cache_capacity_tokens=199 * 128,
        step_base_ms=141.7, prefill_ms_per_token=3.2, decode_ms_per_seq=7.5,
    )  # fmt: skip
    later = [cached[(a, c)] for a in range(6) for c in (1, 2)]
    assert sum(1 for hit in later if hit) <= 1, later
    assert all(cached[(a, 0)] == 0 for a in range(6))


def test_an_idle_vllm_steps_on_the_first_request_of_a_burst() -> None:
    """Six 981-token prompts sent within 4 ms to vLLM's CPU build (docs/emulator.md's sweep at
    6 agents, three runs): its first step computed the first alone, the next two the others two
    by two (2,048 tokens a step), then the last; a burst reaches the engine core one request
    at a time through vLLM's API server. SGLang's twin keeps batching a burst whole."""
    burst = [Arrival(0.0, tokens(f"b{i}-", 981), 2) for i in range(6)]
    sim = simulate(burst, **GEMMA3, kv_capacity_tokens=199 * 128, cache_capacity_tokens=199 * 128)
    firsts = [sim.token_s[i][0] for i in range(6)]
    assert firsts[0] < firsts[1] == firsts[2] < firsts[3] == firsts[4] < firsts[5]
    sglang = simulate(burst, engine="sglang", kv_capacity_tokens=199 * 128)
    assert len({sglang.token_s[i][0] for i in range(2)}) == 1


def test_requests_waiting_for_room_are_all_taken_when_it_frees() -> None:
    """The one-request first step is an idle engine's: requests that waited for room while
    another ran are admitted together when it finishes (vLLM's core takes all it holds)."""
    waiting = [
        Arrival(0.0, tokens("a", 1000), 4),
        Arrival(0.001, tokens("b", 300), 2),
        Arrival(0.001, tokens("c", 300), 2),
    ]
    sim = simulate(waiting, engine="vllm", block_tokens=128, kv_capacity_tokens=9 * 128, cache_capacity_tokens=9 * 128)
    assert sim.token_s[1][0] == sim.token_s[2][0] > sim.token_s[0][-1]
