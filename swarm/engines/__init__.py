"""Engine clients: dialects, engine profiles, SSE parsing, probing.

Place in the map (docs/architecture.md): the EngineClient seam and the engines' quirks. Depends only on
``swarm.record``, ``swarm.errors`` and ``swarm.redact``.
"""
