"""Parallel trials on a pool of equivalent targets: one worker per member, one study.

``target.kubernetes.pool`` names copies of the tuned Deployment (say, the service in three
namespaces, each under its own load). ``PoolRunner`` runs one ``StudyRunner`` per member, each
in a thread of this process, all on the same study in the same storage (Optuna's RDB storage,
the distributed mode Optuna's users know; SQLite or PostgreSQL):

- every member measures the baseline (``exp.baseline.repeats`` times), so a member that differs
  shows (``baseline_runs``, judged by ``autotune.evidence.members``);
- the search's trials go to whichever member is free; a trial records the member that measured
  it; the budget counts the trials members are running, so the study does not overshoot it;
- a member whose trial fails goes on with the next one; a member that stops (its failure limit,
  a stress it could not remove) stops alone, restored, and the others go on; one that could not
  undo something (``NotUndone``) makes the run end in error once the others are done;
- each member restores its own target however its run ends; Ctrl-C or SIGTERM (which only the
  main thread receives) is a ``StopRequest``: a member takes no new trial, its waits on the real
  clock end at once, a watch of the cluster at its next slice; the run ends only once every
  member is restored;
- the confirmation and the drift runs then run on the first member still standing (the target
  itself, unless it stopped); the verdict leaves out the runs of a member whose baseline
  differs (``autotune.study.confirmation.standing.comparable``).

Why threads in one process, not an Indexed Job with a pod per member: one process holds one
lock per member (their Leases), restores every member on any exit, and goes straight on to the
confirmation and the report; a pod per member would need one more coordinator for those, and
the workers spend their time waiting on the cluster and Prometheus, not computing.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.clock import Clock, SystemClock
from autotune.errors import NotUndone, StudyError
from autotune.experiment.models import Experiment, Setting
from autotune.study import storage as st
from autotune.study.interrupts import Interrupted, StopRequest, shielded, shielding
from autotune.study.journal import Journal
from autotune.study.kinds import TrialKind
from autotune.study.loop import (
    Progress,
    RunResult,
    StudyRunner,
    baseline_values,
    best_summary,
    clean_leftovers,
    completed_search,
    enqueue_design,
)
from autotune.study.trial import Backends

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Member:
    """One member of the pool: its name (``namespace/deployment`` on a cluster), the
    experiment aimed at it, its backends and its clock."""

    name: str
    exp: Experiment
    backends: Backends
    clock: Clock


class StoppableClock:
    """A member's clock: its waits end early, raising ``Interrupted``, once the pool is told to
    stop (only the main thread gets signals); never while the member undoes something. On the
    real clock a wait ends at once; a simulated clock is only checked when a wait starts."""

    def __init__(self, clock: Clock, stop: StopRequest) -> None:
        self._clock, self._stop = clock, stop

    def now(self) -> float:
        return self._clock.now()

    def monotonic(self) -> float:
        return self._clock.monotonic()

    def sleep(self, seconds: float) -> None:
        if shielding():
            self._clock.sleep(seconds)
            return
        self._stop.check()
        if isinstance(self._clock, SystemClock):
            if seconds > 0 and self._stop.wait(seconds):
                self._stop.check()
        else:
            self._clock.sleep(seconds)


class _Serialized:
    """The run's progress display, shared by the members' threads."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._lock = threading.Lock()

    def study_started(self, info: dict[str, Any]) -> None:
        with self._lock:
            self._progress.study_started(info)

    def trial_started(self, number: int, kind: str, settings: dict[str, Setting]) -> None:
        with self._lock:
            self._progress.trial_started(number, kind, settings)

    def phase(self, name: str) -> None:
        with self._lock:
            self._progress.phase(name)

    def trial_finished(self, record: dict[str, Any], best: dict[str, Any] | None) -> None:
        with self._lock:
            self._progress.trial_finished(record, best)


@dataclass
class _Outcome:
    member: Member
    result: RunResult | None = None
    error: BaseException | None = None
    described: dict[str, Any] | None = None
    """The member's last description: the confirmation's mid-run checks start from it."""
    deadline: float | None = None
    """``study.deadline`` on the member's clock (``StudyRunner.deadline``)."""
    trial_seconds: list[float] = dataclasses.field(default_factory=list)
    """How long the member's trials took: the confirmation's runs are estimated from them."""


