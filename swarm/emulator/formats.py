"""Wire formats of the emulated engines: error bodies, usage, SGLang's native meta, metrics text.

Place in the map (docs/architecture.md, "The emulator"): used by the emulator's HTTP server only. It may
share constants with ``swarm.clients`` but none of the client's logic, so a bug in one cannot
hide in the other. Where the engines differ (which usage fields, which metric names), the
engine's ``behaviour`` object decides and this module writes what it says; the OpenAI answers
and their streamed events are built in ``responses``.
"""

from __future__ import annotations

from typing import Any

from swarm.emulator.behaviour import engine_behaviour
from swarm.emulator.config import EmulatorConfig
from swarm.emulator.engine_model import EngineModel
from swarm.emulator.engine_stats import LATENCY_BUCKETS_S, EngineStats, Histogram
from swarm.emulator.generation import Generation
from swarm.engines import emulated
from swarm.engines.engine import HistogramMeaning, MetricMeaning


def error_body(message: str, code: int = 400, kind: str = "BadRequestError") -> dict[str, Any]:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


def usage(config: EmulatorConfig, gen: Generation) -> dict[str, Any]:
    u: dict[str, Any] = {
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": gen.n_out,
        "total_tokens": gen.prompt_tokens + gen.n_out,
    }
    if engine_behaviour(config).reports_cached_tokens(config, gen.cached_tokens):
        u["prompt_tokens_details"] = {"cached_tokens": gen.cached_tokens}
    return u


def generate_meta(gen: Generation, rid: str, finished: bool, e2e_s: float) -> dict[str, Any]:
    return {
        "id": rid,
        "finish_reason": {"type": "length", "length": gen.n_out} if finished else None,
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": gen.n_out,
        "cached_tokens": gen.cached_tokens,
        "e2e_latency": e2e_s,
    }


def _hist_lines(name: str, labels: str, h: Histogram) -> list[str]:
    lines = [f"# TYPE {name} histogram"]
    cumulative = 0
    for bound, count in zip(LATENCY_BUCKETS_S, h.counts, strict=False):
        cumulative += count
        lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {cumulative}')
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {h.n}')
    lines.append(f"{name}_sum{{{labels}}} {h.total}")
    lines.append(f"{name}_count{{{labels}}} {h.n}")
    return lines


def prometheus_text(config: EmulatorConfig, model: EngineModel) -> str:
    """Prometheus exposition text with the engine's own metric names."""
    st = model.stats
    labels = f'model_name="{config.model}"'
    kv_usage = model.kv_used / config.kv_capacity_tokens
    hit_rate = st.cached_tokens_total / st.prompt_tokens_total if st.prompt_tokens_total else 0.0
    lines: list[str] = []

    def metric(name: str, kind: str, value: float, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name}{{{labels}}} {value}")

    values: dict[MetricMeaning, float] = {
        "prompt_tokens": st.prompt_tokens_total,
        "prefix_queries": st.prompt_tokens_total,
        "computed_prompt_tokens": st.prompt_tokens_total - st.cached_tokens_total,
        "generation_tokens": st.generation_tokens_total,
        "cached_tokens": st.cached_tokens_total,
        "requests_finished": st.requests_finished,
        "running": len(model.running),
        "waiting": len(model.waiting),
        "kv_usage": kv_usage,
        "cache_hit_rate": hit_rate,
    }
    histograms: dict[HistogramMeaning, Histogram] = {
        "ttft": st.ttft,
        "e2e": st.e2e,
        "tpot": st.tpot,
        "queue": st.queue,
    }
    behaviour = model.behaviour
    for m in behaviour.metrics:
        metric(m.name, m.kind, values[m.meaning], m.help_text)
    lines += behaviour.info_lines(config, labels)
    for h in behaviour.histograms:
        lines += _hist_lines(h.name, labels, histograms[h.meaning])
    # the emulator's own, in every profile: whether it kept its step-time model
    for name, value, help_text in emulator_step_metrics(st):
        metric(name, "counter", value, help_text)
    # and how full its prefix cache is (the engines' KV gauges count running sequences only)
    used = model.cache.size_tokens
    share = used / config.cache_capacity_tokens if config.cache_capacity_tokens else 0.0
    metric(
        emulated.PREFIX_CACHE_USAGE, "gauge", share,
        "Tokens held by the prefix cache over its capacity (swarm emulator; 0 when unbounded).",
    )  # fmt: skip
    return "\n".join(lines) + "\n"


def emulator_step_metrics(st: EngineStats) -> list[tuple[str, float, str]]:
    """The emulator's step accounting as (metric, value, help) for its Prometheus text."""
    return [
        (emulated.STEPS, st.steps, "Batch steps run (swarm emulator)."),
        (emulated.STEP_MODEL_SECONDS, st.step_model_s, "Sum of the steps' modelled durations."),
        (emulated.STEP_SECONDS, st.step_actual_s, "Sum of the steps' actual durations."),
        (
            emulated.STEP_TOKENS,
            st.step_tokens,
            "Tokens after each request's first, emitted by steps.",
        ),
        (
            emulated.STEP_TOKEN_MODEL_SECONDS,
            st.step_token_model_s,
            "Sum over emitted tokens of the modelled time since their request's previous token (the model's ITL x tokens).",
        ),
        (emulated.PREEMPTIONS, st.preemptions, "Running requests preempted for lack of KV (recomputed later)."),
        (emulated.HOST_LOADED_TOKENS, st.host_loaded_tokens, "Cached tokens loaded from the host tier."),
    ]


def trtllm_iteration_stats(config: EmulatorConfig, model: EngineModel) -> list[dict[str, Any]]:
    """TensorRT-LLM's JSON ``/metrics``: a list of recent iteration stats (one, here)."""
    st = model.stats
    block = model.behaviour.block_tokens(config)
    return [
        {
            "numActiveRequests": len(model.running),
            "numQueuedRequests": len(model.waiting),
            "kvCacheStats": {
                "maxNumBlocks": config.kv_capacity_tokens // block,
                "usedNumBlocks": -(-model.kv_used // block),
                "tokensPerBlock": block,
                "reusedBlocks": st.cached_tokens_total // block,
                "missedBlocks": (st.prompt_tokens_total - st.cached_tokens_total) // block,
                "cacheHitRate": (
                    st.cached_tokens_total / st.prompt_tokens_total if st.prompt_tokens_total else 0.0
                ),
            },
        }
    ]
