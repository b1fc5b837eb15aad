"""Agentic-coding traces (Weka / SemiAnalysis, Claude Code sessions) as ReplayPlans, structure kept.

Place in the map (docs/architecture.md, "Replay"): a format module (``FORMAT`` at its end), beside
``trtllm_trace``; ``reading`` has what the formats share. The format: repository callanjfox/agentic-coding-analysis,
``docs/TRACE_FORMAT.md`` (MIT; replayed by callanjfox/kv-cache-tester). One JSON document per
conversation (or per ``_s1``, ``_s2`` segment of a split one), pretty-printed, not JSON lines; a
folder holds one ``*.json`` each. Top level: ``id``, ``models``, ``block_size`` (tokens per
hash block: 64), ``hash_id_scope`` (``"global"``: equal ids are equal blocks in every trace;
``"local"`` or absent: numbered per conversation), ``tool_tokens`` and ``system_tokens`` (the
shared prefix), ``requests``, optional ``totals``. A request: ``t`` (s from the conversation's
start), ``type`` (``"s"`` streaming, ``"n"`` non-streaming, ``"subagent"``), ``model``, ``in``
and ``out`` (tokens), ``hash_ids`` (the prompt's full blocks, chained: equal leading ids are an
equal prefix), ``input_types``, ``output_types``, ``stop``, and optionally ``api_time`` (s of
the response), ``ttft`` (s) and ``think_time`` (s from the previous response's end to this
request). A ``"subagent"`` entry: ``t`` (spawned, from the enclosing conversation's start),
``agent_id``, ``subagent_type``, ``duration_ms`` (its run), ``total_tokens``,
``tool_use_count``, ``status``, ``models``, ``tool_tokens``, ``system_tokens`` and ``requests``
(same schema, ``t`` from the sub-agent's start; entries may nest).

Each request is one ReplayItem: ``block_ids`` its hash ids (a ``"local"`` trace's ids get a
namespace of their own in a folder of several), ``block_tokens`` the ``block_size``,
``prompt_tokens`` ``in``, ``max_tokens`` ``out`` (at least 1), ``offset_s`` its ``t`` plus
the spawn ``t`` of each enclosing sub-agent. Structure, as kv-cache-tester replays it: a
request's parent is the previous request of its agent; the sub-agents between two requests of
an agent are spawned together by the first (their first requests' parent) and the second waits
for them all (parents: the first, then each sub-agent's last request, or those of the
sub-agents it spawned last), except ``status`` ``async_launched`` ones, which run on in the
background. ``gap_s`` is ``think_time`` (else ``t`` less the previous request's recorded end,
``t + api_time``; else 0), after sub-agents less the longest of their runs (``duration_ms``,
else the span of their requests): ``think_time`` counts from the same agent's previous
response. Identity: session the trace's ``id``; ``depth`` the nesting (0: main agent);
``role`` ``main`` / ``subagent``; ``branch`` a sub-agent's place among those spawned together;
``node`` the place (``r2.r3``: request 3 of the sub-agent at entry 2). Dependent by default:
``t`` counts from each conversation's own start, and producers differ on a sub-agent's ``t``
(the published sample writes about its end); timed mode uses the offsets.

Bad input (not JSON, not a trace, a missing or mistyped field, an unknown ``type``, more hash
ids than ``in`` holds) is an ``InputError`` naming the file, the line and the record's place
(``requests[2].requests[3]``). A file is one document, not lines: ``skip_bad_lines`` skips a
bad file of a folder whole, counted in the plan's notes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm.errors import InputError
from swarm.record import RequestIdentity
from swarm.replay.format import Peek, ReadOptions, TraceFormat
from swarm.replay.plan import ReplayItem, ReplayPlan
from swarm.replay.reading import document_files, read_json_document

SUFFIX = ".json"
BLOCK_TOKENS = 64
TYPES = ("s", "n", "subagent")
_LOCAL_SPACE = 1 << 40  # a "local" trace's ids move to (n + 1) * 2**40 + id, n its place in a folder


def trace_files(path: str | Path) -> list[Path]:
    """The trace files of ``path``: the file itself, or a folder's ``*.json`` in name order."""
    return document_files(path, SUFFIX)


def _record_lines(text: str, data: dict[str, Any]) -> dict[tuple[int, ...], int]:
    """The line on which each request record starts, by its place (best effort: empty when the
    ``requests`` arrays cannot be located, e.g. a key named so inside a string)."""
    decoder = json.JSONDecoder()
    lines: dict[tuple[int, ...], int] = {}
    cursor = [0, 1]  # position, its line: positions only grow, so lines are counted once

    def line_at(pos: int) -> int:
        cursor[1] += text.count("\n", cursor[0], pos)
        cursor[0] = pos
        return cursor[1]

    def scan(start: int, end: int, place: tuple[int, ...], records: list[Any]) -> bool:
        at = text.find('"requests"', start, end)
        pos = text.find("[", at, end) + 1 if at >= 0 else 0
        if pos <= 0:
            return False
        for i, record in enumerate(records):
            while pos < end and text[pos] in " \t\r\n,":
                pos += 1
            try:
                value, after = decoder.raw_decode(text, pos)
            except json.JSONDecodeError:
                return False
            if value != record:
                return False
            lines[(*place, i)] = line_at(pos)
            inner = record.get("requests") if isinstance(record, dict) else None
            if isinstance(inner, list) and not scan(pos + 1, after, (*place, i), inner):
                return False
            pos = after
        return True

    return lines if scan(0, len(text), (), data["requests"]) else {}


