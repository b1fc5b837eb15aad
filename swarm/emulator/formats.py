"""Wire formats of the emulated engines: response bodies, stream chunks, usage, metrics text.

Place in the map (docs/architecture.md, "The emulator"): used by the emulator's HTTP server only. It may
share constants with ``swarm.engines`` but none of the client's logic, so a bug in one cannot
hide in the other. Where the engines differ, this module follows each engine:

- usage: SGLang reports ``prompt_tokens_details.cached_tokens`` only when it is non-zero (and
  only with cache reporting on); TensorRT-LLM always reports it.
- request fields: TensorRT-LLM refuses unknown fields (HTTP 400); SGLang ignores them.
- metrics: SGLang serves Prometheus text at ``/metrics`` (``sglang:`` names); TensorRT-LLM
  serves JSON iteration stats at ``/metrics`` and Prometheus text (``trtllm_`` names) at
  ``/prometheus/metrics``.
"""

from __future__ import annotations

from typing import Any

from swarm.emulator.config import EmulatorConfig
from swarm.emulator.engine_model import LATENCY_BUCKETS_S, EngineModel, EngineStats, Generation, Histogram

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


def error_body(message: str, code: int = 400, kind: str = "BadRequestError") -> dict[str, Any]:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


def usage(config: EmulatorConfig, gen: Generation) -> dict[str, Any]:
    u: dict[str, Any] = {
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": len(gen.output),
        "total_tokens": gen.prompt_tokens + len(gen.output),
    }
    if config.engine == "trtllm" or (config.cache_report and gen.cached_tokens > 0):
        u["prompt_tokens_details"] = {"cached_tokens": gen.cached_tokens}
    return u


def generate_meta(gen: Generation, rid: str, finished: bool, e2e_s: float) -> dict[str, Any]:
    return {
        "id": rid,
        "finish_reason": {"type": "length", "length": len(gen.output)} if finished else None,
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": len(gen.output),
        "cached_tokens": gen.cached_tokens,
        "e2e_latency": e2e_s,
    }


def owned_by(config: EmulatorConfig) -> str:
    return "sglang" if config.engine == "sglang" else "tensorrt_llm"


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

    if config.engine == "sglang":
        metric(
            "sglang:prompt_tokens_total",
            "counter",
            st.prompt_tokens_total,
            "Number of prefill tokens processed.",
        )
        metric(
            "sglang:generation_tokens_total",
            "counter",
            st.generation_tokens_total,
            "Number of generation tokens processed.",
        )
        metric(
            "sglang:cached_tokens_total", "counter", st.cached_tokens_total, "Number of cached prompt tokens."
        )
        metric("sglang:num_requests_total", "counter", st.requests_finished, "Number of requests processed.")
        metric("sglang:num_running_reqs", "gauge", len(model.running), "The number of running requests.")
        metric(
            "sglang:num_queue_reqs",
            "gauge",
            len(model.waiting),
            "The number of requests in the waiting queue.",
        )
        metric("sglang:token_usage", "gauge", kv_usage, "The token usage.")
        metric("sglang:cache_hit_rate", "gauge", hit_rate, "The prefix cache hit rate.")
        lines += _hist_lines("sglang:time_to_first_token_seconds", labels, st.ttft)
        lines += _hist_lines("sglang:e2e_request_latency_seconds", labels, st.e2e)
        lines += _hist_lines("sglang:inter_token_latency_seconds", labels, st.tpot)
    else:
        metric(
            "trtllm_request_success_total",
            "counter",
            st.requests_finished,
            "Count of successfully processed requests.",
        )
        metric(
            "trtllm_prompt_tokens_total",
            "counter",
            st.prompt_tokens_total,
            "Number of prompt tokens processed.",
        )
        metric(
            "trtllm_generation_tokens_total",
            "counter",
            st.generation_tokens_total,
            "Number of generation tokens processed.",
        )
        metric("trtllm_kv_cache_hit_rate", "gauge", hit_rate, "KV cache block reuse rate (tokens).")
        metric("trtllm_kv_cache_utilization", "gauge", kv_usage, "KV cache utilization.")
        metric("trtllm_num_requests_running", "gauge", len(model.running), "Requests being processed.")
        metric("trtllm_num_requests_waiting", "gauge", len(model.waiting), "Requests waiting.")
        lines += _hist_lines("trtllm_time_to_first_token_seconds", labels, st.ttft)
        lines += _hist_lines("trtllm_e2e_request_latency_seconds", labels, st.e2e)
        lines += _hist_lines("trtllm_time_per_output_token_seconds", labels, st.tpot)
        lines += _hist_lines("trtllm_request_queue_time_seconds", labels, st.queue)
    # the emulator's own, in both profiles: whether it kept its step-time model
    for name, value, help_text in emulator_step_metrics(st):
        metric(name, "counter", value, help_text)
    return "\n".join(lines) + "\n"


def emulator_step_metrics(st: EngineStats) -> list[tuple[str, float, str]]:
    """The emulator's step accounting as (metric, value, help) for its Prometheus text."""
    return [
        ("swarm_emulator_steps_total", st.steps, "Batch steps run (swarm emulator)."),
        ("swarm_emulator_step_model_seconds_total", st.step_model_s, "Sum of the steps' modelled durations."),
        ("swarm_emulator_step_seconds_total", st.step_actual_s, "Sum of the steps' actual durations."),
        (
            "swarm_emulator_step_tokens_total",
            st.step_tokens,
            "Tokens after each request's first, emitted by steps.",
        ),
        (
            "swarm_emulator_step_token_model_seconds_total",
            st.step_token_model_s,
            "Sum over emitted tokens of their step's modelled duration (the model's ITL x tokens).",
        ),
    ]


def trtllm_iteration_stats(config: EmulatorConfig, model: EngineModel) -> list[dict[str, Any]]:
    """TensorRT-LLM's JSON ``/metrics``: a list of recent iteration stats (one, here)."""
    st = model.stats
    block = config.block_tokens
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
