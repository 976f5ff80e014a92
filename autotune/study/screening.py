"""Screening: a search trial whose first seconds show it is hopeless ends there.

The measured surfaces span 50x between the best and the worst configuration (GOGC=25 under a
1-CPU limit: 22-108 ms against 5.5 ms, docs/measurements/grid-local-2026-12-01.txt), so a full
window is mostly spent confirming what its first seconds already said. With
``study.screening: {after, factor}`` a search trial reads its objective over the window's first
``after`` seconds, while the stress still runs (``trial._early``), and is screened out when

    value > F x incumbent        (minimize; maximize: value < incumbent / F)

- **incumbent**: the best feasible objective value measured so far, over the completed search
  trials and the baseline repeats (full windows).
- **F** = max(``factor``, 1 + 2 x noise), noise = the baseline repeats' relative range
  ``(max - min) / median`` (``night.early_stop.baseline_noise``): a candidate is never screened
  out on less evidence than the noise the baseline showed. The 2: the short read and the
  incumbent each carry that noise.

Not judged (the trial goes on to its full window): with no feasible value yet, an incumbent
that is not positive, a read that failed, or a host that other processes kept busy (the noise
guard). Baseline repeats and confirmation runs are never screened. A screened trial is stored
as Optuna's PRUNED with the short read as its value (samplers that learn from pruned trials,
TPE, see it as bad); it counts against ``study.trials`` and the early stop as a trial that did
not improve, and is never a candidate for the confirmation.

The whole-run replay (``benchmarks/whole_run.py --screening``) measures what it saves and
whether it ever screened out a configuration within 10% of the best, on grids that recorded
short reads (``benchmarks/grid_local.py --early``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from autotune.experiment.models import Experiment
from autotune.study.kinds import TrialKind
from autotune.study.night.early_stop import baseline_noise, baseline_values
from autotune.study.objective import directions


@dataclass(frozen=True)
class Rule:
    """The screen of one search trial (``trial.Screen``): fixed when the trial starts."""

    after: float
    incumbent: float
    factor: float
    """F of the module doc: the configured factor, or the noise's when larger."""
    minimize: bool
    terms: Mapping[str, float]
    """The objective's metrics and weights."""

    @property
    def checkpoints(self) -> tuple[float, ...]:
        return (self.after,)

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(self.terms)

    @property
    def threshold(self) -> float:
        return self.incumbent * self.factor if self.minimize else self.incumbent / self.factor

    def judge(self, after: float, metrics: Mapping[str, float]) -> str | None:
        value = sum(weight * metrics[name] for name, weight in self.terms.items())
        worse = value > self.threshold if self.minimize else value < self.threshold
        if not worse:
            return None
        return (f"screened after {after:g}s: {value:.4g} is worse than {self.factor:.3g}x the "
                f"best so far ({self.incumbent:.4g}; threshold {self.threshold:.4g}); "
                "study.screening")


def rule(exp: Experiment, search: optuna.Study, reference: optuna.Study) -> Rule | None:
    """The screen for the next search trial, or None when nothing can be judged yet."""
    config = exp.study.screening
    if config is None or len(exp.goals) != 1:
        return None
    minimize = directions(exp)[0] == "minimize"
    values = [float(t.values[0]) for study in (search, reference)
              for t in study.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
              if t.values and t.user_attrs.get("kind", TrialKind.SEARCH) in
              (TrialKind.SEARCH, TrialKind.BASELINE)
              and all(v <= 0 for v in t.constraints.values())]
    if not values:
        return None
    incumbent = min(values) if minimize else max(values)
    if incumbent <= 0:
        return None  # "many times" means nothing around zero
    noise = baseline_noise(baseline_values(reference)) or 0.0
    return Rule(after=config.after, incumbent=incumbent,
                factor=max(config.factor, 1 + 2 * noise), minimize=minimize,
                terms=dict(exp.goals[0].terms))
