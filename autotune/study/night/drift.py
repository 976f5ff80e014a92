"""The drift check: whether the last adopted recommendation still beats the production setting
tonight. A recommendation measured on an earlier night can stop being the best when the service,
its load or its platform moves; the check says so instead of silently keeping it.

**Drift check.** The last recommendation (the most recent finished night whose verdict was
"adopt", in any study of the experiment) and the production setting (``baseline.params``: "the
settings in production today") are re-measured against each other in interleaved rounds: each
round measures both once, in a shuffled order (``repeats`` rounds, queued before the search, so
a night cut short still has them); then, while production may still be better (or a side has
no run yet: ``more_rounds``), more rounds until ``extra`` more runs are spent. Only tonight's
drift runs count (older measurements would mask a drift). The comparison is the report's:
relative improvement of the median, 95% bootstrap CI, and "better" also needs the exact rank
test (``significance.separation_p``).

- **still best**: the recommendation is significantly better than production (rank test at 5%);
- **drifted**: production is significantly better than the recommendation (the same call the
  other way round), what ``--fail-on-drift`` alerts on. Each look of the check may call it, so
  the looks share the 5% (``drift_level``): when nothing differs, a night alerts at most 5% of
  the time whatever look it stops at (a 5% rank test at every look alerted 5.6% of the time,
  docs/measurements/drift-alert-2026-12-07.txt);
- **inconclusive**: otherwise (also when they are equivalent within the practical margin).

Skipped, and said so, when there is no earlier recommendation, when it equals the production
setting, when it lies outside the parameter space, or with ``--no-confirm``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import optuna
from optuna.trial import TrialState

from autotune.evidence import significance as sig
from autotune.experiment.models import Experiment
from autotune.study import storage as st
from autotune.study.kinds import TrialKind
from autotune.study.loop import DeadlineReached, StudyRunner
from autotune.study.night.opening import in_space, settings_text
from autotune.study.objective import directions
from autotune.study.optuna_private import trial_id
from autotune.study.space import settings_key

log = logging.getLogger(__name__)

DriftStatus = Literal["still best", "drifted", "inconclusive", "skipped"]
PRODUCTION, RECOMMENDATION = "production", "recommendation"
ALPHA = 1 - sig.CONFIDENCE
"""The chance of a "drifted" alert on a night when nothing differs, at most."""


@dataclass(frozen=True)
class Drift:
    status: DriftStatus
    text: str
    recommendation: dict[str, Any] | None = None
    """The last recommendation checked: night, study, settings."""
    comparison: sig.Comparison | None = None
    """The recommendation against production (positive: the recommendation is better)."""
    runs: dict[str, list[float]] = field(default_factory=dict)
    settled: bool = True
    """Whether more runs tonight could not change the status's meaning: "still best",
    "drifted", or neither better than the other by the practical margin (``more_rounds``)."""
    cut: str | None = None
    """Why its adaptive rounds stopped before their end (``loop.DeadlineReached``): judged on
    the runs done, at the level fixed for the planned looks."""

    def record(self) -> dict[str, Any]:
        c = self.comparison
        return {
            "status": self.status, "text": self.text, "recommendation": self.recommendation,
            "runs": self.runs,
            "comparison": None if c is None else {
                "metric": c.metric, "direction": c.direction, "improvement": c.improvement,
                "ci95": [c.low, c.high], "confidence": c.confidence, "outcome": c.outcome,
                "recommendation_median": c.candidate_median,
                "production_median": c.baseline_median,
                "n": [c.n_candidate, c.n_baseline]},
        }


def drift_skip_reason(exp: Experiment, recommendation: Mapping[str, Any] | None,
                      confirming: bool) -> str | None:
    """Why there is no drift check tonight, or None when there is one."""
    if not confirming:
        return "no re-measurements in this run (--no-confirm)"
    if recommendation is None:
        return "no earlier night adopted a recommendation"
    if settings_key(recommendation["settings"]) == settings_key(exp.baseline_settings()):
        return ("the last recommendation is the production setting (baseline.params): the "
                "search's verdict compares it with everything else")
    if not in_space(exp, recommendation["settings"]):
        return (f"the last recommendation ({settings_text(recommendation['settings'])}) is "
                "outside the experiment's parameter space")
    return None


def drift_round(exp: Experiment, recommendation: Mapping[str, Any], night: str, number: int,
                rng: random.Random) -> list[dict[str, Any]]:
    """One interleaved round: production and the recommendation once each, shuffled."""
    pair = [(PRODUCTION, exp.baseline_settings()),
            (RECOMMENDATION, dict(recommendation["settings"]))]
    return [{"kind": TrialKind.DRIFT, "night": night, "candidate": who, "settings": settings,
             "round": number, "recommended_on": recommendation["night"]}
            for who, settings in rng.sample(pair, k=2)]


def drift_values(reference: optuna.Study, night: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {PRODUCTION: [], RECOMMENDATION: []}
    for t in reference.get_trials(deepcopy=False, states=[TrialState.COMPLETE]):
        if (t.user_attrs.get("kind") == TrialKind.DRIFT and t.user_attrs.get("night") == night
                and t.values and t.user_attrs.get("candidate") in out):
            out[t.user_attrs["candidate"]].append(float(t.values[0]))
    return out


def drift_level(repeats: int, extra: int, alpha: float = ALPHA) -> float:
    """The rank test's level for a "drifted" call at each look of the check. Pure.

    The check looks after its ``repeats`` rounds and after each adaptive round (``extra`` runs,
    two a round): up to ``1 + extra // 2`` looks, fixed before the first, each of which may
    alert. A wrong alert at any of them has probability at most the sum of their levels
    (Bonferroni), and a look whose runs cannot pass the exact rank test at its level spends
    nothing (``n`` runs a side give at best 1 / C(2n, n)): the level is the largest
    ``alpha / k`` at which at most ``k`` looks can pass. 3 rounds and ``--extra 6``: 3 runs
    against 3 pass at 5% at best (1/20), 4 against 4 at 1.43% (1/70): looks 2-4 can alert,
    1.67% each. Stopping at "still best" or "inconclusive" only gives up later looks."""
    sizes = [repeats + k for k in range(extra // 2 + 1)]
    for k in range(1, len(sizes)):
        level = alpha / k
        if sum(1 for n in sizes if n >= 1 and 1 / math.comb(2 * n, n) <= level * (1 + 1e-9)) <= k:
            return level
    return alpha / len(sizes)


def more_rounds(now: Drift, spent: int, extra: int) -> bool:
    """Whether the check measures another round: it is not ``settled`` and two more runs fit
    in ``extra``. Pure. (Until 2026-12-07 it stopped as soon as the recommendation was "not
    better", also when production looked better but not significantly: a drift was then
    called at the first look or never.)"""
    return spent + 2 <= extra and not now.settled


def judge_drift(recommended: Sequence[float], production: Sequence[float], *, metric: str,
                direction: sig.Direction, recommendation: Mapping[str, Any],
                production_settings: Mapping[str, Any], alpha: float = ALPHA,
                resamples: int = sig.RESAMPLES) -> Drift:
    """The drift verdict from tonight's runs (module docstring); ``alpha``: the rank test's
    level for "drifted" at this look (``drift_level``); ``resamples``: the bootstrap's (fewer
    only in benchmarks/bench_drift_alert.py, for speed). Pure."""
    runs = {RECOMMENDATION: list(recommended), PRODUCTION: list(production)}
    rec_text = f"the last recommendation ({settings_text(recommendation['settings'])}, " \
               f"adopted on night {recommendation['night']})"
    if not recommended or not production:
        return Drift("inconclusive", f"inconclusive: {rec_text} or production has no completed "
                     "drift run tonight", dict(recommendation), None, runs, settled=False)
    c = sig.compare(recommended, production, metric=metric, direction=direction,
                    resamples=resamples)
    if c.outcome == "better":
        return Drift("still best", f"still best: {rec_text} beats production: "
                     f"{sig.describe(c)}", dict(recommendation), c, runs)
    back = sig.compare(production, recommended, metric=metric, direction=direction,
                       rank_alpha=alpha, resamples=resamples)
    if back.outcome == "better":
        return Drift("drifted", f"drifted: production ({settings_text(production_settings)}) "
                     f"is now significantly better than {rec_text}: {sig.describe(back)}",
                     dict(recommendation), c, runs)
    why = ("too noisy to say" if c.outcome == "unclear" else
           f"the recommendation no longer beats production by {sig.PRACTICAL:.0%} or more, and "
           "production is not significantly better either")
    # Settled when neither can beat the other by the margin; while production may still be
    # better (its interval reaches past the margin) more runs can show a drift.
    return Drift("inconclusive", f"inconclusive: {why}: {rec_text} against production: "
                 f"{sig.describe(c)}", dict(recommendation), c, runs,
                 settled=c.outcome == "not better" and back.outcome == "not better")


def retire_drift_runs(studies: st.Studies, records: Sequence[Mapping[str, Any]]) -> int:
    """Fail the queued drift runs of nights that are over (cut short by the deadline or a
    signal): they answered those nights' question, not tonight's. A night still "running" may
    be another worker's: its runs stay queued."""
    over = {n.get("night") for n in records if n.get("status") != "running"}
    retired = 0
    for t in studies.reference.get_trials(deepcopy=False, states=[TrialState.WAITING]):
        if t.user_attrs.get("kind") == TrialKind.DRIFT and t.user_attrs.get("night") in over:
            studies.storage.set_trial_user_attr(
                trial_id(t), "failure", f"not run: night {t.user_attrs['night']} ended first")
            if studies.storage.set_trial_state_values(trial_id(t), state=TrialState.FAIL):
                retired += 1
    return retired


