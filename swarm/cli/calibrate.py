"""``swarm calibrate``: probe a server, fit its twin's step model, write the calibration file.

Place in the map (docs/architecture.md, "CLI"): thin over ``clients.calibrate`` (the probe and the
fit) and ``engines.calibration`` (the file); ``swarm emulate --calibration FILE`` serves the
twin (``load_calibration`` here, shared with ``cli/emulate.py`` through ``cli/compose.py``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from swarm.cli.app import app
from swarm.cli.flags import Given, takes
from swarm.errors import InputError


@app.command()
@takes("calibrate")
def calibrate(
    url: Annotated[str, typer.Argument(help="base URL of the server, e.g. http://127.0.0.1:30000")],
    *,
    given: Given,
) -> None:
    """Measure the server at URL (a few minutes at most) and write its engine twin's calibration."""
    import asyncio
    import sys
    from pathlib import Path

    import yaml

    from swarm.clients.calibrate import ProbePlan
    from swarm.clients.calibrate import calibrate as run_calibration
    from swarm.emulator.config import EmulatorConfig
    from swarm.engines.calibration import StepModel

    output = given.get("output")
    if not output:
        raise InputError("swarm calibrate needs -o FILE: where to write the calibration (.yaml)")
    engines = given.get("engine", [])
    if len(engines) > 1:
        raise InputError(f"swarm calibrate measures one server: --engine given {len(engines)} times")
    defaults = EmulatorConfig()
    fallback = StepModel(
        step_base_ms=defaults.step_base_ms, prefill_ms_per_token=defaults.prefill_ms_per_token,
        prefill_ms_per_cached_token=defaults.prefill_ms_per_cached_token, decode_ms_per_seq=defaults.decode_ms_per_seq,
        decode_ms_per_context_token=defaults.decode_ms_per_context_token,
    )  # fmt: skip
    result = asyncio.run(
        run_calibration(
            url, engine=engines[0] if engines else None, model=given.get("model"),
            api_key_env=given.get("api_key_env"), plan=ProbePlan(budget_s=given.get("budget") or 300.0, model_config=given.get("model_config")),
            fallback=fallback, on_progress=lambda text: print(text, file=sys.stderr, flush=True),
        )
    )  # fmt: skip
    Path(output).write_text(yaml.safe_dump(result.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    p = result.parameters
    print(
        f"{result.engine} twin written to {output}: step {p.step_base_ms:.3g} ms + {p.prefill_ms_per_token:.3g} ms "
        f"per prefill token + {p.decode_ms_per_seq:.3g} ms per sequence"
        + ("" if result.complete else " (probe ended early: see its notes)"),
        file=sys.stderr,
    )
    errors = result.standard_errors()
    if errors:
        print("standard errors: " + ", ".join(f"{k} ±{v:.2g}" for k, v in errors.items()), file=sys.stderr)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
