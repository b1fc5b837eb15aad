"""ShapeTable: the requests of a trace, a run or a spec, reduced to what shapes prefix reuse.

Place in the map (docs/architecture.md, "Shape"): the common input of ``features``, ``fit`` and
``realism``. One row per request (first attempts only): its session, its parents (rows it
waited for) and its context parents (those whose prompt its own prompt extends: it starts
with all of the parent's prompt but for its last block, or at least 90 % of it; a spawned
sub-agent waits for its parent without extending it; a request that extends none of its
parents, such as a join after parallel branches, extends its nearest ancestor that it does),
prompt and output length in tokens, the ideal
cached tokens (the longest prefix it shares with any earlier prompt, earlier in send order),
the same within its own session alone (``session_cached_tokens``),
its start, and the wait from its last parent's end to its start (tool and think time). A
session's first request also carries the prefix it shares with another session's first
request (the shared system prompt, as far as the content shows it) and a key naming that
prefix.

Three sources:

- an imported trace (a ``ReplayPlan``): prompts are the replay's words (recorded parts split
  on whitespace, each weighing the recorded prompt tokens over the words; or one unit per
  hash-id block, weighing the block's tokens), in send order; output is the recorded completion length; the wait is the plan's ``gap_s``;
- a swarm run folder: the recorded estimates (``prompt_tokens_est``,
  ``ideal_cached_tokens_est``), ``completion_tokens`` (else ``max_tokens``), parents from
  ``parent_nodes`` (context parents) and the ``after`` links of the run's topologies (rebuilt
  from its spec), the wait from the parents' recorded ends to ``scheduled_ns``; a row without a
  session id (a replay of a flat trace) is a session of its own;
- a run spec, offline: the Workload's prompts with ``context: synthetic`` stand-ins, every node
  run (no beam pruning, no early stops, no failures), agents one after another, each node's
  wait its parents' tool time plus its own think time; a session started mid-life
  (``start_at: mid``) from its start, its warm-up calls counted in the ideal but not as rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from swarm.errors import InputError
from swarm.replay.plan import ReplayItem, ReplayPlan, session_roots
from swarm.shape.conversations import infer_conversations, is_flat
from swarm.workload.prefix import BLOCK_TOKENS, PrefixIndex

if TYPE_CHECKING:
    from swarm.workload.workload import WorkloadSpec

SourceKind = Literal["trace", "run", "spec"]


@dataclass(frozen=True, slots=True)
class ShapeRow:
    session: str
    parents: tuple[int, ...]  # positions of the rows it waited for, in this table
    prompt_tokens: int
    output_tokens: int
    ideal_cached_tokens: int
    start_s: float
    gap_s: float | None  # from its last parent's end to its start; None without parents
    context_parents: tuple[int, ...] = ()  # the parents whose prompt its own extends
    shared_lead_tokens: int = 0  # a session's first request: prefix shared with another session's first
    shared_lead_key: str = ""  # names that prefix (equal keys: the same shared prompt)
    #: the longest prefix shared with an earlier prompt of its own session (the session alone
    #: against an infinite cache, as agent studies compute a trace's optimal hit)
    session_cached_tokens: int = 0


@dataclass
class ShapeTable:
    rows: list[ShapeRow]
    source: str
    kind: SourceKind
    notes: list[str] = field(default_factory=list)
    #: a trace whose hash ids are numbered per session can show no prefix shared across
    #: sessions: its ideal reuse is each session's alone (``ReplayPlan.ids_per_session``)
    ids_per_session: bool = False

    def sessions(self) -> dict[str, list[int]]:
        """Row positions by session, in row order."""
        out: dict[str, list[int]] = {}
        for i, r in enumerate(self.rows):
            out.setdefault(r.session, []).append(i)
        return out

    def children(self) -> list[list[int]]:
        """For each row, the rows that list it as a parent."""
        out: list[list[int]] = [[] for _ in self.rows]
        for i, r in enumerate(self.rows):
            for p in r.parents:
                out[p].append(i)
        return out


# -- shared leads: what sessions' first prompts have in common ------------------------------------


def _weighted_prefix(units: Sequence[object], weights: Sequence[float], matched: int) -> int:
    return round(sum(weights[:matched]))


def _common_units(a: Sequence[object], b: Sequence[object]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def extends(child: Sequence[object], parent: Sequence[object], parent_weights: Sequence[float]) -> bool:
    """Whether a prompt (as units) extends a parent's: it starts with all of the parent's units
    but the last, or with at least 90 % of the parent's tokens."""
    common = _common_units(child, parent)
    if common >= len(parent) - 1:
        return True
    total = sum(parent_weights)
    return total > 0 and sum(parent_weights[:common]) >= 0.9 * total


