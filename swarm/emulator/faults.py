"""Fault injection for the emulator: a seeded choice of what goes wrong with each request.

Place in the map (docs/architecture.md, "The emulator"): read by ``swarm emulate --faults SPEC`` and
used by the server's handlers. A ``FaultSpec`` gives each fault kind a rate; a
``FaultInjector`` draws one kind (or none) per request from a ``random.Random`` seeded with
the spec's seed, in the order requests arrive, and counts what it injected so a test can
hold the client's trace against it (``GET /swarm/faults``; ``?by_request=1`` adds the fault
of each faulted request by the client's ``X-Request-Id``, to join on the trace's
``request_id``).

Kinds, and what the server does:

- ``refuse``: the connection is reset as soon as it is accepted, before any request is read
  (drawn once per new connection, not per request);
- ``http_500``, ``http_503``: an error status with an OpenAI-style JSON error body;
- ``http_429``: status 429 with ``Retry-After: <retry_after_s>``;
- ``slow_headers``: the response headers come after ``slow_headers_s``;
- ``stall_first``: headers at once, then nothing for ``stall_s`` before the first token;
- ``stall_mid``: half the tokens, then nothing for ``stall_s``, then the rest;
- ``cut``: half the tokens, then the connection is aborted (no end of the chunked body);
- ``malformed``: one event halfway whose JSON is cut short;
- ``no_done``: the whole answer but no ``data: [DONE]`` before the body ends;
- ``oversized``: one event halfway that is a single line of ``oversized_bytes``.

The spec's text form (one flag) is ``kind=rate`` pairs and parameters, comma-separated:
``http_500=0.01,cut=0.02,stall_s=2,seed=7``; ``mixed=0.05`` spreads 5 % evenly over every
kind that applies per request (all but ``refuse``, which has its own per-connection rate).
"""

from __future__ import annotations

import random
import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from swarm.errors import InputError

#: Kinds drawn per request, in a fixed order (the draw depends on it).
REQUEST_KINDS: tuple[str, ...] = (
    "http_500",
    "http_503",
    "http_429",
    "slow_headers",
    "stall_first",
    "stall_mid",
    "cut",
    "malformed",
    "no_done",
    "oversized",
)
#: Kinds that only make sense for a streamed answer.
STREAM_ONLY_KINDS = frozenset({"stall_mid", "no_done", "oversized", "malformed"})

#: Faulted requests logged by id, at most (a long soak must not grow the emulator without end).
LOG_LIMIT = 1_000_000

_PARAMS = ("seed", "stall_s", "slow_headers_s", "retry_after_s", "oversized_bytes")


