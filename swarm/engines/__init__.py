"""Engine clients: dialects, engine profiles, transports, SSE parsing, probing.

Place in the map (docs/architecture.md): the EngineClient seam and the engines' quirks. Depends only on
``swarm.request``, ``swarm.record``, ``swarm.errors`` and ``swarm.redact``.
"""
