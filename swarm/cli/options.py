"""Flags that ``swarm run`` and ``swarm replay`` share, declared once, and the RunSpec fields
they set.

Place in the map (docs/architecture.md, "CLI"): both commands send through the same runtime,
so where to send, how (executor, Ray), with which timeouts and breaker, and where to write are
the same flags with the same meaning. Each is None unless given; the RunSpec's defaults apply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

Targets = Annotated[
    list[str] | None,
    typer.Option(
        "--target", help="NAME=URL of a server; repeat for several (default: the emulator in both profiles)"
    ),
]
Engines = Annotated[
    list[str] | None,
    typer.Option("--engine", help="engine profile per target (or one for all); detected when absent"),
]
Dialect = Annotated[
    str | None,
    typer.Option(
        help="openai-chat, openai-completions or sglang-generate (default: the engine's own, openai-chat)"
    ),
]
Model = Annotated[str | None, typer.Option(help="model name to request (default: the server's first)")]
ApiKeyEnv = Annotated[str | None, typer.Option(help="environment variable holding the API key")]
ApiKeyFile = Annotated[
    str | None, typer.Option(help="file holding the API key (first line); never pass a key as a flag")
]
Tokenizer = Annotated[
    str | None, typer.Option(help="local HF tokenizer.json for token estimates (default: whitespace words)")
]
Retries = Annotated[
    int | None, typer.Option(help="retries of a failed call (default 0: failures are measured, not hidden)")
]
RetryBackoff = Annotated[
    float | None,
    typer.Option(help="seconds before the first retry, doubling; Retry-After wins (default 0.5)"),
]
MaxInFlight = Annotated[
    int | None, typer.Option(help="cap on requests in flight, over all workers (default 0: none)")
]
Output = Annotated[str | None, typer.Option(help="folder (or URI) for run folders (default runs)")]
RecordText = Annotated[bool, typer.Option("--record-text", help="store prompts and outputs in the trace")]
Executor = Annotated[
    str | None,
    typer.Option(help="ray (Ray actors, a local Ray unless --address) or inprocess (one process)"),
]
Workers = Annotated[
    int | None, typer.Option(help="Ray worker actors (default: the CPUs Ray reports, less one)")
]
Address = Annotated[
    str | None,
    typer.Option(
        help="Ray cluster to join: auto or ray://HOST:PORT (default: RAY_ADDRESS, else a local Ray)"
    ),
]
RayTimeout = Annotated[
    float | None,
    typer.Option(help="seconds to start a local Ray or join --address before giving up (default 60)"),
]
WorkerWrites = Annotated[
    bool,
    typer.Option(
        "--worker-writes",
        help="Ray workers write Parquet parts to --output themselves (shared storage, e.g. s3://bucket/runs)",
    ),
]
EmulatorArgs = Annotated[
    list[str] | None,
    typer.Option(
        "--emulator-arg", help="extra flag for the embedded emulators, e.g. --emulator-arg=--cache-tokens=0"
    ),
]
MaxErrorRate = Annotated[
    float | None,
    typer.Option(
        help="circuit breaker: stop a target when this share of recent requests failed (0-1; default: off)"
    ),
]
ErrorWindow = Annotated[
    int | None, typer.Option(help="requests the circuit breaker looks back over (default 100)")
]
FirstTokenTimeout = Annotated[
    float | None, typer.Option(help="seconds to the first token before a timeout (default 120)")
]
IdleTimeout = Annotated[float | None, typer.Option(help="longest silence mid-stream, seconds (default 60)")]
RequestTimeout = Annotated[float | None, typer.Option(help="a whole request, seconds (default 600)")]
MetricsInterval = Annotated[
    float | None, typer.Option(help="scrape the targets' Prometheus metrics every N s; 0 = never (default 1)")
]
FlushInterval = Annotated[
    float | None,
    typer.Option(
        help="close a trace part at least this often, seconds: what a kill -9 can lose (default 10)"
    ),
]
Progress = Annotated[bool, typer.Option(help="live progress display")]
JsonOut = Annotated[bool, typer.Option("--json", help="print the summary as JSON")]
SpecFile = Annotated[
    Path | None, typer.Option(help="run spec YAML (workload:, targets:, ...); flags override it")
]


def workload_flags(
    workload: dict[str, Any], *, profile: str | None, topology: str | None, arrival: str | None,
    **fields: Any,
) -> dict[str, Any]:  # fmt: skip
    """``workload`` (WorkloadSpec fields) with the flags that were given: ``--profile`` and
    ``--topology`` set the one mix entry, ``--arrival`` is parsed, other ``fields`` (by their
    spec names) are set when not None."""
    out = dict(workload)
    for key, value in fields.items():
        if value is not None:
            out[key] = value
    if profile is not None or topology is not None:
        mix = list(out.get("mix") or [{}])
        entry = dict(mix[0]) if len(mix) == 1 else {}
        if profile is not None:
            entry["profile"] = profile
        if topology is not None:
            entry["topology"] = topology
        out["mix"] = [entry]
    if arrival is not None:
        from swarm.workload.arrival import parse_arrival

        out["arrival"] = parse_arrival(arrival).model_dump()
    return out


def sending_settings(
    data: dict[str, Any],
    *,
    output: str | None,
    record_text: bool,
    executor: str | None,
    workers: int | None,
    address: str | None,
    ray_timeout: float | None,
    worker_writes: bool,
    emulator_arg: list[str] | None,
    max_error_rate: float | None,
    error_window: int | None,
    first_token_timeout: float | None,
    idle_timeout: float | None,
    request_timeout: float | None,
    metrics_interval: float | None,
    flush_interval: float | None,
) -> dict[str, Any]:
    """``data`` (RunSpec fields, e.g. from ``--spec``) with the shared flags that were given."""
    out = dict(data)
    timeouts = dict(out.get("timeouts") or {})
    for key, value in (
        ("first_token_s", first_token_timeout), ("idle_s", idle_timeout), ("total_s", request_timeout),
    ):  # fmt: skip
        if value is not None:
            timeouts[key] = value
    if timeouts:
        out["timeouts"] = timeouts
    given: tuple[tuple[str, object], ...] = (
        ("max_error_rate", max_error_rate), ("error_window", error_window), ("flush_interval_s", flush_interval),
        ("metrics_interval_s", metrics_interval), ("output_dir", output), ("executor", executor),
        ("workers", workers), ("address", address), ("ray_timeout_s", ray_timeout),
    )  # fmt: skip
    for key, flag in given:
        if flag is not None:
            out[key] = flag
    if record_text:
        out["record_text"] = True
    if worker_writes:
        out["worker_writes"] = True
    if emulator_arg:
        out["emulator_args"] = list(emulator_arg)
    return out
