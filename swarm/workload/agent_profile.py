"""Agent profiles (``agents/*.yaml``): what one kind of agent sends.

Place in the map (docs/architecture.md, "Workload"): a profile gives the system prompt (a file, or
synthesised to N tokens, e.g. a catalogue of tool definitions as coding agents carry), the
task size, the instruction size per call, output tokens per node role, think and tool times,
and the pruning policy. The Workload samples from it with a seeded RNG per agent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swarm.errors import InputError
from swarm.workload.distributions import Constant, Distribution
from swarm.workload.specfiles import load_yaml, resolve_spec_path, validate
from swarm.workload.topology import ROLES


class SystemPromptSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    style: Literal["tool_catalogue", "prose"] = Field(
        default="prose", description="shape of synthesised text"
    )
    tokens: int = Field(default=1000, ge=1, le=500_000, description="length of a synthesised prompt")
    tools: int = Field(default=20, ge=1, le=1000, description="tool_catalogue: number of tools")
    file: str | None = Field(default=None, description="a text file to use instead (relative to the profile)")


class PruningSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    early_stop_p: float = Field(default=0.0, ge=0, lt=1, description="chance a finished call ends its branch")


class ReasoningSpec(BaseModel):
    """Reasoning that later prompts do not carry: its KV is computed and cached, then never
    reused (reasoning models' APIs strip earlier turns' thinking; TensorRT-LLM's agent
    analyser counts it as cache pollution)."""

    model_config = ConfigDict(extra="forbid")

    share: float = Field(
        ge=0, le=1, description="leading share of each output that is reasoning (by words)"
    )
    carried: Literal["all", "last", "none"] = Field(
        default="none",
        description="whose reasoning later prompts carry: all, only the last turn's (a node's "
        "direct context parents), or none (only the visible rest of each output)",
    )


class CompactionSpec(BaseModel):
    """Context compaction: a prompt past a threshold is sent with its history replaced by a
    summary, and later turns build on the summary (the prefix breaks there)."""

    model_config = ConfigDict(extra="forbid")

    threshold_tokens: int = Field(ge=1, description="a prompt longer than this is compacted")
    summary_tokens: Distribution = Field(description="length of the summary that replaces the history")


class TopologyChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="topology name, or a YAML path relative to the profile")
    weight: float = Field(default=1.0, gt=0, description="relative share of the profile's agents")


class AgentProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    system_prompt: SystemPromptSpec = Field(default_factory=SystemPromptSpec)
    task_tokens: Distribution = Field(default_factory=lambda: Constant(value=200))
    instruction_tokens: Distribution = Field(default_factory=lambda: Constant(value=20))
    output_tokens: dict[str, Distribution] = Field(
        default_factory=lambda: {"default": Constant(value=64)},  # type: ignore[arg-type]
        description="per node role, with 'default' for the others",
    )
    think_time_s: Distribution = Field(default_factory=lambda: Constant(value=0))
    tool_time_s: Distribution = Field(default_factory=lambda: Constant(value=0.5))
    tool_result_tokens: Distribution = Field(default_factory=lambda: Constant(value=200))
    pruning: PruningSpec = Field(default_factory=PruningSpec)
    reasoning: ReasoningSpec | None = Field(
        default=None, description="reasoning not carried into later prompts (none: all carried)"
    )
    compaction: CompactionSpec | None = Field(default=None, description="context compaction (none: never)")
    subagent_system_prompt: SystemPromptSpec | None = Field(
        default=None,
        description="the system prompt of spawned sub-agents (spawn nodes and their context "
        "descendants); none: the agent's own",
    )
    topologies: list[TopologyChoice] = Field(
        default_factory=list,
        description="the profile's own topologies, drawn per agent by weight when a mix entry "
        "names none (empty: tree_of_thought)",
    )
    synthetic: bool = Field(
        default=False,
        description="true for a profile made up rather than fitted to a recording or study",
    )
    source: str = Field(default="", description="the recording or study its numbers come from")
    #: set by the loader: the folder the profile came from (for system_prompt.file)
    base_dir: str | None = Field(default=None, exclude=True)
    #: set by the loader: the text of system_prompt.file, read once (workers need no file)
    system_prompt_text: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _roles(self) -> AgentProfile:
        unknown = sorted(set(self.output_tokens) - set(ROLES) - {"default"})
        if unknown:
            raise ValueError(f"output_tokens: unknown role(s) {unknown} (known: default, {', '.join(ROLES)})")
        if "default" not in self.output_tokens:
            raise ValueError("output_tokens: needs a 'default' entry")
        return self

    def digest_fields(self) -> dict[str, object]:
        """Every field as JSON, less the fields added since digests began that are at their
        defaults (so a profile that does not use them keeps the digest its runs recorded)."""
        out = self.model_dump(mode="json")
        for name in _ADDED_LATER:
            if out.get(name) == AgentProfile.model_fields[name].get_default(call_default_factory=True):
                out.pop(name, None)
        return out

    def output_for(self, role: str) -> Distribution:
        return self.output_tokens.get(role, self.output_tokens["default"])

    def system_prompt_file(self, source: str | None = None) -> Path | None:
        """The system prompt file, resolved inside the profile's folder (errors name ``source``)."""
        if self.system_prompt.file is None:
            return None
        base = Path(self.base_dir or ".")
        return resolve_spec_path(
            base, self.system_prompt.file, source or f"profile {self.name}", "system_prompt.file"
        )


#: fields added after content digests were first recorded
_ADDED_LATER = ("reasoning", "compaction", "subagent_system_prompt", "topologies", "synthetic", "source")


def load_profile(path: str | Path) -> AgentProfile:
    p = Path(path)
    profile = validate(AgentProfile, load_yaml(p), str(p))
    profile = profile.model_copy(update={"base_dir": str(p.parent)})
    file = profile.system_prompt_file(str(p))
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"{p}: system_prompt.file: cannot read {file}: {exc.strerror or exc}") from None
        profile = profile.model_copy(update={"system_prompt_text": text})
    return profile
