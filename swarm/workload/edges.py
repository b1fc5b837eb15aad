"""A prefix tree's edge of token ids: arrays of the tree's own between stretches of shared
arrays held by reference.

Place in the map (docs/architecture.md, "Workload"): below the trees that keep the prompts
they are given, the ideal-reuse index (``workload.prefix.PrefixIndex``, every prompt) and the
simulated cache-aware router's tree (``sim.router_tree.TenantTree``, until it evicts them).
A mid-life session's history of 100k tokens is a few hundred runs of the corpus's ids
(``texts.WordText``): held by reference, a run costs about 24 bytes of its edge; copied, 4 bytes
a token.

- ``narrow_ids``: 64-bit ids by their low 32 bits, as such trees hold them;
- ``RunReferences.tail``: a prompt's tokens from a place as an edge, each of its shared runs
  (``texts.SharedRun``, ``SHARED_FROM_TOKENS`` or longer) checked against the prompt and kept by
  reference, the rest copied;
- ``Pieces``: such an edge (``len``, its first token, its common length with a prompt, a cut,
  growing at its end); ``edge_common``, ``edge_cut``, ``first_token`` and ``referenced`` take
  either kind of edge.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Hashable, Sequence
from typing import TypeAlias, Union, cast

import numpy as np

from swarm.texts import SharedRun

#: a tree's tokens: token ids, or a tuple of any hashable units
Key: TypeAlias = Union["array[int]", tuple[Hashable, ...]]

#: a shared run this long or longer is kept by reference (about 24 bytes: ``Pieces``), a shorter one copied
#: (4 bytes a token): from 256 to 64 when a simulated text became a corpus run from 64 words, the
#: ideal-reuse index of 100,000 agents on a fleet of 64 held 194 MiB less at 420 s of wall time
SHARED_FROM_TOKENS = 64

#: an item of a ``Pieces`` edge: the tree's own array (all of it), or ``(ids, first, end)``,
#: a stretch of a shared array (narrowed as the prompts are: ``narrow_ids``)
Item: TypeAlias = Union["array[int]", tuple["array[int]", int, int]]


def common_length(key: Key, tokens: Key, pos: int, m: int, at: int = 0) -> int:
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


class Pieces:
    """An edge holding stretches of shared arrays by reference between stretches of its own.

    Held in three objects whatever the count of its pieces: ``_srcs``, each piece's array (a
    shared one, or ``_own``); ``_bounds``, each piece's first and end in it (an ``array('q')``,
    two a piece); ``_own``, the edge's own tokens, every own piece's in order (None: none).
    A piece was a tuple of its array and two ints, or an array of its own, each: 120 and 64
    bytes more a piece (the ideal-reuse index of 100,000 simulated agents held 1.58 million
    pieces at 200 s). Its own tokens belong to this edge alone (a cut copies them), so they grow
    in place at its end."""

    __slots__ = ("_bounds", "_own", "_srcs", "length")

    def __init__(self, items: Sequence[Item]) -> None:
        self._srcs: tuple[array[int], ...] = ()
        self._bounds: array[int] = array("q")
        self._own: array[int] | None = None
        self.length = 0
        self._append(items)

    def _append(self, items: Sequence[Item]) -> None:
        """Add ``items`` at the end (an own piece after an own one joins it; an empty one is
        left out). Every own piece must be of one typecode (checked before anything changes)."""
        own = self._own
        kinds = {it.typecode for it in items if not isinstance(it, tuple)}
        if own is not None:
            kinds.add(own.typecode)
        if len(kinds) > 1:
            raise TypeError(f"an edge's own tokens of several typecodes: {sorted(kinds)}")
        srcs, bounds = list(self._srcs), self._bounds
        for it in items:
            if isinstance(it, tuple):
                src, a, b = it
                if a >= b:
                    continue
            else:
                if not it:
                    continue
                if own is None:
                    own = self._own = array(it.typecode)
                a = len(own)
                own.extend(it)
                b = len(own)
                if srcs and srcs[-1] is own and bounds[-1] == a:  # the last piece is its own: longer
                    bounds[-1] = b
                    self.length += b - a
                    continue
                src = own
            srcs.append(src)
            bounds.append(a)
            bounds.append(b)
            self.length += b - a
        self._srcs = tuple(srcs)

    def __len__(self) -> int:
        """Its tokens, counted."""
        return self.length

    def items(self) -> list[Item]:
        """Its pieces: a shared array's as ``(array, first, end)``, its own as a copy."""
        own, b = self._own, self._bounds
        return [src[b[2 * j] : b[2 * j + 1]] if src is own else (src, b[2 * j], b[2 * j + 1])
                for j, src in enumerate(self._srcs)]  # fmt: skip

    def referenced(self) -> int:
        """How many of its tokens are stretches of shared arrays."""
        own, b = self._own, self._bounds
        return sum(b[2 * j + 1] - b[2 * j] for j, src in enumerate(self._srcs) if src is not own)

    def first(self) -> int:
        """Its first token (its parent's key for it)."""
        return self._srcs[0][self._bounds[0]]

    def common(self, tokens: Key, pos: int, m: int) -> int:
        """``common_length`` along the pieces."""
        done = 0
        bounds = self._bounds
        for j, src in enumerate(self._srcs):
            if done >= m:
                break
            a = bounds[2 * j]
            n = min(bounds[2 * j + 1] - a, m - done)
            k = common_length(src, tokens, pos + done, n, a)
            done += k
            if k < n:
                break
        return done

    def cut(self, i: int) -> tuple[Edge, Edge]:
        """The edge's first ``i`` tokens and the rest (``0 < i < len``)."""
        left: list[Item] = []
        right: list[Item] = []
        own, bounds = self._own, self._bounds
        for j, src in enumerate(self._srcs):
            a, b = bounds[2 * j], bounds[2 * j + 1]
            n = b - a
            if i >= n:
                side = left
            elif i > 0:  # the cut falls inside this piece
                left.append(src[a : a + i] if src is own else (src, a, a + i))
                a, side = a + i, right
            else:
                side = right
            i -= n
            side.append(src[a:b] if src is own else (src, a, b))
        return make_edge(left), make_edge(right)

    def grow(self, tail: Edge) -> None:
        """Append ``tail``'s tokens (the edge of a leaf, lengthened by a prompt that extends it)."""
        self._append(tail.items() if isinstance(tail, Pieces) else (cast(Item, tail),))


