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
from typing import TypeAlias, Union, cast

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


def _common_length(key: _Key, tokens: _Key, pos: int, m: int, at: int = 0) -> int:
    """How many of ``key``'s tokens from ``at`` (``m`` at most) equal ``tokens`` from ``pos``:
    slices compared in C, halving the stretch that holds the first difference (a token at a
    time, a 100k-token edge that differs near its end held the loop for tens of milliseconds)."""
    if m <= 0 or key[at] != tokens[pos]:
        return 0
    if key[at : at + m] == tokens[pos : pos + m]:
        return m
    lo, hi = 1, m  # key[at : at + lo] matches; the first difference is before hi
    while hi - lo > 16:
        mid = (lo + hi) // 2
        if key[at + lo : at + mid] == tokens[pos + lo : pos + mid]:
            lo = mid
        else:
            hi = mid
    while lo < hi and key[at + lo] == tokens[pos + lo]:
        lo += 1
    return lo


#: a stretch of a prompt's tokens the index may keep by reference instead of copying:
#: ``(at, ids, first, k)``, the prompt's tokens ``at`` to ``at + k - 1`` are ``ids[first :
#: first + k]``, an array that outlives the prompt (a corpus's ids: ``texts.WordText``)
SharedRun: TypeAlias = tuple[int, "array[int]", int, int]
#: a shared run this long or longer is kept by reference (about 120 bytes), a shorter one copied
SHARED_FROM_TOKENS = 256

#: an item of a ``_Pieces`` edge: the index's own array (all of it), or ``(ids, first, end)``,
#: a stretch of a shared array (narrowed as the prompts are: ``narrow_ids``)
_Item: TypeAlias = Union["array[int]", tuple["array[int]", int, int]]


class _Pieces:
    """An edge holding stretches of shared arrays by reference between arrays of its own: a
    mid-life session's history of 100k tokens is a few hundred corpus runs (``WordText``),
    which a copy would hold at 4 bytes a token for the rest of the run. Each array of its
    own belongs to this edge alone (a cut copies the one it falls in), so the last one may
    grow in place."""

    __slots__ = ("items", "length")

    def __init__(self, items: tuple[_Item, ...]) -> None:
        self.items = items
        self.length = sum(b - a for _, a, b in map(_span, items))

    def __len__(self) -> int:
        """Its tokens, counted."""
        return self.length

    def first(self) -> int:
        """Its first token (its parent's key for it)."""
        src, a, _ = _span(self.items[0])
        return src[a]

    def common(self, tokens: _Key, pos: int, m: int) -> int:
        """``_common_length`` along the items."""
        done = 0
        for it in self.items:
            if done >= m:
                break
            src, a, b = _span(it)
            n = min(b - a, m - done)
            k = _common_length(src, tokens, pos + done, n, a)
            done += k
            if k < n:
                break
        return done

    def cut(self, i: int) -> tuple[_Edge, _Edge]:
        """The edge's first ``i`` tokens and the rest (``0 < i < len``)."""
        left: list[_Item] = []
        items = self.items
        j = 0
        while True:
            it = items[j]
            _, a, b = _span(it)
            n = b - a
            if i < n:
                break
            left.append(it)
            i -= n
            j += 1
        right: list[_Item] = list(items[j + 1 :])
        if i:
            if isinstance(it, tuple):
                src, a, b = it
                left.append((src, a, a + i))
                right.insert(0, (src, a + i, b))
            else:
                left.append(it[:i])
                right.insert(0, it[i:])
        else:
            right.insert(0, it)
        return _edge(left), _edge(right)

    def grow(self, tail: _Edge) -> None:
        """Append ``tail``'s tokens (the edge of a leaf, lengthened by a prompt that extends it)."""
        more: tuple[_Item, ...] = tail.items if isinstance(tail, _Pieces) else (cast(_Item, tail),)
        last, head = self.items[-1], more[0]
        if not isinstance(last, tuple) and not isinstance(head, tuple):
            last.extend(head)  # its own: grows in place
            more = more[1:]
        self.items = self.items + more
        self.length += len(tail)


#: an edge's tokens: an array or tuple of the index's own, or ``_Pieces``
_Edge: TypeAlias = Union["array[int]", tuple[Hashable, ...], _Pieces]


def _edge(items: list[_Item]) -> _Edge:
    """One array of the index's own as itself; anything else as ``_Pieces``."""
    only = items[0]
    if len(items) == 1 and not isinstance(only, tuple):
        return only
    return _Pieces(tuple(items))


