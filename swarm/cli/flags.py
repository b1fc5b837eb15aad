"""Commands thin over the settings models: each command's flags come from the generated table.

Place in the map (docs/architecture.md, "CLI"): ``flagdefs.FLAGS`` (generated from the models'
fields by ``cli/flagspec.py``) holds every flag once: its name, type, default, help and where it
goes in a spec. ``takes(command)`` gives a command function the flags ``flagdefs.COMMANDS``
lists for it, as typer parameters, and hands them to the function as one ``Given``: the flags
the user gave, which ``apply`` writes into a spec's data (a flag overrides a spec file) and
``validated`` turns into a model, naming the flag in any error. Standard library and typer
only: ``swarm --help`` builds every command from this table without loading pydantic.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from swarm.cli.flagdef import FlagDef
from swarm.cli.flagdefs import COMMANDS, FLAGS

if TYPE_CHECKING:
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")
F = TypeVar("F", bound=Callable[..., Any])

_TYPES: dict[str, Any] = {
    "str": str, "int": int, "float": float, "bool": bool, "path": Path, "list[str]": list[str],
}  # fmt: skip


def annotation(f: FlagDef) -> Any:
    """The typer annotation of flag ``f``: its type (optional) and its option."""
    base = _TYPES[f.kind]
    decls = f.decls
    if f.kind == "bool" and f.negatable:
        decls = (f"{f.decls[0]}/--no-{f.decls[0].removeprefix('--')}", *f.decls[1:])
    option = typer.Option(
        *decls,
        help=f.help,
        show_default=f.default_text if f.default_text is not None else False,
        rich_help_panel=f.group,
        metavar=f.metavar or ("|".join(f.choices) if f.choices else None),
        hidden=f.hidden,
    )
    if f.kind == "bool" and not f.negatable:
        return Annotated[bool, option]
    return Annotated[base | None, option]


def default(f: FlagDef) -> Any:
    """A flag's value when it is not given: None (the spec's, or the model's, default applies),
    False for a plain switch."""
    return False if f.kind == "bool" and not f.negatable else None


class Given:
    """The flags a command was given (not None; a plain switch only when on), by parameter name."""

    def __init__(self, command: str, values: dict[str, Any]) -> None:
        self.command = command
        #: where each of the command's flags goes in its spec's data (none: the command routes it)
        self.paths = COMMANDS[command]
        self.values = {
            k: v for k, v in values.items() if v is not None and not (v is False and not FLAGS[k].negatable)
        }

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str, fallback: Any = None) -> Any:
        return self.values.get(name, fallback)

    def flag(self, name: str) -> str:
        """How the user wrote flag ``name`` (``--max-in-flight``)."""
        return FLAGS[name].decls[0]

    def given_of(self, names: Iterable[str]) -> list[str]:
        """Those of ``names`` that were given, as flags (for an error saying they do not apply)."""
        return [self.flag(n) for n in names if n in self.values]

    def apply(self, data: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
        """``data`` (a spec's fields) with every given flag that has a place there written in
        (a flag overrides the spec file), but for paths starting with a part in ``skip``; the
        flags of a target (``--target`` and its companions) and of the mix (``--profile``,
        ``--topology``) are composed (``compose.COMPOSERS``)."""
        from swarm.cli.compose import COMPOSERS, parse_value

        out = _deep_copy(data)
        composite: set[str] = set()
        for name, value in self.values.items():
            f = FLAGS[name]
            for path in self.paths.get(name, ()):
                if path[0] in skip:
                    continue
                if f.parse in COMPOSERS or "*" in path:
                    composite.add(f.parse if f.parse in COMPOSERS else path[path.index("*") - 1])
                    continue
                _set(out, path, parse_value(f, value))
        for key in sorted(composite):
            COMPOSERS[key](self.values, out)
        return out

    def path_flags(self) -> dict[tuple[str, ...], str]:
        """Given flags by the spec path they set (for naming a flag in a validation error)."""
        out = {}
        for name in self.values:
            for path in self.paths.get(name, ()):
                out[path[: path.index("*")] if "*" in path else path] = self.flag(name)
        return out


def _deep_copy(data: dict[str, Any]) -> dict[str, Any]:
    import copy

    return copy.deepcopy(data)


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    holder = data
    for part in path[:-1]:
        nxt = holder.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            holder[part] = nxt
        holder = nxt
    holder[path[-1]] = value


def validated(model: type[M], data: Any, source: str, given: Given | None = None) -> M:
    """``model`` from ``data``, or an InputError with one line per problem, naming the flag when
    a given flag set the field, else ``source`` and the field's path (an unknown key of a spec
    file: ``spec.yaml: agnets: unknown key``)."""
    from swarm.workload.specfiles import validate

    flags = given.path_flags() if given is not None else {}

    def flag_of(loc: tuple[str, ...]) -> str | None:
        return next((flag for path, flag in flags.items() if loc[: len(path)] == path), None)

    return validate(model, data, source, flag_of)


def takes(command: str) -> Callable[[F], F]:
    """The flags ``flagdefs.COMMANDS[command]`` lists, appended to the decorated function's own
    parameters; the function receives them as ``given``."""

    def wrap(fn: F) -> F:
        resolved = typing.get_type_hints(fn, include_extras=True)
        own = [
            p.replace(annotation=resolved[p.name])
            for p in inspect.signature(fn).parameters.values()
            if p.name != "given"
        ]
        names = list(COMMANDS.get(command, ()))  # none yet: the table is being generated
        clash = {p.name for p in own} & set(names)
        if clash:
            raise AssertionError(f"swarm {command}: {sorted(clash)} are flags of the table, not its own")
        params = own + [
            inspect.Parameter(
                n, inspect.Parameter.KEYWORD_ONLY, default=default(FLAGS[n]), annotation=annotation(FLAGS[n])
            )
            for n in names
        ]
        hints = {p.name: p.annotation for p in params}

        @functools.wraps(fn)
        def command_fn(*args: Any, **kwargs: Any) -> Any:
            flag_values = {n: kwargs.pop(n) for n in names if n in kwargs}
            return fn(*args, **kwargs, given=Given(command, flag_values))

        command_fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command_fn.__annotations__ = {**hints, "return": None}
        del command_fn.__wrapped__  # typer reads the signature above, not the function's own
        return command_fn  # type: ignore[return-value]

    return wrap


def parse_flags(command: str, args: list[str], source: str) -> Given:
    """``args`` read as ``swarm COMMAND``'s flags of the table would be (``--emulator-arg``'s
    list as ``swarm emulate`` reads it); a flag it does not take, or a bad value, is an
    InputError naming ``source``."""
    import typer

    from swarm.errors import InputError

    holder: list[Given] = []
    parser = typer.Typer(add_completion=False)

    @parser.command()
    @takes(command)
    def _read(*, given: Given) -> None:
        holder.append(given)

    try:
        typer.main.get_command(parser).main(list(args), prog_name=f"swarm {command}", standalone_mode=False)
    except Exception as exc:  # click's usage errors (typer may carry its own copy of click)
        message = getattr(exc, "format_message", None)
        if not callable(message):
            raise
        raise InputError(f"{source}: {message()}") from None
    if not holder:
        raise InputError(f"{source}: {' '.join(args)} not read")
    return holder[0]
