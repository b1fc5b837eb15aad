"""OpenTelemetry GenAI spans (the trace files inference-perf replays) as ReplayPlans, structure kept.

Place in the map (docs/architecture.md, "Replay"): a format module (``FORMAT`` at its end), beside
``trtllm_trace`` and ``agentic_coding_trace``; ``reading`` has what the formats share. The file layout is the one
kubernetes-sigs/inference-perf reads for ``otel_trace_replay`` (Apache-2.0;
``docs/otel_trace_replay.md``, "Trace File Format", and the loader
``inference_perf/datagen/replay/otel_trace_replay_datagen.py`` with
``otel_trace_to_replay_graph.py``): **one JSON document per file** (not JSON lines, not an OTLP
``resourceSpans`` export), an object with a ``spans`` list and optionally ``trace_id``,
``session_id``, ``span_count``, ``collected_at``; a folder holds one ``*.json`` each. A span is
a flat object: ``trace_id``, ``span_id``, ``parent_span_id``, ``name``, ``start_time`` and
``end_time`` (ISO-8601 strings, a zone-less one being UTC; integer nanoseconds since the epoch
are read too), ``attributes`` (an object, keys as the OpenTelemetry GenAI semantic conventions
name them) and ``status`` (``code`` 2: an error). Attributes read:

- ``gen_ai.operation.name``: ``chat`` (or ``text_completion``, ``generate_content``; or a span
  named ``chat ...``) is an LLM call; ``execute_tool`` a tool run; ``invoke_agent`` an agent;
- ``gen_ai.input.messages`` (a JSON string or a list: ``{"role", "content"}`` or ``{"role",
  "parts": [...]}`` messages, ``tool_calls`` and ``tool_call_id`` included), else the older
  ``gen_ai.prompt`` (JSON messages or plain text) or ``gen_ai.prompt.<i>.role/.content``;
- ``gen_ai.output.messages`` (one assistant message), else ``gen_ai.output.text``,
  ``gen_ai.completion`` (or ``gen_ai.completion.<i>.content``), ``gen_ai.output``;
- ``gen_ai.usage.input_tokens`` / ``output_tokens`` (or ``prompt_tokens`` /
  ``completion_tokens``), ``gen_ai.request.max_tokens``; ``gen_ai.agent.name``.

Sessions: one per ``trace_id`` (a span's own, else the file's ``trace_id`` or ``session_id``,
else the file's name; a file normally holds one trace, as inference-perf counts a file as one
session). Each LLM span is one ReplayItem, in start order, whose prompt is its input messages'
text (tool calls written ``name(arguments)``, tool results and ``tool`` messages sent as user
messages, ``developer`` as system), so a call whose input repeats an earlier call's messages and
output shares that prefix as recorded. A span without messages but with ``input_tokens`` gets
unique text of that many words (no prefix claimed); one with neither is left out (counted).
``prompt_tokens`` is ``input_tokens`` (else the prompt's words); ``max_tokens`` is
``output_tokens`` if above 0, else the output text's characters / 4 (inference-perf's
estimate), else ``gen_ai.request.max_tokens``, else ``DEFAULT_MAX_TOKENS`` (noted).

Dependencies, as inference-perf derives them: a call waits for each earlier call whose output
it repeats (an assistant message of its input contains that output, or carries all of its tool
call ids; here also a call whose ``parent_span_id`` is that call's span), not counting those it
already reaches through another; and for the closest earlier call that had ended when it
started (a timing edge). Its ``gap_s`` is its start less the latest end among them (tool runs
and think time: ``execute_tool`` spans send nothing, their time is in these waits). Spans that
repeat another's times and attributes exactly are dropped first, as inference-perf does; error
spans are kept (its default). ``offset_s`` is the start from the trace's first call. Identity:
``node`` the span id, ``depth`` the number of ``invoke_agent`` spans above the call less one,
``role`` the nearest ``gen_ai.agent.name``, ``branch`` the place among calls with the same
parents. Dependent by default (inference-perf replays by dependency); timed uses the offsets.

Bad input (not JSON, no ``spans`` list, a span without ``span_id`` or with an unreadable time,
an end before its start, a span id used twice in a trace, messages that are not JSON, a negative
or fractional token count) is an ``InputError`` naming the file, the line and the span's place
(``spans[3]``). A file is one document: ``skip_bad_lines`` skips a bad file of a folder whole.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm.errors import InputError
from swarm.record import RequestIdentity
from swarm.replay.format import Peek, ReadOptions, TraceFormat, json_object
from swarm.replay.plan import ReplayItem, ReplayPlan
from swarm.replay.reading import array_lines, document_files, read_json_document

SUFFIX = ".json"
#: max_tokens when a span records neither output nor a limit (inference-perf's default_max_tokens)
DEFAULT_MAX_TOKENS = 1000
LLM_OPERATIONS = ("chat", "text_completion", "generate_content")
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def trace_files(path: str | Path) -> list[Path]:
    """The trace files of ``path``: the file itself, or a folder's ``*.json`` in name order."""
    return document_files(path, SUFFIX)


