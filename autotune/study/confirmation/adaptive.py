"""The fixed design's adaptive rounds (``autotune run --fixed``).

After the fixed rounds, while the best candidate is not separated from the runner-up or from the
baseline (the bootstrap interval of the relative difference of medians, over the candidates'
confirmation runs and the baseline's repeats + interleaved runs, still spans "no difference" and
a worthwhile one), one more shuffled round measures just the unresolved ones (the best always,
the runner-up and/or the baseline), until ``extra`` trials are spent. The report then says
"better", "equivalent within 5%" or "not told apart" (with the interval's two ends), honest
answers all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.evidence import significance as sig
from autotune.experiment.models import Experiment, Setting
from autotune.study import storage as st
from autotune.study.confirmation.candidates import BASELINE, Pick
from autotune.study.confirmation.standing import (
    MIN_RUNS,
    judged,
    read_standing,
    searched_values,
)
from autotune.study.kinds import TrialKind
from autotune.study.objective import directions


def adaptive_round(
    exp: Experiment, studies: st.Studies, candidates: Sequence[Pick], repeats: int
) -> list[dict[str, Any]]:
    """The next adaptive round's entries, or [] when the best candidate is separated from the
    runner-up and from the baseline (or there is nothing to separate). Like the sequential
    looks it leads with the best mean among the candidates feasible in every run
    (``read_standing``)."""
    direction = directions(exp)[0]
    standing = read_standing(exp, studies, candidates)
    ranked, values, baseline = standing.ranked, standing.values, standing.baseline
    if not ranked or not baseline:
        return []
    best = ranked[0]
    metric = exp.goals[0].label
    # At the level the report judges each candidate of a fixed design (95% shared by them).
    level = sig.each_of(sig.CONFIDENCE, judged(studies))

    def unresolved(a: list[float], b: list[float]) -> bool:
        return sig.compare(a, b, metric=metric, direction=direction,
                           confidence=level).outcome == "unclear"

    todo: list[tuple[int | str, dict[str, Setting]]] = []
    if len(ranked) > 1 and unresolved(values[best.trial], values[ranked[1].trial]):
        todo.append((ranked[1].trial, ranked[1].settings))
    if sig.judge(values[best.trial], searched_values(studies, best.settings, standing.steady),
                 baseline,
                 metric=metric, direction=direction, confidence=level,
                 min_runs=MIN_RUNS).outcome == "unclear":  # the report's (review finding)
        todo.append((BASELINE, exp.baseline_settings()))
    if not todo:
        return []
    todo.append((best.trial, best.settings))
    held = [t.user_attrs.get("round") or 0 for t in studies.reference.get_trials(deepcopy=False)
            if t.user_attrs.get("kind") == TrialKind.CONFIRM]
    r = max([repeats, *held]) + 1
    return [{"kind": TrialKind.CONFIRM.value, "settings": settings, "candidate": candidate,
             "round": r, "adaptive": True} for candidate, settings in todo]
