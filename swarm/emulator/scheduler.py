"""The emulator's scheduler: each engine's documented policy for what one batch step runs.

Place in the map (docs/architecture.md, "The emulator"): the engine model's ``batch`` timing
asks ``Scheduler.plan`` once per step which requests to preempt, which waiting requests to
admit, how many prompt tokens of each to prefill, and whether the running requests decode;
the model then sleeps the step's modelled time and emits the tokens (strategies compute,
runners sleep). The policy (``SchedulerPolicy``) is built per engine by ``emulator.behaviour``
from the engine's defaults and the knobs a user passes under the engine's own names; each
default's source is in docs/emulator.md, "Engine policies".

The model, per step:

1. **Room to decode.** Every decoding request needs one more token of KV. While the KV held
   would pass ``kv_capacity_tokens``, a running request is preempted: its KV freed, it goes
   back to the waiting queue (its front: vLLM; its end: SGLang) and later computes its prompt
   and output so far again (recompute; the prefix cache may hold what it had computed, never
   more). Which one goes: ``newest`` (the last admitted: vLLM, TensorRT-LLM) or
   ``fewest_output`` (the one with the fewest output tokens, then the longest prompt: SGLang's
   retraction). With ``prefill_pauses_decode`` (SGLang) this happens only in a step that
   decodes: one that forms a prefill batch preempts nothing.
2. **Order of the waiting queue.** ``fcfs``, or ``lpm``: longest cached prefix first (SGLang's
   default with the radix cache on), as FCFS when more than ``lpm_max_waiting`` wait.
3. **Admission**, in that order, while ``max_running`` and the step's token budget allow and
   the KV fits: what the running requests hold (their tokens and this step's one, plus
   ``ratio`` x their output still to come) plus the candidate's uncached prompt, its first
   token and ``admit_reserve`` x its output;
   outputs to come count at most ``reserve_clip_tokens``. TensorRT-LLM's
   ``GUARANTEED_NO_EVICT`` reserves whole outputs (ratios 1: it never preempts); vLLM and
   ``MAX_UTILIZATION`` admit on the prompt alone (0); SGLang reserves a new request's output
   whole (clipped at 4,096) and the running ones' at its ``new_token_ratio``, which starts at
   ``reserve_ratio``, falls by ``reserve_decay`` a decode step down to ``reserve_floor``, is set
   from the requests left after a preemption (``retract_decode_steps``; no decay in that step)
   and starts again when the engine is idle. vLLM admits nothing in a step that preempted. A step with nothing
   running admits its first candidate whatever it needs (no request waits for ever; ``submit``
   refuses one that cannot fit at all); with ``idle_admits_first`` (vLLM), the first step after
   the engine was idle (nothing running or waiting) admits that one only: requests sent
   together reach vLLM's engine core one at a time through its API server, and an idle core
   steps on the first to arrive (requests already waiting are all taken).
4. **The step's tokens.** ``step_token_budget`` bounds the tokens one step computes: a decoding
   request counts 1, a prefill its chunk. With ``chunked_prefill`` a prompt larger than what is
   left is split over steps (its first token comes with its last chunk); without, it waits for
   a step with room (or runs alone). ``prefill_pauses_decode`` (SGLang): a step that prefills
   does not decode, so running streams stall while new prompts come in; otherwise (vLLM,
   TensorRT-LLM's in-flight batching, llama.cpp) decodes go first and prefills take the rest.
   ``prefill_tail_breaks`` (llama.cpp with a sliding-window model) ends a prompt's chunk where
   that many of its tokens are left, so its tail is computed in steps of its own.

KV is held in whole blocks of ``block_tokens``. With sliding-window layers (``swa_groups`` > 0,
vLLM's hybrid KV cache manager, ``block_cache``'s docstring), a request also holds, in each of
``swa_groups`` groups, the blocks of its window (those wholly before token
``n - swa_tokens + 1`` of its ``n`` are freed once computed), and is admitted on the blocks from
its hit's window to its end (a step computes its new tokens in every group); capacities then
count one group's blocks (vLLM's ``num_gpu_blocks`` x ``block_size``). The prefix cache is the engine model's own
pool (``cache_capacity_tokens``), apart from this KV of running requests: a simplification
that the docs state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar

import numpy as np


class Request(Protocol):
    """What the scheduler reads and keeps of a request (``engine_model.R``)."""

    max_new: int
    #: KV tokens it holds; prompt tokens still to prefill; cache hit at its last admission;
    #: times preempted
    kv_tokens: int
    prefill_left: int
    admit_hit: int
    preemptions: int
    #: after a preemption: the tokens of its sequence it had computed (None: never preempted)
    computed: int | None

    #: how many tokens it has generated so far
    n_out: int

    @property
    def prompt_tokens(self) -> int: ...


R = TypeVar("R", bound=Request)
R_contra = TypeVar("R_contra", bound=Request, contravariant=True)


class Engine(Protocol[R_contra]):
    """What the scheduler asks of the engine model it plans for."""

    def cached(self, req: R_contra) -> int:
        """The tokens of ``req``'s sequence so far (prompt and output) the prefix cache holds."""

    def peek_cached(self, req: R_contra) -> int | None:
        """``cached(req)`` without marking what it matched used (a check planned ahead: the
        step that makes it marks it then); None where the cache cannot tell it so."""

    def admit(self, req: R_contra) -> None:
        """``req`` is admitted: its sequence enters the prefix cache (a request admitted after
        it in the same step may hit it)."""

    def unshared(self, req: R_contra, hit: int) -> int:
        """Of ``hit`` cached tokens of ``req``, those it would hold alone in a pool it shares with
        the cache (vLLM's blocks no running request holds: admitting it takes them from the
        cache's room); 0 where the cache is a pool of its own."""

    def release(self, req: R_contra) -> None:
        """``req`` was preempted: its KV goes, what it computed stays in the prefix cache."""


