"""Result rows and the table they print as."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Row:
    case: str
    figure: float | None
    unit: str
    baseline: float | None = None
    ratio: float | None = None
    target: str | None = None
    met: bool | None = None
    #: why a target is not met, where the bench can tell (printed under the table)
    note: str | None = None


def invalid_because(
    *,
    expected: int,
    requests: int,
    ok: int,
    workers: int = 1,
    workers_alive: int = 1,
    workers_measured: int = 1,
) -> str | None:
    """Why a case's figures cannot be called met, or None: a "met" needs the expected number of
    requests, every one ok (no failure left unexplained), and every worker alive and measured."""
    problems = []
    if requests != expected:
        problems.append(f"{requests:,} requests of the {expected:,} expected")
    if ok != requests:
        problems.append(f"{requests - ok:,} failed")
    if workers_alive != workers:
        problems.append(f"{workers - workers_alive} of {workers} workers died")
    elif workers_measured != workers:
        problems.append(f"{workers - workers_measured} of {workers} workers not measured")
    return "; ".join(problems) or None


def labelled(case: str, why: str | None) -> str:
    """A case name that says why its figures are not valid, when they are not."""
    return case if why is None else f"{case} (INVALID: {why})"


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def print_rows(rows: list[Row], as_json: bool) -> None:
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return
    headers = ("case", "figure", "unit", "baseline", "ratio", "target", "met")
    table = [headers] + [
        (
            r.case,
            fmt(r.figure),
            r.unit,
            fmt(r.baseline),
            fmt(r.ratio),
            r.target or "-",
            "-" if r.met is None else ("yes" if r.met else "NO"),
        )
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(headers))]
    for j, row in enumerate(table):
        print(
            "  ".join(
                str(c).ljust(w) if i == 0 else str(c).rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if j == 0:
            print("  ".join("-" * w for w in widths))
    for r in rows:
        if r.note:
            print(f"  {r.case}: {r.note}")
    sys.stdout.flush()


class CallbackSink:
    """A TraceSink that hands each record to a function (what a bench keeps of it)."""

    def __init__(self, keep: Callable[[Any], None]) -> None:
        self.keep = keep
        self.rows_lost = 0
        self.failure: str | None = None

    def write(self, record: Any) -> None:
        self.keep(record)

    def write_batch(self, batch: Any) -> None:
        raise TypeError("CallbackSink takes records")

    def maybe_rotate(self) -> None:
        return None

    def close(self) -> None:
        return None


def send_in_process(source: Any, target: Any, keep: Callable[[Any], None], **run: Any) -> Any:
    """Run ``source`` against ``target`` in this process; every record goes to ``keep``."""
    import asyncio

    from swarm.runtime.context import TargetRun
    from swarm.runtime.loop import drive

    return asyncio.run(drive(TargetRun(source, target, CallbackSink(keep), **run)))
