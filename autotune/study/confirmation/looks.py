"""The sequential confirmation's looks: after each round, whether the evidence is decisive, and
what the next round measures.

**Sequential confirmation** (the default of ``autotune run`` and ``autotune confirm``; the fixed
rounds are ``--fixed``: ``autotune.study.confirmation.adaptive``). ``repeats`` is the most
rounds (looks) there will be. Round 1 measures the top candidates and the baseline, shuffled;
after each round the evidence is looked at with the interval the report computes: the best
candidate (best mean over its confirmation runs, as the report chooses among candidates:
``significance.typical``) against the baseline, and against the runner-up. A comparison is
decided when its interval says "better" (low > 0) or "equivalent within PRACTICAL" (high < 5%),
on at least ``LOOK_RUNS`` runs of the best ("better" also needs the exact rank test:
``significance.separation_p``). Confirmation stops when the best is decided "better" than the
baseline (the report then adopts it, whatever the runner-up), or when both comparisons are
decided (``undecided``); otherwise the next round measures the best and what is not decided
against it (the baseline, the runner-up), shuffled, until ``repeats`` rounds.

**Its error rate** under repeated looks and several candidates, and the limits of that claim. The
looks spend alpha = 5% unequally (``look_levels``): the looks that may stop the confirmation
early share ``INTERIM_ALPHA`` = 1% equally, and the verdict gets the other 4% (a 96% interval).
A look that *cannot* decide spends nothing (``silent_looks``): an early look needs
``LOOK_RUNS`` = 4 runs of the leader (at 1% or less the exact rank test cannot call "better" on
3 runs against 6), so with a candidate with no earlier run the looks after rounds 1 to 3 cannot
decide, the default 3 rounds (and ``--repeats 4``) have no early look that decides, and the
verdict gets the whole 5% (95%, as one fixed look; 96% from 5 rounds on, or when tonight's
candidates already hold runs from an earlier night). Which looks are silent depends
only on the runs held before tonight's first round, so the split is fixed in advance. The
report adopts if any of the ``k`` candidates it judges is called better, so each is judged at
``significance.each_of(level, k)`` (98.33% each for 3 candidates at the default verdict):
Bonferroni over the candidates. The study records the family's levels (``CONFIDENCE_ATTR``,
``LOOK_CONFIDENCE_ATTR``, the latter only when an early look could decide); a later call never
lowers either; ``k`` is counted from the runs (a study continued over nights judges every
night's candidates). An early look stops only when the report, judging at the verdict's level,
would make the call the look made, for the best and the runner-up against the baseline
(``undecided``). By Bonferroni's inequality a wrong candidate-vs-baseline call at any look has
probability at most alpha, for any split and whatever the dependence between looks and
candidates. Why most of it at the end: a strict constant level at the early looks and nearly the
nominal one at the last is the Haybittle-Peto shape. For a wrong "better" (the call that changes
production) the bound is exact for the default schedule, not nominal: "better" needs the exact
one-sided rank-sum test at p <= 1 - the call's level (``significance.separation_p``), so when
nothing differs, the runs are exchangeable (no drift) and their number is fixed in advance (3
rounds; an extension round is a second look counted exactly for its one candidate, below;
``--fixed``'s adaptive rounds re-test at one level and are not exact) each candidate's
wrong "better" has at most its share (at 3 runs
against 6, 1 / C(9, 3) = 1.2% against each of 3 candidates' 1.67%), whatever the runs'
distribution. The percentile bootstrap alone overshot at 3-6 runs a side. Simulated with nothing
differing (``benchmarks/bench_significance.py``; docs/measurements/exact-2026-12-04.txt): the
whole confirmation, 3 of 7 search values confirmed, adopts wrongly in 2.9-3.3% of runs at noise
sigma 0.1-0.3 (4.4-6.0% on the bootstrap alone; 12.7-19.7% when the search value was pooled and
each candidate judged at the family's level); the whole product replayed with every
configuration alike (``whole_run --null``), 4-5% (5-5.5% with the extension round: 11 of 200,
5 of 100; a chance drift call and its scaling, which is not exact, make most of the rest).
``k`` only grows over nights: a study continued night after night gets harder to adopt from,
and a report re-made on night 2 may call night 1's candidate unclear.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.evidence import significance as sig
from autotune.experiment.models import Experiment, Setting
from autotune.study import storage as st
from autotune.study.confirmation.candidates import BASELINE, Pick
from autotune.study.confirmation.standing import (
    MIN_RUNS,
    judged,
    last_round,
    read_standing,
    searched_values,
)
from autotune.study.kinds import TrialKind
from autotune.study.objective import directions

log = logging.getLogger(__name__)

LOOK_RUNS = MIN_RUNS + 1
"""Runs of the leader before an early look may decide. An early look holds at most
``INTERIM_ALPHA`` = 1%, and "better" needs the exact rank test at that level
(``significance.separation_p``): 3 runs against 6 (3 baseline repeats and one a round) separate
by chance with probability 1 / C(9, 3) = 1.2%, so a look on 3 runs could never call it; 4
against 7 do with 0.30%. It is a count, not a computation: with more baseline repeats 3 runs
might pass at 1% (3 against 7: 0.83%), and with 4 or more candidates (1% / 4 each) or several
deciding looks a look may spend a share that 4 runs cannot reach; both only make the
confirmation more careful than it could be, never less. A look on fewer runs does not stop on
"equivalent" either: a look spends its share on any call, so one that can call only one side
would still spend it."""

INTERIM_ALPHA = 0.01
"""The share of alpha (of ``1 - significance.CONFIDENCE`` = 5%) the looks before the verdict
that can decide spend between them; the verdict spends the rest, all of it when none can
(module docstring)."""


@dataclass(frozen=True)
class LookLevels:
    """The confidence of the looks of one sequential confirmation."""

    interim: float
    """Each look after rounds 1 .. looks - 1 (1.0 when there are none)."""
    verdict: float
    """The look after the last round: the report's verdict."""


