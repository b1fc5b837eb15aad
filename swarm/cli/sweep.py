"""``swarm sweep``: a SweepSpec and a point launcher from flags, progress lines, the sweep's report.

Place in the map (docs/architecture.md, "CLI"): thin over ``SweepSpec`` (``--ladder KNOB=LOADS``
and the flags of its rules) and the base of every point: a ``RunSpec`` from ``--spec`` and the
run flags (``sweep.points.AgentPoints``), or with ``--replay SOURCE`` a ``ReplaySpec`` from the
replay flags (``ReplayPoints``); calls ``sweep.runner.execute_sweep`` and prints
``sweep.report``'s tables. With no flag it runs the emulated showdown (``sweep.spec.SHOWDOWN_*``):
``swarm run``'s showdown over a ladder of agents across the eviction cliff of both emulator
profiles, a window per point, judged by stated SLOs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from swarm.cli.app import app
from swarm.cli.flags import Given, takes, validated
from swarm.cli.sending import spec_data
from swarm.cli.twins import check_simulate_flags, simulation_of
from swarm.errors import InputError

if TYPE_CHECKING:
    from swarm.runtime.specs import SendSpec
    from swarm.sweep.points import PointLauncher
    from swarm.sweep.runner import SweepEvent
    from swarm.sweep.spec import SweepSpec


@app.command()
@takes("sweep")
def sweep(*, given: Given) -> None:
    """Every target at every load of a ladder: curves, capacity at SLO, the eviction cliff
    (default: the emulated showdown, both emulator profiles, 4 to 32 agents, SLOs ttft:2s itl:50ms)."""
    code = sweep_command(given)
    if code:
        raise typer.Exit(code)


def _given_under(given: Given, part: str) -> list[str]:
    """The given flags whose only place is under ``part`` of the spec (``workload``, ``replay``;
    ``--tokenizer`` has a place in both)."""
    return given.given_of(n for n, paths in given.paths.items() if paths and all(p[0] == part for p in paths))


def _spec_replays(given: Given) -> bool:
    """Whether ``--spec`` is a replay's (a ``replay:`` part, as ``swarm replay --spec`` reads)."""
    from swarm.workload.specfiles import load_yaml

    path = given.get("spec")
    data = load_yaml(path) if path is not None else None
    return isinstance(data, dict) and "replay" in data


def showdown(given: Given) -> bool:
    """Whether this sweep is the emulated showdown: no spec, replay, target, profile or topology
    given (``sweep.spec.SHOWDOWN_*``). Otherwise the base is the spec, or the plain defaults
    with every agent started at once."""
    return not any(given.get(name) for name in ("spec", "replay", "target", "profile", "topology"))


def sweep_spec_of(given: Given, replay: bool) -> SweepSpec:
    """The SweepSpec the flags say: the ladder (the showdown's when none is given), its rules."""
    from swarm.sweep.spec import SHOWDOWN_LADDER, SweepSpec, parse_ladder

    ladder = given.get("ladder")
    if ladder is None and replay:
        raise InputError("--replay: give a ladder, e.g. --ladder max_sessions=1,2,4 (or max_in_flight, speed)")
    knob, loads = parse_ladder(ladder or SHOWDOWN_LADDER)
    if knob == "replicas" and "fleet" in given:
        raise InputError(f"--ladder {ladder} sets each point's replicas: drop --fleet")
    data: dict[str, Any] = given.apply({}, skip=("targets",)).get("sweep", {})
    auto_fields = data.pop("auto", {})
    if given.get("auto"):
        if len(loads) != 1:
            raise InputError(f"--auto takes one start value: --ladder {knob}=START, not {ladder}")
        data["auto"] = {"start": loads[0], **auto_fields}
    elif auto_fields:
        raise InputError(f"{', '.join(given.given_of(('factor', 'max_points', 'max_load')))} apply with --auto only")
    else:
        data["loads"] = loads
    slos = list(given.get("slo", []))
    if not slos and showdown(given):  # the showdown states its SLOs
        from swarm.sweep.spec import SHOWDOWN_SLOS

        slos = list(SHOWDOWN_SLOS)
    data.update(knob=knob, slos=slos, output=given.get("output"))
    if data["slos"]:
        from swarm.analysis.metrics import parse_slos

        try:
            parse_slos(data["slos"])
        except ValueError as exc:
            raise InputError(str(exc)) from None
    return validated(SweepSpec, data, "sweep flags", given)


