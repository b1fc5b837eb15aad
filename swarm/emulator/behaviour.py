"""What the emulator does differently as SGLang, TensorRT-LLM or vLLM: one behaviour object per engine.

Place in the map (docs/architecture.md, "The emulator"): looked up once from ``EmulatorConfig.engine``
(``engine_behaviour``) by the engine model (which prefix cache, how cached tokens round) and by the
HTTP server and its wire formats (usage fields, request-field checks, info fields, metric names,
endpoints). Every decision that depends on the engine's name is made here; no other emulator
module compares ``config.engine``. The objects hold no state: each profile has one instance
(``SGLANG``, ``TRTLLM``, ``VLLM``).

- cache: SGLang has a token-level radix cache (pages of 1 token); TensorRT-LLM (32) and vLLM
  (128 on its CPU build) reuse full ``block_tokens`` blocks, so their cap on cached tokens is
  rounded down to whole blocks.
- usage: SGLang reports ``prompt_tokens_details.cached_tokens`` only when it is non-zero (and
  only with cache reporting on); TensorRT-LLM and vLLM always report it.
- request fields: TensorRT-LLM refuses unknown fields (HTTP 400); SGLang ignores them.
- ``/health``: SGLang answers ``OK``; TensorRT-LLM and vLLM an empty body.
- metrics: SGLang serves Prometheus text at ``/metrics`` (``sglang:`` names); TensorRT-LLM
  serves JSON iteration stats at ``/metrics`` and Prometheus text (``trtllm_`` names) at
  ``/prometheus/metrics``; vLLM serves ``vllm:`` names at ``/metrics``, with the
  ``vllm:cache_config_info`` gauge naming its block size.
- endpoints: SGLang's native ``/generate``, ``/flush_cache`` and info endpoints; TensorRT-LLM's
  ``/version``; vLLM's ``/version`` and ``/reset_prefix_cache``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from swarm.emulator.block_cache import BlockCache
from swarm.emulator.config import EmulatorConfig
from swarm.emulator.radix_cache import RadixCache

#: Fields trtllm-serve's OpenAI request models accept; anything else is refused.
TRTLLM_COMMON_FIELDS = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "n",
        "stop",
        "seed",
        "frequency_penalty",
        "presence_penalty",
        "logprobs",
        "top_logprobs",
        "user",
        "ignore_eos",
        "min_tokens",
        "stop_token_ids",
        "best_of",
        "use_beam_search",
        "length_penalty",
        "repetition_penalty",
        "min_p",
        "response_format",
        "logit_bias",
        "disaggregated_params",
        "lora_request",
    }
)
TRTLLM_CHAT_FIELDS = TRTLLM_COMMON_FIELDS | {
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "chat_template",
    "chat_template_kwargs",
    "add_generation_prompt",
    "documents",
    "reasoning_effort",
}
TRTLLM_COMPLETION_FIELDS = TRTLLM_COMMON_FIELDS | {"prompt", "echo", "suffix"}

#: What a metric's value is read from (``formats.prometheus_text`` computes each).
MetricSource = Literal[
    "prompt_tokens",
    "generation_tokens",
    "cached_tokens",
    "requests_finished",
    "running",
    "waiting",
    "kv_usage",
    "cache_hit_rate",
]
#: Which ``EngineStats`` histogram a latency metric shows.
HistogramSource = Literal["ttft", "e2e", "tpot", "queue"]


@dataclass(frozen=True, slots=True)
class Metric:
    """One counter or gauge of an engine's Prometheus text."""

    name: str
    kind: Literal["counter", "gauge"]
    source: MetricSource
    help_text: str


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
    name: Literal["sglang", "trtllm", "vllm"]
    #: ``owned_by`` of ``/v1/models``
    owned_by: str
    #: body of ``/health`` (and SGLang's ``/health_generate``)
    health_text: str
    #: fields a chat / completions request may carry; ``None``: unknown fields are ignored
    chat_fields: frozenset[str] | None
    completion_fields: frozenset[str] | None
    #: whether usage carries ``cached_tokens`` also when it is 0
    reports_zero_cached: bool
    #: counters and gauges of its Prometheus text, in order, then its latency histograms
    metrics: tuple[Metric, ...]
    histograms: tuple[tuple[str, HistogramSource], ...]
    #: its own endpoints (after ``COMMON_ROUTES``)
    routes: tuple[Route, ...]

    def make_cache(self, config: EmulatorConfig) -> RadixCache | BlockCache:
        """The prefix cache of a new engine model."""
        raise NotImplementedError

    def block_tokens(self, config: EmulatorConfig) -> int:
        """KV block size in tokens (the config's, else the engine's own)."""
        return config.block_tokens or 1

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

    def reports_cached_tokens(self, config: EmulatorConfig, cached_tokens: int) -> bool:
        """Whether OpenAI usage carries ``prompt_tokens_details.cached_tokens``."""
        return self.cache_report(config) and (self.reports_zero_cached or cached_tokens > 0)


