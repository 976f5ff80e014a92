"""The study loop: baseline repeats first, then sampler-chosen trials until the budget or deadline.

Trials run through ``study.optimize`` (one at a time) so Optuna's heartbeat covers them. The
target is restored and the metric source closed however the loop ends.

A pool's member (``autotune.study.pool``) runs this same loop with a ``queue_lock``: it measures
its own baseline repeats, and counts the budget and starts its trial in one turn (``_turn``).

Its size (~560 lines) is the runner, the pool member's turn, and the summaries of a run read
back from storage (``trial_summary``, ``best_summary``); the summaries are the next cut.
"""

from __future__ import annotations

import logging
import socket
import statistics
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import __version__, redaction
from autotune.clock import Clock
from autotune.errors import (
    AutotuneError,
    NotUndone,
    StressNotRecovered,
    StudyError,
    is_transient,
)
from autotune.experiment.models import Experiment, Setting
from autotune.study import design, screening
from autotune.study import storage as st
from autotune.study.interrupts import (
    Interrupted,
    StopRequest,
    deliver_pending,
    shielded,
    signalled,
)
from autotune.study.journal import Journal
from autotune.study.kinds import TrialKind
from autotune.study.night.fingerprint import declared_changes
from autotune.study.objective import score
from autotune.study.optuna_private import get_trial, system_attrs, trial_id
from autotune.study.record import LoadCheck, TrialRecord
from autotune.study.samplers import REPAIRED_ATTR, make_sampler, measured_everything
from autotune.study.scenarios import qualified
from autotune.study.space import suggest, to_env
from autotune.study.trial import Backends, Screened, TrialContext, TrialFailed, run_phases
from autotune.targets.base import Env

log = logging.getLogger(__name__)

UNDO_PATIENCE = 300.0
"""Seconds the run's end keeps trying undo steps that fail transiently (``StudyRunner._undo``);
never after a SIGTERM, whose grace period (deploy/base/cronjob.yaml) is budgeted for one try."""

# We log every trial ourselves (with its failure reason); Optuna's own lines would repeat them.
optuna.logging.set_verbosity(optuna.logging.ERROR)


class Progress(Protocol):
    """What the loop tells whoever displays it. Implementations must not raise."""

    def study_started(self, info: dict[str, Any]) -> None: ...

    def trial_started(self, number: int, kind: str, settings: dict[str, Setting]) -> None: ...

    def phase(self, name: str) -> None: ...

    def trial_finished(self, record: dict[str, Any], best: dict[str, Any] | None) -> None: ...


class DeadlineReached(StudyError):
    """``study.deadline`` came before the next reference run (confirmation, drift check) could
    end (``StudyRunner.run_reference``). Raised between runs, after the target is restored; the
    runs already queued stay queued, as a killed run's do, so the confirmation's record stays
    open and its queued slots are measured by the next run (``autotune.study.nightly`` ends the
    night with a verdict on the runs done)."""


@dataclass
class RunResult:
    study: str
    stop_reason: str
    completed: int
    failed_this_run: int
    best: dict[str, Any] | None
    baseline: list[dict[str, Any]] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    members: list[str] = field(default_factory=list)
    """A pool's members, one line each: how its run ended (``autotune.study.pool``)."""
    not_undone: list[str] = field(default_factory=list)
    """A pool's members that could not remove their stress or restore their target."""


def is_search(t: FrozenTrial) -> bool:
    return bool(t.user_attrs.get("kind", TrialKind.SEARCH) == TrialKind.SEARCH)


MEASURED = (TrialState.COMPLETE, TrialState.PRUNED)
"""A search trial that ran to its end: its whole window, or screened out part-way
(``study.screening``, stored as PRUNED). Both count against ``study.trials``."""


def completed_search(study: optuna.Study) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False, states=MEASURED) if is_search(t))


def finish_env(exp: Experiment, study: optuna.Study) -> dict[str, str | None] | None:
    """The env a run ends with under ``on_finish: best`` (the best feasible search trial's;
    ``Target.restore`` ignores it otherwise); None when there is none."""
    best = best_summary(exp, study)
    return to_env(exp, best["settings"]) if best is not None and "settings" in best else None