def look_levels(looks: int, silent: int = 0) -> LookLevels:
    """The levels of ``looks`` looks such that a wrong decisive call at any of them has
    probability at most ``1 - significance.CONFIDENCE`` (module docstring). Pure.

    ``silent``: how many of the first looks cannot decide whatever the runs say (the leader has
    fewer than ``LOOK_RUNS`` runs there: ``silent_looks``). They spend nothing; when no early
    look can decide, the verdict gets the whole 5%."""
    if looks < 1:
        raise ValueError("looks must be >= 1")
    if silent < 0:
        raise ValueError("silent must be >= 0")
    alpha = 1 - sig.CONFIDENCE
    deciding = max(0, looks - 1 - silent)
    if deciding == 0:
        return LookLevels(interim=1.0, verdict=sig.CONFIDENCE)
    return LookLevels(interim=1 - INTERIM_ALPHA / deciding, verdict=1 - (alpha - INTERIM_ALPHA))


def silent_looks(looks: int, prior: int) -> int:
    """How many of the first ``looks - 1`` early looks cannot decide when no candidate has more
    than ``prior`` confirmation runs before this confirmation starts: each round gives a
    configuration at most one run, so after round ``r`` the leader has at most ``prior + r``,
    and an early look with fewer than ``LOOK_RUNS`` calls nothing (``undecided``). It depends
    only on what was measured before tonight's first round, so the split stays fixed in
    advance. Pure."""
    return min(max(0, looks - 1), max(0, LOOK_RUNS - 1 - prior))


def undecided(
    best: Sequence[float], baseline: Sequence[float], runner_up: Sequence[float] | None,
    *, levels: LookLevels, metric: str, direction: sig.Direction,
    searched: tuple[Sequence[float], Sequence[float]] = ((), ()),
    rank_alpha: tuple[float | None, float | None] = (None, None),
    own: tuple[Sequence[float], Sequence[float]] = ((), ()),
) -> list[str]:
    """Which comparisons one early look leaves open: ``BASELINE`` and/or ``"runner-up"`` ([]
    when the confirmation may stop). Pure.

    - The best against the baseline is decided when its interval at ``levels.interim`` says
      "better" or "equivalent" on at least ``LOOK_RUNS`` runs of the best (``silent_looks``),
      and its interval at
      ``levels.verdict``, the level the report then judges these runs at, says the same: an
      "equivalent" at 99.5% that 96% calls "better" would stop on one call and be reported as
      another, a 4% look the split does not pay for.
    - The runner-up does not matter once the best is decided "better": the report adopts the
      best mean among the feasible candidates called better (``significance.typical``), and
      the best is the best mean of tonight's feasible candidates (``read_standing``), so the
      runner-up's runs cannot change the verdict or the configuration adopted (a candidate of
      an earlier night, with a better mean and called better, still can: the report judges
      it at the verdict's level). Measuring the runner-up until separated was priced and
      dropped: 0.7 simulated minutes a run; within-10% a point either way on the demo grids
      and 3 points lower on the outside service (12-03b/c/d 97/93/89% with those rounds,
      96/94/90% without; inventory 76% against 73%; docs/measurements/choice-2026-12-03.txt).
      After the looks, a tie-break may still give both one or two more runs
      (``tiebreak_round``): only when the report would call both better and their means are
      within 10%.
    - Otherwise the runner-up is decided when the best is separated from it at
      ``levels.interim`` and the report's call on the runner-up against the baseline is not
      "unclear" and the same at both levels: the report adopts the best among every candidate
      called better, and says INCONCLUSIVE while one is unclear. Candidates beyond the
      runner-up (the third of ``top``, an earlier night's) are not looked at: their 1 or 2 runs
      rarely decide anything.
    """
    def outcome(a: Sequence[float], b: Sequence[float], confidence: float) -> str:
        # As the report calls it: "better" needs MIN_RUNS a side, "equivalent" does not.
        return sig.compare(a, b, metric=metric, direction=direction, confidence=confidence,
                           min_runs=MIN_RUNS).outcome

    def against(a: Sequence[float], search: Sequence[float], confidence: float,
                alpha: float | None, extra: Sequence[float]) -> str:
        # As the report judges a candidate (significance.judge; ``alpha``: its rank test's
        # level after an extension round, Extension, which only ever lowers it, and ``extra``
        # the baseline's runs in that round, which count for it alone).
        return sig.judge(a, search, [*baseline, *extra], metric=metric, direction=direction,
                         confidence=confidence, min_runs=MIN_RUNS, rank_alpha=alpha).outcome

    # A look at 100% is one the split gave nothing (``silent_looks``): it never decides.
    call = (against(best, searched[0], levels.interim, rank_alpha[0], own[0])
            if len(best) >= LOOK_RUNS and levels.interim < 1.0 else "unclear")
    todo = ([] if call != "unclear"
            and call == against(best, searched[0], levels.verdict, rank_alpha[0], own[0])
            else [BASELINE])
    # When the best is better the report adopts it (both rank candidates by the mean of every
    # run, significance.typical): the runner-up cannot change the verdict.
    if runner_up is not None and not (call == "better" and not todo):
        separated = (min(len(best), len(runner_up)) >= MIN_RUNS
                     and outcome(best, runner_up, levels.interim) != "unclear")
        last = against(runner_up, searched[1], levels.verdict, rank_alpha[1], own[1])
        final = last != "unclear" and last == against(runner_up, searched[1], levels.interim,
                                                      rank_alpha[1], own[1])
        if not (separated and final):
            todo.append("runner-up")
    return todo



