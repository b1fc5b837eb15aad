"""``swarm replay``: a run folder or a public trace, sent again as a run of its own.

Place in the map (docs/architecture.md, "CLI"): builds a ReplayPlan (``replay``) and calls
``launch.execute_replay``, in process or on Ray.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from swarm.cli import options as opt
from swarm.cli.app import app
from swarm.cli.run import finish_code, parse_targets
from swarm.errors import InputError


@app.command()
def replay(
    source: Annotated[
        str,
        typer.Argument(
            help="a run folder, or a trace: Mooncake, Qwen-Bailian or AIPerf DAG .jsonl, Azure or BurstGPT .csv, TensorRT-LLM .trace.json, agentic-coding or OpenTelemetry GenAI span .json (or a folder of any of the last three)"
        ),
    ],
    format: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="swarm, mooncake, azure, burstgpt, trtllm, bailian, agentic_coding, aiperf_dag or otel_genai (default: from the source)",
        ),
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            help="timed (recorded offsets, open loop) or dependent (keep the DAG; default for swarm runs)"
        ),
    ] = None,
    speed: Annotated[float, typer.Option(help="time compression: 2 halves the gaps")] = 1.0,
    tool_time_scale: Annotated[
        float,
        typer.Option(help="multiply the recorded tool and think waits between calls (0: none; agent traces)"),
    ] = 1.0,
    limit: Annotated[int | None, typer.Option(help="trace files: replay the first N requests kept")] = None,
    window: Annotated[
        str | None, typer.Option(help="trace files: START:END seconds from the trace start")
    ] = None,
    sample: Annotated[
        float | None, typer.Option(help="trace files: keep this fraction of requests (seeded)")
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of --sample")] = 0,
    skip_bad_lines: Annotated[
        bool, typer.Option("--skip-bad-lines", help="skip malformed lines (counted) instead of stopping")
    ] = False,
    source_target: Annotated[
        str | None, typer.Option(help="run folders: which recorded target to replay (default: the first)")
    ] = None,
    target: opt.Targets = None,
    engine: opt.Engines = None,
    dialect: opt.Dialect = None,
    model: opt.Model = None,
    api_key_env: opt.ApiKeyEnv = None,
    api_key_file: opt.ApiKeyFile = None,
    max_in_flight: opt.MaxInFlight = None,
    sessions: Annotated[
        int,
        typer.Option(
            help="play every recorded session N times over (copies get their own user content, "
            "share the system prompts)"
        ),
    ] = 1,
    max_sessions: Annotated[
        int,
        typer.Option(
            help="keep at most N sessions in progress; the next starts when one ends (0 = all at their offsets)"
        ),
    ] = 0,
    tokenizer: opt.Tokenizer = None,
    retries: opt.Retries = None,
    retry_backoff: opt.RetryBackoff = None,
    output: opt.Output = None,
    record_text: opt.RecordText = False,
    executor: opt.Executor = None,
    workers: opt.Workers = None,
    address: opt.Address = None,
    ray_timeout: opt.RayTimeout = None,
    worker_writes: opt.WorkerWrites = False,
    emulator_arg: opt.EmulatorArgs = None,
    max_error_rate: opt.MaxErrorRate = None,
    error_window: opt.ErrorWindow = None,
    first_token_timeout: opt.FirstTokenTimeout = None,
    idle_timeout: opt.IdleTimeout = None,
    request_timeout: opt.RequestTimeout = None,
    metrics_interval: opt.MetricsInterval = None,
    flush_interval: opt.FlushInterval = None,
    progress: opt.Progress = True,
    json_out: opt.JsonOut = False,
) -> None:
    """Send recorded traffic again: a swarm run, or a public trace, as a new run."""

    settings = opt.sending_settings(
        # a replay runs in this process unless told otherwise
        {"executor": "inprocess"}, output=output, record_text=record_text, executor=executor, workers=workers,
        address=address, ray_timeout=ray_timeout, worker_writes=worker_writes, emulator_arg=emulator_arg,
        max_error_rate=max_error_rate, error_window=error_window, first_token_timeout=first_token_timeout,
        idle_timeout=idle_timeout, request_timeout=request_timeout, metrics_interval=metrics_interval,
        flush_interval=flush_interval,
    )  # fmt: skip
    code = replay_command(
        source=source, fmt=format, mode=mode, speed=speed, tool_time_scale=tool_time_scale, limit=limit,
        window=window, sample=sample, seed=seed,
        skip_bad_lines=skip_bad_lines, source_target=source_target, targets=target or [], engines=engine or [],
        dialect=dialect, model=model, api_key_env=api_key_env, api_key_file=api_key_file,
        max_in_flight=max_in_flight or 0, sessions=sessions, max_sessions=max_sessions, tokenizer=tokenizer,
        retries=retries or 0, retry_backoff_s=0.5 if retry_backoff is None else retry_backoff, settings=settings,
        show_progress=progress and not json_out, json_out=json_out,
    )  # fmt: skip
    if code:
        raise typer.Exit(code)


def build_plan(
    source: str, fmt: str | None, *, limit: int | None = None, window: str | None = None,
    sample: float | None = None, seed: int = 0, skip_bad_lines: bool = False, source_target: str | None = None,
) -> tuple[Any, dict[str, Any]]:  # fmt: skip
    """The replay plan of ``source`` (a run folder or a trace file) and the filters applied."""
    from swarm.replay.format import ReadOptions
    from swarm.replay.formats import load_plan
    from swarm.replay.reading import Filters, parse_window

    filters: dict[str, Any] = {"limit": limit, "window": window, "sample": sample, "seed": seed}
    options = ReadOptions(
        Filters(limit=limit, window=parse_window(window), sample=sample, seed=seed), skip_bad_lines, source_target
    )
    return load_plan(source, fmt, options), filters


def replay_command(
    *, source: str, fmt: str | None, mode: str | None, speed: float, limit: int | None, window: str | None,
    tool_time_scale: float = 1.0,
    sample: float | None, seed: int, skip_bad_lines: bool, source_target: str | None, targets: list[str],
    engines: list[str], dialect: str | None, model: str | None, api_key_env: str | None,
    api_key_file: str | None = None, max_in_flight: int = 0, sessions: int = 1, max_sessions: int = 0,
    tokenizer: str | None = None, retries: int = 0, retry_backoff_s: float = 0.5,
    settings: dict[str, Any] | None = None, show_progress: bool, json_out: bool,
) -> int:  # fmt: skip
    """Import, replay, summarise; returns the exit code. ``settings``: the RunSpec fields a
    replay shares with runs (``options.sending_settings``: output, record_text, executor and Ray,
    timeouts, circuit breaker, metrics and flush intervals, emulator flags)."""
    from swarm.cli.live import LiveDisplay, LiveView
    from swarm.cli.report import summary_table
    from swarm.launch import execute_replay, summary_rows
    from swarm.runtime.context import ResolvedTarget
    from swarm.runtime.live_stats import RunStats
    from swarm.runtime.replay_source import MODES, group_sessions
    from swarm.runtime.specs import RunSpec, TargetSpec
    from swarm.workload.specfiles import validate
    from swarm.workload.tokenizer import get_tokenizer

    if mode is not None and mode not in MODES:
        raise InputError(f"--mode {mode!r}: expected timed or dependent")
    if not math.isfinite(speed) or speed <= 0:
        raise InputError("--speed must be a positive number")
    if not math.isfinite(tool_time_scale) or tool_time_scale < 0:
        raise InputError("--tool-time-scale must be a number, not negative")
    if sample is not None and not 0 < sample <= 1:
        raise InputError("--sample must be a fraction in (0, 1]")
    if limit is not None and limit < 1:
        raise InputError("--limit must be at least 1")
    settings = dict(settings or {})
    if (rate := settings.get("max_error_rate")) is not None and not 0 < rate <= 1:
        raise InputError("--max-error-rate must be a share in (0, 1]")
    if settings.get("error_window", 1) < 1:
        raise InputError("--error-window must be at least 1")
    if max_in_flight < 0:
        raise InputError("--max-in-flight must be 0 (no cap) or more")
    if sessions < 1:
        raise InputError("--sessions must be at least 1")
    if max_sessions < 0:
        raise InputError("--max-sessions must be 0 (no limit) or more")
    if retries < 0 or retry_backoff_s < 0:
        raise InputError("--retries and --retry-backoff must not be negative")
    spec = validate(RunSpec, settings, "replay flags")
    chosen_tokenizer = get_tokenizer(tokenizer)
    plan, filters = build_plan(
        source, fmt, limit=limit, window=window, sample=sample, seed=seed,
        skip_bad_lines=skip_bad_lines, source_target=source_target,
    )  # fmt: skip
    target_specs = [
        TargetSpec(**t) for t in parse_targets(targets, engines, dialect, model, api_key_env, api_key_file)
    ]
    console = Console(stderr=json_out, width=None if sys.stdout.isatty() else 160)
    for note in plan.notes:
        console.print(f"[yellow]{note}[/yellow]")
    # the live view counts sessions (recorded sessions, times the copies)
    display = LiveDisplay(LiveView(len(group_sessions(plan.items)) * sessions), console, show_progress)

    def on_target_start(target: ResolvedTarget, stats: RunStats) -> None:
        display.start_target(target.name, stats)

    try:
        result = execute_replay(
            plan, target_specs, mode=mode, speed=speed, copies=sessions, max_sessions=max_sessions,
            max_in_flight=max_in_flight, tokenizer=chosen_tokenizer, retries=retries,
            retry_backoff_s=retry_backoff_s, output_dir=spec.output_dir, record_text=spec.record_text,
            emulator_args=spec.emulator_args, filters=filters, on_target_start=on_target_start,
            max_error_rate=spec.max_error_rate, error_window=spec.error_window, spec=spec,
            tool_time_scale=tool_time_scale,
        )  # fmt: skip
    finally:
        display.stop()
    summary = summary_rows(result.run_dir)
    if json_out:
        print(
            json.dumps(
                {
                    "run_dir": result.run_dir,
                    "status": result.manifest.status.value,
                    "status_reason": result.manifest.status_reason,
                    "replay_of": result.manifest.replay_of,
                    "targets": summary,
                },
                indent=2,
            )
        )
    else:
        emulated = {t.name for t in result.manifest.targets if t.emulated}
        console.print(summary_table(summary, emulated))
        console.print(
            f"replay of {plan.source} ({plan.source_format}, {len(plan.items)} requests): {result.run_dir}  (status: {result.manifest.status.value})"
        )
    return finish_code(result.manifest, console)
