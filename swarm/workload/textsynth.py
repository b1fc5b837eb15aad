"""Text synthesis: prompt text of an exact token length, from a seeded RNG.

Place in the map (docs/architecture.md, "Workload"): the Workload asks for system prompts, tasks,
instructions and stand-in outputs of given token budgets. With the word tokenizer the budget
is hit exactly (one word is one token). With a real tokenizer the text is grown or trimmed
word by word until its count is within one word of the budget.

Words come from a list of common English words, all lowercase and without digits, so they
never coincide with the emulator's generated words (capitalised), and a synthetic stand-in
never accidentally extends a cached generated output.
"""

from __future__ import annotations

import functools
import itertools
import random
from array import array

from swarm.texts import Corpus, Text, WordText, join_runs
from swarm.workload.tokenizer import TokenIds, Tokenizer, WordTokenizer, word_ids

WORDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        """
    the of and to in is for that on with as by at from this be or are it an was not
    which have has but all can more one will their they about if when there into other
    data system model value time state file user code function request result output input
    table query index cache block token prompt agent task plan step check test build run
    read write update create delete list find search fetch parse format return error log
    path name type field record batch stream server client engine node graph tree branch
    level score rank keep prune merge split map reduce answer reason proof claim evidence
    source paper method study report summary note section figure number count total rate
    first second third next last each every many few some most other same new old large
    small fast slow high low early late long short simple clear exact close open full
    memory disk network thread process worker driver queue limit window buffer chunk part
    compute measure compare choose decide explain describe verify assume derive solve prove
    equation variable constant integer matrix vector sum product ratio bound case option
    because therefore however while since until unless although whether either neither
    review patch diff commit branch merge release version config option setting default
    account customer order invoice payment price market growth revenue cost margin trend
    question problem goal constraint criterion approach strategy idea hypothesis experiment
    observe collect analyse estimate predict sample signal noise error bias variance model
    document page line word character string array object key item element member entry
    """.split()
    )
)


def words(rng: random.Random, n: int) -> list[str]:
    return rng.choices(WORDS, k=n) if n > 0 else []


#: a text of this many words or more is cut from the corpus (``corpus``) at a random word, not
#: drawn word by word: a mid-life coding session's history is 100k words, and drawing them one by
#: one was a third of a simulation's time (docs/simulation.md, "Speed")
CORPUS_FROM_WORDS = 64
#: a text cut from the corpus of this many words or more keeps its ids' place (``WordText``):
#: a history part (a Claude Code turn is hundreds to thousands of words) is then never split
#: and looked up word by word (4,096 -> 256: ``python -m bench simulate``'s 10,000 agents
#: 9.3 -> 14.7 x real time, the trace the same); a shorter one is a plain string (from 64
#: words, the ids' places cost 6 KB an agent in ``python -m bench client-delay --quick``,
#: 39.5 -> 45.4 KB; from 256, 39.9 -> 39.4 KB, within noise)
WORD_TEXT_FROM_WORDS = 256
#: the same on a virtual clock (``swarm simulate``), where no text is made into characters:
#: every text cut from the corpus keeps its ids' place, a shorter Claude Code turn is then not
#: held as characters and ids (docs/simulation.md, "Fewer bytes a session"; over HTTP, the
#: characters are made and kept: 54 KB an agent at 64 words in ``client-delay --quick``)
SIMULATED_WORD_TEXT_FROM_WORDS = CORPUS_FROM_WORDS
#: the corpus's length in words (about 1.7 MB of text, drawn once per process from its own seed)
CORPUS_WORDS = 1 << 18


@functools.cache
def corpus() -> tuple[str, array]:
    """One long text of ``CORPUS_WORDS`` words drawn from ``WORDS`` (a fixed seed: the same in
    every process), and where each of its words starts (one past the end last). About 50 ms,
    once per process: a ``Workload`` makes it before its run sends."""
    drawn = random.Random("swarm:textsynth:corpus").choices(WORDS, k=CORPUS_WORDS)
    starts = array("q", itertools.accumulate((len(word) + 1 for word in drawn), initial=0))
    return " ".join(drawn), starts


@functools.cache
def corpus_ids() -> TokenIds:
    """The ids of the corpus's words (2 MB, made at the first ``WordText``, of
    ``WORD_TEXT_FROM_WORDS`` words or more, ``SIMULATED_WORD_TEXT_FROM_WORDS`` on a virtual
    clock: a swarm of short texts never holds them)."""
    text, _ = corpus()
    return word_ids(text.split())


@functools.cache
def word_corpus() -> Corpus:
    """The corpus, where its words start and their ids, as a ``WordText`` reads them."""
    text, starts = corpus()
    return Corpus(text, starts, corpus_ids())


