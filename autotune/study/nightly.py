"""Nightly tuning that learns: one study per environment, warm starts, a drift check, a budget
that fits the night, an early stop, and a record of every night.

**Environment fingerprint.** What the numbers were measured on, from the target's own
``describe()`` (only fields it really reports, and only those that are not None: an unknown
field is absent, never defaulted) plus the experiment's stress profile (``chaos``):

- kubernetes: ``namespace``, ``deployment``, ``container``, ``image`` (the image *reference*:
  the target does not report a digest), ``cpu_limit``, ``cpu_request``;
- local: ``workload``, ``command``, ``cpus``, ``host_cpus``, ``isolation``, ``load`` (the load
  spec; a calibrated rate is measured, not configured, and is left out);
- simulated: ``noise``.

Replicas are left out on purpose (an HPA changes them night to night), and so is everything a
target learns only once a trial ran (the local Go version): the fingerprint is taken before the
first trial. Its id is the first 8 hex digits of the SHA-256 of its canonical JSON.

**Which study.** A run whose environment equals the current study's continues it (a study that
predates environment records is continued and gets one). One that differs starts
``<name>@<environment id>`` (``.2``, ``.3`` when a study the target left earlier holds the name),
**warm-started** from the study it replaces: that study's last adopted recommendation, then its
best distinct feasible search configurations (median of their runs), up to ``WARM_START`` in all,
are enqueued first (origin ``warm-start``), then the usual Go-aware prior and space-filling design
planned around them. Optuna's TPE and GP samplers model only the trials of their own study, and
copying the old trials in (``Study.add_trials``) would make measurements of another environment
count as evidence in this one (budget, best trial, confirmation pools); so the old study informs
the sampler through its best configurations, re-measured here, and the design, which fills the
space away from them. The new study records ``environment`` and ``warm_start`` (from which
study, what changed, what was enqueued) in its user attrs.

**Budget that fits the night** (runs with ``study.deadline``). Trial duration = the longest of
this run's measured trials, else of the last ``DURATION_WINDOW`` completed trials recorded in
the study (or in the study it replaced), else the experiment's estimate (warm-up + window +
10 s). Kept back for after the search: the confirmation (``repeats x (top + 1) + extra`` trials)
and the drift check's adaptive rounds (``extra``). A search trial starts only if it and the
kept-back trials fit before the deadline; the night's plan (how many search trials fit) is
logged and recorded. The study's own budget (``study.trials``) still bounds the total; what
does not fit tonight continues tomorrow in the same study when the environment is unchanged.

**Early stop** (``study.early_stop: K``). Noise = the relative range ``(max - min) / |median|``
of the current study's baseline repeats (the spread of one configuration measured again and
again). The search stops when the last K completed search trials were all chosen by the sampler
(not queued: warm start, prior and design points are spread on purpose and say nothing about the
neighbourhood of the best) and the best feasible value after them is not better than the best
before them by more than the noise, relative to the latter. Not applied with fewer than 2
baseline repeats, no feasible trial before the K, or several objectives. The rule is a function of
the recorded trials, so a resumed study that meets it searches no further.

**Drift check.** The last recommendation (the most recent finished night whose verdict was
"adopt", in any study of the experiment) and the production setting (``baseline.params``: "the
settings in production today") are re-measured against each other in interleaved rounds: each
round measures both once, in a shuffled order (``repeats`` rounds, queued before the search, so
a night cut short still has them); then, while the comparison is unclear, more rounds until
``extra`` more runs are spent. Only tonight's drift runs count (older measurements would mask a
drift). The comparison is the report's: relative improvement of the median, 95% bootstrap CI.

- **still best**: the recommendation is significantly better than production (CI above 0);
- **drifted**: production is significantly better than the recommendation (CI below 0);
- **inconclusive**: otherwise (also when they are equivalent within the practical margin).

Skipped, and said so, when there is no earlier recommendation, when it equals the production
setting, when it lies outside the parameter space, or with ``--no-confirm``.

**Night records.** Every run writes the search study's user attr ``night:<id>`` when it starts,
and again when it ends: environment, how the study was chosen, the budget plan, search trials
run, why the search stopped, the verdict with the objective's medians and interval, the drift
check, and the status (running, finished, interrupted, failed). ``history`` reads them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
import random
import secrets
import socket
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import optuna
from optuna.trial import TrialState

from autotune.clock import Clock
from autotune.evidence import significance as sig
from autotune.experiment.models import Experiment, Setting
from autotune.study import design
from autotune.study import storage as st
from autotune.study.confirm import confirm, top_configurations
from autotune.study.interrupts import Interrupted, shielded
from autotune.study.loop import (
    DESIGN_ATTR,
    RunResult,
    StudyRunner,
    completed_search,
    enqueue_baseline,
    trial_summary,
)
from autotune.study.objective import directions
from autotune.study.space import domain, settings_key

log = logging.getLogger(__name__)

ENVIRONMENT_ATTR = "environment"
WARM_START_ATTR = "warm_start"
NIGHT_PREFIX = "night:"
WARM_START = 3
"""Configurations of the replaced study enqueued first in a new one."""
DURATION_WINDOW = 10
"""Recorded trials whose longest duration sizes the night."""
ESTIMATE_OVERHEAD = 10.0
"""Seconds added to warm-up + window when no trial duration was measured yet (as the loop)."""

TARGET_FIELDS: dict[str, tuple[str, ...]] = {
    "kubernetes": ("namespace", "deployment", "container", "image", "image_ids", "cpu_limit",
                   "cpu_request", "memory_limit", "node_types", "go_version"),
    "local": ("workload", "command", "cpus", "host_cpus", "isolation", "load", "binary_sha256",
              "go_version"),
    "simulated": ("noise",),
}
"""The ``describe()`` fields that identify an environment, per target kind."""


# --- the environment fingerprint ------------------------------------------------------------

@dataclass(frozen=True)
class Environment:
    fields: dict[str, Any]

    @property
    def id(self) -> str:
        return environment_id(self.fields)

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "fields": self.fields}


def environment(exp: Experiment, described: Mapping[str, Any]) -> Environment:
    """The fingerprint of what the target reports and the stress it gets. Pure."""
    kind = str(described.get("kind", exp.target.kind))
    fields: dict[str, Any] = {"target": kind}
    for name in TARGET_FIELDS.get(kind, ()):
        if described.get(name) is not None:
            fields[name] = described[name]
    fields["stress"] = exp.chaos.model_dump(mode="json")
    # Through JSON, so a fingerprint compares equal to the one read back from the storage.
    return Environment(json.loads(json.dumps(fields, sort_keys=True, default=str)))


def environment_id(fields: Mapping[str, Any]) -> str:
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def environment_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``field: old -> new`` for every field that differs; a field one side lacks is
    ``absent`` there. Pure."""
    out = []
    for name in sorted(old.keys() | new.keys()):
        if old.get(name) != new.get(name) or (name in old) != (name in new):
            before = _shown(old[name]) if name in old else "absent"
            after = _shown(new[name]) if name in new else "absent"
            out.append(f"{name}: {before} -> {after}")
    return out


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


