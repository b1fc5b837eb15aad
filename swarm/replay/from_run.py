"""A recorded swarm run as a ReplayPlan.

Place in the map (docs/architecture.md, "Replay"). One target of the run is replayed (the first, unless
named). Each row becomes an item at its recorded ``scheduled_ns`` offset. Its parents are the
rows of the same session whose node is in its ``parent_nodes``; its gap is the recorded time
from the last parent's end (``sent_ns + e2e_ns``) to its own ``scheduled_ns`` (think time, and
any wait for a beam decision). The prompt is the recorded text when the run kept it
(``--record-text``); for a ``context: synthetic`` run, the exact prompt rebuilt from the
run's spec and seed (the Workload is a pure function of them; a session started mid-life
has no rows before its start, and its history nodes are read from the topology, all
answered); else its ``block_hashes`` (64-token blocks) and ``prompt_tokens_est``, which keep
the prefix structure. A warm-up row stays a warm-up: sent again, marked, in no figure.
"""

from __future__ import annotations

from typing import Any

import pyarrow.compute as pc

from swarm.errors import InputError
from swarm.record import RequestIdentity
from swarm.replay.format import Peek, ReadOptions, TraceFormat
from swarm.replay.plan import ReplayItem, ReplayPlan
from swarm.texts import as_str
from swarm.trace.manifest import RunManifest, changed_contents
from swarm.trace.reader import read_requests
from swarm.trace.storage import RunStorage
from swarm.workload.prefix import BLOCK_TOKENS
from swarm.workload.prompts import compose_messages, synthetic_turn
from swarm.workload.workload import AgentPlan, Workload, WorkloadSpec

COLUMNS = [
    "target", "agent_id", "profile", "topology", "session_id", "node", "parent_nodes", "depth", "branch",
    "role", "system_prompt_id", "request_id", "scheduled_ns", "sent_ns", "e2e_ns", "max_tokens",
    "completion_tokens", "prompt_tokens", "prompt_tokens_est", "block_hashes", "prompt_parts", "prompt_roles", "attempt",
    "warmup",
]  # fmt: skip


def _synthetic_prompts(
    manifest: RunManifest, rows: list[dict[str, Any]], notes: list[str]
) -> list[tuple[tuple[str, ...], tuple[str, ...]] | None]:
    """Exact prompts of a ``context: synthetic`` run, rebuilt from its spec and seed.

    Such prompts depend only on the workload and on which ancestors were alive, which the
    rows record (``parent_nodes``). Returns None per row when it cannot be rebuilt.
    """
    workload_spec = (manifest.spec or {}).get("workload")
    if not workload_spec or workload_spec.get("context") != "synthetic":
        return [None] * len(rows)
    try:
        workload = Workload(WorkloadSpec.model_validate(workload_spec))
    except (InputError, ValueError) as exc:
        notes.append(
            f"cannot rebuild the run's prompts from its spec ({exc}); prompts synthesised from block hashes"
        )
        return [None] * len(rows)
    if manifest.workload_digests:
        changed = changed_contents(workload.content_digests(), manifest.workload_digests)
        if changed:
            notes.append(
                f"{', '.join(changed)} changed since the run: its prompts cannot be rebuilt exactly; "
                "prompts synthesised from block hashes (same lengths and prefix sharing)"
            )
            return [None] * len(rows)
    else:
        notes.append(
            "the run's manifest predates content digests: prompts rebuilt from the profiles and "
            "topologies as they are now, which may have changed since the run"
        )
    parents_of = {(r["session_id"], r["node"]): tuple(r["parent_nodes"]) for r in rows}
    plans: dict[int, AgentPlan] = {}
    out: list[tuple[tuple[str, ...], tuple[str, ...]] | None] = []
    for r in rows:
        agent_id = r["agent_id"]
        if agent_id is None or agent_id < 0 or agent_id >= workload.n_agents:
            out.append(None)
            continue
        plan = plans.get(agent_id) or plans.setdefault(agent_id, workload.agent(agent_id))
        if r["node"] not in plan.topology.graph:
            out.append(None)
            continue
        seen: set[str] = set()
        stack = list(r["parent_nodes"])
        history = set(plan.history)
        while stack:
            n = stack.pop()
            if n not in seen:
                seen.add(n)
                recorded = parents_of.get((r["session_id"], n))
                if recorded is None and n in history:  # before a mid-life start: no row, all alive
                    recorded = tuple(plan.topology.context_parents(n))
                stack.extend(recorded or ())
        ancestors = [n for n in plan.topology.order if n in seen]
        messages = compose_messages(plan, r["node"], [(a, synthetic_turn(plan, a)) for a in ancestors])
        out.append((tuple(as_str(m.content) for m in messages), tuple(m.role for m in messages)))
    return out


