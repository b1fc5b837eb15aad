"""What the emulator does differently as SGLang, TensorRT-LLM, vLLM or llama.cpp: one behaviour object per engine.

Place in the map (docs/architecture.md, "The emulator"): looked up once from ``EmulatorConfig.engine``
(``engine_behaviour``) by the engine model (which prefix cache, how cached tokens round) and by the
HTTP server and its wire formats (usage fields, request-field checks, info fields, metric names,
endpoints). Every decision that depends on the engine's name is made here; no other emulator
module compares ``config.engine``. The objects hold no state: each profile has one instance
(``SGLANG``, ``TRTLLM``, ``VLLM``, ``LLAMACPP``).

- cache: SGLang has a token-level radix cache (pages of 1 token); TensorRT-LLM (32) and vLLM
  (128 on its CPU build) reuse full ``block_tokens`` blocks, so their cap on cached tokens is
  rounded down to whole blocks; llama.cpp keeps one prompt a slot (``slot_cache``).
- usage: SGLang reports ``prompt_tokens_details.cached_tokens`` only when it is non-zero (and
  only with cache reporting on); TensorRT-LLM and vLLM always report it.
- request fields: TensorRT-LLM refuses unknown fields (HTTP 400); SGLang ignores them.
- ``/health``: SGLang answers ``OK``; TensorRT-LLM and vLLM an empty body.
- metrics: SGLang serves Prometheus text at ``/metrics`` (``sglang:`` names); TensorRT-LLM
  serves JSON iteration stats at ``/metrics`` and Prometheus text (``trtllm_`` names) at
  ``/prometheus/metrics``; vLLM serves ``vllm:`` names at ``/metrics``, with the
  ``vllm:cache_config_info`` gauge naming its block size.
- endpoints: SGLang's native ``/generate``, ``/flush_cache`` and info endpoints; TensorRT-LLM's
  ``/version`` and ``/perf_metrics`` (each finished request's timing and KV-block reuse, drained
  on read); vLLM's ``/version`` and ``/reset_prefix_cache``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from swarm.emulator.block_cache import BlockCache
from swarm.emulator.config import EmulatorConfig
from swarm.emulator.radix_cache import RadixCache
from swarm.emulator.scheduler import SchedulerPolicy
from swarm.emulator.slot_cache import SlotCache
from swarm.engines import llamacpp, sglang, trtllm, vllm
from swarm.engines.engine import Engine, Histogram, Metric


@dataclass(frozen=True, slots=True)
class Route:
    """One endpoint: HTTP method (``*`` for any), path, and the server's handler method name."""

    method: str
    path: str
    handler: str


#: Endpoints every profile serves, registered before each engine's own.
COMMON_ROUTES: tuple[Route, ...] = (
    Route("POST", "/v1/chat/completions", "chat"),
    Route("POST", "/v1/completions", "completions"),
    Route("GET", "/v1/models", "models"),
    Route("GET", "/health", "health"),
    Route("GET", "/swarm/faults", "fault_counts"),
    # the emulator's own way to empty its prefix cache in every profile (sweeps start each
    # point cold); SGLang's /flush_cache is also served by the sglang profile
    Route("POST", "/swarm/flush_cache", "flush_cache"),
)