def check_drift(exp: Experiment, studies: st.Studies, runner: StudyRunner, night: str,
                recommendation: Mapping[str, Any] | None, skip: str | None, *, extra: int,
                rng: random.Random, first_round: int) -> Drift:
    """Tonight's verdict on the last recommendation, after the queued rounds (run before the
    search; ``first_round - 1`` of them): more rounds while production may still be better
    (``more_rounds``), up to ``extra`` runs, every look's "drifted" at ``drift_level``."""
    if skip is not None or recommendation is None:
        return Drift("skipped", f"no drift check: {skip}", None if recommendation is None
                     else dict(recommendation))
    metric, direction = exp.goals[0].label, directions(exp)[0]
    level = drift_level(first_round - 1, extra if extra >= 2 else 0)

    def judge() -> Drift:
        values = drift_values(studies.reference, night)
        return judge_drift(values[RECOMMENDATION], values[PRODUCTION], metric=metric,
                           direction=direction, recommendation=recommendation,
                           production_settings=exp.baseline_settings(), alpha=level)

    spent, number = 0, first_round

    def next_round() -> list[dict[str, Any]]:
        nonlocal spent, number
        if not more_rounds(judge(), spent, extra):
            return []
        entries = drift_round(exp, recommendation, night, number, rng)
        spent, number = spent + 2, number + 1
        log.info("drift not yet decided: one more round")
        return entries

    if extra >= 2:
        first = next_round()
        if first:
            try:
                runner.run_reference(studies, first, then=next_round)
            except DeadlineReached as e:
                # Fewer looks than the level was fixed for: the judgement stays valid.
                return dataclasses.replace(judge(), cut=str(e))
    return judge()