@dataclass(frozen=True, slots=True)
class SchedulerPolicy:
    """What an engine's scheduler does (see the module docstring for each rule)."""

    queue: Literal["fcfs", "lpm"] = "fcfs"
    #: ``lpm`` orders as FCFS when more than this many requests wait (None: always LPM)
    lpm_max_waiting: int | None = None
    #: share of a running request's output still to come that the KV check reserves
    reserve_ratio: float = 1.0
    #: per decode step, the ratio falls by this much, down to ``reserve_floor``
    reserve_decay: float = 0.0
    reserve_floor: float = 1.0
    #: share of a new request's output reserved to admit it
    admit_reserve: float = 1.0
    #: an output to come counts at most this many tokens in a reserve (None: all of it)
    reserve_clip_tokens: int | None = None
    #: after a preemption the ratio is set from the requests left running (SGLang): their
    #: tokens decoded plus this many steps each, over their max tokens (None: back to
    #: ``reserve_ratio``)
    retract_decode_steps: int | None = None
    #: a step that preempted may still admit waiting requests (vLLM's does not)
    admit_after_preempt: bool = True
    #: the first step after the engine was idle admits one request (vLLM: the rest of a burst
    #: reaches its engine core while that step runs)
    idle_admits_first: bool = False
    #: a preempted request goes back to the front of the queue (vLLM), else to its end (SGLang)
    requeue_front: bool = True
    #: which running request a lack of KV preempts
    preempt: Literal["newest", "fewest_output"] = "newest"
    #: requests running at most (None: as many as the KV holds)
    max_running: int | None = None
    #: tokens one step computes at most (None: no bound)
    step_token_budget: int | None = None
    #: split a prompt over steps when the budget is short
    chunked_prefill: bool = True
    #: without chunked prefill, a prompt over the step budget is refused (TensorRT-LLM), not run
    #: in a step of its own
    refuse_over_budget: bool = False
    #: a step that prefills does not decode (SGLang), else decodes go first
    prefill_pauses_decode: bool = False
    #: KV is held in blocks of this many tokens
    block_tokens: int = 1
    #: a prompt's chunks end where this many of its tokens are left (llama.cpp with a
    #: sliding-window model: ``(4 + n_ubatch, 4)``, its context checkpoints), largest first
    prefill_tail_breaks: tuple[int, ...] = ()
    #: sliding-window layers: their span, and their KV groups beside the full-attention one
    swa_tokens: int = 0
    swa_groups: int = 0

    def arrival_order_spare(self, waiting: int) -> int | None:
        """With ``waiting`` requests waiting, how many more may leave the queue while it is still
        taken in arrival order (``fcfs``, or ``lpm`` past ``lpm_max_waiting``); None: it always
        is; below 0: it is ordered by cached prefix now."""
        if self.queue == "fcfs":
            return None
        if self.lpm_max_waiting is None:
            return -1
        return waiting - self.lpm_max_waiting - 1

    def __post_init__(self) -> None:
        if not all(0 <= r <= 1 for r in (self.reserve_floor, self.reserve_ratio, self.admit_reserve)):
            raise ValueError("reserve ratios are shares in [0, 1]")


