"""Read what the studies hold and hand it to the pure ``summarize``."""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import __version__
from autotune.experiment.models import Experiment
from autotune.report.model import Report
from autotune.report.summarize import StudyData, summarize
from autotune.study.loop import is_search
from autotune.study.status import status_data
from autotune.study.storage import Studies

MIN_IMPORTANCE_TRIALS = 5
"""Below this, PED-ANOVA's top quantile is one or two trials: importances would be noise."""


def _step(attrs: Mapping[str, Any]) -> str | None:
    """``TrialRow.step`` from a trial's user attrs (the entries ``autotune.study.confirmation``
    queues mark extension and tie-break runs)."""
    if attrs.get("tiebreak"):
        return "tie-break"
    return "extension" if attrs.get("extension") else None


def build_report(exp: Experiment, studies: Studies, *, now: dt.datetime | None = None) -> Report:
    details: dict[tuple[str, int], Mapping[str, Any]] = {}
    for label, study in (("reference", studies.reference), ("search", studies.search)):
        for t in study.get_trials(deepcopy=False):
            details[(label, t.number)] = {"record": t.user_attrs.get("record") or {},
                                          "candidate": t.user_attrs.get("candidate"),
                                          "round": t.user_attrs.get("round"),
                                          "step": _step(t.user_attrs)}
    importance, note = param_importance(exp, studies.search)
    generated = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds")
    return summarize(exp, StudyData(
        status=status_data(exp, studies), details=details, attrs=dict(studies.search.user_attrs),
        importance=importance, importance_note=note, generated=generated, version=__version__,
    ))


def param_importance(exp: Experiment, search: optuna.Study) -> tuple[dict[str, float] | None, str]:
    """PED-ANOVA importances of the primary objective (Optuna's default evaluator, no extra
    dependency, deterministic), or None and why not."""
    trials = [t for t in search.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
              if is_search(t)]
    if len(exp.parameters) < 2:
        return None, "only one parameter: nothing to rank"
    if len(trials) < MIN_IMPORTANCE_TRIALS:
        return None, (f"not computed: needs at least {MIN_IMPORTANCE_TRIALS} complete search "
                      f"trials, the study has {len(trials)}")
    sign = 1.0 if exp.goals[0].direction == "minimize" else -1.0

    def primary(t: FrozenTrial) -> float:
        return sign * float(t.values[0])

    # The evaluator warns when it cannot separate the parameters and returns equal shares.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        importances = optuna.importance.get_param_importances(
            search, target=primary if len(exp.goals) > 1 else None)
    equal = [w for w in caught if "importances will be equal" in str(w.message).lower()]
    if equal:
        return None, f"not computed: {equal[0].message}"
    return {k: float(v) for k, v in importances.items()}, (
        "PED-ANOVA (optuna.importance default) on the primary objective over "
        f"{len(trials)} complete search trials")
