"""``swarm export``: a run's trace as Mooncake JSONL or CSV.

Place in the map (docs/architecture.md, "CLI"): calls ``replay.export``; ``--format``,
``--source-target`` and ``--output`` are the flags replay and the reports take.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from swarm.cli.app import app
from swarm.cli.flags import Given, takes
from swarm.errors import InputError


@app.command()
@takes("export")
def export(run_dir: Annotated[str, typer.Argument(help="a run folder")], *, given: Given) -> None:
    """Write a run as a trace other tools read (Mooncake JSON lines, or CSV)."""
    from swarm.replay.export import FORMATS, export_run

    fmt = given.get("format", "mooncake")
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: swarm export writes {' or '.join(FORMATS)}")
    output = given.get("output")
    count = export_run(run_dir, fmt, Path(output) if output is not None else None, given.get("source_target"))
    if output is not None:
        print(f"wrote {count} requests to {output}", file=sys.stderr)
