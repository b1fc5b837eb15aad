"""SGLang (``python -m sglang.launch_server``): what swarm knows of it.

Place in the map (docs/architecture.md, "Engines"). Facts, and where they come from:

- port 30000, ``/health``, ``/get_server_info`` (``/server_info`` in newer releases),
  ``/flush_cache``, native ``/generate``: SGLang's server (``sglang/srt/entrypoints/http_server.py``).
- cached tokens in OpenAI usage only with ``--enable-cache-report``, and then only when non-zero;
  ``meta_info.cached_tokens`` on ``/generate`` always (server arguments, docs "Server Arguments").
- the radix cache shares prefixes token by token (``--page-size`` 1 by default).
- metric names, with ``--enable-metrics``: ``sglang/srt/metrics/collector.py``.
"""

from __future__ import annotations

from typing import Literal

from swarm.engines.engine import CacheReset, Engine, Histogram, Identified, Metric, Served


def identify(served: Served) -> Identified | None:
    """SGLang answers its server-info endpoint with a JSON object of its settings."""
    for path in ENGINE_INFO_PATHS:
        info = served.json_dict(path)
        if info is not None:
            return Identified(bool(info.get("emulator")), str(info.get("version", "")) or None)
    return None


ENGINE_INFO_PATHS = ("/get_server_info", "/server_info")
#: what the server info states of the server, and the emulator setting each is
#: (``swarm calibrate``; a schedule policy other than these two is not the twin's)
STATED_SETTINGS = {
    "max_total_num_tokens": "kv_capacity_tokens", "chunked_prefill_size": "chunked_prefill_size",
    "max_running_requests": "max_running_requests", "schedule_policy": "schedule_policy",
}  # fmt: skip
STATED_POLICIES = ("lpm", "fcfs")

# The scheduler (``emulator.scheduler`` models it; sources in docs/emulator.md, "Engine policies")
#: ``--schedule-policy``'s default (``srt/server_args.py``, 0.5.3 and 0.5.23)
SCHEDULE_POLICY: Literal["lpm", "fcfs"] = "fcfs"
#: LPM orders as FCFS past this many waiting (``WAITING_QUEUE_PREFIX_MATCH_MAX``, 0.5.23)
LPM_MAX_WAITING = 128
#: ``--chunked-prefill-size`` as SGLang sets it on an 80-160 GB GPU (H100, H200)
CHUNKED_PREFILL_SIZE = 8192
#: ``new_token_ratio``: it starts at ``SGLANG_INIT_NEW_TOKEN_RATIO``, its floor is that times
#: ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`` (0.14), and it falls to the floor over
#: ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` (600) decode steps
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.7 * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
#: an output to come counts at most this many tokens in admission (``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``)
CLIP_MAX_NEW_TOKENS = 4096
#: after a retraction the ratio is set with this many further decode steps per request
RETRACT_DECODE_STEPS = 20
#: ``--hicache-ratio``: HiCache's host pool over the device pool (0.5.3)
HICACHE_RATIO = 2.0

ENGINE = Engine(
    name="sglang",
    title="SGLang",
    default_port=30000,
    dialects=("openai-chat", "openai-completions", "sglang-generate"),
    default_dialect="openai-chat",
    stream_usage_option=True,
    cached_absent_means_zero=True,
    extra_fields=frozenset({"ignore_eos", "top_k", "min_p", "repetition_penalty"}),
    health_path="/health",
    metrics_path="/metrics",
    info_paths=ENGINE_INFO_PATHS,
    cache_block_tokens=1,
    cache_report_hint="start SGLang with --enable-cache-report (and --enable-metrics for /metrics)",
    owned_by=("sglang",),
    identify=identify,
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
        Histogram("sglang:time_to_first_token_seconds", "ttft"),
        Histogram("sglang:e2e_request_latency_seconds", "e2e"),
        Histogram("sglang:inter_token_latency_seconds", "tpot"),
    ),
    cache_reset=CacheReset("/flush_cache"),
    reuse_loss_cause="evicted from the radix cache, or not yet stored",
)