class PoolRunner(StudyRunner):
    """``StudyRunner.run`` on every member at once; everything else (confirmation, drift runs,
    captures) on the lead: the first member, or the first still standing after the search."""

    def __init__(self, exp: Experiment, members: Sequence[Member], *, progress: Progress,
                 journal: Journal, experiment_hash: str, stop: StopRequest | None = None
                 ) -> None:
        """``stop``: the request the members' backends were built to heed (their clocks are
        ``StoppableClock``s on it), so that their waits on the cluster end early too."""
        if not members:
            raise ValueError("a pool needs at least one member")
        lead = members[0]
        super().__init__(lead.exp, lead.backends, clock=lead.clock, progress=progress,
                         journal=journal, experiment_hash=experiment_hash, member=lead.name)
        self.pool_exp = exp
        self.members = list(members)
        self.outcomes: list[_Outcome] = []
        self.request = stop or StopRequest()

    @property
    def width(self) -> int:
        return len(self.members)

    def claim(self) -> None:
        for m in self.members:  # each member's Lease, in the pool's order
            clean_leftovers(m.backends)

    def release(self) -> None:
        errors = []
        for m in self.members:
            try:
                m.backends.target.restore()
            except Exception as e:  # every member gives its claim back
                errors.append(e)
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Every member's metric source, not only the lead's (review finding, 2026-12-06)."""
        for m in self.members:
            try:
                m.backends.source.close()
            except Exception as e:  # close the others all the same
                log.error("could not close %s's metric source: %s", m.name, e)

    def run(self, studies: st.Studies, budget: int,
            stop_rule: Callable[[st.Studies, list[float]], str | None] | None = None
            ) -> RunResult:
        self.study_name = studies.name
        self._search, self._reference = studies.search, studies.reference
        try:
            orphans = st.fail_orphans(studies, self.exp.max_trial_seconds)
            for line in orphans:
                log.warning("%s", line)
            # Queued once, before any member runs: each would otherwise find it missing.
            self.design_size = enqueue_design(self.exp, studies.search,
                                              self.backends.target.describe(), budget)
        except BaseException:
            with shielded():  # no member has started: each gives its claim back here
                try:
                    self.release()
                except Exception as e:
                    log.error("could not give every member back: %s", e)
                finally:
                    self.close()
            raise
        shared = _Serialized(self.progress)
        queue_lock = threading.Lock()
        self.outcomes = [_Outcome(m) for m in self.members]

        finished = threading.Semaphore(0)

        def work(outcome: _Outcome) -> None:
            m = outcome.member
            runner = StudyRunner(m.exp, m.backends, clock=StoppableClock(m.clock, self.request),
                                 progress=shared, journal=self.journal,
                                 experiment_hash=self.hash, member=m.name,
                                 queue_lock=queue_lock, stop=self.request)
            try:
                outcome.result = runner.run(_own_studies(studies), budget, stop_rule)
                outcome.described = runner.described
            except BaseException as e:  # reported by the pool, after every member is done
                outcome.error = e
                if not isinstance(e, Interrupted):
                    log.error("member %s stopped: %s", m.name, e)
            finally:
                outcome.deadline, outcome.trial_seconds = runner.deadline, runner.trial_seconds
                finished.release()

        # Not daemons: the interpreter never ends a member mid-trial.
        threads = [threading.Thread(target=work, args=(o,), name=f"member {o.member.name}")
                   for o in self.outcomes]
        try:
            # Started with signals held (a signal then is raised once all are started), and
            # never joined while a signal can be raised: an exception raised inside
            # ``Thread.join`` marks the thread being joined as ended while it still runs
            # (CPython 3.11, threading.Thread._wait_for_tstate_lock, the bpo-45274 branch),
            # so the pool would go on, and exit, with a member mid-trial, its target not
            # restored. The main thread waits on ``finished`` instead.
            with shielded():
                for t in threads:
                    t.start()
            for _ in threads:
                while not finished.acquire(timeout=0.2):
                    pass
        except BaseException as e:
            with shielded():  # every member stops and restores itself before we go on
                self.request.request(e.signame if isinstance(e, Interrupted) else type(e).__name__)
                _join(threads)
            undone = [o.error for o in self.outcomes if isinstance(o.error, NotUndone)]
            if undone:  # as without a pool: what could not be undone outranks the interrupt
                raise undone[0] from e
            raise
        with shielded():
            _join(threads)
        return self._outcome(studies, orphans)

    def _outcome(self, studies: st.Studies, orphans: list[str]) -> RunResult:
        standing = [o for o in self.outcomes if o.error is None]
        if not standing:
            first = self.outcomes[0].error
            assert first is not None
            if isinstance(first, Interrupted):
                raise first
            undone = next((o.error for o in self.outcomes if isinstance(o.error, NotUndone)),
                          None)
            raise (undone or StudyError([
                f"every member of the pool stopped; {self.outcomes[0].member.name}: {first}"
            ])) from first
        lead = standing[0].member
        if lead is not self.members[0]:
            log.warning("the confirmation runs on %s: %s stopped", lead.name,
                        self.members[0].name)
        self.exp, self.backends, self.clock, self.member = (lead.exp, lead.backends, lead.clock,
                                                            lead.name)
        self._described = standing[0].described
        # The reference runs after the search (on the lead) hold to the lead's deadline, each
        # estimated from the longest trial any member measured.
        self.deadline = standing[0].deadline
        self.trial_seconds = [s for o in self.outcomes for s in o.trial_seconds]
        results = [o.result for o in standing if o.result is not None]
        return RunResult(
            study=studies.name,
            stop_reason=results[0].stop_reason if results else "budget reached",
            completed=completed_search(studies.search),
            failed_this_run=sum(r.failed_this_run for r in results),
            best=best_summary(self.exp, studies.search),
            baseline=baseline_values(studies.reference), orphans=orphans,
            members=[self._line(o) for o in self.outcomes],
            not_undone=[f"{o.member.name}: {o.error}" for o in self.outcomes
                        if isinstance(o.error, NotUndone)],
        )

    @staticmethod
    def _line(o: _Outcome) -> str:
        if o.error is not None:
            return f"{o.member.name}: stopped: {o.error}"
        assert o.result is not None
        return f"{o.member.name}: {o.result.stop_reason}"


def _join(threads: list[threading.Thread]) -> None:
    """Wait for every started member's thread to end (call it shielded: see ``run``)."""
    for t in threads:
        if t.ident is not None:
            t.join()


def _own_studies(studies: st.Studies) -> st.Studies:
    """The same studies through Study objects of the member's own (a sampler is set per
    worker), on the one storage."""
    return dataclasses.replace(
        studies,
        search=optuna.load_study(study_name=studies.search.study_name, storage=studies.storage),
        reference=optuna.load_study(study_name=studies.reference.study_name,
                                    storage=studies.storage))


def baseline_runs(reference: optuna.Study) -> list[tuple[str, float]]:
    """(member, first objective value) of every completed baseline run a member measured."""
    return [(str(t.user_attrs["member"]), float(t.values[0]))
            for t in reference.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
            if t.user_attrs.get("member") and t.user_attrs.get("kind") == TrialKind.BASELINE
            and t.values]
