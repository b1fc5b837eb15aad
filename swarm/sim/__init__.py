"""Simulation: a run's workload against engine twins on a discrete-event clock (``swarm simulate``).

Place in the map (docs/architecture.md, "Simulation").
"""
