"""The typer app every command module registers on, and its global options (``--version``).

Place in the map (docs/architecture.md, "CLI"): imported by each ``swarm.cli.<command>`` module.
"""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    name="swarm",
    help="Agent-swarm load generator for LLM serving engines (SGLang, TensorRT-LLM, vLLM, llama.cpp).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        from swarm import __version__

        print(f"swarm {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="print swarm's version and exit"
        ),
    ] = False,
) -> None:
    """Agent-swarm load generator for LLM serving engines (SGLang, TensorRT-LLM, vLLM, llama.cpp)."""
