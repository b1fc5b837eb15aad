"""``swarm probe``: what serves a URL (engine, model, endpoints, metrics).

Place in the map (docs/architecture.md, "CLI"): calls ``clients.probe``; the target flags are the
run's (``cli/flags.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from swarm.cli.app import app
from swarm.cli.flags import Given, takes
from swarm.errors import InputError

if TYPE_CHECKING:
    from swarm.clients.probe import ProbeResult


@app.command()
@takes("probe")
def probe(
    url: Annotated[str, typer.Argument(help="base URL of the server, e.g. http://127.0.0.1:30000")],
    *,
    given: Given,
) -> None:
    """Identify the engine at URL, its model, and whether it reports cached tokens."""
    import asyncio
    import json

    from swarm.cli.sending import write_or_print
    from swarm.clients.probe import probe as run_probe

    engines = given.get("engine", [])
    if len(engines) > 1:
        raise InputError(f"swarm probe looks at one server: --engine given {len(engines)} times")
    result = asyncio.run(
        run_probe(
            url, engine=engines[0] if engines else None, model=given.get("model"),
            api_key_env=given.get("api_key_env"), api_key_file=given.get("api_key_file"),
        )
    )  # fmt: skip
    if given.get("json_out"):
        write_or_print(json.dumps(result.as_dict(), indent=2), given.get("output"))
        return
    _print(result, given.get("output"))


def _print(result: ProbeResult, output: str | None) -> None:
    from rich.table import Table

    from swarm.cli.sending import report_console, save_report
    from swarm.engines.registry import ENGINES

    console = report_console(output)
    table = Table(title=f"swarm probe {result.url}", show_header=False)
    engine_text = ENGINES[result.engine].title if result.engine else "unknown"
    if result.emulator:
        engine_text += " (swarm emulator)"
    table.add_row("engine", engine_text)
    table.add_row("model", result.model or "?")
    table.add_row("version", result.server_version or "?")
    table.add_row("metrics", result.metrics_path or "none found")
    if result.block_tokens is not None:
        table.add_row("KV block size", f"{result.block_tokens} tokens (cached tokens come in multiples of it)")
    cached = "unknown"
    if result.cache_reported is True:
        cached = f"yes ({result.second_cached_tokens} of {result.second_prompt_tokens} prompt tokens cached on the second request)"
    elif result.cache_reported is False:
        cached = "NO"
    table.add_row("cached tokens reported", cached)
    if result.first_ttft_ms is not None and result.second_ttft_ms is not None:
        table.add_row("TTFT cold / shared prefix", f"{result.first_ttft_ms:.0f} ms / {result.second_ttft_ms:.0f} ms")
    console.print(table)
    for line in result.request_errors:
        console.print(f"[red]request failed:[/red] {line}")
    for line in result.advice:
        console.print(f"[yellow]advice:[/yellow] {line}")
    save_report(console, output)