def best_summary(exp: Experiment, study: optuna.Study) -> dict[str, Any] | None:
    """The best feasible trial (or the Pareto front), as plain data."""
    completed = [t for t in study.get_trials(deepcopy=False, states=[TrialState.COMPLETE])]
    if not completed:
        return None
    try:
        if len(exp.goals) > 1:
            front = study.best_trials
            return {"pareto": [trial_summary(t) for t in front]} if front else None
        return trial_summary(study.best_trial)
    except ValueError:  # no feasible trial yet
        return None


def trial_summary(t: FrozenTrial) -> dict[str, Any]:
    return {
        "number": t.number,
        "state": t.state.name,
        "kind": t.user_attrs.get("kind", TrialKind.SEARCH.value),
        "settings": t.user_attrs.get("settings", t.params),
        "values": t.values,
        "constraints": {k: v for k, v in t.constraints.items() if not k.isdigit()},
        "metrics": t.user_attrs.get("record", {}).get("metrics", {}),
        "failure": t.user_attrs.get("failure"),
    }


def enqueue_baseline(exp: Experiment, reference: optuna.Study) -> int:
    """Queue the baseline repeats still missing (a failed repeat is measured again)."""
    present = sum(
        1 for t in reference.get_trials(
            deepcopy=False, states=[TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING])
        if t.user_attrs.get("kind") == TrialKind.BASELINE
    )
    missing = max(0, exp.baseline.repeats - present)
    for i in range(missing):
        reference.enqueue_trial({}, user_attrs={"kind": TrialKind.BASELINE.value,
                                                "repeat": present + i + 1,
                                                "settings": exp.baseline_settings()})
    return missing


DESIGN_ATTR = "design"
"""Search-study user attr: the initial design, enqueued once (a resumed study keeps its own)."""


def enqueue_design(
    exp: Experiment, search: optuna.Study, described: dict[str, Any], budget: int
) -> int:
    """Queue the initial design (``design.initial_design``) the first time a study runs; return
    its size, which replaces the samplers' random start-up phase."""
    planned = search.user_attrs.get(DESIGN_ATTR)
    if planned is not None:
        return len(planned)
    if exp.study.sampler == "grid":
        search.set_user_attr(DESIGN_ATTR, [])
        return 0
    measured = [t.params for t in search.get_trials(deepcopy=False) if t.params]
    points = design.initial_design(exp, cpu_limit=design.cpu_limit(described),
                                   measured=measured, seed=exp.study.seed)[:budget]
    for point in points:
        search.enqueue_trial(point.settings, skip_if_exists=True,
                             user_attrs={"kind": TrialKind.SEARCH.value, "origin": point.origin,
                                         "why": point.why, "settings": point.settings})
    search.set_user_attr(DESIGN_ATTR, [
        {"settings": p.settings, "origin": p.origin, "why": p.why} for p in points])
    for p in points:
        log.info("queued (%s) %s: %s", p.origin,
                 " ".join(f"{k}={v}" for k, v in p.settings.items()), p.why)
    return len(points)


def remove_leftovers(b: Backends) -> list[str]:
    """Remove what a killed run left (its stress, its candidate on the target); say what.

    The target first: on a cluster it takes the run Lease, and the injector removes StressChaos
    only while this run holds it (``StressGuard.owns``), so a second run never removes the live
    stress of the first. The stress goes even when the target's restore fails (review finding:
    a restore whose rollout timed out skipped it, the dead run's stress left to its own
    duration); then the first error is raised, after what was removed is logged."""
    done: list[str] = []
    errors: list[AutotuneError] = []
    for step in (b.target.cleanup, b.injector.cleanup):
        try:
            done += step()
        except AutotuneError as e:
            errors.append(e)
    if errors:
        for line in done:
            log.warning("left over from an earlier run, removed: %s", line)
        for later in errors[1:]:
            log.error("cleanup: %s", later)
        raise errors[0]
    return done


def clean_leftovers(b: Backends) -> None:
    """What a killed run left goes before this run measures anything (``remove_leftovers``)."""
    for line in remove_leftovers(b):
        log.warning("left over from an earlier run, removed: %s", line)