def shared_leads(
    firsts: list[tuple[Sequence[object], Sequence[float]]],
) -> list[tuple[int, str]]:
    """For each session's first prompt (its units and each unit's weight in tokens): the tokens
    of the longest prefix it shares with any other first prompt, and a key naming that prefix."""
    matched = [0] * len(firsts)
    for order in (range(len(firsts)), range(len(firsts) - 1, -1, -1)):
        index = PrefixIndex()
        for i in order:
            matched[i] = max(matched[i], index.observe(firsts[i][0]))
    out = []
    for (units, weights), m in zip(firsts, matched, strict=True):
        key = hashlib.blake2b(repr(tuple(units[:m])).encode(), digest_size=6).hexdigest() if m else ""
        out.append((_weighted_prefix(units, weights, m), key))
    return out


def _with_leads(
    rows: list[ShapeRow], firsts: dict[str, tuple[int, Sequence[object], Sequence[float]]]
) -> None:
    """Fill in the shared lead of each session's first row (in place)."""
    sessions = list(firsts)
    leads = shared_leads([(firsts[s][1], firsts[s][2]) for s in sessions])
    for s, (tokens, key) in zip(sessions, leads, strict=True):
        pos = firsts[s][0]
        rows[pos] = dataclasses.replace(rows[pos], shared_lead_tokens=tokens, shared_lead_key=key)


# -- from an imported trace ---------------------------------------------------------------------


def _session_keys(items: list[ReplayItem]) -> dict[int, str]:
    """Session of each item by index: its recorded session id, joined with its parents'; named
    after the session's first item."""
    roots = session_roots(items)
    names: dict[int, str] = {}
    for it in items:  # items are in send order: the first seen names the session
        names.setdefault(roots[it.index], it.identity.session_id or f"item{it.index}")
    return {it.index: names[roots[it.index]] for it in items}


def _item_units(item: ReplayItem) -> tuple[list[object], list[float]]:
    """The prompt as units for prefix matching, and each unit's tokens: words of recorded
    parts (each weighing the recorded prompt tokens over the words, so a real text's words
    count as its tokens), or one unit per hash-id block (the cut last block a unit of its own length) and one
    unique unit for any uncovered tail."""
    if item.prompt_parts is not None:
        words: list[object] = [w for part in item.prompt_parts for w in part.split()]
        scale = item.prompt_tokens / len(words) if words and item.prompt_tokens > 0 else 1.0
        return words, [scale] * len(words)  # recorded tokens spread over the words
    units: list[object] = []
    weights: list[float] = []
    left = item.prompt_tokens
    for bid in item.block_ids:
        if left <= 0:
            break
        take = min(item.block_tokens, left)
        units.append(("b", item.block_tokens, bid) if take == item.block_tokens else ("p", take, bid))
        weights.append(take)
        left -= take
    if left > 0:
        units.append(("u", item.index))
        weights.append(left)
    return units, weights


def _send_order(items: Sequence[ReplayItem]) -> list[ReplayItem]:
    """Items by offset (then index), each after every parent it waits for (as a dependent
    replay sends them)."""
    import heapq

    by_index = {it.index: it for it in items}
    waiting = {it.index: sum(1 for p in it.parents if p in by_index) for it in items}
    children: dict[int, list[int]] = {}
    for it in items:
        for p in it.parents:
            if p in by_index:
                children.setdefault(p, []).append(it.index)
    ready = [(it.offset_s, it.index) for it in items if waiting[it.index] == 0]
    heapq.heapify(ready)
    out: list[ReplayItem] = []
    while ready:
        _, index = heapq.heappop(ready)
        out.append(by_index[index])
        for c in children.get(index, ()):
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, (by_index[c].offset_s, c))
    if len(out) < len(items):  # a cycle: the rest by offset
        placed = {it.index for it in out}
        out += sorted((it for it in items if it.index not in placed), key=lambda it: (it.offset_s, it.index))
    return out


