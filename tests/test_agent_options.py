"""What agent frameworks really send (profile options): reasoning not carried into later
prompts, context compaction, and sub-agents with a system prompt of their own. Each is sent to
the emulator with an unbounded cache, one request in flight: what the engine reuses equals the
ideal, request for request, and the ideal counts what the option changes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sending import sent_to_unbounded as sent

from swarm.emulator.http_server import EmulatorThread
from swarm.errors import InputError
from swarm.record import RequestRecord
from swarm.shape.table import table_from_spec
from swarm.workload import prompts
from swarm.workload.agent_profile import load_profile
from swarm.workload.arrival import ArrivalSpec
from swarm.workload.catalog import Catalog
from swarm.workload.prompts import compose_messages, decide_compaction, synthetic_turn
from swarm.workload.workload import MixEntry, Workload, WorkloadSpec

BASE = """
name: {name}
system_prompt: {{style: prose, tokens: 120}}
task_tokens: {{dist: constant, value: 30}}
instruction_tokens: {{dist: constant, value: 6}}
output_tokens:
  default: {{dist: constant, value: 40}}
think_time_s: {{dist: constant, value: 0}}
tool_time_s: {{dist: constant, value: 0.001}}
tool_result_tokens: {{dist: constant, value: 50}}
"""

OPTIONS = {
    "plain": "",
    "reasoning_none": "reasoning: {share: 0.75, carried: none}\n",
    "reasoning_last": "reasoning: {share: 0.75, carried: last}\n",
    "compaction": "compaction: {threshold_tokens: 400, summary_tokens: {dist: constant, value: 40}}\n",
    "subagents": "subagent_system_prompt: {style: prose, tokens: 90}\n",
    "compaction_reasoning": "compaction: {threshold_tokens: 400, summary_tokens: {dist: constant, value: 40}}\n"
    "reasoning: {share: 0.75, carried: last}\n",
}

# a main thread of three tool calls that spawns a sub-agent of two calls, then answers
SPAWNING = """
name: spawning
graph:
  nodes:
    - {id: a0, role: tool_call, tool_after: true}
    - {id: a1, role: tool_call, tool_after: true}
    - {id: s0, role: tool_call, tool_after: true, spawn: true}
    - {id: s1, role: answer}
    - {id: a2, role: answer}
  links:
    - {source: a0, target: a1}
    - {source: a1, target: s0, kind: after}
    - {source: s0, target: s1}
    - {source: a1, target: a2}
    - {source: s1, target: a2, kind: after}