#: an edge's tokens: an array or tuple of the tree's own, or ``Pieces``
Edge: TypeAlias = Union["array[int]", tuple[Hashable, ...], Pieces]


def make_edge(items: list[Item]) -> Edge:
    """One array of the tree's own as itself; anything else as ``Pieces``."""
    only = items[0]
    if len(items) == 1 and not isinstance(only, tuple):
        return only
    return Pieces(tuple(items))


def first_token(edge: Edge) -> Hashable:
    """An edge's first token: its parent's key for it."""
    return edge.first() if isinstance(edge, Pieces) else edge[0]


def edge_common(edge: Edge, tokens: Key, pos: int) -> int:
    """How many of ``edge``'s tokens equal ``tokens`` from ``pos`` on."""
    m = min(len(edge), len(tokens) - pos)
    if isinstance(edge, Pieces):
        return edge.common(tokens, pos, m)
    return common_length(edge, tokens, pos, m)


def edge_cut(edge: Edge, i: int) -> tuple[Edge, Edge]:
    """``edge``'s first ``i`` tokens and the rest (``0 < i < len``)."""
    if isinstance(edge, Pieces):
        return edge.cut(i)
    return edge[:i], edge[i:]


def referenced(edge: Edge) -> int:
    """How many of an edge's tokens are stretches of shared arrays."""
    return edge.referenced() if isinstance(edge, Pieces) else 0


def narrow_ids(ids: array) -> array:
    """Token ids as a prefix tree that only matches them holds them (the ideal-reuse index; a
    simulated router's tree): 64-bit ids by their low 32 bits (half the memory: such a tree
    holds every token it was sent; two words' ids share their low 32 bits with odds of 2**-32,
    and only a pair met where two prompts part would lengthen one shared prefix); narrower ids
    as they are. The halves are taken by numpy: a strided memoryview's copy took 18 times as
    long (765 against 41 us for 100k ids), 4 % of a simulation of long prompts."""
    if ids.itemsize != 8:
        return ids
    low = 0 if sys.byteorder == "little" else 1  # which half of each 8 bytes is the low one
    if len(ids) < 256:  # numpy's own cost is more than the copy's here
        return array("I", memoryview(ids).cast("B").cast("I")[low::2].tobytes())
    return array("I", np.frombuffer(ids, dtype=np.uint32)[low::2].tobytes())


class RunReferences:
    """A tree's shared arrays, each narrowed once (``narrow_ids``), and the edges it makes of
    prompts' tails with their runs by reference."""

    def __init__(self) -> None:
        #: shared runs given whose ids were not the prompt's where they said (copied instead)
        self.refused = 0
        #: each shared array given (by ``id``), itself (which keeps the id its own) and narrowed
        self._narrowed: dict[int, tuple[array, array]] = {}

    def tail(self, tokens: array, pos: int, shared: Sequence[SharedRun]) -> Edge:
        """``tokens[pos:]`` (narrowed ids) as an edge: each shared run with
        ``SHARED_FROM_TOKENS`` or more of its tokens past ``pos`` as a reference into its array,
        the rest copied. A run whose ids are not the prompt's there (or not inside it) is copied
        and counted in ``refused``: a wrong run costs memory, never a wrong figure."""
        items: list[Item] = []
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
                self.refused += 1
                continue
            if start > at:
                items.append(tokens[at:start])
            items.append((narrow, a, b))
            at = end
        if not items:
            return tokens[pos:]
        if at < n:
            items.append(tokens[at:])
        return make_edge(items)

    def _narrow(self, ids: array) -> array:
        """``ids`` narrowed as prompts are, once per array (kept with it, so that its ``id``
        stays its own)."""
        held = self._narrowed.get(id(ids))
        if held is None:
            held = self._narrowed[id(ids)] = (ids, narrow_ids(ids))
        return held[1]
