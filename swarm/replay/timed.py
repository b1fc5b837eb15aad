"""Flat request traces (one request a line or row, arrival times, no structure) as timed plans.

Place in the map (docs/architecture.md, "Replay"): what the flat formats (``mooncake``,
``azure``, ``burstgpt``) share: their rows in order, the filters (``window``, ``sample``,
``limit``), arrivals out of order refused (or skipped), the plan. A format module supplies
the rows; a prompt is synthesised from the row's block ids (``blocktext``), or unique when
there are none.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from swarm.errors import InputError
from swarm.record import RequestIdentity
from swarm.replay.format import ReadOptions
from swarm.replay.plan import ReplayItem, ReplayPlan
from swarm.replay.reading import BadLines, Filters, in_window


@dataclass
class Row:
    line: int
    t_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    session: str = ""


def _in_order(rows: Iterator[Row], bad: BadLines) -> Iterator[Row]:
    """The rows, but one earlier than the one before it, which goes to ``bad``."""
    last_t = -math.inf
    for row in rows:
        if row.t_s < last_t:
            bad.bad(
                row.line,
                f"timestamp {row.t_s:g} s is earlier than the line before ({last_t:g} s): out of order",
            )
            continue
        last_t = row.t_s
        yield row


def flat_plan(
    path: Path, fmt: str, rows: Iterator[Row], filters: Filters, bad: BadLines, block_tokens: int
) -> ReplayPlan:
    """The timed plan of a flat trace's ``rows`` after ``filters``; bad lines noted."""
    rng = random.Random(f"sample:{filters.seed}")
    items: list[ReplayItem] = []
    for row, rel in in_window(_in_order(rows, bad), filters.window):
        if filters.sample is not None and rng.random() >= filters.sample:
            continue
        items.append(
            ReplayItem(
                index=len(items),
                offset_s=rel,
                prompt_tokens=max(row.prompt_tokens, 1),
                max_tokens=max(row.output_tokens, 1),
                block_ids=row.hash_ids,
                block_tokens=block_tokens,
                identity=RequestIdentity(
                    session_id=row.session,
                    node=f"line{row.line}",
                    request_id=f"{path.name}:{row.line}",
                    agent_id=-1,
                ),
            )
        )
        if filters.limit is not None and len(items) >= filters.limit:
            break
    if items and filters.window is not None:
        base = items[0].offset_s
        items = [dataclasses.replace(it, offset_s=it.offset_s - base) for it in items]
    plan = ReplayPlan(items=items, source=str(path), source_format=fmt, default_mode="timed")
    if bad.count:
        plan.notes.append(f"skipped {bad.count} bad line(s); first: {bad.first}")
    if not items:
        raise InputError(f"{path}: no requests left to replay (after filters)")
    return plan


def csv_rows(
    path: Path, bad: BadLines, columns: tuple[str, str, str], seconds: Callable[[str], float],
    session_column: str | None = None,
) -> Iterator[Row]:  # fmt: skip
    """The rows of a CSV trace: ``columns`` (time, prompt tokens, output tokens) by header name;
    ``seconds`` turns a time cell into seconds (on any origin); a row that cannot be read goes
    to ``bad``; a missing column is an InputError naming line 1."""
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            raise InputError(f"{path}: line 1: missing column(s) {missing} (found: {header})")
        time_col, in_col, out_col = columns
        for record in reader:
            try:
                t_s = seconds((record.get(time_col) or "").strip())
                n_in = int(float(record.get(in_col) or "x"))
                n_out = int(float(record.get(out_col) or "x"))
                if n_in < 0 or n_out < 0:
                    raise ValueError("token counts must be non-negative")
            except (ValueError, TypeError) as exc:
                bad.bad(reader.line_num, f"cannot read row: {exc}")
                continue
            session = (record.get(session_column) or "").strip() if session_column else ""
            yield Row(reader.line_num, t_s, n_in, n_out, (), session)


def iso_seconds() -> Callable[[str], float]:
    """A cell reader for ISO date-times (fractions past microseconds dropped): seconds since
    the first cell it read."""
    first: list[dt.datetime] = []

    def read(cell: str) -> float:
        head, _, frac = cell.partition(".")
        stamp = dt.datetime.fromisoformat(head + ("." + frac[:6] if frac else ""))
        if not first:
            first.append(stamp)
        return (stamp - first[0]).total_seconds()

    return read


def plain_seconds() -> Callable[[str], float]:
    """A cell reader for seconds as a number (finite, not negative)."""
    return _plain_seconds


def _plain_seconds(cell: str) -> float:
    """A cell reader for seconds as a number (finite, not negative)."""
    t_s = float(cell)
    if t_s < 0 or not math.isfinite(t_s):
        raise ValueError(f"bad timestamp {cell!r}")
    return t_s


def csv_reader(
    fmt: str, columns: tuple[str, str, str], seconds: Callable[[], Callable[[str], float]],
    session_column: str | None = None,
) -> Callable[[str, ReadOptions], ReplayPlan]:  # fmt: skip
    """The ``read`` of a CSV format: its ``columns`` (time, prompt tokens, output tokens), a new
    time-cell reader per file from ``seconds``, and the column that names sessions, if any."""

    def read(source: str, options: ReadOptions) -> ReplayPlan:
        p = Path(source)
        if not p.is_file():
            raise InputError(f"{p}: no such file")
        bad = BadLines(p, options.skip_bad_lines)
        rows = csv_rows(p, bad, columns, seconds(), session_column)
        return flat_plan(p, fmt, rows, options.filters, bad, block_tokens=512)

    return read
