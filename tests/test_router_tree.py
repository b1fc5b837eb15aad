"""The simulated cache-aware router's one tree (``sim.router_tree``) and its policy over it
(``sim.routing.CacheAware``), as sglang-router 0.3.2 keeps them: the longest match and the
replica it names, the tokens each replica holds, the stamps, and the router's timed eviction of
each replica's least recently used leaves."""

from __future__ import annotations

import random
from array import array

from swarm.sim.router_tree import TenantTree, _Node
from swarm.sim.routing import CacheAware
from swarm.token_ids import word_ids
from swarm.workload.edges import SHARED_FROM_TOKENS, Edge, Pieces, narrow_ids, referenced


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


def laid_out(edge: Edge) -> tuple[int, ...]:
    """An edge's tokens in order, its runs by reference read out."""
    if not isinstance(edge, Pieces):
        return tuple(edge)  # type: ignore[arg-type]
    pieces = (item[0][item[1] : item[2]] if isinstance(item, tuple) else item for item in edge.items())
    return tuple(t for piece in pieces for t in piece)


def paths_of(tree: TenantTree, tenant: int) -> set[tuple[int, ...]]:
    """Every root-to-leaf path of ``tenant``'s nodes."""
    found: set[tuple[int, ...]] = set()

    def walk(node: _Node, prefix: tuple[int, ...]) -> None:
        below = [c for c in node.children.values() if tenant in c.tenants]
        for child in below:
            walk(child, prefix + laid_out(child.key))
        if not below and prefix:
            found.add(prefix)

    walk(tree.root, ())
    return found


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


def ancestors_hold(tree: TenantTree) -> bool:
    """Every tenant of a node holds each node above it."""
    stack = list(tree.root.children.values())
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        assert node.parent is not None
        if not set(node.tenants) <= set(node.parent.tenants):
            return False
    return True


def shared_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def longest_match(tree: TenantTree, tenant: int, prompt: array) -> int:
    """How far ``prompt`` follows ``tenant``'s own paths, id by id."""
    return max((shared_length(path, tuple(prompt)) for path in paths_of(tree, tenant)), default=0)


def test_a_match_is_the_longest_any_replica_holds_and_names_one_that_holds_it() -> None:
    """Over seeded swarms routed, matched and evicted at random: each match is the longest
    prefix any replica's own prompts give and names a replica whose prompts match that far;
    every replica of a node holds the nodes above it, and each replica's count is its nodes'."""
    for seed in range(3):
        rng = random.Random(200 + seed)
        replicas = rng.choice([2, 3, 5])
        tree = TenantTree(replicas)
        for step, prompt in enumerate(agent_prompts(seed, agents=6, turns=6)):
            ids = narrow_ids(prompt)
            matched, named = tree.prefix_match(ids)
            longest = [longest_match(tree, t, ids) for t in range(replicas)]
            assert matched == max(longest) and longest[named] == matched
            tree.insert(ids, rng.randrange(replicas))
            if step % 9 == 8:
                tree.evict(rng.randint(50, 400))
            assert ancestors_hold(tree)
            assert tree.tokens == held_per_tenant(tree)


def test_a_match_names_the_replica_that_made_the_node_while_it_holds_it() -> None:
    """A shared prefix's node names the replica that first sent it (the router's
    ``last_tenant``), not the lowest of those holding it; once that one is evicted from it,
    the lowest of the rest, from then on."""
    system = narrow_ids(ids(("sys", 50)))
    tree = TenantTree(3)
    tree.insert(system + narrow_ids(ids(("two", 20))), 2)
    tree.insert(system + narrow_ids(ids(("zero", 5))), 0)
    tree.insert(system + narrow_ids(ids(("one", 5))), 1)
    tree.insert(narrow_ids(ids(("big", 100))), 2)
    probe = system + narrow_ids(ids(("new", 5)))
    assert tree.prefix_match(probe) == (50, 2)
    tree.evict(55)  # replica 2 (170) gives up everything, its oldest first; 0 and 1 keep theirs
    assert tree.tokens == [55, 55, 0]
    assert tree.prefix_match(probe) == (50, 0)
    tree.insert(system + narrow_ids(ids(("two", 3))), 2)
    assert tree.prefix_match(probe) == (50, 0)  # the node's new maker stays


def test_only_the_node_a_prompt_ends_at_is_stamped_and_a_match_one_in_eight() -> None:
    """An insert stamps the node where its prompt ends with a new epoch; a node it only passes
    through keeps its stamp (0 when the replica joins it there). A match takes an epoch too and
    stamps its node only when that epoch is a multiple of 8 (the router's 1 in 8)."""
    tree = TenantTree(2)
    system, a, b = (narrow_ids(ids((stem, 10))) for stem in ("sys", "a", "b"))
    tree.insert(system + a, 0)  # epoch 0: one leaf
    tree.insert(system + b, 1)  # epoch 1: splits sys off, replica 1 joins it with 0
    (shared,) = tree.root.children.values()
    assert shared.tenants == {0: 0, 1: 0}
    leaf_b = shared.children[b[0]]
    assert leaf_b.tenants == {1: 1}
    tree.insert(system, 1)  # epoch 2: ends at the shared node
    assert shared.tenants == {0: 0, 1: 2}
    for _ in range(3, 8):
        tree.prefix_match(system + a)  # epochs 3-7: no stamp
    assert shared.children[a[0]].tenants == {0: 0}
    tree.prefix_match(system + a)  # epoch 8
    assert shared.children[a[0]].tenants == {0: 8}


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


