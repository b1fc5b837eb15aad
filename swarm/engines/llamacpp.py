"""llama.cpp's ``llama-server``: what swarm knows of it.

Place in the map (docs/architecture.md, "Engines"). Facts, and where they come from
(``tools/server/server.cpp`` and its README):

- port 8080, ``/health``, ``/props`` (``default_generation_settings``, ``build_info``),
  ``/metrics`` with ``--metrics``.
- one prompt kept per slot; a request gets the idle slot with the longest common prefix;
  cached tokens in ``usage.prompt_tokens_details.cached_tokens`` or ``timings.cache_n``.
- ``llamacpp:prompt_tokens_total`` counts the prompt tokens it computed, not the cached ones
  (``llamacpp:prompt_tokens_cached_total`` those); no KV usage gauge (read in build 0c1e570,
  ``server-task.cpp``; older builds served ``llamacpp:kv_cache_usage_ratio``).
- ``/props`` states ``total_slots`` and the slot context (``default_generation_settings.n_ctx``).
- ``POST /slots/<id>?action=erase`` empties a slot, only with ``--slot-save-path`` (else 501).
"""

from __future__ import annotations

from swarm.engines.engine import CacheReset, Engine, Identified, Metric, Served


def identify(served: Served) -> Identified | None:
    props = served.json_dict("/props")
    if props is None or not ("default_generation_settings" in props or "build_info" in props):
        return None
    return Identified(bool(props.get("emulator")), str(props.get("build_info", "")) or None)


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
            "llamacpp:tokens_predicted_total",
            "counter",
            "generation_tokens",
            "Number of generation tokens processed.",
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

#: where the server states its settings, and which of them are the emulator's (``swarm calibrate``)
INFO_PATHS = ("/props",)
STATED_SETTINGS = {"total_slots": "parallel"}
#: with a sliding-window model, llama-server computes a prompt's last ``4 + n_ubatch`` and last 4
#: tokens in steps of their own (context checkpoints), and a repeated prompt reuses all but its
#: last ``SWA_REPEAT_RECOMPUTED`` tokens (its checkpoint at ``N - 4``, less one)
SWA_REPEAT_RECOMPUTED = 5
#: checkpoints are taken this many tokens before a prompt's end, and ``4 + n_ubatch`` before it
#: (``server-context.cpp``, ``checkpoint_offsets``)
CHECKPOINT_TAIL = 4
#: the window ``swarm calibrate`` states when it sees that (the server does not say; Gemma 3's)
SWA_TOKENS_ASSUMED = 512
#: ``-np -1`` (auto): 4 slots over one unified KV (``tools/server/server.cpp``)
AUTO_PARALLEL = 4
#: ``--slot-prompt-similarity`` (``common/common.h``)
SLOT_PROMPT_SIMILARITY = 0.1
#: ``--cache-ram`` in MiB (``common/common.h``; 0: off, -1: no byte limit)
CACHE_RAM_MIB = 8192
#: ``-b`` / ``--batch-size`` and ``-ub`` / ``--ubatch-size``
BATCH_SIZE = 2048
#: the emulator's default state bytes a token, to size ``--cache-ram`` in tokens: Gemma 3 270M's
#: f16 KV (its config.json: 18 layers, 1 KV head of 256; x 2 for K and V, x 2 bytes)
STATE_BYTES_PER_TOKEN = 18 * 1 * 256 * 2 * 2
UBATCH_SIZE = 512


def window_from_repeats(repeats: list[tuple[int, int]]) -> tuple[int, tuple[int, ...]] | None:
    """From ``(prompt tokens, cached tokens)`` of prompts sent again at once (``swarm
    calibrate``): when every one shorter than the window came back ``SWA_REPEAT_RECOMPUTED``
    tokens short, a sliding-window model's checkpoints: the window assumed and the tails a
    prompt's chunks end at; else None."""
    short = [(p, c) for p, c in repeats if p <= SWA_TOKENS_ASSUMED]
    if not short or any(p - c != SWA_REPEAT_RECOMPUTED for p, c in short):
        return None
    return SWA_TOKENS_ASSUMED, (CHECKPOINT_TAIL + UBATCH_SIZE, CHECKPOINT_TAIL)
