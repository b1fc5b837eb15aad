"""Replay and interchange: recorded traffic in (swarm runs, Mooncake, Azure, BurstGPT), swarm
traffic out (Mooncake JSONL).

Place in the map (docs/architecture.md, "Replay"): ``cli -> replay -> workload, runner, trace``. Every source becomes
a ``ReplayPlan``; one runner sends a plan, timed or keeping its dependencies; the result is a
run folder like any other, whose manifest points at its source.
"""
