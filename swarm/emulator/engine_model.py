"""The emulator's engine model: prefix cache, KV admission and continuous batching.

Place in the map (docs/architecture.md, "The emulator"): the part of ``swarm emulate`` that decides how
many prompt tokens are cached and when each token comes out. The HTTP server turns the token
stream into each engine's wire format. The caches and their accounting are ``EngineCaches``
(``emulator.engine_caches``, whose docstring says what a request hits); a request is a
``Generation`` (``emulator.generation``); this module runs the steps.

Timing. ``batch`` runs one step loop, as continuous-batching engines do. What each step runs
(which waiting requests it admits, how much of each prompt it prefills, whether the running
ones decode, which it preempts) is the engine's scheduler (``emulator.scheduler``); it lasts

    step_s = (a + b * prefill_tokens_in_step + b_c * cached_tokens_admitted + h * host_loaded
              + c * sequences + d * context_of_decoding_sequences) / 1000

(with ``step_overlap``: the larger of ``a + c * sequences + d * context`` and the prompt
compute ``b * prefill + b_c * cached + h * host_loaded``, for engines whose prefill is
compute-bound while a decode step is bound by reading the weights) with a, b, b_c, h, c, d = ``step_base_ms``, ``prefill_ms_per_token``,
``prefill_ms_per_cached_token``, ``host_load_ms_per_token``, ``decode_ms_per_seq``,
``decode_ms_per_context_token`` (``swarm calibrate`` fits all but h on a server), and only
uncached prompt tokens count as prefill. At the end of a step every request whose prefill completed emits its
first token and every decoding one its next token. ``fixed`` ignores load: each request
emits its first token ``first_token_ms`` after arrival and one more every ``token_ms``
(scheduled on absolute times, so delays do not accumulate). ``zero`` emits everything at once.

Keeping the model. The emulator is a Python process: when its own work per step (admitting,
emitting, writing hundreds of streams) takes longer than the modelled step, steps run long
and its latencies describe the CPU, not the model. It counts its steps' modelled and actual
durations (``EngineStats``; ``swarm_emulator_*`` in its Prometheus text), and ``swarm report``
warns when they part.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncGenerator, Sequence

from swarm.emulator.config import EmulatorConfig
from swarm.emulator.engine_caches import EngineCaches
from swarm.emulator.generation import Generation, PromptTooLong, loop_now, settle
from swarm.emulator.scheduler import QueueHeld, StepPlan
from swarm.emulator.step_model import DecodeStretch, plan_stretch, step_ms
from swarm.token_ids import LaidOutIds, as_token_ids

#: How far behind its modelled timeline the step loop may catch up (a late timer's wake-up).
STEP_CATCHUP_S = 0.003


class _HeldQueue:
    """A decode stretch's queue that none of its steps admits from (``Scheduler.queue_held``):
    ``spare``, how many may leave it before the engine orders it by cached prefix (None: it
    never does); ``firsts``, each request that came first at step ``i`` of the stretch, its
    first having gone (``EngineModel.reader_went``)."""

    __slots__ = ("firsts", "queue", "spare")

    def __init__(self, queue: QueueHeld[Generation], spare: int | None) -> None:
        self.queue = queue
        self.spare = spare
        self.firsts: list[tuple[int, Generation]] = []


class EngineModel(EngineCaches):
    """Cache + scheduler of one emulated engine. Create inside the server's event loop."""

    def __init__(self, config: EmulatorConfig) -> None:
        super().__init__(config)
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        #: the most steps one wake-up of the step loop may run (``step_model``'s decode
        #: stretches: 1 steps one at a time, as a server must; ``swarm simulate`` sets more)
        self.stretch_steps = 1
        self._stretch: DecodeStretch[Generation] | None = None
        self._stretch_wake: asyncio.Future[None] | None = None
        #: the queue of the stretch under way, where none of its steps admits from it
        #: (``Scheduler.queue_held``): its first request now, and each that came first at a step
        self._held: _HeldQueue | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self.config.timing == "batch" and self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._step_loop())

    async def stop(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            try:
                await self._loop_task
            except asyncio.CancelledError:
                pass
            self._loop_task = None

    # -- requests ------------------------------------------------------------------------------

    def submit(
        self, tokens: Sequence[object] | LaidOutIds, max_new: int | None, now_s: float | None = None
    ) -> Generation:
        """A request of the prompt ``tokens`` (ids, laid out or not, or words) arrives (at
        ``now_s``, default the event loop's clock now)."""
        prompt = tokens if isinstance(tokens, LaidOutIds) else as_token_ids(tokens)
        if len(prompt) > self.config.max_prompt_tokens:
            raise PromptTooLong(
                f"prompt has {len(prompt)} tokens, more than the maximum {self.config.max_prompt_tokens}"
            )
        refused = self.behaviour.refuse(self.config, len(prompt))
        if refused is not None:
            raise PromptTooLong(refused)
        policy = self.scheduler.policy
        budget = policy.step_token_budget
        refuses = policy.refuse_over_budget and not policy.chunked_prefill and self.config.timing == "batch"
        if refuses and budget is not None and len(prompt) > budget:
            raise PromptTooLong(
                f"prompt of {len(prompt)} tokens exceeds the {budget} tokens one step computes "
                "(max_num_tokens) and chunked prefill is off"
            )
        now = loop_now() if now_s is None else now_s
        gen = Generation(self, prompt, max_new or self.config.default_max_tokens, now)
        self.stats.requests_total += 1
        if self.config.timing == "batch":
            need = len(prompt) + gen.max_new
            if need > self.config.kv_capacity_tokens:
                raise PromptTooLong(
                    f"prompt plus max tokens ({need}) exceed the KV capacity "
                    f"({self.config.kv_capacity_tokens} tokens)"
                )
            self.waiting.append(gen)
            self._wake.set()
            held = self._held
            if held is None:
                self.interrupt()
            elif held.spare is not None:  # behind a queue taken in arrival order: no step admits it
                held.spare += 1
        else:
            self._admit(gen, now)
        return gen

    async def _timed_tokens(self, gen: Generation) -> AsyncGenerator[list[str], None]:
        """Token stream of the ``fixed`` and ``zero`` timings (no shared step loop)."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            if cfg.timing == "zero":
                now = loop.time()
                for _ in range(gen.max_new):
                    gen._emit(now)
                words, gen._pending = gen._pending, []
                yield words
                return
            for i in range(gen.max_new):
                due = start + (cfg.first_token_ms + i * cfg.token_ms) / 1000.0
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                gen._emit(loop.time())
                words, gen._pending = gen._pending, []
                yield words
        finally:
            self._finish(gen, loop.time())

    async def _step_loop(self) -> None:
        loop = asyncio.get_running_loop()
        clock = loop.time
        #: while steps run back to back, the modelled end of the last one: the next step is
        #: timed from it, so a timer that wakes late (epoll rounds up to the millisecond) is
        #: made up by the next step, up to STEP_CATCHUP_S; a CPU that falls further behind shows
        #: as overrun, never hidden
        planned_end: float | None = None
        while True:
            if self.cancelled_waiting:
                self._drop_cancelled(clock())
            if not self.running and not self.waiting:
                self.scheduler.idle()
                self._wake.clear()
                await self._wake.wait()
                planned_end = None
                continue
            step_start = clock()
            anchor = step_start if planned_end is None else max(planned_end, step_start - STEP_CATCHUP_S)
            steps, held = self._stretch_length()
            if steps:
                planned_end = await self._run_stretch(steps, anchor, held)
                continue
            plan, step_s = self.begin_step(clock())
            planned_end = anchor + step_s
            delay = planned_end - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            self.end_step(plan, clock())
            st = self.stats
            st.steps += 1
            st.step_model_s += step_s
            st.step_actual_s += clock() - step_start

    # -- decode stretches (``step_model``) -----------------------------------------------------

    def _stretch_length(self) -> tuple[int, _HeldQueue | None]:
        """How many decode steps the loop may run as one now (0: step as usual), and the queue
        none of them admits from, if one waits: only where ``stretch_steps`` allows it, every
        running request's reader waits for its end, and the cache is not one pool with the
        running requests (whose steps resize it)."""
        if self.stretch_steps < 2 or self.behaviour.shared_pool or any(g.times is None for g in self.running):
            return 0, None
        if not self.waiting:
            return self.scheduler.decode_stretch(self.waiting, self.running, self.stretch_steps), None
        steps = self.scheduler.decode_stretch((), self.running, self.stretch_steps)
        held = self.scheduler.queue_held(self.waiting, self.running, self, steps) if steps else None
        if held is None or held.steps < 2:
            return 0, None
        return held.steps, _HeldQueue(held, self.scheduler.policy.arrival_order_spare(len(self.waiting)))

    async def _run_stretch(self, steps: int, anchor: float, held: _HeldQueue | None = None) -> float:
        """Run ``steps`` decode steps of the running requests with one wake-up (an arrival or a
        cancel wakes it sooner: then up to the step under way; not one that leaves ``held``, the
        queue waiting, one no step admits from); returns the planned end of the last step run,
        as ``_step_loop`` keeps it."""
        loop = asyncio.get_running_loop()
        decoding = list(self.running)
        context = 0  # the batch's context, summed where a step's length reads it
        if self.config.decode_ms_per_context_token:
            context = sum(g.prompt_tokens + g.n_out for g in decoding)
        stretch = self._stretch = plan_stretch(self.config, decoding, context, steps, anchor, self.model_clock_s)
        self._held = held
        if held is not None and held.queue.head is not None:
            self.cached(held.queue.head)  # the first step's admission check marks its match used
        try:
            await self._sleep_to(stretch.ends_s[-1], interruptible=True)
            last = min(bisect.bisect_left(stretch.ends_s, loop.time()), steps - 1)  # the step under way
            try:
                await self._sleep_to(stretch.ends_s[last], interruptible=False)
            except asyncio.CancelledError:  # the model stops: the steps ended by now are counted
                self._end_stretch(stretch, last, loop.time(), ends_last=False)
                raise
        finally:
            self._stretch = None
            self._held = None
        if held is not None:  # the checks of the steps run whose first request had changed, in order
            for step, gen in held.firsts:  # (one each: a check repeated in a row marks nothing anew)
                if step <= last:
                    self.cached(gen)
        self.model_clock_s = stretch.model_ends_s[last]
        self.scheduler.decoded(last + 1)
        self._end_stretch(stretch, last, loop.time())
        self._count_steps(stretch.lengths_s[last : last + 1])
        return stretch.ends_s[last]

    def _count_steps(self, lengths_s: list[float]) -> None:
        st = self.stats
        for length in lengths_s:
            st.steps += 1
            st.step_model_s += length
            st.step_actual_s += length  # a virtual clock's steps take what they model

    async def _sleep_to(self, when: float, *, interruptible: bool) -> None:
        loop = asyncio.get_running_loop()
        if when <= loop.time() + 1e-9:  # due: the loop would run its timer now too
            return
        wake: asyncio.Future[None] = loop.create_future()
        timer = loop.call_at(when, settle, wake)
        if interruptible:
            self._stretch_wake = wake
        try:
            await wake
        finally:
            timer.cancel()
            self._stretch_wake = None

    def interrupt(self) -> None:
        """An arrival or a cancel: a decode stretch under way ends with the step it is in."""
        if self._stretch_wake is not None:
            settle(self._stretch_wake)

    def reader_went(self, gen: Generation) -> None:
        """``gen``'s reader went (``Generation.cancel``). A decode stretch under way ends with the step it is in,
        unless its queue stays one that no step of it admits from: ``gen`` waited behind the
        first request, or came first and the next one still does not fit at any step left
        (``Scheduler.steps_held``; it is the one the next step's check asks about); and, where
        the engine orders a short queue by cached prefix, enough still wait."""
        held = self._held
        stretch = self._stretch
        if held is None or stretch is None or gen.admitted_s is not None:  # running, or preempted into the queue
            self.interrupt()
            return
        if held.spare is not None:
            held.spare -= 1
            if held.spare < 0:
                self.interrupt()
                return
        queue = held.queue
        if queue.head is not gen:
            return
        first = next((g for g in self.waiting if not g.cancelled), None)
        step = min(bisect.bisect_left(stretch.ends_s, asyncio.get_running_loop().time()), queue.steps - 1) + 1
        hit = self.peek_cached(first) if first is not None else None
        if first is None or hit is None or queue.held is None:
            self.interrupt()
            return
        need = self.scheduler.admission_need(first, hit, self)[2]
        if self.scheduler.steps_held(queue.held, need, step) < queue.steps - step:
            self.interrupt()
            return
        queue.head = first
        if held.firsts and held.firsts[-1][0] == step:
            held.firsts[-1] = (step, first)  # gone before its step began: never asked about
        else:
            held.firsts.append((step, first))

    def stretch_ended(self, gen: Generation) -> int:
        """Where ``gen`` decodes in a stretch under way, its steps ended by now and not handed
        over (not its last step, which ends as a step alone does); else 0."""
        stretch = self._stretch
        if stretch is None or gen.admitted_s is None or gen not in stretch.decoding:  # by identity
            return 0
        now = asyncio.get_running_loop().time()
        upto = min(bisect.bisect_right(stretch.ends_s, now), len(stretch.ends_s) - 1)
        return max(upto - stretch.applied, 0)

    def last_token_s(self, gen: Generation) -> float | None:
        """``Generation.last_token_s``: the end of the last of ``gen``'s steps ended in a stretch
        under way (``stretch_ended``), if any; else its last time kept."""
        ended = self.stretch_ended(gen)
        if ended:
            stretch = self._stretch
            assert stretch is not None
            return stretch.ends_s[stretch.applied + ended - 1]
        times = gen.times
        return times[-1] if times else None

    def _end_stretch(
        self, stretch: DecodeStretch[Generation], last: int, now: float, *, ends_last: bool = True
    ) -> None:
        """The end of a stretch's step ``last``: each of its requests takes the tokens of its
        steps before ``last`` (none finishes in them: ``Scheduler.decode_stretch``), then the
        last step ends as ``end_step`` ends one, in one pass over the requests where a pass to
        hand the tokens over and another to end the step were 12 % of a simulation of 100,000
        agents. What reads them between the two counts them from the stretch
        (``stretch_ended``: the watchdog's ``last_token_s``, the text of a request that went),
        a stream's reader makes no stretch, and a request that went in the last step is
        released with its tokens handed over, as before. The model's figures add
        in the order the two passes added them (``step_token_model_s``: each request's gap to
        the next to last step's end, then the last step's to each that emits). Not
        ``ends_last``: the steps before ``last`` only (the model stopped in it)."""
        n = last - stretch.applied
        decoding = stretch.decoding
        if n <= 0:  # interrupted in its first step: the step alone
            if ends_last:
                self.end_step(StepPlan(decoding=decoding), now)
            return
        ends = stretch.ends_s[stretch.applied : last]  # an array('d'): a copy into each request's
        model_end = stretch.model_ends_s[last - 1]
        st = self.stats
        self._count_steps(stretch.lengths_s[stretch.applied : last])
        stretch.applied = last
        emitted = 0
        for gen in decoding:
            gen.n_out += n
            gen.times += ends  # type: ignore[operator]  # a stretch's readers keep times (arrays)
            gen.kv_tokens += n
            st.step_token_model_s += model_end - gen.last_model_s
            gen.last_model_s = model_end
            if gen.cancelled or gen.finished or not ends_last:
                continue
            emitted += 1  # every request of a stretch has its first token: this is a next one
            gen.last_model_s = self.model_clock_s
            gen._emit(now)
            gen.kv_tokens += 1
            if gen.finished:
                self._release(gen, now)
        gap = self.model_clock_s - model_end
        for _ in range(emitted):  # after every request's gap to ``model_end``, as the passes added
            st.step_token_model_s += gap
        st.step_tokens += n * len(decoding) + emitted
        if not ends_last:
            return
        for gen in self.running:
            if gen.cancelled and not gen.finished:
                self._release(gen, now)
        self.running = [g for g in self.running if not g.finished]

    def _drop_cancelled(self, now: float) -> None:
        """Requests whose client went while they waited leave the queue; one preempted after
        its admission is finished (its counts close as a cancelled request's do)."""
        self.cancelled_waiting = False
        went, self.cancelled_since_drop = self.cancelled_since_drop, []
        # only one admitted before may be waiting unfinished (preempted): else no queue walk
        # (a loop over thousands waiting at every timeout of an overloaded twin)
        if any(g.admitted_s is not None and not g.finished for g in went):
            for gen in self.waiting:
                if gen.cancelled and gen.admitted_s is not None and not gen.finished:
                    self._release(gen, now)
        if len(went) <= 4:  # a few: each found by identity in C (a filter of thousands waiting,
            for gen in went:  # at every step an overloaded twin's timeouts cancelled one, was 4 %
                try:  # of a simulation); one cancelled while running is not there
                    self.waiting.remove(gen)
                except ValueError:
                    pass
        else:
            self.waiting = [g for g in self.waiting if not g.cancelled]

    def begin_step(self, now: float) -> tuple[StepPlan[Generation], float]:
        """A step's plan (``Scheduler.plan``), its admissions made at ``now``, and its modelled
        length in seconds: ``(a + b × prefill tokens + b_c × cached tokens of those admitted + h ×
        tokens they load from the host tier + c × sequences + d × context of those decoding) /
        1000``; with ``step_overlap``, the larger of the fixed part (a, c, d) and the compute part
        (b, b_c, h) instead of their sum; a step in which no request emits a token costs
        ``step_emit_ms`` less. The step loop
        sleeps that long and calls ``end_step``; a test drives both on a virtual clock."""
        cfg = self.config
        self._step_now, self._step_host_tokens = now, 0
        self._trim_windows()
        self._fit_cache_to_pool()
        plan = self.scheduler.plan(self.waiting, self.running, self)
        # cancelled while it ran, and back in the queue: it leaves at the next drop, released.
        # The step loop releases such a request at the step's end, before this; a model driven
        # a step at a time (a test) can cancel between the end and the next step
        for gen in plan.preempted:
            if gen.cancelled:
                self.cancelled_waiting = True
                self.cancelled_since_drop.append(gen)
        ms = step_ms(
            cfg, emits=bool(plan.decoding or plan.finishing_prefill), batch=plan.batch,
            context=sum(g.prompt_tokens + g.n_out for g in plan.decoding) if cfg.decode_ms_per_context_token else 0,
            prefill=plan.prefill_tokens, cached=plan.cached_tokens, host=self._step_host_tokens,
        )  # fmt: skip
        self.model_clock_s += ms / 1000.0  # the step's modelled end, when its tokens come
        return plan, ms / 1000.0

    def end_step(self, plan: StepPlan[Generation], now: float) -> int:
        """The end of a step: each decoding request, and each whose prefill completed, emits its
        next token; finished and cancelled ones leave. Returns the tokens after a first, and
        counts them and their modelled gaps in ``stats``."""
        emitted = 0
        clock = self.model_clock_s
        st = self.stats
        for gen in plan.decoding + plan.finishing_prefill:
            if gen.cancelled or gen.finished:
                continue
            if gen.n_out:  # a next token (the first is TTFT's, not ITL's): the modelled time
                emitted += 1  # since its previous one, prefill-only steps between them included
                st.step_token_model_s += clock - gen.last_model_s
            gen.last_model_s = clock
            gen._emit(now)
            gen.kv_tokens += 1
            if gen.finished:
                self._release(gen, now)
        for gen in self.running:
            if gen.cancelled and not gen.finished:
                self._release(gen, now)
        self.running = [g for g in self.running if not g.finished]
        st.step_tokens += emitted
        return emitted

    def _release(self, gen: Generation, now_s: float) -> None:
        gen.finished = True
        self._finish(gen, now_s)
        gen._wake_reader()
