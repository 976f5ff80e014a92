"""Nightly tuning that learns: one study per environment, warm starts, a drift check, a budget
that fits the night, an early stop, and a record of every night.

This module runs one night (``run_night``, with its ``NightOptions``; it returns a ``Night``) and
is what the CLI calls. Each job it orders has a module of its own under
``autotune.study.night``, where its rules are written down:

- ``fingerprint``: the environment fingerprint (what the numbers were measured on);
- ``opening``: which study (continue, or a new environment's study) and its warm start;
- ``budget``: the budget that fits the night (``study.deadline``);
- ``early_stop``: the early stop (``study.early_stop``) and the loop's stop rule;
- ``drift``: the drift check of the last recommendation against production;
- ``records``: the night records (``night:<id>``) that ``history`` reads.

The order is the point of this module: the fingerprint before the first trial; the drift
rounds queued before the search, so a night cut short still has them; the night's record saved
when it starts and again when it ends, so a killed night still shows as "running". Nothing is
re-exported: the CLI uses only ``NightOptions`` and ``run_night`` (and the ``Night`` they give),
which are defined here; every other name is imported from its own module.
"""

from __future__ import annotations

import logging
import random
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotune import redaction
from autotune.experiment.models import Experiment
from autotune.study import storage as st
from autotune.study.confirmation.run import confirm
from autotune.study.interrupts import Interrupted, shielded
from autotune.study.loop import (
    DeadlineReached,
    RunResult,
    StudyRunner,
    completed_search,
    enqueue_baseline,
)
from autotune.study.night import records
from autotune.study.night.budget import Budget, confirm_reserve, plan_budget
from autotune.study.night.drift import (
    Drift,
    check_drift,
    drift_round,
    drift_skip_reason,
    retire_drift_runs,
)
from autotune.study.night.early_stop import NightRule
from autotune.study.night.opening import Opening, open_night

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NightOptions:
    budget: int
    new_study: bool = False
    accept_edits: bool = False
    """An edited experiment starts a new study instead of being refused (``autotune nightly``:
    nobody is there to pass --new-study)."""
    confirm: bool = True
    top: int = 3
    repeats: int = 3
    extra: int = 6
    sequential: bool = True
    """Sequential confirmation (``autotune.study.confirmation``); False: fixed rounds."""


@dataclass(frozen=True)
class Night:
    id: str
    opening: Opening
    budget: Budget
    result: RunResult
    confirmed: bool
    drift: Drift
    verdict: dict[str, Any]
    cut: str | None = None
    """Why the confirmation or the drift check stopped before its end (``DeadlineReached``)."""

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
        cut = [] if self.cut is None else [f"cut short: {self.cut}; the verdict rests on "
                                           "the runs done"]
        return [head, f"budget: {self.budget.text()}", *cut, f"drift: {self.drift.text}"]


Verdict = Callable[[Experiment, st.Studies], dict[str, Any]]
"""What the report concludes about the study (``autotune.report.history.verdict_record``): passed
in, because the report reads the study engine and not the other way round."""