def _system_lead(item: ReplayItem) -> tuple[int, str]:
    """Tokens and key of a recorded prompt's leading system messages (0 and "" when none); its
    words weighed as ``_item_units`` weighs them."""
    if item.prompt_parts is None or not item.prompt_roles:
        return 0, ""
    texts = []
    for role, text in zip(item.prompt_roles, item.prompt_parts, strict=False):
        if role != "system":
            break
        texts.append(text)
    words = [w for t in texts for w in t.split()]
    if not words:
        return 0, ""
    total = sum(len(p.split()) for p in item.prompt_parts)
    tokens = (
        round(len(words) * item.prompt_tokens / total) if item.prompt_tokens > 0 and total else len(words)
    )
    return tokens, hashlib.blake2b(repr(tuple(words)).encode(), digest_size=6).hexdigest()


#: ancestors looked at, nearest first, for a context a request extends past its direct parents
_ANCESTOR_SEARCH = 64


def _extended_ancestor(
    units: Sequence[object],
    parents: tuple[int, ...],
    rows: list[ShapeRow],
    seen: list[tuple[list[object], list[float]]],
) -> tuple[int, ...]:
    """The nearest ancestor (breadth first through the parents) whose prompt ``units`` extends,
    as a one-element tuple; empty when none of the nearest ``_ANCESTOR_SEARCH`` is."""
    queue = [p for r in parents for p in rows[r].parents]
    visited: set[int] = set(parents)
    while queue and len(visited) < _ANCESTOR_SEARCH + len(parents):
        nxt = queue.pop(0)
        if nxt in visited:
            continue
        visited.add(nxt)
        if extends(units, *seen[nxt]):
            return (nxt,)
        queue.extend(rows[nxt].parents)
    return ()


def table_from_plan(plan: ReplayPlan) -> ShapeTable:
    """The requests of an imported trace (see the module docstring); in a flat hash-id trace,
    conversations inferred from shared prefixes (``conversations``)."""
    notes = list(plan.notes)
    if is_flat(plan):
        plan, linked = infer_conversations(plan)
        notes.append(
            f"no sessions recorded: {linked} of {len(plan.items)} requests continue an earlier one "
            "(its whole prompt but a cut last block); gaps are start to start"
        )
    items = _send_order(plan.items)
    position = {it.index: i for i, it in enumerate(items)}
    session_of = _session_keys(items)
    index = PrefixIndex()
    alone: dict[str, PrefixIndex] = {}
    rows: list[ShapeRow] = []
    firsts: dict[str, tuple[int, Sequence[object], Sequence[float]]] = {}
    declared: dict[str, tuple[int, str]] = {}
    seen = [_item_units(it) for it in items]
    for i, it in enumerate(items):
        units, weights = seen[i]
        matched = index.observe(units)
        own = alone.setdefault(session_of[it.index], PrefixIndex()).observe(units)
        prompt = round(sum(weights)) if it.prompt_parts is not None else it.prompt_tokens
        parents = tuple(position[p] for p in it.parents if p in position)
        session = session_of[it.index]
        context = tuple(p for p in parents if extends(units, *seen[p]))
        if parents and not context:  # a join after branches extends the call before them
            context = _extended_ancestor(units, parents, rows, seen)
        rows.append(
            ShapeRow(
                session=session,
                parents=parents,
                prompt_tokens=prompt,
                output_tokens=it.max_tokens,
                ideal_cached_tokens=_weighted_prefix(units, weights, matched),
                start_s=it.offset_s,
                gap_s=it.gap_s if parents else None,
                context_parents=context,
                session_cached_tokens=_weighted_prefix(units, weights, own),
            )
        )
        if session not in firsts:
            firsts[session] = (i, units, weights)
            declared[session] = _system_lead(it)
    _with_leads(rows, firsts)
    for session, (tokens, key) in declared.items():  # recorded system messages longer than seen shared
        pos = firsts[session][0]
        if tokens > rows[pos].shared_lead_tokens:
            rows[pos] = dataclasses.replace(rows[pos], shared_lead_tokens=tokens, shared_lead_key=key)
    return ShapeTable(rows, plan.source, "trace", notes, ids_per_session=plan.ids_per_session)


# -- from a swarm run -----------------------------------------------------------------------------

_RUN_COLUMNS = [
    "target", "agent_id", "session_id", "node", "parent_nodes", "attempt", "scheduled_ns", "sent_ns", "e2e_ns",
    "max_tokens", "completion_tokens", "prompt_tokens", "prompt_tokens_est", "ideal_cached_tokens_est",
    "block_hashes",
]  # fmt: skip


