"""The simulated cache-aware router's one tree (``sim.router_tree``) and its policy over it
(``sim.routing.CacheAware``): the choices of one tree per replica, the tokens each replica
holds, and the router's timed eviction of each replica's least recently used leaves."""

from __future__ import annotations

import random
from array import array

from swarm.emulator.radix_cache import RadixCache
from swarm.sim.router_tree import TenantTree, _Node
from swarm.sim.routing import CacheAware
from swarm.token_ids import as_token_ids, word_ids
from swarm.workload.prefix import narrow_ids


def ids(*runs: tuple[str, int]) -> array:
    """Ids of words ``f"{stem}{i}"`` for each (stem, count), one after another."""
    return word_ids([f"{stem}{i}" for stem, count in runs for i in range(count)])


def held_per_tenant(tree: TenantTree) -> list[int]:
    """Tokens each tenant holds, counted node by node."""
    held = [0] * len(tree.tokens)
    stack = list(tree.root.children.values())
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        for tenant in node.tenants:
            held[tenant] += len(node.key)
    return held


def paths_of(tree: TenantTree, tenant: int) -> set[tuple[int, ...]]:
    """Every root-to-leaf path of ``tenant``'s nodes."""
    found: set[tuple[int, ...]] = set()

    def walk(node: _Node, prefix: tuple[int, ...]) -> None:
        below = [c for c in node.children.values() if tenant in c.tenants]
        for child in below:
            walk(child, prefix + tuple(child.key))
        if not below and prefix:
            found.add(prefix)

    walk(tree.root, ())
    return found


class PerReplicaTrees:
    """The policy as it was built before (one radix tree per replica, matched one by one): the
    reference the one tree must choose as."""

    def __init__(self, replicas: int) -> None:
        self.trees = [RadixCache(None) for _ in range(replicas)]

    def choose(self, prompt: array, loads: list[int]) -> int:
        replicas = range(len(self.trees))
        tokens = narrow_ids(as_token_ids(prompt))
        if max(loads) - min(loads) > 64 and max(loads) > min(loads) * 1.5:
            chosen = min(replicas, key=loads.__getitem__)
        else:
            matched = [tree.match(tokens) for tree in self.trees]
            best = max(replicas, key=matched.__getitem__)
            if len(prompt) and matched[best] / len(prompt) > 0.3:
                chosen = best
            else:
                chosen = min(replicas, key=lambda i: self.trees[i].size_tokens)
        self.trees[chosen].insert(tokens)
        return chosen


def agent_prompts(seed: int, agents: int, turns: int) -> list[array]:
    """Prompts of agents that share one of three system prompts and grow their own histories,
    interleaved at random: most match a replica's tree in part, some barely."""
    rng = random.Random(seed)
    systems = [ids((f"sys{k}-", rng.randint(5, 60))) for k in range(3)]
    histories = [systems[rng.randrange(3)] + ids((f"task{a}-", rng.randint(1, 30))) for a in range(agents)]
    prompts = []
    for _ in range(agents * turns):
        a = rng.randrange(agents)
        if rng.random() < 0.15:  # a branch: a turn that is not kept
            prompts.append(histories[a] + ids((f"branch{a}-{len(prompts)}-", rng.randint(1, 40))))
            continue
        histories[a] = histories[a] + ids((f"turn{a}-{len(prompts)}-", rng.randint(1, 80)))
        prompts.append(histories[a])
    return prompts


def test_the_one_tree_chooses_as_a_tree_per_replica_did_and_holds_what_they_held() -> None:
    """Over seeded swarms and loads (balanced, and now and then parted past the thresholds),
    every choice equals the per-replica trees' and each replica holds as many tokens."""
    for seed in range(4):
        rng = random.Random(100 + seed)
        replicas = rng.choice([2, 3, 8])
        one, reference = CacheAware(replicas, clock_s=lambda: 0.0), PerReplicaTrees(replicas)
        for prompt in agent_prompts(seed, agents=12, turns=8):
            loads = [rng.randint(0, 10) for _ in range(replicas)]
            if rng.random() < 0.1:
                loads[rng.randrange(replicas)] += 100  # parted: the least loaded
            assert one.choose(prompt, loads) == reference.choose(prompt, loads)
        assert one.tree.tokens == [tree.size_tokens for tree in reference.trees]
        assert one.tree.tokens == held_per_tenant(one.tree)


