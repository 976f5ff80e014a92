"""Several chaos scenarios in one trial: the order they run in, and one value per metric.

Every trial measures each scenario of ``chaos.scenarios`` in its own window. The order rotates
with the trial's number (trial n starts with scenario n mod k), so over any k trials in a row
every scenario runs once in every position: a drift of the host over a trial (warming caches,
a neighbour coming and going) does not always favour the same scenario.

A metric's value under scenario ``s`` is ``<metric>@s``; its plain name is the scenarios'
combination (``chaos.combine``):

- ``worst``: for a metric the objective minimizes (or a constraint bounds from above) the
  largest value over the scenarios, for one maximized (bounded from below) the smallest: the
  candidate is judged by the storm it weathers worst. A metric neither names (the served load,
  diagnostics) is the plain mean.
- ``weighted``: the mean weighted by each scenario's ``weight`` (how often production sees it).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from autotune.experiment.expressions import SCENARIO_SEPARATOR
from autotune.experiment.models import Experiment, Scenario


def order(exp: Experiment, trial: int) -> tuple[Scenario, ...]:
    """The scenarios in the order trial number ``trial`` measures them."""
    runs = exp.chaos.runs()
    k = trial % len(runs)
    return runs[k:] + runs[:k]


def qualified(metric: str, scenario: str) -> str:
    return f"{metric}{SCENARIO_SEPARATOR}{scenario}"



def worse(exp: Experiment, metric: str) -> Literal["higher", "lower"] | None:
    """Which way a metric's value is worse, as the objective (first) or a constraint says."""
    for goal in exp.goals:
        if metric in goal.terms:
            return "higher" if (goal.direction == "minimize") == (goal.terms[metric] > 0) \
                else "lower"
    for c in exp.parsed_constraints:
        if c.metric == metric:
            return "higher" if c.op in ("<=", "<") else "lower"
    return None


def combine(exp: Experiment, per: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Every scenario's values under their qualified names, and the combination of each metric
    every scenario measured under its plain name (one missing leaves the plain name out: the
    trial then fails on a required metric, naming the scenario's reason)."""
    scenarios = exp.chaos.runs()
    out: dict[str, float] = {}
    for s in scenarios:
        for name, value in per.get(s.name, {}).items():
            out[qualified(name, s.name)] = value
    for name in exp.metrics:
        if not all(name in per.get(s.name, {}) for s in scenarios):
            continue
        values = [per[s.name][name] for s in scenarios]
        direction = worse(exp, name)
        if exp.chaos.combine == "weighted":
            total = sum(s.weight for s in scenarios)
            out[name] = sum(s.weight * v for s, v in zip(scenarios, values, strict=True)) / total
        elif direction == "higher":
            out[name] = max(values)
        elif direction == "lower":
            out[name] = min(values)
        else:
            out[name] = sum(values) / len(values)
    return out
