"""From metric readings to objective values and constraint violations. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from autotune.experiment.models import Experiment


@dataclass(frozen=True)
class Scored:
    values: tuple[float, ...]
    """One per goal, in the experiment's order."""
    violations: dict[str, float]
    """Per constraint text: <= 0 when satisfied."""

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.violations.values())


def score(exp: Experiment, metrics: Mapping[str, float]) -> Scored:
    """``metrics`` must hold every required metric (the trial fails before this otherwise)."""
    values = tuple(
        sum(weight * metrics[name] for name, weight in goal.terms.items()) for goal in exp.goals
    )
    violations = {c.text: c.violation(metrics[c.metric]) for c in exp.parsed_constraints}
    return Scored(values=values, violations=violations)


def directions(exp: Experiment) -> list[Literal["minimize", "maximize"]]:
    return [goal.direction for goal in exp.goals]
