"""The emulator's settings from flags: what ``swarm emulate`` serves and what ``swarm simulate``
models, built one way.

Place in the map (docs/architecture.md, "CLI"): command support. ``emulator_config`` turns the
emulate flags given (``--engine``, a ``--calibration`` file under the flags, ``--tokenizer``
checked) into an ``EmulatorConfig``; ``twin_configs`` does it for each engine a simulation
names, from the same ``--emulator-arg`` list ``swarm run`` hands its embedded emulators.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from swarm.cli.flags import Given, parse_flags, validated
from swarm.errors import InputError

if TYPE_CHECKING:
    from swarm.emulator.config import EmulatorConfig
    from swarm.runtime.specs import SendSpec
    from swarm.sim.spec import SimulationSpec


def emulator_config(given: Given, source: str = "swarm emulate") -> EmulatorConfig:
    """The settings the emulate flags in ``given`` say: one engine, a calibration file's
    settings under the flags given, a tokenizer that exists."""
    from swarm.emulator.config import EmulatorConfig

    engines = given.get("engine", [])
    if len(engines) > 1:
        raise InputError(f"{source} serves one engine: --engine given {len(engines)} times")
    data = given.apply({})
    if engines:
        data["engine"] = engines[0]
    if (calibration := given.get("calibration")) is not None:
        from swarm.engines.calibration import load_calibration

        data = {**load_calibration(calibration, data.get("engine")).settings(), **data}
    if (tokenizer := data.get("tokenizer")) is not None and not os.path.isfile(tokenizer):
        raise InputError(f"--tokenizer {tokenizer}: no such file")
    return validated(EmulatorConfig, data, source, given)


def twin_configs(engines: Sequence[str], emulator_args: Sequence[str]) -> list[EmulatorConfig]:
    """Per engine, the twin ``swarm run``'s embedded emulator of it would serve: the engine, the
    arguments every embedded emulator of it gets (``runtime.targets.EMBEDDED_ARGS``), then
    ``emulator_args`` (``--emulator-arg``: any ``swarm emulate`` flag, ``--calibration`` too)."""

    if len(set(engines)) < len(engines):
        raise InputError(f"--engine {' '.join(engines)}: one twin per engine")
    out = []
    for engine in engines:
        given = _twin_flags(engine, emulator_args)
        if int(given.get("replicas") or 1) > 1:
            raise InputError("a simulated twin's replicas are --fleet N, not --emulator-arg=--replicas")
        if served := given.given_of(HTTP_ONLY):
            raise InputError(
                f"--emulator-arg {', '.join(served)}: acts in the emulator's HTTP server, which a simulation "
                "does not run (a simulated twin has no faults, stamps or replica header)"
            )
        out.append(emulator_config(given, f"the {engine} twin"))
    return out


def _twin_flags(engine: str, emulator_args: Sequence[str]) -> Given:
    from swarm.runtime.targets import EMBEDDED_ARGS

    args = ["--engine", engine, *EMBEDDED_ARGS.get(engine, ()), *emulator_args]
    return parse_flags("emulate", args, f"--emulator-arg (the {engine} twin)")


def twin_errors(engines: Sequence[str], emulator_args: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per engine whose twin is calibrated (``--emulator-arg=--calibration=FILE``) and held
    against its engine (``swarm compare ... --record-error``): what its calibration file
    recorded (``HeldAgainst``), which every simulated figure of the twin then carries."""
    from swarm.engines.calibration import load_calibration

    out: dict[str, dict[str, Any]] = {}
    for engine in engines:
        path = _twin_flags(engine, emulator_args).get("calibration")
        if path is None:
            continue
        held = load_calibration(path, engine).held_against
        out[engine] = {"calibration": str(path), **held.model_dump(mode="json")} if held is not None else {
            "calibration": str(path)
        }
    return out


#: emulate flags that act only in its HTTP server: refused for a simulated twin
HTTP_ONLY = ("faults", "stamp_chunks", "replica_name")


def check_simulate_flags(given: Given) -> bool:
    """Whether ``--simulate`` was given; refuses ``--fleet`` and ``--routing`` without it and a
    ``--target`` with it (a simulation models twins, not a server at a URL)."""
    simulate = bool(given.get("simulate"))
    if not simulate and (off := given.given_of(("fleet", "routing"))):
        raise InputError(f"{', '.join(off)} apply with --simulate only")
    if simulate and given.get("target"):
        raise InputError("--simulate models engine twins and cannot simulate a server at a URL (--target)")
    if simulate and (off := given.given_of(_real_sending_only())):
        raise InputError(
            f"{', '.join(off)}: how a real run sends (its client, clock, Ray, scraping); a simulation has none of it"
        )
    return simulate


def _real_sending_only() -> list[str]:
    """The sending flags (``SendSpec``'s) that ``swarm simulate`` does not take: what only a
    run over HTTP has."""
    from swarm.cli.flagdefs import COMMANDS, FLAGS

    simulated = COMMANDS["simulate"]
    return [
        name for name, flag in FLAGS.items()
        if name not in simulated and name not in ("target", "executor")  # said apart (simulation_of)
        and any(o.startswith("SendSpec.") for o in flag.origin)
    ]  # fmt: skip


def simulation_of(given: Given, send: SendSpec, source: str) -> SimulationSpec:
    """``--simulate``'s twins: ``--engine`` (none: sglang and trtllm, as the embedded
    emulators) set up as the embedded emulators would be (``send``'s ``--emulator-arg``), with
    ``--fleet`` and ``--routing``; ``send`` runs in this process."""
    from swarm.runtime.targets import EMBEDDED_ENGINES
    from swarm.sim.spec import SimulationSpec

    if send.targets:
        raise InputError(f"{source}: targets: --simulate models engine twins and cannot simulate a server at a URL")
    if send.executor != "inprocess":
        raise InputError("--simulate runs in this process: --executor ray does not apply")
    engines = given.get("engine") or list(EMBEDDED_ENGINES)
    data = {k: given.get(k) for k in ("fleet", "routing") if k in given}
    return validated(
        SimulationSpec,
        {**data, "twins": twin_configs(engines, send.emulator_args), "twin_errors": twin_errors(engines, send.emulator_args)},
        source, given,
    )  # fmt: skip
