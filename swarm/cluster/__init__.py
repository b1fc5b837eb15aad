"""The cluster layer: the same run over Ray actors, from a laptop to a cluster.

Place in the map (docs/architecture.md, "Ray"): the only part besides the CLI that knows Ray exists. Workers are
async Ray actors, each running many agents as asyncio tasks in one event loop with one aiohttp
session (the same runner as the in-process executor); the driver measures clock offsets,
agrees a start instant, pulls record batches and stats from the workers and writes the run.
"""