@dataclass
class StepPlan(Generic[R]):
    """One step: who was preempted, who was admitted, each prefill's chunk, and whether the
    running requests decode (``decoding``: those that emit a token at its end, with
    ``finishing_prefill``)."""

    preempted: list[R] = field(default_factory=list)
    admitted: list[R] = field(default_factory=list)
    #: prompt tokens computed this step, per request (in the step's order)
    chunks: dict[int, int] = field(default_factory=dict)
    #: requests that decode a token this step
    decoding: list[R] = field(default_factory=list)
    #: requests whose prefill completes this step: they emit a token at its end
    finishing_prefill: list[R] = field(default_factory=list)

    #: cached prompt tokens of the requests admitted this step (their prefill attends to them)
    cached_tokens: int = 0

    @property
    def prefill_tokens(self) -> int:
        return sum(self.chunks.values())

    @property
    def batch(self) -> int:
        """Sequences in the step: decoding ones and those prefilling."""
        return len(self.decoding) + len(self.chunks)


@dataclass
class QueueHeld(Generic[R]):
    """The next ``steps`` decode steps admit nothing (``Scheduler.queue_held``): each step's
    admission check stops before its first request (``head`` None), or at ``head``, its need
    over the capacity on top of ``held[i]``, the KV held at step ``i``."""

    steps: int
    head: R | None
    held: list[int] | None