def corpus_prompts(seed: int, prompts: int) -> list[tuple[array, list[tuple[int, array, int, int]]]]:
    """Prompts of a swarm's shape laid out from a shared corpus's runs (long, short, read on
    past a parent's end) and short pieces of their own, each with where its runs are: most
    extend an earlier prompt whole, the rest part from it anywhere, inside a run or not."""
    rng = random.Random(seed)
    corpus = array("q", (rng.getrandbits(63) for _ in range(6_000)))
    words = array("q", (rng.getrandbits(63) for _ in range(5)))  # few: copied stretches collide
    seen: list[list[tuple[int, int] | array]] = []
    out = []
    for _ in range(prompts):
        base = list(rng.choice(seen)) if seen and rng.random() < 0.85 else []
        if base and rng.random() < 0.4:  # parts from it: a run or a piece cut short
            keep = rng.randrange(len(base))
            last = base[keep]
            cut = rng.randint(1, (last[1] if isinstance(last, tuple) else len(last)))
            base = [*base[:keep], (last[0], cut) if isinstance(last, tuple) else last[:cut]]
        elif base and isinstance(base[-1], tuple) and rng.random() < 0.3:  # its last run read on
            first, k = base[-1]
            base[-1] = (first, min(k + rng.randint(1, 500), len(corpus) - first))
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.6:
                k = rng.choice([SHARED_FROM_TOKENS - 1, SHARED_FROM_TOKENS, 400, 900, 7])
                base.append((rng.randrange(len(corpus) - k), k))
            else:
                base.append(array("q", (rng.choice(words) for _ in range(rng.randint(1, 30)))))
        seen.append(base)
        tokens, runs = array("q"), []
        for piece in base:
            if isinstance(piece, tuple):
                first, k = piece
                runs.append((len(tokens), corpus, first, k))
                tokens += corpus[first : first + k]
            else:
                tokens += piece
        out.append((tokens, runs))
    return out


def test_a_tree_given_the_prompts_corpus_runs_routes_as_one_given_them_whole() -> None:
    """A prompt's long runs of the corpus are held by reference (a mid-life session's 100k-token
    history is a few hundred of them): routed, matched and evicted alike, the router that is
    given them chooses the same replicas, holds the same paths, counts and nodes as one given
    the prompts whole, and holds few of the tokens in arrays of its own."""
    now = [0.0]
    for seed in range(6):
        now[0] = 0.0
        flat, by_runs = (CacheAware(4, max_tree_tokens=6_000, clock_s=lambda: now[0]) for _ in range(2))
        rng = random.Random(seed)
        for tokens, runs in corpus_prompts(300 + seed, prompts=60):
            loads = [rng.randrange(3) for _ in range(4)]
            assert by_runs.choose(tokens, loads, runs) == flat.choose(tokens, loads)
            now[0] += rng.uniform(0, 9)  # evictions every 60 s
        a, b = flat.tree, by_runs.tree
        assert (b.tokens, b.nodes, b.evicted_tokens) == (a.tokens, a.nodes, a.evicted_tokens)
        assert a.evicted_tokens > 0
        for tenant in range(4):
            assert paths_of(b, tenant) == paths_of(a, tenant)
        assert b.tokens == held_per_tenant(b) and ancestors_hold(b)
        keys = [node.key for node in walk_nodes(b)]
        own, held = sum(len(k) - referenced(k) for k in keys), sum(len(k) for k in keys)
        assert b.runs_refused == 0 and own < held / 3


def test_a_run_that_is_not_the_prompts_is_copied_and_counted_in_the_tree() -> None:
    """A run whose ids are not the prompt's where it says (its first word off by one, past the
    prompt's end) is copied: the tree matches as if it were given the prompt alone."""
    rng = random.Random(8)
    corpus = array("q", (rng.getrandbits(63) for _ in range(2_000)))
    tokens = corpus[0:600]
    for runs in ([(0, corpus, 1, 600)], [(0, corpus, 0, 700)]):
        tree = TenantTree(2)
        tree.insert(narrow_ids(tokens), 0, runs)
        assert tree.runs_refused == 1
        assert [referenced(node.key) for node in walk_nodes(tree)] == [0]
        assert tree.prefix_match(narrow_ids(corpus[0:700])) == (600, 0)


def walk_nodes(tree: TenantTree) -> list[_Node]:
    """Every node below the root."""
    found, stack = [], list(tree.root.children.values())
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(node.children.values())
    return found