# --- opening tonight's study -----------------------------------------------------------------

Opened = Literal["new", "continued", "new environment"]


@dataclass(frozen=True)
class Opening:
    studies: st.Studies
    environment: Environment
    opened: Opened
    previous: str | None
    """The study a new environment's study replaced."""
    changes: tuple[str, ...]
    warm_start: tuple[dict[str, Any], ...]
    """What this run enqueued from the replaced study (empty when another worker did)."""


def open_night(
    exp: Experiment, url: str, described: Mapping[str, Any], *, budget: int,
    new_study: bool = False,
) -> Opening:
    env = environment(exp, described)
    changes: list[str] = []

    def diverged(current: optuna.Study) -> str | None:
        recorded = current.user_attrs.get(ENVIRONMENT_ATTR)
        if not isinstance(recorded, Mapping) or not isinstance(recorded.get("fields"), Mapping):
            return None  # predates environment records: continued, and gets one below
        changes[:] = environment_changes(recorded["fields"], env.fields)
        return env.id if changes else None

    studies = st.open_for_run(exp, url, new_study=new_study, diverged=diverged)
    warm: list[dict[str, Any]] = []
    if studies.previous is not None and studies.created:
        warm = warm_start(exp, studies, studies.previous, described, budget, changes)
    if ENVIRONMENT_ATTR not in studies.search.user_attrs:
        studies.search.set_user_attr(ENVIRONMENT_ATTR, env.record())
    opened: Opened = ("new environment" if studies.previous is not None
                      else "new" if studies.created else "continued")
    return Opening(studies=studies, environment=env, opened=opened,
                   previous=None if studies.previous is None else studies.previous.study_name,
                   changes=tuple(changes), warm_start=tuple(warm))


