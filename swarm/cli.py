"""The ``swarm`` command line: each command builds a spec and calls the library.

Place in the map (DESIGN.md): the face of the tool. Only this module knows typer and rich's
live display. Heavy modules (aiohttp, pyarrow, ray) are imported inside the commands, so
``swarm --help`` answers at once. Bad input (an ``InputError``) is printed as one line on
stderr with exit code 2 and no traceback.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from swarm.errors import InputError

app = typer.Typer(
    name="swarm",
    help="Agent-swarm load generator for LLM serving engines (SGLang, TensorRT-LLM, vLLM, llama.cpp).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.command()
def emulate(
    engine: Annotated[str, typer.Option(help="engine to emulate: sglang or trtllm")] = "sglang",
    host: Annotated[str, typer.Option(help="address to bind; loopback unless told otherwise")] = "127.0.0.1",
    port: Annotated[
        int | None, typer.Option(help="port (default: the engine's own; 0 picks a free one)")
    ] = None,
    model: Annotated[str, typer.Option(help="model name to serve")] = "swarm-emulator",
    timing: Annotated[
        str, typer.Option(help="batch (step-time model), fixed (per-request delays) or zero")
    ] = "batch",
    step_base_ms: Annotated[float, typer.Option(help="batch: fixed cost of one step, ms")] = 4.0,
    prefill_ms_per_token: Annotated[
        float, typer.Option(help="batch: cost per uncached prompt token, ms")
    ] = 0.02,
    decode_ms_per_seq: Annotated[
        float, typer.Option(help="batch: cost per running sequence per step, ms")
    ] = 0.05,
    first_token_ms: Annotated[float, typer.Option(help="fixed: time to first token, ms")] = 50.0,
    token_ms: Annotated[float, typer.Option(help="fixed: time between tokens, ms")] = 10.0,
    kv_capacity_tokens: Annotated[int, typer.Option(help="KV tokens for running sequences")] = 400_000,
    cache_tokens: Annotated[
        int, typer.Option(help="prefix-cache capacity in tokens; 0 = unbounded")
    ] = 400_000,
    block_tokens: Annotated[int, typer.Option(help="trtllm: KV block size in tokens")] = 32,
    no_cache_report: Annotated[
        bool,
        typer.Option(
            "--no-cache-report", help="sglang: do not report cached tokens (as without --enable-cache-report)"
        ),
    ] = False,
) -> None:
    """Serve an emulated engine (SGLang or TensorRT-LLM API) on loopback until Ctrl-C."""
    import asyncio
    import signal

    from pydantic import ValidationError

    from swarm.emulator.config import EmulatorConfig
    from swarm.emulator.server import RunningEmulator, serve_forever

    if engine not in ("sglang", "trtllm"):
        raise InputError(f"unknown engine profile {engine!r} for the emulator (choose sglang or trtllm)")
    try:
        config = EmulatorConfig(
            engine=engine,  # type: ignore[arg-type]
            host=host,
            port=(30000 if engine == "sglang" else 8000) if port is None else port,
            model=model,
            timing=timing,  # type: ignore[arg-type]
            step_base_ms=step_base_ms,
            prefill_ms_per_token=prefill_ms_per_token,
            decode_ms_per_seq=decode_ms_per_seq,
            first_token_ms=first_token_ms,
            token_ms=token_ms,
            kv_capacity_tokens=kv_capacity_tokens,
            cache_capacity_tokens=cache_tokens or None,
            block_tokens=block_tokens,
            cache_report=not no_cache_report,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InputError(f"--{field.replace('_', '-')}: {err['msg']}") from None

    def ready(server: RunningEmulator) -> None:
        print(
            f"swarm emulator ({engine} profile, {timing} timing) listening on {server.url}",
            flush=True,
        )

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await serve_forever(config, ready)
        except asyncio.CancelledError:
            pass

    asyncio.run(main())


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
    json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Identify the engine at URL, its model, and whether it reports cached tokens."""
    import asyncio
    import json

    from swarm.engines.probe import probe as run_probe

    result = asyncio.run(run_probe(url, engine=engine, model=model, api_key_env=api_key_env))
    if json_out:
        print(json.dumps(result.as_dict(), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from swarm.engines.profiles import PROFILES

    console = Console()
    table = Table(title=f"swarm probe {result.url}", show_header=False)
    engine_text = PROFILES[result.engine].title if result.engine else "unknown"
    if result.emulator:
        engine_text += " (swarm emulator)"
    table.add_row("engine", engine_text)
    table.add_row("model", result.model or "?")
    table.add_row("version", result.server_version or "?")
    table.add_row("metrics", result.metrics_path or "none found")
    cached = "unknown"
    if result.cache_reported is True:
        cached = f"yes ({result.second_cached_tokens} of {result.second_prompt_tokens} prompt tokens cached on the second request)"
    elif result.cache_reported is False:
        cached = "NO"
    table.add_row("cached tokens reported", cached)
    console.print(table)
    for line in result.request_errors:
        console.print(f"[red]request failed:[/red] {line}")
    for line in result.advice:
        console.print(f"[yellow]advice:[/yellow] {line}")


def main() -> None:
    """Console entry point: runs the app, turning bad input into one line and exit code 2."""
    try:
        app()
    except InputError as exc:
        print(f"swarm: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("swarm: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
