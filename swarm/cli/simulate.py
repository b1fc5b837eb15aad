"""``swarm simulate``: a run's workload against engine twins in virtual time.

Place in the map (docs/architecture.md, "CLI"): thin over ``RunSpec`` and ``SimulationSpec``
(their flags are the generated table's) and ``launch.execute_simulation``. The twins are named
with ``--engine`` (repeatable; none: sglang and trtllm, as ``swarm run`` with no target) and set
up with ``--emulator-arg`` (any ``swarm emulate`` flag, ``--calibration`` too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from swarm.cli.app import app
from swarm.cli.flags import Given, takes, validated
from swarm.cli.sending import send_with_view, spec_data, with_showdown
from swarm.cli.twins import twin_configs, twin_errors
from swarm.errors import InputError

if TYPE_CHECKING:
    from swarm.runtime.frame import RunResult


@app.command()
@takes("simulate")
def simulate(*, given: Given) -> None:
    """Simulate an agent swarm against engine twins (the emulator's engine models) on a virtual
    clock: the run's spec, sources and trace, no HTTP and no waiting. With nothing given: the
    emulated showdown against the sglang and trtllm twins, as swarm run sends it."""
    code = simulate_command(given)
    if code:
        raise typer.Exit(code)


def simulate_command(given: Given) -> int:
    """Build the specs, simulate with a live view, print the summary; returns the exit code."""
    from swarm.launch import execute_simulation
    from swarm.runtime.specs import RunSpec
    from swarm.runtime.targets import EMBEDDED_ENGINES
    from swarm.sim.executor import SimulatedExecutor
    from swarm.sim.spec import SimulationSpec

    data, source = spec_data(given, skip=("targets",))
    if data.get("targets"):
        raise InputError(
            f"{source}: targets: swarm simulate models engine twins and cannot simulate a server at a "
            "URL: name the twins with --engine, or measure the server with swarm run"
        )
    data.setdefault("executor", "inprocess")
    with_showdown(given, data)
    spec = validated(RunSpec, data, source, given)
    engines = given.get("engine") or list(EMBEDDED_ENGINES)
    simulation = validated(
        SimulationSpec,
        {
            **{k: given.get(k) for k in ("fleet", "routing") if k in given},
            "twins": twin_configs(engines, spec.emulator_args),
            "twin_errors": twin_errors(engines, spec.emulator_args),
        },
        "swarm simulate", given,
    )  # fmt: skip
    executor = SimulatedExecutor(simulation)

    def closing(result: RunResult, console: Console) -> None:
        for t in result.manifest.targets:
            if (why := t.shortfall()) is not None:
                console.print(f"[dim]{t.name}:[/] {why}", highlight=False, soft_wrap=True)
        for account in executor.accounts:
            console.print(
                f"{account.target}: {account.simulated_s:,.1f} s simulated in {account.wall_s:,.1f} s "
                f"({account.speedup:,.0f}x real time, {account.events:,} clock events)",
                highlight=False,
            )
        console.print(
            "[dim]simulated in virtual time against engine twins: a model's figures, not measurements[/dim]"
        )
        console.print(f"trace: {result.run_dir}  (status: {result.manifest.status.value})")

    def accounts(result: RunResult) -> dict[str, Any]:
        return {"simulation": [vars(a) | {"speedup": a.speedup} for a in executor.accounts]}

    return send_with_view(
        lambda on_start: execute_simulation(spec, simulation, on_target_start=on_start, source=source, executor=executor),
        sessions=spec.workload.agents, given=given, json_extra=accounts, closing=closing,
    )  # fmt: skip
