"""TensorRT-LLM scaffolding execution traces (``*.trace.json``) as ReplayPlans, structure kept.

Place in the map (docs/architecture.md, "Replay"): a format module (``FORMAT`` at its end); ``reading``
has what the formats share. The format is TensorRT-LLM's (``tensorrt_llm/scaffolding/trace_replay/``, and the
example traces of ``examples/scaffolding/trace_replay/``): one JSON object ``{"trace_id",
"events": [...]}`` per agent task, events in order:

- ``message``: ``branch_path``, ``conversation_id``, ``message_index``, ``role`` (system, user,
  assistant, tool); ``tokens`` for non-assistant messages; a system message may carry
  ``system_prompt_id`` (one id per prompt template, shared by every trace that uses it); an
  assistant message is one LLM call, with ``prompt_tokens``, ``completion_tokens`` (reasoning
  included) and ``reasoning_tokens``;
- ``tool_call``: ``branch_path``, ``tool_name``, ``duration_ms`` (the tool's real time);
- ``parallel_start`` / ``parallel_end``: branches ``branch_path + [i]`` run in parallel
  between them (regions nest);
- ``drop_kv_cache``: the agent released a context (counted in the plan's notes; a replay sends
  what the calls send and leaves caching to the engine).

Each assistant message becomes one ReplayItem whose prompt is the conversation's messages before
it: the system prompt as one deterministic text per ``system_prompt_id`` (shared by every trace
and every ``--copies`` copy), user and tool messages as text of their own (tool results are
sent as user messages: a chat ``tool`` message needs a tool call id the trace does not keep),
and earlier assistant replies as a deterministic stand-in of ``completion_tokens −
reasoning_tokens`` words (reasoning is not carried into the next prompt). A prompt is therefore
the sum of its messages' tokens, which differs from the recorded ``prompt_tokens`` by the chat
template's few tokens per message. ``max_tokens`` is ``completion_tokens``.

Structure: a call's parents are the call before it on its branch (for the first call of a
branch, the call before the ``parallel_start`` on the parent branch; after a ``parallel_end``,
the last call of every child branch); its gap is the sum of ``tool_call`` durations on its
branch since then. In dependent mode (the default) a call starts when its parents have ended,
after that gap; in timed mode at the sum of gaps along its longest chain of parents (the trace
records no LLM times). One trace is one session; a folder of traces is one session each.

Bad input (not JSON, a missing or mistyped field, an unknown event type, an assistant message
without tokens, a ``parallel_end`` with no open region) is an ``InputError`` naming the file,
the event's index and its line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm.errors import InputError
from swarm.record import RequestIdentity
from swarm.replay.blocktext import segment_words
from swarm.replay.format import Peek, ReadOptions, TraceFormat
from swarm.replay.plan import ReplayItem, ReplayPlan
from swarm.replay.reading import document_files, read_json_document

SUFFIX = ".trace.json"
EVENT_TYPES = ("message", "tool_call", "parallel_start", "parallel_end", "drop_kv_cache")
ROLES = ("system", "user", "assistant", "tool")


def trace_files(path: str | Path) -> list[Path]:
    """The trace files of ``path``: the file itself, or a folder's ``*.trace.json`` in name order."""
    return document_files(path, SUFFIX)


def _event_lines(text: str) -> list[int]:
    """The line on which each element of the top-level ``events`` array starts (best effort:
    empty when the array cannot be located, e.g. a key named so in a string). Lines are
    counted from one element to the next, so a long trace costs one pass."""
    decoder = json.JSONDecoder()
    at = text.find('"events"')
    if at < 0:
        return []
    at = text.find("[", at)
    lines: list[int] = []
    pos = at + 1
    line, counted = 1 + text.count("\n", 0, pos), pos
    while pos > 0:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        line += text.count("\n", counted, pos)
        counted = pos
        lines.append(line)
        try:
            _, pos = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError):
            break
    return lines


@dataclass
class _Branch:
    """Where a branch stands: the calls the next call on it waits for, and the tool time since."""

    parents: tuple[int, ...] = ()
    wait_s: float = 0.0


@dataclass
class _Conversation:
    roles: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    tokens: int = 0
    system_prompt: int = -1  # the number of its system prompt's text (the trace column)


@dataclass(frozen=True)
class _Region:
    """An open parallel region: its trunk's path, and where the trunk stood when it opened
    (every branch of it starts there)."""

    path: tuple[int, ...]
    parents: tuple[int, ...]
    wait_s: float