class _Bad(ValueError):
    """A problem with one span (its place is added by the reader)."""


def _time_ns(value: Any, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        try:
            stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            stamp = stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)
            return (stamp - _EPOCH) // dt.timedelta(microseconds=1) * 1000
    raise _Bad(f"{name} {value!r}: expected an ISO-8601 time or nanoseconds since the epoch")


def _count(attrs: dict[str, Any], *names: str) -> int | None:
    """The first of ``names`` present: a whole number of tokens (OTLP JSON writes it as a string)."""
    for name in names:
        value = attrs.get(name)
        if value is None:
            continue
        if isinstance(value, str) and value.isdigit():
            return int(value)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value != int(value)
            or value < 0
        ):
            raise _Bad(f"attributes.{name} {value!r}: expected a whole number of tokens, not negative")
        return int(value)
    return None


def _call_text(tc: Any) -> tuple[str, str | None]:
    """A tool call as ``name(arguments)`` (one form for OpenAI ``tool_calls`` and GenAI parts), its id."""
    if not isinstance(tc, dict):
        return json.dumps(tc, sort_keys=True), None
    fn = tc["function"] if isinstance(tc.get("function"), dict) else tc
    args = fn.get("arguments", fn.get("input", ""))
    args = args if isinstance(args, str) else json.dumps(args, sort_keys=True)
    ident = tc.get("id")
    return f"{fn.get('name', '')}({args})", ident if isinstance(ident, str) else None


def _piece(item: Any) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, dict):
        for key in ("text", "content", "response", "result"):
            if isinstance(item.get(key), str):
                return str(item[key])
        if item.get("type") in ("tool_call", "tool_use"):
            return _call_text(item)[0]
    return ""


@dataclass
class _Message:
    role: str
    text: str
    calls: set[str] = field(default_factory=set)  # tool call ids it makes or answers


def _message(raw: Any, where: str) -> _Message:
    if not isinstance(raw, dict) or not isinstance(raw.get("role"), str):
        raise _Bad(f"{where}: expected a message object with a 'role', got {raw!r:.80}")
    pieces: list[str] = []
    msg = _Message(ROLES.get(raw["role"], "user"), "")
    content = raw.get("content")
    if isinstance(content, str):
        pieces.append(content)
    elif isinstance(content, list):
        pieces += [p for p in map(_piece, content) if p]
    parts = raw.get("parts") or []
    for part in parts if isinstance(parts, list) else []:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "tool_call":
            text, ident = _call_text(part)
            pieces.append(text)
            msg.calls.update([ident] if ident else [])
        elif kind in ("text", "tool_call_response") and (text := _piece(part)):
            pieces.append(text)
            if kind == "tool_call_response" and isinstance(part.get("id"), str):
                msg.calls.add(part["id"])
    calls = raw.get("tool_calls") or []
    for tc in calls if isinstance(calls, list) else []:
        text, ident = _call_text(tc)
        pieces.append(text)
        msg.calls.update([ident] if ident else [])
    if isinstance(raw.get("tool_call_id"), str):
        msg.calls.add(raw["tool_call_id"])
    msg.text = "\n".join(pieces)
    return msg