def sequential_round(
    exp: Experiment, studies: st.Studies, candidates: Sequence[Pick], levels: LookLevels,
) -> list[dict[str, Any]]:
    """The next round of the sequential confirmation, or [] when the look after the last round
    is decisive (module docstring; ``confirm`` stops after ``repeats`` rounds). The round holds
    the best and what is not yet separated from it: the baseline, the runner-up. Its number
    follows every confirmation round of the study (a continued study keeps earlier nights')."""
    direction = directions(exp)[0]
    standing = read_standing(exp, studies, candidates)
    ranked, values, baseline, steady = (standing.ranked, standing.values, standing.baseline,
                                        standing.steady)
    # Each candidate at the level the report will judge it: Bonferroni over every candidate
    # it judges (module docstring).
    k = judged(studies)
    levels = LookLevels(interim=sig.each_of(levels.interim, k),
                        verdict=sig.each_of(levels.verdict, k))
    done = last_round(studies)
    if not ranked or not baseline:
        return []
    best, metric = ranked[0], exp.goals[0].label
    runner_up = ranked[1] if len(ranked) > 1 else None
    # An extended candidate is judged as the report judges it: at its extension's level
    # (Extension.level_for) against the baseline with that round's runs.
    alpha = 1 - levels.verdict
    pending = undecided(values[best.trial], baseline,
                        None if runner_up is None else values[runner_up.trial],
                        levels=levels, metric=metric, direction=direction,
                        searched=(searched_values(studies, best.settings, steady),
                                  () if runner_up is None
                                  else searched_values(studies, runner_up.settings, steady)),
                        rank_alpha=(standing.rank_alpha(best.trial, alpha),
                                    None if runner_up is None
                                    else standing.rank_alpha(runner_up.trial, alpha)),
                        own=(standing.own(best.trial),
                             () if runner_up is None else standing.own(runner_up.trial)))
    if not pending:
        log.info("confirmation decided after round %d at %.4g%% confidence: %s", done,
                 levels.interim * 100, sig.describe(sig.judge(
                     values[best.trial], searched_values(studies, best.settings, steady),
                     standing.against(best.trial), metric=metric, direction=direction,
                     confidence=levels.interim, min_runs=MIN_RUNS,
                     rank_alpha=standing.rank_alpha(best.trial, alpha))))
        return []
    todo: list[tuple[int | str, dict[str, Setting]]] = []
    if BASELINE in pending:
        todo.append((BASELINE, exp.baseline_settings()))
    if runner_up is not None and "runner-up" in pending:
        todo.append((runner_up.trial, runner_up.settings))
    log.info("round %d undecided: one more round of #%d and %s", done, best.trial,
             ", ".join(c if c == BASELINE else f"#{c}" for c, _ in todo))
    todo.append((best.trial, best.settings))
    return [{"kind": TrialKind.CONFIRM.value, "settings": settings, "candidate": candidate,
             "round": done + 1, "sequential": True} for candidate, settings in todo]
