"""TensorRT-LLM's OpenAI server (``trtllm-serve``): what swarm knows of it.

Place in the map (docs/architecture.md, "Engines"). Facts, and where they come from:

- port 8000, ``/health``, ``/version``, JSON iteration stats at ``/metrics`` and Prometheus text
  at ``/prometheus/metrics``: ``tensorrt_llm/serve/openai_server.py``.
- request models refuse unknown fields (HTTP 400): the field lists below are those of
  ``tensorrt_llm/serve/openai_protocol.py``'s chat and completion requests.
- KV blocks of ``tokens_per_block`` = 32 tokens by default, reused whole when
  ``kv_cache_config.enable_block_reuse`` is on; cached tokens always reported in usage.
- no endpoint empties the block cache.
"""

from __future__ import annotations

from swarm.engines.engine import Engine, Histogram, Identified, Metric, Served

#: Fields trtllm-serve's OpenAI request models accept; anything else is refused.
COMMON_FIELDS = frozenset(
    {
        "model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature",
        "top_p", "top_k", "n", "stop", "seed", "frequency_penalty", "presence_penalty", "logprobs",
        "top_logprobs", "user", "ignore_eos", "min_tokens", "stop_token_ids", "best_of",
        "use_beam_search", "length_penalty", "repetition_penalty", "min_p", "response_format",
        "logit_bias", "disaggregated_params", "lora_request",
    }
)  # fmt: skip
CHAT_FIELDS = COMMON_FIELDS | {
    "messages", "tools", "tool_choice", "parallel_tool_calls", "chat_template", "chat_template_kwargs",
    "add_generation_prompt", "documents", "reasoning_effort",
}  # fmt: skip
COMPLETION_FIELDS = COMMON_FIELDS | {"prompt", "echo", "suffix"}
#: ``tokens_per_block`` when the server's KV-cache config sets none
TOKENS_PER_BLOCK = 32

# The scheduler (``emulator.scheduler`` models it; sources in docs/emulator.md, "Engine policies")
#: ``scheduler_config.capacity_scheduler_policy``'s default
CAPACITY_SCHEDULER_POLICY = "GUARANTEED_NO_EVICT"
#: ``max_batch_size`` and ``max_num_tokens`` of trtllm-serve (``BuildConfig``'s, ``tensorrt_llm/builder.py``)
MAX_BATCH_SIZE = 2048
MAX_NUM_TOKENS = 8192
#: ``enable_chunked_prefill``'s default
ENABLE_CHUNKED_PREFILL = False
#: ``GET /perf_metrics`` (with ``return_perf_metrics``): the finished requests' metrics since the
#: last read, at most ``perf_metrics_max_requests`` of them
PERF_METRICS_PATH = "/perf_metrics"
PERF_METRICS_MAX_REQUESTS = 1000


def identify(served: Served) -> Identified | None:
    """trtllm-serve answers ``/prometheus/metrics`` (swarm's emulator also names its profile)."""
    version = served.json_dict("/version")
    named = version is not None and version.get("engine_profile") == "trtllm"
    if served.ok("/prometheus/metrics") is None and not named:
        return None
    return Identified(bool(version and version.get("emulator")), served.version())


ENGINE = Engine(
    name="trtllm",
    title="TensorRT-LLM (trtllm-serve)",
    default_port=8000,
    dialects=("openai-chat", "openai-completions"),
    default_dialect="openai-chat",
    stream_usage_option=True,
    cached_absent_means_zero=False,
    extra_fields=frozenset({"ignore_eos", "top_k"}),
    health_path="/health",
    metrics_path="/prometheus/metrics",
    info_paths=("/version",),
    cache_block_tokens=TOKENS_PER_BLOCK,
    cache_report_hint=(
        "enable KV-cache block reuse in trtllm-serve's config (kv_cache_config: enable_block_reuse: true)"
    ),
    owned_by=("tensorrt_llm", "trtllm"),
    identify=identify,
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
        Histogram("trtllm_time_to_first_token_seconds", "ttft"),
        Histogram("trtllm_e2e_request_latency_seconds", "e2e"),
        Histogram("trtllm_time_per_output_token_seconds", "tpot"),
        Histogram("trtllm_request_queue_time_seconds", "queue"),
    ),
    cache_reset=None,
    reuse_loss_cause="evicted block, or not yet stored",
)
