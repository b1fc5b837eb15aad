"""``swarm run`` and ``swarm topologies``: flags to a RunSpec, a live view, a final summary.

Place in the map (docs/architecture.md, "CLI"): builds a ``RunSpec`` from ``--spec`` and flags and
calls ``launch.execute_run``. Heavy modules are imported inside the functions.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from swarm.cli import options as opt
from swarm.cli.app import app
from swarm.errors import InputError


@app.command()
def run(
    spec: opt.SpecFile = None,
    target: opt.Targets = None,
    engine: opt.Engines = None,
    dialect: opt.Dialect = None,
    model: opt.Model = None,
    api_key_env: opt.ApiKeyEnv = None,
    api_key_file: opt.ApiKeyFile = None,
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
    max_in_flight: opt.MaxInFlight = None,
    duration: Annotated[
        float | None,
        typer.Option(help="stop sending after this many seconds (default: when every agent has finished)"),
    ] = None,
    max_requests: Annotated[
        int | None, typer.Option(help="stop after this many requests (default: no limit)")
    ] = None,
    tokenizer: opt.Tokenizer = None,
    output: opt.Output = None,
    record_text: opt.RecordText = False,
    executor: opt.Executor = None,
    workers: opt.Workers = None,
    address: opt.Address = None,
    ray_timeout: opt.RayTimeout = None,
    worker_writes: opt.WorkerWrites = False,
    emulator_arg: opt.EmulatorArgs = None,
    retries: opt.Retries = None,
    retry_backoff: opt.RetryBackoff = None,
    on_failure: Annotated[
        str | None,
        typer.Option(help="abort_branch (default) or standin: carry on with the stand-in output"),
    ] = None,
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
    """Run an agent swarm against targets (default: the built-in emulator, sglang and trtllm profiles;
    executor: ray)."""
    from swarm.workload.specfiles import load_run_spec_file

    data: dict[str, Any] = {}
    if spec is not None:
        data = load_run_spec_file(spec)
    data = opt.sending_settings(
        data, output=output, record_text=record_text, executor=executor, workers=workers, address=address,
        ray_timeout=ray_timeout, worker_writes=worker_writes, emulator_arg=emulator_arg,
        max_error_rate=max_error_rate, error_window=error_window, first_token_timeout=first_token_timeout,
        idle_timeout=idle_timeout, request_timeout=request_timeout, metrics_interval=metrics_interval,
        flush_interval=flush_interval,
    )  # fmt: skip
    workload = opt.workload_flags(
        data.get("workload") or {}, profile=profile, topology=topology, arrival=arrival, agents=agents,
        system_prompts=system_prompts, seed=seed, context=context, max_in_flight=max_in_flight,
        duration_s=duration, max_requests=max_requests, tokenizer=tokenizer, retries=retries,
        retry_backoff_s=retry_backoff, on_failure=on_failure,
    )  # fmt: skip
    data["workload"] = workload
    if target:
        data["targets"] = parse_targets(target, engine or [], dialect, model, api_key_env, api_key_file)
    elif engine:
        parse_targets([], engine, dialect, model, api_key_env, api_key_file)
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

    topologies_command(name, topologies_dir or [])


def parse_targets(
    targets: list[str],
    engines: list[str],
    dialect: str | None,
    model: str | None,
    api_key_env: str | None,
    api_key_file: str | None = None,
) -> list[dict[str, Any]]:
    out = []
    if engines and len(engines) not in (1, len(targets)):
        raise InputError(
            f"--engine given {len(engines)} times for {len(targets)} targets: give one, or one per target"
        )
    if engines and not targets:
        raise InputError(
            "--engine needs --target NAME=URL (with no target, swarm runs its emulator in both profiles)"
        )
    for i, t in enumerate(targets):
        name, sep, url = t.partition("=")
        if not sep or not name or not url:
            raise InputError(f"--target {t!r}: expected NAME=URL, e.g. sglang=http://127.0.0.1:30000")
        engine = engines[i if len(engines) > 1 else 0] if engines else None
        out.append(
            {
                "name": name,
                "url": url,
                "engine": engine,
                "dialect": dialect,
                "model": model,
                "api_key_env": api_key_env,
                "api_key_file": api_key_file,
            }
        )
    return out


#: Exit codes of ``swarm run`` / ``swarm replay`` by how the run ended (2 is bad input).
EXIT_CODES = {"complete": 0, "failed": 1, "stopped": 3, "interrupted": 130}


def finish_code(manifest: Any, console: Console) -> int:
    """Say why a run did not complete (on ``console``) and return the run's exit code."""
    status = manifest.status.value
    if status != "complete" and manifest.status_reason:
        console.print(
            f"[bold yellow]run {status}:[/] {manifest.status_reason}", highlight=False, soft_wrap=True
        )
    return EXIT_CODES.get(status, 1)