def _branch_for(
    branches: dict[tuple[int, ...], _Branch], path: tuple[int, ...], regions: list[_Region]
) -> _Branch:
    """The branch at ``path``; one seen for the first time starts where the innermost open
    region it belongs to started (else where its nearest known ancestor stands)."""
    if path not in branches:
        region = next(
            (r for r in reversed(regions) if len(r.path) < len(path) and path[: len(r.path)] == r.path), None
        )
        if region is not None:
            branches[path] = _Branch(region.parents, region.wait_s)
        else:
            ancestor = max((p for p in branches if p == path[: len(p)]), key=len, default=())
            state = branches.get(ancestor, _Branch())
            branches[path] = _Branch(state.parents, state.wait_s)
    return branches[path]


class _TraceReader:
    def __init__(
        self, path: Path, items: list[ReplayItem], session: int, prompts: dict[str, int], taken: set[str]
    ) -> None:
        self.path = path
        #: session ids already given (two files with one trace_id stay two sessions)
        self.taken = taken
        self.items = items
        self.session = session
        #: system prompt texts by key, numbered in order of first use (shared over files)
        self.prompts = prompts
        self.drops = 0

    def fail(self, index: int, lines: list[int], why: str) -> InputError:
        where = f"line {lines[index]}, " if index < len(lines) else ""
        return InputError(f"{self.path}: {where}event {index}: {why}")

    def read(self) -> None:
        text, data = read_json_document(self.path)
        if not isinstance(data, dict) or not isinstance(data.get("events"), list):
            raise InputError(f'{self.path}: expected an object with an "events" list (a TensorRT-LLM trace)')
        trace_id = data.get("trace_id")
        session_id = str(trace_id) if isinstance(trace_id, str) and trace_id else self.path.name
        if session_id in self.taken:
            session_id = f"{session_id}@{self.path.name}"
        self.taken.add(session_id)
        lines = _event_lines(text)
        branches: dict[tuple[int, ...], _Branch] = {(): _Branch()}
        regions: list[_Region] = []
        conversations: dict[int, _Conversation] = {}
        for i, event in enumerate(data["events"]):
            if not isinstance(event, dict):
                raise self.fail(i, lines, f"expected an object, got {type(event).__name__}")
            kind = event.get("event_type")
            if kind not in EVENT_TYPES:
                raise self.fail(i, lines, f"event_type {kind!r}: expected one of {', '.join(EVENT_TYPES)}")
            path = _path(event, lambda why, i=i: self.fail(i, lines, why))
            if kind == "drop_kv_cache":
                self.drops += 1
                continue
            if kind == "parallel_start":
                n = _int(event, "num_branches", lambda why, i=i: self.fail(i, lines, why), required=False)
                start = _branch_for(branches, path, regions)
                regions.append(_Region(path, start.parents, start.wait_s))
                for b in range(n if n is not None else 0):
                    _branch_for(branches, (*path, b), regions)
                start.wait_s = 0.0  # the branches carry the wait; the trunk counts afresh
                continue
            if kind == "parallel_end":
                if not regions:
                    raise self.fail(i, lines, "parallel_end without an open parallel_start")
                region = regions.pop()
                parent = region.path
                children = [p for p in branches if len(p) == len(parent) + 1 and p[: len(parent)] == parent]
                joined: list[int] = []
                # tool time on the trunk while the region ran; a branch that never called still
                # carries the wait from before the region
                wait = branches[parent].wait_s if parent in branches else 0.0
                for child in sorted(children):
                    state = branches.pop(child)
                    joined.extend(x for x in state.parents if x not in joined)
                    wait = max(wait, state.wait_s)
                    for deeper in [p for p in branches if p[: len(child)] == child]:
                        branches.pop(deeper)
                branches[parent] = _Branch(tuple(joined) or region.parents, wait)
                continue
            branch = _branch_for(branches, path, regions)
            if kind == "tool_call":
                ms = event.get("duration_ms", 0)
                if isinstance(ms, bool) or not isinstance(ms, int | float) or not math.isfinite(ms) or ms < 0:
                    raise self.fail(i, lines, f"duration_ms {ms!r}: expected milliseconds, not negative")
                branch.wait_s += float(ms) / 1000
                continue
            self.message(event, i, lines, session_id, path, branch, conversations)
        if regions:
            raise InputError(
                f"{self.path}: {len(regions)} parallel_start event(s) never closed by parallel_end"
            )

    def message(
        self,
        event: dict[str, Any],
        i: int,
        lines: list[int],
        session_id: str,
        path: tuple[int, ...],
        branch: _Branch,
        conversations: dict[int, _Conversation],
    ) -> None:
        def fail(why: str) -> InputError:
            return self.fail(i, lines, why)

        role = event.get("role")
        if role not in ROLES:
            raise fail(f"role {role!r}: expected one of {', '.join(ROLES)}")
        conv_id = _int(event, "conversation_id", fail)
        index = _int(event, "message_index", fail)
        assert conv_id is not None and index is not None
        conv = conversations.setdefault(conv_id, _Conversation())
        if role != "assistant":
            tokens = _int(event, "tokens", fail)
            assert tokens is not None
            if role == "system":
                prompt_id = event.get("system_prompt_id")
                key = (
                    f"system:{prompt_id}" if prompt_id not in (None, "") else f"system:{session_id}:{conv_id}"
                )
                conv.system_prompt = self.prompts.setdefault(key, len(self.prompts))
            else:
                key = f"{session_id}:{conv_id}:{index}"
            conv.roles.append("system" if role == "system" else "user")
            conv.parts.append(" ".join(segment_words(key, tokens)))
            conv.tokens += tokens
            return
        completion = _int(event, "completion_tokens", fail)
        reasoning = _int(event, "reasoning_tokens", fail, required=False) or 0
        assert completion is not None
        if completion < 1:
            raise fail(f"completion_tokens {completion}: a call generates at least one token")
        if not conv.parts:
            raise fail(f"an assistant message of conversation {conv_id} with no message before it to send")
        number = len(self.items)
        parents = branch.parents
        node = f"c{conv_id}.m{index}"
        self.items.append(
            ReplayItem(
                index=number,
                offset_s=max((self.items[p].offset_s for p in parents), default=0.0) + branch.wait_s,
                prompt_tokens=conv.tokens,
                max_tokens=completion,
                prompt_parts=tuple(conv.parts),
                prompt_roles=tuple(conv.roles),
                parents=parents,
                gap_s=branch.wait_s,
                identity=RequestIdentity(
                    session_id=session_id,
                    agent_id=self.session,
                    node=node,
                    parent_nodes=tuple(self.items[p].identity.node for p in parents),
                    depth=len(path),
                    branch=path[-1] if path else 0,
                    role="tool_call" if event.get("tool_calls") else "reply",
                    system_prompt_id=conv.system_prompt,
                    request_id=f"{session_id}:{node}",
                ),
            )
        )
        branch.parents, branch.wait_s = (number,), 0.0
        kept = max(completion - reasoning, 0)
        if kept:
            conv.roles.append("assistant")
            conv.parts.append(" ".join(segment_words(f"{session_id}:{conv_id}:{index}:reply", kept)))
            conv.tokens += kept


