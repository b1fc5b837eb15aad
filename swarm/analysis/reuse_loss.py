"""Where prefix reuse is lost: the ideal cached tokens of a target, split by what its cache design does.

Place in the map (docs/architecture.md, "Analysis"): read by ``compare`` for every target of the
runs compared. Per request (first attempts that succeeded and whose cached tokens the engine
reported), with ``B`` the target's cache block size (1 for token-level caches: SGLang's radix
tree, a llama.cpp slot):

- ``ideal`` = ``ideal_cached_tokens_est`` in the engine's units: the longest prefix it shares
  with any earlier prompt, counted by the client, plus ``max(prompt - prompt_tokens_est, 0)``
  when it is not 0 (the tokens the engine counts and the client does not, a ``<bos>`` and the
  separators between parts, lie in the shared prefix too), at most ``prompt``;
- ``reachable`` = ``floor(min(ideal, prompt - 1) / B) * B``: what a cache of ``B``-token blocks
  that kept everything could hand back (whole blocks only; the last prompt token is always
  computed), ``prompt`` the engine's prompt tokens (else the estimate);
- ``granularity_lost`` = ``ideal - reachable``: lost to the block size;
- ``other_lost`` = ``max(reachable - cached, 0)``: lost although reachable: evicted, never
  stored, or for llama.cpp a slot since given to another prompt;
- ``beyond`` = ``max(cached - reachable, 0)``: cached past what the ideal reaches (a generated
  block the next prompt repeated, or the client's and the engine's token counts differing by a
  few tokens across a block boundary).

Per request ``ideal = cached + granularity_lost + other_lost - beyond``, so the shares add up.
Totals are sums over requests; shares are over ``sum(ideal)``. ``at_reachable`` is the share of
requests with ``cached >= reachable``. Requests that succeeded only on a retry are left out.
With ``--tokenizer`` set to the model's tokenizer and the completions dialect (no chat
template) the client's count is the engine's but for those few tokens; otherwise the split is
approximate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from swarm.engines.registry import ENGINES


def default_block_tokens(engine: str) -> int:
    """The engine's cache block size where the server did not state it (probe: ``block_tokens``):
    its module's ``cache_block_tokens`` (TensorRT-LLM's default 32, vLLM's 16 on GPUs: its CPU
    build uses 128 and states it); 1 for an engine swarm does not know."""
    known = ENGINES.get(engine)
    return known.cache_block_tokens if known is not None else 1


@dataclass(frozen=True)
class ReuseLoss:
    requests: int
    block_tokens: int
    ideal_tokens: int
    cached_tokens: int
    granularity_lost: int
    other_lost: int
    beyond: int
    at_reachable: float | None
    other_cause: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ints(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(column.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


def reuse_loss(table: pa.Table, block_tokens: int, engine: str = "") -> ReuseLoss:
    """The split of one target's trace rows (see the module docstring)."""
    # traces from before the attempt column read it as null: first attempts
    keep = pc.and_(pc.equal(table["status"], "ok"), pc.equal(pc.fill_null(table["attempt"], 0), 0))
    keep = pc.and_(keep, pc.is_valid(table["cached_tokens"]))
    rows = table.filter(keep)
    block = max(int(block_tokens), 1)
    estimate = _ints(rows["ideal_cached_tokens_est"])
    cached = _ints(rows["cached_tokens"])
    prompt = _ints(pc.coalesce(rows["prompt_tokens"], rows["prompt_tokens_est"]))
    shift = np.where(estimate > 0, np.maximum(prompt - _ints(rows["prompt_tokens_est"]), 0), 0)
    ideal = np.minimum(estimate + shift, np.maximum(prompt, estimate))
    reachable = np.minimum(ideal, np.maximum(prompt - 1, 0)) // block * block
    return ReuseLoss(
        requests=int(rows.num_rows),
        block_tokens=block,
        ideal_tokens=int(ideal.sum()),
        cached_tokens=int(cached.sum()),
        granularity_lost=int((ideal - reachable).sum()),
        other_lost=int(np.maximum(reachable - cached, 0).sum()),
        beyond=int(np.maximum(cached - reachable, 0).sum()),
        at_reachable=float((cached >= reachable).mean()) if rows.num_rows else None,
        other_cause=ENGINES[engine].reuse_loss_cause if engine in ENGINES else "evicted, or not yet stored",
    )
