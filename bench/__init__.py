"""swarm's benchmark harness: ``python -m bench [CASE ...] [--json]``.

Speed and memory targets live here, not in timed tests. Each case prints rows of
``{case, figure, unit, baseline, ratio, target, met, note}`` (``note``: by how much a
target is missed, and why where the bench can tell); ratios are measured in one run, since
this machine is shared and noisy and single times mean little.
"""
