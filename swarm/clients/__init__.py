"""Engine clients: dialects, engine profiles, transports, SSE parsing, probing.

Place in the map (docs/architecture.md, "Clients"): the EngineClient seam and the engines' quirks. Depends only on
``swarm.request``, ``swarm.record``, ``swarm.errors`` and ``swarm.clients.redact``.
"""
