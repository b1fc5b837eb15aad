"""Field declarations that several settings models share, declared once.

Place in the map (docs/architecture.md, "Shared value types"): a field that means the same in
two models (the tokenizer a workload synthesises text with, a replay counts its prompts with
and the emulator counts what it is sent with) is one ``Annotated`` type here, so its flag,
default and help are the same wherever it appears.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from swarm.cliflag import flag

TokenizerPath = Annotated[
    str | None,
    Field(
        description="a local Hugging Face tokenizer.json of the model served: prompts and texts are "
        "counted in its tokens (default: whitespace words)",
        json_schema_extra=flag("--tokenizer", group="Targets", metavar="FILE"),
    ),
]
