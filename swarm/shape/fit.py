"""Fitting: an agent profile, its topologies and a run spec in the shape of a recorded trace.

Place in the map (docs/architecture.md, "Shape"): ``swarm fit TRACE -o spec.yaml`` builds a
ShapeTable of the trace and calls ``fit_table`` then ``write_fit``. What is derived, and how:

- **Roles.** A request that others wait for is a ``tool_call`` (a tool runs after it and its
  result enters the context of what follows), or an ``aggregate`` when it waits for several;
  a request nothing waits for is an ``answer``.
- **System prompt.** The median over sessions of the prefix a session's first request shares
  with another session's first request (``ShapeRow.shared_lead_tokens``); the number of
  distinct shared prefixes is the spec's ``system_prompts``.
- **Task.** A first request's prompt less that system prompt and one instruction.
- **Instructions.** ``INSTRUCTION_TOKENS`` per call: a trace does not separate them.
- **Outputs** by role, and for all requests (``default``).
- **Tool results.** Per request with context parents: its growth (``prompt - the longest
  context parent's prompt``) less that parent's output and one instruction; what a turn adds
  besides the model's own words.
- **Links.** A context parent is a ``context`` link (the child's prompt holds the parent's
  turn; it may be an ancestor the request extends past its direct parents, as a join after
  parallel branches extends the call before them); a parent waited for without its context (a spawned sub-agent's spawner, the
  sub-agents a call joins) is an ``after`` link. A request whose parents are all ``after``
  links starts a sub-agent fresh (``spawn: true``: a task of its own, not the agent's).
- **Tool time.** The recorded wait after a request's parents (``gap_s``); think time is 0,
  since the trace's waits are all counted as tool time. A wait past ``IDLE_GAP_S`` is the
  user gone, a session boundary rather than a think time: left out (and counted in a note).
- **Compaction.** A request that extends none of its parents, whose parents no other request
  extends (else it is a sub-agent started beside its spawner's thread) and whose prompt is
  below ``COMPACTION_DROP`` of theirs is a compaction (the history replaced by a summary). When the trace has any, the profile
  compacts past the median prompt its parents reached (``threshold_tokens``), with a summary
  of what such a request holds beyond the system prompt and the median task; those requests
  are left out of the tool results.
- **Topologies.** Sessions of the same shape (the same links at the same positions) are one
  explicit graph; with more than ``MAX_TOPOLOGIES`` shapes, the sessions sorted by size are cut
  into that many equal groups, each represented by its median size (in the most common shape
  of that size) and weighted by the group's size: the session-length distribution is kept to
  that many quantiles, its far tail cut.
- **Arrivals.** Poisson at the trace's rate of new sessions (all at once when they all start
  together); ``agents`` the trace's session count.

Each distribution is a lognormal when one fits the values (one-sample KS distance at most
``LOGNORMAL_KS``), a constant when all values are equal, else the values' quantiles at every 5 %
(every 1 % from ``FINE_QUANTILES_FROM`` values on; ``dist: empirical``). Every number is written with a comment saying where it came from.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from swarm.errors import InputError
from swarm.shape.table import ShapeTable

INSTRUCTION_TOKENS = 4
MAX_TOPOLOGIES = 16
LOGNORMAL_KS = 0.08
#: empirical fits: values at every 5 %, or at every 1 % from ``FINE_QUANTILES_FROM`` values on
#: (a long tail, such as a tool result of 100k tokens among hundreds of 1k, keeps its weight:
#: at 5 % steps the top step alone interpolates up to the maximum and inflates the mean)
_QUANTILE_STEPS = 20
_FINE_QUANTILE_STEPS = 100
FINE_QUANTILES_FROM = 200


@dataclass(frozen=True)
class FittedValue:
    """One fitted distribution: its YAML mapping and the comment that explains it."""

    data: dict[str, Any]
    comment: str


@dataclass
class FittedTopology:
    name: str
    weight: int
    nodes: list[tuple[str, str, bool]]  # id, role, tool_after
    links: list[tuple[str, str, str]]  # source, target, kind
    sessions: int  # sessions of exactly this shape in the trace


@dataclass
class Fit:
    source: str
    name: str
    sessions: int
    requests: int
    system_prompt_tokens: int
    system_prompts: int
    system_comment: str
    task_tokens: FittedValue
    output_tokens: dict[str, FittedValue]
    tool_result_tokens: FittedValue
    tool_time_s: FittedValue
    topologies: list[FittedTopology]
    arrival: dict[str, Any]
    arrival_comment: str
    notes: list[str] = field(default_factory=list)
    compaction: FittedCompaction | None = None


def _lognormal_ks(values: np.ndarray, mu: float, sigma: float) -> float:
    x = np.sort(values)
    n = x.size
    cdf = np.array([NormalDist(mu, sigma).cdf(v) for v in np.log(x)])
    ranks = np.arange(1, n + 1) / n
    return float(max(np.max(ranks - cdf), np.max(cdf - (ranks - 1 / n))))


def _round(v: float, integer: bool) -> float:
    if integer:
        return float(round(v))
    return float(f"{v:.4g}")


def fit_values(values: Sequence[float], what: str, *, integer: bool, default: float) -> FittedValue:
    """A distribution for ``values`` (see the module docstring for the rule)."""
    arr = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
    arr = np.maximum(arr, 0.0)
    n = arr.size
    if n == 0:
        return FittedValue(
            {"dist": "constant", "value": default}, f"{what}: none in the trace; {default:g} assumed"
        )
    lo, hi = float(arr.min()), float(arr.max())
    if lo == hi:
        return FittedValue({"dist": "constant", "value": _round(lo, integer)}, f"{what}: {lo:g} in all {n}")
    ks = math.nan
    if lo > 0 and n >= 8:
        logs = np.log(arr)
        mu, sigma = float(logs.mean()), float(logs.std())
        if 0 < sigma <= 5:
            ks = _lognormal_ks(arr, mu, sigma)
            if ks <= LOGNORMAL_KS:
                data = {
                    "dist": "lognormal", "median": _round(math.exp(mu), integer), "sigma": round(sigma, 3),
                    "min": _round(lo, integer), "max": _round(hi, integer),
                }  # fmt: skip
                return FittedValue(
                    data,
                    f"{what}: lognormal fitted to {n} values (KS distance {ks:.3f}), clipped to their range",
                )
    steps = _FINE_QUANTILE_STEPS if n >= FINE_QUANTILES_FROM else _QUANTILE_STEPS
    qs = np.quantile(arr, np.linspace(0, 1, steps + 1))
    points = [_round(float(v), integer) for v in qs]
    for i in range(1, len(points)):  # rounding must not make them decrease
        points[i] = max(points[i], points[i - 1])
    why = (
        "too few for a shape"
        if n < 8
        else ("zeros among them" if lo == 0 else f"a lognormal fits with KS {ks:.2f}")
    )
    return FittedValue(
        {"dist": "empirical", "quantiles": points},
        f"{what}: the trace's values at every {100 // steps} % ({n} values; {why})",
    )


def roles(table: ShapeTable) -> list[str]:
    """Each row's role: aggregate (waits for several), tool_call (others wait for it), answer."""
    kids = table.children()
    out = []
    for r, k in zip(table.rows, kids, strict=True):
        out.append("aggregate" if len(r.parents) > 1 else ("tool_call" if k else "answer"))
    return out