def plan_from_run(run_dir: str, target: str | None = None) -> ReplayPlan:
    storage = RunStorage.at(run_dir)
    try:
        manifest = RunManifest.read(storage)
    except FileNotFoundError as exc:
        raise InputError(str(exc)) from None
    table = read_requests(storage, columns=COLUMNS)
    targets = [t.name for t in manifest.targets] or sorted(set(table["target"].to_pylist()))
    chosen = target or (targets[0] if targets else None)
    if chosen is None or chosen not in set(table["target"].to_pylist()):
        raise InputError(
            f"{run_dir}: no requests for target {chosen!r} (targets: {', '.join(targets) or 'none'})"
        )
    # a retry repeats its first attempt: the replay sends each request once (and retries by
    # its own policy); traces written before the column existed have nulls there
    rows = [r for r in table.filter(pc.equal(table["target"], chosen)).to_pylist() if not r["attempt"]]
    rows.sort(key=lambda r: (r["scheduled_ns"], r["request_id"]))
    if not rows:
        raise InputError(f"{run_dir}: the trace has no requests")
    notes: list[str] = []
    rebuilt = (
        _synthetic_prompts(manifest, rows, notes) if rows[0]["prompt_parts"] is None else [None] * len(rows)
    )
    t0 = rows[0]["scheduled_ns"]
    index_of = {(r["session_id"], r["node"]): i for i, r in enumerate(rows)}
    items: list[ReplayItem] = []
    for i, r in enumerate(rows):
        parents = tuple(
            sorted(
                index_of[(r["session_id"], p)] for p in r["parent_nodes"] if (r["session_id"], p) in index_of
            )
        )
        parent_end = max((rows[j]["sent_ns"] + (rows[j]["e2e_ns"] or 0) for j in parents), default=None)
        gap_s = max(0.0, (r["scheduled_ns"] - parent_end) / 1e9) if parent_end is not None else 0.0
        length = r["prompt_tokens_est"] or r["prompt_tokens"] or 1
        items.append(
            ReplayItem(
                index=i,
                offset_s=(r["scheduled_ns"] - t0) / 1e9,
                prompt_tokens=length,
                max_tokens=r["max_tokens"] or r["completion_tokens"] or 1,
                block_ids=tuple(r["block_hashes"] or ()),
                block_tokens=BLOCK_TOKENS,
                prompt_parts=tuple(r["prompt_parts"])
                if r["prompt_parts"] is not None
                else (rebuilt[i] or (None,))[0],
                prompt_roles=tuple(r["prompt_roles"])
                if r["prompt_roles"] is not None
                else (rebuilt[i] or (None, None))[1],
                parents=parents,
                gap_s=gap_s,
                identity=RequestIdentity(
                    agent_id=r["agent_id"],
                    profile=r["profile"],
                    topology=r["topology"],
                    session_id=r["session_id"],
                    node=r["node"],
                    parent_nodes=tuple(r["parent_nodes"]),
                    depth=r["depth"],
                    branch=r["branch"],
                    role=r["role"],
                    system_prompt_id=r["system_prompt_id"],
                    request_id=r["request_id"],
                    warmup=bool(r["warmup"]),
                ),
            )
        )
    return ReplayPlan(
        items=items,
        source=run_dir,
        source_format=FORMAT.name,
        default_mode=FORMAT.default_mode,
        source_run_id=manifest.run_id,
        notes=notes,
        source_seed=manifest.seed,
        source_spec_hash=manifest.spec_hash,
        source_digests=dict(manifest.workload_digests),
    )


def read_run(source: str, options: ReadOptions) -> ReplayPlan:
    return plan_from_run(source, options.source_target)


def detect(peek: Peek) -> bool:
    """A run folder, a folder that holds no trace documents, or a URI (only run folders live there)."""
    return peek.remote or peek.is_dir


FORMAT = TraceFormat(
    name="swarm",
    title="a swarm run folder (or its URI)",
    detect=detect,
    read=read_run,
)
