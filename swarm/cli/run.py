"""``swarm run`` and ``swarm topologies``: a RunSpec from ``--spec`` and flags, a live view, a summary.

Place in the map (docs/architecture.md, "CLI"): thin over ``RunSpec`` (its flags are the generated
table's, ``cli/flags.py``) and ``launch.execute_run``. Heavy modules are imported inside the
functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from swarm.cli.app import app
from swarm.cli.flags import Given, takes, validated
from swarm.cli.sending import send_with_view, spec_data, with_showdown

if TYPE_CHECKING:
    from swarm.runtime.frame import RunResult


@app.command()
@takes("run")
def run(*, given: Given) -> None:
    """Run an agent swarm against targets. With no spec, target, profile or topology: the
    emulated showdown (the study's tree of thought beside Claude Code sessions started
    mid-life, 20 s per target) against the built-in emulator's sglang and trtllm profiles, on a
    local Ray."""
    code = run_command(given)
    if code:
        raise typer.Exit(code)


def run_command(given: Given) -> int:
    """Build the RunSpec, run it with a live view, print the summary; returns the exit code."""
    from swarm.launch import execute_run
    from swarm.runtime.specs import RunSpec

    data, source = spec_data(given)
    with_showdown(given, data)
    spec = validated(RunSpec, data, source, given)

    def closing(result: RunResult, console: Console) -> None:
        for t in result.manifest.targets:
            if (why := t.shortfall()) is not None:
                style = "dim" if t.outcome == "complete" else "yellow"
                console.print(f"[{style}]{t.name}:[/] {why}", highlight=False, soft_wrap=True)
        if any(t.emulated for t in result.manifest.targets):
            console.print(
                "[dim]figures from swarm's engine emulator, a model of an engine - not measurements of one[/dim]"
            )
        console.print(f"trace: {result.run_dir}  (status: {result.manifest.status.value})")

    def not_run(result: RunResult) -> dict[str, Any]:
        return {"not_run": [t.name for t in result.manifest.targets if t.outcome == "not_run"]}

    return send_with_view(
        lambda on_start: execute_run(spec, on_target_start=on_start, source=source),
        sessions=spec.workload.agents, given=given, json_extra=not_run, closing=closing,
    )  # fmt: skip


@app.command()
def topologies(
    name: Annotated[str | None, typer.Argument(help="a topology to show as a tree")] = None,
    topologies_dir: Annotated[
        list[Path] | None, typer.Option(help="extra folder of topology YAML files")
    ] = None,
) -> None:
    """List the topologies and agent profiles (synthetic, or the recording or study each comes
    from), or show one topology as an ASCII tree of a small instance."""

    topologies_command(name, topologies_dir or [])


def _made_from(data: dict[str, object]) -> str:
    """A built-in's origin: ``synthetic`` (made up), or the recording or study it names."""
    return "synthetic" if data.get("synthetic") else str(data.get("source") or "-")


def topologies_command(name: str | None, topologies_dir: list[Path]) -> None:
    from swarm.workload.catalog import Catalog
    from swarm.workload.specfiles import load_yaml
    from swarm.workload.topology import render_ascii

    catalog = Catalog(topology_dirs=topologies_dir)
    console = Console()
    if name is None:
        table = Table(title="topologies")
        for col in ("name", "calls (template)", "made from", "description"):
            table.add_column(col)
        for n in catalog.topology_names():
            t = catalog.topology(n)
            path = next((d / f"{n}.yaml" for d in catalog.topology_dirs if (d / f"{n}.yaml").is_file()), None)
            data = (load_yaml(path) or {}) if path else {}
            table.add_row(n, str(t.graph.number_of_nodes()), _made_from(data), data.get("description", ""))
        console.print(table)
        profiles = Table(title="agent profiles")
        for col in ("name", "its topologies", "made from", "description"):
            profiles.add_column(col)
        for n in catalog.profile_names():
            p = catalog.profile(n)
            own = ", ".join(c.name for c in p.topologies) or "-"
            made = "synthetic" if p.synthetic else (p.source or "-")
            profiles.add_row(n, own, made, p.description)
        console.print(profiles)
        console.print("show one: swarm topologies NAME; run a profile as made: swarm run --profile NAME")
        return
    t = catalog.topology(name)
    console.print(
        Group(Text(f"{t.name}: {t.graph.number_of_nodes()} calls in the template"), Text(render_ascii(t)))
    )
