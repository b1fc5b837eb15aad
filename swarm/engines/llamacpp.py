"""llama.cpp's ``llama-server``: what swarm knows of it.

Place in the map (docs/architecture.md, "Engines"). Facts, and where they come from
(``tools/server/server.cpp`` and its README):

- port 8080, ``/health``, ``/props`` (``default_generation_settings``, ``build_info``),
  ``/metrics`` with ``--metrics``.
- one prompt kept per slot; a request gets the idle slot with the longest common prefix;
  cached tokens in ``usage.prompt_tokens_details.cached_tokens`` or ``timings.cache_n``.
- ``llamacpp:prompt_tokens_total`` counts the prompt tokens it computed, not the cached ones.
- ``POST /slots/<id>?action=erase`` empties a slot, only with ``--slot-save-path`` (else 501).
"""

from __future__ import annotations

from swarm.engines.engine import CacheReset, Engine, Identified, Metric, Served


def identify(served: Served) -> Identified | None:
    props = served.json_dict("/props")
    if props is None or not ("default_generation_settings" in props or "build_info" in props):
        return None
    return Identified(False, str(props.get("build_info", "")) or None)


ENGINE = Engine(
    name="llamacpp",
    title="llama.cpp llama-server",
    default_port=8080,
    dialects=("openai-chat", "openai-completions"),
    default_dialect="openai-chat",
    stream_usage_option=True,
    cached_absent_means_zero=False,
    extra_fields=frozenset({"ignore_eos", "top_k", "min_p", "repeat_penalty", "cache_prompt"}),
    health_path="/health",
    metrics_path="/metrics",
    info_paths=("/props",),
    cache_block_tokens=1,
    cache_report_hint="start llama-server with prompt caching on (the default; not --no-cache-prompt) and --metrics",
    owned_by=("llamacpp",),
    identify=identify,
    metrics=(
        Metric(
            "llamacpp:prompt_tokens_total",
            "counter",
            "computed_prompt_tokens",
            "Number of prompt tokens processed.",
        ),
        Metric(
            "llamacpp:prompt_tokens_cached_total",
            "counter",
            "cached_tokens",
            "Number of prompt tokens taken from the cache.",
        ),
        Metric("llamacpp:requests_processing", "gauge", "running", "Number of requests processing."),
        Metric("llamacpp:requests_deferred", "gauge", "waiting", "Number of requests deferred."),
        Metric(
            "llamacpp:kv_cache_usage_ratio", "gauge", "kv_usage", "KV-cache usage. 1 means 100 percent usage."
        ),
    ),
    cache_reset=CacheReset(
        "/slots/{id}?action=erase",
        per_slot=True,
        slots_path="/slots",
        failure_hints={501: "llama-server erases slots only when started with --slot-save-path"},
    ),
    reuse_loss_cause="slot given to another prompt",
)
