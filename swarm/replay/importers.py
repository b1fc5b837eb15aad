"""Importers: public request traces to ReplayPlans.

Place in the map (docs/architecture.md, "Replay"). Formats:

- ``mooncake``: JSON lines ``{"timestamp": ms, "input_length", "output_length", "hash_ids"}``,
  ``hash_ids`` naming the prompt's 512-token blocks (equal leading ids = a shared prefix).
- ``azure``: Azure LLM inference CSV ``TIMESTAMP,ContextTokens,GeneratedTokens`` (timestamps
  are date-times; no prefix information, so every prompt is unique).
- ``burstgpt``: BurstGPT CSV with ``Timestamp`` (s), ``Request tokens``, ``Response tokens``
  and optionally ``Session ID`` (kept as the session; prompts unique).
- ``trtllm``: TensorRT-LLM scaffolding execution traces, structure kept (``trtllm_trace``).
- ``bailian``: Qwen-Bailian usage traces, conversations by ``parent_chat_id`` (``bailian_trace``).
- ``agentic_coding``: agentic-coding traces with sub-agents, 64-token ``hash_ids``
  (``agentic_coding_trace``).
- ``aiperf_dag``: AIPerf DAG JSONL, conversations with forks and spawned sub-agents (``aiperf_dag``).
- ``otel_genai``: OpenTelemetry GenAI spans as inference-perf replays them, one JSON document
  per trace file (``otel_spans``).

Bad input (a malformed line, a missing column or field, a negative length, timestamps out
of order, more hash ids than the input length allows) is an ``InputError`` naming the file
and line, or with ``skip_bad_lines`` a skipped line counted in the plan's notes. Filters:
``window`` (seconds from the trace start, ``START:END``), ``sample`` (a seeded fraction),
``limit`` (the first N kept).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from swarm.errors import InputError
from swarm.record import RequestIdentity
from swarm.replay.plan import ReplayItem, ReplayPlan

MOONCAKE_BLOCK_TOKENS = 512
#: flat traces read here, and structured ones read by their own modules (``trtllm_trace``,
#: ``bailian_trace``, ``agentic_coding_trace``, ``aiperf_dag``, ``otel_spans``)
FORMATS = ("mooncake", "azure", "burstgpt", "trtllm", "bailian", "agentic_coding", "aiperf_dag", "otel_genai")
#: structured formats without arrival times to filter by (``--limit``, ``--window``, ``--sample``)
STRUCTURED = ("trtllm", "agentic_coding", "aiperf_dag", "otel_genai")


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


@dataclass
class _Row:
    line: int
    t_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    session: str = ""


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


def _int_field(obj: dict[str, object], name: str) -> int:
    if name not in obj:
        raise ValueError(f"missing field {name!r}")
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 0:
        raise ValueError(f"field {name!r} must be a non-negative integer, got {value!r}")
    return int(value)


def _mooncake_rows(path: Path, bad: BadLines) -> Iterator[_Row]:
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
                t = obj.get("timestamp")
                if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
                    raise ValueError(f"field 'timestamp' must be a non-negative number of ms, got {t!r}")
                n_in = _int_field(obj, "input_length")
                n_out = _int_field(obj, "output_length")
                ids = obj.get("hash_ids")
                if not isinstance(ids, list) or not all(
                    isinstance(i, int) and not isinstance(i, bool) for i in ids
                ):
                    raise ValueError("field 'hash_ids' must be a list of integers")
                allowed = -(-n_in // MOONCAKE_BLOCK_TOKENS)
                if len(ids) > allowed:
                    raise ValueError(
                        f"{len(ids)} hash ids but input_length {n_in} allows at most {allowed} blocks of {MOONCAKE_BLOCK_TOKENS}"
                    )
            except json.JSONDecodeError as exc:
                bad.bad(line_no, f"not valid JSON ({exc.msg}); truncated line?")
                continue
            except (ValueError, OverflowError, RecursionError) as exc:
                bad.bad(line_no, str(exc) or type(exc).__name__)
                continue
            yield _Row(line_no, float(t) / 1000.0, n_in, n_out, tuple(ids))


def _csv_rows(path: Path, bad: BadLines, fmt: str) -> Iterator[_Row]:
    if fmt == "azure":
        cols = {"t": "TIMESTAMP", "in": "ContextTokens", "out": "GeneratedTokens"}
    else:
        cols = {"t": "Timestamp", "in": "Request tokens", "out": "Response tokens"}
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in cols.values() if c not in header]
        if missing:
            raise InputError(f"{path}: line 1: missing column(s) {missing} (found: {header})")
        t0: dt.datetime | None = None
        for record in reader:
            line_no = reader.line_num
            try:
                raw_t = (record.get(cols["t"]) or "").strip()
                if fmt == "azure":
                    head, _, frac = raw_t.partition(".")
                    stamp = dt.datetime.fromisoformat(head + ("." + frac[:6] if frac else ""))
                    t0 = t0 or stamp
                    t_s = (stamp - t0).total_seconds()
                else:
                    t_s = float(raw_t)
                    if t_s < 0 or not math.isfinite(t_s):
                        raise ValueError(f"bad timestamp {raw_t!r}")
                n_in = int(float(record.get(cols["in"]) or "x"))
                n_out = int(float(record.get(cols["out"]) or "x"))
                if n_in < 0 or n_out < 0:
                    raise ValueError("token counts must be non-negative")
            except (ValueError, TypeError) as exc:
                bad.bad(line_no, f"cannot read row: {exc}")
                continue
            session = (record.get("Session ID") or "").strip() if fmt == "burstgpt" else ""
            yield _Row(line_no, t_s, n_in, n_out, (), session)


def import_trace(
    path: str | Path, fmt: str, filters: Filters | None = None, *, skip_bad_lines: bool = False
) -> ReplayPlan:
    """Read a trace into a ReplayPlan: flat traces here (timed; prompts synthesised from block
    ids), structured ones by their modules. For a format whose files are one document each,
    ``skip_bad_lines`` skips a bad file of a folder."""
    p = Path(path)
    if fmt not in FORMATS:
        raise InputError(f"unknown trace format {fmt!r} (known: {', '.join(FORMATS)})")
    if fmt in STRUCTURED:
        if filters is not None and filters != Filters(seed=filters.seed):
            raise InputError(
                "--limit, --window and --sample apply to flat traces, not to agent execution traces"
            )
        if fmt == "trtllm":
            from swarm.replay.trtllm_trace import import_trtllm

            return import_trtllm(p, skip_bad_files=skip_bad_lines)
        if fmt == "aiperf_dag":
            from swarm.replay.aiperf_dag import import_aiperf_dag

            return import_aiperf_dag(p, skip_bad_lines=skip_bad_lines)
        if fmt == "otel_genai":
            from swarm.replay.otel_spans import import_otel_spans

            return import_otel_spans(p, skip_bad_lines=skip_bad_lines)
        from swarm.replay.agentic_coding_trace import import_agentic_coding

        return import_agentic_coding(p, skip_bad_lines=skip_bad_lines)
    if fmt == "bailian":
        from swarm.replay.bailian_trace import import_bailian

        return import_bailian(p, filters, skip_bad_lines=skip_bad_lines)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    filters = filters or Filters()
    bad = BadLines(p, skip_bad_lines)
    rows_iter = _mooncake_rows(p, bad) if fmt == "mooncake" else _csv_rows(p, bad, fmt)
    rng = random.Random(f"sample:{filters.seed}")
    items: list[ReplayItem] = []
    first_t: float | None = None
    last_t = -math.inf
    for row in rows_iter:
        if row.t_s < last_t:
            bad.bad(
                row.line,
                f"timestamp {row.t_s:g} s is earlier than the line before ({last_t:g} s): out of order",
            )
            continue
        last_t = row.t_s
        if first_t is None:
            first_t = row.t_s
        rel = row.t_s - first_t
        if filters.window is not None:
            lo, hi = filters.window
            if rel < lo:
                continue
            if rel >= hi:
                break
        if filters.sample is not None and rng.random() >= filters.sample:
            continue
        items.append(
            ReplayItem(
                index=len(items),
                offset_s=rel,
                prompt_tokens=max(row.prompt_tokens, 1),
                max_tokens=max(row.output_tokens, 1),
                block_ids=row.hash_ids,
                block_tokens=MOONCAKE_BLOCK_TOKENS,
                identity=RequestIdentity(
                    session_id=row.session,
                    node=f"line{row.line}",
                    request_id=f"{p.name}:{row.line}",
                    agent_id=-1,
                ),
            )
        )
        if filters.limit is not None and len(items) >= filters.limit:
            break
    if items and filters.window is not None:
        base = items[0].offset_s
        items = [dataclasses.replace(it, offset_s=it.offset_s - base) for it in items]
    plan = ReplayPlan(items=items, source=str(p), source_format=fmt, default_mode="timed")
    if bad.count:
        plan.notes.append(f"skipped {bad.count} bad line(s); first: {bad.first}")
    if not items:
        raise InputError(f"{p}: no requests left to replay (after filters)")
    return plan
