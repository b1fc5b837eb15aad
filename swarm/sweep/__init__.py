"""``swarm sweep``: load ladders over every target, resumable, with curves and verdicts.

Place in the map (docs/architecture.md, "Sweeps"): above ``launch``; see ``runner``.
"""
