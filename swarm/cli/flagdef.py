"""One command-line flag as the generated table holds it (``cli/flagdefs.py``).

Place in the map (docs/architecture.md, "CLI"): plain data, written by ``cli/flagspec.py`` from a
settings model's field and read by ``cli/flags.py`` to build each command's typer parameters.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FlagDef:
    #: the flag as written (``--max-in-flight``), then its short form if any
    decls: tuple[str, ...]
    #: ``str``, ``int``, ``float``, ``bool``, ``path`` or ``list[str]`` (a flag given several times)
    kind: str
    help: str
    group: str
    #: the model's default as ``--help`` shows it; None: none to show
    default_text: str | None = None
    #: the values a ``Literal`` field allows
    choices: tuple[str, ...] = ()
    #: a parser (``compose.PARSERS``) or composer (``compose.COMPOSERS``) the value goes through
    parse: str | None = None
    #: a true/false flag also has ``--no-NAME``; without it, a plain switch that defaults to off
    negatable: bool = True
    metavar: str | None = None
    hidden: bool = False
    #: the models and fields it was generated from (``RunSpec.timeouts.first_token_s``)
    origin: tuple[str, ...] = ()
