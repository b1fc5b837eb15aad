"""Token ids: a prompt's tokens as one ``array('q')`` of integers.

Place in the map (docs/architecture.md, "Shared value types"): below the workload, which holds
its prompts' tokens so, and the emulator, whose engine model (caches, scheduler, router trees)
works on them: a twin in ``swarm simulate`` takes the ids an agent already holds instead of
tokenising its prompt again. Standard library only.

A word's id is the first 63 bits of its BLAKE2b hash, the same in every process (a cluster's
workers hash blocks alike, and an emulator counts a client's words as the client does). An
array is one block of memory: the garbage collector does not walk it element by element, its
slices compare in C without a call per token, and its bytes hash a block of tokens at once.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Iterable, Sequence
from typing import TypeAlias

#: a prompt's tokens: token ids, ``array('q')``
TokenIds: TypeAlias = "array[int]"

#: each word's id, made once a process, as the 8 bytes an ``array('q')`` holds it in (a prompt's
#: ids are then its words' bytes joined in C: 64 words in 1.8 us, against 4.8 us for an array of
#: the ints; ids are recomputable: past ``_WORD_IDS_MAX`` words the cache starts again, so a
#: replay whose prompts are millions of distinct block words does not keep them all)
_WORD_IDS: dict[str, bytes] = {}
_WORD_IDS_MAX = 200_000
_ID_MASK = (1 << 63) - 1


def _word_id(word: str) -> bytes:
    """A word's id, the first 63 bits of its BLAKE2b hash, in an array's byte order."""
    wid = _WORD_IDS.get(word)
    if wid is None:
        if len(_WORD_IDS) >= _WORD_IDS_MAX:
            _WORD_IDS.clear()
        digest = hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        wid = _WORD_IDS[word] = (int.from_bytes(digest, "little") & _ID_MASK).to_bytes(8, sys.byteorder)
    return wid


def word_ids(words: Iterable[str]) -> TokenIds:
    """The ids of ``words``: looked up in C while every word is known, which after the first
    prompts of a swarm (whose words come from a small corpus) is every time."""
    if not isinstance(words, (list, tuple)):
        words = list(words)
    out: TokenIds = array("q")
    try:
        out.frombytes(b"".join(map(_WORD_IDS.__getitem__, words)))
    except KeyError:  # new words: each hashed once, then the lookup again
        new = set(words).difference(_WORD_IDS)
        if len(_WORD_IDS) + len(new) > _WORD_IDS_MAX:  # would start again midway: one by one
            out.frombytes(b"".join(map(_word_id, words)))
            return out
        for word in new:
            _word_id(word)
        out.frombytes(b"".join(map(_WORD_IDS.__getitem__, words)))
    return out


class LaidOutIds:
    """A prompt's token ids as the stretches of arrays they are laid out from (``(ids, first,
    end)``: ``ids[first:end]``, each an ``array('q')`` that outlives the prompt: its parts'
    ids, a corpus's), made into one array only where they are read whole (``ids()``). A
    simulated twin's queue holds thousands of prompts it has not read yet; as arrays, a
    fleet's queues held most of a large simulation's memory."""

    __slots__ = ("_length", "pieces")

    def __init__(self, pieces: Sequence[tuple[TokenIds, int, int]]) -> None:
        """``pieces``: ``(ids, first, end)`` with ``0 <= first <= end <= len(ids)``, each ``ids``
        an ``array('q')`` that does not change (the caller's promise)."""
        self.pieces = tuple(pieces)
        self._length = sum(b - a for _, a, b in self.pieces)

    def __len__(self) -> int:
        return self._length

    def ids(self) -> TokenIds:
        """The ids, in one new array (each piece's bytes copied)."""
        out: TokenIds = array("q")
        for src, a, b in self.pieces:
            if src.typecode != "q":
                raise TypeError(f"a laid-out prompt's piece is an array('{src.typecode}'), not of 64-bit ids")
            out.frombytes(memoryview(src).cast("B")[a * 8 : b * 8])
        if len(out) != self._length:
            held = len(out)
            raise ValueError(f"a laid-out prompt's pieces hold {held} ids, not the {self._length} they say")
        return out

    def last(self, k: int) -> TokenIds:
        """The last ``k`` ids (all of them, if fewer)."""
        out: TokenIds = array("q")
        for src, a, b in reversed(self.pieces):
            if len(out) >= k:
                break
            take = min(k - len(out), b - a)
            out[0:0] = src[b - take : b]
        return out


#: a prompt's ids, as one array or laid out
PromptIds: TypeAlias = "array[int] | LaidOutIds"


def as_token_ids(tokens: Sequence[object] | LaidOutIds) -> TokenIds:
    """``tokens`` (words, or integer ids) as ids: an array as it is, a ``LaidOutIds`` made
    into one, words by their ids, integers as they are."""
    if isinstance(tokens, array):
        return tokens
    if isinstance(tokens, LaidOutIds):
        return tokens.ids()
    if tokens and isinstance(tokens[0], str):
        return word_ids(tokens)  # type: ignore[arg-type]
    return array("q", tokens)  # type: ignore[arg-type]


def common_prefix(a: TokenIds, b: TokenIds, start: int = 0) -> int:
    """Length of the common prefix of ``a`` and ``b[start:]``: runs compared as slices (a copy
    and a compare in C each), growing while they match, then halved to the first id that
    differs; the comparisons copy about twice the common prefix, not the whole of either (a
    prompt of 100k tokens against a sequence it leaves early)."""
    n = min(len(a), len(b) - start)
    i, run = 0, 64
    while i < n:  # grow: each matching run doubles the next
        k = min(run, n - i)
        if a[i : i + k] != b[start + i : start + i + k]:
            break
        i, run = i + k, run * 2
    else:
        return max(n, 0)
    while k > 1:  # the first difference is within the k ids from i
        half = k // 2
        if a[i : i + half] == b[start + i : start + i + half]:
            i, k = i + half, k - half
        else:
            k = half
    return i
