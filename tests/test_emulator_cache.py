"""Prefix-cache models of the emulator: radix (token-level) and blocks (full 32-token blocks)."""

from __future__ import annotations

from swarm.emulator.block_cache import BlockCache
from swarm.emulator.radix_cache import RadixCache


def words(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def test_radix_matches_shared_prefix_at_token_level() -> None:
    cache = RadixCache()
    shared = words("s", 45)
    cache.insert(shared + words("a", 10))
    assert cache.match(shared + words("b", 10)) == 45
    assert cache.match(shared[:20]) == 20
    assert cache.match(words("z", 5)) == 0
    cache.insert(shared + words("b", 10))  # splits the edge
    assert cache.size_tokens == 65
    assert cache.match(shared + words("b", 10)) == 55


def test_radix_evicts_lru_unlocked_leaves() -> None:
    cache = RadixCache(capacity_tokens=30)
    a, b = words("a", 10), words("b", 10)
    cache.insert(a)
    cache.insert(b)
    cache.match(a)  # a is now more recent than b
    cache.insert(words("c", 15))  # 35 > 30: b (least recent) goes
    assert cache.match(b) == 0
    assert cache.match(a) == 10
    assert cache.size_tokens == 25
    handle = cache.lock(a)
    cache.insert(words("d", 20))  # must evict 15: c goes, locked a stays
    assert cache.match(a) == 10
    cache.unlock(handle)
    assert cache.evicted_tokens == 25


def test_radix_evicts_parent_after_its_children() -> None:
    cache = RadixCache(capacity_tokens=100)
    shared = words("s", 40)
    cache.insert(shared + words("x", 10))
    cache.insert(shared + words("y", 10))
    freed = cache.evict(60)
    assert freed == 60 and cache.size_tokens == 0


def test_blocks_reuse_only_full_blocks() -> None:
    cache = BlockCache(block_tokens=32)
    shared = words("s", 100)
    cache.insert(shared + words("a", 50))
    assert cache.match(shared + words("b", 50)) == 96  # floor(100/32)*32
    assert cache.match(shared[:31]) == 0


def test_blocks_chain_requires_whole_prefix() -> None:
    cache = BlockCache(block_tokens=4)
    cache.insert(words("a", 8))
    other = words("b", 4) + words("a", 8)[4:]  # same second block, different first
    assert cache.match(other) == 0


def test_blocks_evict_lru_leaves() -> None:
    cache = BlockCache(capacity_tokens=16, block_tokens=4)
    cache.insert(words("a", 8))
    cache.insert(words("b", 8))
    cache.match(words("a", 8))
    cache.insert(words("c", 4))  # 5 blocks > 4: b's last block goes
    assert cache.match(words("b", 8)) == 4
    assert cache.match(words("a", 8)) == 8


def _radix_tokens(cache: RadixCache) -> int:
    total, stack = 0, list(cache.root.children.values())
    while stack:
        n = stack.pop()
        total += len(n.key)
        stack.extend(n.children.values())
    return total


def test_caches_stay_within_capacity_and_consistent_under_random_load() -> None:
    import random

    rng = random.Random(7)
    radix, blocks = RadixCache(capacity_tokens=500), BlockCache(capacity_tokens=512, block_tokens=8)
    prefixes = [words(f"p{k}", rng.randint(5, 60)) for k in range(12)]
    for i in range(600):
        seq = rng.choice(prefixes) + words(f"x{i}", rng.randint(1, 40))
        for cache in (radix, blocks):
            hit = cache.match(seq)
            assert 0 <= hit <= len(seq)
            cache.insert(seq)
            assert cache.match(seq) == (len(seq) if cache is radix else len(seq) // 8 * 8)
        assert radix.size_tokens == _radix_tokens(radix) <= 500
        assert blocks.size_tokens <= 512
    assert radix.evicted_tokens > 0 and blocks.evicted_tokens > 0
