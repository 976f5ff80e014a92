"""The tie-break (``tiebreak_round``, since 2026-12-05 (e)). After the looks, when the report
would adopt (it calls a candidate better) and another candidate may be better than the one it
would choose (``autotune.evidence.tiebreak.contests``), the two get one more run each, the
baseline none, at most ``TIE_BREAKS`` (2) times; the report then chooses on all their runs.
The other candidate is one the report also calls better whose runs overlap the leader's and
whose mean is within 10%, or (since 2026-12-06) one the looks dropped on one or two runs whose
mean, with its search measurement, is better than the leader's and which the tie-break's runs
could still make better (``revivable``; since 2026-12-06 (b) only one that reaches exactly
``MIN_RUNS`` runs, so that it is judged once). It adds no ADOPT: it is given only when the
report would already adopt, and the baseline gets no run. A candidate it measures again is held
to its share of alpha as planned (3 runs against the baseline's 6 pass by chance with 1 / C(9,
3) = 1.2%, whenever the decision to measure them was taken). One more run can make the leader's
call "unclear" (the runs differ, or a drifted baseline's trend scales a later run), and when the
rival is not called better either the verdict becomes INCONCLUSIVE: 1 replayed run in 1600.
Not after an extension (the night keeps back trials for one or the other). Replayed before it
was adopted (docs/measurements/tiebreak-2026-12-05.txt, tiebreak-2026-12-06.txt).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from autotune.evidence import significance as sig
from autotune.evidence.tiebreak import TIE_GAP, contests
from autotune.experiment.models import Experiment
from autotune.study import storage as st
from autotune.study.confirmation.candidates import Pick
from autotune.study.confirmation.extension import best_possible_p
from autotune.study.confirmation.looks import LookLevels
from autotune.study.confirmation.standing import (
    MIN_RUNS,
    Standing,
    call,
    every_judged,
    judged,
    last_round,
    read_standing,
    searched_values,
)
from autotune.study.kinds import TrialKind
from autotune.study.objective import directions

log = logging.getLogger(__name__)


def tiebreak_round(
    exp: Experiment, studies: st.Studies, candidates: Sequence[Pick], levels: LookLevels,
    *, left: int = 1,
) -> list[dict[str, Any]]:
    """One more run of the leader (the candidate the report would adopt: the best mean among
    those it calls better, of any night: ``every_judged``) and of its closest rival, or []
    (module docstring; ``autotune.evidence.tiebreak``). A rival is another
    candidate called better, or one that ``left`` more runs (this round's and the tie-breaks
    after it) could still make better (``revivable``), and it ``contests`` the leader; the
    closest is the best by the mean of what ``hint`` reads. ``confirm`` asks after the looks,
    at most ``TIE_BREAKS`` times."""
    direction = directions(exp)[0]
    standing = read_standing(exp, studies, every_judged(studies, candidates))
    if len(standing.ranked) < 2 or not standing.baseline:
        return []
    each = sig.each_of(levels.verdict, judged(studies))
    calls = {p.trial: call(exp, studies, standing, p, each) for p in standing.ranked}
    adoptable = [p for p in standing.ranked if calls[p.trial] == "better"]
    if not adoptable:
        return []  # the report would not adopt: no choice to make
    leader = adoptable[0]
    mine = standing.values[leader.trial]
    hints = {p.trial: hint(studies, standing, p, calls[p.trial]) for p in standing.ranked}
    rivals = sorted((p for p in standing.ranked if p is not leader
                     and (calls[p.trial] == "better"
                          or (calls[p.trial] == "unclear"
                              and revivable(standing, p, left, 1 - each, direction)))
                     and contests(mine, hints[p.trial], direction,
                                  adoptable=calls[p.trial] == "better")),
                    key=lambda p: (*sig.rank_key(hints[p.trial], direction), p.trial))
    if not rivals:
        return []
    rival = rivals[0]
    if calls[rival.trial] == "better":
        why = (f"both are better than the baseline, their runs overlap and their means are "
               f"within {TIE_GAP:.0%}")
    else:
        why = (f"#{rival.trial}'s mean is better (with its search measurement) and its "
               f"{len(standing.values[rival.trial])} run(s) could still be called better")
    log.info("#%d and #%d: %s: one more run of each before choosing by the mean",
             leader.trial, rival.trial, why)
    # Shuffled by ``confirm`` like every round; "tiebreak": for the record (trials.jsonl).
    return [{"kind": TrialKind.CONFIRM.value, "settings": p.settings, "candidate": p.trial,
             "round": last_round(studies) + 1, "sequential": True, "tiebreak": True}
            for p in (leader, rival)]


def hint(studies: st.Studies, standing: Standing, p: Pick, call: str) -> list[float]:
    """What says whether candidate ``p`` contests the leader: its confirmation runs, and for
    one not called better its search measurements too. A search value flatters (the best of
    many looks better than it is): it decides only where a tie-break's runs go, never a call or
    the choice (``autotune.evidence.tiebreak``)."""
    mine = list(standing.values[p.trial])
    if call == "better":
        return mine
    return [*mine, *searched_values(studies, p.settings, standing.steady)]


def revivable(standing: Standing, p: Pick, left: int, alpha: float,
               direction: sig.Direction) -> bool:
    """Whether ``left`` more runs of candidate ``p`` (the baseline none) could make the report
    call it better: exactly ``MIN_RUNS`` runs then, and the rank test's p-value at best (every
    new run better than all so far) within ``alpha``, its share. Pure.

    Why its share still holds: the candidate is judged once, at ``MIN_RUNS`` runs, never
    before (the report does not judge fewer) and never again. When nothing differs, a wrong
    "better" then needs its runs to separate from the baseline's, and that has the same chance
    whenever the decision to measure it again was taken: deciding on its first run(s) can only
    give up runs. A candidate already judged (``MIN_RUNS`` runs or more), or one the tie-breaks
    left would take past ``MIN_RUNS``, is not revived: each further run is another look, and
    the looks together pass by chance more often than the share (3 runs against 6, then 4 and
    5: 2.32% against 1.67%, counted exactly). No ADOPT comes from it either way: a tie-break is
    given only when the report already adopts."""
    mine = standing.values[p.trial]
    if len(mine) + left != MIN_RUNS or standing.rank_alpha(p.trial, alpha) is not None:
        return False  # an extended candidate is held to its extension's count
    return best_possible_p(mine, standing.against(p.trial), direction, left,
                            baseline_added=0) <= alpha + 1e-9
