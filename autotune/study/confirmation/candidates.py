"""What a confirmation measures: the best distinct feasible configurations of the search
(``top_configurations``), each a ``Pick``, and the baseline (``BASELINE``). Pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.trial import TrialState

from autotune.experiment.models import Setting
from autotune.study.kinds import TrialKind
from autotune.study.space import settings_key

BASELINE = "baseline"
"""The ``candidate`` of a confirmation run of the baseline (a label, not a ``TrialKind``)."""


# Trials in these states hold their (configuration, round) slot: done, or about to run.
HOLDING = (TrialState.COMPLETE.name, TrialState.WAITING.name, TrialState.RUNNING.name)


@dataclass(frozen=True)
class Pick:
    """A distinct search configuration; ``trial`` is the first search trial that measured it."""

    trial: int
    settings: dict[str, Setting]
    values: tuple[float, ...]
    """Median over the search trials with these settings, one per objective."""
    trials: tuple[int, ...]


def feasible(summary: Mapping[str, Any]) -> bool:
    return all(v <= 0 for v in (summary.get("constraints") or {}).values())


def top_configurations(
    summaries: Sequence[Mapping[str, Any]],
    dirs: Sequence[str],
    top: int,
    *,
    exclude: Sequence[Mapping[str, Any]] = (),
) -> list[Pick]:
    """The best ``top`` distinct feasible configurations of the search, best first. Pure.

    ``summaries`` are ``trial_summary`` dicts of the search study. Trials with the same settings
    are one configuration, summarised by their median (a repeat should not count as luck twice);
    it is feasible only if every one of its trials was. With several objectives: the
    configurations on the Pareto front of those medians, ordered by the first objective, up to
    ``top``. Configurations equal to one in ``exclude`` (the baseline) are skipped.
    """
    excluded = {settings_key(s) for s in exclude}
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for s in summaries:
        if (s.get("kind", TrialKind.SEARCH) != TrialKind.SEARCH
                or s.get("state") != TrialState.COMPLETE.name or not s.get("values")):
            continue
        groups.setdefault(settings_key(s["settings"]), []).append(s)
    picks = []
    for key, members in groups.items():
        if key in excluded or not all(feasible(m) for m in members):
            continue
        members = sorted(members, key=lambda m: int(m["number"]))
        values = tuple(statistics.median(m["values"][i] for m in members)
                       for i in range(len(dirs)))
        picks.append(Pick(trial=int(members[0]["number"]), settings=dict(members[0]["settings"]),
                          values=values, trials=tuple(int(m["number"]) for m in members)))
    signs = [1.0 if d == "minimize" else -1.0 for d in dirs]

    def oriented(p: Pick) -> tuple[float, ...]:
        return tuple(s * v for s, v in zip(signs, p.values, strict=True))

    if len(dirs) > 1:
        picks = [p for p in picks if not any(_dominates(oriented(q), oriented(p)) for q in picks)]
    return sorted(picks, key=lambda p: (oriented(p), p.trial))[:top]


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b