@dataclass(frozen=True, slots=True)
class SGLangBehaviour(EngineBehaviour):
    """SGLang: token-level radix cache, reporting as ``--enable-cache-report`` says."""

    def make_cache(self, config: EmulatorConfig) -> RadixCache | BlockCache:
        return RadixCache(config.cache_capacity_tokens)

    def page_tokens(self, config: EmulatorConfig) -> int:
        return 1

    def cache_report(self, config: EmulatorConfig) -> bool:
        return config.cache_report


@dataclass(frozen=True, slots=True)
class TrtllmBehaviour(EngineBehaviour):
    """TensorRT-LLM: reuse of whole ``block_tokens`` blocks, cached tokens always reported."""

    #: the block size when the config sets none
    default_block_tokens: int = 32

    def make_cache(self, config: EmulatorConfig) -> RadixCache | BlockCache:
        return BlockCache(config.cache_capacity_tokens, self.block_tokens(config))

    def block_tokens(self, config: EmulatorConfig) -> int:
        return config.block_tokens or self.default_block_tokens

    def page_tokens(self, config: EmulatorConfig) -> int:
        return self.block_tokens(config)

    def cache_report(self, config: EmulatorConfig) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class VllmBehaviour(TrtllmBehaviour):
    """vLLM with automatic prefix caching: hashed full blocks (128 tokens on its CPU build),
    LRU-evicted; cached tokens reported (as with ``--enable-prompt-tokens-details``) also when
    0; its cache settings as the ``vllm:cache_config_info`` gauge."""

    def info_lines(self, config: EmulatorConfig, labels: str) -> list[str]:
        return [
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{self.block_tokens(config)}",enable_prefix_caching="True",'
            f"{labels}}} 1.0",
        ]


SGLANG = SGLangBehaviour(
    name="sglang",
    owned_by="sglang",
    health_text="OK",
    chat_fields=None,
    completion_fields=None,
    reports_zero_cached=False,
    metrics=(
        Metric(
            "sglang:prompt_tokens_total", "counter", "prompt_tokens", "Number of prefill tokens processed."
        ),
        Metric(
            "sglang:generation_tokens_total",
            "counter",
            "generation_tokens",
            "Number of generation tokens processed.",
        ),
        Metric("sglang:cached_tokens_total", "counter", "cached_tokens", "Number of cached prompt tokens."),
        Metric("sglang:num_requests_total", "counter", "requests_finished", "Number of requests processed."),
        Metric("sglang:num_running_reqs", "gauge", "running", "The number of running requests."),
        Metric("sglang:num_queue_reqs", "gauge", "waiting", "The number of requests in the waiting queue."),
        Metric("sglang:token_usage", "gauge", "kv_usage", "The token usage."),
        Metric("sglang:cache_hit_rate", "gauge", "cache_hit_rate", "The prefix cache hit rate."),
    ),
    histograms=(
        ("sglang:time_to_first_token_seconds", "ttft"),
        ("sglang:e2e_request_latency_seconds", "e2e"),
        ("sglang:inter_token_latency_seconds", "tpot"),
    ),
    routes=(
        Route("POST", "/generate", "generate"),
        Route("GET", "/health_generate", "health"),
        Route("*", "/flush_cache", "flush_cache"),
        Route("GET", "/get_server_info", "server_info"),
        Route("GET", "/server_info", "server_info"),
        Route("GET", "/get_model_info", "model_info"),
        Route("GET", "/metrics", "prometheus"),
    ),
)