@dataclass(frozen=True, slots=True)
class EngineBehaviour:
    """Everything that differs between the emulated engines (subclassed once per engine)."""

    #: the profile's name, as ``EmulatorConfig.engine``
    name: Literal["sglang", "trtllm", "vllm", "llamacpp"]
    #: the engine's module: its metric names, port, cache granularity (``swarm/engines/``)
    engine: Engine
    #: body of ``/health`` (and SGLang's ``/health_generate``)
    health_text: str
    #: fields a chat / completions request may carry; ``None``: unknown fields are ignored
    chat_fields: frozenset[str] | None
    completion_fields: frozenset[str] | None
    #: whether usage carries ``cached_tokens`` also when it is 0
    reports_zero_cached: bool
    #: its own endpoints (after ``COMMON_ROUTES``)
    routes: tuple[Route, ...]
    #: finished requests' metrics kept for ``/perf_metrics`` (TensorRT-LLM's; 0: none)
    perf_metrics_kept: int = 0
    #: one KV pool holds running requests and cached blocks (vLLM's block pool): the prefix
    #: cache's room is its capacity less the blocks running requests hold beyond it
    shared_pool: bool = False

    @property
    def owned_by(self) -> str:
        """``owned_by`` of ``/v1/models``."""
        return self.engine.owned_by[0]

    @property
    def metrics(self) -> tuple[Metric, ...]:
        """Counters and gauges of its Prometheus text, in order (the engine's own names)."""
        return self.engine.metrics

    @property
    def histograms(self) -> tuple[Histogram, ...]:
        return self.engine.histograms

    def make_cache(self, config: EmulatorConfig) -> RadixCache | BlockCache | SlotCache:
        """The prefix cache of a new engine model."""
        raise NotImplementedError

    def refuse(self, config: EmulatorConfig, prompt_tokens: int) -> str | None:
        """Why a prompt this long is refused (HTTP 400) beyond ``max_prompt_tokens``; None: it is not."""
        return None

    def block_tokens(self, config: EmulatorConfig) -> int:
        """KV block size in tokens (the config's, else the engine's own)."""
        return config.block_tokens or 1

    def host_cache_tokens(self, config: EmulatorConfig) -> int | None:
        """The host tier's size in tokens (None: no host tier)."""
        return config.host_cache_tokens

    def make_host_cache(self, config: EmulatorConfig) -> RadixCache | BlockCache | SlotCache | None:
        """The prefix cache's host tier, of the device cache's kind (None: none)."""
        tokens = self.host_cache_tokens(config)
        if tokens is None:
            return None
        return self.make_cache(config.model_copy(update={"cache_capacity_tokens": tokens}))

    def info_lines(self, config: EmulatorConfig, labels: str) -> list[str]:
        """Extra Prometheus lines (an info gauge), after the counters and gauges."""
        return []

    def page_tokens(self, config: EmulatorConfig) -> int:
        """Tokens per cache page: cached tokens come in multiples of it."""
        raise NotImplementedError

    def cache_report(self, config: EmulatorConfig) -> bool:
        """Whether OpenAI usage reports cached tokens at all (``enable_cache_report``)."""
        raise NotImplementedError

    def cached_tokens(self, matched_tokens: int, prompt_tokens: int, page_tokens: int) -> int:
        """A request's cached tokens from its cache match: at most ``prompt_tokens - 1`` (the
        last prompt token is always computed), that cap rounded down to whole pages."""
        cap = max(prompt_tokens - 1, 0)
        if page_tokens > 1:
            cap = cap // page_tokens * page_tokens
        return min(matched_tokens, cap)

    def scheduler_policy(self, config: EmulatorConfig) -> SchedulerPolicy:
        """The engine's scheduler (``emulator.scheduler``): its defaults, and the knobs the
        config sets under the engine's own names."""
        raise NotImplementedError

    def reports_cached_tokens(self, config: EmulatorConfig, cached_tokens: int) -> bool:
        """Whether OpenAI usage carries ``prompt_tokens_details.cached_tokens``."""
        return self.cache_report(config) and (self.reports_zero_cached or cached_tokens > 0)