def _after_parents(
    run_dir: str | Path, data: dict[str, list[Any]], keep: list[int], notes: list[str]
) -> dict[tuple[str, str], tuple[str, ...]]:
    """The nodes each row of a swarm run waited for without extending them (``after`` links: a
    spawned sub-agent's spawner, the sub-agents a join waits for), by (session, node), from the
    run's topologies: the trace's ``parent_nodes`` holds context parents only. Empty for a
    replay, or when the run's workload cannot be rebuilt as it was (said in ``notes``)."""
    from swarm.trace.manifest import RunManifest, changed_contents
    from swarm.workload.workload import Workload, WorkloadSpec

    try:
        manifest = RunManifest.read(run_dir)
    except (InputError, OSError, ValueError):
        return {}
    workload_spec = (manifest.spec or {}).get("workload")
    if not workload_spec or manifest.replay_of:
        return {}
    try:
        workload = Workload(WorkloadSpec.model_validate(workload_spec))
    except (InputError, ValueError) as exc:
        notes.append(f"the run's topologies cannot be read again ({exc}): waits without context not shown")
        return {}
    if manifest.workload_digests and changed_contents(workload.content_digests(), manifest.workload_digests):
        notes.append("a profile or topology changed since the run: waits without context not shown")
        return {}
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    templates: dict[int, Any] = {}
    for i in keep:
        agent = int(data["agent_id"][i])
        if agent not in templates:
            try:
                templates[agent] = workload.agent(agent).topology
            except IndexError:
                templates[agent] = None
        template, node = templates[agent], data["node"][i]
        if template is not None and node in template.graph:
            waited = template.after_parents(node)
            if waited:
                out[(data["session_id"][i], node)] = tuple(waited)
    return out


def table_from_run(run_dir: str | Path, target: str | None = None) -> ShapeTable:
    """The first attempts of one target of a run (the first target unless named)."""
    from swarm.trace.reader import WARMUP_COLUMN, read_requests

    table = read_requests(run_dir, [*_RUN_COLUMNS, WARMUP_COLUMN])
    data: dict[str, list[Any]] = table.to_pydict()
    warm_flags = [bool(w) for w in data[WARMUP_COLUMN]]
    targets = list(dict.fromkeys(data["target"]))
    if not targets:
        raise InputError(f"{run_dir}: the run has no requests")
    chosen = target or targets[0]
    if chosen not in targets:
        raise InputError(f"{run_dir}: no target {chosen!r} in this run (targets: {', '.join(targets)})")
    chosen_rows = [i for i, t in enumerate(data["target"]) if t == chosen and data["attempt"][i] == 0]
    # a mid-life start's warm-up calls are no rows, but their prompts are in its session's reuse
    warm = [i for i in chosen_rows if warm_flags[i]]
    warmups = len(warm)
    keep = [i for i in chosen_rows if not warm_flags[i]]
    keep.sort(key=lambda i: (data["scheduled_ns"][i], data["sent_ns"][i]))
    t0 = data["scheduled_ns"][keep[0]] if keep else 0
    position = {(data["session_id"][i], data["node"][i]): k for k, i in enumerate(keep)}
    notes: list[str] = []
    if warmups:
        notes.append(f"{warmups} warm-up calls of sessions started mid-life left out")
    after = _after_parents(run_dir, data, keep, notes)
    rows: list[ShapeRow] = []
    firsts: dict[str, tuple[int, Sequence[object], Sequence[float]]] = {}
    hashes_of = [list(data["block_hashes"][i] or ()) for i in keep]
    alone: dict[str, PrefixIndex] = {}
    for i in warm:  # sent before the calls of their session
        alone.setdefault(data["session_id"][i], PrefixIndex()).observe(list(data["block_hashes"][i] or ()))
    for k, i in enumerate(keep):
        session = data["session_id"][i] or f"row{k}"  # a replay of a flat trace records none
        recorded = tuple(
            position[(session, p)] for p in data["parent_nodes"][i] or () if (session, p) in position
        )
        waited = tuple(
            position[(session, p)]
            for p in after.get((session, data["node"][i]), ())
            if (session, p) in position and position[(session, p)] not in recorded
        )
        parents = recorded + waited
        gap: float | None = None
        if parents:
            ends = []
            for p in parents:
                j = keep[p]
                e2e = data["e2e_ns"][j]
                ends.append(None if e2e is None else data["sent_ns"][j] + e2e)
            if all(e is not None for e in ends):
                gap = max(0.0, (data["scheduled_ns"][i] - max(e for e in ends if e is not None)) / 1e9)
        prompt = data["prompt_tokens_est"][i]
        if prompt is None:
            prompt = data["prompt_tokens"][i] or 0
        output = data["completion_tokens"][i]
        if output is None:
            output = data["max_tokens"][i] or 0
        own_blocks = alone.setdefault(session, PrefixIndex()).observe(hashes_of[k])
        rows.append(
            ShapeRow(
                session=session,
                parents=parents,
                prompt_tokens=int(prompt),
                output_tokens=int(output),
                ideal_cached_tokens=int(data["ideal_cached_tokens_est"][i] or 0),
                start_s=(data["scheduled_ns"][i] - t0) / 1e9,
                gap_s=gap,
                context_parents=tuple(
                    p
                    for p in recorded
                    if extends(hashes_of[k], hashes_of[p], [BLOCK_TOKENS] * len(hashes_of[p]))
                ),
                session_cached_tokens=min(int(prompt), own_blocks * BLOCK_TOKENS),
            )
        )
        hashes = hashes_of[k]
        if session not in firsts:
            weights = [BLOCK_TOKENS] * len(hashes)
            if weights:
                weights[-1] = int(prompt) - BLOCK_TOKENS * (len(hashes) - 1)
            firsts[session] = (k, hashes, weights)
    _with_leads(rows, firsts)
    if len(targets) > 1:
        notes.append(f"target {chosen} of {', '.join(targets)}")
    return ShapeTable(rows, str(run_dir), "run", notes)


