"""Conversations inferred in a flat trace: each request's earlier turn, found by its prefix.

Place in the map (docs/architecture.md, "Shape"): used by ``table.table_from_plan`` on a flat
hash-id trace (Mooncake: no sessions, no parents). A chat or agent conversation re-sends its
history, so a request whose hash ids begin with all of an earlier request's ids (all but that
request's cut last block) continues it, provided that earlier request had whole blocks of its
own (none sent before it) and that its whole prefix is not a stem three or more different
continuations share anywhere in the trace (a shared system prompt, not a conversation). Its parent is the earlier request with the longest such prefix (the
latest among equals); chains of parents are the conversations.
The wait is start to start (a flat trace has no end times).

Prefixes are matched by chained hashes of the id sequence, so a request of L blocks costs O(L).
"""

from __future__ import annotations

import dataclasses

from swarm.replay.plan import ReplayItem, ReplayPlan


def is_flat(plan: ReplayPlan) -> bool:
    """Whether the plan has hash ids but neither parents nor session ids."""
    items = plan.items
    return (
        bool(items)
        and any(it.block_ids for it in items)
        and not any(it.parents for it in items)
        and not any(it.identity.session_id for it in items)
    )


def _full_blocks(item: ReplayItem) -> tuple[int, ...]:
    """The ids of the item's whole blocks (those its prompt length covers)."""
    return item.block_ids[: item.prompt_tokens // item.block_tokens] if item.block_tokens else ()


def _chain(ids: tuple[int, ...]) -> list[int]:
    """Chained hashes of the prefixes of ``ids`` (entry k: the first k + 1 ids)."""
    out = []
    h = 0
    for bid in ids:
        h = hash((h, bid))
        out.append(h)
    return out


def infer_conversations(plan: ReplayPlan) -> tuple[ReplayPlan, int]:
    """``plan`` with each item's inferred parent (and its start-to-start wait), and the number
    of items given one. Items are read in offset order."""
    order = sorted(plan.items, key=lambda it: (it.offset_s, it.index))
    chains = {it.index: _chain(it.block_ids) for it in order}
    #: chained hash of an id prefix -> the distinct ids that follow it anywhere (up to 3)
    following: dict[int, set[int]] = {}
    for it in order:
        for k, h in enumerate(chains[it.index][:-1]):
            after = following.setdefault(h, set())
            if len(after) < 3:
                after.add(it.block_ids[k + 1])
    #: chained hash of an id prefix -> (its length, the latest item sending exactly that prefix)
    known: dict[int, tuple[int, ReplayItem]] = {}
    prefixes: set[int] = set()  # every id prefix sent so far
    out: dict[int, ReplayItem] = {}
    linked = 0
    for it in order:
        chain = chains[it.index]
        parent: ReplayItem | None = None
        for k in range(len(chain), 0, -1):  # the longest earlier prompt this one continues
            hit = known.get(chain[k - 1])
            if hit is not None and hit[0] == k:
                parent = hit[1]
                break
        if parent is not None:
            linked += 1
            out[it.index] = dataclasses.replace(
                it, parents=(parent.index,), gap_s=max(0.0, it.offset_s - parent.offset_s)
            )
        else:
            out[it.index] = it
        full = len(_full_blocks(it))  # a cut last block's id changes once the prompt grows
        seen = 0  # the longest prefix of this request sent before (a shared system prompt, say)
        while seen < len(chain) and chain[seen] in prefixes:
            seen += 1
        prefixes.update(chain)
        # a conversation goes on from a request with whole blocks of its own, whose whole
        # prefix is not a stem that three or more different continuations share
        if seen < full <= len(chain) and len(following.get(chain[full - 1], ())) < 3:
            known[chain[full - 1]] = (full, it)
    items = [out[it.index] for it in plan.items]
    return dataclasses.replace(plan, items=items), linked