@dataclass(frozen=True, slots=True)
class SGLangBehaviour(EngineBehaviour):
    """SGLang: token-level radix cache, reporting as ``--enable-cache-report`` says."""

    def make_cache(self, config: EmulatorConfig) -> RadixCache | BlockCache | SlotCache:
        return RadixCache(config.cache_capacity_tokens)

    def page_tokens(self, config: EmulatorConfig) -> int:
        return 1

    def cache_report(self, config: EmulatorConfig) -> bool:
        return config.cache_report

    def host_cache_tokens(self, config: EmulatorConfig) -> int | None:
        """``--host-cache-tokens``, else HiCache's ``--hicache-ratio`` x the device cache."""
        if config.host_cache_tokens is not None or not config.enable_hierarchical_cache:
            return config.host_cache_tokens
        if config.cache_capacity_tokens is None:
            return None  # an unbounded device cache evicts nothing
        return int((config.hicache_ratio or sglang.HICACHE_RATIO) * config.cache_capacity_tokens)

    def scheduler_policy(self, config: EmulatorConfig) -> SchedulerPolicy:
        """FCFS or LPM (as FCFS past ``LPM_MAX_WAITING`` waiting), a new request's output
        reserved whole and the running ones' at ``new_token_ratio``, retraction of the one with
        the least output, prefill steps that pause decoding (unless mixed chunks), chunked
        prefill."""
        chunk = config.chunked_prefill_size or sglang.CHUNKED_PREFILL_SIZE
        return SchedulerPolicy(
            queue=config.schedule_policy or sglang.SCHEDULE_POLICY,
            lpm_max_waiting=sglang.LPM_MAX_WAITING,
            reserve_ratio=sglang.INIT_NEW_TOKEN_RATIO,
            reserve_decay=sglang.NEW_TOKEN_RATIO_DECAY,
            reserve_floor=sglang.MIN_NEW_TOKEN_RATIO,
            admit_reserve=1.0,
            reserve_clip_tokens=sglang.CLIP_MAX_NEW_TOKENS,
            retract_decode_steps=sglang.RETRACT_DECODE_STEPS,
            preempt="fewest_output",
            requeue_front=False,
            max_running=config.max_running_requests,
            step_token_budget=None if chunk == -1 else chunk,
            chunked_prefill=chunk != -1,
            prefill_pauses_decode=not config.enable_mixed_chunk,
            block_tokens=1,
        )