_Shape = tuple[tuple[tuple[int, bool], ...], ...]


def _shape(table: ShapeTable, members: list[int], breaks: set[int]) -> _Shape:
    """Per member, its links as (position in the session, is a context link): its parents, and
    a context ancestor it extends without waiting for it directly. A thread break's parents
    (``thread_breaks``: a compaction, a rewritten history) are context links: the thread goes
    on, and the profile's compaction replaces its history when it grows past the threshold; it
    is no sub-agent."""
    where = {pos: i for i, pos in enumerate(members)}
    out = []
    for m in members:
        r = table.rows[m]
        linked = set(r.parents) | set(r.context_parents)  # a context ancestor may not be waited for directly
        context = linked if m in breaks else set(r.context_parents)
        out.append(tuple(sorted((where[p], p in context) for p in linked if p in where)))
    return tuple(out)


def _topologies(
    table: ShapeTable, name: str, row_roles: list[str], breaks: set[int]
) -> list[FittedTopology]:
    sessions = list(table.sessions().values())
    shapes = [_shape(table, m, breaks) for m in sessions]
    counts = Counter(shapes)
    groups: list[tuple[_Shape, int]]
    if len(counts) <= MAX_TOPOLOGIES:
        groups = sorted(counts.items(), key=lambda kv: (len(kv[0]), -kv[1]))
    else:
        order = sorted(range(len(sessions)), key=lambda i: (len(shapes[i]), shapes[i]))
        cuts = np.array_split(np.array(order), MAX_TOPOLOGIES)
        groups = []
        for cut in cuts:
            if cut.size:  # the group's median size, in its most common shape of that size
                size = len(shapes[int(cut[cut.size // 2])])
                mode = Counter(shapes[i] for i in cut if len(shapes[i]) == size).most_common(1)[0][0]
                groups.append((mode, int(cut.size)))
    out = []
    for k, (shape, weight) in enumerate(groups, start=1):
        example = sessions[shapes.index(shape)]
        has_kids = {p for ps in shape for p, _ in ps}
        nodes = [(f"n{i}", row_roles[example[i]], i in has_kids) for i in range(len(shape))]
        links = [
            (f"n{p}", f"n{i}", "context" if ctx else "after") for i, ps in enumerate(shape) for p, ctx in ps
        ]
        out.append(FittedTopology(f"{name}-{k}", weight, nodes, links, counts[shape]))
    return out


#: a wait longer than this (s) is a session boundary (the user gone), not a think or tool time
IDLE_GAP_S = 1800.0
#: a request whose prompt is below this share of its context parent's compacted its history
COMPACTION_DROP = 0.7


@dataclass
class FittedCompaction:
    threshold_tokens: int
    summary_tokens: FittedValue
    comment: str


def thread_breaks(table: ShapeTable) -> set[int]:
    """The rows that go on a thread without extending its prompt: they wait for parents, extend
    none of them, and no other row extends those parents (else the row is a sub-agent started
    beside its spawner's thread). A compaction is one; so is a rewritten or rewound history."""
    rows = table.rows
    extended = {p for r in rows for p in r.context_parents}  # a spawner's thread goes on
    return {
        i
        for i, r in enumerate(rows)
        if r.parents and not r.context_parents and not any(p in extended for p in r.parents)
    }


def _compactions(
    table: ShapeTable, system_tokens: int, breaks: set[int]
) -> tuple[set[int], FittedCompaction | None]:
    """The thread breaks that compacted their history (a prompt below ``COMPACTION_DROP`` of
    its parent's), and the compaction they give (None: none seen)."""
    rows = table.rows
    firsts = [members[0] for members in table.sessions().values()]
    task = float(np.median([rows[i].prompt_tokens - system_tokens - INSTRUCTION_TOKENS for i in firsts]))
    found: set[int] = set()
    before, summaries = [], []
    for i in sorted(breaks):
        r = rows[i]
        parent = max(rows[p].prompt_tokens for p in r.parents)
        if r.prompt_tokens < COMPACTION_DROP * parent:
            found.add(i)
            before.append(parent)
            # a compacted prompt is the system prompt, a task and the summary (and an instruction)
            summaries.append(max(3, round(r.prompt_tokens - system_tokens - task - INSTRUCTION_TOKENS)))
    if not found:
        return found, None
    threshold = int(np.median(before))
    summary = fit_values(
        summaries, "compacted prompt less the system prompt, the median task and one instruction",
        integer=True, default=100,
    )  # fmt: skip
    comment = (
        f"{len(found)} requests fall below {COMPACTION_DROP:.0%} of their parent's prompt (the history "
        f"compacted): median prompt before one {threshold} tokens"
    )
    return found, FittedCompaction(threshold, summary, comment)


def fit_table(table: ShapeTable, name: str) -> Fit:
    """Fit ``table`` (see the module docstring)."""
    rows = table.rows
    if not rows:
        raise InputError(f"{table.source}: no requests to fit")
    sessions = table.sessions()
    row_roles = roles(table)
    firsts = [members[0] for members in sessions.values()]
    leads = [rows[i].shared_lead_tokens for i in firsts]
    shared = [lead for lead in leads if lead > 0]
    system_tokens = int(np.median(shared)) if shared else 1
    keys = Counter(rows[i].shared_lead_key for i in firsts if rows[i].shared_lead_tokens > 0)
    distinct = max(1, len(keys))
    notes = []
    if shared:
        system_comment = (
            f"{len(shared)} of {len(sessions)} sessions open with a shared prefix (seen in another session, or "
            f"recorded as system messages): median {system_tokens} tokens, {distinct} distinct"
        )
        if len(shared) < len(sessions):
            notes.append(f"{len(sessions) - len(shared)} sessions share no prefix with another; here they do")
    else:
        system_comment = "no session shares a prefix with another: a 1-token shared prompt"
    task = fit_values(
        [rows[i].prompt_tokens - system_tokens - INSTRUCTION_TOKENS for i in firsts],
        "first prompt less the system prompt and one instruction", integer=True, default=100,
    )  # fmt: skip
    outputs = {
        "default": fit_values(
            [r.output_tokens for r in rows], "output of every call", integer=True, default=64
        )
    }
    for role in ("tool_call", "aggregate", "answer"):
        values = [r.output_tokens for r, rr in zip(rows, row_roles, strict=True) if rr == role]
        if len(values) >= 5:
            outputs[role] = fit_values(values, f"output of {role} calls", integer=True, default=64)
    breaks = thread_breaks(table)
    compacted, compaction = _compactions(table, system_tokens, breaks)
    if len(breaks) > len(compacted):
        notes.append(
            f"{len(breaks) - len(compacted)} requests go on their thread with a rewritten history (neither "
            "extending their parent's prompt nor compacting it): fitted as turns that extend it"
        )
    added, gaps = [], []
    idle = 0
    for i, r in enumerate(rows):
        if r.context_parents and i not in compacted:
            longest = max(r.context_parents, key=lambda p: rows[p].prompt_tokens)
            parent = rows[longest]
            added.append(r.prompt_tokens - parent.prompt_tokens - parent.output_tokens - INSTRUCTION_TOKENS)
        if r.parents and r.gap_s is not None:
            if r.gap_s > IDLE_GAP_S:
                idle += 1
            else:
                gaps.append(r.gap_s)
    short = sum(1 for a in added if a < 3)
    tool_result = fit_values(
        added, "growth per turn less the parent's output and one instruction", integer=True, default=3
    )
    if added and short:
        notes.append(
            f"{short} of {len(added)} turns add less than their parent's output (context trimmed, or reasoning "
            "not carried over): a fitted swarm adds at least 3 tokens there"
        )
    tool_time = fit_values(gaps, "wait after the parents' end (s)", integer=False, default=0.0)
    if idle:
        notes.append(
            f"{idle} waits longer than {IDLE_GAP_S:g} s (the user gone: a session boundary, not a think "
            "time) are left out of the tool time"
        )
    starts = sorted(rows[i].start_s for i in firsts)
    span = starts[-1] - starts[0] if starts else 0.0
    if len(starts) > 1 and span > 0:
        rate = float(f"{(len(starts) - 1) / span:.4g}")
        arrival: dict[str, Any] = {"process": "poisson", "rate": rate}
        arrival_comment = f"{len(starts)} sessions started over {span:.4g} s: {rate:g} new sessions/s"
    else:
        arrival = {"process": "all_at_once"}
        arrival_comment = "every session starts at once in the trace"
    return Fit(
        source=table.source, name=name, sessions=len(sessions), requests=len(rows),
        system_prompt_tokens=system_tokens, system_prompts=distinct, system_comment=system_comment,
        task_tokens=task, output_tokens=outputs, tool_result_tokens=tool_result, tool_time_s=tool_time,
        topologies=_topologies(table, name, row_roles, breaks), arrival=arrival, arrival_comment=arrival_comment,
        notes=notes + list(table.notes), compaction=compaction,
    )  # fmt: skip


# -- writing --------------------------------------------------------------------------------------


def _flow(value: Any) -> str:
    """A value as YAML flow style."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{int(value)}" if value.is_integer() else f"{value:g}"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    return (
        text
        if re.fullmatch(r"[A-Za-z0-9_./-]+", text)
        else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    )


def _quoted(text: str) -> str:
    """A string as a double-quoted YAML scalar (a name like ``2024`` or ``on`` stays a string)."""
    return json.dumps(text)


def _comment(text: str, indent: str = "") -> str:
    return f"{indent}# {text}\n"


def profile_yaml(fit: Fit) -> str:
    out = [
        _comment(
            f"Fitted by `swarm fit` from {fit.source}: {fit.sessions} sessions, {fit.requests} requests."
        ),
        _comment("Each number says where it came from; edit freely (docs/realism.md)."),
        f"name: {_quoted(fit.name)}\n",
        f"description: {_flow(f'fitted to {Path(fit.source).name}')}\n",
        "system_prompt:\n",
        _comment(fit.system_comment, "  "),
        "  style: prose\n",
        f"  tokens: {fit.system_prompt_tokens}\n",
        _comment(fit.task_tokens.comment),
        f"task_tokens: {_flow(fit.task_tokens.data)}\n",
        _comment("A trace does not separate instructions from the rest of a turn: a few tokens per call."),
        f"instruction_tokens: {{dist: constant, value: {INSTRUCTION_TOKENS}}}\n",
        "output_tokens:\n",
    ]
    for role, value in fit.output_tokens.items():
        out += [_comment(value.comment, "  "), f"  {role}: {_flow(value.data)}\n"]
    out += [
        _comment("The trace's waits are all counted as tool time (below)."),
        "think_time_s: {dist: constant, value: 0}\n",
        _comment(fit.tool_time_s.comment),
        f"tool_time_s: {_flow(fit.tool_time_s.data)}\n",
        _comment(fit.tool_result_tokens.comment),
        f"tool_result_tokens: {_flow(fit.tool_result_tokens.data)}\n",
    ]
    if fit.compaction is not None:
        c = fit.compaction
        out += [
            "compaction:\n",
            _comment(c.comment, "  "),
            f"  threshold_tokens: {c.threshold_tokens}\n",
            _comment(c.summary_tokens.comment, "  "),
            f"  summary_tokens: {_flow(c.summary_tokens.data)}\n",
        ]
    return "".join(out)


def topology_yaml(fit: Fit, topo: FittedTopology) -> str:
    out = [
        _comment(
            f"Fitted by `swarm fit` from {fit.source}: a session shape with {len(topo.nodes)} calls; "
            f"{topo.sessions} sessions have exactly this shape, and it stands for {topo.weight} of {fit.sessions}."
        ),
        _comment(
            "tool_call: others wait for it (a tool runs after it); aggregate: waits for several; answer: a leaf."
        ),
        f"name: {_quoted(topo.name)}\n",
        f"description: {_flow(f'{len(topo.nodes)} calls in the shape of {Path(fit.source).name}')}\n",
        "graph:\n",
        "  nodes:\n",
    ]
    spawned = {t for _, t, _ in topo.links} - {t for _, t, kind in topo.links if kind == "context"}
    for node_id, role, tool_after in topo.nodes:
        extra = ", tool_after: true" if tool_after else ""
        extra += ", spawn: true" if node_id in spawned else ""
        out.append(f"    - {{id: {node_id}, role: {role}{extra}}}\n")
    out.append("  links:\n" if topo.links else "  links: []\n")
    out += [
        f"    - {{source: {s}, target: {t}}}\n"
        if kind == "context"
        else f"    - {{source: {s}, target: {t}, kind: after}}\n"
        for s, t, kind in topo.links
    ]
    return "".join(out)


def spec_yaml(fit: Fit, profile_file: str, topology_files: list[str]) -> str:
    out = [
        _comment(
            f"Fitted by `swarm fit` from {fit.source}: {fit.sessions} sessions, {fit.requests} requests."
        ),
        _comment(
            f"Run it: swarm run --spec THIS_FILE --agents N. Check it: swarm realism THIS_FILE --against {fit.source}"
        ),
    ]
    out += [_comment(note) for note in fit.notes]
    out += [
        "workload:\n",
        _comment("as many agents as the trace has sessions; --agents sets any other size", "  "),
        f"  agents: {fit.sessions}\n",
        _comment(fit.system_comment, "  "),
        f"  system_prompts: {fit.system_prompts}\n",
        _comment("children see stand-ins of their parents' outputs: the same prompts on every engine", "  "),
        "  context: synthetic\n",
        _comment(fit.arrival_comment, "  "),
        f"  arrival: {_flow(fit.arrival)}\n",
        _comment("one topology per session shape, weighted by the sessions it stands for", "  "),
        "  mix:\n",
    ]
    for topo, file in zip(fit.topologies, topology_files, strict=True):
        out.append(
            f"    - {{profile: {_quoted(profile_file)}, topology: {_quoted(file)}, weight: {topo.weight}}}\n"
        )
    return "".join(out)


def write_fit(fit: Fit, spec_path: Path) -> list[Path]:
    """Write the run spec at ``spec_path`` and the profile and topologies beside it (named
    after the spec); returns the files written."""
    folder = spec_path.parent
    folder.mkdir(parents=True, exist_ok=True)
    stem = spec_path.name.removesuffix(".yaml").removesuffix(".yml")
    profile_file = f"{stem}.agent.yaml"
    topology_files = [f"{stem}.topology-{k}.yaml" for k in range(1, len(fit.topologies) + 1)]
    written = []
    for file, text in [
        (profile_file, profile_yaml(fit)),
        *[(f, topology_yaml(fit, t)) for f, t in zip(topology_files, fit.topologies, strict=True)],
        (spec_path.name, spec_yaml(fit, profile_file, topology_files)),
    ]:
        path = folder / file
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
