"""ReplayPlan: the requests to send again, from whatever source.

Place in the map (docs/architecture.md, "Replay"): the common form of swarm runs and imported traces. A
prompt is either exact text (a run recorded with ``--record-text``) or a list of block ids
with a token length: each distinct block id stands for one fixed block of text (``blocktext``),
so prompts that share leading ids share exactly that prefix, as in the source.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from swarm.record import RequestIdentity


@dataclass(frozen=True, slots=True)
class ReplayItem:
    index: int
    offset_s: float  # scheduled time relative to the source's first request
    prompt_tokens: int
    max_tokens: int
    block_ids: tuple[int, ...] = ()
    block_tokens: int = 512
    prompt_parts: tuple[str, ...] | None = None
    prompt_roles: tuple[str, ...] | None = None
    parents: tuple[int, ...] = ()  # items this one waits for in dependent mode
    gap_s: float = 0.0  # dependent mode: delay after the last parent finished
    identity: RequestIdentity = field(default_factory=RequestIdentity)


@dataclass
class ReplayPlan:
    items: list[ReplayItem]
    source: str
    source_format: str  # a name in replay.formats.FORMATS
    default_mode: str = "timed"
    source_run_id: str | None = None
    notes: list[str] = field(default_factory=list)  # e.g. skipped bad lines
    #: a swarm run's workload (seed, traffic hash, content digests): a replay of it sends the
    #: same workload, and its manifest says so (``swarm compare`` compares the two)
    source_seed: int | None = None
    source_spec_hash: str | None = None
    source_digests: dict[str, str] = field(default_factory=dict)
    #: its sessions' hash ids are numbered per session: no prefix shared across sessions can
    #: be seen in it (an agentic-coding trace with ``hash_id_scope: local``)
    ids_per_session: bool = False


def session_roots(items: Sequence[ReplayItem]) -> dict[int, int]:
    """For each item's index, one index standing for its session (the same for every item of
    it): items are joined by their recorded session id and by their dependencies."""
    root: dict[int, int] = {it.index: it.index for it in items}

    def find(x: int) -> int:
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    first_of: dict[str, int] = {}
    for it in items:
        if it.identity.session_id:
            root[find(it.index)] = find(first_of.setdefault(it.identity.session_id, it.index))
        for p in it.parents:
            if p in root:
                root[find(it.index)] = find(p)
    return {it.index: find(it.index) for it in items}


def with_scaled_waits(plan: ReplayPlan, factor: float, *, scale_offsets: bool) -> ReplayPlan:
    """``plan`` with every recorded wait between a call and the next (``gap_s``: tool and think
    time) times ``factor``; with ``scale_offsets`` (an agent execution trace, whose offsets are
    sums of those waits: its format's ``offsets``) the offsets too. Other formats' offsets are
    arrival times and stay."""
    if factor < 0:
        raise ValueError("the wait scale must not be negative")
    items = [
        dataclasses.replace(
            it, gap_s=it.gap_s * factor, offset_s=it.offset_s * factor if scale_offsets else it.offset_s
        )
        for it in plan.items
    ]
    return dataclasses.replace(plan, items=items)