# --- warm start -------------------------------------------------------------------------------

def previous_best(
    exp: Experiment, previous: optuna.Study, recommendation: Mapping[str, Any] | None,
    count: int = WARM_START,
) -> list[dict[str, Any]]:
    """The replaced study's best configurations, best first: its last adopted recommendation,
    then its best distinct feasible search configurations by median; never the baseline."""
    baseline = settings_key(exp.baseline_settings())
    out: list[dict[str, Any]] = []
    seen = {baseline}
    if recommendation is not None and in_space(exp, recommendation["settings"]):
        seen.add(settings_key(recommendation["settings"]))
        if settings_key(recommendation["settings"]) != baseline:
            out.append({"settings": dict(recommendation["settings"]),
                        "why": f"the recommendation adopted on night {recommendation['night']}"})
    summaries = [trial_summary(t) for t in previous.get_trials(deepcopy=False)]
    for pick in top_configurations(summaries, directions(exp), count + len(out),
                                   exclude=[exp.baseline_settings()]):
        if settings_key(pick.settings) in seen:
            continue
        seen.add(settings_key(pick.settings))
        out.append({"settings": pick.settings,
                    "why": f"#{pick.trial} of {previous.study_name}: median "
                           f"{pick.values[0]:.4g} over {len(pick.trials)} search run(s)"})
    return out[:count]


def warm_start(
    exp: Experiment, studies: st.Studies, previous: optuna.Study, described: Mapping[str, Any],
    budget: int, changes: Sequence[str],
) -> list[dict[str, Any]]:
    """Enqueue the replaced study's best configurations, then the initial design planned around
    them, and record both; return what was enqueued from the replaced study."""
    search = studies.search
    recommendation = last_recommendation(
        [n for n in nights(studies.storage, exp.name) if n.get("study") == previous.study_name])
    picks = previous_best(exp, previous, recommendation) if exp.study.sampler != "grid" else []
    points = design.initial_design(
        exp, cpu_limit=design.cpu_limit(described), measured=[p["settings"] for p in picks],
        seed=exp.study.seed) if exp.study.sampler != "grid" else []
    planned = ([{**p, "origin": "warm-start"} for p in picks]
               + [{"settings": p.settings, "origin": p.origin, "why": p.why} for p in points])
    planned = planned[:budget]
    for p in planned:
        search.enqueue_trial(p["settings"], skip_if_exists=True,
                             user_attrs={"kind": "search", "origin": p["origin"],
                                         "why": p["why"], "settings": p["settings"]})
    search.set_user_attr(DESIGN_ATTR, planned)
    used = [p for p in planned if p["origin"] == "warm-start"]
    search.set_user_attr(WARM_START_ATTR, {
        "from": previous.study_name, "changes": list(changes), "enqueued": used,
        "sampler": ("the new study's sampler models only its own trials (Optuna); the old "
                    "study informs it through these configurations, re-measured here"),
        **({"note": "grid sampler: it measures every configuration anyway"}
           if exp.study.sampler == "grid" else {}),
    })
    for p in used:
        log.info("warm start from %s: queued %s (%s)", previous.study_name,
                 _settings_text(p["settings"]), p["why"])
    return used


def in_space(exp: Experiment, settings: Mapping[str, Any]) -> bool:
    """Every parameter set to a value of its domain (and nothing else)."""
    if set(settings) != {p.name for p in exp.parameters}:
        return False
    for p in exp.parameters:
        value = settings[p.name]
        values = domain(p)
        if values is not None:
            if value not in values:
                return False
        elif not (isinstance(value, int | float) and p.low is not None and p.high is not None
                  and p.low <= value <= p.high):
            return False
    return True