def _int(event: dict[str, Any], name: str, fail: Any, required: bool = True) -> int | None:
    value = event.get(name)
    if value is None:
        if required:
            raise fail(f"{name} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(f"{name} {value!r}: expected a whole number, not negative")
    return value


def _path(event: dict[str, Any], fail: Any) -> tuple[int, ...]:
    value = event.get("branch_path", [])
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value
    ):
        raise fail(f"branch_path {value!r}: expected a list of branch numbers")
    return tuple(value)


def import_trtllm(path: str | Path, *, skip_bad_files: bool = False) -> ReplayPlan:
    """Read one trace file, or a folder of them (one session each), into a dependent plan.
    With ``skip_bad_files``, a bad file of a folder is skipped and counted in the notes."""
    files = trace_files(path)
    items: list[ReplayItem] = []
    prompts: dict[str, int] = {}
    taken: set[str] = set()
    drops = 0
    skipped: list[str] = []
    for n, f in enumerate(files):
        start = len(items)
        reader = _TraceReader(f, items, n, prompts, taken)
        try:
            reader.read()
            if len(items) == start:
                raise InputError(f"{f}: no assistant message: nothing to replay")
        except InputError as exc:
            if not skip_bad_files or len(files) == 1:
                raise
            del items[start:]
            skipped.append(str(exc))
            continue
        drops += reader.drops
    if not items:
        raise InputError(f"{path}: no trace could be read; first problem: {skipped[0] if skipped else '-'}")
    plan = ReplayPlan(
        items=items, source=str(path), source_format=FORMAT.name, default_mode=FORMAT.default_mode
    )
    if skipped:
        plan.notes.append(f"skipped {len(skipped)} bad trace file(s); first: {skipped[0]}")
    if drops:
        plan.notes.append(
            f"{drops} drop_kv_cache event(s) not replayed: a replay sends the calls and leaves caching to the engine"
        )
    return plan


def read_trtllm(source: str, options: ReadOptions) -> ReplayPlan:
    return import_trtllm(source, skip_bad_files=options.skip_bad_lines)


def detect(peek: Peek) -> bool:
    return peek.path.name.endswith(".trace.json") or (peek.document_folder and peek.has("*.trace.json"))


FORMAT = TraceFormat(
    name="trtllm",
    title="TensorRT-LLM execution traces (*.trace.json, or a folder of them)",
    detect=detect,
    read=read_trtllm,
    offsets="waits",
)
