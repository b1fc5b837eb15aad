"""Deterministic text for block ids: the same id always gives the same words.

Place in the map (docs/architecture.md, "Replay"): turns a prompt described by block ids and a length
into words. Block *id* is ``block_tokens`` words: first a word naming the block (``b<id>``),
then words drawn from an RNG seeded by the id. The naming word makes two different blocks
differ at their first token, so the prefix two prompts share is exactly their shared leading
blocks (the last, possibly partial, block included up to the shorter length).

Words are drawn with numpy (a whole block in one call): a Mooncake prompt averages 14,000
tokens, and drawing them one by one cost about 4 ms per prompt.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np

from swarm.workload.textsynth import WORDS

_WORDS_ARRAY = np.array(WORDS, dtype=object)


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _draw(seed_text: str, k: int) -> list[str]:
    if k <= 0:
        return []
    picks = np.random.default_rng(_seed(seed_text)).integers(0, len(WORDS), size=k)
    return _WORDS_ARRAY[picks].tolist()


@lru_cache(maxsize=65536)
def block_words(block_id: int, block_tokens: int) -> tuple[str, ...]:
    return (f"b{block_id}", *_draw(f"block:{block_id}", block_tokens - 1))


@lru_cache(maxsize=4096)
def segment_words(key: str, tokens: int) -> tuple[str, ...]:
    """``tokens`` words for one message of a structured trace: a word naming the segment (so two
    segments differ from their first token), then words seeded by ``key``. The same key and
    length always give the same words."""
    if tokens <= 0:
        return ()
    name = "m" + hashlib.blake2b(key.encode(), digest_size=5).hexdigest()
    return (name, *_draw(f"segment:{key}", tokens - 1))


def prompt_words(block_ids: tuple[int, ...], block_tokens: int, length: int, tail_seed: str) -> list[str]:
    """``length`` words: the blocks in order (the last one cut), then unique filler if the
    ids do not cover the length (filler seeded by ``tail_seed``, never shared)."""
    words: list[str] = []
    for bid in block_ids:
        if len(words) >= length:
            break
        words.extend(block_words(bid, block_tokens)[: length - len(words)])
    if len(words) < length:
        words.append(f"u{tail_seed}")
        words.extend(_draw(f"tail:{tail_seed}", length - len(words)))
    return words[:length]
