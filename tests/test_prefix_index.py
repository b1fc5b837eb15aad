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
