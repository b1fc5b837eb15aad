"""AIPerf DAG JSONL files (``dag_jsonl``: branching conversations) as ReplayPlans, structure kept.

Place in the map (docs/architecture.md, "Replay"): a format module (``FORMAT`` at its end), beside
``trtllm_trace`` and ``agentic_coding_trace``; ``BadLines`` is ``reading``'s. The format is AIPerf's
(repository ai-dynamo/aiperf, Apache-2.0: ``docs/benchmark-modes/dag.md`` and the loader
``src/aiperf/dataset/loader/dag_jsonl.py`` with its schema ``dag_jsonl_models.py``). JSON lines,
one conversation each:

- ``session_id`` (unique in the file), ``turns`` (in order), optional ``pre_session_spawns``
  (sessions started before turn 0, never waited for) and ``context_mode``;
- a turn: ``messages`` (OpenAI chat messages; ``content`` a string, a list of parts, or absent
  beside ``tool_calls``), optional ``max_tokens``, ``model``, ``tools``, ``extra``, ``delay``
  (**milliseconds** to wait before sending the turn), ``forks`` and ``spawns``;
- ``forks``: sessions that continue this turn's conversation (its history, the reply included,
  then their own messages); a bare id ends the parent there (last turn only), ``{"child",
  "background": true}`` lets it go on. A session is forked by at most one parent;
- ``spawns``: sub-agents that start with an empty history; a bare id is joined by the next turn,
  ``{"children": [...], "join_at": K}`` by turn K (the parent runs the turns between); a spawn
  on the last turn is not waited for. A session may be spawned by several parents (a template);
- an orchestrator (``"orchestrator": true``, no turns) sends nothing: it spawns its ``spawns``
  once, or ``rounds`` of them (a count, or a list of ``{"spawns", "think_time_ms"}``), each round
  waiting for the one before and then ``think_time_ms`` (``think_time_sigma`` draws it at random
  in AIPerf; here its median is used and the notes say so);
- ``context_mode``: ``deltas_without_responses`` (the default: history accumulates, the live
  reply included), ``deltas_with_responses`` (history accumulates, replies are the file's own),
  ``message_array_with_responses`` (each turn is sent as its own messages alone).

Roots (sessions no other names) are the sessions of the plan; each forked or spawned session is
played once per reference. A sent turn is one ReplayItem whose prompt is the text the file
gives (content parts that are not text are dropped and counted; ``tool_calls`` are written out
as JSON text; ``tool`` messages go as user messages, ``developer`` as system). The live reply
a later prompt carries is a deterministic stand-in of ``max_tokens`` words, so a fork's prompt
starts with exactly its parent's prompt and reply, and siblings share that prefix. ``max_tokens``
is the turn's (``extra.max_completion_tokens`` failing that, else ``DEFAULT_MAX_TOKENS``, noted);
``prompt_tokens`` the prompt's words (the engine counts its own tokens).

Structure: a turn's parents are the turn before it (or, for a session's first turn, the turn
that forked or spawned it) and, at a join, the last turn of every sub-agent joined there; its
gap is its ``delay`` (plus the think time of an orchestrator round). Dependent by default (the
file has no times); timed mode sums the gaps along the longest chain of parents. Identity:
session the root's ``session_id``; ``node`` the path (``plan.t0/scout.t1``: turn 1 of the
``scout`` spawned by turn 0 of ``plan``; ``>`` for a fork, ``.pre/`` for a pre-session spawn);
``depth`` the nesting; ``role`` ``root``, ``fork`` or ``spawn``; ``branch`` the place among the
children of one turn.

Bad input (not JSON, a missing, mistyped or unknown key, a ``join_at`` out of range, a fork on
a turn that is not the last without ``background``, an unknown target, a session forked twice,
a cycle) is an ``InputError`` naming the file, the line and the place (``turns[1].spawns[0]``),
or with ``skip_bad_lines`` a skipped line (and every line that needs it) counted in the notes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarm.errors import InputError
from swarm.record import RequestIdentity
from swarm.replay.blocktext import segment_words
from swarm.replay.format import Peek, ReadOptions, TraceFormat, json_object
from swarm.replay.plan import ReplayItem, ReplayPlan
from swarm.replay.reading import BadLines, parsed_lines

#: max_tokens of a turn that names none (AIPerf leaves it to the server)
DEFAULT_MAX_TOKENS = 256
#: a file whose spawn templates expand to more requests than this is refused
MAX_REQUESTS = 1_000_000
CONTEXT_MODES = ("deltas_without_responses", "deltas_with_responses", "message_array_with_responses")
CONVERSATION_KEYS = frozenset(
    ("session_id", "turns", "orchestrator", "spawns", "rounds", "think_time_ms", "think_time_sigma",
     "think_time_min_ms", "think_time_max_ms", "context_mode", "pre_session_spawns")
)  # fmt: skip
#: keys only an orchestrator may have
ORCHESTRATOR_KEYS = (
    "rounds",
    "spawns",
    "think_time_ms",
    "think_time_sigma",
    "think_time_min_ms",
    "think_time_max_ms",
)
TURN_KEYS = frozenset(("messages", "model", "max_tokens", "tools", "extra", "forks", "spawns", "delay"))
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class _Bad(ValueError):
    def __init__(self, place: str, why: str) -> None:
        super().__init__(f"{place}: {why}" if place else why)


@dataclass(frozen=True)
class _Turn:
    parts: tuple[tuple[str, str], ...]  # (role, text) of its messages
    max_tokens: int | None
    delay_s: float
    forks: tuple[tuple[str, bool], ...] = ()  # (child, background)
    spawns: tuple[tuple[tuple[str, ...], int | None], ...] = ()  # (children, join_at)
    request: bool = True  # False: an orchestrator's turn, which sends nothing


@dataclass(frozen=True)
class _Conversation:
    sid: str
    line: int
    turns: tuple[_Turn, ...]
    mode: str
    pre: tuple[str, ...]
    dropped_parts: int  # content parts that are not text
    sampled: bool  # an orchestrator whose think time AIPerf draws at random
    orchestrator: str = ""  # "spawns" or "rounds": where an orchestrator names its children

    def targets(self) -> list[tuple[str, str, bool]]:
        """(place, child, is a fork) of every session this one names."""
        out = [(f"pre_session_spawns[{i}]", c, False) for i, c in enumerate(self.pre)]
        for k, t in enumerate(self.turns):
            if self.orchestrator:
                at = f"rounds[{k}]." if self.orchestrator == "rounds" else ""
                out += [(f"{at}spawns[{i}]", c, False) for cs, _ in t.spawns for i, c in enumerate(cs)]
                continue
            out += [(f"turns[{k}].forks[{i}]", c, True) for i, (c, _) in enumerate(t.forks)]
            out += [(f"turns[{k}].spawns[{i}]", c, False) for i, (cs, _) in enumerate(t.spawns) for c in cs]
        return out


def _number(obj: dict[str, Any], name: str, place: str) -> float | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise _Bad(place, f"{name} {value!r}: expected milliseconds, not negative")
    return float(value)


def _ids(value: Any, place: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _Bad(place, f"expected a list of session ids, got {value!r}")
    if len(set(value)) < len(value):
        raise _Bad(place, f"a session named twice: {value!r}")
    return tuple(value)


def _text(msg: Any, place: str) -> tuple[str, str, int]:
    """(role, text, content parts dropped) of one chat message."""
    if not isinstance(msg, dict) or not isinstance(msg.get("role"), str) or not msg["role"]:
        raise _Bad(place, "expected a message object with a 'role'")
    content, pieces, dropped = msg.get("content"), [], 0
    if isinstance(content, str):
        pieces.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            else:
                dropped += 1
    elif content is not None:
        raise _Bad(f"{place}.content", f"expected a string or a list of content parts, got {content!r}")
    calls = msg.get("tool_calls")
    if calls:
        pieces.append(json.dumps(calls, sort_keys=True, separators=(",", ":")))
    return ROLES.get(msg["role"], "user"), "\n".join(pieces), dropped


def _turn(obj: Any, k: int, last: bool) -> tuple[_Turn, int]:
    place = f"turns[{k}]"
    if not isinstance(obj, dict):
        raise _Bad(place, f"expected an object, got {type(obj).__name__}")
    if unknown := sorted(set(obj) - TURN_KEYS):
        raise _Bad(place, f"unknown key(s) {unknown} (known: {', '.join(sorted(TURN_KEYS))})")
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _Bad(f"{place}.messages", "expected a non-empty list of chat messages")
    parts, dropped = [], 0
    for i, m in enumerate(messages):
        role, text, lost = _text(m, f"{place}.messages[{i}]")
        parts.append((role, text))
        dropped += lost
    extra = obj.get("extra")
    if extra is not None and not isinstance(extra, dict):
        raise _Bad(f"{place}.extra", f"expected an object, got {extra!r}")
    max_tokens = obj.get("max_tokens")
    if max_tokens is None and extra:
        max_tokens = extra.get("max_completion_tokens")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
        raise _Bad(place, f"max_tokens {max_tokens!r}: expected a whole number, at least 1")
    for name, kind in (("model", str), ("tools", list)):
        if obj.get(name) is not None and not isinstance(obj[name], kind):
            raise _Bad(f"{place}.{name}", f"expected a {kind.__name__}, got {obj[name]!r}")
    forks: list[tuple[str, bool]] = []
    raw_forks = obj.get("forks", [])
    if not isinstance(raw_forks, list):
        raise _Bad(f"{place}.forks", f"expected a list, got {raw_forks!r}")
    for i, f in enumerate(raw_forks):
        if isinstance(f, dict) and not set(f) - {"child", "background"} and isinstance(f.get("child"), str):
            background = f.get("background", False)
            if not isinstance(background, bool):
                raise _Bad(f"{place}.forks[{i}]", f"background {background!r}: expected true or false")
            forks.append((f["child"], background))
        elif isinstance(f, str) and f:
            forks.append((f, False))
        else:
            raise _Bad(
                f"{place}.forks[{i}]", f'expected a session id or {{"child", "background"}}, got {f!r}'
            )
        if not forks[-1][1] and not last:
            raise _Bad(
                f"{place}.forks[{i}]",
                "a fork ends its parent: only the last turn may fork without background",
            )
    if len({c for c, _ in forks}) < len(forks):
        raise _Bad(f"{place}.forks", "a session forked twice by one turn")
    spawns: list[tuple[tuple[str, ...], int | None]] = []
    raw_spawns = obj.get("spawns", [])
    if not isinstance(raw_spawns, list):
        raise _Bad(f"{place}.spawns", f"expected a list, got {raw_spawns!r}")
    for i, s in enumerate(raw_spawns):
        if isinstance(s, str) and s:
            spawns.append(((s,), None))  # joined by the next turn
        elif isinstance(s, dict) and not set(s) - {"children", "join_at"}:
            join = s.get("join_at")
            if join is not None and (isinstance(join, bool) or not isinstance(join, int) or join <= k):
                raise _Bad(f"{place}.spawns[{i}]", f"join_at {join!r}: expected a later turn than {k}")
            spawns.append((_ids(s.get("children"), f"{place}.spawns[{i}].children"), join))
        else:
            raise _Bad(
                f"{place}.spawns[{i}]", f'expected a session id or {{"children", "join_at"}}, got {s!r}'
            )
    named = [c for cs, _ in spawns for c in cs]
    if len(set(named)) < len(named):
        raise _Bad(f"{place}.spawns", "a session spawned twice by one turn")
    delay = _number(obj, "delay", place) or 0.0
    turn = _Turn(tuple(parts), max_tokens, delay / 1000, tuple(forks), tuple(spawns))
    return turn, dropped


def _orchestrator(obj: dict[str, Any]) -> tuple[list[_Turn], bool]:
    """The request-less turns of an orchestrator: one spawn, or a spine of rounds."""
    if obj.get("turns"):
        raise _Bad("turns", "an orchestrator has no turns of its own")
    if obj.get("pre_session_spawns"):
        raise _Bad("pre_session_spawns", "not allowed on an orchestrator")
    rounds, think = obj.get("rounds"), _number(obj, "think_time_ms", "")
    sampled = obj.get("think_time_sigma") is not None
    for name in ("think_time_sigma", "think_time_min_ms", "think_time_max_ms"):
        _number(obj, name, "")
    if rounds is None:
        return [
            _Turn((), None, 0.0, spawns=((_ids(obj.get("spawns"), "spawns"), None),), request=False)
        ], sampled
    plan: list[tuple[tuple[str, ...], float]] = []
    if isinstance(rounds, list) and rounds and not obj.get("spawns"):
        for i, r in enumerate(rounds):
            if not isinstance(r, dict) or set(r) - {"spawns", "think_time_ms"}:
                raise _Bad(f"rounds[{i}]", 'expected {"spawns", "think_time_ms"}')
            own = _number(r, "think_time_ms", f"rounds[{i}]")
            plan.append(
                (_ids(r.get("spawns"), f"rounds[{i}].spawns"), own if own is not None else think or 0.0)
            )
    elif isinstance(rounds, int) and not isinstance(rounds, bool) and rounds >= 1:
        plan = [(_ids(obj.get("spawns"), "spawns"), think or 0.0)] * rounds
    else:
        raise _Bad("rounds", f"{rounds!r}: expected a count (with spawns) or a list of rounds (without)")
    turns = [
        _Turn((), None, ms / 1000, spawns=((kids, k + 1),), request=False)
        for k, (kids, ms) in enumerate(plan)
    ]
    return [*turns, _Turn((), None, 0.0, request=False)], sampled


def _conversation(text: str, line: int) -> _Conversation:
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise _Bad("", f"expected a JSON object (a conversation), got {type(obj).__name__}")
    if unknown := sorted(set(obj) - CONVERSATION_KEYS):
        raise _Bad("", f"unknown key(s) {unknown} (known: {', '.join(sorted(CONVERSATION_KEYS))})")
    sid = obj.get("session_id")
    if not isinstance(sid, str) or not sid:
        raise _Bad("session_id", f"expected a non-empty string, got {sid!r}")
    mode = obj.get("context_mode") or CONTEXT_MODES[0]
    if mode not in CONTEXT_MODES:
        raise _Bad("context_mode", f"{mode!r}: expected one of {', '.join(CONTEXT_MODES)}")
    orchestrator = obj.get("orchestrator", False)
    if not isinstance(orchestrator, bool):
        raise _Bad("orchestrator", f"{orchestrator!r}: expected true or false")
    if orchestrator:
        turns, sampled = _orchestrator(obj)
        where = "rounds" if isinstance(obj.get("rounds"), list) else "spawns"
        return _Conversation(sid, line, tuple(turns), mode, (), 0, sampled, where)
    for name in ORCHESTRATOR_KEYS:
        if obj.get(name) is not None:
            raise _Bad(name, "only an orchestrator has it")
    raw = obj.get("turns")
    if not isinstance(raw, list) or not raw:
        raise _Bad("turns", "expected a non-empty list of turns")
    built = [_turn(t, k, k == len(raw) - 1) for k, t in enumerate(raw)]
    for k, (t, _) in enumerate(built):
        for _, join in t.spawns:
            if join is not None and join >= len(raw):
                raise _Bad(f"turns[{k}].spawns", f"join_at {join}: the conversation has {len(raw)} turns")
    pre = _ids(obj.get("pre_session_spawns", []), "pre_session_spawns")
    return _Conversation(sid, line, tuple(t for t, _ in built), mode, pre, sum(d for _, d in built), False)


def _problem(convs: dict[str, _Conversation]) -> tuple[str, str] | None:
    """(session, why) of the first structural problem in file order, or None."""
    forked_by: dict[str, str] = {}
    for c in convs.values():
        for place, child, fork in c.targets():
            if child not in convs:
                return c.sid, f"{place}: {child!r} is not a session_id of this file"
            if fork and child in forked_by:
                return c.sid, f"{place}: {child!r} is forked by {forked_by[child]!r} too (one parent only)"
            if fork and convs[child].mode == "message_array_with_responses":
                return c.sid, f"{place}: {child!r} sends each turn alone (context_mode): not forkable"
            if fork:
                forked_by[child] = c.sid
    for c in convs.values():
        if pre := [p for p in c.pre if p in forked_by]:
            return c.sid, f"pre_session_spawns: {pre[0]!r} is also forked (a pre-session child starts empty)"
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in convs:
        if start in state:
            continue
        path, stack = [start], [iter(sorted({child for _, child, _ in convs[start].targets()}))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[-1], f"a cycle: {' -> '.join([*path[path.index(nxt) :], nxt])}"
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted({c for _, c, _ in convs[nxt].targets()})))
    return None


@dataclass(frozen=True)
class _At:
    """Where a conversation stands: the items its next turn waits for, and the wait after them."""

    parents: tuple[int, ...] = ()
    wait_s: float = 0.0


class _Expander:
    def __init__(self, path: Path, convs: dict[str, _Conversation]) -> None:
        self.path, self.convs = path, convs
        self.items: list[ReplayItem] = []
        self.defaulted = self.runs = 0
        self.session, self.agent = "", 0

    def root(self, sid: str, number: int) -> None:
        self.session, self.agent = sid, number
        self.play(self.convs[sid], sid, 0, "root", 0, _At(), None)

    def play(self, conv: _Conversation, path: str, depth: int, role: str, branch: int, at: _At,
             history: list[tuple[str, str]] | None) -> _At:  # fmt: skip
        """The items of one run of ``conv`` (``history``: a fork's inherited messages); where it ends."""
        self.runs += 1
        if self.runs > MAX_REQUESTS:
            raise InputError(f"{self.path}: its forks and spawns expand to more than {MAX_REQUESTS} runs")
        parts = list(history or [])
        for i, child in enumerate(conv.pre):
            self.play(self.convs[child], f"{path}.pre/{child}", depth + 1, "spawn", i, at, None)
        joins: dict[int, list[int]] = {}
        for k, turn in enumerate(conv.turns):
            node = f"{path}.t{k}"
            joined = joins.pop(k, None)
            # after a join the wait counts from the joined sub-agents' ends, the latest parents
            wait = turn.delay_s + (0.0 if joined is not None else at.wait_s)
            at = _At(tuple(dict.fromkeys((*at.parents, *(joined or [])))), wait)
            if turn.request:
                alone = conv.mode == "message_array_with_responses"
                prompt = list(turn.parts) if alone else parts + list(turn.parts)
                at = _At((self.send(turn, prompt, node, at, depth, role, branch),))
                if not alone:
                    parts += turn.parts
                if conv.mode == "deltas_without_responses":
                    words = segment_words(f"{self.session}:{node}:reply", self.items[-1].max_tokens)
                    parts.append(("assistant", " ".join(words)))
            for i, (child, _) in enumerate(turn.forks):
                self.play(self.convs[child], f"{node}>{child}", depth + 1, "fork", i, at, parts)
            b = len(turn.forks)
            for children, join in turn.spawns:
                for child in children:
                    end = self.play(self.convs[child], f"{node}/{child}", depth + 1, "spawn", b, at, None)
                    b += 1
                    target = k + 1 if join is None else join
                    if target < len(conv.turns):  # a spawn on the last turn is not waited for
                        joins.setdefault(target, []).extend(end.parents)
        return at

    def send(self, turn: _Turn, prompt: list[tuple[str, str]], node: str, at: _At, depth: int, role: str,
             branch: int) -> int:  # fmt: skip
        if len(self.items) >= MAX_REQUESTS:
            raise InputError(f"{self.path}: its forks and spawns expand to more than {MAX_REQUESTS} requests")
        max_tokens = turn.max_tokens
        if max_tokens is None:
            self.defaulted += 1
            max_tokens = DEFAULT_MAX_TOKENS
        number = len(self.items)
        self.items.append(
            ReplayItem(
                index=number,
                offset_s=max((self.items[p].offset_s for p in at.parents), default=0.0) + at.wait_s,
                prompt_tokens=max(sum(len(text.split()) for _, text in prompt), 1),
                max_tokens=max_tokens,
                prompt_parts=tuple(text for _, text in prompt),
                prompt_roles=tuple(r for r, _ in prompt),
                parents=at.parents,
                gap_s=at.wait_s,
                identity=RequestIdentity(
                    session_id=self.session,
                    agent_id=self.agent,
                    node=node,
                    parent_nodes=tuple(self.items[p].identity.node for p in at.parents),
                    depth=depth,
                    branch=branch,
                    role=role,
                    request_id=f"{self.session}:{node}",
                ),
            )
        )
        return number


def _read(path: Path, bad: BadLines) -> dict[str, _Conversation]:
    convs: dict[str, _Conversation] = {}
    for line_no, conv in parsed_lines(path, bad, _conversation):
        if conv.sid in convs:
            bad.bad(line_no, f"session_id {conv.sid!r}: already used on line {convs[conv.sid].line}")
            continue
        convs[conv.sid] = conv
    while (problem := _problem(convs)) is not None:
        sid, why = problem
        bad.bad(convs[sid].line, why)
        del convs[sid]
    return convs


def import_aiperf_dag(path: str | Path, *, skip_bad_lines: bool = False) -> ReplayPlan:
    """Read an AIPerf DAG JSONL file into a dependent plan, one session per root conversation."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    bad = BadLines(p, skip_bad_lines)
    convs = _read(p, bad)
    named = {child for c in convs.values() for _, child, _ in c.targets()}
    roots = [sid for sid in convs if sid not in named]
    expander = _Expander(p, convs)
    try:
        for n, sid in enumerate(roots):
            expander.root(sid, n)
    except RecursionError:
        raise InputError(f"{p}: forks and spawns nested too deeply to replay") from None
    if not expander.items:
        raise InputError(f"{p}: no conversation turn to replay")
    plan = ReplayPlan(
        items=expander.items, source=str(p), source_format=FORMAT.name, default_mode=FORMAT.default_mode
    )
    if bad.count:
        plan.notes.append(f"skipped {bad.count} bad line(s); first: {bad.first}")
    if expander.defaulted:
        plan.notes.append(
            f"{expander.defaulted} turn(s) without max_tokens: sent with max_tokens={DEFAULT_MAX_TOKENS}"
        )
    if dropped := sum(convs[s].dropped_parts for s in convs):
        plan.notes.append(
            f"{dropped} content part(s) that are not text (images, audio) left out of the prompts"
        )
    if sampled := [s for s, c in convs.items() if c.sampled]:
        plan.notes.append(
            f"{len(sampled)} orchestrator(s) draw their think time at random (think_time_sigma): "
            "replayed with the median think_time_ms"
        )
    return plan


def read_aiperf_dag(source: str, options: ReadOptions) -> ReplayPlan:
    return import_aiperf_dag(source, skip_bad_lines=options.skip_bad_lines)


def detect(peek: Peek) -> bool:
    """A ``.jsonl`` file whose first line is a conversation: ``session_id`` and ``turns`` (or an orchestrator)."""
    if not peek.file_with(".jsonl") or '"session_id"' not in peek.first_line:
        return False
    obj = json_object(peek.first_line)
    return (
        obj is not None
        and isinstance(obj.get("session_id"), str)
        and ("turns" in obj or obj.get("orchestrator") is True)
    )


FORMAT = TraceFormat(
    name="aiperf_dag",
    title="AIPerf DAG JSON lines (.jsonl, a conversation a line)",
    detect=detect,
    read=read_aiperf_dag,
    offsets="waits",
)
