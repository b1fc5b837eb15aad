"""A message's text: a ``str``, or a ``WordText`` held as where its words are in a corpus.

Place in the map (docs/architecture.md, "Shared value types"): below the workload, whose text
synthesis (``workload.textsynth``) makes ``WordText``s of its long texts, and the request
(``ChatMessage.content`` is a ``Text``); a client turns one into characters only where it
sends or records text (``str(text)``), and a simulated twin never does (it reads the ids).
Standard library and ``swarm.token_ids`` only.

Why not the characters: a mid-life session's history is a hundred long turns, and a swarm of
them held every turn's characters (a third of a 64-replica fleet simulation's traced memory:
41,320 texts, 257 MiB at 1,000 agents) that nothing but an HTTP body ever reads. Over HTTP a
text's characters, once made for a body, are kept (a history part is in every later prompt of
its session): a real-time run holds what it held before.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import NamedTuple, TypeAlias

from swarm.token_ids import TokenIds

__all__ = ["Corpus", "SharedRun", "Text", "WordText", "as_str", "join_runs"]

#: where a prompt's tokens are a stretch of an array that outlives the prompt (a corpus's ids):
#: ``(at, ids, first, k)``, the prompt's tokens ``at`` to ``at + k - 1`` are ``ids[first :
#: first + k]`` (``WordText.shared_runs``); a tree that keeps prompts may hold such a stretch by
#: reference (``workload.edges``)
SharedRun: TypeAlias = tuple[int, TokenIds, int, int]


class Corpus(NamedTuple):
    """One long text of words joined by single spaces, where each word starts (one past the
    end last), and each word's id."""

    text: str
    starts: array[int]
    ids: TokenIds


#: the lead of a text without one: one empty array for all (a ``WordText``'s arrays are never changed)
_NO_IDS: TokenIds = array("q")
#: a ``WordText`` of one run holds it as one int, ``first << 32 | k``, where both are under this
_ONE_RUN = 1 << 32
_RUN_K = _ONE_RUN - 1