def _span(it: _Item) -> tuple[array[int], int, int]:
    """An item as ``(array, first, end)``."""
    return it if isinstance(it, tuple) else (it, 0, len(it))


def _first(edge: _Edge) -> Hashable:
    """An edge's first token: its parent's key for it."""
    return edge.first() if isinstance(edge, _Pieces) else edge[0]


class _Node:
    __slots__ = ("children", "key")

    def __init__(self, key: _Edge) -> None:
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
    edge per session, not a node per call). A prompt's stretches of a shared array (its
    ``SharedRun``s, ``SHARED_FROM_TOKENS`` or longer) are held by reference (``_Pieces``), the
    rest copied."""

    def __init__(self) -> None:
        self._root = _Node(())
        #: tokens the index stands for (each prompt's past its match)
        self.tokens_stored = 0
        #: of those, how many it holds in arrays of its own (the rest are shared runs)
        self.tokens_copied = 0
        #: shared runs given whose ids were not the prompt's where they said (copied instead)
        self.runs_refused = 0
        #: what this index holds, set by the first prompt: token ids (array) or tuples
        self._kind: type | None = None
        #: each shared array given (by ``id``), itself (which keeps the id its own) and narrowed
        self._narrowed: dict[int, tuple[array, array]] = {}

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
                tail = self._tail(tokens, pos, shared) if shared and type(tokens) is array else tokens[pos:]
                if node.children or node is self._root:
                    node.children[tokens[pos]] = _Node(tail)
                elif isinstance(node.key, _Pieces):
                    node.key.grow(tail)
                elif isinstance(tail, _Pieces):
                    node.key = _Pieces((cast(_Item, node.key), *tail.items))
                elif isinstance(node.key, array):  # a leaf's edge grows (the index's own array)
                    node.key.extend(tail)  # type: ignore[arg-type]
                else:
                    node.key = node.key + tail  # type: ignore[operator]
                self.tokens_stored += n - pos
                self.tokens_copied += n - pos - _referenced(tail)
                return pos
            key = child.key
            m = min(len(key), n - pos)
            if isinstance(key, _Pieces):
                i = key.common(tokens, pos, m)
            else:
                i = _common_length(key, tokens, pos, m)
            if i < len(key):  # the match ends inside this edge: split it there
                if isinstance(key, _Pieces):
                    head, child.key = key.cut(i)
                else:
                    head, child.key = key[:i], key[i:]
                middle = _Node(head)
                middle.children[_first(child.key)] = child
                node.children[tokens[pos]] = middle
                child = middle
            pos += i
            node = child
        return pos

    def _tail(self, tokens: array, pos: int, shared: Sequence[SharedRun]) -> _Edge:
        """``tokens[pos:]`` as an edge: each shared run with ``SHARED_FROM_TOKENS`` or more of
        its tokens past ``pos`` as a reference into its array (narrowed once per array), the
        rest copied. A run whose ids are not the prompt's there (or not inside it) is copied
        and counted in ``runs_refused``: a wrong run costs memory, never a wrong figure."""
        items: list[_Item] = []
        at, n = pos, len(tokens)
        for start, ids, first, k in shared:
            end = start + k
            if end - max(start, at) < SHARED_FROM_TOKENS:
                continue
            narrow = self._narrow(ids)
            skip = max(at - start, 0)
            a, b = first + skip, first + k
            inside = start >= 0 and end <= n and first >= 0 and b <= len(narrow)
            if not inside or narrow[a:b] != tokens[start + skip : end]:
                self.runs_refused += 1
                continue
            if start > at:
                items.append(tokens[at:start])
            items.append((narrow, a, b))
            at = end
        if not items:
            return tokens[pos:]
        if at < n:
            items.append(tokens[at:])
        return _edge(items)

    def _narrow(self, ids: array) -> array:
        """``ids`` narrowed as prompts are (``narrow_ids``), once per array (kept with it, so
        that its ``id`` stays its own)."""
        held = self._narrowed.get(id(ids))
        if held is None:
            held = self._narrowed[id(ids)] = (ids, narrow_ids(ids))
        return held[1]


def _referenced(edge: _Edge) -> int:
    """How many of an edge's tokens are stretches of shared arrays."""
    if not isinstance(edge, _Pieces):
        return 0
    return sum(it[2] - it[1] for it in edge.items if isinstance(it, tuple))
