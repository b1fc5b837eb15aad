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
from collections.abc import Hashable, Sequence
from typing import TypeAlias, cast

from swarm.texts import SharedRun
from swarm.workload.edges import (
    Edge,
    Item,
    Pieces,
    RunReferences,
    edge_common,
    edge_cut,
    first_token,
    narrow_ids,
    referenced,
)
from swarm.workload.tokenizer import TokenIds, as_token_ids

BLOCK_TOKENS = 64
#: a prompt's block hashes, unsigned 64-bit (``array("Q")``): 8 bytes a block, where a tuple
#: held a Python int of 36 bytes and a pointer each (the open prompts' hashes of 100,000 agents
#: were 600 MB of them). Shared by the request, its record and the agent's memo; none changes it.
BlockHashes: TypeAlias = "array[int]"


def block_hashes(
    tokens: Sequence[str] | Sequence[int], block_tokens: int = BLOCK_TOKENS, known: Sequence[int] = ()
) -> BlockHashes:
    """Chained hashes of the token blocks of a prompt (last block may be partial), over the
    tokens' ids (``as_token_ids``: words by their ids), as a ``BlockHashes`` array. ``known``:
    the hashes of this prompt's first whole blocks, already computed (a prompt that extends an
    earlier one has its blocks); the chain goes on from the last of them."""
    out = array("Q", known)
    prev = known[-1].to_bytes(8, "little") if known else b"\x00" * 8
    start = len(known) * block_tokens
    ids = as_token_ids(tokens[start:] if start else tokens)
    data = memoryview(ids).cast("B")  # read in place: no copy of the prompt, nor of each block
    size = 8 * block_tokens
    if len(data) <= size:  # at most one block: one call
        if data:
            out.append(int.from_bytes(hashlib.blake2b(prev + data, digest_size=8).digest(), "little"))
        return out
    blake2b, from_bytes, append = hashlib.blake2b, int.from_bytes, out.append
    for at in range(0, len(data), size):
        h = blake2b(prev, digest_size=8)  # the same hash as of ``prev + block``
        h.update(data[at : at + size])
        prev = h.digest()
        append(from_bytes(prev, "little"))
    return out


class _Node:
    __slots__ = ("children", "key")

    def __init__(self, key: Edge) -> None:
        # token ids in an array: a large index costs nothing in the collections that would
        # otherwise walk it (a tuple is walked once before the collector stops tracking it)
        self.key = key
        self.children: dict[Hashable, _Node] = {}


class PrefixIndex:
    """Every prompt seen so far, as a compressed trie over tokens (no eviction): a prompt that
    extends one seen before, past its end, lengthens that leaf's edge (a chain of calls is one
    edge per session, not a node per call). A prompt's stretches of a shared array (its
    ``SharedRun``s, ``workload.edges.SHARED_FROM_TOKENS`` or longer) are held by reference
    (``workload.edges.Pieces``), the rest copied."""

    def __init__(self) -> None:
        self._root = _Node(())
        #: tokens the index stands for (each prompt's past its match)
        self.tokens_stored = 0
        #: of those, how many it holds in arrays of its own (the rest are shared runs)
        self.tokens_copied = 0
        #: what this index holds, set by the first prompt: token ids (array) or tuples
        self._kind: type | None = None
        #: the shared arrays given, narrowed, and the edges made of runs in them
        self._runs = RunReferences()

    @property
    def runs_refused(self) -> int:
        """Shared runs given whose ids were not the prompt's where they said (copied instead)."""
        return self._runs.refused

    def observe(self, tokens: TokenIds | Sequence[Hashable], shared: Sequence[SharedRun] = ()) -> int:
        """Longest shared prefix with anything observed before; then remember ``tokens``. One
        walk down the trie does both (the match's end is where the new branch goes). Token ids
        (an array: a prompt's tokens) are held as arrays (``narrow_ids``); any other sequence as
        a tuple of its items. One index takes one kind (a word and its id are unequal).
        ``shared``: where ``tokens`` (ids) are stretches of arrays that outlive them, in order
        (each checked against them; an array given must not change while the index lives)."""
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
                tail: Edge
                if shared and type(tokens) is array:
                    tail = self._runs.tail(tokens, pos, shared)
                else:
                    tail = tokens[pos:]
                if node.children or node is self._root:
                    node.children[tokens[pos]] = _Node(tail)
                elif isinstance(node.key, Pieces):
                    node.key.grow(tail)
                elif isinstance(tail, Pieces):
                    node.key = Pieces((cast(Item, node.key), *tail.items()))
                elif isinstance(node.key, array):  # a leaf's edge grows (the index's own array)
                    node.key.extend(tail)  # type: ignore[arg-type]
                else:
                    node.key = node.key + tail  # type: ignore[operator]
                self.tokens_stored += n - pos
                self.tokens_copied += n - pos - referenced(tail)
                return pos
            key = child.key
            i = edge_common(key, tokens, pos)
            if i < len(key):  # the match ends inside this edge: split it there
                head, child.key = edge_cut(key, i)
                middle = _Node(head)
                middle.children[first_token(child.key)] = child
                node.children[tokens[pos]] = middle
                child = middle
            pos += i
            node = child
        return pos
