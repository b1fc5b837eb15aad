"""The ideal-reuse index: the longest prefix a prompt shares with any prompt observed before."""

from __future__ import annotations

import random

from swarm.workload.prefix import PrefixIndex


def shared(a: list[str], b: list[str]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_observe_gives_the_longest_prefix_shared_with_any_earlier_prompt() -> None:
    rng = random.Random(3)
    for _ in range(300):
        index, seen = PrefixIndex(), []  # type: ignore[var-annotated]
        for _ in range(rng.randint(1, 12)):
            base = rng.choice(seen) if seen and rng.random() < 0.7 else []
            # lengths past 16 exercise the halving search of an edge's first difference
            prompt = base[: rng.randint(0, len(base))] + [rng.choice("abc") for _ in range(rng.randint(0, 80))]
            assert index.observe(prompt) == max((shared(s, prompt) for s in seen), default=0)
            seen.append(prompt)


def test_a_long_prompt_that_differs_near_its_end_shares_all_before_it() -> None:
    words = [f"w{i}" for i in range(100)]
    rng = random.Random(0)
    first = [rng.choice(words) for _ in range(130_000)]
    second = list(first)
    second[129_000] = "other"
    index = PrefixIndex()
    index.observe(first)
    assert index.observe(second) == 129_000
    assert index.observe(first) == 130_000


def test_prompts_as_token_ids_match_as_their_words_do_and_hold_nothing_the_collector_walks() -> None:
    """The client holds a prompt's tokens as ids (``array('q')``): the index gives the same
    shared prefixes as over the words, and neither an edge nor a prompt has an element the
    garbage collector would walk (a 150k-word list took young collections 3-10 ms)."""
    import gc

    from swarm.workload.tokenizer import word_ids

    rng = random.Random(5)
    prompts = []
    for _ in range(40):
        base = rng.choice(prompts) if prompts and rng.random() < 0.7 else []
        prompts.append(base[: rng.randint(0, len(base))] + [rng.choice(["ab", "c", "d"]) for _ in range(rng.randint(0, 60))])
    by_words, by_ids = PrefixIndex(), PrefixIndex()
    for p in prompts:
        assert by_ids.observe(word_ids(p)) == by_words.observe(p)
    edges, stack = [], [by_ids._root]
    while stack:
        node = stack.pop()
        edges.append(node.key)
        stack.extend(node.children.values())
    assert len(edges) > 10
    walked = [r for e in edges[1:] for r in gc.get_referents(e) if not isinstance(r, type)]
    assert walked == []


def test_an_index_refuses_a_second_kind_of_tokens() -> None:
    """Ids never equal words: an index given both would lose every match without a word."""
    import pytest

    from swarm.workload.tokenizer import word_ids

    index = PrefixIndex()
    index.observe(word_ids(["a", "b"]))
    with pytest.raises(TypeError, match="one index token ids"):
        index.observe(["a", "b"])


def test_the_word_id_cache_is_bounded_and_ids_stay_the_same(monkeypatch: object) -> None:
    import swarm.token_ids as tok

    words = [f"w{i}" for i in range(50)]
    expected = list(tok.word_ids(words))
    monkeypatch.setattr(tok, "_WORD_IDS", {})  # type: ignore[attr-defined]
    monkeypatch.setattr(tok, "_WORD_IDS_MAX", 8)  # type: ignore[attr-defined]
    assert list(tok.word_ids(words)) == expected  # more new words than the cache holds
    for i in range(0, 50, 5):
        assert list(tok.word_ids(words[i : i + 5])) == expected[i : i + 5]
    assert len(tok._WORD_IDS) <= 8


def test_a_chain_of_calls_is_one_edge_of_32_bit_ids() -> None:
    """A session's calls each extend the last: the index lengthens that edge rather than
    adding a node a call, and keeps 4 bytes a token id (a swarm's index holds every token it
    sent); the shared prefixes are what they were."""
    from swarm.workload.tokenizer import word_ids

    index = PrefixIndex()
    system = [f"s{i}" for i in range(50)]
    prompt = list(system)
    for call in range(20):
        before = len(prompt)
        prompt += [f"t{call}-{i}" for i in range(30)]
        assert index.observe(word_ids(prompt)) == (before if call else 0)
    other = system + ["x"] * 10  # another session with the same system prompt
    assert index.observe(word_ids(other)) == len(system)
    edges, stack = [], [index._root]
    while stack:
        node = stack.pop()
        edges.append(node.key)
        stack.extend(node.children.values())
    assert len(edges) == 4  # the root, the system prompt, and each session's own edge
    assert all(edge.itemsize == 4 for edge in edges[1:])
    assert sum(len(edge) for edge in edges) == index.tokens_stored == len(prompt) + 10


def test_shared_runs_are_held_by_reference_and_give_the_same_shared_prefixes() -> None:
    """A prompt's stretches of a shared array (a corpus's words: ``WordText``) are kept by
    reference, not copied (a mid-life session's 100k-token history is a few hundred corpus
    runs; the index held every token of every prompt at 4 bytes): the shared prefixes are the
    ones an index of the same prompts given whole finds, wherever a prompt parts from
    another (inside a shared run, at its edge, in a copied stretch), and it copies less."""
    from array import array

    from swarm.workload.edges import SHARED_FROM_TOKENS

    rng = random.Random(11)
    corpus = array("q", (rng.getrandbits(63) for _ in range(5_000)))
    words = array("q", (rng.getrandbits(63) for _ in range(6)))  # few: copied stretches collide

    def piece() -> tuple[array, int, int] | array:
        if rng.random() < 0.5:  # a corpus run, long or short (a short one is copied)
            k = rng.choice([SHARED_FROM_TOKENS - 1, SHARED_FROM_TOKENS, 300, 700, 5])
            return (corpus, rng.randrange(len(corpus) - k), k)
        return array("q", (rng.choice(words) for _ in range(rng.randint(1, 40))))

    def cut(prompt: list, n: int) -> list:  # type: ignore[type-arg]
        """The prompt's first ``n`` tokens: a run or copied stretch cut where ``n`` falls."""
        out = []
        for p in prompt:
            size = p[2] if isinstance(p, tuple) else len(p)
            if n <= 0:
                break
            if size > n:
                p = (p[0], p[1], n) if isinstance(p, tuple) else p[:n]
            out.append(p)
            n -= size
        return out

    for _ in range(80):
        flat, by_runs = PrefixIndex(), PrefixIndex()
        seen: list[list[tuple[array, int, int] | array]] = []
        for _ in range(rng.randint(2, 16)):
            base = rng.choice(seen) if seen and rng.random() < 0.85 else []
            size = sum(p[2] if isinstance(p, tuple) else len(p) for p in base)
            # most extend a prompt whole (a session's next call); the rest part from it
            # anywhere, inside a run or a copied stretch
            prompt = base if rng.random() < 0.5 else cut(base, rng.randint(0, size))
            if prompt and isinstance(prompt[-1], tuple) and rng.random() < 0.4:  # a run read on
                src, first, k = prompt[-1]
                prompt = [*prompt[:-1], (src, first, min(k + rng.randint(1, 600), len(src) - first))]
            prompt = prompt + [piece() for _ in range(rng.randint(0, 3))]
            seen.append(prompt)
            tokens, shared = array("q"), []
            for p in prompt:
                if isinstance(p, tuple):
                    src, first, k = p
                    shared.append((len(tokens), src, first, k))
                    tokens += src[first : first + k]
                else:
                    tokens += p
            assert by_runs.observe(tokens, shared) == flat.observe(tokens)
        assert by_runs.tokens_stored == flat.tokens_stored
        assert by_runs.tokens_copied <= flat.tokens_copied == flat.tokens_stored


def test_a_session_of_long_corpus_texts_is_held_in_a_few_references() -> None:
    """A chain of calls whose turns are long texts of a shared corpus: one edge a session
    whose copied tokens are the short parts between the texts."""
    from array import array

    rng = random.Random(2)
    corpus = array("q", (rng.getrandbits(63) for _ in range(50_000)))
    system = array("q", (rng.getrandbits(63) for _ in range(40)))
    index = PrefixIndex()
    for session in range(3):
        tokens, shared = array("q", system), []
        for call in range(10):
            before = len(tokens)
            tokens += array("q", [session, call])  # an instruction: copied
            first = rng.randrange(40_000)
            shared.append((len(tokens), corpus, first, 2_000))
            tokens += corpus[first : first + 2_000]
            assert index.observe(tokens, shared) == (before if call else len(system) if session else 0)
    assert index.tokens_stored == 40 + 3 * 10 * 2_002
    assert index.tokens_copied == 40 + 3 * 10 * 2


def test_a_shared_run_that_is_not_the_prompts_is_copied_and_counted() -> None:
    """A run past the prompt's end, or whose ids are not the prompt's where it says (its start
    off by one, a word changed inside it), is copied: the figures are the flat prompts'."""
    from array import array

    rng = random.Random(4)
    corpus = array("q", (rng.getrandbits(63) for _ in range(2_000)))
    inside = array("q", corpus[0:600])
    inside[300] = 7
    wrong = [
        (corpus[0:300], [(0, corpus, 0, 600)]),  # past the end
        (corpus[0:300], [(0, corpus, 1, 300)]),  # a word off
        (inside, [(0, corpus, 0, 600)]),  # not the corpus's inside
    ]
    for tokens, shared in wrong:
        flat, given = PrefixIndex(), PrefixIndex()
        assert given.observe(tokens, shared) == flat.observe(tokens)
        for later in (corpus[0:600], corpus[1:301], inside):
            assert given.observe(later) == flat.observe(later)
        assert given.runs_refused == 1
        assert given.tokens_copied == given.tokens_stored
