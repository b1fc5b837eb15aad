"""``swarm replay``: a run folder or a public trace, sent again as a run of its own.

Place in the map (docs/architecture.md, "CLI"): thin over ``ReplaySpec`` (the recorded source under
``replay:``, the sending settings beside it; flags from the generated table, ``cli/flags.py``) and
``launch.execute_replay``, in process or on Ray, or with ``--simulate`` in virtual time against
engine twins (``cli/twins.simulation_of``, as ``swarm simulate``'s).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from swarm.cli import flagdefs
from swarm.cli.app import app
from swarm.cli.flags import Given, takes, validated
from swarm.cli.sending import send_with_view, spec_data
from swarm.cli.twins import check_simulate_flags, simulation_of

if TYPE_CHECKING:
    from swarm.runtime.frame import RunResult

@app.command()
@takes("replay")
def replay(
    source: Annotated[str | None, typer.Argument(help=getattr(flagdefs, "ARGUMENTS", {}).get("source"))] = None, *, given: Given
) -> None:
    """Send recorded traffic again: a swarm run, or a public trace, as a new run (with
    --simulate, in virtual time against engine twins)."""
    code = replay_command(source, given)
    if code:
        raise typer.Exit(code)


def replay_command(source: str | None, given: Given) -> int:
    """Read the source, replay it with a live view, summarise; returns the exit code."""
    from swarm.errors import InputError
    from swarm.launch import execute_replay, replay_plan_for
    from swarm.runtime.replay_source import group_sessions
    from swarm.runtime.specs import ReplaySpec

    simulate = check_simulate_flags(given)
    data, where = spec_data(given, skip=("targets",) if simulate else ())
    if source is not None:
        data.setdefault("replay", {})["source"] = source
    if simulate:
        data.setdefault("executor", "inprocess")
    spec = validated(ReplaySpec, data, where, given)
    simulation = simulation_of(given, spec, where) if simulate else None
    if not spec.replay.source:
        raise InputError("swarm replay: give the SOURCE to replay (or replay: source: in --spec)")
    if (tokenizer := spec.replay.tokenizer) is not None and not Path(tokenizer).is_file():
        raise InputError(f"--tokenizer {tokenizer}: no such file")  # before the trace is read
    plan = replay_plan_for(spec)
    console = Console(stderr=bool(given.get("json_out")))
    for note in plan.notes:
        console.print(f"[yellow]{note}[/yellow]")

    executor = None
    if simulation is not None:
        from swarm.sim.executor import SimulatedExecutor

        executor = SimulatedExecutor(simulation)

    def closing(result: RunResult, console: Console) -> None:
        for t in result.manifest.targets if executor is not None else ():
            if (why := t.shortfall()) is not None:
                console.print(f"[dim]{t.name}:[/] {why}", highlight=False, soft_wrap=True)
        for account in executor.accounts if executor is not None else ():
            console.print(
                f"{account.target}: {account.simulated_s:,.1f} s simulated in {account.wall_s:,.1f} s "
                f"({account.speedup:,.0f}x real time, {account.events:,} clock events)",
                highlight=False,
            )
        if executor is not None:
            console.print("[dim]replayed in virtual time against engine twins: a model's figures, not measurements[/dim]")
        console.print(
            f"replay of {plan.source} ({plan.source_format}, {len(plan.items)} requests): "
            f"{result.run_dir}  (status: {result.manifest.status.value})"
        )

    def extra(result: RunResult) -> dict[str, Any]:
        out: dict[str, Any] = {"replay_of": result.manifest.replay_of}
        if executor is not None:
            out["simulation"] = [vars(a) | {"speedup": a.speedup} for a in executor.accounts]
        return out

    return send_with_view(
        lambda on_start: execute_replay(
            spec, plan=plan, on_target_start=on_start, simulation=simulation, executor=executor
        ),
        # the live view counts sessions (recorded sessions, times the copies)
        sessions=len(group_sessions(plan.items)) * spec.replay.copies,
        given=given,
        json_extra=extra,
        closing=closing,
    )
