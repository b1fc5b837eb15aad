"""The flag table, generated from the settings models: which command takes which field, as which flag.

Place in the map (docs/architecture.md, "CLI"): the one place a command is bound to the models it
sets. ``SOURCES`` lists, per command, the models (and which of their flagged fields) it takes;
each field that carries ``cliflag.flag`` metadata becomes a flag whose name, type, default and
help are the field's. ``python -m swarm.cli.flagspec`` writes ``cli/flagdefs.py`` (plain data,
so ``swarm --help`` builds every command without loading pydantic); ``tests/test_cli_flags.py``
fails when that file is not what this module generates. A flag name is one field's, or several
fields' that declare it identically (one ``Annotated`` type in ``swarm/fields.py``): two
different declarations of one name are refused here.
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo, PydanticUndefined

from swarm.cli.flagdef import FlagDef
from swarm.cli.options import CalibrateOptions, EmulateOptions, OutputOptions, SimulateOption, SweepOptions
from swarm.emulator.config import EmulatorConfig
from swarm.replay.source_spec import ReplaySourceSpec, TraceSourceSpec
from swarm.runtime.specs import SendSpec, TargetSpec
from swarm.sim.spec import SimulationSpec
from swarm.sweep.spec import SweepSpec
from swarm.workload.workload import WorkloadSpec

TABLE = Path(__file__).with_name("flagdefs.py")


@dataclass(frozen=True)
class Source:
    """A model a command takes flags from: under ``prefix`` in the command's data (None: the
    command routes them itself), only the flags ``only`` names (None: all)."""

    model: type[BaseModel]
    prefix: tuple[str, ...] | None = ()
    only: tuple[str, ...] | None = None
    skip: tuple[str, ...] = ()
    #: a flag placed elsewhere than its field's own path (the shared ``--engine`` in emulate)
    bind: tuple[tuple[str, tuple[str, ...]], ...] = ()


_READING = ("format", "limit", "window", "sample", "sample_seed", "skip_bad_lines", "source_target")
_SEND = Source(SendSpec)
_WORKLOAD = Source(WorkloadSpec, ("workload",))
_REPLAY = Source(ReplaySourceSpec, ("replay",), skip=("source",))
_SENDERS_OUTPUT = Source(OutputOptions, None, ("spec", "output", "json_out", "progress"))
#: ``--simulate`` and the fleet it simulates (sweep, replay)
_SIMULATE = (Source(SimulateOption, None), Source(SimulationSpec, None, ("fleet", "routing")))
#: what of sending a simulation takes: its twins (``--engine``: one target each), its limits and
#: its output; no URL, client, timing clock, Ray or scraping
_SIMULATED_SENDING = (
    "engine", "max_in_flight", "duration", "max_requests", "repeat", "retries", "retry_backoff",
    "request_timeout", "max_error_rate", "error_window", "record_text", "flush_interval", "emulator_arg",
)

#: per command, the models it takes flags from, in the order ``--help`` lists them
SOURCES: dict[str, tuple[Source, ...]] = {
    "run": (_SEND, _WORKLOAD, _SENDERS_OUTPUT),
    "replay": (_SEND, _REPLAY, _SENDERS_OUTPUT, *_SIMULATE),
    "sweep": (
        Source(SweepOptions, None), _SEND, _WORKLOAD, _REPLAY, Source(SweepSpec, ("sweep",)), _SENDERS_OUTPUT,
        Source(OutputOptions, None, ("html", "slo")), *_SIMULATE,
    ),
    "simulate": (
        Source(SendSpec, (), _SIMULATED_SENDING), _WORKLOAD, Source(SimulationSpec, None, ("fleet", "routing")),
        _SENDERS_OUTPUT,
    ),
    "emulate": (
        Source(EmulatorConfig), Source(TargetSpec, None, ("engine",), bind=(("engine", ("engine",)),)),
        Source(EmulateOptions, None),
    ),
    "calibrate": (
        Source(TargetSpec, None, ("engine", "model", "api_key_env")), Source(CalibrateOptions, None),
        Source(OutputOptions, None, ("output",)),
    ),
    "probe": (
        Source(TargetSpec, None, ("engine", "model", "api_key_env", "api_key_file")),
        Source(OutputOptions, None, ("json_out", "output")),
    ),
    "report": (Source(OutputOptions, None, ("html", "json_out", "output", "slo")),),
    "compare": (Source(OutputOptions, None, ("json_out", "output", "slo")),),
    "export": (
        Source(TraceSourceSpec, None, ("format", "source_target")), Source(OutputOptions, None, ("output",)),
    ),
    "fit": (Source(TraceSourceSpec, (), _READING), Source(OutputOptions, None, ("output", "json_out"))),
    "realism": (Source(TraceSourceSpec, (), _READING), Source(OutputOptions, None, ("json_out", "html", "output"))),
}


def _meta(info: FieldInfo) -> dict[str, Any] | None:
    extra = info.json_schema_extra
    return extra.get("cli") if isinstance(extra, dict) else None  # type: ignore[return-value]


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _submodel(annotation: Any) -> tuple[type[BaseModel], bool] | None:
    """The model a field holds (and whether a list of them), if it holds one."""
    ann = _strip_optional(annotation)
    many = typing.get_origin(ann) is list
    if many:
        ann = typing.get_args(ann)[0]
    return (ann, many) if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def flagged_fields(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], FieldInfo, str]]:
    """(path, field, the model and field it is) for every flagged field of ``model``, nested
    models included (a list of models as ``*`` in the path)."""
    for name, info in model.model_fields.items():
        path = (*prefix, name)
        if _meta(info) is not None:
            owner = next(c for c in model.__mro__ if name in getattr(c, "__annotations__", {}))
            yield path, info, f"{owner.__name__}.{name}"
        sub = _submodel(info.annotation)
        if sub is not None:
            yield from flagged_fields(sub[0], (*path, "*") if sub[1] else path)


def param_name(flag_name: str) -> str:
    """The Python parameter of a flag: ``--max-in-flight`` -> ``max_in_flight`` (``--json``: ``json_out``)."""
    name = flag_name.removeprefix("--").replace("-", "_")
    return "json_out" if name == "json" else name


def _kind(info: FieldInfo, meta: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    if "cli_type" in meta:
        return meta["cli_type"], ()
    ann = _strip_optional(info.annotation)
    if typing.get_origin(ann) is Literal:
        return "str", tuple(str(a) for a in typing.get_args(ann))
    if typing.get_origin(ann) is list or meta.get("repeat"):
        return "list[str]", ()
    kinds = {str: "str", int: "int", float: "float", bool: "bool", Path: "path"}
    if ann not in kinds:
        raise TypeError(f"a flag for a field of type {ann!r}: give it a cli_type")
    return kinds[ann], ()


def _default_text(info: FieldInfo, kind: str) -> str | None:
    value = info.default
    if value is PydanticUndefined or value is None or kind == "list[str]":
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if isinstance(value, (int, str)) else None


def flag_def(info: FieldInfo, origin: str) -> FlagDef:
    meta = _meta(info)
    assert meta is not None
    kind, choices = _kind(info, meta)
    decls = (meta["name"], *([meta["short"]] if "short" in meta else []))
    return FlagDef(
        decls=decls,
        kind=kind,
        help=meta.get("help") or info.description or "",
        group=meta["group"],
        default_text=meta.get("default_text", _default_text(info, kind)),
        choices=choices,
        parse=meta.get("parse"),
        negatable=meta.get("negatable", True),
        metavar=meta.get("metavar"),
        hidden=meta.get("hidden", False),
        origin=(origin,),
    )


@dataclass
class Table:
    flags: dict[str, FlagDef] = field(default_factory=dict)
    commands: dict[str, dict[str, tuple[tuple[str, ...], ...]]] = field(default_factory=dict)
    #: per source, its flags and their paths; per command, the sources it takes, in order
    groups: dict[Source, dict[str, tuple[tuple[str, ...], ...]]] = field(default_factory=dict)
    uses: dict[str, list[Source]] = field(default_factory=dict)

    def add(self, command: str, param: str, flag: FlagDef, path: tuple[str, ...] | None) -> None:
        known = self.flags.get(param)
        if known is not None:
            same = {k: v for k, v in known.__dict__.items() if k != "origin"}
            if same != {k: v for k, v in flag.__dict__.items() if k != "origin"}:
                raise ValueError(
                    f"{flag.decls[0]} is declared twice, differently: {known.origin[0]} and {flag.origin[0]}; "
                    "one flag name is one field (share an Annotated type, swarm/fields.py)"
                )
            if flag.origin[0] not in known.origin:
                self.flags[param] = FlagDef(**{**known.__dict__, "origin": (*known.origin, *flag.origin)})
        else:
            self.flags[param] = flag
        paths = self.commands.setdefault(command, {}).setdefault(param, ())
        if path is not None and path not in paths:
            self.commands[command][param] = (*paths, path)


def build() -> Table:
    """The table of every command's flags."""
    table = Table()
    for command, sources in SOURCES.items():
        table.uses[command] = list(sources)
        for src in sources:
            group = table.groups.setdefault(src, {})
            for path, info, origin in flagged_fields(src.model):
                param = param_name(_meta(info)["name"])  # type: ignore[index]
                if (src.only is not None and param not in src.only) or ".".join(path) in src.skip:
                    continue
                where = None if src.prefix is None else (*src.prefix, *path)
                where = dict(src.bind).get(param, where)
                table.add(command, param, flag_def(info, origin), where)
                group[param] = (where,) if where is not None else ()
    return table