class FaultSpec(BaseModel):
    """Rates (0..1) of each fault kind, and the parameters of the faults."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(default=0, description="seed of the per-request draws")
    refuse: float = Field(default=0.0, ge=0, le=1, description="share of new connections reset at accept")
    http_500: float = Field(default=0.0, ge=0, le=1, description="share of requests answered 500")
    http_503: float = Field(default=0.0, ge=0, le=1, description="share of requests answered 503")
    http_429: float = Field(default=0.0, ge=0, le=1, description="share answered 429 with Retry-After")
    slow_headers: float = Field(
        default=0.0, ge=0, le=1, description="share whose headers wait slow_headers_s"
    )
    stall_first: float = Field(default=0.0, ge=0, le=1, description="share stalled stall_s before token 1")
    stall_mid: float = Field(default=0.0, ge=0, le=1, description="share stalled stall_s mid-stream")
    cut: float = Field(default=0.0, ge=0, le=1, description="share whose connection is cut mid-stream")
    malformed: float = Field(default=0.0, ge=0, le=1, description="share with one invalid JSON event")
    no_done: float = Field(default=0.0, ge=0, le=1, description="share whose stream lacks [DONE]")
    oversized: float = Field(default=0.0, ge=0, le=1, description="share with one oversized line")
    stall_s: float = Field(default=3.0, ge=0, le=3600, description="length of a stall, seconds")
    slow_headers_s: float = Field(default=3.0, ge=0, le=3600, description="delay of slow headers, seconds")
    retry_after_s: int = Field(default=1, ge=0, le=86400, description="Retry-After of a 429, seconds")
    oversized_bytes: int = Field(
        default=5 * 1024 * 1024, ge=1, le=1 << 30, description="length of the oversized line"
    )

    @model_validator(mode="after")
    def _rates_sum(self) -> FaultSpec:
        total = sum(getattr(self, k) for k in REQUEST_KINDS)
        if total > 1.0 + 1e-9:
            raise ValueError(f"per-request fault rates add up to {total:g}, more than 1")
        return self

    @property
    def active(self) -> bool:
        return self.refuse > 0 or any(getattr(self, k) > 0 for k in REQUEST_KINDS)

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        """The spec from its text form; InputError naming the bad item."""
        values: dict[str, Any] = {}
        mixed: float | None = None
        for item in (p.strip() for p in text.split(",")):
            if not item:
                continue
            key, sep, raw = item.partition("=")
            key = key.strip()
            if not sep:
                raise InputError(f"--faults: {item!r} is not KIND=RATE or PARAM=VALUE")
            try:
                value = float(raw)
            except ValueError:
                raise InputError(f"--faults: {key}: {raw.strip()!r} is not a number") from None
            if key == "mixed":
                mixed = value
            elif key == "refuse" or key in REQUEST_KINDS or key in _PARAMS:
                values[key] = int(value) if key in ("seed", "retry_after_s", "oversized_bytes") else value
            else:
                known = ", ".join(("mixed", "refuse", *REQUEST_KINDS, *_PARAMS))
                raise InputError(f"--faults: unknown key {key!r} (known: {known})")
        if mixed is not None:
            if not 0 <= mixed <= 1:
                raise InputError(f"--faults: mixed={mixed:g} is not a rate between 0 and 1")
            for k in REQUEST_KINDS:
                values.setdefault(k, mixed / len(REQUEST_KINDS))
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'faults'}: {e['msg']}" for e in exc.errors()
            )
            raise InputError(f"--faults: {problems}") from None


class FaultInjector:
    """Draws the fault of each request (and of each new connection) and counts them.

    Thread-safe: an emulator thread and a test may read the counts at once.
    """

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec
        self._rng = random.Random(f"{spec.seed}:requests")
        self._conn_rng = random.Random(f"{spec.seed}:connections")
        self._lock = threading.Lock()
        self.requests = 0
        self.connections = 0
        self.injected: dict[str, int] = {"refuse": 0, **{k: 0 for k in REQUEST_KINDS}}
        #: the fault of each faulted request, by the client's ``X-Request-Id`` (the first
        #: ``LOG_LIMIT``; a request without the header is counted, not logged)
        self.by_request: dict[str, str] = {}

    def refuse_connection(self) -> bool:
        """Whether to reset a connection just accepted (counted as ``refuse``)."""
        with self._lock:
            self.connections += 1
            if self.spec.refuse > 0 and self._conn_rng.random() < self.spec.refuse:
                self.injected["refuse"] += 1
                return True
            return False

    def draw(
        self, *, stream: bool, kinds: frozenset[str] | None = None, request_id: str | None = None
    ) -> str | None:
        """The fault of the next request (None: serve it normally). A kind that does not
        apply (stream-only for a non-streamed request, or not in ``kinds``) is drawn but not
        injected, and not counted. An injected fault is logged under ``request_id``."""
        with self._lock:
            self.requests += 1
            u = self._rng.random()
            edge = 0.0
            for kind in REQUEST_KINDS:
                edge += getattr(self.spec, kind)
                if u < edge:
                    if (not stream and kind in STREAM_ONLY_KINDS) or (
                        kinds is not None and kind not in kinds
                    ):
                        return None
                    self.injected[kind] += 1
                    if request_id and len(self.by_request) < LOG_LIMIT:
                        self.by_request[request_id] = kind
                    return kind
            return None

    def snapshot(self, by_request: bool = False) -> dict[str, Any]:
        """Requests seen, connections accepted, and faults injected by kind; with
        ``by_request``, the fault of each faulted request by its id too."""
        with self._lock:
            out: dict[str, Any] = {
                "requests": self.requests,
                "connections": self.connections,
                "injected": dict(self.injected),
                "spec": self.spec.model_dump(),
            }
            if by_request:
                out["by_request"] = dict(self.by_request)
                out["by_request_complete"] = len(self.by_request) < LOG_LIMIT
            return out
