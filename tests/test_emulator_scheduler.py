"""The emulator's engine schedulers: each documented policy, turned on and off, has the effect the
engine's docs describe, in the direction they describe.

The engine model is driven on a virtual clock (``EngineModel.begin_step`` / ``end_step``, the
two halves of its step loop): requests arrive at set times, each step lasts its modelled time,
and every emitted token is dated on that clock, so each test is exact and nothing sleeps.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from swarm.emulator.config import EmulatorConfig
from swarm.emulator.engine_model import EngineModel
from swarm.emulator.generation import Generation, PromptTooLong
from swarm.emulator.scheduler import Scheduler, SchedulerPolicy
from swarm.token_ids import TokenIds, word_ids

STEP_MS = 4.0


@dataclass
class Arrival:
    at_s: float
    prompt: list[str]
    max_new: int


@dataclass
class Sim:
    """What a virtual run recorded: each request's token times, the most running at once."""

    gens: list[Generation] = field(default_factory=list)
    arrived_s: list[float] = field(default_factory=list)
    token_s: dict[int, list[float]] = field(default_factory=dict)
    peak_running: int = 0
    preemptions: int = 0
    host_loaded_tokens: int = 0
    end_s: float = 0.0
    #: the model's own ITL figure: Σ modelled time per token after a first / such tokens
    model_itl_s: float = 0.0
    #: prompt tokens each request was charged in prefill chunks, over all its admissions
    prefilled: dict[int, int] = field(default_factory=dict)

    def ttft_s(self, i: int) -> float:
        return self.token_s[i][0] - self.arrived_s[i]

    def gaps_s(self, i: int) -> list[float]:
        times = self.token_s[i]
        return [b - a for a, b in itertools.pairwise(times)]

    @property
    def hit_ratio(self) -> float:
        return sum(g.cached_tokens for g in self.gens) / sum(g.prompt_tokens for g in self.gens)


def simulate(arrivals: list[Arrival], **config: Any) -> Sim:
    """Run ``arrivals`` through an engine model of ``config`` on a virtual clock (time 0 up)."""
    settings = {"timing": "batch", "step_base_ms": STEP_MS, "prefill_ms_per_token": 0.0, "decode_ms_per_seq": 0.0}
    model = EngineModel(EmulatorConfig(**{**settings, **config}))
    pending = sorted(arrivals, key=lambda a: a.at_s)
    sim = Sim()
    now = 0.0
    while pending or model.running or model.waiting:
        while pending and pending[0].at_s <= now:
            a = pending.pop(0)
            sim.gens.append(model.submit(a.prompt, a.max_new, now_s=a.at_s))
            sim.arrived_s.append(a.at_s)
        if not model.running and not model.waiting:
            now = pending[0].at_s
            continue
        before = [g.n_out for g in sim.gens]
        plan, step_s = model.begin_step(now)
        for i, g in enumerate(sim.gens):
            sim.prefilled[i] = sim.prefilled.get(i, 0) + plan.chunks.get(id(g), 0)
        now += step_s
        model.end_step(plan, now)
        # the KV in use never passes the capacity (but for one request alone, admitted whatever it needs)
        assert model.kv_used <= model.config.kv_capacity_tokens or len(model.running) <= 1
        sim.peak_running = max(sim.peak_running, plan.batch)
        for i, g in enumerate(sim.gens):
            sim.token_s.setdefault(i, []).extend([now] * (g.n_out - before[i]))
    sim.preemptions = model.stats.preemptions
    sim.host_loaded_tokens = model.stats.host_loaded_tokens
    sim.end_s = now
    st = model.stats
    sim.model_itl_s = st.step_token_model_s / st.step_tokens if st.step_tokens else 0.0
    assert all(g.finished and g.n_out == g.max_new for g in sim.gens)  # every request ran whole
    return sim


def tokens(tag: str, n: int) -> TokenIds:
    """``n`` distinct words of ``tag`` as the engine model holds them: their ids."""
    return word_ids([f"{tag}{i}" for i in range(n)])


# --- SGLang ------------------------------------------------------------------------------------


def _two_families() -> list[Arrival]:
    """16 requests at once, alternating between two 200-token system prompts, each with its
    own 20-token question: a cache that holds one family's prefix at a time."""
    return [
        Arrival(0.0, tokens("X" if i % 2 == 0 else "Y", 200) + tokens(f"q{i}-", 20), 4) for i in range(16)
    ]


