"""vLLM's OpenAI server (``vllm serve``, ``vllm.entrypoints.openai.api_server``): what swarm knows of it.

Place in the map (docs/architecture.md, "Engines"). Facts, and where they come from:

- port 8000, ``/health``, ``/version``, ``/metrics`` (``vllm:`` names, ``vllm/v1/metrics/loggers.py``).
- cached tokens in usage with ``--enable-prompt-tokens-details``, 0 included; automatic prefix
  caching hashes full blocks: 16 tokens on GPUs (``--block-size``), 128 on the CPU build, stated
  by the ``vllm:cache_config_info`` gauge.
- ``POST /reset_prefix_cache`` only with ``VLLM_SERVER_DEV_MODE=1``; it answers
  ``{"success": false}`` while blocks are held by running requests.
- ``vllm:gpu_cache_usage_perc`` was the KV-usage gauge's name before ``vllm:kv_cache_usage_perc``.
"""

from __future__ import annotations

from swarm.engines.engine import CacheReset, Engine, Histogram, Identified, Metric, Served

#: vLLM's KV block size on GPUs (``--block-size``'s default) and on its CPU build
GPU_BLOCK_TOKENS = 16
CPU_BLOCK_TOKENS = 128

# The scheduler (``emulator.scheduler`` models it; sources in docs/emulator.md, "Engine policies")
#: ``--max-num-seqs`` and ``--max-num-batched-tokens`` of ``vllm serve`` on its CPU build (one
#: worker; ``engine/arg_utils.py``, 0.11.0), as the profile's block size
MAX_NUM_SEQS = 128
MAX_NUM_BATCHED_TOKENS = 2048


def identify(served: Served) -> Identified | None:
    """vLLM's ``/metrics`` holds ``vllm:`` series (checked before SGLang's: vLLM in development
    mode also serves ``/server_info``)."""
    metrics = served.ok("/metrics")
    if metrics is None or b"vllm:" not in metrics:
        return None
    version = served.json_dict("/version")
    return Identified(bool(version and version.get("emulator")), served.version())


ENGINE = Engine(
    name="vllm",
    title="vLLM",
    default_port=8000,
    dialects=("openai-chat", "openai-completions"),
    default_dialect="openai-chat",
    stream_usage_option=True,
    cached_absent_means_zero=False,
    extra_fields=frozenset({"ignore_eos", "top_k", "min_p", "repetition_penalty"}),
    health_path="/health",
    metrics_path="/metrics",
    info_paths=("/version",),
    cache_block_tokens=GPU_BLOCK_TOKENS,
    cache_report_hint="start vLLM with --enable-prompt-tokens-details (prefix caching is on by default)",
    owned_by=("vllm",),
    identify=identify,
    metrics=(
        Metric(
            "vllm:num_requests_running", "gauge", "running", "Number of requests in model execution batches."
        ),
        Metric(
            "vllm:num_requests_waiting", "gauge", "waiting", "Number of requests waiting to be processed."
        ),
        Metric(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "kv_usage",
            "KV-cache usage. 1 means 100 percent usage.",
            older_names=("vllm:gpu_cache_usage_perc",),
        ),
        Metric(
            "vllm:prefix_cache_queries_total",
            "counter",
            "prefix_queries",
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
        Histogram("vllm:time_to_first_token_seconds", "ttft"),
        Histogram("vllm:e2e_request_latency_seconds", "e2e"),
        Histogram("vllm:inter_token_latency_seconds", "tpot"),
        Histogram("vllm:request_queue_time_seconds", "queue"),
    ),
    cache_reset=CacheReset(
        "/reset_prefix_cache",
        failure_hints={404: "vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1"},
    ),
    reuse_loss_cause="evicted block, or not yet stored",
)
