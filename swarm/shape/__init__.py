"""Workload shape: what a trace or a swarm sends, as distributions; fitting profiles to them.

Place in the map (docs/architecture.md, "Shape"): ``table`` reads a trace, a run or a spec into
one per-request table; ``features`` computes the distributions that decide prefix-cache
behaviour; ``fit`` derives an agent profile and topologies from a table (``swarm fit``);
``realism`` compares two tables row by row (``swarm realism``).
"""