# --- the night's budget and the early stop ------------------------------------------------------

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
                f"study's budget fit before the {_duration(self.deadline)} deadline (a trial "
                f"takes {_duration(self.trial_seconds)}: {self.measured}; {self.queued} "
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
                remaining: int) -> Budget:
    groups: list[Sequence[optuna.Study]] = [(studies.search, studies.reference)]
    if studies.previous is not None:
        groups.append((studies.previous,))
    seconds, where = recorded_seconds(*groups)
    if seconds:
        per = max(seconds)
    else:
        per, where = (exp.measure.warmup + exp.measure.window + ESTIMATE_OVERHEAD,
                      "estimated: warm-up + window + 10 s, nothing measured yet")
    deadline = exp.study.deadline
    fit = None
    if deadline is not None:
        fit = min(remaining, max(0, fit_trials(deadline, 0.0, per, reserved) - queued))
    return Budget(deadline=deadline, trial_seconds=per, measured=where, reserved=reserved,
                  queued=queued, remaining=remaining, search_trials=fit)


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
    for t in sorted(search.get_trials(deepcopy=False, states=[TrialState.COMPLETE]),
                    key=lambda t: t.number):
        if t.user_attrs.get("kind", "search") != "search" or not t.values:
            continue
        feasible = all(v <= 0 for k, v in t.constraints.items())
        out.append(SearchPoint(t.number, float(t.values[0]) if feasible else None,
                               str(t.user_attrs.get("origin", "sampler"))))
    return out


def baseline_values(reference: optuna.Study) -> list[float]:
    return [float(t.values[0]) for t in reference.get_trials(deepcopy=False,
                                                            states=[TrialState.COMPLETE])
            if t.user_attrs.get("kind") == "baseline" and t.values]


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
                    f"would not fit in the {_duration(deadline - elapsed)} left before "
                    "study.deadline")
        return None


def confirm_reserve(top: int, repeats: int, extra: int) -> int:
    return repeats * (top + 1) + extra


# --- the drift check ------------------------------------------------------------------------------

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
                "ci95": [c.low, c.high], "outcome": c.outcome,
                "recommendation_median": c.candidate_median,
                "production_median": c.baseline_median,
                "n": [c.n_candidate, c.n_baseline]},
        }


