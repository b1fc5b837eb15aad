"""``swarm replay``: a run folder or a public trace, sent again as a run of its own.

Place in the map (docs/architecture.md, "CLI"): builds a ReplayPlan (``replay``) and calls
``launch.execute_replay``, in process or on Ray.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from swarm.cli.app import app
from swarm.cli.run import finish_code, parse_targets
from swarm.errors import InputError


@app.command()
def replay(
    source: Annotated[
        str, typer.Argument(help="a run folder, or a trace file (Mooncake .jsonl, Azure or BurstGPT .csv)")
    ],
    format: Annotated[
        str | None,
        typer.Option("--format", help="swarm, mooncake, azure or burstgpt (default: from the source)"),
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            help="timed (recorded offsets, open loop) or dependent (keep the DAG; default for swarm runs)"
        ),
    ] = None,
    speed: Annotated[float, typer.Option(help="time compression: 2 halves the gaps")] = 1.0,
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
    target: Annotated[
        list[str] | None,
        typer.Option(help="NAME=URL to send to; repeat for several (default: the emulator in both profiles)"),
    ] = None,
    engine: Annotated[
        list[str] | None, typer.Option(help="engine profile per target (or one for all)")
    ] = None,
    dialect: Annotated[
        str | None,
        typer.Option(
            help="openai-chat, openai-completions or sglang-generate (default: the engine's own, openai-chat)"
        ),
    ] = None,
    model: Annotated[str | None, typer.Option(help="model name to request")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="environment variable holding the API key")] = None,
    api_key_file: Annotated[str | None, typer.Option(help="file holding the API key (first line)")] = None,
    max_error_rate: Annotated[
        float | None,
        typer.Option(
            help="circuit breaker: stop a target when this share of recent requests failed (0-1; default: off)"
        ),
    ] = None,
    error_window: Annotated[int, typer.Option(help="requests the circuit breaker looks back over")] = 100,
    max_in_flight: Annotated[int, typer.Option(help="cap on requests in flight (0 = none)")] = 0,
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
    tokenizer: Annotated[
        str | None,
        typer.Option(help="local HF tokenizer.json for token estimates (default: whitespace words)"),
    ] = None,
    retries: Annotated[
        int, typer.Option(help="retries of a failed call (default 0: failures are measured, not hidden)")
    ] = 0,
    retry_backoff: Annotated[float, typer.Option(help="seconds before the first retry, doubling")] = 0.5,
    executor: Annotated[
        str,
        typer.Option(
            help="inprocess (default: one process) or ray (Ray actors, a local Ray unless --address)"
        ),
    ] = "inprocess",
    workers: Annotated[
        int | None, typer.Option(help="Ray worker actors (default: the CPUs Ray reports, less one)")
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster to join: auto or ray://HOST:PORT (default: RAY_ADDRESS, else a local Ray)"
        ),
    ] = None,
    ray_timeout: Annotated[
        float, typer.Option(help="seconds to start a local Ray or join --address before giving up")
    ] = 60.0,
    worker_writes: Annotated[
        bool,
        typer.Option("--worker-writes", help="Ray workers write Parquet parts to --output themselves"),
    ] = False,
    first_token_timeout: Annotated[
        float, typer.Option(help="seconds to the first token before a timeout")
    ] = 120.0,
    idle_timeout: Annotated[float, typer.Option(help="longest silence mid-stream, seconds")] = 60.0,
    request_timeout: Annotated[float, typer.Option(help="a whole request, seconds")] = 600.0,
    output: Annotated[str, typer.Option(help="folder (or URI) for run folders")] = "runs",
    record_text: Annotated[
        bool, typer.Option("--record-text", help="store prompts and outputs in the trace")
    ] = False,
    emulator_arg: Annotated[
        list[str] | None, typer.Option(help="extra flag for the embedded emulators")
    ] = None,
    progress: Annotated[bool, typer.Option(help="live progress display")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Send recorded traffic again: a swarm run, or a public trace, as a new run."""

    code = replay_command(
        source=source, fmt=format, mode=mode, speed=speed, limit=limit, window=window, sample=sample, seed=seed,
        skip_bad_lines=skip_bad_lines, source_target=source_target, targets=target or [], engines=engine or [],
        dialect=dialect, model=model, api_key_env=api_key_env, api_key_file=api_key_file,
        max_error_rate=max_error_rate, error_window=error_window, max_in_flight=max_in_flight, sessions=sessions,
        max_sessions=max_sessions, tokenizer=tokenizer, retries=retries, retry_backoff_s=retry_backoff,
        settings={
            "executor": executor, "workers": workers, "address": address, "ray_timeout_s": ray_timeout,
            "worker_writes": worker_writes,
            "timeouts": {"first_token_s": first_token_timeout, "idle_s": idle_timeout, "total_s": request_timeout},
        },
        output=output,
        record_text=record_text, emulator_args=emulator_arg or [], show_progress=progress and not json_out,
        json_out=json_out,
    )  # fmt: skip
    if code:
        raise typer.Exit(code)


