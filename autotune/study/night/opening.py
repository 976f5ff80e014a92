"""Opening tonight's study: continue the current one or, when the environment, the baseline or
the experiment (its space, objective or constraints) changed, start a new one warm-started from
the one it replaces. Measurements of another environment must not
count as evidence in this one, yet what the old study learnt should not be thrown away.

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
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import optuna

from autotune.experiment.models import Experiment, Setting
from autotune.study import design
from autotune.study import storage as st
from autotune.study.confirmation.candidates import top_configurations
from autotune.study.kinds import TrialKind
from autotune.study.loop import DESIGN_ATTR, trial_summary
from autotune.study.night.fingerprint import (
    OBSERVED,
    Environment,
    environment,
    environment_changes,
)
from autotune.study.night.records import last_recommendation, nights
from autotune.study.objective import directions
from autotune.study.space import domain, settings_key

log = logging.getLogger(__name__)

ENVIRONMENT_ATTR = "environment"
WARM_START_ATTR = "warm_start"
WARM_START = 3
"""Configurations of the replaced study enqueued first in a new one."""


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
    new_study: bool = False, accept_edits: bool = False,
) -> Opening:
    env = environment(exp, described)
    changes: list[str] = []

    def diverged(current: optuna.Study, changed: list[str]) -> str | None:
        # A new baseline (the adopted settings put in baseline.params) is a new production
        # setting, and an edited experiment (with accept_edits: the nightly) measures something
        # else: either study starts afresh, warm-started, like a new environment's.
        recorded = current.user_attrs.get(ENVIRONMENT_ATTR)
        if not isinstance(recorded, Mapping) or not isinstance(recorded.get("fields"), Mapping):
            # Predates environment records: continued, and gets one below.
            changes[:] = list(changed)
        else:
            changes[:] = [*environment_changes(recorded["fields"], env.fields), *changed]
        return env.id if changes else None

    studies = st.open_for_run(exp, url, new_study=new_study, diverged=diverged,
                              accept_edits=accept_edits)
    warm: list[dict[str, Any]] = []
    if studies.previous is not None and studies.created:
        warm = warm_start(exp, studies, studies.previous, described, budget, changes)
    recorded = studies.search.user_attrs.get(ENVIRONMENT_ATTR)
    if not isinstance(recorded, Mapping) or not isinstance(recorded.get("fields"), Mapping):
        studies.search.set_user_attr(ENVIRONMENT_ATTR, env.record())
    else:
        # An observed field the study's record lacks (not seen when it was made), seen
        # tonight: recorded, so that a later night compares it.
        seen = {k: v for k, v in env.fields.items()
                if k in OBSERVED and k not in recorded["fields"]}
        if seen:
            studies.search.set_user_attr(ENVIRONMENT_ATTR, Environment(
                {**recorded["fields"], **seen}).record())
    opened: Opened = ("new environment" if studies.previous is not None
                      else "new" if studies.created else "continued")
    return Opening(studies=studies, environment=env, opened=opened,
                   previous=None if studies.previous is None else studies.previous.study_name,
                   changes=tuple(changes), warm_start=tuple(warm))



def moved_since(exp: Experiment, studies: st.Studies, described: Mapping[str, Any]) -> list[str]:
    """How the target's environment now differs from the one the study recorded when a run
    opened it, by the rules a night opens a study by (``environment_changes``): empty for a
    study that recorded none. For a command that measures into an existing study without
    opening it (``autotune confirm``): its runs would be compared with the study's (review
    finding: it measured a new image's runs into a study of the old one). Pure."""
    recorded = studies.search.user_attrs.get(ENVIRONMENT_ATTR)
    if not isinstance(recorded, Mapping) or not isinstance(recorded.get("fields"), Mapping):
        return []
    return environment_changes(recorded["fields"], environment(exp, described).fields)


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
    recorded = previous.user_attrs.get("fingerprint")
    if not isinstance(recorded, Mapping) or (
            recorded.get("directions"), recorded.get("objective")) != (
            directions(exp), [g.label for g in exp.goals]):
        # Its values rank another objective (an edited experiment): ranked by ours they would
        # queue its worst configurations first, or fail on a second objective it never had.
        return out[:count]
    # Only configurations of the (perhaps edited) space, before ranking: a narrowed range must
    # not leave the warm start empty while the old study holds in-space configurations.
    summaries = [s for s in (trial_summary(t) for t in previous.get_trials(deepcopy=False))
                 if in_space(exp, s["settings"])]
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
                             user_attrs={"kind": TrialKind.SEARCH, "origin": p["origin"],
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
                 settings_text(p["settings"]), p["why"])
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


def settings_text(settings: Mapping[str, Setting]) -> str:
    """A configuration as the night's messages show it (also in the drift check's)."""
    return " ".join(f"{k}={'unset' if v is None else v}" for k, v in settings.items())