@dataclass
class _Agent:
    """Where one agent stands: its last request, and the sub-agents it waits for."""

    last: int | None
    last_end_s: float | None = None  # the last request's recorded end (t + api_time), if known
    joins: list[int] = field(default_factory=list)  # last requests of sub-agents spawned since
    join_wall_s: float = 0.0  # the longest of their runs
    spawned: int = 0  # sub-agents spawned by the last request (their branch numbers)


class _TraceReader:
    def __init__(self, path: Path, items: list[ReplayItem], number: int, namespace: int) -> None:
        self.path, self.items, self.number, self.namespace = path, items, number, namespace
        self.local_ids = True
        self.lines: dict[tuple[int, ...], int] = {}
        self.session_id = path.name
        self.block = BLOCK_TOKENS

    def fail(self, place: tuple[int, ...], why: str) -> InputError:
        line = self.lines.get(place)
        where = "".join(f".requests[{i}]" for i in place)[1:]
        return InputError(f"{self.path}: {f'line {line}, ' if line else ''}{where}: {why}")

    def read(self, taken: set[str]) -> None:
        text, data = read_json_document(self.path)
        if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
            raise InputError(
                f'{self.path}: expected an object with a "requests" list (an agentic-coding trace)'
            )
        block = data.get("block_size", BLOCK_TOKENS)
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise InputError(f"{self.path}: block_size {block!r}: expected a positive whole number of tokens")
        scope = data.get("hash_id_scope", "local")
        if scope not in ("local", "global"):
            raise InputError(f'{self.path}: hash_id_scope {scope!r}: expected "local" or "global"')
        if scope == "global":
            self.namespace = 0
        self.local_ids = scope == "local"
        trace_id = data.get("id")
        sid = trace_id if isinstance(trace_id, str) and trace_id else self.path.name
        self.session_id = sid if sid not in taken else f"{sid}@{self.path.name}"
        taken.add(self.session_id)
        self.block = block
        self.lines = _record_lines(text, data)
        self.agent(data["requests"], (), _Agent(None), 0.0, 0, 0, "")

    def agent(
        self, records: list[Any], place: tuple[int, ...], me: _Agent, base_s: float, depth: int,
        branch: int, node: str,
    ) -> None:  # fmt: skip
        """The requests of one agent (the main one, or a sub-agent spawned at ``base_s``)."""
        for i, rec in enumerate(records):
            at = (*place, i)
            if not isinstance(rec, dict):
                raise self.fail(at, f"expected an object, got {type(rec).__name__}")
            kind = rec.get("type")
            if kind not in TYPES:
                raise self.fail(at, f"type {kind!r}: expected one of {', '.join(map(repr, TYPES))}")
            t = _number(rec, "t", lambda why, at=at: self.fail(at, why))
            assert t is not None
            if kind == "subagent":
                self.subagent(rec, at, me, base_s + t, depth + 1, f"{node}r{i}.")
                continue
            self.request(rec, at, me, base_s, t, depth, branch, f"{node}r{i}")

    def subagent(self, rec: dict[str, Any], at: tuple[int, ...], spawner: _Agent, start_s: float,
                 depth: int, node: str) -> None:  # fmt: skip
        def fail(why: str) -> InputError:
            return self.fail(at, why)

        inner = rec.get("requests")
        if not isinstance(inner, list):
            raise fail("requests: expected a list of the sub-agent's requests")
        status = rec.get("status")
        if status is not None and not isinstance(status, str):
            raise fail(f"status {status!r}: expected a string")
        ms = _number(rec, "duration_ms", fail, required=False)
        me = _Agent(spawner.last, spawner.last_end_s)
        first = len(self.items)
        self.agent(inner, at, me, start_s, depth, spawner.spawned, node)
        spawner.spawned += 1
        own = me.last is not None and me.last >= first
        # it ends with its last request, or with the sub-agents that request spawned, if any
        ends = me.joins or ([me.last] if own and me.last is not None else [])
        if status == "async_launched" or not ends:
            return  # runs on in the background, or sent nothing: nobody waits for it
        wall = me.join_wall_s if ms is None else ms / 1000
        if ms is None and own and me.last is not None:
            last = me.last_end_s if me.last_end_s is not None else self.items[me.last].offset_s
            wall += max(0.0, last - start_s)
        spawner.joins.extend(e for e in ends if e not in spawner.joins)
        spawner.join_wall_s = max(spawner.join_wall_s, wall)

    def request(
        self, rec: dict[str, Any], at: tuple[int, ...], me: _Agent, base_s: float, t: float, depth: int,
        branch: int, node: str,
    ) -> None:  # fmt: skip
        def fail(why: str) -> InputError:
            return self.fail(at, why)

        n_in, n_out = _whole(rec, "in", fail), _whole(rec, "out", fail)
        ids = rec.get("hash_ids", [])
        if not isinstance(ids, list) or not all(
            isinstance(b, int) and not isinstance(b, bool) and 0 <= b < _LOCAL_SPACE for b in ids
        ):
            raise fail(f"hash_ids: expected a list of block ids (whole numbers from 0 to 2**40), got {ids!r}")
        if len(ids) > -(-n_in // self.block):
            raise fail(
                f"{len(ids)} hash ids but in={n_in} holds at most {-(-n_in // self.block)} blocks of {self.block}"
            )
        think = _number(rec, "think_time", fail, required=False)
        api = _number(rec, "api_time", fail, required=False)
        if think is not None:
            gap = think
        elif me.last_end_s is not None:
            gap = max(0.0, base_s + t - me.last_end_s)
        else:
            gap = 0.0
        parents = tuple(p for p in (me.last, *me.joins) if p is not None)
        if me.joins:
            gap = max(0.0, gap - me.join_wall_s)
        number = len(self.items)
        self.items.append(
            ReplayItem(
                index=number,
                offset_s=base_s + t,
                prompt_tokens=max(n_in, 1),
                max_tokens=max(n_out, 1),
                block_ids=tuple(self.namespace * _LOCAL_SPACE + b for b in ids),
                block_tokens=self.block,
                parents=parents,
                gap_s=gap,
                identity=RequestIdentity(
                    session_id=self.session_id,
                    agent_id=self.number,
                    node=node,
                    parent_nodes=tuple(self.items[p].identity.node for p in parents),
                    depth=depth,
                    branch=branch if depth else 0,
                    role="subagent" if depth else "main",
                    request_id=f"{self.session_id}:{node}",
                ),
            )
        )
        me.last, me.joins, me.join_wall_s, me.spawned = number, [], 0.0, 0
        me.last_end_s = base_s + t + api if api is not None else None


def _number(rec: dict[str, Any], name: str, fail: Any, required: bool = True) -> float | None:
    value = rec.get(name)
    if value is None:
        if required:
            raise fail(f"{name} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise fail(f"{name} {value!r}: expected a number of seconds, not negative")
    return float(value)


def _whole(rec: dict[str, Any], name: str, fail: Any) -> int:
    value = rec.get(name)
    if value is None:
        raise fail(f"{name} is missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(f"{name} {value!r}: expected a whole number of tokens, not negative")
    return value


def import_agentic_coding(path: str | Path, *, skip_bad_lines: bool = False) -> ReplayPlan:
    """Read one trace file, or a folder of them (one session each), into a dependent plan.
    With ``skip_bad_lines`` a bad file of a folder is skipped and counted in the plan's notes."""
    files = trace_files(path)
    items: list[ReplayItem] = []
    taken: set[str] = set()
    skipped: list[str] = []
    local_ids = False
    for n, f in enumerate(files):
        start = len(items)
        reader = _TraceReader(f, items, n, n + 1 if len(files) > 1 else 0)
        try:
            reader.read(taken)
            if len(items) == start:
                raise InputError(f"{f}: no request: nothing to replay")
            local_ids = local_ids or reader.local_ids
        except InputError as exc:
            if not skip_bad_lines:
                raise
            del items[start:]
            skipped.append(str(exc))
    if not items:
        raise InputError(
            f"{path}: no request left to replay ({len(skipped)} bad trace file(s); first: {skipped[0]})"
        )
    plan = ReplayPlan(
        items=items, source=str(path), source_format=FORMAT.name, default_mode=FORMAT.default_mode,
        ids_per_session=local_ids,
    )
    if skipped:
        plan.notes.append(f"skipped {len(skipped)} bad trace file(s); first: {skipped[0]}")
    return plan


def read_agentic_coding(source: str, options: ReadOptions) -> ReplayPlan:
    return import_agentic_coding(source, skip_bad_lines=options.skip_bad_lines)


def detect(peek: Peek) -> bool:
    """A ``.json`` file with ``requests``, or a folder of ``.json`` documents (checked after
    OpenTelemetry spans, whose documents are ``.json`` too)."""
    if peek.document_folder:
        return peek.first_document is not None
    return peek.file_with(".json") and '"requests"' in peek.text


FORMAT = TraceFormat(
    name="agentic_coding",
    title="agentic-coding traces (.json with requests, or a folder of them)",
    detect=detect,
    read=read_agentic_coding,
)