@dataclass(frozen=True, slots=True)
class TrtllmBehaviour(EngineBehaviour):
    """TensorRT-LLM: reuse of whole ``block_tokens`` blocks, cached tokens always reported."""

    #: the block size when the config sets none
    default_block_tokens: int = trtllm.TOKENS_PER_BLOCK

    def make_cache(self, config: EmulatorConfig) -> RadixCache | BlockCache | SlotCache:
        return BlockCache(config.cache_capacity_tokens, self.block_tokens(config))

    def block_tokens(self, config: EmulatorConfig) -> int:
        return config.block_tokens or self.default_block_tokens

    def page_tokens(self, config: EmulatorConfig) -> int:
        return self.block_tokens(config)

    def cache_report(self, config: EmulatorConfig) -> bool:
        return True

    def scheduler_policy(self, config: EmulatorConfig) -> SchedulerPolicy:
        """In-flight batching, first come first served: ``GUARANTEED_NO_EVICT`` reserves each
        request's whole output (never preempts), ``MAX_UTILIZATION`` admits on the prompt and
        pauses the newest when blocks run out; ``max_num_tokens`` per step; without chunked
        prefill (the default) a prompt over it is refused."""
        guaranteed = (
            config.capacity_scheduler_policy or trtllm.CAPACITY_SCHEDULER_POLICY
        ) == "GUARANTEED_NO_EVICT"
        ratio = 1.0 if guaranteed else 0.0
        chunked = (
            trtllm.ENABLE_CHUNKED_PREFILL
            if config.enable_chunked_prefill is None
            else config.enable_chunked_prefill
        )
        return SchedulerPolicy(
            queue="fcfs", reserve_ratio=ratio, reserve_floor=ratio, admit_reserve=ratio, preempt="newest",
            max_running=config.max_batch_size or trtllm.MAX_BATCH_SIZE,
            step_token_budget=config.max_num_tokens or trtllm.MAX_NUM_TOKENS,
            chunked_prefill=chunked, refuse_over_budget=True, prefill_pauses_decode=False,
            block_tokens=self.block_tokens(config),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class VllmBehaviour(TrtllmBehaviour):
    """vLLM with automatic prefix caching: hashed full blocks (128 tokens on its CPU build),
    LRU-evicted; cached tokens reported (as with ``--enable-prompt-tokens-details``) also when
    0; its cache settings as the ``vllm:cache_config_info`` gauge."""

    def scheduler_policy(self, config: EmulatorConfig) -> SchedulerPolicy:
        """First come first served, admitted on the prompt alone (no reserve), the newest
        preempted (recomputed) when blocks run out; decodes first in each step, prefills
        chunked into the rest of ``max_num_batched_tokens``; at most ``max_num_seqs``; an idle
        engine's step takes the first request alone (the others of a burst reach its engine core
        while it runs: 6 prompts sent within 4 ms to vLLM's CPU build, its first step computed
        one, its second two, as the twin does since)."""
        return SchedulerPolicy(
            queue="fcfs", reserve_ratio=0.0, reserve_floor=0.0, admit_reserve=0.0, preempt="newest",
            admit_after_preempt=False, idle_admits_first=True,
            max_running=config.max_num_seqs or vllm.MAX_NUM_SEQS,
            step_token_budget=config.max_num_batched_tokens
            or max(vllm.MAX_NUM_BATCHED_TOKENS, config.max_num_seqs or 0),
            chunked_prefill=True, prefill_pauses_decode=False, block_tokens=self.block_tokens(config),
            swa_tokens=self._swa(config)[0], swa_groups=self._swa(config)[1],
        )  # fmt: skip

    @staticmethod
    def _swa(config: EmulatorConfig) -> tuple[int, int]:
        """The sliding window and its KV groups (both 0 for a model without one)."""
        groups = config.swa_groups or 0
        return (config.swa_tokens or 0, groups) if groups else (0, 0)

    def make_cache(self, config: EmulatorConfig) -> RadixCache | BlockCache | SlotCache:
        window, groups = self._swa(config)
        return BlockCache(
            config.cache_capacity_tokens, self.block_tokens(config), swa_tokens=window, swa_groups=groups,
            touch_on_match=False,
        )  # fmt: skip

    def info_lines(self, config: EmulatorConfig, labels: str) -> list[str]:
        return [
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{self.block_tokens(config)}",enable_prefix_caching="True",'
            f'kv_cache_size_tokens="{config.kv_capacity_tokens}",'
            f'num_gpu_blocks="{config.kv_capacity_tokens // self.block_tokens(config) + vllm.NULL_BLOCKS}",'
            f"{labels}}} 1.0",
        ]


@dataclass(frozen=True, slots=True)
class LlamacppBehaviour(EngineBehaviour):
    """llama.cpp's ``llama-server``: slots that keep one prompt each and a prompt cache in host RAM
    (``emulator.slot_cache``); one step decodes every generating slot and fills the rest of
    ``--batch-size`` with prompt chunks; requests beyond the slots wait, first come first served."""

    def slots(self, config: EmulatorConfig) -> int:
        return config.parallel or llamacpp.AUTO_PARALLEL

    def unified(self, config: EmulatorConfig) -> bool:
        """One KV pool: as asked, else only with the auto ``--parallel`` (``tools/server/server.cpp``)."""
        return config.kv_unified if config.kv_unified is not None else config.parallel is None

    def ram_tokens(self, config: EmulatorConfig) -> int | None:
        """``--cache-ram`` in tokens: MiB over the state bytes a token, at least the context
        (llama.cpp's token limit); -1: the context's tokens; 0: none."""
        mib = llamacpp.CACHE_RAM_MIB if config.cache_ram is None else config.cache_ram
        if mib == 0:
            return None
        ctx = config.ctx_size or config.max_prompt_tokens
        if mib < 0:
            return ctx
        per_token = config.state_bytes_per_token or llamacpp.STATE_BYTES_PER_TOKEN
        return max(ctx, mib * 2**20 // per_token)

    def slot_context(self, config: EmulatorConfig) -> int | None:
        """A slot's context: ``ctx_size`` (unified), else ``pad256(ctx_size / parallel)``."""
        if config.ctx_size is None:
            return None
        if self.unified(config):
            return config.ctx_size
        return -(-(config.ctx_size // self.slots(config)) // 256) * 256

    def make_cache(self, config: EmulatorConfig) -> RadixCache | BlockCache | SlotCache:
        ram = self.ram_tokens(config)
        return SlotCache(
            self.slots(config),
            similarity=llamacpp.SLOT_PROMPT_SIMILARITY
            if config.slot_prompt_similarity is None else config.slot_prompt_similarity,
            ram_tokens=ram,
            cache_idle_slots=config.cache_idle_slots if config.cache_idle_slots is not None else ram is not None,
            kv_unified=self.unified(config),
            swa_tokens=config.swa_tokens or 0,
            ubatch_tokens=config.ubatch_size or llamacpp.UBATCH_SIZE,
        )  # fmt: skip

    def make_host_cache(self, config: EmulatorConfig) -> RadixCache | BlockCache | SlotCache | None:
        """None: the RAM prompt cache is the slot cache's own."""
        return None

    def refuse(self, config: EmulatorConfig, prompt_tokens: int) -> str | None:
        ctx = self.slot_context(config)
        if ctx is not None and prompt_tokens >= ctx:
            return (
                f"request ({prompt_tokens} tokens) exceeds the available context size ({ctx} tokens), "
                "try increasing it"
            )
        return None

    def page_tokens(self, config: EmulatorConfig) -> int:
        return 1

    def cache_report(self, config: EmulatorConfig) -> bool:
        return True

    def scheduler_policy(self, config: EmulatorConfig) -> SchedulerPolicy:
        """FCFS over the slots; decodes first, prompt chunks in the rest of ``--batch-size``; no
        reserve and no preemption (each slot has its own context); with a sliding-window
        model, a prompt's last ``4 + ubatch`` and last 4 tokens in steps of their own."""
        ubatch = config.ubatch_size or llamacpp.UBATCH_SIZE
        breaks = (llamacpp.CHECKPOINT_TAIL + ubatch, llamacpp.CHECKPOINT_TAIL) if config.swa_tokens else ()
        return SchedulerPolicy(
            queue="fcfs", reserve_ratio=0.0, reserve_floor=0.0, admit_reserve=0.0, preempt="newest",
            max_running=self.slots(config), step_token_budget=config.batch_size or llamacpp.BATCH_SIZE,
            chunked_prefill=True, prefill_pauses_decode=False, prefill_tail_breaks=breaks,
        )  # fmt: skip


SGLANG = SGLangBehaviour(
    name="sglang",
    engine=sglang.ENGINE,
    health_text="OK",
    chat_fields=None,
    completion_fields=None,
    reports_zero_cached=False,
    routes=(
        Route("POST", "/generate", "generate"),
        Route("GET", "/health_generate", "health"),
        Route("*", "/flush_cache", "flush_cache"),
        Route("GET", "/get_server_info", "server_info"),
        Route("GET", "/server_info", "server_info"),
        Route("GET", "/get_model_info", "model_info"),
        # newer SGLang's name for it; SGLang's router asks it first of every worker it adds
        Route("GET", "/model_info", "model_info"),
        # what SGLang's router reads as a worker's load (power_of_two)
        Route("GET", "/get_load", "load"),
        Route("GET", "/metrics", "prometheus"),
    ),
)

TRTLLM = TrtllmBehaviour(
    name="trtllm",
    engine=trtllm.ENGINE,
    health_text="",
    chat_fields=trtllm.CHAT_FIELDS,
    completion_fields=trtllm.COMPLETION_FIELDS,
    reports_zero_cached=True,
    routes=(
        Route("GET", "/version", "version"),
        Route("GET", "/metrics", "iteration_stats"),
        Route("GET", "/prometheus/metrics", "prometheus"),
        Route("GET", trtllm.PERF_METRICS_PATH, "perf_metrics"),
    ),
    perf_metrics_kept=trtllm.PERF_METRICS_MAX_REQUESTS,
)

VLLM = VllmBehaviour(
    name="vllm",
    engine=vllm.ENGINE,
    health_text="",
    chat_fields=None,
    completion_fields=None,
    reports_zero_cached=True,
    routes=(
        Route("GET", "/version", "version"),
        Route("GET", "/metrics", "prometheus"),
        Route("POST", "/reset_prefix_cache", "reset_prefix_cache"),
    ),
    # the CPU build's, which the engine tests run beside it
    default_block_tokens=vllm.CPU_BLOCK_TOKENS,
    shared_pool=True,
)

LLAMACPP = LlamacppBehaviour(
    name="llamacpp",
    engine=llamacpp.ENGINE,
    health_text='{"status":"ok"}',
    chat_fields=None,
    completion_fields=None,
    reports_zero_cached=True,
    routes=(
        Route("GET", "/props", "props"),
        Route("GET", "/slots", "slots"),
        Route("POST", "/slots/{id_slot}", "slot_action"),
        Route("GET", "/metrics", "prometheus"),
    ),
)

BEHAVIOURS: dict[str, EngineBehaviour] = {b.name: b for b in (SGLANG, TRTLLM, VLLM, LLAMACPP)}


def engine_behaviour(config: EmulatorConfig) -> EngineBehaviour:
    """The behaviour of the engine the config emulates."""
    return BEHAVIOURS[config.engine]
