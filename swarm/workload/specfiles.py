"""Reading spec files: safe YAML, validation errors that name the file and the field.

Place in the map (docs/architecture.md, "Workload"): under the Workload, Topology and agent profiles. YAML is parsed
with the safe loader only. A pydantic error becomes an ``InputError`` whose message names the
file and the dotted path of the field (``agents/coder.yaml: output_tokens.expand.median:
Input should be greater than 0``). Paths inside a spec are relative to the spec's folder and
may not escape it unless they are absolute.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from swarm.errors import InputError

M = TypeVar("M", bound=BaseModel)


#: libyaml's safe loader where PyYAML was built with it (8 times quicker on the Claude Code
#: topologies, 136 KB read at every start), else the Python one
_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: str | os.PathLike[str]) -> Any:
    """Parse a YAML file with the safe loader; errors name the file and line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{p}: cannot read: {exc}") from None
    try:
        return yaml.load(text, Loader=_FAST_LOADER)
    except yaml.YAMLError:
        pass  # said below by the Python loader, whose messages name what it found
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise InputError(f"{p}: invalid YAML at {where}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{p}: invalid YAML: {exc}") from None


def validation_problems(exc: ValidationError) -> list[tuple[tuple[str, ...], str]]:
    """(the field's path, the message) of each problem; an unknown key says so."""
    out = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"] if not str(p).startswith(("function-", "tagged-union")))
        out.append((loc, "unknown key" if err["type"] == "extra_forbidden" else err["msg"]))
    return out


def format_validation_error(source: str, exc: ValidationError) -> str:
    """One line per problem: ``source: field.path: message``."""
    return "\n".join(f"{source}: {'.'.join(loc) or '(top level)'}: {msg}" for loc, msg in validation_problems(exc))


def validate(
    model: type[M], data: Any, source: str, flag_of: Callable[[tuple[str, ...]], str | None] | None = None
) -> M:
    """``model`` built from ``data``, or an InputError naming ``source`` and each bad field; a
    field ``flag_of`` names (the flag that set it) is named by that instead."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = []
        for loc, msg in validation_problems(exc):
            flag = flag_of(loc) if flag_of is not None else None
            lines.append(f"{flag}: {msg}" if flag else f"{source}: {'.'.join(loc) or '(top level)'}: {msg}")
        raise InputError("\n".join(lines)) from None


def resolve_spec_path(base_dir: Path, value: str, source: str, field: str) -> Path:
    """A path from a spec: absolute as given, else inside ``base_dir`` (never outside it)."""
    p = Path(value)
    if p.is_absolute():
        return p
    resolved = (base_dir / p).resolve()
    if not resolved.is_relative_to(base_dir.resolve()):
        raise InputError(f"{source}: {field}: path {value!r} leaves the spec's folder; use an absolute path")
    return resolved


def load_run_spec_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A run spec file as data. A relative ``*.yaml`` profile or topology path in its workload
    mix that names a file beside the spec (inside its folder) is made that file's path, so a
    spec and the files it names move together; any other value (a built-in or catalog name, a
    path from the working folder) stays as written."""
    p = Path(path)
    data = load_yaml(p)
    if not isinstance(data, dict):
        raise InputError(f"{p}: expected a mapping at the top level")
    workload = data.get("workload")
    mix = workload.get("mix") if isinstance(workload, dict) else None
    if isinstance(mix, list):
        for entry in mix:
            if not isinstance(entry, dict):
                continue
            for key in ("profile", "topology"):
                value = entry.get(key)
                if (
                    isinstance(value, str)
                    and value.endswith((".yaml", ".yml"))
                    and not Path(value).is_absolute()
                ):
                    beside = (p.parent / value).resolve()
                    if beside.is_relative_to(p.parent.resolve()) and beside.is_file():
                        entry[key] = str(beside)
    return data
