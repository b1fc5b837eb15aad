"""Flags that a spec does not take as they are written: parsed (``--arrival poisson:10``) or
composed from several (``--target`` with ``--engine`` and its companions, ``--profile`` with
``--topology``).

Place in the map (docs/architecture.md, "CLI"): called by ``flags.Given.apply`` when a command
builds its spec's data; each hook is named by a field's ``parse`` in its flag metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from swarm.cli.flagdef import FlagDef
from swarm.errors import InputError


def _arrival(text: str) -> Any:
    from swarm.workload.arrival import parse_arrival

    return parse_arrival(text).model_dump()


def _faults(text: str) -> Any:
    from swarm.emulator.faults import FaultSpec

    return FaultSpec.parse(text).model_dump()


def _zero_is_none(value: int) -> int | None:
    """``--cache-tokens 0``: unbounded (the field's None)."""
    return value or None


PARSERS: dict[str, Callable[[Any], Any]] = {"arrival": _arrival, "faults": _faults, "zero_is_none": _zero_is_none}


def parse_value(f: FlagDef, value: Any) -> Any:
    """A flag's value as its field takes it."""
    parser = PARSERS.get(f.parse or "")
    return parser(value) if parser is not None else value


def parse_targets(
    targets: list[str], engines: list[str], dialect: str | None, model: str | None,
    api_key_env: str | None, api_key_file: str | None, replicas_down: str | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """``--target NAME=URL`` (repeated) with ``--engine`` (one for all, or one per target) and
    the target flags every target shares, as ``TargetSpec`` fields."""
    if engines and len(engines) not in (1, len(targets)):
        raise InputError(
            f"--engine given {len(engines)} times for {len(targets)} targets: give one, or one per target"
        )
    if engines and not targets:
        raise InputError(
            "--engine needs --target NAME=URL (with no target, swarm runs its emulator in both profiles)"
        )
    out = []
    for i, t in enumerate(targets):
        name, sep, url = t.partition("=")
        if not sep or not name or not url:
            raise InputError(f"--target {t!r}: expected NAME=URL, e.g. sglang=http://127.0.0.1:30000")
        engine = engines[i if len(engines) > 1 else 0] if engines else None
        out.append(
            {
                "name": name, "url": url, "engine": engine, "dialect": dialect, "model": model,
                "api_key_env": api_key_env, "api_key_file": api_key_file,
            } | ({"replicas_down": replicas_down} if replicas_down else {})
        )  # fmt: skip
    return out


def place_replicas(replicas: list[str], targets: list[dict[str, Any]]) -> None:
    """``--replica [NAME=]URL`` (repeated) into its target's ``replicas``: ``NAME=`` names the
    target; without it the replica is the only target's (an error when there are several)."""
    names = [str(t.get("name")) for t in targets]
    for given in replicas:
        name, sep, url = given.partition("=")
        if sep and name in names and url:
            owner = names.index(name)
        elif len(targets) == 1:
            owner, url = 0, given
        elif not targets:
            raise InputError("--replica needs --target NAME=URL (the router the replicas are behind)")
        else:
            raise InputError(
                f"--replica {given!r}: {len(targets)} targets; name the one it is behind: --replica NAME=URL "
                f"(targets: {', '.join(names)})"
            )
        listed = targets[owner].setdefault("replicas", [])
        listed.append(url)


#: the target flags every target shares
_SHARED = ("dialect", "model", "api_key_env", "api_key_file", "replicas_down")


def _targets(given: Mapping[str, Any], data: dict[str, Any]) -> None:
    """The given ``--target`` flags replace the spec's targets; without them, ``--engine`` (one
    for all, or one per target) and the shared target flags set the spec's targets (with none
    at all, ``--engine`` is an error: the emulator runs in both profiles)."""
    engines = given.get("engine", [])
    if given.get("target"):
        data["targets"] = parse_targets(given["target"], engines, *(given.get(k) for k in _SHARED))
        place_replicas(given.get("replica", []), data["targets"])
        return
    targets = [dict(t) for t in data.get("targets") or [] if isinstance(t, dict)]
    if engines and not targets:
        raise InputError(
            "--engine needs --target NAME=URL (with no target, swarm runs its emulator in both profiles)"
        )
    if engines and len(engines) not in (1, len(targets)):
        raise InputError(
            f"--engine given {len(engines)} times for {len(targets)} targets: give one, or one per target"
        )
    for i, t in enumerate(targets):
        if engines:
            t["engine"] = engines[i if len(engines) > 1 else 0]
        t.update({k: given[k] for k in _SHARED if k in given})
    if given.get("replica"):
        for t in targets:
            t["replicas"] = []  # the flags replace the spec's lists
        place_replicas(given["replica"], targets)
    if targets:
        data["targets"] = targets


def _mix(given: Mapping[str, Any], data: dict[str, Any]) -> None:
    """``--profile`` and ``--topology`` set the one mix entry (a spec's mix of several is replaced);
    ``--profile`` alone runs that profile's own topologies."""
    workload = data.setdefault("workload", {})
    mix = list(workload.get("mix") or [{}])
    entry = dict(mix[0]) if len(mix) == 1 else {}
    if "profile" in given and "topology" not in given:
        entry.pop("topology", None)
    for key in ("profile", "topology"):
        if key in given:
            entry[key] = given[key]
    workload["mix"] = [entry]


#: by key, a composer that writes the given flags' values (by parameter name) into a spec's data
COMPOSERS: dict[str, Callable[[Mapping[str, Any], dict[str, Any]], None]] = {"targets": _targets, "mix": _mix}
