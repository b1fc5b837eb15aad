"""The ``swarm`` command line: each command builds a spec and calls the library.

Place in the map (docs/architecture.md): the face of the tool. Only this module knows typer and rich's
live display. Heavy modules (aiohttp, pyarrow, ray) are imported inside the commands, so
``swarm --help`` answers at once. Bad input (an ``InputError``) is printed as one line on
stderr with exit code 2 and no traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from swarm.errors import InputError

app = typer.Typer(
    name="swarm",
    help="Agent-swarm load generator for LLM serving engines (SGLang, TensorRT-LLM, vLLM, llama.cpp).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        from swarm import __version__

        print(f"swarm {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="print swarm's version and exit"
        ),
    ] = False,
) -> None:
    """Agent-swarm load generator for LLM serving engines (SGLang, TensorRT-LLM, vLLM, llama.cpp)."""


@app.command()
def emulate(
    engine: Annotated[str, typer.Option(help="engine to emulate: sglang or trtllm")] = "sglang",
    host: Annotated[str, typer.Option(help="address to bind; loopback unless told otherwise")] = "127.0.0.1",
    port: Annotated[
        int | None, typer.Option(help="port (default: the engine's own; 0 picks a free one)")
    ] = None,
    model: Annotated[str, typer.Option(help="model name to serve")] = "swarm-emulator",
    timing: Annotated[
        str, typer.Option(help="batch (step-time model), fixed (per-request delays) or zero")
    ] = "batch",
    step_base_ms: Annotated[float, typer.Option(help="batch: fixed cost of one step, ms")] = 4.0,
    prefill_ms_per_token: Annotated[
        float, typer.Option(help="batch: cost per uncached prompt token, ms")
    ] = 0.02,
    decode_ms_per_seq: Annotated[
        float, typer.Option(help="batch: cost per running sequence per step, ms")
    ] = 0.05,
    first_token_ms: Annotated[float, typer.Option(help="fixed: time to first token, ms")] = 50.0,
    token_ms: Annotated[float, typer.Option(help="fixed: time between tokens, ms")] = 10.0,
    kv_capacity_tokens: Annotated[int, typer.Option(help="KV tokens for running sequences")] = 400_000,
    cache_tokens: Annotated[
        int, typer.Option(help="prefix-cache capacity in tokens; 0 = unbounded")
    ] = 400_000,
    block_tokens: Annotated[int, typer.Option(help="trtllm: KV block size in tokens")] = 32,
    no_cache_report: Annotated[
        bool,
        typer.Option(
            "--no-cache-report", help="sglang: do not report cached tokens (as without --enable-cache-report)"
        ),
    ] = False,
    stamp_chunks: Annotated[
        bool,
        typer.Option(
            help="stamp each streamed content event with its send time (monotonic ns; for benchmarks)"
        ),
    ] = False,
    exit_with_parent: Annotated[
        bool,
        typer.Option(
            "--exit-with-parent",
            hidden=True,
            help="stop when the process that started this one is gone (swarm run's embedded emulators)",
        ),
    ] = False,
    faults: Annotated[
        str | None,
        typer.Option(
            help="inject faults, seeded: KIND=RATE pairs and parameters, e.g. "
            "'mixed=0.05,stall_s=2,seed=7' or 'http_500=0.01,cut=0.02,refuse=0.01' "
            "(kinds: refuse http_500 http_503 http_429 slow_headers stall_first stall_mid cut "
            "malformed no_done oversized; docs/reliability.md)"
        ),
    ] = None,
) -> None:
    """Serve an emulated engine (SGLang or TensorRT-LLM API) on loopback until Ctrl-C."""
    import asyncio
    import os
    import signal

    from pydantic import ValidationError

    from swarm.emulator.config import EmulatorConfig
    from swarm.emulator.faults import FaultSpec
    from swarm.emulator.server import RunningEmulator, serve_forever

    if engine not in ("sglang", "trtllm"):
        raise InputError(f"unknown engine profile {engine!r} for the emulator (choose sglang or trtllm)")
    try:
        config = EmulatorConfig(
            engine=engine,  # type: ignore[arg-type]
            host=host,
            port=(30000 if engine == "sglang" else 8000) if port is None else port,
            model=model,
            timing=timing,  # type: ignore[arg-type]
            step_base_ms=step_base_ms,
            prefill_ms_per_token=prefill_ms_per_token,
            decode_ms_per_seq=decode_ms_per_seq,
            first_token_ms=first_token_ms,
            token_ms=token_ms,
            kv_capacity_tokens=kv_capacity_tokens,
            cache_capacity_tokens=cache_tokens or None,
            block_tokens=block_tokens,
            cache_report=not no_cache_report,
            stamp_chunks=stamp_chunks,
            faults=FaultSpec.parse(faults) if faults else None,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InputError(f"--{field.replace('_', '-')}: {err['msg']}") from None

    def ready(server: RunningEmulator) -> None:
        injected = " with injected faults" if config.faults is not None and config.faults.active else ""
        print(
            f"swarm emulator ({engine} profile, {timing} timing{injected}) listening on {server.url}",
            flush=True,
        )

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        parent = os.getppid()

        async def watch_parent() -> None:  # a killed parent (kill -9) cannot stop us itself
            while os.getppid() == parent:
                await asyncio.sleep(0.5)
            task.cancel()

        watcher = loop.create_task(watch_parent()) if exit_with_parent else None
        try:
            await serve_forever(config, ready)
        except asyncio.CancelledError:
            pass
        finally:
            if watcher is not None:
                watcher.cancel()

    asyncio.run(main())


@app.command()
def probe(
    url: Annotated[str, typer.Argument(help="base URL of the server, e.g. http://127.0.0.1:30000")],
    engine: Annotated[
        str | None, typer.Option(help="engine profile, if detection should be overridden")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="model name for the test requests (default: first served)")
    ] = None,
    api_key_env: Annotated[str | None, typer.Option(help="environment variable holding the API key")] = None,
    api_key_file: Annotated[str | None, typer.Option(help="file holding the API key (first line)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Identify the engine at URL, its model, and whether it reports cached tokens."""
    import asyncio
    import json

    from swarm.engines.probe import probe as run_probe

    result = asyncio.run(
        run_probe(url, engine=engine, model=model, api_key_env=api_key_env, api_key_file=api_key_file)
    )
    if json_out:
        print(json.dumps(result.as_dict(), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from swarm.engines.profiles import PROFILES

    console = Console()
    table = Table(title=f"swarm probe {result.url}", show_header=False)
    engine_text = PROFILES[result.engine].title if result.engine else "unknown"
    if result.emulator:
        engine_text += " (swarm emulator)"
    table.add_row("engine", engine_text)
    table.add_row("model", result.model or "?")
    table.add_row("version", result.server_version or "?")
    table.add_row("metrics", result.metrics_path or "none found")
    cached = "unknown"
    if result.cache_reported is True:
        cached = f"yes ({result.second_cached_tokens} of {result.second_prompt_tokens} prompt tokens cached on the second request)"
    elif result.cache_reported is False:
        cached = "NO"
    table.add_row("cached tokens reported", cached)
    if result.first_ttft_ms is not None and result.second_ttft_ms is not None:
        table.add_row(
            "TTFT cold / shared prefix", f"{result.first_ttft_ms:.0f} ms / {result.second_ttft_ms:.0f} ms"
        )
    console.print(table)
    for line in result.request_errors:
        console.print(f"[red]request failed:[/red] {line}")
    for line in result.advice:
        console.print(f"[yellow]advice:[/yellow] {line}")


@app.command()
def run(
    spec: Annotated[
        Path | None, typer.Option(help="run spec YAML (workload:, targets:, ...); flags override it")
    ] = None,
    target: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=URL of a server; repeat for several (default: the emulator in both profiles)"
        ),
    ] = None,
    engine: Annotated[
        list[str] | None,
        typer.Option(help="engine profile per target (or one for all); detected when absent"),
    ] = None,
    dialect: Annotated[
        str | None,
        typer.Option(
            help="openai-chat, openai-completions or sglang-generate (default: the engine's own, openai-chat)"
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="model name to request (default: the server's first)")
    ] = None,
    api_key_env: Annotated[str | None, typer.Option(help="environment variable holding the API key")] = None,
    api_key_file: Annotated[
        str | None, typer.Option(help="file holding the API key (first line); never pass a key as a flag")
    ] = None,
    agents: Annotated[int | None, typer.Option(help="agent sessions (default 100)")] = None,
    profile: Annotated[
        str | None, typer.Option(help="agent profile name or YAML (default math_reasoner)")
    ] = None,
    topology: Annotated[
        str | None, typer.Option(help="topology name or YAML (default tree_of_thought)")
    ] = None,
    system_prompts: Annotated[
        int | None, typer.Option(help="distinct system prompts shared by the swarm (default 4)")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="seed of the workload (default 0)")] = None,
    context: Annotated[
        str | None,
        typer.Option(help="synthetic (identical prompts on every engine; the default) or live"),
    ] = None,
    arrival: Annotated[
        str | None,
        typer.Option(
            help="when agents start: all_at_once | poisson:RATE | constant:RATE | gamma:RATE,CV | "
            "ramp:START,END,SECONDS (default poisson:10)"
        ),
    ] = None,
    max_in_flight: Annotated[
        int | None, typer.Option(help="global cap on requests in flight (default 0: none)")
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(help="stop sending after this many seconds (default: when every agent has finished)"),
    ] = None,
    max_requests: Annotated[
        int | None, typer.Option(help="stop after this many requests (default: no limit)")
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="local HF tokenizer.json for token estimates (default: whitespace words)"),
    ] = None,
    output: Annotated[str | None, typer.Option(help="folder for run folders (default runs)")] = None,
    record_text: Annotated[
        bool, typer.Option("--record-text", help="store prompts and outputs in the trace")
    ] = False,
    executor: Annotated[
        str | None,
        typer.Option(
            help="ray (default: Ray actors, a local Ray unless --address) or inprocess (one process, for debugging)"
        ),
    ] = None,
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
        float | None,
        typer.Option(help="seconds to start a local Ray or join --address before giving up (default 60)"),
    ] = None,
    worker_writes: Annotated[
        bool,
        typer.Option(
            "--worker-writes",
            help="Ray workers write Parquet parts to --output themselves (shared storage, e.g. s3://bucket/runs)",
        ),
    ] = False,
    emulator_arg: Annotated[
        list[str] | None,
        typer.Option(help="extra flag for the embedded emulators, e.g. --emulator-arg=--cache-tokens=0"),
    ] = None,
    retries: Annotated[
        int | None,
        typer.Option(help="retries of a failed call (default 0: failures are measured, not hidden)"),
    ] = None,
    retry_backoff: Annotated[
        float | None,
        typer.Option(help="seconds before the first retry, doubling; Retry-After wins (default 0.5)"),
    ] = None,
    on_failure: Annotated[
        str | None,
        typer.Option(help="abort_branch (default) or standin: carry on with the stand-in output"),
    ] = None,
    max_error_rate: Annotated[
        float | None,
        typer.Option(
            help="circuit breaker: stop a target when this share of recent requests failed (0-1; default: off)"
        ),
    ] = None,
    error_window: Annotated[
        int | None, typer.Option(help="requests the circuit breaker looks back over (default 100)")
    ] = None,
    first_token_timeout: Annotated[
        float | None, typer.Option(help="seconds to the first token before a timeout (default 120)")
    ] = None,
    idle_timeout: Annotated[
        float | None, typer.Option(help="longest silence mid-stream, seconds (default 60)")
    ] = None,
    request_timeout: Annotated[
        float | None, typer.Option(help="a whole request, seconds (default 600)")
    ] = None,
    metrics_interval: Annotated[
        float | None,
        typer.Option(help="scrape the targets' Prometheus metrics every N s; 0 = never (default 1)"),
    ] = None,
    flush_interval: Annotated[
        float | None,
        typer.Option(
            help="close a trace part at least this often, seconds: what a kill -9 can lose (default 10)"
        ),
    ] = None,
    progress: Annotated[bool, typer.Option(help="live progress display")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Run an agent swarm against targets (default: the built-in emulator, sglang and trtllm profiles)."""
    from swarm.cli_run import parse_targets, run_command
    from swarm.specfiles import load_yaml

    data: dict[str, Any] = {}
    if spec is not None:
        loaded = load_yaml(spec)
        if not isinstance(loaded, dict):
            raise InputError(f"{spec}: expected a mapping at the top level")
        data = loaded
    workload = dict(data.get("workload") or {})
    for key, value in (
        ("agents", agents), ("system_prompts", system_prompts), ("seed", seed), ("context", context),
        ("max_in_flight", max_in_flight), ("duration_s", duration), ("max_requests", max_requests),
        ("tokenizer", tokenizer), ("retries", retries), ("retry_backoff_s", retry_backoff),
        ("on_failure", on_failure),
    ):  # fmt: skip
        if value is not None:
            workload[key] = value
    timeouts = dict(data.get("timeouts") or {})
    for key, value in (
        ("first_token_s", first_token_timeout), ("idle_s", idle_timeout), ("total_s", request_timeout),
    ):  # fmt: skip
        if value is not None:
            timeouts[key] = value
    if timeouts:
        data["timeouts"] = timeouts
    for key, value in (
        ("max_error_rate", max_error_rate), ("error_window", error_window), ("flush_interval_s", flush_interval),
        ("metrics_interval_s", metrics_interval),
    ):  # fmt: skip
        if value is not None:
            data[key] = value
    if profile is not None or topology is not None:
        mix = list(workload.get("mix") or [{}])
        entry = dict(mix[0]) if len(mix) == 1 else {}
        if profile is not None:
            entry["profile"] = profile
        if topology is not None:
            entry["topology"] = topology
        workload["mix"] = [entry]
    if arrival is not None:
        from swarm.arrival import parse_arrival

        workload["arrival"] = parse_arrival(arrival).model_dump()
    data["workload"] = workload
    if target:
        data["targets"] = parse_targets(target, engine or [], dialect, model, api_key_env, api_key_file)
    elif engine:
        parse_targets([], engine, dialect, model, api_key_env, api_key_file)
    if output is not None:
        data["output_dir"] = output
    if record_text:
        data["record_text"] = True
    if executor is not None:
        data["executor"] = executor
    if workers is not None:
        data["workers"] = workers
    if address is not None:
        data["address"] = address
    if ray_timeout is not None:
        data["ray_timeout_s"] = ray_timeout
    if worker_writes:
        data["worker_writes"] = True
    if emulator_arg:
        data["emulator_args"] = list(emulator_arg)
    source = f"{spec} (with flags)" if spec is not None else "flags"
    code = run_command(data, show_progress=progress and not json_out, json_out=json_out, source=source)
    if code:
        raise typer.Exit(code)


@app.command()
def topologies(
    name: Annotated[str | None, typer.Argument(help="a topology to show as a tree")] = None,
    topologies_dir: Annotated[
        list[Path] | None, typer.Option(help="extra folder of topology YAML files")
    ] = None,
) -> None:
    """List the topologies, or show one as an ASCII tree of a small instance."""
    from swarm.cli_run import topologies_command

    topologies_command(name, topologies_dir or [])


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
    from swarm.cli_run import replay_command

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


@app.command()
def export(
    run_dir: Annotated[str, typer.Argument(help="a run folder")],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            help="mooncake (JSON lines, one target) or csv (one row per request, for spreadsheets)",
        ),
    ] = "mooncake",
    target: Annotated[
        str | None, typer.Option(help="which recorded target (default: mooncake the first, csv all)")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", "--out", help="file to write (default: stdout); written whole or not at all"
        ),
    ] = None,
) -> None:
    """Write a run as a trace other tools read (Mooncake JSON lines, or CSV)."""
    from swarm.replay.export import FORMATS, export_run

    if format not in FORMATS:
        raise InputError(f"--format {format!r}: expected one of {', '.join(FORMATS)}")
    count = export_run(run_dir, format, output, target)
    if output is not None:
        print(f"wrote {count} requests to {output}", file=sys.stderr)


@app.command()
def report(
    run_dir: Annotated[str, typer.Argument(help="a run folder")],
    html: Annotated[
        Path | None, typer.Option("--html", help="also write a self-contained HTML report with plots")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="print the figures as JSON instead of tables")
    ] = False,
    slo: Annotated[
        list[str] | None, typer.Option(help="an SLO for goodput, e.g. --slo ttft:200ms --slo itl:50ms")
    ] = None,
) -> None:
    """Every figure of a run, per target, from its trace (terminal tables, --html, --json)."""
    from swarm.cli_report import report_command

    report_command(run_dir, html, json_out, slo or [])


@app.command()
def compare(
    run_dirs: Annotated[list[str], typer.Argument(help="run folders (or one run with several targets)")],
    json_out: Annotated[bool, typer.Option("--json", help="print the matrix as JSON")] = False,
    slo: Annotated[list[str] | None, typer.Option(help="an SLO for goodput, e.g. --slo ttft:200ms")] = None,
    force: Annotated[bool, typer.Option(help="compare runs whose workloads differ (seed, spec)")] = False,
    tie_within: Annotated[
        float, typer.Option(min=0, help="a lead smaller than this share is a tie (0.02: 2 %)")
    ] = 0.02,
) -> None:
    """Targets side by side: one row per dimension, a column per target, who leads and by how much."""
    from swarm.cli_report import compare_command

    compare_command(run_dirs, json_out, slo or [], force, tie_within)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _interrupt_behind(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt led to ``exc`` (typer turns one into a quiet exit 130)."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def main() -> None:
    """Console entry point: runs the app, turning bad input into one line and exit code 2.

    SIGTERM ends a command as Ctrl-C does, at any stage (parts that stop gracefully install
    their own handler for as long as they run); either says so on stderr and exits 130."""
    import signal

    signal.signal(signal.SIGTERM, _terminate)
    try:
        app()
    except InputError as exc:
        print(f"swarm: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("swarm: interrupted", file=sys.stderr)
        sys.exit(130)
    except SystemExit as exc:
        if exc.code == 130 and _interrupt_behind(exc):
            print("swarm: interrupted", file=sys.stderr)
        raise


if __name__ == "__main__":
    main()