def test_a_prefix_sent_to_several_replicas_is_held_once_and_by_32_bit_ids() -> None:
    """A shared system prompt is one node with each replica that was sent it; a prompt's
    64-bit ids are held by their low 32 bits and match the next prompt's by them."""
    shared = ids(("s", 200))
    assert shared.itemsize == 8
    tree = TenantTree(4)
    for tenant in range(4):
        tree.insert(narrow_ids(shared + ids((f"own{tenant}-", 10))), tenant)
    assert tree.tokens == [210] * 4
    (system,) = tree.root.children.values()
    assert len(system.key) == 200 and sorted(system.tenants) == [0, 1, 2, 3]
    assert tree.nodes == 5  # the shared run, then four tails
    assert tree.prefix_match(narrow_ids(shared + ids(("own2-", 3)))) == (203, 2)
    assert tree.prefix_match(narrow_ids(shared + ids(("new", 3)))) == (200, 0)  # the lowest of equals
    stack = list(tree.root.children.values())
    while stack:
        node = stack.pop()
        assert node.key.itemsize == 4
        stack.extend(node.children.values())


def test_eviction_waits_for_the_routers_timer_then_drops_least_recently_used_leaves() -> None:
    """Over the cap, nothing leaves until the 60 s timer; then the replica gives up its least
    recently used leaves (a leaf another replica holds stays for that one) until it fits."""
    now = [0.0]
    router = CacheAware(2, max_tree_tokens=100, clock_s=lambda: now[0])
    system = ids(("sys", 40))
    old, mid, new = (system + ids((name, 30)) for name in ("old", "mid", "new"))
    shared_tail = system + ids(("both", 30))
    tree = router.tree
    for prompt in (old, mid, shared_tail):
        tree.insert(narrow_ids(prompt), 0)
    tree.insert(narrow_ids(shared_tail), 1)
    now[0] = 30.0
    router.choose(new, [0, 0])  # 40 matched of 70: replica 0 now holds 160
    assert tree.tokens[0] == 160 and tree.evicted_tokens == 0
    now[0] = 59.9
    router.choose(new, [0, 0])
    assert tree.tokens[0] == 160
    now[0] = 60.0
    router.choose(new, [0, 0])  # the timer: old then mid leave replica 0 (100 left), then new enters
    assert tree.evicted_tokens == 60
    held = {tuple(path[40:]) for path in paths_of(tree, 0)}
    assert held == {tuple(narrow_ids(ids(("both", 30)))), tuple(narrow_ids(ids(("new", 30))))}
    assert paths_of(tree, 1) == {tuple(narrow_ids(shared_tail))}
    assert tree.tokens == held_per_tenant(tree) == [100, 70]
    assert tree.nodes == 3  # the system prompt, "both" and "new": old and mid left the tree


def test_eviction_climbs_to_a_parent_that_becomes_the_replicas_leaf() -> None:
    """A replica's leaf dropped leaves its parent the replica's leaf: it goes next if the
    replica still holds too much, and nodes no replica holds leave the tree."""
    tree = TenantTree(2)
    a = narrow_ids(ids(("a", 50)))
    tree.insert(a + narrow_ids(ids(("x", 50))), 0)
    tree.insert(a + narrow_ids(ids(("y", 50))), 0)
    tree.insert(narrow_ids(ids(("b", 20))), 1)
    assert tree.tokens == [150, 20]
    assert tree.evict(40) == 150  # x, then y, then their parent a
    assert tree.tokens == held_per_tenant(tree) == [0, 20]
    assert tree.nodes == 1 and paths_of(tree, 1) == {tuple(narrow_ids(ids(("b", 20))))}
    assert tree.prefix_match(a) == (0, 0)  # the root holds every replica
    assert tree.smallest_tenant() == 0
