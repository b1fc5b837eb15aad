"""The record one engine module fills in: ports, paths, dialect quirks, metric names, cache reset.

Place in the map (docs/architecture.md, "Engines"): a frozen ``Engine`` per engine
(``engines/sglang.py`` and its siblings), read by the clients (how to write a request and read
its usage), the probe (how to recognise the engine), the emulator (which metric names and
endpoints its profile serves), the sweep (how to empty the prefix cache) and the analysis
(which Prometheus series mean what). Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

#: The API dialects swarm speaks (``clients/dialects.py``).
DIALECTS: tuple[str, ...] = ("openai-chat", "openai-completions", "sglang-generate")

#: What a Prometheus series of an engine measures. The analysis reads series by meaning, the
#: emulator computes each meaning's value for the profiles it serves.
MetricMeaning = Literal[
    "prompt_tokens",  # every prompt token, cached or computed (counter)
    "computed_prompt_tokens",  # prompt tokens computed, the cached ones not counted (counter)
    "prefix_queries",  # prompt tokens looked up in the prefix cache (counter)
    "cached_tokens",  # prompt tokens found in the prefix cache (counter)
    "generation_tokens",
    "requests_finished",
    "running",  # requests running now (gauge)
    "waiting",  # requests waiting for admission (gauge)
    "kv_usage",  # share of the KV cache in use (gauge)
    "cache_hit_rate",  # the engine's own hit rate (gauge)
]
#: What a latency histogram of an engine measures.
HistogramMeaning = Literal["ttft", "e2e", "tpot", "queue"]


#: the label swarm adds to every sample it scrapes from one replica of a fleet: the replica's
#: base URL (``runtime/metrics_scraper.py`` writes it, ``analysis/fleet.py`` reads it)
REPLICA_LABEL = "swarm_replica"


@dataclass(frozen=True, slots=True)
class Metric:
    """One counter or gauge an engine publishes, as it names it."""

    name: str
    kind: Literal["counter", "gauge"]
    meaning: MetricMeaning
    help_text: str
    #: names the same series had in earlier versions of the engine (read too, never served)
    older_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Histogram:
    name: str
    meaning: HistogramMeaning


@dataclass(frozen=True, slots=True)
class CacheReset:
    """How to empty an engine's prefix cache: ``POST path``, or (``per_slot``) erase every slot
    that ``GET slots_path`` lists with ``POST path`` where ``{id}`` is the slot's id."""

    path: str
    method: str = "POST"
    per_slot: bool = False
    slots_path: str | None = None
    #: HTTP status of a failed reset -> what the user must change on the server
    failure_hints: Mapping[int, str] = field(default_factory=dict)


class Served:
    """What the probe fetched from a server: path -> (status, body), for ``Engine.identify``."""

    def __init__(self, responses: Mapping[str, tuple[int, bytes]]) -> None:
        self.responses = responses

    def ok(self, path: str) -> bytes | None:
        hit = self.responses.get(path)
        return hit[1] if hit is not None and hit[0] == 200 else None

    def json(self, path: str) -> object:
        """The parsed body of a 200 answer at ``path``, or None."""
        import json

        body = self.ok(path)
        if body is None:
            return None
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            return None

    def json_dict(self, path: str) -> dict[str, object] | None:
        value = self.json(path)
        return value if isinstance(value, dict) else None

    def version(self) -> str | None:
        """``version`` of a ``/version`` answer (vLLM, TensorRT-LLM, swarm's emulator)."""
        info = self.json_dict("/version")
        return str(info.get("version", "")) if info is not None else None


@dataclass(frozen=True, slots=True)
class Identified:
    """An engine recognised by its endpoints: whether it is swarm's emulator, its version."""

    emulated: bool
    version: str | None


@dataclass(frozen=True, slots=True)
class Engine:
    """What swarm must know about one engine to talk to it, read its answers and its metrics."""

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
    #: endpoints that describe the server (version, settings), fetched by the probe
    info_paths: tuple[str, ...]
    #: Prefix-cache granularity in tokens where the server does not state it (1: token level)
    cache_block_tokens: int
    #: What to tell a user whose server does not report cached tokens.
    cache_report_hint: str
    #: ``owned_by`` values of ``/v1/models`` that name this engine
    owned_by: tuple[str, ...]
    #: how to recognise the engine from what the probe fetched (None: not this engine)
    identify: Callable[[Served], Identified | None]
    #: its counters and gauges, then its latency histograms, as it names them
    metrics: tuple[Metric, ...] = ()
    histograms: tuple[Histogram, ...] = ()
    #: how to empty its prefix cache (None: the engine has no way)
    cache_reset: CacheReset | None = None
    #: where reuse the block size does not explain goes (``swarm compare``'s reuse table)
    reuse_loss_cause: str = "evicted, or not yet stored"

    def metric(self, meaning: MetricMeaning) -> Metric | None:
        """The engine's series of that meaning, if it publishes one."""
        return next((m for m in self.metrics if m.meaning == meaning), None)

    def names_of(self, meaning: MetricMeaning) -> tuple[str, ...]:
        """Every name (current, then older) of the engine's series of that meaning."""
        return tuple(n for m in self.metrics if m.meaning == meaning for n in (m.name, *m.older_names))