def test_sglang_longest_prefix_first_raises_the_hit_ratio_over_fcfs() -> None:
    """SGLang's docs: ``lpm`` serves the waiting requests with the longest cached prefix first,
    for more cache hits; ``fcfs`` (its default) in arrival order. With one request running at a
    time and a cache of one family, FCFS alternates families and evicts each prefix before its
    reuse."""
    common = {"engine": "sglang", "cache_capacity_tokens": 300, "max_running_requests": 1}
    lpm = simulate(_two_families(), schedule_policy="lpm", **common)
    fcfs = simulate(_two_families(), schedule_policy="fcfs", **common)
    assert fcfs.hit_ratio == 0.0  # each prefix evicted by the other before it comes round
    # LPM: after the first X, the other 7 Xs hit their 200 tokens; then the first Y misses and
    # the other 7 Ys hit: 14 of 16 requests hit 200 of 220 tokens
    assert lpm.hit_ratio == pytest.approx(14 * 200 / (16 * 220))
    assert simulate(_two_families(), **common).hit_ratio == fcfs.hit_ratio  # the default
    # past 128 waiting, LPM orders as FCFS (it bounds the prefix matching per step)
    crowd = [Arrival(0.0, tokens("X" if i % 2 == 0 else "Y", 200) + tokens(f"q{i}-", 20), 1) for i in range(130)]
    assert simulate(crowd, schedule_policy="lpm", **common).gens[1].cached_tokens == 0  # Y served second


def test_sglang_prefill_steps_pause_decoding_unless_mixed_chunk() -> None:
    """SGLang runs a prefill batch whenever it can admit, and decodes in the steps between
    (``--enable-mixed-chunk`` puts the decodes into the prefill batch): a stream stalls while
    new prompts come in, and with mixed chunks it does not."""
    arrivals = [Arrival(0.0, tokens("a", 50), 40)]
    arrivals += [Arrival(0.010 + 0.008 * k, tokens(f"b{k}-", 50), 2) for k in range(10)]
    paused = simulate(arrivals, engine="sglang")
    mixed = simulate(arrivals, engine="sglang", enable_mixed_chunk=True)
    step_s = STEP_MS / 1000
    assert max(paused.gaps_s(0)) == pytest.approx(2 * step_s)  # a prefill step between two tokens
    assert max(mixed.gaps_s(0)) == pytest.approx(step_s)  # a token every step
    assert sum(paused.gaps_s(0)) > sum(mixed.gaps_s(0))
    # the model's own ITL figure is what a client of these streams measures (every gap between
    # two tokens of a request, averaged over tokens): a prefill step's pause counts in it
    for sim in (paused, mixed):
        gaps = [gap for i in range(len(sim.gens)) for gap in sim.gaps_s(i)]
        assert sim.model_itl_s == pytest.approx(sum(gaps) / len(gaps))
    assert paused.model_itl_s > step_s == pytest.approx(mixed.model_itl_s)


def test_sglang_reserves_a_share_of_running_outputs_and_retracts_when_decoding_runs_out() -> None:
    """SGLang admits a request when its prompt and whole output fit beside the running ones'
    ``new_token_ratio`` (0.7, falling) share of theirs, so it packs more than a whole-output
    reserve would and retracts a request when decoding then runs out of KV; TensorRT-LLM's
    default reserves every output whole and never does."""
    arrivals = [Arrival(0.0, tokens(f"p{i}-", 100), 300) for i in range(6)]
    sglang = simulate(arrivals, engine="sglang", kv_capacity_tokens=1000)
    whole = simulate(arrivals, engine="trtllm", kv_capacity_tokens=1000, block_tokens=1)
    assert whole.peak_running == 2 and whole.preemptions == 0  # 400 tokens each
    assert sglang.peak_running == 3 and sglang.preemptions >= 1
    assert [g.preemptions for g in sglang.gens][:2] == [0, 0]  # the first, with the most output, stay


def _gen(model: EngineModel, prompt: int, output: int) -> Generation:
    gen = Generation(model, tokens("t", prompt), 100, 0.0)
    gen.n_out = output
    gen.kv_tokens = prompt + output
    return gen


class _EmptyCache:
    """An engine whose cache holds nothing, noting what the scheduler admits and releases."""

    def __init__(self) -> None:
        self.admitted: list[Generation] = []
        self.released: list[Generation] = []

    def cached(self, req: Generation) -> int:
        return 0

    def unshared(self, req: Generation, hit: int) -> int:
        return 0

    def admit(self, req: Generation) -> None:
        self.admitted.append(req)

    def release(self, req: Generation) -> None:
        self.released.append(req)


