"""The night's budget: how many search trials fit before ``study.deadline``, after the trials
kept back for the confirmation and the drift check, so that a night cut short by the deadline
still ends with a verdict.

**Budget that fits the night** (runs with ``study.deadline``). Trial duration = the longest of
this run's measured trials, else of the last ``DURATION_WINDOW`` completed trials recorded in
the study (or in the study it replaced), else the experiment's estimate (warm-up + window +
10 s). Kept back for after the search: the confirmation (``confirm_reserve``) and the drift
check's adaptive rounds (``extra``). A search trial starts only if it and the
kept-back trials fit before the deadline; the night's plan (how many search trials fit) is
logged and recorded. The study's own budget (``study.trials``) still bounds the total; what
does not fit tonight continues tomorrow in the same study when the environment is unchanged.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from autotune.evidence.extension import MOST_ADDED
from autotune.evidence.tiebreak import TIE_BREAKS
from autotune.experiment.models import Experiment
from autotune.study import storage as st

EXTENSION_TRIALS = 2 * MOST_ADDED
"""The sequential confirmation's extension round: the leader and the baseline up to
``MOST_ADDED`` times more each (``autotune.study.confirmation.extension``), kept back for
every sequential confirmation (it is given only when the planned rounds leave the leader
undecided, which a plan cannot know)."""

TIEBREAK_TRIALS = 2 * TIE_BREAKS
"""The sequential confirmation's tie-breaks: one more run of each of two candidates, up to
``TIE_BREAKS`` times (``autotune.study.confirmation.tiebreak``). Never with an extension in
one confirmation: ``confirm`` gives no tie-break after an extension (an extended leader that
became better could otherwise meet a rival the tie-break might still make better). The
reserve keeps back the larger of the two."""

DURATION_WINDOW = 10
"""Recorded trials whose longest duration sizes the night."""
ESTIMATE_OVERHEAD = 10.0


@dataclass(frozen=True)
class Budget:
    """How the night's time is spent (only with ``study.deadline``)."""

    deadline: float | None
    trial_seconds: float
    measured: str
    """Where ``trial_seconds`` comes from."""
    reserved: int
    """Trials kept for after the search (confirmation, adaptive drift rounds)."""
    queued: int
    """Reference trials (baseline repeats, drift rounds) to run before the search."""
    remaining: int
    """Search trials left in the study's budget."""
    search_trials: int | None
    """Search trials that fit tonight (None without a deadline), at most ``remaining``."""

    def text(self) -> str:
        if self.remaining == 0:
            return "the study's search budget is spent: no search tonight"
        if self.deadline is None or self.search_trials is None:
            return (f"no study.deadline: up to {self.remaining} search trial(s), what is left "
                    "of the study's budget")
        return (f"{self.search_trials} of the {self.remaining} search trial(s) left in the "
                f"study's budget fit before the {duration_text(self.deadline)} deadline (a trial "
                f"takes {duration_text(self.trial_seconds)}: {self.measured}; {self.queued} "
                f"reference trial(s) first, {self.reserved} kept for the confirmation and the "
                "drift check)")


def recorded_seconds(*groups: Sequence[optuna.Study]) -> tuple[list[float], str]:
    """Durations of the last completed trials recorded in the first group of studies that has
    any (the current search and reference studies, then the replaced study)."""
    for group in groups:
        done = [t for study in group
                for t in study.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
                if isinstance((t.user_attrs.get("record") or {}).get("seconds"), int | float)]
        done.sort(key=lambda t: t.datetime_complete or dt.datetime.min)
        if done:
            last = done[-DURATION_WINDOW:]
            return ([float(t.user_attrs["record"]["seconds"]) for t in last],
                    f"the longest of the last {len(last)} recorded in {group[0].study_name}")
    return [], ""


def fit_trials(deadline: float, elapsed: float, trial_seconds: float, reserved: int) -> int:
    """Search trials that fit in what is left of the night, after the reserved ones. Pure."""
    if trial_seconds <= 0:
        raise ValueError("trial_seconds must be > 0")
    return max(0, math.floor((deadline - elapsed) / trial_seconds) - reserved)


def plan_budget(exp: Experiment, studies: st.Studies, *, reserved: int, queued: int,
                remaining: int, members: int = 1) -> Budget:
    """``members``: a pool's size (``autotune.study.pool``): its members search side by side,
    each in the night left after the trials queued before the search and the reserved ones
    (the confirmation runs on one member after the search)."""
    groups: list[Sequence[optuna.Study]] = [(studies.search, studies.reference)]
    if studies.previous is not None:
        groups.append((studies.previous,))
    seconds, where = recorded_seconds(*groups)
    if seconds:
        per = max(seconds)
    else:
        per, where = (exp.measured_seconds + ESTIMATE_OVERHEAD,
                      "estimated: warm-up + window (per chaos scenario) + 10 s, nothing "
                      "measured yet")
    deadline = exp.study.deadline
    fit = None
    if deadline is not None:
        fit = min(remaining,
                  members * max(0, fit_trials(deadline, 0.0, per, reserved) - queued))
    return Budget(deadline=deadline, trial_seconds=per, measured=where, reserved=reserved,
                  queued=queued, remaining=remaining, search_trials=fit)


def confirm_reserve(top: int, repeats: int, extra: int, *, sequential: bool = False) -> int:
    """Trials kept back for the confirmation, at most. Fixed: ``repeats`` runs of the ``top``
    candidates and of the baseline, and its ``extra`` adaptive runs. Sequential: one round of
    them, then up to ``repeats - 1`` rounds of the best, the runner-up and the baseline, then
    perhaps one extension round of the best and the baseline (``EXTENSION_TRIALS``,
    ``autotune.study.confirmation.extension``) or the tie-breaks (``TIEBREAK_TRIALS``)."""
    if sequential:
        return ((top + 1) + (min(top, 2) + 1) * (repeats - 1)
                + max(EXTENSION_TRIALS, TIEBREAK_TRIALS))
    return repeats * (top + 1) + extra


def duration_text(seconds: float) -> str:
    """Seconds as the budget's messages show them (also the stop rule's)."""
    seconds = max(0.0, seconds)
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.2g} s"

