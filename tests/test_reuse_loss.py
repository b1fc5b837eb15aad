"""Where prefix reuse is lost, per target: the block size against eviction or slots."""

from __future__ import annotations

import pyarrow as pa
import pytest

from swarm.analysis.reuse_loss import reuse_loss


def _rows(*rows: tuple[int, int, int | None, str]) -> pa.Table:
    """(prompt, ideal, cached, status) per request."""
    return pa.table(
        {
            "prompt_tokens": [r[0] for r in rows],
            "prompt_tokens_est": [r[0] for r in rows],
            "ideal_cached_tokens_est": [r[1] for r in rows],
            "cached_tokens": [r[2] for r in rows],
            "status": [r[3] for r in rows],
            "attempt": [0] * len(rows),
        }
    )


def test_block_engine_loses_the_partial_block_and_nothing_else() -> None:
    loss = reuse_loss(_rows((400, 300, 256, "ok"), (400, 400, 384, "ok"), (100, 0, 0, "ok")), 128, "vllm")
    # 300 -> 256 reachable; a whole prompt seen before: at most 399 -> 384
    assert (loss.ideal_tokens, loss.cached_tokens) == (700, 640)
    assert (loss.granularity_lost, loss.other_lost, loss.beyond) == (60, 0, 0)
    assert loss.at_reachable == 1.0 and "evicted" in loss.other_cause


def test_slot_engine_loses_what_another_prompt_took_and_the_shares_add_up() -> None:
    loss = reuse_loss(
        _rows((400, 300, 0, "ok"), (400, 300, 300, "ok"), (400, 300, 310, "ok"), (400, 300, None, "ok"),
              (400, 300, 0, "error")),
        1, "llamacpp",
    )  # fmt: skip
    assert loss.requests == 3  # no cached count, or a failure: not judged
    assert (loss.granularity_lost, loss.other_lost, loss.beyond) == (0, 300, 10)
    assert loss.ideal_tokens == loss.cached_tokens + loss.granularity_lost + loss.other_lost - loss.beyond
    assert loss.at_reachable == pytest.approx(2 / 3) and "slot" in loss.other_cause


def test_the_ideal_counts_the_tokens_only_the_engine_sees_and_old_traces_still_read() -> None:
    # the client counted 300 of 350 prompt tokens as shared; the engine counts 353 (a <bos> and
    # two separators): 303 shared in its units, so 256 reachable in 128-token blocks
    table = pa.table(
        {
            "prompt_tokens": [353],
            "prompt_tokens_est": [350],
            "ideal_cached_tokens_est": [300],
            "cached_tokens": [256],
            "status": ["ok"],
            "attempt": pa.array([None], pa.int32()),  # a trace from before the attempt column
        }
    )
    loss = reuse_loss(table, 128, "vllm")
    assert loss.requests == 1
    assert (loss.ideal_tokens, loss.granularity_lost, loss.beyond) == (303, 47, 0)
