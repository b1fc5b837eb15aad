"""What ``swarm run`` and ``swarm replay`` share around the library call: the spec's data from
``--spec`` and the flags, the live view, the closing summary and the exit code.

Place in the map (docs/architecture.md, "CLI"): command support, no library logic: the spec
is validated by its model, the run by ``launch``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from swarm.analysis.rows import SUMMARY_COLUMNS
from swarm.cli.flags import Given
from swarm.cli.live import LiveDisplay, LiveView

if TYPE_CHECKING:
    from swarm.runtime.context import ResolvedTarget
    from swarm.runtime.frame import RunResult
    from swarm.runtime.live_stats import RunStats
    from swarm.trace.manifest import RunManifest

#: Exit codes of ``swarm run`` / ``swarm replay`` by how the run ended (2 is bad input).
EXIT_CODES = {"complete": 0, "failed": 1, "stopped": 3, "interrupted": 130}


def spec_data(given: Given, skip: tuple[str, ...] = ()) -> tuple[dict[str, Any], str]:
    """The spec's data: ``--spec``'s file (if given) with the given flags written over it (but
    those under ``skip``), and where it came from (for errors: ``spec.yaml (with flags)`` or
    ``flags``); ``--output`` is the folder run folders go in (a sweep's is its own folder)."""
    from swarm.runtime.specs import sending_moved_up
    from swarm.workload.specfiles import load_run_spec_file

    path = given.get("spec")
    data: dict[str, Any] = sending_moved_up(load_run_spec_file(path), str(path)) if path is not None else {}
    data = given.apply(data, skip)
    if "output" in given and given.command != "sweep":
        data["output_dir"] = given.get("output")
    return data, (f"{path} (with flags)" if path is not None else "flags")


def with_showdown(given: Given, data: dict[str, Any]) -> None:
    """With no spec file, no target and no profile or topology named, the emulated showdown's
    workload and duration (``workload/showdown.py``) in ``data``: what ``swarm run`` and
    ``swarm simulate`` send when told nothing."""
    if given.get("spec") is None and not data.get("targets") and "mix" not in data.get("workload", {}):
        from swarm.workload.showdown import SHOWDOWN_DURATION_S, showdown_workload

        data["workload"] = showdown_workload(data.get("workload", {}))
        data.setdefault("duration_s", SHOWDOWN_DURATION_S)


def finish_code(manifest: RunManifest, console: Console) -> int:
    """Say why a run did not complete (on ``console``) and return the run's exit code."""
    status = manifest.status.value
    if status != "complete" and manifest.status_reason:
        console.print(
            f"[bold yellow]run {status}:[/] {manifest.status_reason}", highlight=False, soft_wrap=True
        )
    return EXIT_CODES.get(status, 1)


def send_with_view(
    execute: Callable[[Callable[[ResolvedTarget, RunStats], None]], RunResult],
    *,
    sessions: int,
    given: Given,
    json_extra: Callable[[RunResult], dict[str, Any]],
    closing: Callable[[RunResult, Console], None],
) -> int:
    """Run ``execute`` (given the live view's start-of-target hook) under the live view of
    ``sessions`` sessions, then print the summary (``--json``: one object, with
    ``json_extra``'s keys; else the table and ``closing``'s lines); the exit code."""
    from swarm.launch import summary_rows

    json_out = bool(given.get("json_out"))
    console = Console(stderr=json_out, width=None if sys.stdout.isatty() else 160)
    display = LiveDisplay(LiveView(sessions), console, given.get("progress", True) and not json_out)

    def on_target_start(target: ResolvedTarget, stats: RunStats) -> None:
        display.start_target(target.name, stats)

    try:
        result = execute(on_target_start)
    finally:
        display.stop()
    summary = summary_rows(result.run_dir)
    manifest = result.manifest
    if json_out:
        print(
            json.dumps(
                {
                    "run_dir": str(result.run_dir), "status": manifest.status.value,
                    "status_reason": manifest.status_reason, **json_extra(result), "targets": summary,
                },
                indent=2,
            )
        )  # fmt: skip
    else:
        console.print(summary_table(summary, {t.name for t in manifest.targets if t.emulated}))
        closing(result, console)
    return finish_code(manifest, console)


def summary_table(summary: dict[str, dict[str, Any]], emulated: set[str]) -> Table:
    """The closing summary of ``swarm run`` / ``swarm replay`` (``analysis.summary``'s JSON
    shape, one row per target), columns from ``rows.SUMMARY_COLUMNS``."""
    table = Table(title="summary (from the trace)")
    table.add_column("target", justify="left")
    table.add_column("engine", justify="left")
    for col in SUMMARY_COLUMNS:
        table.add_column(col.title, justify="right")
    for name, s in summary.items():
        engine = s["engine"] + (" (emulator)" if name in emulated else "")
        table.add_row(name, engine, *[col.cell(s) for col in SUMMARY_COLUMNS])
    return table


def write_or_print(text: str, path: str | None) -> None:
    """A reporting command's result: into the file ``path`` (``--output``), else to standard output."""
    from pathlib import Path

    if path is None:
        print(text)
        return
    Path(path).write_text(text + "\n", encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)


def report_console(output: str | None, width: int | None = None) -> Console:
    """The console a reporting command prints its tables on: the terminal, or (``--output``) a
    record of them that ``save_report`` writes to the file."""
    import io

    if output is None:
        return Console(width=width if width is not None or sys.stdout.isatty() else 160)
    return Console(record=True, file=io.StringIO(), width=width or 160)


def save_report(console: Console, output: str | None) -> None:
    """With ``--output``, the tables ``console`` recorded, written to that file as plain text."""
    if output is not None:
        console.save_text(output)
        print(f"wrote {output}", file=sys.stderr)
