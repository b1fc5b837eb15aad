"""The distributions that decide prefix-cache behaviour, computed from a ShapeTable.

Place in the map (docs/architecture.md, "Shape"): read by ``realism`` (to compare) and ``fit``
(to derive a profile). Each feature is a list of values, one per request, per session or per
parent, with its formula here:

- ``prompt_tokens``: per request, the prompt's length in tokens.
- ``growth_tokens``: per request with context parents (parents whose prompt its own extends),
  ``prompt - max(prompt of its context parents)``: what a turn adds to the context (the
  parent's output, tool results, observations, the next instruction).
- ``output_tokens``: per request, the completion's length (a trace's recorded one; a run's
  generated one; a spec's ``max_tokens``).
- ``reuse_per_request``: per request, ``ideal_cached / prompt``: the share of its prompt that an
  infinite prefix cache would hold (the longest prefix shared with any earlier prompt).
- ``reuse_per_session``: per session, ``sum(ideal_cached) / sum(prompt)`` over its requests.
  Both reuse rows read ``session_cached`` for ``ideal_cached`` when compared with a trace whose
  hash ids are numbered per session (``comparable_features``): such a trace cannot show a
  prefix shared across sessions, so both sides count each session alone.
- ``gap_s``: per request with parents, seconds from its last parent's end to its start (tool and
  think time; a trace's recorded wait).
- ``fan_out``: per request that some request waits for, how many requests wait for it.
- ``session_requests``: per session, its number of requests.
- ``session_alone_hit``: per session, ``sum(session_cached) / sum(prompt)``, where a request's
  ``session_cached`` is the longest prefix it shares with an earlier prompt of its own session:
  each session alone against an infinite cache, the per-trace optimal hit that agent studies
  publish (TensorRT-LLM's tech blog 27, Table 1). Held against published figures only, not a
  row of the trace comparison.
"""

from __future__ import annotations

from swarm.shape.table import ShapeTable

#: feature name -> (what it is, unit), in the order tables show them
FEATURES: dict[str, tuple[str, str]] = {
    "prompt_tokens": ("prompt length", "tokens"),
    "growth_tokens": ("growth per turn", "tokens"),
    "output_tokens": ("output length", "tokens"),
    "reuse_per_request": ("ideal reuse per request", "share"),
    "reuse_per_session": ("ideal reuse per session", "share"),
    "gap_s": ("gap after parents", "s"),
    "fan_out": ("fan-out", "requests"),
    "session_requests": ("session length", "requests"),
}
#: every feature a published figure may name: the compared ones and those only studies publish
FIGURE_FEATURES: dict[str, tuple[str, str]] = {
    **FEATURES,
    "session_alone_hit": ("optimal hit per session alone", "share"),
}


def comparable_features(
    candidate: ShapeTable, reference: ShapeTable
) -> tuple[dict[str, list[float]], dict[str, list[float]], str | None]:
    """Both sides' features, read alike: each session alone on both sides when either is a
    trace whose hash ids are numbered per session; and the note that says so (None when not)."""
    alone = candidate.ids_per_session or reference.ids_per_session
    note = comparable_features_note(candidate, reference)
    return features(candidate, sessions_alone=alone), features(reference, sessions_alone=alone), note


def comparable_features_note(candidate: ShapeTable, reference: ShapeTable) -> str | None:
    """What ``comparable_features`` says of how it read the two (None: as they are)."""
    if not (candidate.ids_per_session or reference.ids_per_session):
        return None
    which = reference.source if reference.ids_per_session else candidate.source
    return (
        f"{which} numbers its hash ids per session, so it cannot show prefixes shared across sessions: "
        "both reuse rows count each session alone, on both sides"
    )


def features(table: ShapeTable, *, sessions_alone: bool = False) -> dict[str, list[float]]:
    """Every feature of ``table`` (see the module docstring for the formulas); with
    ``sessions_alone`` both reuse rows count each session alone (``session_cached`` for
    ``ideal_cached``), as a trace whose hash ids are numbered per session must be read."""
    rows = table.rows
    out: dict[str, list[float]] = {name: [] for name in FIGURE_FEATURES}
    for r in rows:
        out["prompt_tokens"].append(float(r.prompt_tokens))
        out["output_tokens"].append(float(r.output_tokens))
        cached = r.session_cached_tokens if sessions_alone else r.ideal_cached_tokens
        if r.prompt_tokens > 0:
            out["reuse_per_request"].append(min(1.0, cached / r.prompt_tokens))
        if r.context_parents:
            out["growth_tokens"].append(
                float(r.prompt_tokens - max(rows[p].prompt_tokens for p in r.context_parents))
            )
        if r.parents and r.gap_s is not None:
            out["gap_s"].append(float(r.gap_s))
    for kids in table.children():
        if kids:
            out["fan_out"].append(float(len(kids)))
    for members in table.sessions().values():
        out["session_requests"].append(float(len(members)))
        prompt = sum(rows[i].prompt_tokens for i in members)
        if prompt > 0:
            cached = sum(
                rows[i].session_cached_tokens if sessions_alone else rows[i].ideal_cached_tokens
                for i in members
            )
            out["reuse_per_session"].append(min(1.0, cached / prompt))
            out["session_alone_hit"].append(
                min(1.0, sum(rows[i].session_cached_tokens for i in members) / prompt)
            )
    return out
