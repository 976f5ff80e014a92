"""The early stop: when the search has stopped finding anything better than the noise, and the
loop's stop rule that applies it before the night's budget. More trials past that point spend
the night without telling more.

**Early stop** (``study.early_stop: K``). Noise = the relative range ``(max - min) / |median|``
of the current study's baseline repeats (the spread of one configuration measured again and
again). The search stops when the last K completed search trials were all chosen by the sampler
(not queued: warm start, prior and design points are spread on purpose and say nothing about the
neighbourhood of the best) and the best feasible value after them is not better than the best
before them by more than the noise, relative to the latter. Not applied with fewer than 2
baseline repeats, no feasible trial before the K, or several objectives. The rule is a function of
the recorded trials, so a resumed study that meets it searches no further.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from autotune.clock import Clock
from autotune.experiment.models import Experiment
from autotune.study import storage as st
from autotune.study.kinds import TrialKind
from autotune.study.night.budget import Budget, duration_text, fit_trials
from autotune.study.objective import directions


def baseline_noise(values: Sequence[float]) -> float | None:
    """The relative range of repeated measurements of one configuration; None below 2 values
    or with a zero median. Pure."""
    if len(values) < 2:
        return None
    med = statistics.median(values)
    if med == 0:
        return None
    return (max(values) - min(values)) / abs(med)


@dataclass(frozen=True)
class SearchPoint:
    number: int
    value: float | None
    """Primary objective; None when infeasible."""
    origin: str


def stalled(points: Sequence[SearchPoint], *, patience: int, noise: float,
            minimize: bool) -> str | None:
    """The early-stop rule (module docstring) over completed search trials in trial order; the
    reason to stop, or None. Pure."""
    if len(points) <= patience:
        return None
    before, window = points[:-patience], points[-patience:]
    if any(p.origin != "sampler" for p in window):
        return None
    sign = 1.0 if minimize else -1.0
    old = [sign * p.value for p in before if p.value is not None]
    if not old:
        return None
    best_before = min(old)
    best_now = min([best_before] + [sign * p.value for p in window if p.value is not None])
    if best_before - best_now > noise * abs(best_before):
        return None
    return (f"converged: the best ({sign * best_before:.4g}) has not improved by more than the "
            f"noise ({noise:.1%}, the baseline repeats' relative range) in the last {patience} "
            f"sampler-chosen trials (#{window[0].number}..#{window[-1].number}); "
            "study.early_stop")


def search_points(exp: Experiment, search: optuna.Study) -> list[SearchPoint]:
    out = []
    # A screened trial (PRUNED, ``study.screening``) did not improve anything.
    for t in sorted(search.get_trials(deepcopy=False,
                                      states=[TrialState.COMPLETE, TrialState.PRUNED]),
                    key=lambda t: t.number):
        if t.user_attrs.get("kind", TrialKind.SEARCH) != TrialKind.SEARCH or not t.values:
            continue
        feasible = (t.state == TrialState.COMPLETE
                    and all(v <= 0 for k, v in t.constraints.items()))
        out.append(SearchPoint(t.number, float(t.values[0]) if feasible else None,
                               str(t.user_attrs.get("origin", "sampler"))))
    return out


def baseline_values(reference: optuna.Study) -> list[float]:
    return [float(t.values[0]) for t in reference.get_trials(deepcopy=False,
                                                            states=[TrialState.COMPLETE])
            if t.user_attrs.get("kind") == TrialKind.BASELINE and t.values]


class NightRule:
    """The loop's ``stop_rule``: the early stop, then the night's budget."""

    def __init__(self, exp: Experiment, clock: Clock, budget: Budget) -> None:
        self.exp, self.clock, self.budget = exp, clock, budget
        self.start = clock.monotonic()

    def __call__(self, studies: st.Studies, trial_seconds: list[float]) -> str | None:
        patience = self.exp.study.early_stop
        if patience is not None and len(self.exp.goals) == 1:
            noise = baseline_noise(baseline_values(studies.reference))
            if noise is not None:
                reason = stalled(search_points(self.exp, studies.search), patience=patience,
                                 noise=noise, minimize=directions(self.exp)[0] == "minimize")
                if reason is not None:
                    return reason
        deadline = self.budget.deadline
        if deadline is None:
            return None
        per = max(trial_seconds) if trial_seconds else self.budget.trial_seconds
        elapsed = self.clock.monotonic() - self.start
        if fit_trials(deadline, elapsed, per, self.budget.reserved) < 1:
            return (f"night budget: another search trial ({per:.0f} s) and the "
                    f"{self.budget.reserved} kept for the confirmation and the drift check "
                    f"would not fit in the {duration_text(deadline - elapsed)} left before "
                    "study.deadline")
        return None
