"""Result rows and the table they print as."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass


@dataclass
class Row:
    case: str
    figure: float | None
    unit: str
    baseline: float | None = None
    ratio: float | None = None
    target: str | None = None
    met: bool | None = None


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
    sys.stdout.flush()
