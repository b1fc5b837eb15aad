"""The engine model's caches: what a request hits, holds and leaves in them.

Place in the map (docs/architecture.md, "The emulator"): ``EngineCaches``, the part of the
engine model (``emulator.engine_model``) that keeps the prefix cache, the host tier, the
scheduler's KV accounting and the engine's counters; the step loop on top of it decides when.

Cache. ``sglang`` uses a token-level radix cache (``RadixCache``), ``trtllm`` reuses full
32-token blocks only (``BlockCache``); the engine's ``behaviour`` object picks the cache and
rounds. A request's cached tokens are the cache match of its prompt, capped at
``prompt_tokens - 1`` (an engine always computes at least the last prompt token; for blocks,
the cap is rounded down to whole blocks). The prompt enters the cache
when the request is admitted, and prompt + generated tokens when it finishes, so a child
whose prompt repeats its parent's output hits those tokens too. (A real engine inserts the
prompt after its prefill step; the difference only shows for identical prefixes that arrive
within one step of each other.)
"""

from __future__ import annotations

import collections

from swarm.emulator.behaviour import EngineBehaviour, engine_behaviour
from swarm.emulator.block_cache import BlockCache, Hold
from swarm.emulator.config import EmulatorConfig
from swarm.emulator.engine_stats import EngineStats
from swarm.emulator.generation import Generation
from swarm.emulator.radix_cache import RadixCache
from swarm.emulator.scheduler import Scheduler
from swarm.emulator.slot_cache import SlotCache
from swarm.emulator.tokens import output_ids
from swarm.token_ids import TokenIds


