"""Prefix accounting on the client side: block hashes and the ideal cached tokens.

Place in the map (docs/architecture.md, "Workload"): for every request the
Workload's prompt tokens give

- ``block_hashes``: chained 64-bit hashes of consecutive ``BLOCK_TOKENS``-token blocks (the
  last block may be partial, as in Mooncake traces): block *i*'s hash covers the hash of
  block *i-1* and its own tokens, so equal leading hashes mean an equal prefix;
- ``ideal_cached_tokens_est``: the longest prefix the prompt shares with any prompt sent
  before it (``PrefixIndex.observe``), i.e. what an unbounded token-level prefix cache that
  stored every prompt at arrival could reuse. This is a property of the traffic, not of an
  engine; engines realise less (block granularity, eviction, prompts still in prefill).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

BLOCK_TOKENS = 64


def _token_bytes(tokens: Sequence[str] | Sequence[int]) -> bytes:
    if tokens and isinstance(tokens[0], int):
        return array("q", tokens).tobytes()
    return "\x1f".join(tokens).encode("utf-8")  # type: ignore[arg-type]


def block_hashes(
    tokens: Sequence[str] | Sequence[int], block_tokens: int = BLOCK_TOKENS, known: Sequence[int] = ()
) -> tuple[int, ...]:
    """Chained hashes of the token blocks of a prompt (last block may be partial). ``known``:
    the hashes of this prompt's first whole blocks, already computed (a prompt that extends an
    earlier one has its blocks); the chain goes on from the last of them."""
    out: list[int] = list(known)
    prev = known[-1].to_bytes(8, "little") if known else b"\x00" * 8
    for start in range(len(known) * block_tokens, len(tokens), block_tokens):
        h = hashlib.blake2b(prev + _token_bytes(tokens[start : start + block_tokens]), digest_size=8)
        prev = h.digest()
        out.append(int.from_bytes(prev, "little"))
    return tuple(out)


def _common_length(key: tuple[object, ...], tokens: Sequence[object], pos: int, m: int) -> int:
    """How many of ``key``'s first ``m`` tokens equal ``tokens`` from ``pos``: slices compared
    in C, halving the stretch that holds the first difference (a token at a time, a 100k-token
    edge that differs near its end held the loop for tens of milliseconds)."""
    if key[:m] == tuple(tokens[pos : pos + m]):
        return m
    lo, hi = 0, m  # key[:lo] matches; the first difference is before hi
    while hi - lo > 16:
        mid = (lo + hi) // 2
        if key[lo:mid] == tuple(tokens[pos + lo : pos + mid]):
            lo = mid
        else:
            hi = mid
    while lo < hi and key[lo] == tokens[pos + lo]:
        lo += 1
    return lo


class _Node:
    __slots__ = ("children", "key")

    def __init__(self, key: tuple[object, ...]) -> None:
        # a tuple, not a list: the collector stops tracking a tuple of strings or ints, so a
        # large index costs nothing in the full collections that would otherwise walk it
        self.key = key
        self.children: dict[object, _Node] = {}


class PrefixIndex:
    """Every prompt seen so far, as a compressed trie over tokens (no eviction)."""

    def __init__(self) -> None:
        self._root = _Node(())
        self.tokens_stored = 0

    def observe(self, tokens: Sequence[object]) -> int:
        """Longest shared prefix with anything observed before; then remember ``tokens``. One
        walk down the trie does both (the match's end is where the new branch goes)."""
        node, pos = self._root, 0
        n = len(tokens)
        while pos < n:
            child = node.children.get(tokens[pos])
            if child is None:
                node.children[tokens[pos]] = _Node(tuple(tokens[pos:]))
                self.tokens_stored += n - pos
                return pos
            key = child.key
            i = _common_length(key, tokens, pos, min(len(key), n - pos))
            if i < len(key):  # the match ends inside this edge: split it there
                middle = _Node(key[:i])
                child.key = key[i:]
                middle.children[child.key[0]] = child
                node.children[tokens[pos]] = middle
                child = middle
            pos += i
            node = child
        return pos
