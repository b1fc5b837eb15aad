"""Engine clients: dialects, engine profiles, transports, SSE parsing, probing.

Place in the map (docs/architecture.md, "Clients"): the EngineClient seam and the engines' quirks. Of swarm it imports only
the shared value types (``swarm.request``, ``swarm.record``, ``swarm.errors``, ``swarm.jsoncodec``);
outside it, aiohttp (https targets, the probe) and httptools (parsing HTTP/1.1 answers).
"""
