"""A prefix tree's edge of shared runs and tokens of its own (``workload.edges.Pieces``): what
its cuts, growth and matches give is what the same tokens in one array give."""

from __future__ import annotations

import random
from array import array

import pytest

from swarm.workload.edges import Edge, Item, Pieces, edge_common, edge_cut, first_token, make_edge, referenced


def _tokens(edge: Edge) -> list[int]:
    if not isinstance(edge, Pieces):
        return list(edge)  # type: ignore[arg-type]
    out: list[int] = []
    for item in edge.items():
        out += item[0][item[1] : item[2]] if isinstance(item, tuple) else item
    return out


def _items(rng: random.Random, corpus: array, n: int) -> list[Item]:
    items: list[Item] = []
    for _ in range(n):
        if rng.random() < 0.5:
            a = rng.randrange(len(corpus) - 50)
            items.append((corpus, a, a + rng.randint(1, 50)))
        else:
            items.append(array("I", (rng.randrange(1 << 32) for _ in range(rng.randint(1, 9)))))
    return items


def test_cuts_growth_and_matches_of_an_edge_are_its_tokens() -> None:
    rng = random.Random(5)
    corpus = array("I", (rng.randrange(1 << 32) for _ in range(400)))
    for _ in range(60):
        items = _items(rng, corpus, rng.randint(2, 7))
        edge = make_edge(items)
        flat = _tokens(Pieces(items))
        assert isinstance(edge, Pieces) and _tokens(edge) == flat and len(edge) == len(flat)
        assert first_token(edge) == flat[0]
        assert referenced(edge) == sum(it[2] - it[1] for it in items if isinstance(it, tuple))
        for i in range(1, len(flat)):
            left, right = edge_cut(edge, i)
            assert _tokens(left) == flat[:i] and _tokens(right) == flat[i:]
            assert len(left) == i and len(right) == len(flat) - i
        tail_items = _items(rng, corpus, rng.randint(1, 3))
        tail = make_edge(tail_items)
        grown = Pieces(items)
        grown.grow(tail)
        assert _tokens(grown) == flat + _tokens(tail) and len(grown) == len(flat) + len(tail)
        whole = array("I", _tokens(grown))
        for _ in range(10):  # a prompt that follows the edge for a while, then parts
            at = rng.randrange(len(whole))
            prompt = array("I", [7, 7]) + whole[:at] + array("I", [rng.randrange(1 << 32)])
            parts = (k for k in range(at + 1) if k == len(whole) or prompt[2 + k] != whole[k])
            expected = next(parts, at)
            assert edge_common(grown, prompt, 2) == expected


def test_an_edges_own_pieces_are_one_array_that_grows_in_place() -> None:
    """Between shared runs, the tokens of its own are held in one array of the edge's (a piece
    each was an array of its own, 64 bytes more a piece), and a growth of its own tokens at
    its end lengthens its last piece."""
    corpus = array("I", range(1000, 1100))
    own = [array("I", [1, 2]), array("I", [3]), array("I", [4, 5])]
    edge = Pieces([own[0], (corpus, 0, 10), own[1], (corpus, 50, 60), own[2]])
    assert edge._own == array("I", [1, 2, 3, 4, 5])
    edge.grow(array("I", [6]))
    assert edge._own == array("I", [1, 2, 3, 4, 5, 6])
    assert len(edge._srcs) == 5 and _tokens(edge)[-3:] == [4, 5, 6]
    own_piece = edge.items()[0]
    assert isinstance(own_piece, array)
    own_piece.append(9)  # a piece read out is a copy: the edge is as it was
    assert _tokens(edge)[:3] == [1, 2, 1000]


def test_an_edge_refuses_own_tokens_of_another_typecode_before_it_changes() -> None:
    corpus = array("I", range(1000, 1100))
    edge = Pieces([array("I", [1, 2]), (corpus, 0, 10)])
    before = (_tokens(edge), len(edge))
    with pytest.raises(TypeError, match="typecodes"):
        edge.grow(make_edge([(corpus, 20, 30), array("i", [3])]))
    assert (_tokens(edge), len(edge)) == before
    empty_first = Pieces([array("I"), (corpus, 5, 10)])  # an empty piece is left out
    empty_first.grow(array("I", [7]))
    assert first_token(empty_first) == 1005 and len(empty_first) == 6
