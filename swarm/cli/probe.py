"""``swarm probe``: what serves a URL (engine, model, endpoints, metrics).

Place in the map (docs/architecture.md, "CLI"): calls ``clients.probe``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from swarm.cli.app import app


@app.command()
def probe(
    url: Annotated[str, typer.Argument(help="base URL of the server, e.g. http://127.0.0.1:30000")],
    engine: Annotated[
        str | None, typer.Option(help="engine profile, if detection should be overridden")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="model name for the test requests (default: first served)")
    ] = None,
    api_key_env: Annotated[str | None, typer.Option(help="environment variable holding the API key")] = None,
    api_key_file: Annotated[str | None, typer.Option(help="file holding the API key (first line)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Identify the engine at URL, its model, and whether it reports cached tokens."""
    import asyncio
    import json

    from swarm.clients.probe import probe as run_probe

    result = asyncio.run(
        run_probe(url, engine=engine, model=model, api_key_env=api_key_env, api_key_file=api_key_file)
    )
    if json_out:
        print(json.dumps(result.as_dict(), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from swarm.engines.registry import ENGINES

    console = Console()
    table = Table(title=f"swarm probe {result.url}", show_header=False)
    engine_text = ENGINES[result.engine].title if result.engine else "unknown"
    if result.emulator:
        engine_text += " (swarm emulator)"
    table.add_row("engine", engine_text)
    table.add_row("model", result.model or "?")
    table.add_row("version", result.server_version or "?")
    table.add_row("metrics", result.metrics_path or "none found")
    if result.block_tokens is not None:
        table.add_row(
            "KV block size", f"{result.block_tokens} tokens (cached tokens come in multiples of it)"
        )
    cached = "unknown"
    if result.cache_reported is True:
        cached = f"yes ({result.second_cached_tokens} of {result.second_prompt_tokens} prompt tokens cached on the second request)"
    elif result.cache_reported is False:
        cached = "NO"
    table.add_row("cached tokens reported", cached)
    if result.first_ttft_ms is not None and result.second_ttft_ms is not None:
        table.add_row(
            "TTFT cold / shared prefix", f"{result.first_ttft_ms:.0f} ms / {result.second_ttft_ms:.0f} ms"
        )
    console.print(table)
    for line in result.request_errors:
        console.print(f"[red]request failed:[/red] {line}")
    for line in result.advice:
        console.print(f"[yellow]advice:[/yellow] {line}")
