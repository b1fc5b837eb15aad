"""``swarm replay``: a run folder or a public trace, sent again as a run of its own.

Place in the map (docs/architecture.md, "CLI"): thin over ``ReplaySpec`` (the recorded source under
``replay:``, the sending settings beside it; flags from the generated table, ``cli/flags.py``) and
``launch.execute_replay``, in process or on Ray.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from swarm.cli import flagdefs
from swarm.cli.app import app
from swarm.cli.flags import Given, takes, validated
from swarm.cli.sending import send_with_view, spec_data

if TYPE_CHECKING:
    from swarm.runtime.frame import RunResult

@app.command()
@takes("replay")
def replay(
    source: Annotated[str | None, typer.Argument(help=getattr(flagdefs, "ARGUMENTS", {}).get("source"))] = None, *, given: Given
) -> None:
    """Send recorded traffic again: a swarm run, or a public trace, as a new run."""
    code = replay_command(source, given)
    if code:
        raise typer.Exit(code)


def replay_command(source: str | None, given: Given) -> int:
    """Read the source, replay it with a live view, summarise; returns the exit code."""
    from swarm.errors import InputError
    from swarm.launch import execute_replay, replay_plan_for
    from swarm.runtime.replay_source import group_sessions
    from swarm.runtime.specs import ReplaySpec

    data, where = spec_data(given)
    if source is not None:
        data.setdefault("replay", {})["source"] = source
    spec = validated(ReplaySpec, data, where, given)
    if not spec.replay.source:
        raise InputError("swarm replay: give the SOURCE to replay (or replay: source: in --spec)")
    if (tokenizer := spec.replay.tokenizer) is not None and not Path(tokenizer).is_file():
        raise InputError(f"--tokenizer {tokenizer}: no such file")  # before the trace is read
    plan = replay_plan_for(spec)
    console = Console(stderr=bool(given.get("json_out")))
    for note in plan.notes:
        console.print(f"[yellow]{note}[/yellow]")

    def closing(result: RunResult, console: Console) -> None:
        console.print(
            f"replay of {plan.source} ({plan.source_format}, {len(plan.items)} requests): "
            f"{result.run_dir}  (status: {result.manifest.status.value})"
        )

    return send_with_view(
        lambda on_start: execute_replay(spec, plan=plan, on_target_start=on_start),
        # the live view counts sessions (recorded sessions, times the copies)
        sessions=len(group_sessions(plan.items)) * spec.replay.copies,
        given=given,
        json_extra=lambda result: {"replay_of": result.manifest.replay_of},
        closing=closing,
    )
