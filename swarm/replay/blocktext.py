"""Deterministic text for block ids: the same id always gives the same words.

Place in the map (DESIGN.md, "replay"): turns a prompt described by block ids and a length
into words. Block *id* is ``block_tokens`` words: first a word naming the block (``b<id>``),
then words drawn from an RNG seeded by the id. The naming word makes two different blocks
differ at their first token, so the prefix two prompts share is exactly their shared leading
blocks (the last, possibly partial, block included up to the shorter length).
"""

from __future__ import annotations

import random
from functools import lru_cache

from swarm.textsynth import WORDS


@lru_cache(maxsize=65536)
def block_words(block_id: int, block_tokens: int) -> tuple[str, ...]:
    rng = random.Random(f"block:{block_id}")
    return (f"b{block_id}", *rng.choices(WORDS, k=block_tokens - 1))


def prompt_words(block_ids: tuple[int, ...], block_tokens: int, length: int, tail_seed: str) -> list[str]:
    """``length`` words: the blocks in order (the last one cut), then unique filler if the
    ids do not cover the length (filler seeded by ``tail_seed``, never shared)."""
    words: list[str] = []
    for bid in block_ids:
        if len(words) >= length:
            break
        words.extend(block_words(bid, block_tokens)[: length - len(words)])
    if len(words) < length:
        rng = random.Random(f"tail:{tail_seed}")
        words.append(f"u{tail_seed}")
        words.extend(rng.choices(WORDS, k=length - len(words)))
    return words[:length]
