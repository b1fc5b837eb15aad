"""The runtime: one Dispatcher sends every request source's requests to a target.

Place in the map (docs/architecture.md, "Runtime"): request sources (agents, replays), the
Dispatcher, stop conditions, retries, the garbage-collection policy, live stats, the run frame
and the in-process executor.
"""