class _FixedHit(_EmptyCache):
    """An engine whose cache holds ``hit`` tokens of every request, whether asked ahead or not."""

    def __init__(self, hit: int) -> None:
        super().__init__()
        self.hit = hit

    def cached(self, req: Generation) -> int:
        return self.hit

    def peek_cached(self, req: Generation) -> int | None:
        return self.hit


@pytest.mark.parametrize(("block_tokens", "clip"), [(1, None), (1, 50), (16, None), (16, 50)])
def test_a_queue_held_ahead_is_the_one_each_step_would_hold(block_tokens: int, clip: int | None) -> None:
    """``Scheduler.queue_held`` says how many decode steps ahead admit nothing from a queue
    whose first request's KV does not fit, from the KV held at each step (``held_ahead``) with the
    reserve ratio falling step by step: the figures and the count that planning each step, one
    after another, gives. Random batches of running requests (seeded), the ratio falling from
    SGLang's start to its floor in 20 steps."""
    rng = random.Random(5)
    model = EngineModel(EmulatorConfig())
    policy = SchedulerPolicy(
        reserve_ratio=0.7, reserve_decay=0.03, reserve_floor=0.098, admit_reserve=1.0, reserve_clip_tokens=clip,
        block_tokens=block_tokens, prefill_pauses_decode=True,
    )  # fmt: skip
    counts = []
    for _ in range(40):
        running = [_gen(model, rng.randint(10, 300), rng.randint(0, 40)) for _ in range(rng.randint(1, 8))]
        for g in running:
            g.max_new = g.n_out + rng.randint(30, 200)
        head = Generation(model, tokens("h", rng.randint(50, 400)), rng.randint(10, 300), 0.0)
        engine = _FixedHit(rng.randint(0, 40))
        scheduler = Scheduler[Generation](policy, kv_capacity_tokens=0)
        scheduler.ratio = rng.choice([0.7, 0.4, 0.1])
        need = scheduler.admission_need(head, engine.hit, engine)[2]
        scheduler.capacity = scheduler.held_total(running) + need - rng.randint(-20, 120)  # fits now, later or not
        steps = scheduler.decode_stretch((), running, 24)  # none preempted in them, as the twin asks
        if steps < 2:
            continue
        ahead = scheduler.held_ahead(running, steps)
        held = scheduler.queue_held([head], running, engine, steps)
        admits_at = None
        for step in range(steps):  # each step planned in turn: its held KV, and whether it admits
            assert scheduler.held_total(running) == ahead[step]
            plan = scheduler.plan([head], running, engine)
            assert not plan.preempted
            if plan.admitted:
                admits_at = step
                break
            for g in plan.decoding:
                g.n_out += 1
                g.kv_tokens += 1
        counts.append((steps if admits_at is None else admits_at, steps))
        assert (held.steps if held is not None else 0) == counts[-1][0]
    # each kind of batch met: the first fits now, at a later step, or at none
    assert {"now", "later", "none"} <= {"now" if c == 0 else "none" if c == n else "later" for c, n in counts}


@pytest.mark.parametrize(("preempt", "victim"), [("fewest_output", 1), ("newest", 2)])
def test_the_preempted_request_is_the_engines_choice(preempt: str, victim: int) -> None:
    """SGLang retracts the request with the fewest output tokens (the longest prompt among
    equals); vLLM and TensorRT-LLM preempt the last admitted."""
    model = EngineModel(EmulatorConfig())
    running = [_gen(model, 10, 50), _gen(model, 200, 5), _gen(model, 100, 5)]  # admitted in that order
    gens = list(running)
    policy = SchedulerPolicy(reserve_ratio=0, reserve_floor=0, admit_reserve=0, preempt=preempt)  # type: ignore[arg-type]
    waiting: list[Generation] = []
    engine = _EmptyCache()
    plan = Scheduler[Generation](policy, kv_capacity_tokens=300).plan(waiting, running, engine)
    assert plan.preempted == engine.released == [gens[victim]] and waiting == [gens[victim]]  # one goes, to the front
    assert not engine.admitted  # a step that preempts admits nothing here


