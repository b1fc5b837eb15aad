"""Reading trace files, whatever their format: bad lines, JSON lines and documents, filters.

Place in the map (docs/architecture.md, "Replay"): what every format module (``mooncake``,
``bailian_trace``, ``trtllm_trace``, ...) shares and none of them owns. Bad input (a malformed
line, a missing field) is an ``InputError`` naming the file and line, or with ``skip_bad_lines``
a skipped line counted for the plan's notes (``BadLines``). Filters of flat traces: ``window``
(seconds from the trace start, ``START:END``), ``sample`` (a seeded fraction), ``limit`` (the
first N kept).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from swarm.errors import InputError


@dataclass(frozen=True)
class Filters:
    limit: int | None = None
    window: tuple[float, float] | None = None
    sample: float | None = None
    seed: int = 0


def parse_window(text: str | None) -> tuple[float, float] | None:
    if not text:
        return None
    start, sep, end = text.partition(":")
    try:
        lo = float(start) if start else 0.0
        hi = float(end) if end else math.inf
    except ValueError:
        raise InputError(f"--window {text!r}: expected START:END in seconds") from None
    if not sep or lo < 0 or hi <= lo:
        raise InputError(f"--window {text!r}: expected START:END in seconds with START < END")
    return lo, hi


class BadLines:
    """Bad lines of a line-based trace: an InputError naming the file and line, or with
    ``skip`` a count and the first one (for the plan's notes)."""

    def __init__(self, path: Path, skip: bool) -> None:
        self.path, self.skip, self.count, self.first = path, skip, 0, ""

    def bad(self, line: int, why: str) -> None:
        message = f"{self.path}: line {line}: {why}"
        if not self.skip:
            raise InputError(message + " (use --skip-bad-lines to skip such lines)")
        self.count += 1
        self.first = self.first or message


T = TypeVar("T")


def parsed_lines(path: Path, bad: BadLines, parse: Callable[[str, int], T]) -> Iterator[tuple[int, T]]:
    """(line number, ``parse(text, line number)``) for each non-blank line of a JSON-lines
    trace (a leading byte-order mark dropped); a line that is not UTF-8, not JSON, nested too
    deeply or refused by ``parse`` (a ValueError) goes to ``bad``."""
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8").removeprefix("\ufeff")
                if not text.strip():
                    continue
                value = parse(text, line_no)
            except UnicodeDecodeError as exc:
                bad.bad(line_no, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
                continue
            except json.JSONDecodeError as exc:
                bad.bad(line_no, f"not valid JSON ({exc.msg}); truncated line?")
                continue
            except RecursionError:
                bad.bad(line_no, "JSON nested too deeply to be a trace record")
                continue
            except ValueError as exc:
                bad.bad(line_no, str(exc))
                continue
            yield line_no, value


def document_files(path: str | Path, suffix: str) -> list[Path]:
    """The files of a trace kept one document per file: ``path`` itself, or a folder's
    ``*<suffix>`` files in name order; an InputError naming ``path`` when there are none."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.glob(f"*{suffix}") if f.is_file())
        if not files:
            raise InputError(f"{p}: no {suffix} files in this folder")
        return files
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    return [p]


def read_json_document(path: Path) -> tuple[str, object]:
    """The text of a one-document JSON trace file and its parsed value; InputErrors name the
    file (and the line, for invalid JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
        return text, json.loads(text)
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: line {exc.lineno}: not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deeply to be a trace") from None


def array_lines(text: str, key: str, values: list[object]) -> list[int]:
    """The line on which each element of the document's ``key`` array (``values``, as parsed)
    starts; best effort: empty when the first ``"key"`` in the text is not that array (a key
    of that name inside an earlier value) or an element does not decode to its value."""
    decoder = json.JSONDecoder()
    at = text.find(f'"{key}"')
    pos = text.find("[", at) + 1 if at >= 0 else 0
    if pos <= 0:
        return []
    lines: list[int] = []
    line, counted = 1, 0
    for value in values:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            decoded, pos = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError):
            return []
        if decoded != value:
            return []
        lines.append(line)
    return lines


def int_field(obj: dict[str, object], name: str) -> int:
    """``obj[name]`` as a non-negative whole number; a ValueError naming the field otherwise."""
    if name not in obj:
        raise ValueError(f"missing field {name!r}")
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 0:
        raise ValueError(f"field {name!r} must be a non-negative integer, got {value!r}")
    return int(value)


class Timed(Protocol):
    @property
    def t_s(self) -> float:
        """Arrival, seconds on the trace's own clock."""
        ...


R = TypeVar("R", bound=Timed)


def in_window(rows: Iterable[R], window: tuple[float, float] | None) -> Iterator[tuple[R, float]]:
    """(row, seconds from the first row) for the rows inside ``window`` (START, END seconds from
    the first row; None: every row), reading no further than its end."""
    first_t: float | None = None
    for row in rows:
        first_t = row.t_s if first_t is None else first_t
        rel = row.t_s - first_t
        if window is not None:
            if rel < window[0]:
                continue
            if rel >= window[1]:
                return
        yield row, rel