class Scheduler(Generic[R]):
    """Plans each step under ``policy`` with ``kv_capacity_tokens`` of KV for running requests."""

    def __init__(self, policy: SchedulerPolicy, kv_capacity_tokens: int) -> None:
        self.policy = policy
        self.capacity = kv_capacity_tokens
        #: the reserve ratio now (SGLang's ``new_token_ratio``)
        self.ratio = policy.reserve_ratio
        #: nothing has run since the engine was last idle (``idle``): with ``idle_admits_first``
        #: its next step admits one request
        self.idle_since_last_step = True
        self.preemptions = 0

    # -- KV ------------------------------------------------------------------------------------

    def blocks(self, tokens: int) -> int:
        """``tokens`` rounded up to whole KV blocks."""
        b = self.policy.block_tokens
        return -(-tokens // b) * b

    def swa(self, sequence: int, computed_from: int | None = None) -> int:
        """KV (in one group's tokens) the sliding-window groups hold for a sequence of
        ``sequence`` tokens: each group, the blocks of its window; with ``computed_from``, from
        that token's window on (a step computing the sequence from there)."""
        p = self.policy
        if not p.swa_groups:
            return 0
        b = p.block_tokens
        start = sequence if computed_from is None else computed_from
        first = max(0, start - p.swa_tokens + 1) // b
        return p.swa_groups * (-(-sequence // b) - first) * b

    def kv(self, gen: R, extra: int = 0) -> int:
        """KV a running request holds with ``extra`` tokens more: its own blocks, and its
        sliding-window groups' (``swa``)."""
        return self.blocks(gen.kv_tokens + extra) + self.swa(gen.prompt_tokens + gen.n_out + extra)

    def _to_come(self, gen: R) -> int:
        left = max(gen.max_new - gen.n_out, 0)
        clip = self.policy.reserve_clip_tokens
        return left if clip is None else min(left, clip)

    def reserve(self, gen: R) -> int:
        """What a running request's output to come holds of the KV: the ratio's share."""
        return math.ceil(self.ratio * self._to_come(gen))

    def held(self, gen: R) -> int:
        """KV a running request holds for the admission check: its tokens, the one this step
        may add, and its reserve."""
        sequence = gen.prompt_tokens + gen.n_out
        return self.blocks(gen.kv_tokens + 1 + self.reserve(gen)) + self.swa(sequence + 1)

    def held_total(self, running: Sequence[R]) -> int:
        """Σ ``held`` over ``running``: what the admission check counts as taken. Without
        sliding-window groups, in one expression over the requests (the sum runs every step
        that has a request waiting, over every request running: a method call a request was
        most of a busy twin's step); the same figure either way."""
        p = self.policy
        if p.swa_groups:
            return sum(self.held(g) for g in running)
        b, ratio = p.block_tokens, self.ratio
        clip = p.reserve_clip_tokens if p.reserve_clip_tokens is not None else math.inf
        ceil = math.ceil
        if b == 1:
            return sum(
                g.kv_tokens + 1 + ceil(ratio * min(max(g.max_new - g.n_out, 0), clip)) for g in running
            )
        return b * sum(
            -(-(g.kv_tokens + 1 + ceil(ratio * min(max(g.max_new - g.n_out, 0), clip))) // b)
            for g in running
        )

    def grown_total(self, running: Sequence[R]) -> int:
        """Σ ``kv(g, 1 if g decodes else 0)`` over ``running``: the KV they hold once this step's
        decodes add a token each (``_make_room``); in one expression without sliding-window
        groups, as ``held_total``."""
        p = self.policy
        if p.swa_groups:
            return sum(self.kv(g, g.prefill_left == 0) for g in running)
        b = p.block_tokens
        if b == 1:
            return sum(g.kv_tokens + (g.prefill_left == 0) for g in running)
        return b * sum(-(-(g.kv_tokens + (g.prefill_left == 0)) // b) for g in running)

    def decode_stretch(self, waiting: Sequence[R], running: Sequence[R], most: int) -> int:
        """How many steps from now (at most ``most``) would each decode every running request
        and do nothing else: none admitted (none waits; a queue, ``queue_held``), none prefills,
        none finishes before the last of them, and ``_make_room`` finds every request's next
        token room in each (no preemption; with one request running there is none). 0 when
        fewer than two. Sliding-window groups are left out (their KV is counted request by
        request)."""
        p = self.policy
        if waiting or not running or p.swa_groups:
            return 0
        k = most
        for g in running:
            if g.prefill_left > 0:
                return 0
            k = min(k, g.max_new - g.n_out)
        if len(running) > 1 and not (p.reserve_floor >= 1 and p.reserve_ratio >= 1):
            b = p.block_tokens  # the j-th step counts each request's KV with its j-th token
            while k > 1 and b * sum(-(-(g.kv_tokens + k) // b) for g in running) > self.capacity:
                k //= 2
        return k if k > 1 else 0

    def decoded(self, steps: int) -> None:
        """``steps`` decode steps ran without a preemption (a stretch): the ratio falls as
        ``plan`` lets it fall at each."""
        p = self.policy
        for _ in range(steps):
            self.ratio = max(p.reserve_floor, self.ratio - p.reserve_decay)

    def queue_held(self, waiting: Sequence[R], running: Sequence[R], engine: Engine[R], most: int) -> QueueHeld[R] | None:
        """Whether the admission check of each of the next ``most`` decode steps (every running
        request decoding, none admitted before, none finished, none preempted: a stretch) stops
        without admitting from ``waiting``, and what it asks of the cache meanwhile; None where
        it would not, or cannot be known ahead. It is known where the queue is taken in arrival
        order (``fcfs``, or ``lpm`` past ``lpm_max_waiting``: an LPM order asks the cache of every
        request waiting) and the check stops at its first request: before it (``max_running``
        reached, the step's token budget spent by the decodes), or at it, its KV need on top of
        the KV held (``held_ahead``) over the capacity at every step (the head's cached prefix
        taken without marking it used: ``Engine.peek_cached``)."""
        p = self.policy
        if not waiting or not running or p.swa_groups or most < 1:
            return None
        spare = p.arrival_order_spare(len(waiting))
        if spare is not None and spare < 0:
            return None
        budget = p.step_token_budget if p.step_token_budget is not None else math.inf
        if not p.prefill_pauses_decode:
            budget -= len(running)  # the decodes go first
        if budget <= 0 or (p.max_running is not None and len(running) >= p.max_running):
            return QueueHeld(most, None, None)  # the loop stops before its first request
        head = waiting[0]
        hit = engine.peek_cached(head)
        if hit is None:
            return None
        need = self.admission_need(head, hit, engine)[2]
        if self.held_total(running) + need <= self.capacity:  # it fits now: no steps ahead to count
            return None
        held = self.held_ahead(running, most)
        steps = self.steps_held(held, need, 0)
        return QueueHeld(steps, head, held) if steps else None

    def steps_held(self, held: Sequence[int], need: int, first: int) -> int:
        """From step ``first`` of ``held`` (``held_ahead``), how many steps a request needing
        ``need`` stays over the capacity."""
        capacity = self.capacity
        for i in range(first, len(held)):
            if held[i] + need <= capacity:
                return i - first
        return len(held) - first

    def admission_need(self, gen: R, hit: int, engine: Engine[R]) -> tuple[int, int, int]:
        """What the admission check counts of ``gen``, ``hit`` tokens of its sequence cached:
        the hit it takes (a preempted request's at most what it had computed), the KV it would
        hold (its new tokens, and cached blocks no one holds), and the KV it needs (that, its
        first token, ``admit_reserve`` of its output to come, its sliding-window groups')."""
        p = self.policy
        if gen.computed is not None:  # back after a preemption: at most what it had computed
            hit = min(hit, gen.computed)
        sequence = gen.prompt_tokens + gen.n_out
        own = sequence - hit + engine.unshared(gen, hit)
        need = self.blocks(own + 1 + math.ceil(p.admit_reserve * self._to_come(gen))) + self.swa(sequence + 1, hit)
        return hit, own, need

    def held_ahead(self, running: Sequence[R], steps: int) -> list[int]:
        """``held_total(running)`` at each of the next ``steps`` steps if every running request
        decodes a token in each and the ratio falls as ``plan`` lets it: one array expression
        over the steps and the requests (the same figures, ``ceil`` of the same doubles), not a
        sum per step. Without sliding-window groups."""
        p = self.policy
        n = len(running)
        kv = np.fromiter((g.kv_tokens for g in running), np.int64, n)
        left = np.fromiter((g.max_new - g.n_out for g in running), np.int64, n)
        ratios, ratio = [], self.ratio
        for _ in range(steps):
            ratios.append(ratio)
            ratio = max(p.reserve_floor, ratio - p.reserve_decay)
        j = np.arange(steps, dtype=np.int64)[:, None]
        to_come = np.maximum(left[None, :] - j, 0)
        if p.reserve_clip_tokens is not None:
            to_come = np.minimum(to_come, p.reserve_clip_tokens)
        each = kv[None, :] + j + 1 + np.ceil(np.array(ratios)[:, None] * to_come).astype(np.int64)
        b = p.block_tokens
        if b != 1:
            each = -(-each // b) * b
        return [int(x) for x in each.sum(axis=1)]

    def used(self, running: Sequence[R]) -> int:
        """KV in use (reserves left out): what the engine's usage gauge shows."""
        return sum(self.kv(g) for g in running)

    # -- one step ------------------------------------------------------------------------------

    def plan(
        self,
        waiting: list[R],
        running: list[R],
        engine: Engine[R],
    ) -> StepPlan[R]:
        """The next step over ``waiting`` (in arrival order, preempted ones first) and
        ``running``, for ``engine`` (its cache, told of each admission and preemption as it is
        decided). Mutates ``waiting`` and ``running`` (preempted ones move back, admitted ones
        in) and each request's bookkeeping; the caller emits the tokens after the step."""
        plan: StepPlan[R] = StepPlan()
        p = self.policy
        budget = p.step_token_budget if p.step_token_budget is not None else math.inf
        if p.prefill_pauses_decode:  # SGLang: a prefill batch if one forms, else decode
            for gen in [g for g in running if g.prefill_left > 0]:
                budget = self._chunk(gen, budget, plan)
            self._admit(waiting, running, engine, budget, plan)
            if not plan.chunks:
                self._make_room(running, waiting, plan, engine)
                plan.decoding = [g for g in running if g.prefill_left == 0]
        else:  # decodes first, then chunks under way, then new prompts in what is left
            self._make_room(running, waiting, plan, engine)
            plan.decoding = [g for g in running if g.prefill_left == 0]
            budget -= len(plan.decoding)
            for gen in [g for g in running if g.prefill_left > 0]:
                budget = self._chunk(gen, budget, plan)
            if p.admit_after_preempt or not plan.preempted:
                self._admit(waiting, running, engine, budget, plan)
        if plan.decoding and not plan.preempted:
            self.ratio = max(p.reserve_floor, self.ratio - p.reserve_decay)
        return plan

    def _chunk(self, gen: R, budget: float, plan: StepPlan[R]) -> float:
        """Prefill what the budget allows of ``gen`` this step: all of what is left, or with
        ``chunked_prefill`` a chunk of it; without, a prompt over the budget runs whole in a
        step of its own (the caller admits it only into an empty step)."""
        if budget <= 0:
            return budget
        chunk = gen.prefill_left
        for left in self.policy.prefill_tail_breaks:
            if chunk > left:
                chunk -= left
                break
        if chunk > budget and self.policy.chunked_prefill:
            chunk = int(budget)
        plan.chunks[id(gen)] = chunk
        gen.prefill_left -= chunk
        if gen.prefill_left == 0:
            plan.finishing_prefill.append(gen)
        return budget - chunk

    def _admit(
        self,
        waiting: list[R],
        running: list[R],
        engine: Engine[R],
        budget: float,
        plan: StepPlan[R],
    ) -> float:
        p = self.policy
        if not waiting:  # nothing to admit: the KV held is not needed (a decode step's usual case)
            return budget
        # the KV held, taken at the first capacity check (a step whose budget a chunk spent needs
        # none): what those running before this admission loop held (with any running, the
        # check comes before the first admission), and what each admitted since needed
        held: int | None = None
        before, admitted_need = len(running), 0
        most = 1 if p.idle_admits_first and self.idle_since_last_step and not running else None
        for gen in self._ordered(waiting, engine):
            if budget <= 0 or (p.max_running is not None and len(running) >= p.max_running):
                break
            if most is not None and len(plan.admitted) >= most:
                break
            hit, own, need = self.admission_need(gen, engine.cached(gen), engine)
            new = gen.prompt_tokens + gen.n_out - hit
            if running:
                if held is None:
                    held = admitted_need + (self.held_total(running) if before else 0)
                if held + need > self.capacity:
                    break
            if not p.chunked_prefill and new > budget and plan.batch:
                break
            waiting.remove(gen)
            gen.admit_hit = hit
            gen.prefill_left = new
            gen.kv_tokens = own
            running.append(gen)
            plan.admitted.append(gen)
            plan.cached_tokens += hit
            engine.admit(gen)
            if held is None:
                admitted_need += need
            else:
                held += need
            budget = self._chunk(gen, budget, plan)
        if plan.admitted:
            self.idle_since_last_step = False
        return budget

    def _ordered(self, waiting: list[R], engine: Engine[R]) -> Iterable[R]:
        """The queue in the order admission tries it, read while admission removes from it."""
        p = self.policy
        spare = p.arrival_order_spare(len(waiting))
        if spare is None or spare >= 0:
            return _from_head(waiting)
        return sorted(waiting, key=lambda g: -engine.cached(g))  # stable: FCFS among equal matches

    def _make_room(self, running: list[R], waiting: list[R], plan: StepPlan[R], engine: Engine[R]) -> None:
        """Preempt while the running requests' next tokens do not fit (a ratio of 1 reserved
        them all at admission: nothing to do)."""
        if self.policy.reserve_floor >= 1 and self.policy.reserve_ratio >= 1:
            return
        grow = [g for g in running if g.prefill_left == 0]
        need = self.grown_total(running)
        while need > self.capacity and len(running) > 1:
            victim = self._victim(running)
            need -= self.kv(victim, victim in grow)
            running.remove(victim)
            # what it computed: a decoding request has not computed its last token sampled
            decoding = victim.prefill_left == 0 and victim.n_out > 0
            victim.computed = victim.prompt_tokens + victim.n_out - victim.prefill_left - decoding
            victim.prefill_left = victim.kv_tokens = 0
            victim.preemptions += 1
            engine.release(victim)
            plan.preempted.append(victim)
            self.preemptions += 1
        if plan.preempted:
            self.ratio = self._ratio_after_preemption(running)
        if self.policy.requeue_front:
            waiting[:0] = plan.preempted
        else:
            waiting.extend(plan.preempted)

    def _ratio_after_preemption(self, running: list[R]) -> float:
        """SGLang's: min(1, (Σ output so far + ``retract_decode_steps`` × n) / Σ max tokens) over
        the n requests left running; else the ratio starts again."""
        steps = self.policy.retract_decode_steps
        if steps is None or not running:
            return self.policy.reserve_ratio
        decoded = sum(g.n_out for g in running) + steps * len(running)
        return min(1.0, decoded / max(sum(g.max_new for g in running), 1))

    def idle(self) -> None:
        """Nothing running or waiting: the ratio starts again (SGLang's, when idle); the next
        request to arrive finds the engine idle."""
        self.ratio = self.policy.reserve_ratio
        self.idle_since_last_step = True

    def _victim(self, running: list[R]) -> R:
        if self.policy.preempt == "newest":
            return running[-1]
        return min(reversed(running), key=lambda g: (g.n_out, -g.prompt_tokens))


def _from_head(waiting: list[R]) -> Iterator[R]:
    """``waiting`` from its head, each yielded once whether or not the reader removes it before
    the next: a copy of the whole queue at every step was 2 % of a simulation whose twins held
    thousands waiting, where a step admits from its head."""
    at = 0
    while at < len(waiting):
        gen = waiting[at]
        yield gen
        if at < len(waiting) and waiting[at] is gen:  # still there: the next is after it
            at += 1