class StudyRunner:
    def __init__(
        self,
        exp: Experiment,
        backends: Backends,
        *,
        clock: Clock,
        progress: Progress,
        journal: Journal,
        experiment_hash: str,
        member: str | None = None,
        queue_lock: threading.Lock | None = None,
        stop: StopRequest | None = None,
    ) -> None:
        """``member``: the pool member (``namespace/deployment``) this runner measures on,
        recorded with every trial. ``queue_lock``: given by ``autotune.study.pool`` to the
        runners of one pool: each then measures its own baseline repeats and counts running
        trials against the budget."""
        self.exp, self.backends, self.clock = exp, backends, clock
        self.member, self.queue_lock, self.stop = member, queue_lock, stop
        self._release_at_start = False
        self.progress, self.journal, self.hash = progress, journal, experiment_hash
        self.sampler_name = ""
        self.study_name = ""
        self.trial_seconds: list[float] = []
        self.failures_in_a_row: list[str] = []
        self.failed = 0
        self._current: int | None = None
        # Held from the objective's end until Optuna has recorded the trial (``_run_one``).
        self._recording = ExitStack()
        self._search: optuna.Study | None = None
        self._reference: optuna.Study | None = None
        self.design_size = 0
        self._stuck: str | None = None
        self._journal_error: StudyError | None = None
        self._described: dict[str, Any] | None = None
        """The target's last description (``_describe_again``): declared changes are checked
        against it at the end of every trial, search and confirmation (``_measure``)."""
        self._latest: dict[str, Any] | None = None
        """The description read at the end of the last trial, for ``_describe_again``."""
        self.deadline: float | None = None
        """``study.deadline`` on ``clock``, set when ``run`` starts (the night's budget and its
        stop rule start their clocks there too); the reference runs after it hold to it. None
        before ``run``: ``autotune confirm`` on its own is not bound by it."""

    @property
    def width(self) -> int:
        """How many trials this runner measures at once (a pool: one per member)."""
        return 1

    @property
    def described(self) -> dict[str, Any] | None:
        """The target's last description this runner checked trials against."""
        return self._described

    # --- the objective Optuna calls --------------------------------------------------------

    def objective(self, trial: optuna.Trial) -> float | tuple[float, ...]:
        self._current = trial_id(trial)
        kind = TrialKind(trial.user_attrs.get("kind", TrialKind.SEARCH))
        if trial.user_attrs.get("failure"):
            trial.set_user_attr("failure", None)  # a retry inherits its original's attrs
        settings: dict[str, Setting] = (
            suggest(trial, self.exp) if kind == TrialKind.SEARCH
            else dict(trial.user_attrs["settings"])
        )
        env = to_env(self.exp, settings)
        trial.set_user_attr("worker", st.worker_id())
        trial.set_user_attr("kind", kind.value)
        trial.set_user_attr("settings", settings)
        if self.member is not None:
            trial.set_user_attr("member", self.member)
        if self._release_at_start:
            # The trial is ours and its parameters are stored (the sampler's repair sees them):
            # other members may take the next one.
            self._release_at_start = False
            assert self.queue_lock is not None
            self.queue_lock.release()
        record = TrialRecord(
            study=self.study_name, number=trial.number, kind=kind,
            settings=settings, env=env, started=self.clock.now(),
            sampler=self.sampler_name if kind == TrialKind.SEARCH else "fixed",
            autotune_version=__version__, host=socket.gethostname(),
            experiment_hash=self.hash, target=self.exp.target.kind, member=self.member,
        )
        system = system_attrs(trial)
        record.retry_of = system.get("failed_trial")
        if kind == TrialKind.SEARCH:
            # Queued trials (enqueued, prior, design) carry their origin; the rest came from the
            # sampler, possibly moved off a configuration the study had already measured.
            record.origin = trial.user_attrs.get("origin", "sampler")
            if trial.user_attrs.get("why"):
                record.why = trial.user_attrs["why"]
            if REPAIRED_ATTR in system:
                record.repaired_from = system[REPAIRED_ATTR]
            trial.set_user_attr("origin", record.origin)
        self.progress.trial_started(trial.number, kind.value, settings)
        t0 = self.clock.monotonic()
        labels = {"app.kubernetes.io/managed-by": "autotune",
                  "autotune/study": self.exp.name, "autotune/trial": str(trial.number)}
        screen = (screening.rule(self.exp, self._search, self._reference)
                  if kind == TrialKind.SEARCH and self._search is not None
                  and self._reference is not None else None)
        try:
            ctx = TrialContext(exp=self.exp, backends=self.backends, clock=self.clock,
                               labels=labels, measurement=record.measurement,
                               on_phase=self.progress.phase, number=trial.number,
                               screen=screen)
            metrics = self._measure(ctx, env)
            self._check_load(record, metrics)
            scored = score(self.exp, metrics)
            for text, violation in scored.violations.items():
                trial.set_constraint(text, violation)
            record.state, record.values = "COMPLETE", list(scored.values)
            record.constraints, record.feasible = scored.violations, scored.feasible
            return scored.values[0] if len(scored.values) == 1 else scored.values
        except Screened as e:
            # Optuna stores the last reported value as a pruned trial's value (TPE ranks it).
            value = sum(w * e.metrics[name] for name, w in self.exp.goals[0].terms.items())
            trial.report(value, step=max(1, round(e.after)))
            record.state, record.values, record.screened = "SCREENED", [value], e.reason
            trial.set_user_attr("screened", e.reason)
            raise optuna.TrialPruned(e.reason) from None
        except TrialFailed as e:
            record.state, record.failure = "FAIL", e.reason
            if isinstance(e.__cause__, StressNotRecovered):
                self._stuck = e.reason
            raise
        except Interrupted as e:
            record.state, record.failure = "FAIL", f"interrupted ({e.signame})"
            raise
        except Exception as e:  # the trial boundary: a bug must not lose the study
            log.exception("trial %d crashed", trial.number)
            failure = redaction.scrub(f"internal error: {type(e).__name__}: {e}")
            record.state, record.failure = "FAIL", failure
            raise TrialFailed(failure) from e
        finally:
            # A signal from here on is delivered once Optuna has recorded the trial (_run_one),
            # and a journal that cannot be written stops the run then: neither may fail a
            # measured trial. The shield outlives this method: Optuna commits the trial's state
            # after we return, and a KeyboardInterrupt raised in that commit is not handled by
            # its _run_trial (optuna/study/_optimize.py: an UnboundLocalError in its finally,
            # the trial left RUNNING, the run ending as a crash; seen in the kill matrix).
            self._recording.enter_context(shielded(deliver=False))
            record.finished = self.clock.now()
            record.seconds = round(self.clock.monotonic() - t0, 3)
            stored = record.as_attrs()
            trial.set_user_attr("record", stored)
            if record.failure:
                trial.set_user_attr("failure", record.failure)
            try:
                self.journal.append(stored)
            except StudyError as e:
                self._journal_error = e

    def _measure(self, ctx: TrialContext, env: Env) -> dict[str, float]:
        """``run_phases``, then the target described again before the trial is recorded: a
        trial in whose window what the target declares changed (a CD rollout of a new image, a
        new limit) fails, so no verdict or ranking holds a run of two environments (review
        finding: the check ran after the trial was recorded, and a rollout between two
        confirmation runs left one run of the new image in the verdict's rounds). A rollout
        between two trials is caught by the next one's check: its pods run the new image by the
        end of its window. ``_describe_again`` then stops the run."""
        self._latest = None
        try:
            metrics = run_phases(ctx, env)
        except Screened:  # a screened trial is ranked too: checked the same way
            self._check_environment()
            raise
        self._check_environment()
        return metrics

    def _check_environment(self) -> None:
        if self._described is None:
            return
        try:
            try:
                self._latest = self.backends.target.describe()
            except AutotuneError as e:
                if not is_transient(e):
                    raise
                self._latest = self.backends.target.describe()  # an API server's blip: once more
        except AutotuneError as e:  # unchecked, the window cannot be trusted to be one image's
            raise TrialFailed(f"could not describe the target after the window: {e}") from e
        moved = declared_changes(self.exp, self._described, self._latest)
        if moved:
            raise TrialFailed(f"the environment changed during this trial ({'; '.join(moved)})"
                              ": its window may have measured the new one")

    def _baseline_rate(self, key: str) -> float | None:
        """The median of ``key`` (the served request rate, ``measure.load``; with several
        scenarios, its value under one) over the baseline so far."""
        if self._reference is None:
            return None
        rates = []
        for t in self._reference.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            metrics = (t.user_attrs.get("record") or {}).get("metrics") or {}
            # A pool's member against its own baseline: each member serves its own load.
            mine = self.member is None or t.user_attrs.get("member") == self.member
            if t.user_attrs.get("kind") == TrialKind.BASELINE and key in metrics and mine:
                rates.append(float(metrics[key]))
        return statistics.median(rates) if rates else None

    def _check_load(self, record: TrialRecord, metrics: dict[str, float]) -> None:
        """Discard a window served under another load than the baseline's (the first baseline
        repeat sets the reference). With several scenarios each is checked against the
        baseline's under the same scenario: a storm that stalled the load is not averaged
        away by the others."""
        check = self.exp.measure.load
        if check is None:
            return
        rate, reference = metrics[check.metric], self._baseline_rate(check.metric)
        record.load = LoadCheck(metric=check.metric, rate=rate, baseline=reference)
        if reference is not None and reference > 0:
            record.load.deviation = round(rate / reference - 1, 4)
        keys: list[tuple[str, str | None]] = [
            (qualified(check.metric, sc.name), sc.name) for sc in self.exp.chaos.scenarios]
        keys = keys or [(check.metric, None)]
        for key, scenario in keys:
            value, base = metrics.get(key), self._baseline_rate(key)
            if value is None or base is None or base <= 0:
                continue
            deviation = value / base - 1
            if abs(deviation) > check.tolerance:
                under = f" under {scenario}" if scenario else ""
                raise TrialFailed(
                    f"load not comparable{under}: {check.metric} was {value:.4g}/s against the "
                    f"baseline's median {base:.4g}/s ({deviation:+.1%}; measure.load.tolerance "
                    f"{check.tolerance:.0%}), so the window is discarded")

    # --- the loop --------------------------------------------------------------------------

    def _estimate_trial_seconds(self) -> float:
        if self.trial_seconds:
            return max(self.trial_seconds)
        return self.exp.measured_seconds + 10.0

    def _run_one(self, study: optuna.Study) -> FrozenTrial | None:
        """Run one trial (the oldest queued one, or a new sampler suggestion); return it."""
        self._current = None
        t0 = self.clock.monotonic()
        try:
            with self._recording:  # lifts the objective's shield (kept pending: below)
                study.optimize(self.objective, n_trials=1, catch=(TrialFailed,),
                               gc_after_trial=False, show_progress_bar=False)
        except Interrupted:
            if self._current is not None:
                with shielded():
                    st.retry(study, get_trial(study, self._current))
            raise
        if self._current is None:
            return None
        last = get_trial(study, self._current)
        if last.state == TrialState.COMPLETE:
            self.trial_seconds.append(self.clock.monotonic() - t0)
            self.failures_in_a_row.clear()
        elif last.state == TrialState.PRUNED:  # screened: measured, and judged
            self.failures_in_a_row.clear()
        else:
            self.failed += 1
            self.failures_in_a_row.append(str(last.user_attrs.get("failure", "unknown")))
        best = best_summary(self.exp, self._search) if self._search is not None else None
        self.progress.trial_finished(last.user_attrs.get("record", trial_summary(last)), best)
        deliver_pending()
        if self._journal_error is not None:
            raise self._journal_error
        return last

    def _describe_again(self, studies: st.Studies, described: dict[str, Any]) -> dict[str, Any]:
        """Some facts exist only once a trial ran (the calibrated load rate, the Go version):
        record the target's description again when it changed. What the target declares
        changing (a CD rollout of a new image in the night, another limit) stops the run: the
        next trials would measure another environment in this study (review finding: they
        went on, and the night's verdict mixed two images); the next night starts a new study
        (its fingerprint differs)."""
        now, self._latest = self._latest or self.backends.target.describe(), None
        if now != described:
            moved = declared_changes(self.exp, described, now)
            if moved:  # before the record: the study never measured the new environment
                raise StudyError([f"the environment changed during the run ({'; '.join(moved)})"
                                  ": later trials would measure another environment in this "
                                  "study; the next run starts a study of its own"])
            studies.search.set_user_attr("target", now)
        self._described = now
        return now

    def _check_failures(self) -> None:
        if self._stuck is not None:
            # Another trial would measure a target that may still be under stress.
            raise NotUndone([f"stress not recovered, the study stopped: {self._stuck}"])
        limit = self.exp.study.stop_after_failures
        if len(self.failures_in_a_row) >= limit:
            last = self.failures_in_a_row[-1]
            raise StudyError([f"{limit} trials in a row failed; the last one: {last}"])

    def run(self, studies: st.Studies, budget: int,
            stop_rule: Callable[[st.Studies, list[float]], str | None] | None = None
            ) -> RunResult:
        """Run the study's trials until ``budget`` search trials are complete, the deadline,
        or ``stop_rule``: asked before each search trial (with this run's measured trial
        durations), a reason it returns ends the search (the early stop and the night's
        budget, ``autotune.study.night.early_stop.NightRule``)."""
        exp, b = self.exp, self.backends
        self.study_name = studies.name
        self._search = studies.search
        self._reference = studies.reference
        self._latest = None
        pooled = self.queue_lock is not None
        deadline = self.deadline = (self.clock.monotonic() + exp.study.deadline
                                    if exp.study.deadline is not None else None)
        stop = "budget reached"
        orphans: list[str] = []
        try:
            # A pool's members run next to each other: the pool failed the orphans once, before.
            # Inside the try: a storage error here still ends in _finish (the claim released).
            orphans = [] if pooled else st.fail_orphans(studies, exp.max_trial_seconds)
            for line in orphans:
                log.warning("%s", line)
            self._clean_leftovers()
            if not pooled:  # a pool's members each queue their own (_run_own_baseline)
                enqueue_baseline(exp, studies.reference)
            described = self._described = b.target.describe()
            self.design_size = enqueue_design(exp, studies.search, described, budget)
            # Reports state the environment the numbers were measured in.
            studies.search.set_user_attr("target", described)
            studies.search.set_user_attr("chaos", exp.chaos.canonical())
            studies.search.set_user_attr("measure", exp.measure.model_dump(mode="json"))
            self.progress.study_started({
                "study": studies.name, "storage": st.redact(studies.url), "budget": budget,
                "completed": completed_search(studies.search), "target": described,
            })
            while (self._own_baselines(studies.reference) < exp.baseline.repeats if pooled
                   else any(t.state == TrialState.WAITING
                            for t in studies.reference.get_trials(deepcopy=False))):
                if deadline is not None and (self.clock.monotonic()
                                             + self._estimate_trial_seconds() > deadline):
                    stop = "deadline"
                    break
                if pooled:
                    self._run_own_baseline(studies.reference)
                else:
                    self._run_one(studies.reference)
                self._check_failures()
                described = self._describe_again(studies, described)
            while stop != "deadline":
                # In a pool, counting the budget and starting the trial are one step
                # (``_turn``): two members never both take the budget's last trial.
                with self._turn():
                    if self._counted(studies.search) >= budget:
                        break
                    if deadline is not None and (self.clock.monotonic()
                                                 + self._estimate_trial_seconds() > deadline):
                        stop = "deadline"
                        break
                    if measured_everything(exp, studies.search):
                        stop = "every configuration measured"
                        log.info("every configuration of the space has been measured: the "
                                 "search stops (confirmation runs re-measure the best)")
                        break
                    reason = (stop_rule(studies, self.trial_seconds)
                              if stop_rule is not None else None)
                    if reason is not None:
                        stop = reason
                        log.info("the search stops: %s", reason)
                        break
                    n = len(studies.search.get_trials(deepcopy=False))
                    self.sampler_name, studies.search.sampler = make_sampler(
                        exp, n, design=self.design_size)
                    studies.search.set_user_attr("sampler", self.sampler_name)
                    self._run_one(studies.search)
                self._check_failures()
                described = self._describe_again(studies, described)
        except Interrupted:
            stop = "interrupted"
            raise
        finally:
            with shielded():
                self._finish(studies)
        return RunResult(
            study=studies.name, stop_reason=stop,
            completed=completed_search(studies.search),
            failed_this_run=self.failed, best=best_summary(exp, studies.search),
            baseline=baseline_values(studies.reference), orphans=orphans,
        )

    def _counted(self, search: optuna.Study) -> int:
        """Search trials that count against the budget: the completed ones, and in a pool the
        ones other members are running (a member whose trial fails runs another)."""
        if self.queue_lock is None:
            return completed_search(search)
        # One read for both states: between two reads a trial may go from RUNNING to COMPLETE
        # and be counted by neither (seen on PostgreSQL: 10 trials for a budget of 9).
        return sum(1 for t in search.get_trials(
            deepcopy=False, states=[*MEASURED, TrialState.RUNNING]) if is_search(t))

    def _own_baselines(self, reference: optuna.Study) -> int:
        return sum(1 for t in reference.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
                   if t.user_attrs.get("kind") == TrialKind.BASELINE
                   and t.user_attrs.get("member") == self.member)

    @contextmanager
    def _turn(self) -> Iterator[None]:
        """A pool's member holds the pool's lock from deciding what to run until its trial has
        started (``objective`` releases it then); outside a pool, nothing."""
        if self.queue_lock is None:
            yield
            return
        if self.stop is not None:
            self.stop.check()  # told to stop: no new trial
        self.queue_lock.acquire()
        self._release_at_start = True
        try:
            yield
        finally:
            if self._release_at_start:  # no trial started
                self._release_at_start = False
                self.queue_lock.release()

    def _run_own_baseline(self, reference: optuna.Study) -> None:
        """One baseline repeat on this member. Optuna runs the oldest queued trial, whoever
        queued it, so queueing and taking it are one turn; a queued trial another member left
        is measured here, and counts as this member's."""
        with self._turn():
            if not any(t.state == TrialState.WAITING
                       for t in reference.get_trials(deepcopy=False)):
                reference.enqueue_trial({}, user_attrs={
                    "kind": TrialKind.BASELINE.value,
                    "repeat": self._own_baselines(reference) + 1,
                    "settings": self.exp.baseline_settings()})
            self._run_one(reference)

    def run_reference(
        self, studies: st.Studies, entries: list[dict[str, Any]],
        then: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> int:
        """Measure fixed configurations (e.g. confirmation re-runs) in the reference study.

        Each entry is the user attrs of one trial and must hold ``kind`` and ``settings``; they
        run in the given order. When the queue is empty, ``then()`` may give more entries (it
        decides from what was just measured); an empty list ends. Returns how many completed.
        Restores the target at the end.
        """
        self.study_name = studies.name
        self._search = studies.search
        self._reference = studies.reference
        self._latest = None
        completed = 0
        try:
            if self.queue_lock is None:  # a pool's members were cleaned when the pool began
                self._clean_leftovers()
            # The confirmation and the drift runs are checked as the search's trials are: a
            # new image between them would make the verdict compare two environments.
            described = self._described = self._unchanged(studies)
            while True:
                if entries:
                    self._check_deadline(f"{len(entries)} run(s) not queued")
                for attrs in entries:
                    studies.reference.enqueue_trial({}, user_attrs=attrs)
                while any(t.state == TrialState.WAITING
                          for t in studies.reference.get_trials(deepcopy=False)):
                    self._check_deadline("the queued runs stay queued for the next run")
                    ran = self._run_one(studies.reference)
                    if ran is not None and ran.state == TrialState.COMPLETE:
                        completed += 1
                    self._check_failures()
                    described = self._describe_again(studies, described)
                entries = then() if then is not None else []
                if not entries:
                    break
        finally:
            with shielded():
                self._finish(studies)
        return completed

    def _check_deadline(self, left: str) -> None:
        """Raise ``DeadlineReached`` when another trial (as long as the longest this run
        measured, ``_estimate_trial_seconds``) would end after ``study.deadline``."""
        if self.deadline is not None and (self.clock.monotonic()
                                          + self._estimate_trial_seconds() > self.deadline):
            raise DeadlineReached(f"study.deadline: another run would end after it ({left})")

    def _unchanged(self, studies: st.Studies) -> dict[str, Any]:
        """The target's description now, checked against the last one this runner saw (the
        search's, before the confirmation and the drift runs): runs on a changed environment
        would be compared with the search's and the baseline's runs of the old one (review
        finding: the confirmation started from a fresh description, so a rollout after the
        search went unnoticed). A fresh process (``autotune confirm``) is checked against the
        study's recorded environment before it touches the study
        (``opening.moved_since``)."""
        now = self.backends.target.describe()
        moved = (declared_changes(self.exp, self._described, now)
                 if self._described is not None else [])
        if moved:
            raise StudyError([f"the environment changed since the search ({'; '.join(moved)})"
                              f": runs of study {studies.name!r} would be compared with runs "
                              "of another environment; the next run starts a study of its own"])
        return now

    def claim(self) -> None:
        """Take the target before a night touches the study: on a cluster the run Lease, so a
        second run stops here, before it queues its baseline repeats (which the first run's
        confirmation would measure) or records a night; and what a killed run left goes."""
        self._clean_leftovers()

    def release(self) -> None:
        """Give the target back after ``claim`` when the night ends before ``run`` (which
        restores it itself): nothing was applied, so only the claim goes."""
        self.backends.target.restore()

    def close(self) -> None:
        """Close the metric source (its HTTP session) when the night ends before ``run``,
        which closes it itself."""
        self.backends.source.close()

    def _clean_leftovers(self) -> None:
        clean_leftovers(self.backends)

    def _finish(self, studies: st.Studies) -> None:
        b = self.backends
        errors = []
        # The study's storage may be what failed (PostgreSQL gone, a full disk): reading the best
        # must not stand between a failed run and its cleanup. Without it, ``on_finish: best``
        # restores the original instead (the safe side) and says why.
        best_env = None
        unread: Exception | None = None
        try:
            best_env = finish_env(self.exp, studies.search)
        except Exception as e:  # the target ends in its safe state; the error after it
            log.error("could not read the best trial (%s); restoring the original instead", e)
            unread = e
        blocker = b.blocker
        failed = self._undo([("stress", b.injector.cleanup),
                             ("held Ps", blocker.cleanup if blocker is not None else list),
                             ("target", lambda: b.target.restore(best_env)),
                             ("metrics", b.source.close)])
        for name, error in failed.items():
            errors.append(f"{name}: {error}")
            log.error("could not restore %s: %s", name, error)
        if errors:
            raise NotUndone(["cleanup incomplete: " + "; ".join(errors)])
        if unread is not None:
            # The storage's own words (a StorageError: exit 1), not whatever a library raised
            # on its way out of the failed write.
            raise unread

    def _undo(self, steps: list[tuple[str, Callable[[], object]]]) -> dict[str, Exception]:
        """Every undo step once (one failing never keeps the others from running), then the
        ones that failed transiently (``errors.is_transient``) again, 5 s doubling to 60 s, for
        up to ``UNDO_PATIENCE``: an API server restarting at night (a managed control plane's
        upgrade answers 503 for minutes) otherwise left the candidate in production until
        someone ran ``autotune cleanup``. Not once a stop was asked for: the grace period after
        a SIGTERM is budgeted for one try of each. What still failed, by step."""
        deadline = self.clock.monotonic() + UNDO_PATIENCE
        failed: dict[str, Exception] = {}
        todo, delay = steps, 5.0
        while True:
            for name, undo in todo:
                try:
                    undo()
                    failed.pop(name, None)
                except Exception as e:  # keep undoing the rest; report all
                    failed[name] = e
            todo = [(n, u) for n, u in steps if n in failed and is_transient(failed[n])]
            if not todo or self._stopping() or self.clock.monotonic() + delay > deadline:
                return failed
            log.warning("could not restore %s (%s); trying again in %g s",
                        ", ".join(n for n, _ in todo), failed[todo[0][0]], delay)
            until = self.clock.monotonic() + delay
            while self.clock.monotonic() < until and not self._stopping():
                self.clock.sleep(min(1.0, until - self.clock.monotonic()))  # a stop ends it
            delay = min(2 * delay, 60.0)

    def _stopping(self) -> bool:
        """A signal reached the command (raised, held back, or replaced on its way by what it
        left undone), an interrupt is on its way out (``_finish`` runs in a ``finally``), or
        the pool was told to stop."""
        return (signalled() or isinstance(sys.exc_info()[1], KeyboardInterrupt)
                or (self.stop is not None and self.stop.requested))


def baseline_values(reference: optuna.Study) -> list[dict[str, Any]]:
    return [trial_summary(t) for t in reference.get_trials(deepcopy=False)
            if t.user_attrs.get("kind") == TrialKind.BASELINE and t.state == TrialState.COMPLETE]


def spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}
