"""``swarm emulate``: the built-in engine emulator as a server.

Place in the map (docs/architecture.md, "CLI"): flags to an EmulatorConfig, then ``swarm.emulator``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from swarm.cli.app import app
from swarm.errors import InputError


@app.command()
def emulate(
    engine: Annotated[str, typer.Option(help="engine to emulate: sglang, trtllm or vllm")] = "sglang",
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
    block_tokens: Annotated[
        int | None, typer.Option(help="trtllm, vllm: KV block size in tokens (default: trtllm 32, vllm 128)")
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="a Hugging Face tokenizer.json: count prompts in its tokens, as the real server "
            "(completions exactly; chat without a template); default: whitespace words"
        ),
    ] = None,
    no_cache_report: Annotated[
        bool,
        typer.Option(
            "--no-cache-report", help="sglang: do not report cached tokens (as without --enable-cache-report)"
        ),
    ] = False,
    stamp_chunks: Annotated[
        bool,
        typer.Option(
            help="stamp each streamed content event with its send time (monotonic ns; for benchmarks)"
        ),
    ] = False,
    exit_with_parent: Annotated[
        bool,
        typer.Option(
            "--exit-with-parent",
            hidden=True,
            help="stop when the process that started this one is gone (swarm run's embedded emulators)",
        ),
    ] = False,
    faults: Annotated[
        str | None,
        typer.Option(
            help="inject faults, seeded: KIND=RATE pairs and parameters, e.g. "
            "'mixed=0.05,stall_s=2,seed=7' or 'http_500=0.01,cut=0.02,refuse=0.01' "
            "(kinds: refuse http_500 http_503 http_429 slow_headers stall_first stall_mid cut "
            "malformed no_done oversized; docs/reliability.md)"
        ),
    ] = None,
) -> None:
    """Serve an emulated engine (SGLang, TensorRT-LLM or vLLM API) on loopback until Ctrl-C."""
    import asyncio
    import os
    import signal

    from pydantic import ValidationError

    from swarm.emulator.config import EmulatorConfig
    from swarm.emulator.faults import FaultSpec
    from swarm.emulator.http_server import RunningEmulator, serve_forever

    if engine not in ("sglang", "trtllm", "vllm"):
        raise InputError(
            f"unknown engine profile {engine!r} for the emulator (choose sglang, trtllm or vllm)"
        )
    if tokenizer is not None and not os.path.isfile(tokenizer):
        raise InputError(f"--tokenizer {tokenizer}: no such file")
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
            tokenizer=tokenizer,
            cache_report=not no_cache_report,
            stamp_chunks=stamp_chunks,
            faults=FaultSpec.parse(faults) if faults else None,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InputError(f"--{field.replace('_', '-')}: {err['msg']}") from None

    def ready(server: RunningEmulator) -> None:
        injected = " with injected faults" if config.faults is not None and config.faults.active else ""
        print(
            f"swarm emulator ({engine} profile, {timing} timing{injected}) listening on {server.url}",
            flush=True,
        )

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        parent = os.getppid()

        async def watch_parent() -> None:  # a killed parent (kill -9) cannot stop us itself
            while os.getppid() == parent:
                await asyncio.sleep(0.5)
            task.cancel()

        watcher = loop.create_task(watch_parent()) if exit_with_parent else None
        try:
            await serve_forever(config, ready)
        except asyncio.CancelledError:
            pass
        finally:
            if watcher is not None:
                watcher.cancel()

    asyncio.run(main())
