"""Engine clients: dialects, engine profiles, SSE parsing, probing.

Place in the map (DESIGN.md): the EngineClient seam and the engines' quirks. Depends only on
``swarm.record`` and ``swarm.errors``.
"""
