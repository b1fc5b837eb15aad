"""A swarm's working set in KV tokens, and the load at which it outgrows a cache budget.

Place in the map (docs/architecture.md, "Sweeps"; its analysis, which reads folders on disk
only): reads one target's trace rows (ok rows with a session and the client's token estimates).
An LRU cache (SGLang's radix tree, and TensorRT-LLM's block pool, both evict the least recently
used first) keeps a session's context between its turns only while the contexts the other live
sessions touched since then, and its own, fit in the budget. So the swarm needs about ``shared +
N × context`` tokens with ``N`` sessions live:

- the **shared prompt** ``L`` = the median, over sessions whose first request found something
  cached in the ideal (``ideal_cached_tokens_est > 0``), of that amount: what a session's
  opening shares with earlier sessions, its system prompt. Sessions whose first request found
  nothing are the first senders of a shared prompt;
- ``shared_tokens`` = first senders × ``L``;
- a request's **context** is what it leaves cached: ``prompt_tokens_est + completion_tokens``;
  its private part is that less ``L`` (not below 0);
- ``per_session_tokens`` = the mean, over sessions, of the mean private context of their
  requests: the context a live session holds on average over its life;
- the **predicted cliff** (``predicted_cliff_load``) is at ``N* = (budget − shared_tokens) /
  per_session_tokens`` live sessions; past it, sessions' contexts are evicted before their next
  turn reuses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from swarm.analysis import metrics as m


@dataclass(frozen=True)
class WorkingSet:
    """Sessions seen, the mean private context per live session and the shared tokens (see above)."""

    sessions: int
    per_session_tokens: float
    shared_tokens: float

    def tokens_at(self, live_sessions: float) -> float:
        return self.shared_tokens + live_sessions * self.per_session_tokens

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def working_set(table: pa.Table) -> WorkingSet | None:
    """The working set of ``table`` (see the module docstring); None without usable rows."""
    ok = m.ok_rows(table)
    if ok.num_rows == 0:
        return None
    cols = ("prompt_tokens_est", "ideal_cached_tokens_est", "session_id", "completion_tokens")
    present = np.ones(ok.num_rows, dtype=bool)
    for c in cols:
        present &= np.asarray(pc.is_valid(ok[c]).to_numpy(zero_copy_only=False), dtype=bool)
    sessions = np.asarray(ok["session_id"].to_numpy(zero_copy_only=False), dtype=object)[present]
    keep = sessions != ""
    if not keep.any():
        return None

    def column(name: str) -> np.ndarray:
        values = np.asarray(ok[name].to_numpy(zero_copy_only=False))[present][keep]
        return values.astype(np.int64)

    ideal, prompt, completion, sent = (
        column(c) for c in ("ideal_cached_tokens_est", "prompt_tokens_est", "completion_tokens", "sent_ns")
    )
    names, group = np.unique(sessions[keep], return_inverse=True)
    first_row = np.full(names.size, -1)
    for i in np.argsort(sent, kind="stable")[::-1]:
        first_row[group[i]] = i
    opening = ideal[first_row].astype(np.float64)
    found = opening[opening > 0]
    shared_prompt = float(np.median(found)) if found.size else 0.0
    senders = int((opening == 0).sum()) if found.size else 0
    private = np.maximum((prompt + completion).astype(np.float64) - shared_prompt, 0.0)
    per_session = np.bincount(group, weights=private) / np.bincount(group)
    return WorkingSet(
        sessions=int(names.size),
        per_session_tokens=float(per_session.mean()),
        shared_tokens=senders * shared_prompt,
    )


def predicted_cliff_load(working: WorkingSet, budget_tokens: int) -> float | None:
    """Live sessions at which ``working`` fills ``budget_tokens``: ``(budget − shared) /
    per_session``; None when a session adds nothing."""
    if working.per_session_tokens <= 0:
        return None
    return max(0.0, (budget_tokens - working.shared_tokens) / working.per_session_tokens)
