"""How a setting is named on the command line: the metadata a pydantic field carries for its flag.

Place in the map (docs/architecture.md, "Shared value types"): every model that the CLI sets
(``RunSpec`` and ``ReplaySpec`` in ``runtime/specs.py``, ``WorkloadSpec``, ``TraceSource``,
``SweepSpec``, ``EmulatorConfig``, the CLI's own ``OutputOptions``) marks each field a flag sets
with ``json_schema_extra=flag("--name", group=...)``. The CLI's flag table is generated from
those fields (``python -m swarm.cli.flagspec``): the field is the one place a flag's name,
type, default, help and validation are declared. Standard library only.
"""

from __future__ import annotations

from typing import Any

#: the help panels flags are grouped in, in the order ``--help`` shows them
GROUPS = (
    "Workload",
    "Replay source",
    "Targets",
    "Sending",
    "Timeouts",
    "Executor",
    "Output",
    "Sweep",
    "Emulator",
    "Engine scheduler",
    "Simulation",
)


def flag(
    name: str,
    *,
    group: str,
    parse: str | None = None,
    cli_type: str | None = None,
    repeat: bool = False,
    negatable: bool = True,
    hidden: bool = False,
    metavar: str | None = None,
    short: str | None = None,
    help: str | None = None,
) -> dict[str, Any]:
    """The ``json_schema_extra`` of a field that ``name`` sets.

    ``parse``: the name of a parser the CLI applies to the flag's text before the field sees it
    (``arrival``: ``poisson:10``); ``cli_type``: the flag's type when it is not the field's
    (``str`` for a parsed flag); ``repeat``: the flag may be given several times (a list);
    ``negatable``: a true/false field also gets ``--no-NAME``; ``help``: the flag's help when it
    must say more than the field's description (how the text is written)."""
    if group not in GROUPS:
        raise ValueError(f"unknown flag group {group!r}")
    meta: dict[str, Any] = {"name": name, "group": group}
    for key, value in (
        ("parse", parse), ("cli_type", cli_type), ("metavar", metavar), ("short", short), ("help", help),
    ):  # fmt: skip
        if value is not None:
            meta[key] = value
    if repeat:
        meta["repeat"] = True
    if not negatable:
        meta["negatable"] = False
    if hidden:
        meta["hidden"] = True
    return {"cli": meta}
