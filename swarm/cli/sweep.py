"""``swarm sweep``: flags to a SweepSpec and a point launcher, progress lines, the sweep's report.

Place in the map (docs/architecture.md, "CLI"): builds a ``SweepSpec`` and an ``AgentPoints`` (a
``RunSpec`` from ``--spec`` and flags) or ``ReplayPoints`` (``--replay SOURCE``), calls
``sweep.runner.execute_sweep`` and prints ``analysis.sweep_report``'s tables. With no flag it
runs the emulated showdown: both emulator profiles with a small KV budget, a ladder of agents
across the eviction cliff.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from swarm.cli import options as opt
from swarm.cli.app import app
from swarm.errors import InputError

#: the emulated showdown (``swarm sweep`` with nothing given): its workload, ladder and budget
SHOWDOWN_WORKLOAD: dict[str, Any] = {
    "system_prompts": 1,
    "mix": [{"profile": "support_agent", "topology": "react"}],
    "arrival": {"process": "all_at_once"},
}
SHOWDOWN_LADDER = "4,8,16,32,64"
SHOWDOWN_CACHE_TOKENS = 40_000


def _loads(flag: str, text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"--{flag} {text!r}: expected numbers separated by commas, e.g. 4,8,16") from None
    if not values:
        raise InputError(f"--{flag}: give at least one value")
    return values


@app.command()
def sweep(
    agents: Annotated[
        str | None, typer.Option(help="ladder of agent counts, e.g. 4,8,16 (--auto: the start)")
    ] = None,
    max_in_flight: Annotated[str | None, typer.Option(help="ladder of in-flight caps")] = None,
    rate: Annotated[str | None, typer.Option(help="ladder of agent arrival rates (per second)")] = None,
    max_sessions: Annotated[
        str | None,
        typer.Option(
            help="replays: ladder of sessions in progress at once (a closed loop, as swarm replay's)"
        ),
    ] = None,
    speed: Annotated[str | None, typer.Option(help="replays: ladder of time compressions")] = None,
    auto: Annotated[
        bool, typer.Option("--auto", help="grow the knob from its one value until a stop rule fires")
    ] = False,
    factor: Annotated[float, typer.Option(help="--auto: each load is the last times this")] = 2.0,
    max_points: Annotated[int, typer.Option(help="--auto: at most this many points")] = 8,
    max_load: Annotated[float | None, typer.Option(help="--auto: never above this load")] = None,
    stop_error_rate: Annotated[
        float, typer.Option(help="--auto stops (and a point is invalid) above this error share")
    ] = 0.05,
    slo_factor: Annotated[
        float, typer.Option(help="--auto stops when an SLO figure passes its bound times this")
    ] = 2.0,
    min_gain: Annotated[
        float, typer.Option(help="--auto stops when output tokens/s rises by less than this share")
    ] = 0.05,
    slo: Annotated[
        list[str] | None,
        typer.Option(help="an SLO, e.g. --slo ttft:500ms --slo itl:50ms (capacity, goodput)"),
    ] = None,
    slo_percentile: Annotated[
        str, typer.Option(help="p50, p90 or p99: the percentile an SLO bounds")
    ] = "p99",
    steady_fraction: Annotated[
        float, typer.Option(help="steady window: share of the median in-flight level")
    ] = 0.8,
    cliff_fraction: Annotated[
        float, typer.Option(help="eviction cliff: share of the low-load hit/ideal")
    ] = 0.5,
    reset_cache: Annotated[
        bool, typer.Option(help="empty each target's prefix cache before each point, where the engine can")
    ] = True,
    kv_budget: Annotated[
        int | None, typer.Option(help="the targets' prefix-cache size in tokens, for the predicted cliff")
    ] = None,
    spec: opt.SpecFile = None,
    profile: Annotated[str | None, typer.Option(help="agent profile (default support_agent)")] = None,
    topology: Annotated[str | None, typer.Option(help="topology (default react)")] = None,
    system_prompts: Annotated[int | None, typer.Option(help="distinct system prompts (default 1)")] = None,
    seed: Annotated[int | None, typer.Option(help="seed of the workload, the same at every point")] = None,
    arrival: Annotated[str | None, typer.Option(help="agent arrivals (default all_at_once)")] = None,
    duration: Annotated[
        float | None, typer.Option(help="each point stops sending after this many seconds")
    ] = None,
    replay: Annotated[
        str | None, typer.Option(help="sweep a replay of this run folder or trace file")
    ] = None,
    format: Annotated[str | None, typer.Option("--format", help="--replay: the trace format")] = None,
    mode: Annotated[str | None, typer.Option(help="--replay: timed or dependent")] = None,
    limit: Annotated[int | None, typer.Option(help="--replay trace files: the first N requests")] = None,
    copies: Annotated[int, typer.Option(help="--replay: play every session N times over")] = 1,
    target: opt.Targets = None,
    engine: opt.Engines = None,
    dialect: opt.Dialect = None,
    model: opt.Model = None,
    api_key_env: opt.ApiKeyEnv = None,
    api_key_file: opt.ApiKeyFile = None,
    output: Annotated[
        str | None, typer.Option(help="the sweep folder (default sweeps/sweep-<digest>; re-run to resume)")
    ] = None,
    executor: opt.Executor = None,
    workers: opt.Workers = None,
    address: opt.Address = None,
    ray_timeout: opt.RayTimeout = None,
    emulator_arg: opt.EmulatorArgs = None,
    first_token_timeout: opt.FirstTokenTimeout = None,
    idle_timeout: opt.IdleTimeout = None,
    request_timeout: opt.RequestTimeout = None,
    metrics_interval: opt.MetricsInterval = None,
    html: Annotated[Path | None, typer.Option("--html", help="also write the sweep's HTML report")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the sweep's report as JSON")] = False,
) -> None:
    """Every target at every load of a ladder: curves, capacity at SLO, the eviction cliff
    (default: the emulated showdown, both emulator profiles with a small KV budget)."""
    from swarm.sweep.spec import AutoLadder, StopRules, SweepSpec
    from swarm.workload.specfiles import load_run_spec_file, validate

    ladders = {
        k: v
        for k, v in (
            ("agents", agents),
            ("max_in_flight", max_in_flight),
            ("rate", rate),
            ("max_sessions", max_sessions),
            ("speed", speed),
        )
        if v is not None
    }
    if len(ladders) > 1:
        raise InputError(f"give one load knob, not {', '.join('--' + k.replace('_', '-') for k in ladders)}")
    workload_flags = {
        "profile": profile, "topology": topology, "system_prompts": system_prompts, "seed": seed,
        "arrival": arrival, "duration_s": duration,
    }  # fmt: skip
    replay_flags = {"format": format, "mode": mode, "limit": limit, "copies": copies if copies != 1 else None}
    if replay is not None:
        given = [k for k, v in workload_flags.items() if v is not None]
        if given:
            raise InputError(
                f"--replay sends the recorded traffic: {', '.join(_flag(k) for k in given)} apply to agent swarms"
            )
    else:
        given = [k for k, v in replay_flags.items() if v is not None]
        if given:
            raise InputError(f"{', '.join(_flag(k) for k in given)} apply with --replay only")
    if not ladders:
        if replay is not None:
            raise InputError("--replay: give a ladder with --max-sessions, --max-in-flight or --speed")
        ladders = {"agents": SHOWDOWN_LADDER}
    knob, text = next(iter(ladders.items()))
    values = _loads(knob.replace("_", "-"), text)
    if auto and len(values) != 1:
        raise InputError(f"--auto takes one start value for --{knob.replace('_', '-')}, not {text}")
    sweep_data: dict[str, Any] = {
        "knob": knob, "slos": list(slo or []), "slo_percentile": slo_percentile,
        "steady_fraction": steady_fraction, "cliff_fraction": cliff_fraction, "reset_cache": reset_cache,
        "output": output, "kv_budget_tokens": kv_budget,
        "stop": StopRules(max_error_rate=stop_error_rate, slo_factor=slo_factor, min_gain=min_gain).model_dump(),
    }  # fmt: skip
    if auto:
        sweep_data["auto"] = AutoLadder(
            start=values[0], factor=factor, max_points=max_points, max_load=max_load
        ).model_dump()
    else:
        sweep_data["loads"] = values
    sweep_spec = validate(SweepSpec, sweep_data, "sweep flags")
    if slo:
        from swarm.analysis.metrics import parse_slos

        try:
            parse_slos(slo)
        except ValueError as exc:
            raise InputError(str(exc)) from None
    data: dict[str, Any] = {}
    if spec is not None:
        data = load_run_spec_file(spec)
    emulator_args = list(emulator_arg or [])
    if not target and not data.get("targets") and not emulator_args and not data.get("emulator_args"):
        emulator_args = [f"--cache-tokens={SHOWDOWN_CACHE_TOKENS}"]
    data = opt.sending_settings(
        data, output=None, record_text=False, executor=executor, workers=workers, address=address,
        ray_timeout=ray_timeout, worker_writes=False, emulator_arg=emulator_args, max_error_rate=None,
        error_window=None, first_token_timeout=first_token_timeout, idle_timeout=idle_timeout,
        request_timeout=request_timeout, metrics_interval=metrics_interval, flush_interval=None,
    )  # fmt: skip
    if replay is None:
        data.setdefault("executor", "inprocess")
    else:
        data["executor"] = data.get("executor", "inprocess")
    targets_data = []
    if target:
        from swarm.cli.run import parse_targets

        targets_data = parse_targets(target, engine or [], dialect, model, api_key_env, api_key_file)
    if knob == "rate" and arrival is None and "arrival" not in (data.get("workload") or {}):
        workload_flags["arrival"] = "poisson:1"  # a rate knob needs arrivals with a rate; each point sets it
    code = sweep_command(
        sweep_spec, data, targets_data, replay=replay, replay_options={**replay_flags, "copies": copies},
        workload_flags=workload_flags, showdown=spec is None, html=html, json_out=json_out,
        source=f"{spec} (with flags)" if spec is not None else "sweep flags",
    )  # fmt: skip
    if code:
        raise typer.Exit(code)


def _flag(name: str) -> str:
    return "--" + {"duration_s": "duration"}.get(name, name).replace("_", "-")


def _workload(data: dict[str, Any], flags: dict[str, Any], showdown_defaults: bool) -> dict[str, Any]:
    base = {**(SHOWDOWN_WORKLOAD if showdown_defaults else {}), **(data.get("workload") or {})}
    return opt.workload_flags(base, **flags)


def sweep_command(
    sweep_spec: Any,
    data: dict[str, Any],
    targets_data: list[dict[str, Any]],
    *,
    replay: str | None,
    replay_options: dict[str, Any],
    workload_flags: dict[str, Any],
    showdown: bool,
    html: Path | None,
    json_out: bool,
    source: str = "sweep flags",
) -> int:
    """Build the launcher, run the sweep with progress lines, print its report; the exit code."""
    from swarm.launch import make_executor
    from swarm.runtime.specs import RunSpec, TargetSpec
    from swarm.sweep.points import AgentPoints, PointLauncher, ReplayPoints
    from swarm.sweep.runner import SweepEvent, execute_sweep
    from swarm.sweep.spec import format_load
    from swarm.workload.specfiles import validate

    console = Console(stderr=True)
    launcher: PointLauncher
    if replay is None:
        data = {**data, "workload": _workload(data, workload_flags, showdown)}
        run_spec = validate(RunSpec, data, source)
        launcher = AgentPoints(run_spec, source=source)
    else:
        from swarm.cli.replay import build_plan

        run_spec = validate(RunSpec, data, source)
        plan, filters = build_plan(replay, replay_options["format"], limit=replay_options["limit"])
        launcher = ReplayPoints(
            plan,
            {
                "mode": replay_options["mode"], "copies": replay_options["copies"], "filters": filters,
                "emulator_args": run_spec.emulator_args, "spec": run_spec,
            },
        )  # fmt: skip
    executor = make_executor(
        run_spec.executor, workers=run_spec.workers, address=run_spec.address,
        ray_timeout_s=run_spec.ray_timeout_s, flush_interval_s=run_spec.flush_interval_s, keep_workers=True,
    )  # fmt: skip
    targets = [TargetSpec(**t) for t in targets_data] or list(run_spec.targets)

    def on_event(event: SweepEvent) -> None:
        where = f"{sweep_spec.knob}={format_load(event.load)} {event.target}"
        if event.kind == "start":
            console.print(f"point {event.index + 1}: {where} ...", highlight=False)
        elif event.kind == "skip":
            console.print(
                f"point {event.index + 1}: {where} done before ({event.run_dir}), skipped", highlight=False
            )
        elif event.kind == "done" and event.result is not None:
            f = event.result.figures
            note = "" if event.result.validity.valid else f"  INVALID: {event.result.validity.reason}"
            console.print(
                f"point {event.index + 1}: {where}: {f.requests} requests in the steady window, "
                f"{_num(f.output_tokens_per_s)} out tok/s, TTFT p99 {_num(f.ttft_ms.p99)} ms, "
                f"hit/ideal {_num(f.hit_vs_ideal, '.2f')}{note}",
                highlight=False,
                soft_wrap=True,
            )
        elif event.kind == "stop":
            console.print(f"[yellow]{event.target} stops climbing:[/] {event.reason}", highlight=False)

    result = execute_sweep(
        sweep_spec, launcher, targets, executor, emulator_args=run_spec.emulator_args, on_event=on_event
    )
    from swarm.cli.sweep_view import print_sweep_report

    print_sweep_report(result.folder, html, json_out)
    if result.interrupted:
        console.print(
            f"[yellow]sweep interrupted:[/] {result.manifest.status_reason}; re-run the same command to resume"
        )
        return 130
    return 0


def _num(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)