def _messages(attrs: dict[str, Any], kind: str) -> list[_Message] | None:
    """The ``input`` or ``output`` messages a span records, or None."""
    # (attribute, how a string is read: always JSON, JSON when it looks so, plain text)
    keys = (
        (("gen_ai.input.messages", "json"), ("gen_ai.prompt", "maybe"))
        if kind == "input"
        else (("gen_ai.output.messages", "json"), ("gen_ai.completion", "maybe"), ("gen_ai.output.text", "text"),
              ("gen_ai.output", "text"))
    )  # fmt: skip
    plain = "user" if kind == "input" else "assistant"
    for key, read in keys:
        raw = attrs.get(key)
        if raw is None or raw == "" or raw == []:
            continue
        if isinstance(raw, str):
            if read == "json" or (read == "maybe" and raw.lstrip()[:1] in ("[", "{")):
                try:
                    raw = json.loads(raw)
                except ValueError:
                    if read == "json":
                        raise _Bad(f"attributes.{key}: not valid JSON") from None
                    raw = {"role": plain, "content": raw}
            else:
                raw = {"role": plain, "content": raw}
        if isinstance(raw, dict):
            raw = [raw]
        if not isinstance(raw, list):
            raise _Bad(f"attributes.{key}: expected a list of messages, got {raw!r:.80}")
        return [_message(m, f"attributes.{key}[{i}]") for i, m in enumerate(raw)]
    legacy = keys[1][0]
    indexed = [
        {"role": attrs.get(f"{legacy}.{i}.role") or plain, "content": attrs.get(f"{legacy}.{i}.content")}
        for i in range(len(attrs))
        if f"{legacy}.{i}.content" in attrs or f"{legacy}.{i}.role" in attrs
    ]
    return [_message(m, f"attributes.{legacy}.{i}") for i, m in enumerate(indexed)] or None


@dataclass
class _Span:
    place: int
    span_id: str
    trace: str
    parent: str | None
    start: int
    end: int
    attrs: dict[str, Any]
    error: bool
    kind: str  # "llm", or the gen_ai.operation.name (execute_tool, invoke_agent, ...)


@dataclass
class _Call:
    span: _Span
    prompt: list[_Message] | None  # None: no content recorded, ``prompt_tokens`` words of its own
    out_text: str
    out_calls: set[str]
    prompt_tokens: int | None
    max_tokens: int
    defaulted: bool
    # all assistant texts of its input, joined (one search per earlier call), and every tool call id
    said: str = ""
    calls: set[str] = field(default_factory=set)


def _operation(raw: dict[str, Any]) -> str:
    attrs = raw.get("attributes") or {}
    op = attrs.get("gen_ai.operation.name") if isinstance(attrs, dict) else None
    if op in LLM_OPERATIONS or (op is None and str(raw.get("name") or "").startswith("chat ")):
        return "llm"
    return op if isinstance(op, str) else ""


def _span(raw: Any, place: int, trace: str, kind: str) -> _Span:
    if not isinstance(raw, dict):
        raise _Bad(f"expected a span object, got {type(raw).__name__}")
    span_id, parent = raw.get("span_id"), raw.get("parent_span_id")
    if not isinstance(span_id, str) or not span_id:
        raise _Bad(f"span_id {span_id!r}: expected a non-empty string")
    if parent is not None and not isinstance(parent, str):
        raise _Bad(f"parent_span_id {parent!r}: expected a string or null")
    attrs = raw.get("attributes") or {}
    if not isinstance(attrs, dict):
        raise _Bad(f"attributes: expected an object, got {type(attrs).__name__}")
    timed = kind in ("llm", "execute_tool") or raw.get("start_time") is not None
    start = _time_ns(raw.get("start_time"), "start_time") if timed else 0
    end = _time_ns(raw["end_time"], "end_time") if timed and raw.get("end_time") is not None else start
    if end < start:
        raise _Bad(f"end_time {raw.get('end_time')!r} is before start_time {raw.get('start_time')!r}")
    own_trace = raw.get("trace_id")
    status = raw.get("status")
    error = isinstance(status, dict) and status.get("code") in (2, "2", "ERROR", "STATUS_CODE_ERROR")
    trace_id = own_trace if isinstance(own_trace, str) and own_trace else trace
    return _Span(place, span_id, trace_id, parent or None, start, end, attrs, error, kind)


