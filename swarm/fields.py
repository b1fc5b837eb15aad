"""Field declarations that several settings models share, declared once.

Place in the map (docs/architecture.md, "Shared value types"): a field that means the same in
two models (the tokenizer a workload synthesises text with, a replay counts its prompts with
and the emulator counts what it is sent with) is one ``Annotated`` type here, so its flag,
default and help are the same wherever it appears.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from swarm.cliflag import flag

TokenizerPath = Annotated[
    str | None,
    Field(
        description="a local Hugging Face tokenizer.json of the model served: prompts and texts are "
        "counted in its tokens (default: whitespace words)",
        json_schema_extra=flag("--tokenizer", group="Targets", metavar="FILE"),
    ),
]

StartAt = Annotated[
    Literal["begin", "mid"] | None,
    Field(
        description="begin: every session from its first call; mid: each session from a sampled point "
        "of its lifetime (between start_ratios of its calls), its history in the prompt, after a "
        "warm-up call that re-sends it (one per thread the start cuts into; marked warmup, in no "
        "headline figure); topologies with beam groups start whole. A run spec: for every mix "
        "entry (none: each entry's own start_at, else begin); a replay: none is begin",
        json_schema_extra=flag("--start-at", group="Workload"),
    ),
]


def _ratios(value: tuple[float, float]) -> tuple[float, float]:
    low, high = value
    if not 0 <= low <= high < 1:
        raise ValueError(f"start_ratios {list(value)}: expected 0 <= low <= high < 1")
    return value


StartRatios = Annotated[
    tuple[float, float],
    AfterValidator(_ratios),
    Field(
        description="with start_at: mid, where in its calls a session starts: uniform between these "
        "shares (AIPerf's agentx scenario starts its trajectories between 0.25 and 0.75)",
    ),
]
#: the default of ``StartRatios``
START_RATIOS_DEFAULT = (0.25, 0.75)