class EngineCaches:
    """The caches, the scheduler's accounting and the counters of one emulated engine (the
    scheduler's ``Engine``); ``EngineModel`` runs its steps."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        #: what differs between the emulated engines (cache kind, rounding of cached tokens)
        self.behaviour: EngineBehaviour = engine_behaviour(config)
        self.cache: RadixCache | BlockCache | SlotCache = self.behaviour.make_cache(config)
        #: the host tier (``--host-cache-tokens``, HiCache): keeps what the device cache evicts
        #: (llama.cpp's RAM prompt cache is its slot cache's own)
        self.host: RadixCache | BlockCache | SlotCache | None = self.behaviour.make_host_cache(config)
        if self.host is not None:
            self.cache.on_evict = self.host.insert
        #: tokens loaded from the host tier by the admissions of the step being planned
        self._step_host_tokens = 0
        self._page_tokens = self.behaviour.page_tokens(config)
        self.stats = EngineStats()
        #: the step's policy (the engine's scheduler, ``emulator.scheduler``)
        self.scheduler: Scheduler[Generation] = Scheduler(
            self.behaviour.scheduler_policy(config), config.kv_capacity_tokens
        )
        #: the time of the step being planned (admissions are dated by it)
        self._step_now = 0.0
        #: modelled time: Σ the modelled lengths of the steps run (``begin_step``)
        self.model_clock_s = 0.0
        #: finished requests' per-request metrics (TensorRT-LLM's ``/perf_metrics``), drained on read
        self.perf_log: collections.deque[dict[str, object]] = collections.deque(
            maxlen=self.behaviour.perf_metrics_kept or 1
        )
        self._finished_ids = 0
        #: requests not yet admitted (preempted ones back at the front), and those admitted
        self.waiting: list[Generation] = []
        self.running: list[Generation] = []
        #: a request stopped streaming (its client went): drop the cancelled from the queue
        self.cancelled_waiting = False
        #: the requests cancelled since ``_drop_cancelled`` last ran, and any preempted back into
        #: the queue cancelled (``begin_step``): every cancelled request in ``waiting`` is here
        #: until the next drop, which removes a few of them by identity
        self.cancelled_since_drop: list[Generation] = []

    # -- cache accounting ----------------------------------------------------------------------

    @property
    def kv_used(self) -> int:
        """KV tokens the running requests hold (whole blocks)."""
        return self.scheduler.used(self.running)

    def _cached_for(self, prompt: TokenIds) -> int:
        """Cached tokens of ``prompt``: the device cache's match, or the host tier's if longer."""
        matched = self.cache.match(prompt)
        if self.host is not None:
            matched = max(matched, self.host.match(prompt))
        return self.behaviour.cached_tokens(matched, len(prompt), self._page_tokens)

    def _from_host(self, sequence: TokenIds, hit: int) -> int:
        """Of ``hit`` cached tokens, those beyond the device cache's match (loaded from the host)."""
        if self.host is None:
            return 0
        device = self.behaviour.cached_tokens(self.cache.match(sequence), len(sequence), self._page_tokens)
        return max(hit - device, 0)

    # -- the scheduler's engine (``scheduler.Engine``) ------------------------------------------

    def cached(self, gen: Generation) -> int:
        """The cached tokens of ``gen``'s sequence so far (its prompt, and its output after a
        preemption)."""
        return self._cached_for(gen.sequence())

    def peek_cached(self, gen: Generation) -> int | None:
        """``cached(gen)`` without marking the cache's matched tokens used (the scheduler's check
        planned ahead); None where a cache cannot match so (a slot cache, sliding windows)."""
        caches = (self.cache,) if self.host is None else (self.cache, self.host)
        sequence = gen.sequence()
        matched = 0
        for cache in caches:
            peek = getattr(cache, "peek", None)
            found = peek(sequence) if peek is not None else None
            if found is None:
                return None
            matched = max(matched, found)
        return self.behaviour.cached_tokens(matched, len(sequence), self._page_tokens)

    def unshared(self, gen: Generation, hit: int) -> int:
        """The cached tokens of ``gen`` in blocks no running request holds, where running requests
        and cached blocks share one pool (``behaviour.shared_pool``); else 0."""
        if not self.behaviour.shared_pool or not isinstance(self.cache, BlockCache):
            return 0
        return self.cache.unlocked_tokens(gen.sequence(), hit)

    def admit(self, gen: Generation) -> None:
        """The scheduler admitted ``gen`` in the step being planned (what it hits in the host
        tier is loaded in this step)."""
        loaded = self._from_host(gen.sequence(), gen.admit_hit)
        restored = self.cache.loaded_tokens
        self._admit(gen, self._step_now, gen.admit_hit)
        loaded += self.cache.loaded_tokens - restored  # what a slot cache restored from its RAM
        self._step_host_tokens += loaded
        self.stats.host_loaded_tokens += loaded
        self._fit_cache_to_pool()

    def _trim_windows(self) -> None:
        """Sliding-window layers: each running request lets go of the sliding parts out of its
        window, as vLLM does at the request's next step (``block_cache``'s docstring)."""
        cache = self.cache
        if not isinstance(cache, BlockCache) or not cache.swa_groups:
            return
        for gen in self.running:
            if isinstance(gen._lock_handle, Hold):  # the last token sampled is not computed yet
                computed = gen.prompt_tokens + gen.n_out - gen.prefill_left - (1 if gen.n_out else 0)
                cache.trim(gen._lock_handle, computed)

    def _fit_cache_to_pool(self) -> None:
        """One pool for running requests and cached blocks (``behaviour.shared_pool``, vLLM):
        the prefix cache keeps ``cache_capacity_tokens`` less what running requests hold beyond
        their prompts' full blocks (which the cache holds): their last partial block and their
        output. Over it, cached blocks no request uses are evicted, least recently used first."""
        capacity = self.config.cache_capacity_tokens
        if not self.behaviour.shared_pool or capacity is None or not isinstance(self.cache, BlockCache):
            return
        cache = self.cache
        block = cache.block_tokens
        beyond = 0
        for g in self.running:
            sequence = g.prompt_tokens + g.n_out
            first = g.prompt_tokens // block  # the first block past the prompt's full ones
            beyond += self.scheduler.blocks(sequence) - first * block
            if cache.swa_groups:  # the sliding groups hold those of them in the window
                window_first = max(first, cache.swa_window_start(sequence))
                beyond += cache.swa_groups * max(0, -(-sequence // block) - window_first) * block
        cache.resize(max(capacity - beyond, block))

    def release(self, gen: Generation) -> None:
        """A preempted request's KV is freed; what it computed stays in the prefix cache."""
        self.cache.unlock(gen._lock_handle)  # type: ignore[arg-type]
        gen._lock_handle = []
        sequence = gen.prompt + gen.output
        self._store_computed(sequence[: gen.computed] if gen.computed is not None else sequence)
        gen.let_go_of_prompt()
        self.stats.preemptions += 1

    def _store_computed(self, sequence: TokenIds) -> None:
        """What a request computed enters the prefix cache as it lets go of its KV: with
        sliding-window layers, the full-attention blocks only (the sliding tail vLLM hashes is
        the prompt's, stored at admission)."""
        if isinstance(self.cache, BlockCache):
            self.cache.insert(sequence, swa_tail=False)
        else:
            self.cache.insert(sequence)

    def flush_cache(self) -> bool:
        """Drop the prefix cache; refused (False) while requests are in flight, as SGLang does."""
        if self.running or self.waiting:
            return False
        self.cache.reset()
        if self.host is not None:
            self.host.reset()
        return True

    def _admit(self, gen: Generation, now_s: float, cached: int | None = None) -> None:
        if gen.admitted_s is not None:  # back after a preemption: its sequence so far is its own
            sequence = gen.prompt + gen.output
            if isinstance(self.cache, BlockCache):
                gen._lock_handle = self.cache.admit(sequence, cached or 0, replay_tokens=gen.prompt_tokens)
            else:
                self.cache.insert(sequence)
                gen._lock_handle = self.cache.lock(sequence)
            gen.let_go_of_prompt()
            return
        gen.cached_tokens = self._cached_for(gen.prompt) if cached is None else cached
        if isinstance(self.cache, BlockCache):  # sliding parts: from the hit's window on
            gen._lock_handle = self.cache.admit(gen.prompt, gen.cached_tokens)
        else:
            if not self.cache.fills_on_lock:  # a slot takes the prompt when it is locked
                self.cache.insert(gen.prompt)
            gen._lock_handle = self.cache.lock(gen.prompt)
        self._admitted(gen, now_s)
        gen.let_go_of_prompt()

    def _admitted(self, gen: Generation, now_s: float) -> None:
        gen.admitted_s = now_s
        st = self.stats
        st.prompt_tokens_total += gen.prompt_tokens
        st.cached_tokens_total += gen.cached_tokens
        st.queue.observe(now_s - gen.arrived_s)

    def _finish(self, gen: Generation, now_s: float) -> None:
        self.cache.unlock(gen._lock_handle)  # type: ignore[arg-type]
        gen._lock_handle = []
        if gen.n_out:
            # the last token sampled was never computed: no engine caches it (docs/emulator.md)
            self._store_computed(gen.prompt + output_ids(gen._start, 0, gen.n_out - 1))
        gen.let_go_of_prompt()
        st = self.stats
        st.requests_finished += 1
        st.generation_tokens_total += gen.n_out
        if self.behaviour.perf_metrics_kept:
            self._log_perf(gen, now_s)
        if gen.first_token_s is not None:
            st.ttft.observe(gen.first_token_s - gen.arrived_s)
            if gen.n_out > 1:
                st.tpot.observe((now_s - gen.first_token_s) / (gen.n_out - 1))
        st.e2e.observe(now_s - gen.arrived_s)

    def _log_perf(self, gen: Generation, now_s: float) -> None:
        """One finished request as TensorRT-LLM's ``/perf_metrics`` states it: its times
        (seconds on the server's clock) and its KV blocks, those reused from the cache and those
        it missed."""
        block = self._page_tokens
        reused = gen.cached_tokens // block
        total = -(-(gen.prompt_tokens + gen.n_out) // block)
        self._finished_ids += 1
        self.perf_log.append({
            "request_id": self._finished_ids,
            "perf_metrics": {
                "timing_metrics": {
                    "arrival_time": gen.arrived_s, "first_scheduled_time": gen.admitted_s,
                    "first_token_time": gen.first_token_s, "last_token_time": now_s,
                },
                "kv_cache_metrics": {
                    "num_total_allocated_blocks": total, "num_new_allocated_blocks": total - reused,
                    "num_reused_blocks": reused, "num_missed_blocks": -(-gen.prompt_tokens // block) - reused,
                },
            },
        })  # fmt: skip

    def drain_perf_metrics(self) -> list[dict[str, object]]:
        """The finished requests' metrics since the last call (``/perf_metrics`` drains them)."""
        out = list(self.perf_log)
        self.perf_log.clear()
        return out