def run_command(
    spec_data: dict[str, Any], show_progress: bool, json_out: bool, source: str = "run spec"
) -> int:
    """Build the RunSpec, run it with a live view, print the summary; returns the exit code."""
    import json

    from swarm.cli.live import LiveDisplay, LiveView
    from swarm.cli.report import summary_table
    from swarm.launch import execute_run, summary_rows
    from swarm.runtime.context import ResolvedTarget
    from swarm.runtime.live_stats import RunStats
    from swarm.runtime.specs import RunSpec
    from swarm.workload.specfiles import validate

    spec = validate(RunSpec, spec_data, source)
    console = Console(stderr=json_out, width=None if sys.stdout.isatty() else 160)
    display = LiveDisplay(LiveView(spec.workload.agents), console, show_progress)

    def on_target_start(target: ResolvedTarget, stats: RunStats) -> None:
        display.start_target(target.name, stats)

    try:
        result = execute_run(spec, on_target_start=on_target_start, source=source)
    finally:
        display.stop()
    summary = summary_rows(result.run_dir)
    emulated = {t.name for t in result.manifest.targets if t.emulated}
    if json_out:
        print(
            json.dumps(
                {
                    "run_dir": str(result.run_dir),
                    "status": result.manifest.status.value,
                    "status_reason": result.manifest.status_reason,
                    "targets": summary,
                    "not_run": [t.name for t in result.manifest.targets if t.outcome == "not_run"],
                },
                indent=2,
            )
        )
    else:
        console.print(summary_table(summary, emulated))
        for t in result.manifest.targets:
            if (why := t.shortfall()) is not None:
                console.print(f"[yellow]{t.name}:[/] {why}", highlight=False, soft_wrap=True)
        if emulated:
            console.print(
                "[dim]figures from swarm's engine emulator, a model of an engine - not measurements of one[/dim]"
            )
        console.print(f"trace: {result.run_dir}  (status: {result.manifest.status.value})")
    return finish_code(result.manifest, console)


def topologies_command(name: str | None, topologies_dir: list[Path]) -> None:
    from swarm.workload.catalog import Catalog
    from swarm.workload.topology import render_ascii

    catalog = Catalog(topology_dirs=topologies_dir)
    console = Console()
    if name is None:
        table = Table(title="topologies")
        for col in ("name", "calls (template)", "description"):
            table.add_column(col)
        from swarm.workload.specfiles import load_yaml

        for n in catalog.topology_names():
            t = catalog.topology(n)
            path = next((d / f"{n}.yaml" for d in catalog.topology_dirs if (d / f"{n}.yaml").is_file()), None)
            desc = (load_yaml(path) or {}).get("description", "") if path else ""
            table.add_row(n, str(t.graph.number_of_nodes()), desc)
        console.print(table)
        console.print("show one: swarm topologies NAME")
        return
    t = catalog.topology(name)
    console.print(
        Group(Text(f"{t.name}: {t.graph.number_of_nodes()} calls in the template"), Text(render_ascii(t)))
    )
