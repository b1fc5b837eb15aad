"""Analysis: figures computed from traces on disk only.

Place in the map (docs/architecture.md, "Analysis"): reads ``runs/<id>/``; never imports engines, runner
or cluster, so a trace can be analysed on a laptop without Ray.
"""