TRTLLM = TrtllmBehaviour(
    name="trtllm",
    owned_by="tensorrt_llm",
    health_text="",
    chat_fields=TRTLLM_CHAT_FIELDS,
    completion_fields=TRTLLM_COMPLETION_FIELDS,
    reports_zero_cached=True,
    metrics=(
        Metric(
            "trtllm_request_success_total",
            "counter",
            "requests_finished",
            "Count of successfully processed requests.",
        ),
        Metric(
            "trtllm_prompt_tokens_total", "counter", "prompt_tokens", "Number of prompt tokens processed."
        ),
        Metric(
            "trtllm_generation_tokens_total",
            "counter",
            "generation_tokens",
            "Number of generation tokens processed.",
        ),
        Metric("trtllm_kv_cache_hit_rate", "gauge", "cache_hit_rate", "KV cache block reuse rate (tokens)."),
        Metric("trtllm_kv_cache_utilization", "gauge", "kv_usage", "KV cache utilization."),
        Metric("trtllm_num_requests_running", "gauge", "running", "Requests being processed."),
        Metric("trtllm_num_requests_waiting", "gauge", "waiting", "Requests waiting."),
    ),
    histograms=(
        ("trtllm_time_to_first_token_seconds", "ttft"),
        ("trtllm_e2e_request_latency_seconds", "e2e"),
        ("trtllm_time_per_output_token_seconds", "tpot"),
        ("trtllm_request_queue_time_seconds", "queue"),
    ),
    routes=(
        Route("GET", "/version", "version"),
        Route("GET", "/metrics", "iteration_stats"),
        Route("GET", "/prometheus/metrics", "prometheus"),
    ),
)

VLLM = VllmBehaviour(
    name="vllm",
    owned_by="vllm",
    health_text="",
    chat_fields=None,
    completion_fields=None,
    reports_zero_cached=True,
    metrics=(
        Metric(
            "vllm:num_requests_running", "gauge", "running", "Number of requests in model execution batches."
        ),
        Metric(
            "vllm:num_requests_waiting", "gauge", "waiting", "Number of requests waiting to be processed."
        ),
        Metric("vllm:kv_cache_usage_perc", "gauge", "kv_usage", "KV-cache usage. 1 means 100 percent usage."),
        Metric(
            "vllm:prefix_cache_queries_total",
            "counter",
            "prompt_tokens",
            "Prefix cache queries, in terms of number of queried tokens.",
        ),
        Metric(
            "vllm:prefix_cache_hits_total",
            "counter",
            "cached_tokens",
            "Prefix cache hits, in terms of number of cached tokens.",
        ),
        Metric("vllm:prompt_tokens_total", "counter", "prompt_tokens", "Number of prefill tokens processed."),
        Metric(
            "vllm:generation_tokens_total",
            "counter",
            "generation_tokens",
            "Number of generation tokens processed.",
        ),
        Metric(
            "vllm:request_success_total",
            "counter",
            "requests_finished",
            "Count of successfully processed requests.",
        ),
    ),
    histograms=(
        ("vllm:time_to_first_token_seconds", "ttft"),
        ("vllm:e2e_request_latency_seconds", "e2e"),
        ("vllm:inter_token_latency_seconds", "tpot"),
        ("vllm:request_queue_time_seconds", "queue"),
    ),
    routes=(
        Route("GET", "/version", "version"),
        Route("GET", "/metrics", "prometheus"),
        Route("POST", "/reset_prefix_cache", "reset_prefix_cache"),
    ),
    default_block_tokens=128,
)

BEHAVIOURS: dict[str, EngineBehaviour] = {b.name: b for b in (SGLANG, TRTLLM, VLLM)}


def engine_behaviour(config: EmulatorConfig) -> EngineBehaviour:
    """The behaviour of the engine the config emulates."""
    return BEHAVIOURS[config.engine]