# -- from a run spec, offline ---------------------------------------------------------------------


def table_from_spec(spec: WorkloadSpec, source: str, agents: int | None = None) -> ShapeTable:
    """The requests a spec's workload sends, computed without an engine (see the module
    docstring); ``agents`` agents (default: the spec's)."""
    from swarm.workload.prompts import compose_messages, synthetic_turn
    from swarm.workload.workload import Workload, check_mix

    check_mix(spec, source=source)
    n = agents or spec.agents
    workload = Workload(spec.model_copy(update={"agents": n}))
    index = PrefixIndex()
    rows: list[ShapeRow] = []
    firsts: dict[str, tuple[int, Sequence[object], Sequence[float]]] = {}
    notes: list[str] = []
    encode = workload.tokenizer.encode
    for a in range(n):
        plan = workload.agent(a)
        t = plan.topology
        if t.beams or plan.profile.pruning.early_stop_p > 0:
            note = f"{t.name}/{plan.profile.name}: read as if no branch were pruned"
            if note not in notes:
                notes.append(note)
        position: dict[str, int] = {}
        alone = PrefixIndex()  # this agent's prompts only
        history = set(plan.history)
        for node in t.order:
            later = [c for c in t.graph.successors(node) if c not in history]
            if node in history and not any(node in t.context_parents(c) for c in later):
                continue  # before a mid-life start, and not re-sent
            ancestors = t.context_ancestors(node)
            messages = compose_messages(plan, node, [(p, synthetic_turn(plan, p)) for p in ancestors])
            tokens: list[object] = [tok for m in messages for tok in encode(m.content)]
            matched = index.observe(tokens)
            own = alone.observe(tokens)
            if node in history:  # its warm-up call: sent, but no row (in no figure)
                continue
            context = t.context_parents(node)
            waited = [*context, *t.after_parents(node)]
            parents = tuple(position[p] for p in waited if p in position)
            np_ = plan.node(node)
            gap = None
            if parents:
                gap = max(plan.node(p).tool_s for p in waited) + np_.think_s
            position[node] = len(rows)
            if plan.session_id not in firsts:
                firsts[plan.session_id] = (len(rows), tokens, [1] * len(tokens))
            rows.append(
                ShapeRow(
                    session=plan.session_id,
                    parents=parents,
                    prompt_tokens=len(tokens),
                    output_tokens=np_.max_tokens,
                    ideal_cached_tokens=matched,
                    start_s=plan.start_s,
                    gap_s=gap,
                    context_parents=tuple(position[p] for p in context if p in position),
                    session_cached_tokens=own,
                )
            )
    _with_leads(rows, firsts)
    if n != spec.agents:
        notes.append(f"{n} agents (the spec has {spec.agents})")
    return ShapeTable(rows, source, "spec", notes)
