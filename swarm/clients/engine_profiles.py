"""Engine profiles: each serving engine's quirks, in one table.

Place in the map (docs/architecture.md, "Clients"): consulted by the EngineClient when it builds a request
and reads usage, and by ``swarm probe``. A profile never changes how latency is measured; it
only says how to ask each engine for what we need and where the engine puts its answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm.errors import InputError


@dataclass(frozen=True)
class EngineProfile:
    """What swarm must know about one engine to talk to it and read its answers."""

    name: str
    title: str
    default_port: int
    dialects: tuple[str, ...]
    default_dialect: str
    #: Send ``stream_options: {"include_usage": true}`` when streaming (usage comes only then).
    stream_usage_option: bool
    #: Absent ``prompt_tokens_details`` means 0 cached tokens (SGLang omits it when 0), rather
    #: than "not reported".
    cached_absent_means_zero: bool
    #: Extra request fields this engine accepts beyond the OpenAI ones (others are not sent,
    #: because e.g. TensorRT-LLM rejects unknown fields with HTTP 400).
    extra_fields: frozenset[str]
    health_path: str
    metrics_path: str | None
    #: Path and HTTP method that drop the prefix cache, if the engine has one.
    flush_path: str | None
    flush_method: str
    info_paths: tuple[str, ...]
    #: Prefix-cache granularity in tokens (1 = token-level radix), for reading results.
    cache_block_tokens: int
    #: What to tell a user whose server does not report cached tokens.
    cache_report_hint: str


PROFILES: dict[str, EngineProfile] = {
    "sglang": EngineProfile(
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
        flush_path="/flush_cache",
        flush_method="POST",
        info_paths=("/get_server_info", "/server_info"),
        cache_block_tokens=1,
        cache_report_hint="start SGLang with --enable-cache-report (and --enable-metrics for /metrics)",
    ),
    "trtllm": EngineProfile(
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
        flush_path=None,
        flush_method="POST",
        info_paths=("/version",),
        cache_block_tokens=32,
        cache_report_hint=(
            "enable KV-cache block reuse in trtllm-serve's config (kv_cache_config: enable_block_reuse: true)"
        ),
    ),
    "vllm": EngineProfile(
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
        flush_path="/reset_prefix_cache",
        flush_method="POST",
        info_paths=("/version",),
        cache_block_tokens=16,
        cache_report_hint=(
            "start vLLM with --enable-prompt-tokens-details (prefix caching is on by default)"
        ),
    ),
    "llamacpp": EngineProfile(
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
        flush_path=None,
        flush_method="POST",
        info_paths=("/props",),
        cache_block_tokens=1,
        cache_report_hint="start llama-server with prompt caching on (the default; not --no-cache-prompt) and --metrics",
    ),
}

DIALECTS: tuple[str, ...] = ("openai-chat", "openai-completions", "sglang-generate")


def get_profile(name: str) -> EngineProfile:
    """The profile called ``name``, or an InputError listing the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise InputError(f"unknown engine profile {name!r} (known: {known})") from None


def check_dialect(profile: EngineProfile, dialect: str) -> str:
    """``dialect`` if the engine speaks it, else an InputError."""
    if dialect not in DIALECTS:
        raise InputError(f"unknown dialect {dialect!r} (known: {', '.join(DIALECTS)})")
    if dialect not in profile.dialects:
        raise InputError(
            f"{profile.title} does not serve the {dialect} dialect (it serves: {', '.join(profile.dialects)})"
        )
    return dialect
