"""Every flag is declared once: the models are the one source of each flag's name, type, default and
help; a flag shared by commands is the same flag in each; commands that send or report take the
same output flags; and every command that reads a spec refuses one with an unknown key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from swarm.cli import flagspec
from swarm.cli.flagdefs import COMMANDS, FLAGS
from swarm.cliflag import flag

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"

#: options a command declares itself because no other command has them (and no spec holds them)
OWN = {
    "emulate": {"--exit-with-parent"},
    "compare": {"--force", "--tie-within", "--across-clocks", "--record-error"},
    "fit": {"--name"},
    "realism": {"--against", "--candidate-target", "--read-agents", "--set"},
    "topologies": {"--topologies-dir"},
}
#: commands that send (a live view or progress lines), and those that report a result
SENDERS = ("run", "replay", "sweep")
REPORTERS = ("report", "compare", "probe", "realism", "fit")


def click_commands() -> dict[str, Any]:
    from typer.main import get_command

    from swarm.cli import app

    return dict(get_command(app).commands)  # type: ignore[attr-defined]


def described(param: Any) -> tuple[Any, ...]:
    """What a user sees of an option: its names, type, default, help and whether it repeats."""
    return (
        tuple(param.opts), tuple(param.secondary_opts), repr(param.type_descriptor.annotation), param.default,
        param.help, param.rich_help_panel,
        param.multiple, param.is_flag, param.show_default,
    )  # fmt: skip


def test_the_flag_table_is_what_the_models_generate() -> None:
    table = (ROOT / "swarm" / "cli" / "flagdefs.py").read_text()
    assert table == flagspec.render(flagspec.build()), (
        "swarm/cli/flagdefs.py is stale: run python -m swarm.cli.flagspec"
    )


def test_each_shared_flag_is_one_flag_in_every_command() -> None:
    seen: dict[str, dict[str, tuple[Any, ...]]] = {}
    for name, command in click_commands().items():
        for param in command.params:
            if not param.opts[0].startswith("--") or param.opts[0] == "--help":
                continue
            seen.setdefault(param.opts[0], {})[name] = described(param)
            table = {FLAGS[p].decls[0] for p in COMMANDS.get(name, {})}
            assert param.opts[0] in table | OWN.get(name, set()), (
                f"swarm {name} {param.opts[0]}: declared in the command, not generated from a model"
            )
    shared = {flag_: by for flag_, by in seen.items() if len(by) > 1}
    assert len(shared) >= 12  # --target, --engine, --json, --output, --format, ...
    for flag_, by in shared.items():
        variants = set(by.values())
        assert len(variants) == 1, f"{flag_} differs between commands: {by}"


def test_shared_names_mean_one_thing() -> None:
    """The names issue #25 found meaning two things: one meaning each now."""
    commands = click_commands()

    def opts(command: str) -> set[str]:
        return {o for p in commands[command].params for o in (*p.opts, *p.secondary_opts)}

    for command in ("run", "replay", "sweep"):
        assert "--target" in opts(command)  # a server, NAME=URL
    for command in ("export", "realism", "replay", "fit"):
        assert "--source-target" in opts(command) and ("--target" not in opts(command) or command == "replay")
    assert "--copies" in opts("replay") and "--copies" in opts("sweep") and "--sessions" not in opts("replay")
    assert FLAGS["target"].help.startswith("NAME=URL of a server")


def test_commands_that_send_or_report_take_json_and_output() -> None:
    commands = click_commands()
    for name in (*SENDERS, *REPORTERS, "export"):
        options = {o for p in commands[name].params for o in (*p.opts, *p.secondary_opts)}
        assert "--output" in options, name
        if name != "export":
            assert "--json" in options, name
        if name in SENDERS:
            assert "--no-progress" in options and "--executor" in options, name
    # one default executor, the model's, shown in every sender's help
    executor = {described(p) for n in SENDERS for p in commands[n].params if p.opts[0] == "--executor"}
    assert len(executor) == 1 and FLAGS["executor"].default_text == "ray"


def test_help_shows_each_default_from_its_model() -> None:
    from swarm.runtime.specs import RunSpec

    spec = RunSpec()
    assert FLAGS["max_in_flight"].default_text == str(spec.max_in_flight)
    assert FLAGS["first_token_timeout"].default_text == f"{spec.timeouts.first_token_s:g}"
    assert FLAGS["agents"].default_text == str(spec.workload.agents)
    help_text = subprocess.run(
        [sys.executable, "-m", "swarm", "run", "--help"], capture_output=True, text=True, env={"COLUMNS": "200"}
    ).stdout
    assert "[default: (120)]" in help_text and "--first-token-timeout" in help_text