def test_requests_admitted_together_count_what_each_needs_at_admission() -> None:
    """Within a step, each admitted request counts as held what its admission needed (its
    whole reserve), not what it holds once running (the running ratio's): with a reserve of
    the whole output at admission and none while running, two requests of 151 tokens each
    do not both fit in 300, though the first, running, holds only 51."""
    model = EngineModel(EmulatorConfig())
    policy = SchedulerPolicy(reserve_ratio=0, reserve_floor=0, admit_reserve=1)
    waiting = [Generation(model, tokens(f"w{i}-", 50), 100, 0.0) for i in range(2)]
    engine = _EmptyCache()
    scheduler = Scheduler[Generation](policy, kv_capacity_tokens=300)
    first = list(waiting)
    plan = scheduler.plan(waiting, [], engine)
    assert plan.admitted == engine.admitted == first[:1] and waiting == first[1:] and not engine.released
    assert scheduler.held_total(first[:1]) == 51  # what it holds now: the second would fit beside it
    # with room for both needs (302 of 320) both go in: the first's need is counted once
    waiting, engine = list(first), _EmptyCache()
    plan = Scheduler[Generation](policy, kv_capacity_tokens=320).plan(waiting, [], engine)
    assert plan.admitted == engine.admitted == first and not waiting
    assert not engine.released  # nothing runs out of KV here


# --- host tiers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "tier"),
    [("sglang", {"enable_hierarchical_cache": True}), ("trtllm", {"host_cache_tokens": 600})],
)
def test_a_host_tier_keeps_what_the_device_evicts_and_a_hit_there_costs_its_transfer(
    engine: str, tier: dict[str, Any]
) -> None:
    """SGLang's HiCache (a host pool of ``--hicache-ratio``, 2, times the device's) and
    TensorRT-LLM's host offload keep in host memory what the GPU evicts, and load it back on
    reuse, at a transfer's cost: where FCFS over a one-family cache hit nothing, every request
    but the two first now hits its family's prefix, and each hit adds its tokens' load time."""
    one_at_a_time = {"sglang": "max_running_requests", "trtllm": "max_batch_size"}[engine]
    common = {"engine": engine, "cache_capacity_tokens": 300, one_at_a_time: 1}
    device_only = simulate(_two_families(), **common)
    tiered = simulate(_two_families(), **common, **tier, host_load_ms_per_token=0.01)
    hits = [g.cached_tokens for g in tiered.gens]
    assert hits[:2] == [0, 0] and min(hits[2:]) >= 192  # 200 tokens (six 32-token blocks for trtllm)
    # the device alone kept nothing (radix) or at most three of each prefix's six blocks
    assert max(g.cached_tokens for g in device_only.gens) <= 96
    assert tiered.host_loaded_tokens >= sum(hits) - 96 * len(hits)  # the rest came back from the host
    assert tiered.end_s - device_only.end_s == pytest.approx(0.01 / 1000 * tiered.host_loaded_tokens)


# --- TensorRT-LLM ------------------------------------------------------------------------------


def _long_outputs() -> list[Arrival]:
    return [Arrival(0.0, tokens(f"p{i}-", 100), 200) for i in range(10)]


def test_trtllm_guaranteed_no_evict_never_pauses_and_max_utilization_packs_more() -> None:
    """TensorRT-LLM's docs: ``GUARANTEED_NO_EVICT`` admits a request only when the KV for its
    whole output is there, so a started request is never paused; ``MAX_UTILIZATION`` packs as
    many as the KV holds now and pauses some when it runs out."""
    common = {"engine": "trtllm", "kv_capacity_tokens": 1000}  # 31 blocks of 32 tokens
    guaranteed = simulate(_long_outputs(), capacity_scheduler_policy="GUARANTEED_NO_EVICT", **common)
    packed = simulate(_long_outputs(), capacity_scheduler_policy="MAX_UTILIZATION", **common)
    assert guaranteed.preemptions == 0
    assert guaranteed.peak_running == 3  # 100 + 200 tokens: 10 blocks (320 tokens) each
    assert packed.peak_running > guaranteed.peak_running  # 100 tokens: 4 blocks each
    assert packed.preemptions > 0
    # the default is GUARANTEED_NO_EVICT
    assert simulate(_long_outputs(), **common).preemptions == 0


def test_trtllm_refuses_a_prompt_over_max_num_tokens_unless_chunked_prefill_splits_it() -> None:
    """TensorRT-LLM's LLM API refuses a prompt longer than ``max_num_tokens`` when chunked
    prefill is off (its default): "The sum of prompt length ... should not exceed
    max_num_tokens"; with it on, the prompt is split over steps and its first token comes with
    the last chunk."""
    arrivals = [Arrival(0.0, tokens("long", 3000), 2)]
    with pytest.raises(PromptTooLong, match="3000 tokens exceeds the 1024 tokens one step computes"):
        simulate(arrivals, engine="trtllm", max_num_tokens=1024)
    chunked = simulate(arrivals, engine="trtllm", max_num_tokens=1024, enable_chunked_prefill=True)
    assert chunked.ttft_s(0) == pytest.approx(3 * STEP_MS / 1000)  # 1024 + 1024 + 952
    assert simulate(arrivals, engine="trtllm", max_num_tokens=4096).ttft_s(0) == pytest.approx(STEP_MS / 1000)