def last_recommendation(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The most recent finished night whose verdict was "adopt": night, study, settings."""
    for n in sorted(records, key=lambda n: str(n.get("started", "")), reverse=True):
        verdict = n.get("verdict") or {}
        candidate = verdict.get("candidate") or {}
        if (n.get("status") == "finished" and verdict.get("verdict") == "adopt"
                and isinstance(candidate.get("settings"), Mapping)):
            return {"night": n.get("night"), "study": n.get("study"),
                    "settings": dict(candidate["settings"])}
    return None


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
        return (f"the last recommendation ({_settings_text(recommendation['settings'])}) is "
                "outside the experiment's parameter space")
    return None


def drift_round(exp: Experiment, recommendation: Mapping[str, Any], night: str, number: int,
                rng: random.Random) -> list[dict[str, Any]]:
    """One interleaved round: production and the recommendation once each, shuffled."""
    pair = [(PRODUCTION, exp.baseline_settings()),
            (RECOMMENDATION, dict(recommendation["settings"]))]
    return [{"kind": "drift", "night": night, "candidate": who, "settings": settings,
             "round": number, "recommended_on": recommendation["night"]}
            for who, settings in rng.sample(pair, k=2)]


def drift_values(reference: optuna.Study, night: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {PRODUCTION: [], RECOMMENDATION: []}
    for t in reference.get_trials(deepcopy=False, states=[TrialState.COMPLETE]):
        if (t.user_attrs.get("kind") == "drift" and t.user_attrs.get("night") == night
                and t.values and t.user_attrs.get("candidate") in out):
            out[t.user_attrs["candidate"]].append(float(t.values[0]))
    return out


def judge_drift(recommended: Sequence[float], production: Sequence[float], *, metric: str,
                direction: sig.Direction, recommendation: Mapping[str, Any],
                production_settings: Mapping[str, Any]) -> Drift:
    """The drift verdict from tonight's runs (module docstring). Pure."""
    runs = {RECOMMENDATION: list(recommended), PRODUCTION: list(production)}
    rec_text = f"the last recommendation ({_settings_text(recommendation['settings'])}, " \
               f"adopted on night {recommendation['night']})"
    if not recommended or not production:
        return Drift("inconclusive", f"inconclusive: {rec_text} or production has no completed "
                     "drift run tonight", dict(recommendation), None, runs)
    c = sig.compare(recommended, production, metric=metric, direction=direction)
    if c.outcome == "better":
        return Drift("still best", f"still best: {rec_text} beats production: "
                     f"{sig.describe(c)}", dict(recommendation), c, runs)
    if c.high is not None and c.high < 0:
        back = sig.compare(production, recommended, metric=metric, direction=direction)
        return Drift("drifted", f"drifted: production ({_settings_text(production_settings)}) "
                     f"is now significantly better than {rec_text}: {sig.describe(back)}",
                     dict(recommendation), c, runs)
    why = ("too noisy to say" if c.outcome == "unclear" else
           f"the recommendation no longer beats production by {sig.PRACTICAL:.0%} or more, and "
           "production is not significantly better either")
    return Drift("inconclusive", f"inconclusive: {why}: {rec_text} against production: "
                 f"{sig.describe(c)}", dict(recommendation), c, runs)


# --- night records ------------------------------------------------------------------------------

def nights(storage: optuna.storages.BaseStorage, base: str) -> list[dict[str, Any]]:
    """Every night recorded in the experiment's studies, oldest first."""
    out = []
    for s in st.experiment_studies(storage, base):
        for key, value in s.user_attrs.items():
            if key.startswith(NIGHT_PREFIX) and isinstance(value, Mapping):
                out.append({**value, "study": s.study_name})
    return sorted(out, key=lambda n: str(n.get("started", "")))


def _save(studies: st.Studies, record: Mapping[str, Any]) -> None:
    studies.search.set_user_attr(NIGHT_PREFIX + str(record["night"]), dict(record))


def retire_drift_runs(studies: st.Studies, records: Sequence[Mapping[str, Any]]) -> int:
    """Fail the queued drift runs of nights that are over (cut short by the deadline or a
    signal): they answered those nights' question, not tonight's. A night still "running" may
    be another worker's: its runs stay queued."""
    over = {n.get("night") for n in records if n.get("status") != "running"}
    retired = 0
    for t in studies.reference.get_trials(deepcopy=False, states=[TrialState.WAITING]):
        if t.user_attrs.get("kind") == "drift" and t.user_attrs.get("night") in over:
            studies.storage.set_trial_user_attr(
                t._trial_id, "failure", f"not run: night {t.user_attrs['night']} ended first")
            if studies.storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                retired += 1
    return retired


# --- one night ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NightOptions:
    budget: int
    new_study: bool = False
    confirm: bool = True
    top: int = 3
    repeats: int = 3
    extra: int = 6


@dataclass(frozen=True)
class Night:
    id: str
    opening: Opening
    budget: Budget
    result: RunResult
    confirmed: bool
    drift: Drift
    verdict: dict[str, Any]

    @property
    def studies(self) -> st.Studies:
        return self.opening.studies

    def lines(self) -> list[str]:
        """What the run says about the night, for people."""
        o = self.opening
        if o.opened == "new environment":
            head = (f"new environment {o.environment.id} ({'; '.join(o.changes)}): study "
                    f"{o.studies.name} replaces {o.previous}")
            if o.warm_start:
                head += f", warm-started with {len(o.warm_start)} of its best configurations"
        else:
            head = f"environment {o.environment.id}: study {o.studies.name} ({o.opened})"
        return [head, f"budget: {self.budget.text()}", f"drift: {self.drift.text}"]


def night_id(now: dt.datetime | None = None) -> str:
    """The start time, and a random tail: several workers (or runs) may start together."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}.{secrets.token_hex(3)}"


def _now() -> str:
    # Microseconds: nights are ordered by their start.
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


Verdict = Callable[[Experiment, st.Studies], dict[str, Any]]
"""What the report concludes about the study (``autotune.report.history.verdict_record``): passed
in, because the report reads the study engine and not the other way round."""


def run_night(exp: Experiment, url: str, runner: StudyRunner, options: NightOptions,
              verdict_of: Verdict) -> Night:
    """Open (or replace) the study, check drift, search within the night's budget, confirm,
    judge, and record the night. The runner's backends are used and restored as by ``run``."""
    night = night_id()
    started = _now()
    try:
        described = runner.backends.target.describe()
        opening = open_night(exp, url, described, budget=options.budget,
                             new_study=options.new_study)
    except BaseException:
        with shielded():
            runner.backends.source.close()
        raise
    studies = opening.studies
    earlier = [n for n in nights(studies.storage, exp.name) if n.get("night") != night]
    if retire_drift_runs(studies, earlier):
        log.info("failed the queued drift runs of earlier nights that ended before them")
    recommendation = last_recommendation(earlier)
    skip = drift_skip_reason(exp, recommendation, options.confirm)
    rng = random.Random(None if exp.study.seed is None else f"{exp.study.seed}:{night}")
    queued = enqueue_baseline(exp, studies.reference)
    if skip is None:
        assert recommendation is not None
        for r in range(1, options.repeats + 1):
            for attrs in drift_round(exp, recommendation, night, r, rng):
                studies.reference.enqueue_trial({}, user_attrs=attrs)
                queued += 1
    reserved = ((confirm_reserve(options.top, options.repeats, options.extra)
                 if options.confirm else 0) + (options.extra if skip is None else 0))
    budget = plan_budget(exp, studies, reserved=reserved, queued=queued,
                         remaining=max(0, options.budget - completed_search(studies.search)))
    record: dict[str, Any] = {
        "night": night, "started": started, "status": "running", "host": socket.gethostname(),
        "environment": opening.environment.record(), "opened": opening.opened,
        "previous": opening.previous, "changes": list(opening.changes),
        "warm_start": list(opening.warm_start),
        "budget": {"deadline": budget.deadline, "trial_seconds": budget.trial_seconds,
                   "measured": budget.measured, "reserved": budget.reserved,
                   "search_trials": budget.search_trials, "study_budget": options.budget},
    }
    _save(studies, record)
    if budget.deadline is not None:
        log.info("tonight: %s", budget.text())
    runner.stop_rule = NightRule(exp, runner.clock, budget)
    before = completed_search(studies.search)
    try:
        result = runner.run(studies, options.budget)
        confirmed = options.confirm and result.stop_reason != "deadline"
        if confirmed:
            confirm(exp, studies, runner, top=options.top, repeats=options.repeats,
                    seed=exp.study.seed, extra=options.extra)
        drift = _drift(exp, studies, runner, night, recommendation, skip,
                       extra=options.extra if confirmed else 0, rng=rng,
                       first_round=options.repeats + 1)
    except BaseException as e:
        with shielded():
            try:
                _save(studies, {**record, "status": _status(e),
                                "finished": _now(),
                                "error": str(e) or type(e).__name__})
            except Exception as saving:  # the original error matters more
                log.error("could not record the night's end: %s", saving)
        raise
    verdict = verdict_of(exp, studies)
    record.update(status="finished",
                  finished=_now(),
                  search_trials=completed_search(studies.search) - before,
                  completed=result.completed, stop=result.stop_reason, confirmed=confirmed,
                  verdict=verdict, drift=drift.record())
    _save(studies, record)
    return Night(id=night, opening=opening, budget=budget, result=result, confirmed=confirmed,
                 drift=drift, verdict=verdict)


def _status(e: BaseException) -> str:
    return "interrupted" if isinstance(e, Interrupted | KeyboardInterrupt) else "failed"


def _drift(exp: Experiment, studies: st.Studies, runner: StudyRunner, night: str,
           recommendation: Mapping[str, Any] | None, skip: str | None, *, extra: int,
           rng: random.Random, first_round: int) -> Drift:
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


def _settings_text(settings: Mapping[str, Setting]) -> str:
    return " ".join(f"{k}={'unset' if v is None else v}" for k, v in settings.items())


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.2g} s"