def _call(span: _Span) -> _Call | None:
    attrs = span.attrs
    prompt = _messages(attrs, "input")
    out = _messages(attrs, "output") or []
    reply = next((m for m in out if m.role == "assistant"), out[0] if out else None)
    n_in = _count(attrs, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
    n_out = _count(attrs, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
    limit = _count(attrs, "gen_ai.request.max_tokens")
    if prompt is None and not n_in:
        return None
    out_text = reply.text if reply else ""
    max_tokens = n_out or (max(1, len(out_text) // 4) if out_text else None) or limit or DEFAULT_MAX_TOKENS
    defaulted = not (n_out or out_text or limit)
    call = _Call(span, prompt, out_text, set(reply.calls) if reply else set(), n_in, max_tokens, defaulted)
    call.said = "\0".join(m.text for m in prompt or [] if m.role == "assistant")
    call.calls = set().union(*(m.calls for m in prompt or []))
    return call


def _repeats(a: _Call, b: _Call) -> bool:
    """Whether ``b`` carries ``a``'s output (or nests under its span)."""
    if b.span.parent == a.span.span_id:
        return True
    if a.out_text and a.out_text in b.said:
        return True
    return bool(a.out_calls) and a.out_calls <= b.calls


def _dependencies(calls: list[_Call]) -> list[list[int]]:
    """Each call's parents (indices into ``calls``, in start order), as inference-perf infers them."""
    parents: list[list[int]] = []
    causal: list[set[int]] = []  # every causal ancestor
    for i, c in enumerate(calls):
        found: list[int] = []
        reached: set[int] = set()
        for j in range(i - 1, -1, -1):
            if j not in reached and _repeats(calls[j], c):
                found.append(j)
                reached |= causal[j]
        causal.append(set(found) | reached)
        near = next((j for j in range(i - 1, -1, -1) if calls[j].span.end <= c.span.start), None)
        if near is not None and near not in found:
            found.append(near)
        parents.append(sorted(found))
    return parents


@dataclass
class _Counts:
    tools: int = 0
    errors: int = 0
    duplicates: int = 0
    silent: int = 0  # LLM spans with neither messages nor input tokens
    defaulted: int = 0


class _FileReader:
    def __init__(self, path: Path, items: list[ReplayItem], taken: set[str], counts: _Counts) -> None:
        self.path, self.items, self.taken, self.counts = path, items, taken, counts
        self.lines: list[int] = []

    def fail(self, place: int, why: str) -> InputError:
        line = f"line {self.lines[place]}, " if place < len(self.lines) else ""
        return InputError(f"{self.path}: {line}spans[{place}]: {why}")

    def read(self) -> None:
        text, data = read_json_document(self.path)
        if not isinstance(data, dict) or not isinstance(data.get("spans"), list):
            raise InputError(f'{self.path}: expected an object with a "spans" list (OpenTelemetry spans)')
        raw_spans: list[Any] = data["spans"]
        self.lines = array_lines(text, "spans", raw_spans)
        default = next((v for v in (data.get("trace_id"), data.get("session_id")) if isinstance(v, str) and v),
                       self.path.stem)  # fmt: skip
        traces: dict[str, list[_Span]] = {}
        seen: set[str] = set()
        order = sorted(range(len(raw_spans)), key=lambda i: str(_get(raw_spans[i], "span_id")))
        for i in order:  # a span that repeats another's times and attributes is dropped
            raw = raw_spans[i]
            try:
                kind = _operation(raw) if isinstance(raw, dict) else ""
                span = _span(raw, i, default, kind)
            except _Bad as exc:
                raise self.fail(i, str(exc)) from None
            signature = json.dumps([span.start, span.end, span.attrs], sort_keys=True, default=str)
            if signature in seen and kind in ("llm", "execute_tool"):
                self.counts.duplicates += 1
                continue
            seen.add(signature)
            traces.setdefault(span.trace, []).append(span)
            self.counts.tools += kind == "execute_tool"
        for trace, spans in sorted(traces.items(), key=lambda t: min(s.place for s in t[1])):
            self.trace(trace, sorted(spans, key=lambda s: s.place))

    def trace(self, trace: str, spans: list[_Span]) -> None:
        by_id: dict[str, _Span] = {}
        for s in spans:
            if s.span_id in by_id:
                raise self.fail(
                    s.place, f"span_id {s.span_id!r} already used by spans[{by_id[s.span_id].place}]"
                )
            by_id[s.span_id] = s
        session = trace if trace not in self.taken else f"{trace}@{self.path.name}"
        calls: list[_Call] = []
        for s in sorted(spans, key=lambda s: (s.start, s.span_id)):
            if s.kind != "llm":
                continue
            try:
                call = _call(s)
            except _Bad as exc:
                raise self.fail(s.place, str(exc)) from None
            if call is None:
                self.counts.silent += 1
                continue
            calls.append(call)
        if not calls:
            return
        agent = len(self.taken)
        self.taken.add(session)
        first, base = calls[0].span.start, len(self.items)
        siblings: dict[tuple[int, ...], int] = {}
        for c, parents in zip(calls, _dependencies(calls), strict=True):
            s = c.span
            depth, role = self.agent_of(s, by_id)
            gap = max(0, s.start - max(calls[p].span.end for p in parents)) if parents else 0
            pidx = tuple(base + p for p in parents)
            self.counts.errors += s.error
            self.counts.defaulted += c.defaulted
            self.items.append(
                ReplayItem(
                    index=len(self.items),
                    offset_s=(s.start - first) / 1e9,
                    prompt_tokens=c.prompt_tokens or max(sum(len(m.text.split()) for m in c.prompt or []), 1),
                    max_tokens=c.max_tokens,
                    prompt_parts=None if c.prompt is None else tuple(m.text for m in c.prompt),
                    prompt_roles=None if c.prompt is None else tuple(m.role for m in c.prompt),
                    parents=pidx,
                    gap_s=gap / 1e9,
                    identity=RequestIdentity(
                        session_id=session,
                        agent_id=agent,
                        node=s.span_id,
                        parent_nodes=tuple(calls[p].span.span_id for p in parents),
                        depth=depth,
                        branch=siblings.get(pidx, 0),
                        role=role,
                        request_id=f"{session}:{s.span_id}",
                    ),
                )
            )
            siblings[pidx] = siblings.get(pidx, 0) + 1

    @staticmethod
    def agent_of(s: _Span, by_id: dict[str, _Span]) -> tuple[int, str]:
        """(the number of invoke_agent spans above ``s`` less one, the nearest agent's name)."""
        agents, name, seen = 0, s.attrs.get("gen_ai.agent.name"), {s.span_id}
        node = by_id.get(s.parent or "")
        while node is not None and node.span_id not in seen:
            seen.add(node.span_id)
            if node.attrs.get("gen_ai.operation.name") == "invoke_agent":
                agents += 1
                name = name or node.attrs.get("gen_ai.agent.name")
            node = by_id.get(node.parent or "")
        return max(agents - 1, 0), name if isinstance(name, str) else ""


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def import_otel_spans(path: str | Path, *, skip_bad_lines: bool = False) -> ReplayPlan:
    """Read one span file, or a folder of them, into a dependent plan, one session per trace.
    With ``skip_bad_lines`` a bad file of a folder is skipped and counted in the plan's notes."""
    files = trace_files(path)
    items: list[ReplayItem] = []
    taken: set[str] = set()
    counts = _Counts()
    skipped: list[str] = []
    for f in files:
        start = len(items)
        found = _Counts()
        try:
            _FileReader(f, items, taken, found).read()
            if len(items) == start:
                raise InputError(
                    f"{f}: no LLM call (a chat span with input messages or input_tokens): nothing to replay"
                )
        except InputError as exc:
            if not skip_bad_lines:
                raise
            del items[start:]
            skipped.append(str(exc))
            continue
        for name in (counter.name for counter in dataclasses.fields(_Counts)):
            setattr(counts, name, getattr(counts, name) + getattr(found, name))
    if not items:
        raise InputError(
            f"{path}: no LLM call left to replay ({len(skipped)} bad file(s); first: {skipped[0]})"
        )
    plan = ReplayPlan(
        items=items, source=str(path), source_format=FORMAT.name, default_mode=FORMAT.default_mode
    )
    if skipped:
        plan.notes.append(f"skipped {len(skipped)} bad trace file(s); first: {skipped[0]}")
    if counts.tools:
        plan.notes.append(
            f"{counts.tools} execute_tool span(s) not sent: their time is in the waits of the calls after them"
        )
    if counts.duplicates:
        plan.notes.append(f"{counts.duplicates} span(s) repeating another's times and attributes dropped")
    if counts.silent:
        plan.notes.append(
            f"{counts.silent} LLM span(s) with neither input messages nor input_tokens left out"
        )
    if counts.errors:
        plan.notes.append(f"{counts.errors} LLM span(s) recorded as errors replayed like the others")
    if counts.defaulted:
        plan.notes.append(
            f"{counts.defaulted} call(s) record no output nor max_tokens: sent with max_tokens={DEFAULT_MAX_TOKENS}"
        )
    return plan


def read_otel_spans(source: str, options: ReadOptions) -> ReplayPlan:
    return import_otel_spans(source, skip_bad_lines=options.skip_bad_lines)


def spans_document(text: str) -> bool:
    """Whether ``text`` is one JSON object with a ``spans`` list (an OpenTelemetry span export)."""
    if '"spans"' not in text:
        return False
    doc = json_object(text)
    return doc is not None and isinstance(doc.get("spans"), list)


def detect(peek: Peek) -> bool:
    if peek.document_folder:
        return peek.first_document is not None and spans_document(peek.first_document)
    return peek.file_with(".json") and spans_document(peek.text)


FORMAT = TraceFormat(
    name="otel_genai",
    title="OpenTelemetry GenAI span files (.json with spans, or a folder of them)",
    detect=detect,
    read=read_otel_spans,
)