def test_a_flag_declared_twice_differently_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generator's check is not vacuous: a second field naming --max-in-flight with another
    help is refused, naming both fields."""

    class Other(BaseModel):
        cap: int = Field(default=0, description="another cap", json_schema_extra=flag("--max-in-flight", group="Sending"))

    monkeypatch.setitem(flagspec.SOURCES, "other", (flagspec.Source(Other),))
    with pytest.raises(ValueError, match=r"--max-in-flight is declared twice, differently: SendSpec.max_in_flight and Other.cap"):
        flagspec.build()


def test_a_bad_flag_value_names_the_flag(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "swarm", "run", "--max-in-flight", "-1", "--executor", "inprocess"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == "swarm: error: --max-in-flight: Input should be greater than or equal to 0"


UNKNOWN_KEY_SPEC = """\
agents: 5
mix: [{profile: math_reasoner, topology: chain}]
"""


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--spec", "{spec}", "--executor", "inprocess"],
        ["sweep", "--spec", "{spec}", "--executor", "inprocess"],
        ["replay", str(DATA / "mooncake_conversation_first300.jsonl"), "--spec", "{spec}"],
        ["fit", "{spec}", "-o", "{out}"],
        ["realism", "{spec}", "--against", str(DATA / "mooncake_conversation_first300.jsonl")],
    ],
    ids=["run", "sweep", "replay", "fit", "realism"],
)
def test_every_spec_reading_command_refuses_an_unknown_key(command: list[str], tmp_path: Path) -> None:
    """The keys at the top level instead of under workload: are not read as the default swarm."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(UNKNOWN_KEY_SPEC)
    argv = [a.format(spec=spec, out=tmp_path / "fitted.yaml") for a in command]
    out = subprocess.run([sys.executable, "-m", "swarm", *argv], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 2, out.stderr
    assert f"{spec}" in out.stderr and "agents: unknown key" in out.stderr and "mix: unknown key" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "fitted.yaml").exists()


def test_a_spec_with_sending_settings_under_workload_still_reads() -> None:
    """Spec files from before the sending settings left workload: read as they always did."""
    from swarm.errors import InputError
    from swarm.runtime.specs import RunSpec

    old = RunSpec.model_validate({"workload": {"agents": 3, "max_in_flight": 2, "retries": 1}})
    assert (old.max_in_flight, old.retries, old.workload.agents) == (2, 1, 3)
    with pytest.raises(InputError, match="max_in_flight is given twice"):
        RunSpec.model_validate({"max_in_flight": 1, "workload": {"max_in_flight": 2}})


def test_a_flag_overrides_a_spec_file_whatever_its_layout(tmp_path: Path) -> None:
    """A flag wins over the spec's value, also where an old spec has it under workload:; the
    target flags set a spec's targets when no --target is given."""
    from swarm.cli.flags import Given, validated
    from swarm.cli.sending import spec_data
    from swarm.runtime.specs import RunSpec

    spec = tmp_path / "old.yaml"
    spec.write_text(
        "workload: {agents: 3, max_in_flight: 8}\ntargets: [{name: a, url: 'http://127.0.0.1:1'}]\n"
    )
    given = Given("run", {"spec": spec, "max_in_flight": 16, "model": "m", "engine": ["vllm"]})
    data, source = spec_data(given)
    run = validated(RunSpec, data, source, given)
    assert (run.max_in_flight, run.workload.agents) == (16, 3)
    assert (run.targets[0].model, run.targets[0].engine, run.targets[0].url) == ("m", "vllm", "http://127.0.0.1:1")


def test_a_bad_value_in_a_spec_file_names_the_file_and_the_field(tmp_path: Path) -> None:
    from swarm.cli.flags import Given, validated
    from swarm.cli.sending import spec_data
    from swarm.errors import InputError
    from swarm.runtime.specs import ReplaySpec

    spec = tmp_path / "r.yaml"
    spec.write_text("replay: {source: x.jsonl, window: abc}\n")
    given = Given("replay", {"spec": spec})
    data, source = spec_data(given)
    with pytest.raises(InputError, match=rf"{spec} \(with flags\): replay.window: .*'abc': expected START:END"):
        validated(ReplaySpec, data, source, given)
    given = Given("replay", {"window": "9:1"})
    with pytest.raises(InputError, match=r"^--window: .*'9:1'"):
        validated(ReplaySpec, spec_data(given)[0], "flags", given)


def test_sweep_bases_take_the_flags_of_their_kind() -> None:
    """--tokenizer has a place in a swarm and in a replay. With nothing given the base is the
    showdown (a window of each point, in process, the emulators' default cache); a profile or
    topology named (or a target) leaves the showdown for the plain defaults, all agents at once."""
    from swarm.cli.flags import Given
    from swarm.cli.sweep import launcher_of
    from swarm.sweep.spec import SHOWDOWN_DURATION_S

    _, base = launcher_of(Given("sweep", {"tokenizer": None}), "agents")
    mix = base.workload.mix  # type: ignore[attr-defined]
    assert [(e.profile, e.start_at) for e in mix] == [("tree_of_thought", None), ("claude_code", "mid")]
    assert base.duration_s == SHOWDOWN_DURATION_S and base.emulator_args == [] and base.executor == "inprocess"
    _, base = launcher_of(Given("sweep", {"topology": "chain", "tokenizer": None}), "agents")
    (entry,) = base.workload.mix  # type: ignore[attr-defined]
    assert (entry.profile, entry.topology) == ("math_reasoner", "chain") and base.duration_s is None
    assert base.workload.arrival.process == "all_at_once" and base.executor == "ray"  # type: ignore[attr-defined]
    tokenizer = str(DATA / "no-such-tokenizer.json")
    _, base = launcher_of(
        Given("sweep", {"replay": str(DATA / "mooncake_conversation_first300.jsonl"), "tokenizer": tokenizer}),
        "max_sessions",
    )
    assert base.replay.tokenizer == tokenizer  # type: ignore[attr-defined]
    assert base.emulator_args == [] and base.executor == "ray"