# --- vLLM --------------------------------------------------------------------------------------


def test_vllm_chunked_prefill_keeps_decodes_going_and_max_num_seqs_caps_the_batch() -> None:
    """vLLM's docs: with chunked prefill the scheduler puts decodes first and fills the rest of
    ``max_num_batched_tokens`` with prefill chunks, so a long prompt does not stall the streams;
    ``max_num_seqs`` bounds the requests running."""
    arrivals = [Arrival(0.0, tokens("a", 64), 30), Arrival(0.020, tokens("long", 4000), 2)]
    sim = simulate(arrivals, engine="vllm", max_num_batched_tokens=1024, cache_capacity_tokens=None)
    step_s = STEP_MS / 1000
    assert max(sim.gaps_s(0)) == pytest.approx(step_s)  # a token every step
    assert sim.ttft_s(1) == pytest.approx(4 * step_s)  # 1023 + 1023 + 1023 + 931, beside the decode
    many = [Arrival(0.0, tokens(f"r{i}-", 16), 8) for i in range(12)]
    assert simulate(many, engine="vllm", max_num_seqs=5).peak_running == 5


def test_a_request_preempted_mid_prefill_computes_the_rest_of_its_prompt_when_it_returns() -> None:
    """vLLM preempts the newest request, often one still prefilling: when it comes back it
    reuses what it had computed, never more, so every prompt token is computed once at least."""
    arrivals = [Arrival(0.0, tokens(f"d{i}-", 100), 60) for i in range(8)]
    arrivals.append(Arrival(0.001, tokens("long", 1024), 2))
    sim = simulate(
        arrivals, engine="vllm", max_num_batched_tokens=72, max_num_seqs=16, kv_capacity_tokens=1900, block_tokens=1,
        cache_capacity_tokens=None,
    )  # fmt: skip
    long = len(arrivals) - 1
    assert sim.gens[long].preemptions >= 1  # preempted while its 1,024 tokens came in 64 a step
    assert sim.prefilled[long] >= 1024


# --- the knobs ---------------------------------------------------------------------------------


def test_a_knob_of_another_engine_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError, match="max_num_seqs is vllm's knob; this emulator's engine is trtllm"):
        EmulatorConfig(engine="trtllm", max_num_seqs=4)
    with pytest.raises(ValidationError, match="schedule_policy is sglang's"):
        EmulatorConfig(engine="vllm", schedule_policy="fcfs")
    with pytest.raises(ValidationError, match=r"max_num_batched_tokens \(64\) must be at least max_num_seqs \(128\)"):
        EmulatorConfig(engine="vllm", max_num_batched_tokens=64)  # the default cap, 128
    # a cap given over the default budget raises the budget to it, as vLLM does
    policy = EngineModel(EmulatorConfig(engine="vllm", max_num_seqs=4096)).scheduler.policy
    assert (policy.max_running, policy.step_token_budget) == (4096, 4096)


def test_vllm_running_requests_take_their_blocks_from_the_cached_ones() -> None:
    """vLLM keeps cached blocks and running requests' blocks in one pool: as a running request's
    output grows, the cached blocks no request uses go, least recently used first. A 3-block
    prefix X (blocks of 128) is cached; B (3 full blocks and 100 tokens more) then runs with a
    600-token output in a pool of 6 blocks. C, asking for X again just after B starts, still
    finds 2 of its blocks (B's partial block took one); 250 tokens into B's output, none."""

    def c_cached(c_at_s: float) -> int:
        x, y = tokens("x", 384), tokens("y", 484)
        arrivals = [Arrival(0.0, [*x, *tokens("end", 1)], 1), Arrival(1.0, y, 600), Arrival(c_at_s, [*x, *tokens("again", 1)], 1)]
        sim = simulate(arrivals, engine="vllm", cache_capacity_tokens=6 * 128)
        return sim.gens[2].cached_tokens

    assert c_cached(1.02) == 256
    assert c_cached(2.0) == 0


