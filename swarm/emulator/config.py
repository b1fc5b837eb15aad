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

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swarm.cliflag import flag
from swarm.emulator.faults import FaultSpec
from swarm.engines.registry import get_engine
from swarm.fields import TokenizerPath

_EMU = "Emulator"
_SCHED = "Engine scheduler"
#: the scheduler knobs and the engine (or engines) whose name each carries
SCHEDULER_KNOBS: dict[str, str | tuple[str, ...]] = {
    "schedule_policy": "sglang", "chunked_prefill_size": "sglang", "enable_mixed_chunk": "sglang",
    "enable_hierarchical_cache": "sglang", "hicache_ratio": "sglang", "max_running_requests": "sglang",
    "capacity_scheduler_policy": "trtllm", "max_batch_size": "trtllm", "max_num_tokens": "trtllm",
    "enable_chunked_prefill": "trtllm", "max_num_seqs": "vllm", "max_num_batched_tokens": "vllm",
    "parallel": "llamacpp", "slot_prompt_similarity": "llamacpp", "cache_ram": "llamacpp",
    "cache_idle_slots": "llamacpp", "kv_unified": "llamacpp", "ctx_size": "llamacpp", "batch_size": "llamacpp",
    "ubatch_size": "llamacpp", "swa_tokens": ("llamacpp", "vllm"), "state_bytes_per_token": "llamacpp",
    "swa_groups": "vllm",
}  # fmt: skip


class EmulatorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine: Literal["sglang", "trtllm", "vllm", "llamacpp"] = Field(
        default="sglang",
        description="which engine's cache model, API and metrics to emulate (flag: --engine)",
    )
    host: str = Field(
        default="127.0.0.1", description="address to bind (loopback by default)",
        json_schema_extra=flag("--host", group=_EMU),
    )  # fmt: skip
    port: int | None = Field(
        default=None, ge=0, le=65535, description="port (default: the engine's own; 0 picks a free one)",
        json_schema_extra=flag("--port", group=_EMU),
    )  # fmt: skip
    model: str = Field(
        default="swarm-emulator", description="model name served (as vLLM's and SGLang's --served-model-name)",
        json_schema_extra=flag("--served-model-name", group=_EMU),
    )  # fmt: skip
    timing: Literal["batch", "fixed", "zero"] = Field(
        default="batch",
        description=(
            "batch: continuous batching with the step-time model; fixed: every request gets "
            "first_token_ms then one token per token_ms, independent of load; zero: no delay "
            "(for measuring the client itself)"
        ),
        json_schema_extra=flag("--timing", group=_EMU),
    )
    step_base_ms: float = Field(
        default=4.0, ge=0, description="batch timing: fixed cost of one step, ms",
        json_schema_extra=flag("--step-base-ms", group=_EMU),
    )  # fmt: skip
    prefill_ms_per_token: float = Field(
        default=0.02, ge=0, description="batch timing: cost per uncached prompt token prefilled in a step, ms",
        json_schema_extra=flag("--prefill-ms-per-token", group=_EMU),
    )  # fmt: skip
    prefill_ms_per_cached_token: float = Field(
        default=0.0, ge=0,
        description="batch timing: cost per cached prompt token of a request prefilled in a step, ms "
        "(its new tokens attend to them; 0: cached tokens are free)",
        json_schema_extra=flag("--prefill-ms-per-cached-token", group=_EMU),
    )  # fmt: skip
    decode_ms_per_seq: float = Field(
        default=0.05, ge=0, description="batch timing: cost per running sequence in a step, ms",
        json_schema_extra=flag("--decode-ms-per-seq", group=_EMU),
    )  # fmt: skip
    decode_ms_per_context_token: float = Field(
        default=0.0, ge=0,
        description="batch timing: cost per token of context (prompt and output so far) of each "
        "sequence decoding in a step, ms (attention over a long context; 0: context is free)",
        json_schema_extra=flag("--decode-ms-per-context-token", group=_EMU),
    )  # fmt: skip
    step_emit_ms: float = Field(
        default=0.0, ge=0,
        description="batch timing: the part of --step-base-ms that only a step emitting a token pays (the output "
        "layer over the vocabulary, sampling); a step that only computes prompt chunks costs the rest",
        json_schema_extra=flag("--step-emit-ms", group=_EMU),
    )
    step_overlap: bool = Field(
        default=False,
        description="batch timing: a step lasts the larger of its fixed and per-sequence cost (a + c x sequences "
        "+ d x context) and its prompt compute (b x prefill tokens + b_c x cached + h x loaded), not their sum: "
        "an engine whose prefill is compute-bound while its decode step is bound by reading the weights "
        "(llama.cpp and vLLM on a CPU; swarm calibrate picks it when it fits better)",
        json_schema_extra=flag("--step-overlap", group=_EMU),
    )
    first_token_ms: float = Field(
        default=50.0, ge=0, description="fixed timing: time to first token, ms",
        json_schema_extra=flag("--first-token-ms", group=_EMU),
    )  # fmt: skip
    token_ms: float = Field(
        default=10.0, ge=0, description="fixed timing: time between tokens, ms",
        json_schema_extra=flag("--token-ms", group=_EMU),
    )  # fmt: skip
    kv_capacity_tokens: int = Field(
        default=400_000,
        ge=1,
        description="KV tokens for running sequences; a request reserves its uncached prompt "
        "plus max tokens, and waits while they do not fit",
        json_schema_extra=flag("--kv-capacity-tokens", group=_EMU),
    )
    cache_capacity_tokens: int | None = Field(
        default=400_000,
        ge=1,
        description="prefix-cache size in tokens; None (the flag: 0) for unbounded",
        json_schema_extra=flag(
            "--cache-tokens", group=_EMU, parse="zero_is_none",
            help="prefix-cache capacity in tokens; 0: unbounded",
        ),
    )  # fmt: skip
    host_cache_tokens: int | None = Field(
        default=None, ge=1,
        description="a second tier of the prefix cache in host memory, in tokens (TensorRT-LLM's "
        "kv_cache_config.host_cache_size over the model's KV bytes per token; SGLang's HiCache): what "
        "the device cache evicts is kept there, and a hit there costs --host-load-ms-per-token (default: none)",
        json_schema_extra=flag("--host-cache-tokens", group=_EMU),
    )  # fmt: skip
    host_load_ms_per_token: float = Field(
        default=0.003, ge=0,
        description="batch timing: cost per token loaded from the host tier into a step, ms (the default: "
        "an 8B model's 128 KiB of KV a token over 40 GB/s of PCIe)",
        json_schema_extra=flag("--host-load-ms-per-token", group=_EMU),
    )  # fmt: skip
    block_tokens: int | None = Field(
        default=None,
        ge=1,
        description="trtllm and vllm: KV block size in tokens (default: trtllm 32; vllm 128, as vLLM's CPU build)",
        json_schema_extra=flag("--block-tokens", group=_EMU),
    )
    schedule_policy: Literal["lpm", "fcfs"] | None = Field(
        default=None,
        description="sglang: order of the waiting queue, as SGLang's --schedule-policy (default lpm: "
        "longest cached prefix first; fcfs)",
        json_schema_extra=flag("--schedule-policy", group=_SCHED),
    )
    chunked_prefill_size: int | None = Field(
        default=None, ge=-1,
        description="sglang: prompt tokens one prefill step computes, longer prompts split over steps, "
        "as SGLang's --chunked-prefill-size (-1: no chunking; default: SGLang's)",
        json_schema_extra=flag("--chunked-prefill-size", group=_SCHED),
    )  # fmt: skip
    enable_mixed_chunk: bool | None = Field(
        default=None,
        description="sglang: a prefill step also decodes the running requests, as SGLang's "
        "--enable-mixed-chunk (default: off, a prefill step pauses decoding)",
        json_schema_extra=flag("--enable-mixed-chunk", group=_SCHED),
    )
    enable_hierarchical_cache: bool | None = Field(
        default=None,
        description="sglang: HiCache, a host tier of --hicache-ratio times the device prefix cache, "
        "as SGLang's --enable-hierarchical-cache (default: off)",
        json_schema_extra=flag("--enable-hierarchical-cache", group=_SCHED),
    )
    hicache_ratio: float | None = Field(
        default=None,
        gt=1,
        description="sglang: the host tier's size over the device prefix cache's, as SGLang's --hicache-ratio "
        "(default 2.0)",
        json_schema_extra=flag("--hicache-ratio", group=_SCHED),
    )
    max_running_requests: int | None = Field(
        default=None, ge=1, description="sglang: requests running at most, as SGLang's --max-running-requests "
        "(default: as many as the KV holds)",
        json_schema_extra=flag("--max-running-requests", group=_SCHED),
    )  # fmt: skip
    capacity_scheduler_policy: Literal["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"] | None = Field(
        default=None,
        description="trtllm: admission, as TensorRT-LLM's scheduler_config.capacity_scheduler_policy "
        "(default GUARANTEED_NO_EVICT: each request's whole output reserved, never preempted; "
        "MAX_UTILIZATION: admitted on its prompt, preempted when the KV runs out)",
        json_schema_extra=flag("--capacity-scheduler-policy", group=_SCHED),
    )
    max_batch_size: int | None = Field(
        default=None, ge=1, description="trtllm: requests in a step at most, as trtllm-serve's --max_batch_size",
        json_schema_extra=flag("--max-batch-size", group=_SCHED),
    )  # fmt: skip
    max_num_tokens: int | None = Field(
        default=None, ge=1, description="trtllm: tokens one step computes at most, as trtllm-serve's --max_num_tokens",
        json_schema_extra=flag("--max-num-tokens", group=_SCHED),
    )  # fmt: skip
    enable_chunked_prefill: bool | None = Field(
        default=None,
        description="trtllm: split prompts longer than the step's room over steps, as TensorRT-LLM's "
        "enable_chunked_prefill (default: off)",
        json_schema_extra=flag("--enable-chunked-prefill", group=_SCHED),
    )
    max_num_seqs: int | None = Field(
        default=None, ge=1, description="vllm: requests running at most, as vLLM's --max-num-seqs",
        json_schema_extra=flag("--max-num-seqs", group=_SCHED),
    )  # fmt: skip
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1,
        description="vllm: tokens one step computes at most (decodes first, prefill chunks in the rest), "
        "as vLLM's --max-num-batched-tokens",
        json_schema_extra=flag("--max-num-batched-tokens", group=_SCHED),
    )  # fmt: skip
    parallel: int | None = Field(
        default=None, ge=1,
        description="llamacpp: server slots, each keeping one prompt, as llama-server's -np/--parallel "
        "(default: its auto, 4 slots over a unified KV)",
        json_schema_extra=flag("--parallel", group=_SCHED),
    )  # fmt: skip
    slot_prompt_similarity: float | None = Field(
        default=None, ge=0, le=1,
        description="llamacpp: share of a prompt an idle slot must hold to be chosen for it, else the least "
        "recently used slot, as llama-server's --slot-prompt-similarity (default 0.1; 0: always LRU)",
        json_schema_extra=flag("--slot-prompt-similarity", group=_SCHED),
    )  # fmt: skip
    cache_ram: int | None = Field(
        default=None, ge=-1,
        description="llamacpp: the prompt cache in host RAM, MiB, as llama-server's --cache-ram (default 8192; "
        "0: off; -1: no byte limit, at most --ctx-size tokens)",
        json_schema_extra=flag("--cache-ram", group=_SCHED),
    )  # fmt: skip
    cache_idle_slots: bool | None = Field(
        default=None,
        description="llamacpp: save every idle slot to the RAM prompt cache whenever a request starts, as "
        "llama-server's --cache-idle-slots (default: on when --cache-ram is)",
        json_schema_extra=flag("--cache-idle-slots", group=_SCHED),
    )
    kv_unified: bool | None = Field(
        default=None,
        description="llamacpp: one KV pool for all slots, as llama-server's --kv-unified: idle slots are "
        "emptied once saved to RAM (default: on only with the auto --parallel)",
        json_schema_extra=flag("--kv-unified", group=_SCHED),
    )
    ctx_size: int | None = Field(
        default=None, ge=1,
        description="llamacpp: context tokens, as llama-server's -c/--ctx-size; a slot gets ctx_size / parallel "
        "(all of it with --kv-unified) and a longer prompt is refused (default: no limit)",
        json_schema_extra=flag("--ctx-size", group=_SCHED),
    )  # fmt: skip
    batch_size: int | None = Field(
        default=None, ge=1,
        description="llamacpp: tokens one step computes at most (decodes first, prompt chunks in the rest), as "
        "llama-server's -b/--batch-size (default 2048)",
        json_schema_extra=flag("--batch-size", group=_SCHED),
    )  # fmt: skip
    ubatch_size: int | None = Field(
        default=None, ge=1,
        description="llamacpp: llama-server's -ub/--ubatch-size (default 512): with --swa-tokens, a prompt's "
        "last 4 + ubatch and last 4 tokens are computed in steps of their own (its context checkpoints)",
        json_schema_extra=flag("--ubatch-size", group=_SCHED),
    )  # fmt: skip
    swa_tokens: int | None = Field(
        default=None, ge=0,
        description="llamacpp, vllm: the model's sliding-window attention span (its config's sliding_window; "
        "Gemma 3: 512; default 0, none). llamacpp: a slot reuses a prefix the window cache no longer covers "
        "only from a context checkpoint; vllm (with --swa-groups): the sliding layers hold only their window",
        json_schema_extra=flag("--swa-tokens", group=_SCHED),
    )  # fmt: skip
    swa_groups: int | None = Field(
        default=None, ge=0,
        description="vllm: KV cache groups of sliding-window layers beside the one of full-attention layers "
        "(vLLM's hybrid KV cache manager groups layers by the pattern's minority type: Gemma 3's 15 sliding "
        "and 3 full layers make 5; default 0, none); needs --swa-tokens",
        json_schema_extra=flag("--swa-groups", group=_SCHED),
    )  # fmt: skip
    state_bytes_per_token: int | None = Field(
        default=None, ge=1,
        description="llamacpp: bytes of a slot's saved state per token, to size --cache-ram in tokens "
        "(default 18432: Gemma 3 270M's f16 KV, 18 layers x 1 KV head x 256 x 2 x 2 bytes)",
        json_schema_extra=flag("--state-bytes-per-token", group=_SCHED),
    )  # fmt: skip
    tokenizer: TokenizerPath = None
    default_max_tokens: int = Field(
        default=64, ge=1, description="tokens generated when a request sets no limit",
        json_schema_extra=flag("--default-max-tokens", group=_EMU),
    )  # fmt: skip
    max_prompt_tokens: int = Field(
        default=262_144, ge=1,
        description="longer prompts are refused with HTTP 400 (the default holds the built-in "
        "claude_code's prompts: it compacts near 149k tokens, and a turn may add more)",
        json_schema_extra=flag("--max-prompt-tokens", group=_EMU),
    )  # fmt: skip
    cache_report: bool = Field(
        default=True,
        description="sglang: report cached tokens in OpenAI usage (as --enable-cache-report; "
        "--no-cache-report: as without it)",
        json_schema_extra=flag("--cache-report", group=_EMU),
    )
    replica_name: str | None = Field(
        default=None,
        description="the name this server gives itself in every response's X-Swarm-Replica header, "
        "so a client behind a router knows which replica served it (default: its own URL)",
        json_schema_extra=flag("--replica-name", group=_EMU),
    )
    stamp_chunks: bool = Field(
        default=False,
        description=(
            'add "swarm_sent_ns" (this host\'s monotonic clock at the write) to every streamed '
            "content event, so a client on the same host can measure its own receive delay"
        ),
        json_schema_extra=flag("--stamp-chunks", group=_EMU, negatable=False),
    )
    faults: FaultSpec | None = Field(
        default=None,
        description="injected faults (rates per kind, seeded); none by default",
        json_schema_extra=flag(
            "--faults", group=_EMU, parse="faults", cli_type="str",
            help="inject faults, seeded: KIND=RATE pairs and parameters, e.g. 'mixed=0.05,stall_s=2,seed=7' "
            "or 'http_500=0.01,cut=0.02,refuse=0.01' (kinds: refuse http_500 http_503 http_429 "
            "slow_headers stall_first stall_mid cut malformed no_done oversized; docs/reliability.md)",
        ),
    )  # fmt: skip

    @model_validator(mode="after")
    def _knobs_of_this_engine(self) -> EmulatorConfig:
        """A scheduler knob is one engine's: given to another engine's profile, it is refused."""
        for name, engines in SCHEDULER_KNOBS.items():
            owners = (engines,) if isinstance(engines, str) else engines
            if getattr(self, name) is not None and self.engine not in owners:
                raise ValueError(f"{name} is {' and '.join(owners)}'s knob; this emulator's engine is {self.engine}")
        if self.swa_groups and not self.swa_tokens:
            raise ValueError("swa_groups needs swa_tokens: the sliding window the groups' layers attend to")
        groups_owner = SCHEDULER_KNOBS["swa_groups"]  # an engine whose sliding layers form KV groups
        if self.swa_tokens and not self.swa_groups and groups_owner == self.engine:
            raise ValueError(
                f"swa_tokens on {self.engine} needs swa_groups: the KV groups of its sliding-window layers "
                "(Gemma 3 270M: 5; swarm calibrate reads them from the model's config.json)"
            )
        return self

    @model_validator(mode="after")
    def _budget_holds_the_running_cap(self) -> EmulatorConfig:
        """vLLM refuses a step budget given smaller than its running cap (no room for prefill);
        a cap given over the default budget raises the budget to it, as vLLM does."""
        from swarm.engines.vllm import MAX_NUM_SEQS

        budget, seqs = self.max_num_batched_tokens, self.max_num_seqs
        if budget is not None and budget < (seqs or MAX_NUM_SEQS):
            raise ValueError(
                f"max_num_batched_tokens ({budget}) must be at least max_num_seqs ({seqs or MAX_NUM_SEQS}), as vLLM requires"
            )
        return self

    @model_validator(mode="after")
    def _engine_port(self) -> EmulatorConfig:
        """No port: the emulated engine's own (``swarm/engines/``)."""
        if self.port is None:
            self.port = get_engine(self.engine).default_port
        return self

    @property
    def listen_port(self) -> int:
        """The port to bind (set once the config is built)."""
        assert self.port is not None
        return self.port