def corpus_runs(rng: random.Random, n: int) -> list[tuple[int, int]]:
    """``n`` words of the corpus from a word ``rng`` draws (more than the corpus holds: several
    such runs): each run's first word and length in the corpus. As random as ``words`` to a
    cache (a prompt's blocks are hashed from its first token, so a run's place in the corpus
    is all that tells texts apart)."""
    runs = []
    while n > 0:
        k = min(n, CORPUS_WORDS)
        runs.append((rng.randrange(CORPUS_WORDS - k + 1), k))
        n -= k
    return runs


def corpus_words(rng: random.Random, n: int) -> tuple[str, list[tuple[int, int]]]:
    """The words of ``corpus_runs(rng, n)`` joined by spaces (a copy), and the runs."""
    text, starts = corpus()
    runs = corpus_runs(rng, n)
    return join_runs(text, starts, runs), runs


@functools.lru_cache(maxsize=4096)
def _lead(lead: str) -> tuple[str, TokenIds]:
    """A lead's words joined by single spaces and their ids, shared by every text it leads (a
    node's tag leads its instruction in every agent); the arrays are never changed."""
    head = lead.split()
    return " ".join(head), word_ids(head)


def synth_text(
    rng: random.Random,
    n_tokens: int,
    tokenizer: Tokenizer | None = None,
    lead: str = "",
    word_text_from: int = WORD_TEXT_FROM_WORDS,
) -> Text:
    """Text of ``n_tokens`` tokens (exact for words), starting with ``lead`` when given: with
    word tokens and ``word_text_from`` words or more after the lead (``WORD_TEXT_FROM_WORDS``;
    ``SIMULATED_WORD_TEXT_FROM_WORDS`` on a virtual clock), a ``WordText`` (its characters made
    only when sent).

    The lead counts towards the budget; it is how callers make texts differ from their first
    token (e.g. a node tag), so siblings share nothing beyond their parent's context.
    """
    tokenizer = tokenizer or WordTokenizer()
    head = lead.split()
    if isinstance(tokenizer, WordTokenizer):
        if n_tokens - len(head) >= max(word_text_from, CORPUS_FROM_WORDS):
            head_text, lead_ids = _lead(lead)
            return WordText(head_text, lead_ids, tuple(corpus_runs(rng, n_tokens - len(head))), word_corpus())
        if n_tokens - len(head) >= CORPUS_FROM_WORDS:
            cut, _ = corpus_words(rng, n_tokens - len(head))
            return " ".join([*head, cut])
        body = words(rng, max(0, n_tokens - len(head)))
        return " ".join((head + body)[: max(n_tokens, 0)]) if n_tokens > 0 else ""
    # real tokenizer: estimate, then adjust word by word
    pool = head + words(rng, max(1, n_tokens))
    lo, hi = len(head), len(pool)
    while lo < hi:  # smallest word count whose token count reaches the budget
        mid = (lo + hi) // 2
        if len(tokenizer.encode(" ".join(pool[:mid]))) < n_tokens:
            lo = mid + 1
        else:
            hi = mid
    return " ".join(pool[: max(lo, len(head))])


def tool_catalogue(
    rng: random.Random, n_tokens: int, tools: int, tokenizer: Tokenizer | None = None, lead: str = ""
) -> str:
    """A system prompt that reads like an agent's tool definitions, cut to ``n_tokens``."""
    parts = [lead] if lead else []
    parts.append("you are an agent with these tools . call one tool at a time .")
    per_tool = max(8, n_tokens // max(tools, 1))
    for t in range(tools):
        name = "_".join(rng.choices(WORDS, k=2))
        params = " ".join(
            f"param {rng.choice(WORDS)} ( {rng.choice(('string', 'integer', 'boolean', 'array'))} ) {' '.join(words(rng, 6))} ;"
            for _ in range(rng.randint(1, 4))
        )
        parts.append(f"tool {t} {name} : {' '.join(words(rng, per_tool // 2))} . {params}")
    text = " ".join(parts)
    if isinstance(tokenizer or WordTokenizer(), WordTokenizer):
        toks = text.split()
        if len(toks) < n_tokens:
            toks += words(rng, n_tokens - len(toks))
        return " ".join(toks[:n_tokens])
    return _fit(rng, text, n_tokens, tokenizer)


def _fit(rng: random.Random, text: str, n_tokens: int, tokenizer: Tokenizer | None) -> str:
    assert tokenizer is not None
    toks = text.split()
    while len(tokenizer.encode(" ".join(toks))) < n_tokens:
        toks += words(rng, 16)
    lo, hi = 1, len(toks)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(tokenizer.encode(" ".join(toks[:mid]))) < n_tokens:
            lo = mid + 1
        else:
            hi = mid
    return " ".join(toks[:lo])
