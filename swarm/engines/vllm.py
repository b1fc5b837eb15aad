"""vLLM's OpenAI server (``vllm serve``, ``vllm.entrypoints.openai.api_server``): what swarm knows of it.

Place in the map (docs/architecture.md, "Engines"). Facts, and where they come from:

- port 8000, ``/health``, ``/version``, ``/metrics`` (``vllm:`` names, ``vllm/v1/metrics/loggers.py``).
- cached tokens in usage with ``--enable-prompt-tokens-details``, 0 included; automatic prefix
  caching hashes full blocks: 16 tokens on GPUs (``--block-size``), 128 on the CPU build, stated
  by the ``vllm:cache_config_info`` gauge.
- ``POST /reset_prefix_cache`` only with ``VLLM_SERVER_DEV_MODE=1``; it answers
  ``{"success": false}`` while blocks are held by running requests.
- ``vllm:gpu_cache_usage_perc`` was the KV-usage gauge's name before ``vllm:kv_cache_usage_perc``.
- the pool is ``num_gpu_blocks`` blocks (``vllm:cache_config_info``), one of them kept as the
  null block (``v1/core/block_pool.py``). A model with sliding-window layers beside full ones
  (Gemma 2/3, gpt-oss, ...) gets the hybrid KV cache manager: its layers are grouped, each group
  drawing its own blocks from that pool (``v1/core/kv_cache_utils.py``,
  ``_get_kv_cache_groups_uniform_page_size``; ``hybrid_layout`` below), and the stated
  ``kv_cache_size_tokens`` is then the pool over one request of ``max_model_len``, not what
  shorter prompts see. Read at vLLM's main branch, November 2026 (its CPU build served here
  reports version 0.32.0).
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


#: vLLM keeps one block of the pool as its null block (``BlockPool.null_block``)
NULL_BLOCKS = 1


def hybrid_layout(model_config: dict[str, object]) -> tuple[int, int] | str:
    """A model's sliding window and vLLM's KV groups of sliding-window layers, from its Hugging
    Face ``config.json``: ``(0, 0)`` for full attention only, ``(window, groups)`` where one
    group of full-attention layers sits beside ``groups`` of sliding ones, or why the twin
    cannot model it. vLLM's rule: layers of each type, grouped in groups of the smaller type's
    count (of the larger's, where it is under 1.5 times the smaller), rounded up."""
    text = model_config.get("text_config")
    config = text if isinstance(text, dict) else model_config
    window = config.get("sliding_window")
    layers = config.get("num_hidden_layers")
    if not isinstance(window, int) or window <= 0:
        return (0, 0)
    if not isinstance(layers, int) or layers <= 0:
        return "the model config has no num_hidden_layers"
    types = config.get("layer_types")
    pattern = config.get("sliding_window_pattern")
    if isinstance(types, list):
        sliding = sum(1 for t in types if t == "sliding_attention")
        full = sum(1 for t in types if t == "full_attention")
        if sliding + full != len(types):
            return f"layer types other than sliding and full attention: {sorted(set(map(str, types)))}"
    elif isinstance(pattern, int) and pattern > 0:  # Gemma 3's older configs: every pattern-th layer is full
        full = layers // pattern
        sliding = layers - full
    else:
        if config.get("use_sliding_window") is False:
            return (0, 0)
        return "the layer pattern is unknown (no layer_types or sliding_window_pattern in the model config)"
    if sliding == 0:
        return (0, 0)
    if full == 0:
        return "every layer slides: no full-attention group"
    size = min(full, sliding)
    if max(full, sliding) < 1.5 * size:
        size = max(full, sliding)
    full_groups, sliding_groups = -(-full // size), -(-sliding // size)
    if full_groups != 1:
        return f"{full_groups} KV groups of full-attention layers (the twin models one)"
    return (window, sliding_groups)


def stated_pool(
    kv_blocks: int, block_tokens: int, model_config: dict[str, object]
) -> tuple[dict[str, int], str] | str:
    """The twin's pool and layout from the blocks vLLM states and the model's ``config.json``:
    (its settings, a note saying them), or why the layout is not known. The pool counts one KV
    group's tokens (``num_gpu_blocks`` less the null block, times the block size)."""
    layout = hybrid_layout(model_config)
    if isinstance(layout, str):
        return layout
    window, groups = layout
    pool = (kv_blocks - NULL_BLOCKS) * block_tokens
    settings = {"kv_capacity_tokens": pool, "cache_capacity_tokens": pool}
    if groups:
        settings |= {"swa_tokens": window, "swa_groups": groups}
    note = (
        f"a sliding window of {window} tokens in {groups} KV groups beside one of full attention; "
        if groups
        else ""
    ) + f"the pool is {kv_blocks} blocks of {block_tokens} (one kept null): {pool} tokens of one group"
    return settings, note


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