def _flag_text(f: FlagDef) -> str:
    """``FlagDef(...)`` with the fields that differ from their defaults."""
    blank = FlagDef(decls=(), kind="", help="", group="")
    given = [
        f"{k}={v!r}" for k, v in f.__dict__.items() if k in ("decls", "kind", "help", "group") or v != getattr(blank, k)
    ]
    return f"FlagDef({', '.join(given)})"


def render(table: Table) -> str:
    """``cli/flagdefs.py``'s text for ``table``."""
    lines = [
        '"""GENERATED by ``python -m swarm.cli.flagspec`` from the settings models: do not edit.',
        "",
        'Place in the map (docs/architecture.md, "CLI"): every flag of every command (``FLAGS``), and',
        "per command where each of its flags goes in its spec's data (``COMMANDS``; no path: the",
        "command routes it). ``tests/test_cli_flags.py`` checks it is what ``cli/flagspec.py`` makes.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from swarm.cli.flagdef import FlagDef",
        "",
        "FLAGS: dict[str, FlagDef] = {",
    ]
    for param, f in sorted(table.flags.items()):
        lines.append(f"    {param!r}: {_flag_text(f)},")
    lines += ["}", "", "# where each flag of a model goes in a command's spec (none: the command routes it)"]
    names = _group_names(table)
    for src, name in names.items():
        lines.append(f"{name}: dict[str, tuple[tuple[str, ...], ...]] = {{")
        lines += [f"    {p!r}: {paths!r}," for p, paths in table.groups[src].items()]
        lines.append("}")
    source = TraceSourceSpec.model_fields["source"].description
    lines += ["", "#: the help of a command's arguments that a model's field describes", f"ARGUMENTS = {{'source': {source!r}}}"]
    lines += ["", "COMMANDS: dict[str, dict[str, tuple[tuple[str, ...], ...]]] = {"]
    for command, sources in table.uses.items():
        parts = ["**" + names[src] for src in sources]
        merged: dict[str, tuple[tuple[str, ...], ...]] = {}
        for src in sources:
            merged.update(table.groups[src])
        # a flag two of its models place differently (--tokenizer in a sweep) goes to both
        parts += [f"{p!r}: {paths!r}" for p, paths in table.commands[command].items() if merged[p] != paths]
        lines.append(f"    {command!r}: {{{', '.join(parts)}}},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _group_names(table: Table) -> dict[Source, str]:
    """A constant's name for each source: its model's, numbered where a model is taken twice."""
    out: dict[Source, str] = {}
    for src in table.groups:
        base = "_" + "".join("_" + c if c.isupper() and i else c for i, c in enumerate(src.model.__name__)).upper()
        name, k = base, 2
        while name in out.values():
            name, k = f"{base}_{k}", k + 1
        out[src] = name
    return out


def main() -> int:
    text = render(build())
    if "--check" in sys.argv[1:]:
        return 0 if TABLE.read_text() == text else 1
    TABLE.write_text(text)
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
