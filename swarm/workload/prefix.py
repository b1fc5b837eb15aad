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
import sys
from array import array
from collections.abc import Hashable, Sequence
from typing import TypeAlias, Union

import numpy as np

from swarm.workload.tokenizer import TokenIds, as_token_ids

#: an edge of the index: token ids, or a tuple of any hashable units
_Key: TypeAlias = Union["array[int]", tuple[Hashable, ...]]

BLOCK_TOKENS = 64


def block_hashes(
    tokens: Sequence[str] | Sequence[int], block_tokens: int = BLOCK_TOKENS, known: Sequence[int] = ()
) -> tuple[int, ...]:
    """Chained hashes of the token blocks of a prompt (last block may be partial), over the
    tokens' ids (``as_token_ids``: words by their ids). ``known``: the hashes of this prompt's
    first whole blocks, already computed (a prompt that extends an earlier one has its
    blocks); the chain goes on from the last of them."""
    out: list[int] = list(known)
    prev = known[-1].to_bytes(8, "little") if known else b"\x00" * 8
    start = len(known) * block_tokens
    ids = as_token_ids(tokens[start:] if start else tokens)
    data = memoryview(ids).cast("B")  # read in place: no copy of the prompt, nor of each block
    size = 8 * block_tokens
    if len(data) <= size:  # at most one block: one call
        if data:
            out.append(int.from_bytes(hashlib.blake2b(prev + data, digest_size=8).digest(), "little"))
        return tuple(out)
    blake2b, from_bytes, append = hashlib.blake2b, int.from_bytes, out.append
    for at in range(0, len(data), size):
        h = blake2b(prev, digest_size=8)  # the same hash as of ``prev + block``
        h.update(data[at : at + size])
        prev = h.digest()
        append(from_bytes(prev, "little"))
    return tuple(out)


def _common_length(key: _Key, tokens: _Key, pos: int, m: int) -> int:
    """How many of ``key``'s first ``m`` tokens equal ``tokens`` from ``pos``: slices compared
    in C, halving the stretch that holds the first difference (a token at a time, a 100k-token
    edge that differs near its end held the loop for tens of milliseconds)."""
    if key[:m] == tokens[pos : pos + m]:
        return m
    lo, hi = 0, m  # key[:lo] matches; the first difference is before hi
    while hi - lo > 16:
        mid = (lo + hi) // 2
        if key[lo:mid] == tokens[pos + lo : pos + mid]:
            lo = mid
        else:
            hi = mid
    while lo < hi and key[lo] == tokens[pos + lo]:
        lo += 1
    return lo


class _Node:
    __slots__ = ("children", "key")

    def __init__(self, key: _Key) -> None:
        # token ids in an array: a large index costs nothing in the collections that would
        # otherwise walk it (a tuple is walked once before the collector stops tracking it)
        self.key = key
        self.children: dict[Hashable, _Node] = {}


def narrow_ids(ids: array) -> array:
    """Token ids as a prefix tree that only matches them holds them (this index; a simulated
    router's tree): 64-bit ids by their low 32 bits (half the memory: such a tree holds every
    token it was sent; two words' ids share their low 32 bits with odds of 2**-32, and only a
    pair met where two prompts part would lengthen one shared prefix);
    narrower ids as they are. The halves are taken by numpy: a strided memoryview's copy took
    18 times as long (765 against 41 us for 100k ids), 4 % of a simulation of long prompts."""
    if ids.itemsize != 8:
        return ids
    low = 0 if sys.byteorder == "little" else 1  # which half of each 8 bytes is the low one
    if len(ids) < 256:  # numpy's own cost is more than the copy's here
        return array("I", memoryview(ids).cast("B").cast("I")[low::2].tobytes())
    return array("I", np.frombuffer(ids, dtype=np.uint32)[low::2].tobytes())


class PrefixIndex:
    """Every prompt seen so far, as a compressed trie over tokens (no eviction): a prompt that
    extends one seen before, past its end, lengthens that leaf's edge (a chain of calls is one
    edge per session, not a node per call)."""

    def __init__(self) -> None:
        self._root = _Node(())
        self.tokens_stored = 0
        #: what this index holds, set by the first prompt: token ids (array) or tuples
        self._kind: type | None = None

    def observe(self, tokens: TokenIds | Sequence[Hashable]) -> int:
        """Longest shared prefix with anything observed before; then remember ``tokens``. One
        walk down the trie does both (the match's end is where the new branch goes). Token ids
        (an array: a prompt's tokens) are held as arrays (``narrow_ids``); any other sequence as
        a tuple of its items. One index takes one kind (a word and its id are unequal)."""
        tokens = narrow_ids(tokens) if isinstance(tokens, array) else tuple(tokens)
        if self._kind is not type(tokens):
            if self._kind is not None:  # an id never equals a word: every match would be lost
                raise TypeError(
                    f"a PrefixIndex of {self._kind.__name__}s was given {type(tokens).__name__} tokens: "
                    "give one index token ids (as_token_ids) or other units, not both"
                )
            self._kind = type(tokens)
        node, pos = self._root, 0
        n = len(tokens)
        while pos < n:
            child = node.children.get(tokens[pos])
            if child is None:
                if node.children or node is self._root:
                    node.children[tokens[pos]] = _Node(tokens[pos:])
                elif isinstance(node.key, array):  # a leaf's edge grows (the index's own array)
                    node.key.extend(tokens[pos:])  # type: ignore[arg-type]
                else:
                    node.key = node.key + tokens[pos:]  # type: ignore[operator]
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