def detect_format(source: str) -> str:
    """swarm (a run folder), mooncake (.jsonl), azure or burstgpt (.csv, by header)."""
    path = Path(source)
    if "://" in source or path.is_dir():
        return "swarm"
    if path.suffix in (".jsonl", ".json"):
        return "mooncake"
    if path.suffix == ".csv" and path.is_file():
        with path.open(encoding="utf-8") as f:
            header = f.readline()
        if "ContextTokens" in header:
            return "azure"
        if "Request tokens" in header:
            return "burstgpt"
    raise InputError(f"{source}: cannot tell the trace format; pass --format swarm|mooncake|azure|burstgpt")


def replay_command(
    *, source: str, fmt: str | None, mode: str | None, speed: float, limit: int | None, window: str | None,
    sample: float | None, seed: int, skip_bad_lines: bool, source_target: str | None, targets: list[str],
    engines: list[str], dialect: str | None, model: str | None, api_key_env: str | None,
    api_key_file: str | None = None, max_error_rate: float | None = None, error_window: int = 100,
    max_in_flight: int, sessions: int = 1, max_sessions: int = 0, tokenizer: str | None = None,
    retries: int = 0, retry_backoff_s: float = 0.5, settings: dict[str, Any] | None = None,
    output: str, record_text: bool, emulator_args: list[str], show_progress: bool, json_out: bool,
) -> int:  # fmt: skip
    """``settings``: the RunSpec fields a replay shares with runs (executor, workers, address,
    ray_timeout_s, worker_writes, timeouts, metrics and flush intervals)."""
    import json

    from swarm.cli.live import LiveDisplay, LiveView
    from swarm.cli.report import summary_table
    from swarm.launch import execute_replay, make_executor, summary_rows
    from swarm.replay.importers import Filters, import_trace, parse_window
    from swarm.runtime.context import ResolvedTarget
    from swarm.runtime.live_stats import RunStats
    from swarm.runtime.replay_source import MODES
    from swarm.runtime.specs import RunSpec, TargetSpec
    from swarm.workload.specfiles import validate
    from swarm.workload.tokenizer import get_tokenizer

    if mode is not None and mode not in MODES:
        raise InputError(f"--mode {mode!r}: expected timed or dependent")
    if speed <= 0:
        raise InputError("--speed must be positive")
    if sample is not None and not 0 < sample <= 1:
        raise InputError("--sample must be a fraction in (0, 1]")
    if limit is not None and limit < 1:
        raise InputError("--limit must be at least 1")
    if max_error_rate is not None and not 0 < max_error_rate <= 1:
        raise InputError("--max-error-rate must be a share in (0, 1]")
    if error_window < 1:
        raise InputError("--error-window must be at least 1")
    if sessions < 1:
        raise InputError("--sessions must be at least 1")
    if max_sessions < 0:
        raise InputError("--max-sessions must be 0 (no limit) or more")
    if retries < 0 or retry_backoff_s < 0:
        raise InputError("--retries and --retry-backoff must not be negative")
    spec = validate(RunSpec, {**(settings or {}), "output_dir": output}, "replay flags")
    chosen_tokenizer = get_tokenizer(tokenizer)
    fmt = fmt or detect_format(source)
    filters: dict[str, Any] = {"limit": limit, "window": window, "sample": sample, "seed": seed}
    if fmt == "swarm":
        if limit or window or sample:
            raise InputError("--limit, --window and --sample apply to trace files, not to run folders")
        from swarm.replay.from_run import plan_from_run

        plan = plan_from_run(source, source_target)
    else:
        plan = import_trace(
            source, fmt, Filters(limit=limit, window=parse_window(window), sample=sample, seed=seed),
            skip_bad_lines=skip_bad_lines,
        )  # fmt: skip
    target_specs = [
        TargetSpec(**t) for t in parse_targets(targets, engines, dialect, model, api_key_env, api_key_file)
    ]
    console = Console(stderr=json_out, width=None if sys.stdout.isatty() else 160)
    for note in plan.notes:
        console.print(f"[yellow]{note}[/yellow]")
    display = LiveDisplay(LiveView(len(plan.items) * sessions), console, show_progress)

    def on_target_start(target: ResolvedTarget, stats: RunStats) -> None:
        display.start_target(target.name, stats)

    try:
        result = execute_replay(
            plan, target_specs, mode=mode, speed=speed, copies=sessions, max_sessions=max_sessions,
            max_in_flight=max_in_flight, tokenizer=chosen_tokenizer, retries=retries,
            retry_backoff_s=retry_backoff_s, output_dir=output,
            record_text=record_text, emulator_args=emulator_args, filters=filters, on_target_start=on_target_start,
            max_error_rate=max_error_rate, error_window=error_window, spec=spec,
            executor=make_executor(
                spec.executor, workers=spec.workers, address=spec.address, worker_writes=spec.worker_writes,
                ray_timeout_s=spec.ray_timeout_s, flush_interval_s=spec.flush_interval_s,
            ),
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
