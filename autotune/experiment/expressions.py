"""Constraints ``<metric> <op> <number>``, turned into Optuna's "feasible when <= 0" form."""

from __future__ import annotations

import re
from dataclasses import dataclass

_CONSTRAINT = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*(?:@[a-z][a-z0-9_-]*)?)\s*(<=|>=|<|>)\s*([-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)\s*$"
)


@dataclass(frozen=True)
class Constraint:
    text: str
    metric: str
    op: str
    bound: float

    def violation(self, value: float) -> float:
        """How far the value is on the wrong side of the bound; <= 0 means satisfied."""
        if self.op in ("<=", "<"):
            return value - self.bound
        return self.bound - value


def parse_constraint(text: str) -> Constraint:
    match = _CONSTRAINT.match(text)
    if not match:
        raise ValueError(
            f"cannot parse constraint {text!r}: expected '<metric> <= <number>' "
            "(operators: <=, <, >=, >)"
        )
    return Constraint(text=text.strip(), metric=match.group(1), op=match.group(2),
                      bound=float(match.group(3)))


SCENARIO_SEPARATOR = "@"
"""``p99@quiet``: the metric ``p99`` under the chaos scenario ``quiet`` (``chaos.scenarios``)."""


def split_scenario(name: str) -> tuple[str, str | None]:
    """``p99@quiet`` -> (``p99``, ``quiet``); ``p99`` -> (``p99``, None)."""
    metric, sep, scenario = name.partition(SCENARIO_SEPARATOR)
    return metric, (scenario if sep else None)
