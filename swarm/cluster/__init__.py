"""The cluster layer: the same run over Ray actors, from a laptop to a cluster.

Place in the map (docs/architecture.md, "Ray"): the only part that imports Ray (inside functions).
Workers are async Ray actors, each running its share of a request source's sessions (agents,
or replayed sessions) through the same runtime loop as the in-process executor
(``runtime.loop.drive``: one Dispatcher, one connection pool); the driver measures clock
offsets, agrees a start instant, pulls record batches and stats from the workers, holds the
circuit breaker and writes the run.
"""
