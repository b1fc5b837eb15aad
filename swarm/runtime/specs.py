"""The settings of a run: how to send (``SendSpec``), and what (a workload: ``RunSpec``; a replay: ``ReplaySpec``).

Place in the map (docs/architecture.md, "Runtime"): pydantic models, the single source of truth
for what a spec file or a flag may say. ``SendSpec`` holds everything a swarm and a replay send
alike: the targets, the limits, timeouts, retries, the circuit breaker, the executor and where
the trace goes. ``RunSpec`` adds a ``workload:``, ``ReplaySpec`` a ``replay:``; nothing about
sending lives in either. Each field a flag sets says so (``cliflag.flag``); ``swarm run``,
``swarm replay`` and ``swarm sweep`` take the same flags for the same fields.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swarm.cliflag import flag
from swarm.engines.registry import ENGINES
from swarm.errors import InputError
from swarm.replay.source_spec import ReplaySourceSpec
from swarm.request import Timeouts
from swarm.runtime.retry import RetryPolicy
from swarm.runtime.sources import SendLimits
from swarm.workload.workload import MOVED_TO_SENDING, WorkloadSpec

_ENGINE_NAMES = ", ".join(ENGINES)


class TargetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="label in the trace's `target` column")
    url: str = Field(description="base URL of the server")
    engine: str | None = Field(
        default=None,
        description=f"engine profile: {_ENGINE_NAMES} (detected when absent)",
        json_schema_extra=flag(
            "--engine", group="Targets", repeat=True, metavar="ENGINE",
            help=f"engine profile, one per --target or one for all: {_ENGINE_NAMES} (default: detected; "
            "swarm emulate: the one to emulate, sglang)",
        ),
    )  # fmt: skip
    dialect: str | None = Field(
        default=None,
        description="openai-chat, openai-completions or sglang-generate (default: the engine's own, openai-chat)",
        json_schema_extra=flag("--dialect", group="Targets"),
    )
    model: str | None = Field(
        default=None,
        description="model name to request (default: the server's first)",
        json_schema_extra=flag("--model", group="Targets"),
    )
    api_key_env: str | None = Field(
        default=None,
        description="environment variable holding the API key",
        json_schema_extra=flag("--api-key-env", group="Targets", metavar="VAR"),
    )
    api_key_file: str | None = Field(
        default=None,
        description="file holding the API key (its first line); never pass a key as a flag",
        json_schema_extra=flag("--api-key-file", group="Targets", metavar="FILE"),
    )
    replicas: list[str] = Field(
        default_factory=list,
        description="a fleet: the base URLs of the replicas behind this target's router, whose "
        "metrics are scraped beside the run (default: the workers the router lists, where it lists them)",
        json_schema_extra=flag(
            "--replica", group="Targets", repeat=True, metavar="[NAME=]URL",
            help="a replica behind the target's router; repeat for each (NAME= picks the target when "
            "there are several; default: the workers the router lists at /workers)",
        ),
    )  # fmt: skip
    replicas_down: Literal["error", "warn"] = Field(
        default="error",
        description="a replica not answering when the run starts: error (before anything is sent) "
        "or warn (a warning, and the run goes on with the replicas alive)",
        json_schema_extra=flag("--replicas-down", group="Targets"),
    )


class TimeoutSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    connect_s: float | None = Field(
        default=10.0, gt=0, description="connecting, seconds",
        json_schema_extra=flag("--connect-timeout", group="Timeouts"),
    )  # fmt: skip
    first_token_s: float | None = Field(
        default=120.0, gt=0, description="from sending to the first token, seconds",
        json_schema_extra=flag("--first-token-timeout", group="Timeouts"),
    )  # fmt: skip
    total_s: float | None = Field(
        default=600.0, gt=0, description="a whole request, seconds",
        json_schema_extra=flag("--request-timeout", group="Timeouts"),
    )  # fmt: skip
    idle_s: float | None = Field(
        default=60.0, gt=0, description="longest silence mid-stream, seconds",
        json_schema_extra=flag("--idle-timeout", group="Timeouts"),
    )  # fmt: skip

    def timeouts(self) -> Timeouts:
        return Timeouts(self.connect_s, self.first_token_s, self.total_s, self.idle_s)


_SEND = "Sending"
_EXEC = "Executor"
_OUT = "Output"


class SendSpec(BaseModel):
    """How to send, whatever is sent: targets, limits, timeouts, retries, breaker, executor, output."""

    model_config = ConfigDict(extra="forbid")

    targets: list[TargetSpec] = Field(
        default_factory=list,
        description="none: the emulator in both profiles",
        json_schema_extra=flag(
            "--target", group="Targets", repeat=True, parse="targets", cli_type="list[str]", metavar="NAME=URL",
            help="NAME=URL of a server; repeat for several (default: swarm's emulator in both profiles)",
        ),
    )  # fmt: skip
    max_in_flight: int = Field(
        default=0, ge=0, description="cap on requests in flight, over all workers; 0: none",
        json_schema_extra=flag("--max-in-flight", group=_SEND),
    )  # fmt: skip
    duration_s: float | None = Field(
        default=None, gt=0,
        description="stop sending after this many seconds (default: when every session has finished)",
        json_schema_extra=flag("--duration", group=_SEND),
    )  # fmt: skip
    max_requests: int | None = Field(
        default=None, ge=1, description="stop after this many requests (default: no limit)",
        json_schema_extra=flag("--max-requests", group=_SEND),
    )  # fmt: skip
    repeats: int = Field(
        default=1,
        ge=1,
        le=100,
        description="run each target this many times over, targets interleaved (A B A B ...) and each "
        "prefix cache emptied between where the engine allows: report and compare give every "
        "figure and ratio a 95 % interval over the repeats (one run: over its sessions)",
        json_schema_extra=flag("--repeat", group=_SEND),
    )
    receive_clock: Literal["watched", "kernel", "user"] = Field(
        default="watched",
        description="what times every read of a response (swarm's HTTP/1.1 client, plain http): "
        "watched, the kernel's receive stamp of each read (SO_TIMESTAMPNS), so a late event loop "
        "does not move TTFT, ITL or E2E and each record keeps the client's lag, and a thread "
        "outside the loop notes arrivals until each response's first token, so a first token read "
        "together with later events keeps its own stamp; kernel, the stamps without that thread "
        "(2-8 % less client CPU: docs/performance.md); user, the time the client read it. Each "
        "record's clock column says which timed it",
        json_schema_extra=flag("--receive-clock", group=_SEND),
    )
    retries: int = Field(
        default=0,
        ge=0,
        le=10,
        description="retries of a failed call (429, 5xx, connect, timeout, broken stream); each "
        "attempt is its own trace row linked to the first. Off by default: a load generator "
        "must not hide failures",
        json_schema_extra=flag("--retries", group=_SEND),
    )
    retry_backoff_s: float = Field(
        default=0.5,
        ge=0,
        le=600,
        description="seconds before retry k: this times 2**(k-1), or the 429/503's Retry-After",
        json_schema_extra=flag("--retry-backoff", group=_SEND),
    )
    timeouts: TimeoutSpec = Field(default_factory=TimeoutSpec)
    max_error_rate: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="circuit breaker: stop sending to a target when this share of the last "
        "error_window requests failed (the reason goes to the manifest); off when absent",
        json_schema_extra=flag("--max-error-rate", group=_SEND),
    )
    error_window: int = Field(
        default=100, ge=1, description="requests the circuit breaker looks back over",
        json_schema_extra=flag("--error-window", group=_SEND),
    )  # fmt: skip
    executor: Literal["ray", "inprocess"] = Field(
        default="ray",
        description="ray: async Ray actors (a local Ray unless --address); inprocess: one process "
        "(swarm sweep's emulated showdown, with no --spec nor --target, runs in process unless told)",
        json_schema_extra=flag("--executor", group=_EXEC),
    )
    workers: int | None = Field(
        default=None, ge=1, description="Ray worker actors (default: the CPUs Ray reports, less one)",
        json_schema_extra=flag("--workers", group=_EXEC),
    )  # fmt: skip
    address: str | None = Field(
        default=None,
        description="Ray cluster to join: auto, HOST:PORT or ray://HOST:PORT (default: RAY_ADDRESS, else a local Ray)",
        json_schema_extra=flag("--address", group=_EXEC),
    )
    ray_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="seconds to start a local Ray or join --address before giving up",
        json_schema_extra=flag("--ray-timeout", group=_EXEC),
    )
    worker_writes: bool = Field(
        default=False,
        description="Ray workers write their Parquet parts to the output folder themselves (shared "
        "storage, e.g. s3://bucket/runs)",
        json_schema_extra=flag("--worker-writes", group=_EXEC),
    )
    output_dir: str = Field(default="runs", description="folder (or URI) under which run folders are created")
    record_text: bool = Field(
        default=False, description="store prompts and outputs in the trace",
        json_schema_extra=flag("--record-text", group=_OUT),
    )  # fmt: skip
    metrics_interval_s: float = Field(
        default=1.0, ge=0, description="scrape the targets' Prometheus metrics this often, seconds; 0: never",
        json_schema_extra=flag("--metrics-interval", group=_OUT),
    )  # fmt: skip
    flush_interval_s: float = Field(
        default=10.0, gt=0,
        description="close a trace part at least this often, seconds: what a kill -9 can lose",
        json_schema_extra=flag("--flush-interval", group=_OUT),
    )  # fmt: skip
    emulator_args: list[str] = Field(
        default_factory=list,
        description="extra `swarm emulate` flags for the embedded emulators, e.g. --emulator-arg=--cache-tokens=0",
        json_schema_extra=flag("--emulator-arg", group=_EXEC, repeat=True),
    )

    def limits(self) -> SendLimits:
        return SendLimits(self.max_in_flight, self.max_requests, self.duration_s)

    def retry(self) -> RetryPolicy:
        return RetryPolicy(self.retries, self.retry_backoff_s)


class RunSpec(SendSpec):
    """Everything ``swarm run`` needs: a workload, and how to send it."""

    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)

    @model_validator(mode="before")
    @classmethod
    def _sending_moved_out_of_the_workload(cls, data: Any) -> Any:
        return sending_moved_up(data, "run spec")


def sending_moved_up(data: Any, source: str) -> Any:
    """Spec files written before the sending settings left ``workload:`` still read: each of
    ``MOVED_TO_SENDING`` there is taken as if it stood at the top level (both at once is an
    error naming ``source``). The CLI applies this to a spec file before its flags, so a flag
    overrides such a key as it overrides any other."""
    if not isinstance(data, dict) or not isinstance(data.get("workload"), dict):
        return data
    moved = [k for k in MOVED_TO_SENDING if k in data["workload"]]
    if not moved:
        return data
    out, workload = dict(data), dict(data["workload"])
    for key in moved:
        if key in out:
            raise InputError(
                f"{source}: {key} is given twice, at the top level and under workload:; keep the top-level one"
            )
        out[key] = workload.pop(key)
    out["workload"] = workload
    return out


class ReplaySpec(SendSpec):
    """Everything ``swarm replay`` needs: what to replay, and how to send it."""

    replay: ReplaySourceSpec = Field(default_factory=ReplaySourceSpec)