"""


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    for name, extra in OPTIONS.items():
        (tmp_path / f"{name}.yaml").write_text(BASE.format(name=name) + extra)
    (tmp_path / "spawning.yaml").write_text(SPAWNING)
    return Catalog(agent_dirs=[tmp_path], topology_dirs=[tmp_path])


def workload(catalog: Catalog, profile: str, topology: str = "react", agents: int = 6) -> Workload:
    spec = WorkloadSpec(
        agents=agents,
        mix=[MixEntry(profile=profile, topology=topology)],
        arrival=ArrivalSpec(process="all_at_once", rate=None),
        system_prompts=2,
    )
    return Workload(spec, catalog)


def assert_realised_is_ideal(records: list[RequestRecord]) -> None:
    mismatched = [
        (r.identity.session_id, r.identity.node, r.cached_tokens, r.ideal_cached_tokens_est)
        for r in records
        if r.cached_tokens != r.ideal_cached_tokens_est
    ]
    assert mismatched == []
    assert all(r.prompt_tokens == r.prompt_tokens_est for r in records)


def by_node(records: list[RequestRecord]) -> dict[tuple[str, str], RequestRecord]:
    return {(r.identity.session_id, r.identity.node): r for r in records}


def test_reasoning_not_carried_breaks_the_prefix_at_each_earlier_output(
    catalog: Catalog, emulator: Callable[..., EmulatorThread]
) -> None:
    plain = by_node(sent(workload(catalog, "plain"), emulator))
    for option in ("reasoning_none", "reasoning_last"):
        records = sent(workload(catalog, option), emulator)
        assert_realised_is_ideal(records)
        mine = by_node(records)
        assert sum(r.ideal_cached_tokens_est or 0 for r in records) < sum(
            r.ideal_cached_tokens_est or 0 for r in plain.values()
        )
        for key, r in mine.items():  # later prompts are shorter by the reasoning they drop
            assert (r.prompt_tokens_est or 0) <= (plain[key].prompt_tokens_est or 0)
    none = by_node(sent(workload(catalog, "reasoning_none"), emulator))
    last = by_node(sent(workload(catalog, "reasoning_last"), emulator))
    # `last` carries a turn's reasoning into the next call only: the call after that strips it,
    # and reuses the previous prompt only up to that reasoning; `none` strips it everywhere,
    # so prompts stay prefixes of each other, only shorter
    s = "0-0"
    assert (last[s, "call1"].prompt_tokens_est or 0) > (none[s, "call1"].prompt_tokens_est or 0)
    assert plain[s, "obs1"].ideal_cached_tokens_est == plain[s, "call1"].prompt_tokens_est
    assert none[s, "obs1"].ideal_cached_tokens_est == none[s, "call1"].prompt_tokens_est
    assert (last[s, "obs1"].ideal_cached_tokens_est or 0) < (last[s, "call1"].prompt_tokens_est or 0)


def test_compaction_replaces_the_history_past_its_threshold(
    catalog: Catalog, emulator: Callable[..., EmulatorThread]
) -> None:
    records = sent(workload(catalog, "compaction"), emulator)
    assert_realised_is_ideal(records)
    plain = by_node(sent(workload(catalog, "plain"), emulator))
    mine = by_node(records)
    # without compaction a react chain of 4 tool calls grows past 400 tokens; with it no prompt
    # is much past the threshold, and each compacted prompt reuses only what its head shares
    assert max(r.prompt_tokens_est or 0 for r in plain.values()) > 700
    assert max(r.prompt_tokens_est or 0 for r in records) <= 400 + 150
    shrunk = [k for k, r in mine.items() if (r.prompt_tokens_est or 0) < (plain[k].prompt_tokens_est or 0)]
    assert shrunk
    first_shrunk = min(shrunk, key=lambda k: plain[k].prompt_tokens_est or 0)
    r = mine[first_shrunk]
    assert (r.ideal_cached_tokens_est or 0) < (plain[first_shrunk].ideal_cached_tokens_est or 0)
    assert sum(r.ideal_cached_tokens_est or 0 for r in records) < sum(
        r.ideal_cached_tokens_est or 0 for r in plain.values()
    )


def test_subagents_start_from_their_own_system_prompt(catalog: Catalog, emulator: Callable[..., EmulatorThread]) -> None:
    wl = workload(catalog, "subagents", topology="spawning")
    records = sent(wl, emulator)
    assert_realised_is_ideal(records)
    mine = by_node(records)
    plain = by_node(sent(workload(catalog, "plain", topology="spawning"), emulator))
    plan = wl.agent(0)
    assert plan.subagent_system_prompt is not None
    assert plan.subagent_system_prompt != plan.system_prompt
    s = plan.session_id
    # the sub-agent shares nothing with its spawner past the first word of the task pool: with
    # the agent's own system prompt it would share that whole prompt
    for sid in {k[0] for k in mine}:
        assert (mine[sid, "s0"].ideal_cached_tokens_est or 0) <= (plain[sid, "s0"].ideal_cached_tokens_est or 0)
    assert (mine[s, "s1"].ideal_cached_tokens_est or 0) >= (mine[s, "s0"].prompt_tokens_est or 0) - 8
    # the first sub-agent of each pool is new to the cache; with the agent's system prompt, every
    # sub-agent reuses that prompt whole
    assert min(mine[sid, "s0"].ideal_cached_tokens_est or 0 for sid in {k[0] for k in mine}) < 10
    assert min(plain[sid, "s0"].ideal_cached_tokens_est or 0 for sid in {k[0] for k in plain}) >= 100


def test_a_spec_read_offline_counts_the_options_as_a_run_does(
    catalog: Catalog, emulator: Callable[..., EmulatorThread], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import swarm.workload.workload as workload_module

    monkeypatch.setattr(workload_module, "default_catalog", lambda: catalog)
    for option in ("reasoning_last", "compaction"):
        wl = workload(catalog, option, agents=3)
        records = sent(wl, emulator)
        table = table_from_spec(wl.spec, "spec.yaml")
        assert sorted(r.prompt_tokens for r in table.rows) == sorted(r.prompt_tokens_est or 0 for r in records)
        assert sum(r.ideal_cached_tokens for r in table.rows) == sum(
            r.ideal_cached_tokens_est or 0 for r in records
        )


def test_unused_options_leave_a_profiles_digest_and_bad_ones_name_the_field(
    catalog: Catalog, tmp_path: Path
) -> None:
    plain = catalog.profile("plain")
    assert set(plain.digest_fields()) & {"reasoning", "compaction", "subagent_system_prompt"} == set()
    assert "reasoning" in catalog.profile("reasoning_none").digest_fields()
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASE.format(name="bad") + "reasoning: {share: 1.5}\n")
    with pytest.raises(InputError, match=r"bad.yaml.*reasoning.share"):
        load_profile(bad)
    bad.write_text(BASE.format(name="bad") + "compaction: {threshold: 10}\n")
    with pytest.raises(InputError, match=r"bad.yaml.*compaction"):
        load_profile(bad)


@pytest.mark.parametrize(
    "reasoning", ["", "reasoning: {share: 0.75, carried: last}\n"], ids=["reasoning_carried", "reasoning_last"]
)
@pytest.mark.parametrize("topology", ["react", "spawning"])
def test_a_compaction_decided_without_the_prompt_is_the_one_its_prompt_takes(
    tmp_path: Path, reasoning: str, topology: str
) -> None:
    """A mid-life session's history decides its compactions turn by turn without composing
    each turn's prompt (``decide_compaction``): the same decisions as composing them, at
    thresholds either side of each prompt's length."""
    (tmp_path / "spawning.yaml").write_text(SPAWNING)
    seen: list[bool] = []
    for threshold in range(220, 760, 30):
        compaction = f"compaction: {{threshold_tokens: {threshold}, summary_tokens: {{dist: constant, value: 40}}}}\n"
        (tmp_path / f"c{threshold}.yaml").write_text(BASE.format(name=f"c{threshold}") + compaction + reasoning)
        wl = workload(Catalog(agent_dirs=[tmp_path], topology_dirs=[tmp_path]), f"c{threshold}", topology, agents=2)
        for agent in range(2):
            composed, decided, oracle = wl.agent(agent), wl.agent(agent), wl.agent(agent)
            t = composed.topology
            for node in t.order:
                ancestors = t.context_ancestors(node)
                compose_messages(composed, node, [(a, synthetic_turn(composed, a)) for a in ancestors])
                decide_compaction(decided, node, ancestors)
                # the definition: the tokens of the prompt it would send uncompacted
                turns = [] if t.fresh_context(node) else [(a, synthetic_turn(oracle, a)) for a in ancestors]
                history = prompts._history(oracle, node, prompts._since_compaction(oracle, turns))
                own = oracle.node(node).instruction
                length = sum(oracle.token_count(m.content) for m in (*prompts._head(oracle, node), *history))
                oracle.compacted[node] = length + oracle.token_count(own) > threshold
            assert decided.compacted == oracle.compacted == composed.compacted, threshold
            seen += composed.compacted.values()
    assert True in seen and False in seen