class WordText:
    """A text of words joined by single spaces: ``head`` (its first words, given whole; may be
    empty), then for each ``(first, k)`` of ``runs`` the corpus's words ``first`` to
    ``first + k - 1``. Its characters are made only by ``str()``, then kept; its ids are slices
    of the corpus's (``extend_ids``). Equal to another ``WordText`` of the same head and runs,
    and to nothing else (a ``str`` of the same characters is not: their hashes differ). It
    pickles as a plain ``str``."""

    # a simulated swarm holds a million of them: its runs are one flat tuple (``first, k, ...``:
    # a tuple of pairs was 48 bytes more), or for one run (nearly every text) one int,
    # ``first << 32 | k`` (a tuple of two ints was 80 bytes more); its hash is made when asked
    # (a text is seldom a key: 36 bytes less, and 8 of its slot)
    __slots__ = ("_corpus", "_head", "_lead", "_runs", "_text", "words")

    def __init__(self, head: str, lead: TokenIds, runs: Iterable[tuple[int, int]], corpus: Corpus) -> None:
        """``lead`` is the ids of ``head``'s words (the caller's promise)."""
        self._head, self._lead, self._corpus = head, lead, corpus
        if type(runs) is tuple and len(runs) == 1:  # the usual text: one run
            flat = tuple(runs[0])
        else:
            flat = tuple(x for run in runs for x in run)
        #: how many words (tokens, to the word tokenizer) it has
        self.words: int = len(lead) + sum(flat[1::2])
        self._runs: tuple[int, ...] | int = flat
        if len(flat) == 2 and 0 <= flat[0] < _ONE_RUN and 0 <= flat[1] < _ONE_RUN:
            self._runs = flat[0] << 32 | flat[1]  # one run: one int (the same for equal texts)
        self._text: str | None = None

    def _pairs(self) -> Iterator[tuple[int, int]]:
        """Its runs, each ``(first, k)``."""
        runs = self._runs
        if type(runs) is int:
            return iter(((runs >> 32, runs & _RUN_K),))
        return zip(runs[::2], runs[1::2], strict=True)  # type: ignore[index]

    def __str__(self) -> str:
        """Its characters, made at the first call and kept (a client over HTTP sends a history
        part in every later prompt of its session: made again each time, a 100k-word history
        cost a join of its words per request)."""
        if self._text is None:
            text, starts, _ = self._corpus
            runs = join_runs(text, starts, self._pairs())
            self._text = f"{self._head} {runs}" if self._head and runs else self._head or runs
        return self._text

    def __len__(self) -> int:
        """Its length in characters, without making them."""
        starts = self._corpus.starts
        chars = sum(starts[first + k] - starts[first] - 1 for first, k in self._pairs())
        pieces = sum(1 for _ in self._pairs()) + (1 if self._head else 0)
        return len(self._head) + chars + max(pieces - 1, 0)

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if type(other) is not WordText:
            return NotImplemented
        return self._head == other._head and self._runs == other._runs

    def __hash__(self) -> int:
        return hash((self._head, self._runs))

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        """Its first words, without making (and so keeping) all its characters."""
        if self._text is not None:
            preview = self._text[:40]
        else:
            text, starts, _ = self._corpus
            first, k = next(self._pairs(), (0, 0))
            run = text[starts[first] : starts[first + min(k, 8)] - 1] if k else ""
            preview = " ".join(p for p in (self._head, run) if p)[:40]
        return f"WordText({self.words} words: {preview!r}...)"

    def __reduce__(self) -> tuple[type, tuple[str]]:
        """A plain ``str`` of its characters (which it keeps, as ``str()`` does): so are its
        copies (``copy.copy``, ``copy.deepcopy``)."""
        return str, (str(self),)

    def token_ids(self) -> TokenIds:
        out: TokenIds = array("q")
        self.extend_ids(out)
        return out

    def extend_ids(self, out: TokenIds) -> None:
        """``out += token_ids()`` without an array of this text's own: each run copied from the
        corpus's ids straight onto ``out`` (a prompt composed of long texts need not keep each
        text's ids beside it: ``SessionPrompts.tokens``)."""
        out += self._lead
        ids = self._corpus.ids
        size = ids.itemsize
        view = memoryview(ids).cast("B")
        for first, k in self._pairs():
            out.frombytes(view[first * size : (first + k) * size])

    def id_pieces(self) -> Iterator[tuple[TokenIds, int, int]]:
        """Its ids as ``(ids, first, end)`` stretches of its lead's array and the corpus's, in
        order (``token_ids.LaidOutIds``): ``extend_ids`` without the copy."""
        if self._lead:
            yield self._lead, 0, len(self._lead)
        ids = self._corpus.ids
        for first, k in self._pairs():
            yield ids, first, first + k

    def shared_runs(self, at: int) -> Iterator[SharedRun]:
        """Where its words are the corpus's, in a prompt whose tokens it extends from ``at``
        (``extend_ids``): for each run, its place in the prompt, the corpus's ids, its first
        word there and its length (``SharedRun``)."""
        at += len(self._lead)
        ids = self._corpus.ids
        for first, k in self._pairs():
            yield at, ids, first, k
            at += k

    def words_from(self, cut: int) -> Text:
        """Its words from the ``cut``-th on (0-based; ``cut >= 0``), as
        ``" ".join(str(self).split(" ")[cut:])``: a ``WordText`` while any of its words are
        left, else ``""``."""
        if cut < 0:
            raise ValueError(f"a cut is at a word, 0 or more (got {cut})")
        if cut == 0:
            return self
        head_words = self._head.split(" ") if self._head else []
        if cut < len(head_words):
            rest = " ".join(head_words[cut:])
            return WordText(rest, self._lead[cut:], self._pairs(), self._corpus)
        cut -= len(head_words)
        runs = list(self._pairs())
        while runs and cut >= runs[0][1]:
            cut -= runs.pop(0)[1]
        if not runs:
            return ""
        first, k = runs[0]
        runs[0] = (first + cut, k - cut)
        return WordText("", _NO_IDS, tuple(runs), self._corpus)


def join_runs(text: str, starts: array[int], runs: Iterable[tuple[int, int]]) -> str:
    """The words of ``text`` (single spaces between words; ``starts``: where each starts, one
    past the end last) ``first`` to ``first + k - 1`` of each ``(first, k)`` of ``runs``,
    joined by spaces."""
    return " ".join(text[starts[first] : starts[first + k] - 1] for first, k in runs)


#: a message's text
Text: TypeAlias = str | WordText


def as_str(text: Text) -> str:
    """``text``'s characters (a ``str`` as it is)."""
    return text if type(text) is str else str(text)
