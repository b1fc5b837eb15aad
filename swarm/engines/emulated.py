"""swarm's own emulator as the engine-side readers see it: its metric names and its cache reset.

Place in the map (docs/architecture.md, "Engines"): the emulator writes these series beside the
profile's own (``emulator/formats.py``) and serves the reset in every profile; the analysis
reads the series (``analysis/engine_metrics.py``) and the sweep calls the reset.
"""

from __future__ import annotations

from swarm.engines import llamacpp, sglang, vllm
from swarm.engines.engine import CacheReset

STEPS = "swarm_emulator_steps_total"
STEP_SECONDS = "swarm_emulator_step_seconds_total"
STEP_MODEL_SECONDS = "swarm_emulator_step_model_seconds_total"
STEP_TOKENS = "swarm_emulator_step_tokens_total"
STEP_TOKEN_MODEL_SECONDS = "swarm_emulator_step_token_model_seconds_total"
#: running requests its scheduler preempted for lack of KV (``emulator/scheduler.py``)
PREEMPTIONS = "swarm_emulator_preemptions_total"
#: cached tokens loaded from its host tier (``--host-cache-tokens``, HiCache)
HOST_LOADED_TOKENS = "swarm_emulator_host_loaded_tokens_total"
#: how full its prefix cache is (its KV gauge counts running sequences)
PREFIX_CACHE_USAGE = "swarm_emulator_prefix_cache_usage"
#: the engines the emulator has a twin of (``swarm emulate --engine``)
TWINS = ("sglang", "trtllm", "vllm", "llamacpp")
#: per engine, where its server states its settings and which are the twin's (``swarm calibrate``)
STATED_INFO = {
    "sglang": (sglang.ENGINE_INFO_PATHS, sglang.STATED_SETTINGS),
    "llamacpp": (llamacpp.INFO_PATHS, llamacpp.STATED_SETTINGS),
}
#: the twins whose prefix cache is a pool of tokens: ``swarm calibrate`` measures its room
POOL_TWINS = ("sglang", "trtllm", "vllm")
#: per engine, its pool and attention layout from the KV blocks it states and the model's
#: ``config.json`` (``swarm calibrate``; vLLM's hybrid KV cache manager)
POOL_FROM_LAYOUT = {"vllm": vllm.stated_pool}
#: per engine, what its answers to prompts sent again say of its model's sliding window (``swarm calibrate``)
WINDOW_FROM_REPEATS = {"llamacpp": llamacpp.window_from_repeats}
#: the response header in which an emulator names itself (its URL, or ``--replica-name``), so a
#: client behind a router knows which replica served each request (``RequestRecord.replica``)
REPLICA_HEADER = "x-swarm-replica"
#: empties the prefix cache in every profile
CACHE_RESET = CacheReset("/swarm/flush_cache")
