"""The extension round (``extension_round``, since 2026-12-05). After the planned rounds, a leader
the report would call undecided ("unclear") against the baseline gets one or two more runs, and
the baseline as many, the fewest that could still make it "better", and is then judged at a
stricter rank-test level, chosen so that a wrong "better" at either look (the planned one or
this one) stays within the candidate's share of alpha (``autotune.evidence.extension``, counted
exactly: at 3 runs against 6 and 1.67%, a leader one crossing short gets one run a side and may
keep that one crossing at 4 against 7, p <= 0.61%; two or three short, two runs a side and up to
3 crossings at 5 against 8, p <= 0.54%; the two looks together are wrong at most 1.54% of the
time). The level is recorded (``EXTENSION_ATTR``) before the round is measured, and the report
holds the candidate to it. It is given only when no earlier look could decide (the default
rounds: the count assumes one planned look), and once per call. It costs 2 or 4 trials in the
runs it is given in; what it buys was replayed before it was adopted
(docs/measurements/extension-2026-12-05.txt, extension-2026-12-05b.txt).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.evidence import significance as sig
from autotune.evidence.extension import extension_levels
from autotune.experiment.models import Experiment
from autotune.study import storage as st
from autotune.study.confirmation.attrs import EXTENSION_ATTR, Extension, extensions
from autotune.study.confirmation.candidates import BASELINE, Pick
from autotune.study.confirmation.looks import LookLevels
from autotune.study.confirmation.standing import (
    MIN_RUNS,
    call,
    every_judged,
    judged,
    last_round,
    read_standing,
    searched_values,
)
from autotune.study.kinds import TrialKind
from autotune.study.objective import directions
from autotune.study.space import settings_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Offer:
    """An extension round ``extension_for`` gives: ``added`` more runs of the leader and of the
    baseline, the leader then called better at a rank-test p-value <= ``level``."""

    added: int
    level: float



def extension_round(
    exp: Experiment, studies: st.Studies, candidates: Sequence[Pick], levels: LookLevels,
) -> list[dict[str, Any]]:
    """One more round of the leader and the baseline after the planned ones, or [] (module
    docstring, "Extension"; ``autotune.evidence.extension``). Given when no earlier look could
    decide (the level is counted for one planned look), no candidate of any night is already
    better (the report would adopt it), the leader has had no extension before, and
    ``extension_for`` gives it one. The ``Extension`` is recorded before the round is
    measured."""
    if levels.interim < 1.0:
        return []
    direction, metric = directions(exp)[0], exp.goals[0].label
    standing = read_standing(exp, studies, candidates)
    if not standing.ranked or not standing.baseline:
        return []
    recorded = extensions(studies.search.user_attrs)
    each = sig.each_of(levels.verdict, judged(studies))
    best = standing.ranked[0]
    key = settings_key(best.settings)
    # Any night's candidate the report calls better: the report adopts it, an extension of
    # tonight's leader would buy nothing (a study continued over nights).
    everyone = read_standing(exp, studies, every_judged(studies, candidates))
    if key in recorded or any(call(exp, studies, everyone, p, each) == "better"
                              for p in everyone.ranked):
        return []
    mine = standing.values[best.trial]
    offer = extension_for(mine, searched_values(studies, best.settings, standing.steady),
                          standing.baseline, each=each, metric=metric, direction=direction)
    if offer is None:
        return []
    done = last_round(studies)
    given = Extension(level=offer.level, round=done + 1,
                      runs=(len(mine), len(standing.baseline)), added=offer.added)
    studies.search.set_user_attr(EXTENSION_ATTR, {
        **{k: e.record() for k, e in recorded.items()}, key: given.record()})
    log.info("round %d left #%d undecided: %d more run(s) of #%d and of the baseline, judged "
             "at p <= %.2g so that a wrong 'better' at either look stays within %.2g", done,
             best.trial, offer.added, best.trial, offer.level, 1 - each)
    # Shuffled by ``confirm`` like every round. "extension": for the record (trials.jsonl);
    # the report finds the round by Extension.
    return [{"kind": TrialKind.CONFIRM.value, "settings": settings, "candidate": candidate,
             "round": given.round, "sequential": True, "extension": True}
            for _ in range(offer.added)
            for candidate, settings in ((BASELINE, exp.baseline_settings()),
                                        (best.trial, best.settings))]



def extension_for(
    mine: Sequence[float], searched: Sequence[float], baseline: Sequence[float], *, each: float,
    metric: str, direction: sig.Direction,
) -> Offer | None:
    """The extension round for a leader with confirmation runs ``mine`` (and the search values
    that chose it, ``searched``), judged at ``each`` against ``baseline``, or None when it gets
    none: it is not undecided as the report judges it, or no round of the sizes
    ``autotune.evidence.extension`` counts could make it "better" at the level it allows. The
    round is the smallest that could (the count assumes it). Pure."""
    if len(mine) < MIN_RUNS:
        return None
    call = sig.judge(mine, searched, baseline, metric=metric, direction=direction,
                     confidence=each, min_runs=MIN_RUNS)
    if call.outcome != "unclear":
        return None
    levels = extension_levels(len(mine), len(baseline), 1 - each)
    for added, level in enumerate(levels, start=1):
        if level is not None and best_possible_p(mine, baseline, direction,
                                                  added) <= level + 1e-9:
            return Offer(added, level)
    return None


def best_possible_p(mine: Sequence[float], baseline: Sequence[float],
                     direction: sig.Direction, added: int,
                     baseline_added: int | None = None) -> float:
    """The rank test's p after ``added`` more runs of the candidate and ``baseline_added``
    (default: as many) of the baseline, at best: the candidate's new runs better than every run
    so far and the baseline's worse, all distinct (ties would share a mid-rank and understate
    it). Pure."""
    low, high = min([*mine, *baseline]), max([*mine, *baseline])
    beyond = high - low + abs(high) + abs(low) + 1.0
    sign = 1.0 if direction == "minimize" else -1.0
    best = [(low if sign > 0 else high) - sign * (beyond + i) for i in range(added)]
    worst = [(high if sign > 0 else low) + sign * (beyond + i)
             for i in range(added if baseline_added is None else baseline_added)]
    return sig.separation_p([*mine, *best], [*baseline, *worst], direction=direction)
