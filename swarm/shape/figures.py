"""Published figures: a study's medians, quantiles and hit ratios, held against a swarm.

Place in the map (docs/architecture.md, "Shape"): ``swarm realism CANDIDATE --against FIGURES``
where no trace file exists, only what a study printed. A figures file (``figures/*.yaml``, or
any path) names its source and holds one or more sets (a study's workloads), each a list of
figures: a feature of ``features.FIGURE_FEATURES``, a statistic (``p10`` ... ``p99`` or
``mean``) and the published value.

A figure's verdict, with ``e = |candidate - published| / |published|`` and the set's (or the
figure's own) tolerance ``tol`` (default 15 %): ``match`` when ``e <= tol``, ``near`` when
``e <= 2 tol``, ``far`` beyond, ``n/a`` when the candidate has no value for it. Overall, as for
a trace: ``close`` when every figure matches, ``partly`` when none is far, ``far`` otherwise.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from swarm.errors import InputError
from swarm.shape.features import FIGURE_FEATURES
from swarm.workload.specfiles import load_yaml, validate

Stat = Literal["p10", "p25", "p50", "p75", "p90", "p99", "mean"]
DEFAULT_TOLERANCE = 0.15


class Figure(BaseModel):
    model_config = ConfigDict(extra="forbid")

    feature: str = Field(description=f"one of: {', '.join(FIGURE_FEATURES)}")
    stat: Stat = Field(description="the statistic published: p10, p25, p50, p75, p90, p99 or mean")
    value: float = Field(description="the published value (tokens, seconds, requests, or a share 0-1)")
    tolerance: float | None = Field(default=None, gt=0, description="this figure's own tolerance")
    note: str = Field(default="", description="where in the source it stands")

    @field_validator("feature")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in FIGURE_FEATURES:
            raise ValueError(f"unknown feature {v!r} (known: {', '.join(FIGURE_FEATURES)})")
        return v


class FigureSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = ""
    profile: str | None = Field(default=None, description="the built-in profile made to match it")
    tolerance: float | None = Field(default=None, gt=0, description="tolerance of its figures")
    figures: list[Figure] = Field(min_length=1)


class FiguresFile(BaseModel):
    """One figures file."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(min_length=1, description="the study, table and version the figures come from")
    url: str = ""
    tolerance: float = Field(default=DEFAULT_TOLERANCE, gt=0, description="relative tolerance of a match")
    sets: dict[str, FigureSet] = Field(min_length=1, description="the study's workloads, by name")


def figures_dir() -> Path:
    """The folder of built-in figures files."""
    from swarm.workload.catalog import builtin_dir

    return builtin_dir("figures")


def is_figures_file(path: str) -> bool:
    """Whether ``path`` names a figures file: a built-in's name, or a YAML with ``sets:``."""
    if (figures_dir() / f"{path}.yaml").is_file():
        return True
    p = Path(path)
    if p.suffix not in (".yaml", ".yml") or not p.is_file():
        return False
    data = load_yaml(p)
    return isinstance(data, dict) and "sets" in data and "workload" not in data


def load_figures(path: str) -> tuple[FiguresFile, str]:
    """A figures file by path or built-in name; errors name the file and the field."""
    builtin = figures_dir() / f"{path}.yaml"
    p = builtin if builtin.is_file() else Path(path)
    return validate(FiguresFile, load_yaml(p), str(p)), str(p)


def pick_set(figures: FiguresFile, source: str, name: str | None) -> tuple[str, FigureSet]:
    """The set named (the only one when the file has one)."""
    if name is None:
        if len(figures.sets) == 1:
            return next(iter(figures.sets.items()))
        raise InputError(f"{source}: holds {len(figures.sets)} sets; name one with --set ({', '.join(figures.sets)})")
    if name not in figures.sets:
        raise InputError(f"{source}: no set {name!r} (sets: {', '.join(figures.sets)})")
    return name, figures.sets[name]


@dataclass(frozen=True)
class FigureRow:
    feature: str
    label: str
    unit: str
    stat: str
    published: float
    candidate: float | None
    error: float | None  # relative
    tolerance: float
    verdict: str  # match, near, far, n/a
    note: str = ""


@dataclass
class FiguresReport:
    candidate: str
    source: str
    set: str
    rows: list[FigureRow]
    verdict: str
    far: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def statistic(values: list[float], stat: str) -> float | None:
    """A statistic of ``values`` (None when there are none)."""
    if not values:
        return None
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()) if stat == "mean" else float(np.quantile(arr, int(stat[1:]) / 100))


def hold(
    values: dict[str, list[float]], figures: FiguresFile, set_name: str, fset: FigureSet, candidate: str
) -> FiguresReport:
    """Each figure of ``fset`` against the candidate's feature values (module docstring)."""
    rows = []
    for f in fset.figures:
        tol = f.tolerance or fset.tolerance or figures.tolerance
        got = statistic(values.get(f.feature, []), f.stat)
        error = None if got is None else abs(got - f.value) / abs(f.value) if f.value else abs(got)
        if error is None:
            verdict = "n/a"
        else:
            verdict = "match" if error <= tol else "near" if error <= 2 * tol else "far"
        label, unit = FIGURE_FEATURES[f.feature]
        rows.append(FigureRow(f.feature, label, unit, f.stat, f.value, got, error, tol, verdict, f.note))
    far = [f"{r.feature} {r.stat}" for r in rows if r.verdict == "far"]
    judged = [r for r in rows if r.verdict != "n/a"]
    if not judged:
        verdict = "unknown"
    elif far:
        verdict = "far"
    else:
        verdict = "close" if all(r.verdict == "match" for r in judged) else "partly"
    notes = [f"not compared (the candidate has no values): {r.feature}" for r in rows if r.verdict == "n/a"]
    return FiguresReport(candidate, figures.source, set_name, rows, verdict, far, notes)


def _num(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "share":
        return f"{v:.3f}"
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.3g}"


def figures_table(report: FiguresReport) -> str:
    """The report as a plain-text table: one line per figure."""
    header = ["figure", "published", "candidate", "error", "tolerance", "verdict"]
    lines = [header]
    for r in report.rows:
        err = "-" if r.error is None else f"{r.error:.1%}"
        lines.append(
            [f"{r.label} {r.stat} ({r.unit})", _num(r.published, r.unit), _num(r.candidate, r.unit), err,
             f"{r.tolerance:.0%}", r.verdict]
        )  # fmt: skip
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    out = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in lines
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)