def launcher_of(given: Given, knob: str) -> tuple[PointLauncher, SendSpec]:
    """The points' base (a swarm, or with ``--replay`` a replay) and how they send."""
    from swarm.runtime.specs import ReplaySpec, RunSpec
    from swarm.sweep.points import AgentPoints, ReplayPoints
    from swarm.sweep.spec import SHOWDOWN_EXECUTOR

    replay = given.get("replay")
    simulate = check_simulate_flags(given)
    if replay is not None or _spec_replays(given):
        if wrong := _given_under(given, "workload"):
            raise InputError(f"--replay sends the recorded traffic: {', '.join(wrong)} apply to agent swarms")
        data, source = spec_data(given, skip=("workload", "sweep", "targets") if simulate else ("workload", "sweep"))
        if simulate:
            data.setdefault("executor", "inprocess")
        if replay is not None:
            data.setdefault("replay", {})["source"] = replay
        replay_spec = validated(ReplaySpec, _emulators(data), source, given)
        simulation = simulation_of(given, replay_spec, source) if simulate else None
        return ReplayPoints(replay_spec, simulation=simulation), replay_spec
    if wrong := _given_under(given, "replay"):
        raise InputError(f"{', '.join(wrong)} apply with --replay only")
    is_showdown = showdown(given)
    data, source = spec_data(given, skip=("replay", "sweep", "targets") if simulate else ("replay", "sweep"))
    if simulate:
        data.setdefault("executor", "inprocess")
    workload = data.setdefault("workload", {})
    if knob == "rate" and "arrival" not in workload:
        workload["arrival"] = {"process": "poisson", "rate": 1.0}  # each point sets it
    if is_showdown:
        from swarm.sweep.spec import SHOWDOWN_DURATION_S

        data["workload"] = _showdown_workload(workload)
        data.setdefault("duration_s", SHOWDOWN_DURATION_S)  # Claude Code sessions outlast a point
        data.setdefault("executor", SHOWDOWN_EXECUTOR)  # the emulated showdown runs in process unless told
    elif given.get("spec") is None:
        workload.setdefault("arrival", {"process": "all_at_once"})  # the agents knob: agents live at once
    run_spec = validated(RunSpec, _emulators(data), source if not is_showdown else "sweep flags", given)
    simulation = simulation_of(given, run_spec, source) if simulate else None
    return AgentPoints(run_spec, source=source, simulation=simulation), run_spec


def _emulators(data: dict[str, Any]) -> dict[str, Any]:
    """With no target, the embedded emulators get the showdown's prefix cache when it sets one
    (``SHOWDOWN_CACHE_TOKENS``; None: their default), unless ``--emulator-arg`` says otherwise,
    for a swarm or a replay alike."""
    from swarm.sweep.spec import SHOWDOWN_CACHE_TOKENS

    if not data.get("targets") and not data.get("emulator_args") and SHOWDOWN_CACHE_TOKENS is not None:
        data = {**data, "emulator_args": [f"--cache-tokens={SHOWDOWN_CACHE_TOKENS}"]}
    return data


def _showdown_workload(given: dict[str, Any]) -> dict[str, Any]:
    """The showdown's workload with the flags given over it."""
    from swarm.sweep.spec import SHOWDOWN_WORKLOAD

    return {**SHOWDOWN_WORKLOAD, **given}


def _printer(console: Console, knob: str) -> Any:
    def on_event(event: SweepEvent) -> None:
        from swarm.sweep.spec import format_load

        where = f"{knob}={format_load(event.load)} {event.target}"
        if event.kind == "start":
            console.print(f"point {event.index + 1}: {where} ...", highlight=False)
        elif event.kind == "skip":
            console.print(f"point {event.index + 1}: {where} done before ({event.run_dir}), skipped", highlight=False)
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

    return on_event


def sweep_command(given: Given) -> int:
    """Build the sweep and its launcher, run it with progress lines, print its report; the exit code."""
    from swarm.cli.sweep_view import print_sweep_report
    from swarm.launch import make_executor
    from swarm.sweep.runner import execute_sweep

    sweep_spec = sweep_spec_of(given, given.get("replay") is not None or _spec_replays(given))
    launcher, base = launcher_of(given, sweep_spec.knob)
    console = Console(stderr=True)
    on_event = _printer(console, sweep_spec.knob) if given.get("progress", True) else None
    result = execute_sweep(
        sweep_spec, launcher, list(base.targets), make_executor(base, keep_workers=True),
        emulator_args=base.emulator_args, on_event=on_event, simulation=getattr(launcher, "simulation", None),
    )  # fmt: skip
    print_sweep_report(result.folder, given.get("html"), bool(given.get("json_out")))
    if result.interrupted:
        console.print(
            f"[yellow]sweep interrupted:[/] {result.manifest.status_reason}; re-run the same command to resume"
        )
        return 130
    return 0


def _num(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)
