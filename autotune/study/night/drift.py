"""The drift check: whether the last adopted recommendation still beats the production setting
tonight. A recommendation measured on an earlier night can stop being the best when the service,
its load or its platform moves; the check says so instead of silently keeping it.

**Drift check.** The last recommendation (the most recent finished night whose verdict was
"adopt", in any study of the experiment) and the production setting (``baseline.params``: "the
settings in production today") are re-measured against each other in interleaved rounds: each
round measures both once, in a shuffled order (``repeats`` rounds, queued before the search, so
a night cut short still has them); then, while the comparison is unclear, more rounds until
``extra`` more runs are spent. Only tonight's drift runs count (older measurements would mask a
drift). The comparison is the report's: relative improvement of the median, 95% bootstrap CI,
and "better" also needs the exact rank test at 5% (``significance.separation_p``).

- **still best**: the recommendation is significantly better than production;
- **drifted**: production is significantly better than the recommendation (the same call the
  other way round: what ``--fail-on-drift`` alerts on is held to the same 5%);
- **inconclusive**: otherwise (also when they are equivalent within the practical margin).

Skipped, and said so, when there is no earlier recommendation, when it equals the production
setting, when it lies outside the parameter space, or with ``--no-confirm``.
"""

from __future__ import annotations

import logging
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
from autotune.study.loop import StudyRunner
from autotune.study.night.opening import in_space, settings_text
from autotune.study.objective import directions
from autotune.study.optuna_private import trial_id
from autotune.study.space import settings_key

log = logging.getLogger(__name__)

DriftStatus = Literal["still best", "drifted", "inconclusive", "skipped"]
PRODUCTION, RECOMMENDATION = "production", "recommendation"


@dataclass(frozen=True)
class Drift:
    status: DriftStatus
    text: str
    recommendation: dict[str, Any] | None = None
    """The last recommendation checked: night, study, settings."""
    comparison: sig.Comparison | None = None
    """The recommendation against production (positive: the recommendation is better)."""
    runs: dict[str, list[float]] = field(default_factory=dict)

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


def judge_drift(recommended: Sequence[float], production: Sequence[float], *, metric: str,
                direction: sig.Direction, recommendation: Mapping[str, Any],
                production_settings: Mapping[str, Any]) -> Drift:
    """The drift verdict from tonight's runs (module docstring). Pure."""
    runs = {RECOMMENDATION: list(recommended), PRODUCTION: list(production)}
    rec_text = f"the last recommendation ({settings_text(recommendation['settings'])}, " \
               f"adopted on night {recommendation['night']})"
    if not recommended or not production:
        return Drift("inconclusive", f"inconclusive: {rec_text} or production has no completed "
                     "drift run tonight", dict(recommendation), None, runs)
    c = sig.compare(recommended, production, metric=metric, direction=direction)
    if c.outcome == "better":
        return Drift("still best", f"still best: {rec_text} beats production: "
                     f"{sig.describe(c)}", dict(recommendation), c, runs)
    back = sig.compare(production, recommended, metric=metric, direction=direction)
    if back.outcome == "better":
        return Drift("drifted", f"drifted: production ({settings_text(production_settings)}) "
                     f"is now significantly better than {rec_text}: {sig.describe(back)}",
                     dict(recommendation), c, runs)
    why = ("too noisy to say" if c.outcome == "unclear" else
           f"the recommendation no longer beats production by {sig.PRACTICAL:.0%} or more, and "
           "production is not significantly better either")
    return Drift("inconclusive", f"inconclusive: {why}: {rec_text} against production: "
                 f"{sig.describe(c)}", dict(recommendation), c, runs)


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
    search): more rounds while the comparison is unclear, up to ``extra`` runs."""
    if skip is not None or recommendation is None:
        return Drift("skipped", f"no drift check: {skip}", None if recommendation is None
                     else dict(recommendation))
    metric, direction = exp.goals[0].label, directions(exp)[0]

    def judge() -> Drift:
        values = drift_values(studies.reference, night)
        return judge_drift(values[RECOMMENDATION], values[PRODUCTION], metric=metric,
                           direction=direction, recommendation=recommendation,
                           production_settings=exp.baseline_settings())

    spent, number = 0, first_round

    def next_round() -> list[dict[str, Any]]:
        nonlocal spent, number
        now = judge()
        if spent + 2 > extra or (now.comparison is not None
                                 and now.comparison.outcome != "unclear"):
            return []
        entries = drift_round(exp, recommendation, night, number, rng)
        spent, number = spent + 2, number + 1
        log.info("drift not yet decided: one more round")
        return entries

    if extra >= 2:
        first = next_round()
        if first:
            runner.run_reference(studies, first, then=next_round)
    return judge()