def test_a_prompt_of_long_texts_has_their_words_ids_without_keeping_a_copy_of_each(tmp_path: Path) -> None:
    """A prompt whose parts are long texts cut from the corpus (``WordText``) gets each part's
    ids copied from the corpus's as it is composed: the prompt's ids are its words' ids, part
    for part, and the agent keeps no array of ids per such part (``SessionPrompts.sliced``; kept,
    they were a seventh of a 2,000-agent simulation's memory). The shared system prompt keeps
    its one array."""
    from swarm.runtime.agent import AgentEnv, AgentRun
    from swarm.texts import WordText, as_str
    from swarm.token_ids import word_ids
    from swarm.workload.tokenizer import WordTokenizer

    long = BASE.format(name="long").replace("value: 50}", "value: 700}").replace("tokens: 120}", "tokens: 400}")
    (tmp_path / "long.yaml").write_text(long)
    plan = workload(Catalog(agent_dirs=[tmp_path]), "long", agents=1).agent(0)
    env = AgentEnv(dispatcher=None, tokenizer=WordTokenizer())  # type: ignore[arg-type]  # composing sends nothing
    run = AgentRun(plan, env)
    t = plan.topology
    kinds: set[type] = set()
    for node in t.order:
        messages = compose_messages(plan, node, [(a, synthetic_turn(plan, a)) for a in t.context_ancestors(node)])
        kinds.update(type(m.content) for m in messages)
        words = " ".join(as_str(m.content) for m in messages).split()
        assert run.prompts.tokens(messages) == word_ids(words), node
    assert WordText in kinds and str in kinds  # long and short parts both
    assert [type(c) for c in env.system_prompt_tokens] == [WordText]
    kept = run.prompts._part_tokens
    assert not [c for c in kept if type(c) is WordText and c not in env.system_prompt_tokens]
