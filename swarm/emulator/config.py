"""Settings of the engine emulator (a pydantic model, the single source of truth).

Place in the map (docs/architecture.md, "The emulator"): read by ``swarm emulate`` flags (``swarm run``
with no target starts two such processes) and by the tests, which run emulators in a thread. Defaults describe a
mid-size model on one modern GPU, roughly: 4 ms per batch step, 50,000 prefill tokens/s, a
small cost per running sequence, 400,000 tokens of KV for running sequences and as many again
for the prefix cache. They are plausible, not measured on any particular engine; figures from
the emulator are never an engine's figures.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from swarm.emulator.faults import FaultSpec


class EmulatorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine: Literal["sglang", "trtllm", "vllm"] = Field(
        default="sglang", description="which engine's cache model, API and metrics to emulate"
    )
    host: str = Field(default="127.0.0.1", description="address to bind (loopback by default)")
    port: int = Field(default=30000, ge=0, le=65535, description="port; 0 picks a free one")
    model: str = Field(default="swarm-emulator", description="model name served")
    timing: Literal["batch", "fixed", "zero"] = Field(
        default="batch",
        description=(
            "batch: continuous batching with the step-time model; fixed: every request gets "
            "first_token_ms then one token per token_ms, independent of load; zero: no delay "
            "(for measuring the client itself)"
        ),
    )
    step_base_ms: float = Field(default=4.0, ge=0, description="a: fixed cost of one batch step")
    prefill_ms_per_token: float = Field(
        default=0.02, ge=0, description="b: cost per uncached prompt token prefilled in a step"
    )
    decode_ms_per_seq: float = Field(default=0.05, ge=0, description="c: cost per running sequence in a step")
    first_token_ms: float = Field(default=50.0, ge=0, description="fixed timing: time to first token")
    token_ms: float = Field(default=10.0, ge=0, description="fixed timing: time between tokens")
    kv_capacity_tokens: int = Field(
        default=400_000,
        ge=1,
        description="KV tokens for running sequences; a request reserves its uncached prompt "
        "plus max tokens, and waits while they do not fit",
    )
    cache_capacity_tokens: int | None = Field(
        default=400_000,
        ge=1,
        description="prefix-cache size in tokens; None for unbounded",
    )
    block_tokens: int | None = Field(
        default=None,
        ge=1,
        description="trtllm and vllm: KV block size in tokens (default: trtllm 32; vllm 128, as vLLM's CPU build)",
    )
    tokenizer: str | None = Field(
        default=None,
        description="a Hugging Face tokenizer.json: prompts counted in its tokens (a completions prompt as "
        "the server counts it, special tokens included; a chat's message contents one after another, "
        "without a chat template); default: whitespace words",
    )
    default_max_tokens: int = Field(
        default=64, ge=1, description="tokens generated when a request sets no limit"
    )
    max_prompt_tokens: int = Field(
        default=131_072, ge=1, description="longer prompts are refused with HTTP 400"
    )
    cache_report: bool = Field(
        default=True,
        description="sglang: report cached tokens in OpenAI usage (as --enable-cache-report)",
    )
    stamp_chunks: bool = Field(
        default=False,
        description=(
            'add "swarm_sent_ns" (this host\'s monotonic clock at the write) to every streamed '
            "content event, so a client on the same host can measure its own receive delay"
        ),
    )
    faults: FaultSpec | None = Field(
        default=None,
        description="injected faults (rates per kind, seeded); none by default",
    )