def test_the_admission_checks_sums_are_the_sums_of_each_requests_kv() -> None:
    """``held_total`` and ``grown_total`` (one expression over the running requests) give what
    ``held`` and ``kv`` add up to, request by request, for any block size, clip and ratio."""
    import random

    @dataclass
    class Req:
        n_out: int
        max_new: int
        kv_tokens: int
        prefill_left: int
        prompt_tokens: int
        admit_hit: int = 0
        preemptions: int = 0
        computed: int | None = None

    rng = random.Random(11)
    for block, clip in itertools.product((1, 16, 32), (None, 100)):
        scheduler: Scheduler[Req] = Scheduler(
            SchedulerPolicy(block_tokens=block, reserve_clip_tokens=clip, reserve_ratio=0.7), 10**9
        )
        for ratio in (0.0, 0.31, 0.7, 1.0):
            scheduler.ratio = ratio
            running = [
                Req(rng.randint(0, 300), rng.randint(1, 400), rng.randint(0, 5000), rng.choice((0, 0, 37)),
                    rng.randint(1, 4000))
                for _ in range(rng.randint(0, 40))
            ]  # fmt: skip
            assert scheduler.held_total(running) == sum(scheduler.held(g) for g in running)
            assert scheduler.grown_total(running) == sum(scheduler.kv(g, g.prefill_left == 0) for g in running)


def _step(model: EngineModel, now: float) -> tuple[list[Generation], float]:
    """One turn of the step loop on the virtual clock: the drop of cancelled requests, then a
    step. Returns those it admitted and the time it ended."""
    if model.cancelled_waiting:
        model._drop_cancelled(now)
    plan, step_s = model.begin_step(now)
    model.end_step(plan, now + step_s)
    return list(plan.admitted), now + step_s


@pytest.mark.parametrize("gone", [2, 7], ids=["a_few", "many"])
def test_requests_cancelled_while_they_wait_leave_the_queue_in_order_and_never_run(gone: int) -> None:
    """A reader that goes takes its request out of the queue at the next step, whether a few
    went (each found in the queue) or many (the queue filtered); the rest keep their order."""
    model = EngineModel(EmulatorConfig(engine="sglang", timing="batch", max_running_requests=1))
    gens = [model.submit(tokens(f"p{i}-", 20), 3, now_s=0.0) for i in range(10)]
    admitted, now = _step(model, 0.0)
    assert admitted == gens[:1]
    went = gens[2 : 2 + gone]
    for gen in went:
        gen.cancel()
    ran: list[Generation] = []
    while model.running or model.waiting:
        step_admitted, now = _step(model, now)
        ran += step_admitted
        assert not set(map(id, went)) & set(map(id, model.waiting))
    assert ran == [g for g in gens[1:] if g not in went]


def _retracting_model() -> tuple[EngineModel, list[Generation]]:
    """SGLang's twin packing six 400-token requests into 1,000 tokens of KV (it retracts one)."""
    model = EngineModel(EmulatorConfig(engine="sglang", timing="batch", kv_capacity_tokens=1000))
    return model, [model.submit(tokens(f"p{i}-", 100), 300, now_s=0.0) for i in range(6)]


def test_a_request_cancelled_while_it_runs_and_then_preempted_leaves_the_queue_unrun() -> None:
    """A request whose reader went while it ran, preempted at the next step before any step's
    end could release it, is released at the drop after (its counts close) and never admitted
    again."""
    model, gens = _retracting_model()  # a first run finds the step that preempts, and whom
    now, steps = 0.0, 0
    while steps < 2_000:
        plan, step_s = model.begin_step(now)
        if plan.preempted:
            victim = gens.index(plan.preempted[0])
            break
        now += step_s
        model.end_step(plan, now)
        steps += 1
    else:
        pytest.fail("the twin never retracted a request")
    model, gens = _retracting_model()  # the same run, its victim's reader gone just before
    now = 0.0
    for _ in range(steps):
        _, now = _step(model, now)
    gone = gens[victim]
    assert gone in model.running
    gone.cancel()
    model._drop_cancelled(now)  # the loop's drop: it is running, not waiting
    plan, step_s = model.begin_step(now)
    assert plan.preempted == [gone] and gone in model.waiting  # back in the queue, cancelled
    now += step_s
    model.end_step(plan, now)
    admitted_after: list[Generation] = []
    while model.running or model.waiting:
        step_admitted, now = _step(model, now)
        admitted_after += step_admitted
    assert gone.finished and gone not in admitted_after
    assert all(g.finished for g in gens)
