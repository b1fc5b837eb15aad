"""The Claude Code built-in and the fit behind it, against real Claude Code sessions.

The sessions are the 17 the workplace shares, copied gzipped into tests/data/weka-claude-code
(source and licence: tests/data/README.md). Spec reads are offline and seeded, so each verdict
here is the same on every run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from claude_code_data import SESSIONS, unpack
from typer.testing import CliRunner

from swarm.cli import app
from swarm.cli.shape import load_table
from swarm.replay.plan import ReplayItem, ReplayPlan
from swarm.shape.features import comparable_features, features
from swarm.shape.fit import FINE_QUANTILES_FROM, fit_table, fit_values, thread_breaks, write_fit
from swarm.shape.realism import compare
from swarm.shape.table import table_from_plan, table_from_spec
from swarm.workload.workload import MixEntry, WorkloadSpec


def _item(index: int, blocks: list[int], parents: tuple[int, ...] = (), out: int = 50) -> ReplayItem:
    return ReplayItem(
        index=index, offset_s=float(index), prompt_tokens=64 * len(blocks), max_tokens=out,
        block_ids=tuple(blocks), block_tokens=64, parents=parents, gap_s=1.0,
    )  # fmt: skip


def test_a_compaction_and_a_rewritten_history_go_on_the_thread_not_as_sub_agents() -> None:
    """A prompt that drops far below its parent's (a compaction) and the next one, which
    rewrites its history without extending it, are turns of the same thread: the fitted
    topology links them as context, spawns no sub-agent, and the profile compacts."""
    grow = [list(range(1, 20 + 2 * k)) for k in range(6)]  # 19, 21, ... blocks
    items = [_item(k, b, (k - 1,) if k else ()) for k, b in enumerate(grow)]
    items.append(_item(6, [500, 501, 502, 503], (5,)))  # compacted: below 70 % of its parent's
    items.append(_item(7, [600, 601, 602, 603, 604], (6,)))  # rewritten: extends nothing, no drop
    items.append(_item(8, [600, 601, 602, 603, 604, 605], (7,)))  # extends it again
    table = table_from_plan(ReplayPlan(items=items, source="t", source_format="agentic_coding"))
    assert thread_breaks(table) == {6, 7}
    fit = fit_table(table, "t")
    assert fit.compaction is not None and fit.compaction.threshold_tokens == 64 * 29
    (topo,) = fit.topologies
    assert all(kind == "context" for _, _, kind in topo.links) and len(topo.links) == 8
    assert any("rewritten history" in note for note in fit.notes)


def test_a_long_sample_is_fitted_at_every_percent_so_its_tail_keeps_its_weight() -> None:
    """Hundreds of 1k values and one of 100k: at 5 % steps the top step would interpolate up to
    100k and carry a mean of 2.5k per sample; at 1 % steps the mean stays near the data's."""
    values = [1000.0 + k for k in range(FINE_QUANTILES_FROM * 2)] + [100_000.0]
    fitted = fit_values(values, "v", integer=True, default=1)
    assert fitted.data["dist"] == "empirical" and len(fitted.data["quantiles"]) == 101
    assert "every 1 %" in fitted.comment
    from swarm.workload.distributions import Empirical

    mean = Empirical(**{k: v for k, v in fitted.data.items() if k != "dist"}).mean()
    assert mean < 1.5 * sum(values) / len(values)
    few = fit_values([1.0, 5.0, 9.0, 20.0, 3.0, 30.0, 2.0, 0.0, 11.0], "v", integer=True, default=1)
    assert len(few.data["quantiles"]) == 21


def test_a_trace_with_ids_per_session_is_compared_on_reuse_within_each_session(tmp_path: Path) -> None:
    """The sessions number their hash ids per session, so they cannot show the 15k-token prompt
    that Claude Code sessions share: a swarm sharing it is compared on each session alone."""
    ref = load_table(str(unpack(tmp_path / "s", SESSIONS[:2])))
    assert ref.ids_per_session
    spec = WorkloadSpec(agents=2, system_prompts=1, mix=[MixEntry(profile="claude_code")])
    cand = table_from_spec(spec, "claude_code")
    assert not cand.ids_per_session
    cv, _, note = comparable_features(cand, ref)
    assert note is not None and "each session alone" in note
    # the second agent's first call shares the system prompt with the first agent's: only globally
    second = cand.sessions()[list(cand.sessions())[1]][0]
    assert features(cand)["reuse_per_request"][second] > 0.1 and cv["reuse_per_request"][second] == 0.0
    assert note in compare(cand, ref).notes


def test_a_swarm_fitted_to_one_slice_of_the_sessions_is_close_to_the_other(tmp_path: Path) -> None:
    """Fit 9 sessions, read 20 agents of the fitted spec offline, hold them against the other
    8 sessions: every judged row matches (the two per-session rows have too few sessions to
    judge, and are shown)."""
    fitted_on = unpack(tmp_path / "a", SESSIONS[0::2])
    held_out = unpack(tmp_path / "b", SESSIONS[1::2])
    spec = tmp_path / "fit" / "spec.yaml"
    write_fit(fit_table(load_table(str(fitted_on)), "slice"), spec)
    report = compare(load_table(str(spec), agents=20), load_table(str(held_out)))
    verdicts = {r.feature: r.verdict for r in report.rows}
    assert report.verdict == "close", verdicts
    assert sum(v == "match" for v in verdicts.values()) >= 6


@pytest.mark.slow
def test_the_built_in_claude_code_is_close_to_the_recorded_sessions(tmp_path: Path) -> None:
    """`swarm realism claude_code --against SESSIONS`: the built-in, by name, is close."""
    sessions = unpack(tmp_path / "sessions")
    result = CliRunner().invoke(
        app, ["realism", "claude_code", "--against", str(sessions), "--read-agents", "40"]
    )
    assert result.exit_code == 0, result.output
    assert "verdict: close" in result.output
    assert "candidate: profile claude_code" in result.output


def test_the_built_in_claude_code_runs_by_name_with_its_fitted_topologies() -> None:
    """`--profile claude_code` alone draws the profile's own topologies, sub-agents among them,
    and compacts past the recorded threshold."""
    from swarm.workload.catalog import default_catalog
    from swarm.workload.workload import Workload

    profile = default_catalog().profile("claude_code")
    assert profile.compaction is not None and profile.compaction.threshold_tokens > 100_000
    workload = Workload(WorkloadSpec(agents=40, mix=[MixEntry(profile="claude_code")]))
    names = {workload.agent(a).topology.name for a in range(40)}
    assert len(names) >= 5 and all(n.startswith("claude_code-") for n in names)
    spawned = {
        n for a in range(40) for n in workload.agent(a).topology.order if n in workload.agent(a).topology.spawns
    }
    assert spawned
    text = (Path(__file__).parents[1] / "agents" / "claude_code.yaml").read_text()
    assert "kv-cache-tester" in yaml.safe_load(text)["source"]