def run_night(exp: Experiment, url: str, runner: StudyRunner, options: NightOptions,
              verdict_of: Verdict) -> Night:
    """Open (or replace) the study, check drift, search within the night's budget, confirm,
    judge, and record the night. The runner's backends are used and restored as by ``run``.

    The target is claimed first (on a cluster the run Lease): a second run stops there,
    before it queues baseline repeats in the study the first one is running (its confirmation
    would measure them) or records a night that never ran."""
    night = records.night_id()
    started = records.timestamp()
    try:
        runner.claim()
        p = _prepare(exp, url, runner, options, night, started)
        before = completed_search(p.opening.studies.search)
    except BaseException:
        # ``run`` gives the target back itself; it was not reached. A claim that failed half
        # way (the Lease taken, then a dead run's leftovers would not go) is given back too.
        with shielded():
            try:
                runner.release()
            except Exception as e:  # the error that ended the night matters more
                log.error("could not give the target back: %s", e)
            finally:
                try:
                    runner.close()
                except Exception as e:  # as above: the night's own error goes on
                    log.error("could not close the metric source: %s", e)
        raise
    studies, opening, budget, record = p.opening.studies, p.opening, p.budget, p.record
    drift_runs, skip, recommendation, rng = p.drift_runs, p.skip, p.recommendation, p.rng
    pooled = runner.width > 1
    if budget.deadline is not None:
        log.info("tonight: %s", budget.text())
    try:
        result = runner.run(studies, options.budget,
                            stop_rule=NightRule(exp, runner.clock, budget))
        if pooled:
            for attrs in drift_runs:
                studies.reference.enqueue_trial({}, user_attrs=attrs)
        confirmed = options.confirm and result.stop_reason != "deadline"
        cut: str | None = None
        if confirmed:
            try:
                confirm(exp, studies, runner, top=options.top, repeats=options.repeats,
                        seed=exp.study.seed, extra=options.extra,
                        sequential=options.sequential)
            except DeadlineReached as e:
                # The runs done are recorded; the verdict rests on them (a confirmation cut
                # short judges fewer runs, at the level fixed before its first: it can only be
                # less decisive). What is queued stays queued for the next run, as after a kill.
                cut = str(e)
        # After a cut, no more drift rounds: the drift runs measured so far are judged at the
        # level of the one look they had.
        drift = check_drift(exp, studies, runner, night, recommendation, skip,
                            extra=options.extra if confirmed and cut is None else 0, rng=rng,
                            first_round=options.repeats + 1)
        cut = cut or drift.cut
        if cut is not None:
            log.warning("%s: the night ends with the runs done", cut)
    except BaseException as e:
        with shielded():
            try:
                records.save(studies, {**record, "status": _status(e),
                                       "finished": records.timestamp(),
                                       "error": redaction.scrub(str(e)) or type(e).__name__})
            except Exception as saving:  # the original error matters more
                log.error("could not record the night's end: %s", saving)
        raise
    verdict = verdict_of(exp, studies)
    record.update(status="finished",
                  finished=records.timestamp(),
                  search_trials=completed_search(studies.search) - before,
                  completed=result.completed, stop=result.stop_reason, confirmed=confirmed,
                  members=result.members, not_undone=result.not_undone, cut=cut,
                  verdict=verdict, drift=drift.record())
    records.save(studies, record)
    return Night(id=night, opening=opening, budget=budget, result=result, confirmed=confirmed,
                 drift=drift, verdict=verdict, cut=cut)


@dataclass(frozen=True)
class _Prepared:
    opening: Opening
    budget: Budget
    record: dict[str, Any]
    drift_runs: list[dict[str, Any]]
    skip: str | None
    recommendation: dict[str, Any] | None
    rng: random.Random


def _prepare(exp: Experiment, url: str, runner: StudyRunner, options: NightOptions,
             night: str, started: str) -> _Prepared:
    """Open the study, queue the night's baseline and drift runs, plan the budget, and save
    the night's record as "running"."""
    described = runner.backends.target.describe()
    opening = open_night(exp, url, described, budget=options.budget,
                         new_study=options.new_study, accept_edits=options.accept_edits)
    studies = opening.studies
    earlier = [n for n in records.nights(studies.storage, exp.name) if n.get("night") != night]
    if retire_drift_runs(studies, earlier):
        log.info("failed the queued drift runs of earlier nights that ended before them")
    recommendation = records.last_recommendation(earlier)
    skip = drift_skip_reason(exp, recommendation, options.confirm)
    rng = random.Random(None if exp.study.seed is None else f"{exp.study.seed}:{night}")
    queued = enqueue_baseline(exp, studies.reference)
    drift_runs: list[dict[str, Any]] = []
    if skip is None:
        assert recommendation is not None
        drift_runs = [attrs for r in range(1, options.repeats + 1)
                      for attrs in drift_round(exp, recommendation, night, r, rng)]
    # Queued before the search, so that a night cut short still has them; in a pool after it:
    # each member takes the oldest queued trial, and the drift runs belong on the confirming one.
    pooled = runner.width > 1
    if not pooled:
        for attrs in drift_runs:
            studies.reference.enqueue_trial({}, user_attrs=attrs)
        queued += len(drift_runs)
    # Several objectives are always confirmed in fixed rounds (autotune.study.confirmation).
    sequential = options.sequential and len(exp.goals) == 1
    reserved = ((confirm_reserve(options.top, options.repeats, options.extra,
                                 sequential=sequential)
                 if options.confirm else 0) + (options.extra if skip is None else 0))
    budget = plan_budget(exp, studies, reserved=reserved, queued=queued,
                         remaining=max(0, options.budget - completed_search(studies.search)),
                         members=runner.width)
    record: dict[str, Any] = {
        "night": night, "started": started, "status": "running", "host": socket.gethostname(),
        "environment": opening.environment.record(), "opened": opening.opened,
        "previous": opening.previous, "changes": list(opening.changes),
        "warm_start": list(opening.warm_start),
        "budget": {"deadline": budget.deadline, "trial_seconds": budget.trial_seconds,
                   "measured": budget.measured, "reserved": budget.reserved,
                   "search_trials": budget.search_trials, "study_budget": options.budget},
    }
    records.save(studies, record)
    return _Prepared(opening, budget, record, drift_runs, skip, recommendation, rng)


def _status(e: BaseException) -> str:
    return "interrupted" if isinstance(e, Interrupted | KeyboardInterrupt) else "failed"
