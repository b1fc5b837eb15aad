"""``swarm export``: a run's trace as Mooncake JSONL or CSV.

Place in the map (docs/architecture.md, "CLI"): calls ``replay.export``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from swarm.cli.app import app
from swarm.errors import InputError


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
