"""What a look, an extension, a tie-break and the report judge: every completed confirmation
run, read once (``Measured``), and the candidates ranked on them (``Standing``,
``read_standing``), as the report will judge them.

**What a verdict is judged on.** A candidate's verdict rests on its confirmation runs only, not
on the search measurement that chose it: that one is the best of many and biased towards looking
better (the winner's curse), and pooling it made the confirmation adopt wrongly when nothing
differed (docs/measurements/null-2026-12-04.txt). The baseline pools its repeats before the
search and its interleaved runs (neither was chosen). The search measurement may still rule a
candidate out (it can only flatter it: ``significance.judge``), and the report shows it in a
column of its own. When the baseline drifted between its repeats and its interleaved runs, a
look judges every run scaled by the baseline's trend in time, as the report does
(``steadiness``; ``autotune.evidence.drift``). In a pool (``autotune.study.pool``) a member
whose baseline differs is left out (``comparable``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.evidence import significance as sig
from autotune.evidence.drift import Trend, steadied
from autotune.evidence.members import differing
from autotune.experiment.models import Experiment
from autotune.study import storage as st
from autotune.study.confirmation.attrs import Extension, extensions
from autotune.study.confirmation.candidates import BASELINE, Pick, feasible
from autotune.study.kinds import TrialKind
from autotune.study.loop import trial_summary
from autotune.study.objective import directions
from autotune.study.record import measured_at
from autotune.study.space import settings_key

MIN_RUNS = 3
"""Runs a side before the report may call "better": three confirmation runs."""


def comparable(trials: Iterable[FrozenTrial]) -> Callable[[FrozenTrial], bool]:
    """Whether a trial's measurement may join the verdict: in a pool (``autotune.study.pool``),
    not one measured by a member whose baseline DIFFERS (``autotune.evidence.members``)."""
    trials = list(trials)
    runs = [(str(t.user_attrs["member"]), float(t.values[0])) for t in trials
            if t.user_attrs.get("member") and t.user_attrs.get("kind") == TrialKind.BASELINE
            and t.values]
    # The member that runs the confirmation is the pool's target (``members``: the reference).
    reference = next((str(t.user_attrs["member"]) for t in trials
                      if t.user_attrs.get("kind") == TrialKind.CONFIRM
                      and t.user_attrs.get("member")), None)
    left_out = differing(runs, reference)
    return lambda t: t.user_attrs.get("member") not in left_out


def pooled_values(
    studies: st.Studies, settings: Mapping[str, Any] | None
) -> list[float]:
    """The completed measurements of a configuration's first objective its verdict rests on: its
    confirmation runs (not the search trial that chose it: module docstring); for ``None`` (the
    baseline) its repeats and interleaved runs. In a pool, not those of a member whose baseline
    differs (``comparable``)."""
    return [t.values[0] for t in Measured.read(studies).pooled(settings)]


def searched_values(studies: st.Studies, settings: Mapping[str, Any],
                    steady: Trend | None = None) -> list[float]:
    """A configuration's search measurements of the first objective, in trial order (in a
    pool, not a differing member's): what may rule a candidate out, never in
    (``significance.judge``); scaled by ``steady`` when given (``steadiness``)."""
    mine = comparable(studies.reference.get_trials(deepcopy=False,
                                                    states=[TrialState.COMPLETE]))
    key = settings_key(settings)
    return [_value(t, steady) for t in studies.search.get_trials(deepcopy=False,
                                                                 states=[TrialState.COMPLETE])
            if t.values and settings_key(t.params) == key and mine(t)]


def steadiness(studies: st.Studies) -> Trend | None:
    """The baseline's trend in time when its runs drifted between its repeats and its
    interleaved runs, as the report finds it (``autotune.evidence.drift.steadied``): a look
    judges every run scaled by it, as the report will. None when they did not."""
    return Measured.read(studies).steadiness()


def _value(t: FrozenTrial, steady: Trend | None) -> float:
    """A trial's first objective, scaled by ``steady`` when it has one and a time (as
    ``autotune.report.summarize`` scales a row)."""
    at = measured_at(t.user_attrs.get("record") or {})
    value = float(t.values[0])
    return value if steady is None or at is None else steady.scale(at, value)


@dataclass(frozen=True)
class Measured:
    """The reference study's completed runs a look may judge, read once: in the report's order
    (``autotune.report.summarize``: the reference study's order), so that a look and the report,
    bootstrapping with one seed, draw the same resamples; in a pool, not a differing member's
    (``comparable``)."""

    runs: list[FrozenTrial]
    extension_rounds: frozenset[int]

    @staticmethod
    def read(studies: st.Studies) -> Measured:
        reference = studies.reference.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
        mine = comparable(reference)
        return Measured([t for t in reference if mine(t) and t.values],
                         frozenset(e.round for e in extensions(studies.search.user_attrs).values()))

    def pooled(self, settings: Mapping[str, Any] | None) -> list[FrozenTrial]:
        """The runs ``pooled_values`` takes its values from. The baseline's leave out those of
        extension rounds (``Extension``: they count for their candidate alone)."""
        if settings is None:
            # The repeats, then the interleaved runs: the report's order (``summarize``), also
            # when a repeat completed after them (one queued again on a later night), so that
            # a look and the report resample the same sequence.
            repeats = [t for t in self.runs if t.user_attrs.get("kind") == TrialKind.BASELINE]
            return repeats + [t for t in self.runs if t.user_attrs.get("kind") == TrialKind.CONFIRM
                              and t.user_attrs.get("candidate") == BASELINE
                              and t.user_attrs.get("round") not in self.extension_rounds]
        key = settings_key(settings)
        return [t for t in self.runs if t.user_attrs.get("kind") == TrialKind.CONFIRM
                and t.user_attrs.get("candidate") != BASELINE
                and settings_key(t.user_attrs.get("settings", {})) == key]

    def judged(self) -> dict[str, Pick]:
        """Every configuration with a confirmation run (tonight's and earlier nights'), as
        ``summarize`` groups them: by settings, in run order, each named by the search trial of
        its first confirmation run."""
        out: dict[str, Pick] = {}
        for t in self.runs:
            candidate = t.user_attrs.get("candidate")
            if t.user_attrs.get("kind") != TrialKind.CONFIRM or not isinstance(candidate, int):
                continue  # the baseline's runs are labelled BASELINE, not a trial number
            settings = dict(t.user_attrs.get("settings", {}))
            out.setdefault(settings_key(settings), Pick(candidate, settings, (), ()))
        return out

    def extension_baseline(self, e: Extension) -> list[FrozenTrial]:
        """The baseline's runs in an extension round."""
        return [t for t in self.runs if t.user_attrs.get("kind") == TrialKind.CONFIRM
                and t.user_attrs.get("candidate") == BASELINE
                and t.user_attrs.get("round") == e.round]

    def steadiness(self) -> Trend | None:
        """``steadiness``."""
        timed = [(t.user_attrs.get("kind") == TrialKind.BASELINE,
                  measured_at(t.user_attrs.get("record") or {}), t.values[0])
                 for t in self.pooled(None)]
        _, steady = steadied([(at, v) for repeat, at, v in timed if repeat],
                             [(at, v) for repeat, at, v in timed if not repeat])
        return steady


@dataclass(frozen=True)
class Standing:
    """What one look judges: the candidates the report may adopt, best first, the values of
    their confirmation runs and the baseline's, all scaled by ``steady`` when it is not None."""

    ranked: list[Pick]
    values: dict[int, list[float]]
    baseline: list[float]
    """The baseline's runs every candidate is judged against (``Measured.pooled``)."""
    steady: Trend | None
    given: dict[int, _Given]
    """By candidate trial: the extension round of each candidate given one."""

    def own(self, trial: int) -> list[float]:
        """The baseline's runs in a candidate's extension round ([] without one)."""
        given = self.given.get(trial)
        return [] if given is None else given.baseline

    def against(self, trial: int) -> list[float]:
        """The baseline's runs a candidate is judged against: with its extension round's."""
        return [*self.baseline, *self.own(trial)]

    def rank_alpha(self, trial: int, alpha: float) -> float | None:
        """The rank test's level for a candidate whose share is ``alpha``: its extension's
        (``Extension.level_for``, as the report judges it), None without one."""
        given = self.given.get(trial)
        return (None if given is None
                else given.extension.level_for(alpha, (given.measured, len(given.baseline))))


@dataclass(frozen=True)
class _Given:
    """A candidate's extension round as a look sees it."""

    extension: Extension
    baseline: list[float]
    """The baseline's runs in that round (its alone: ``Extension``), scaled as every run."""
    measured: int
    """The candidate's completed runs in that round."""


def read_standing(exp: Experiment, studies: st.Studies, candidates: Sequence[Pick]) -> Standing:
    """The measured candidates the report may adopt, best first (by ``significance.rank_key``
    of the confirmation runs of each, as the report chooses), those runs by trial, and the
    baseline's, scaled by the baseline's trend when it drifted (``steadiness``, found once a
    look). A candidate with a run that violated a constraint is left out: the report never
    adopts it, so it must not lead (nor be the runner-up) a look."""
    direction = directions(exp)[0]
    measured = Measured.read(studies)
    steady = measured.steadiness()
    trials = {p.trial: measured.pooled(p.settings) for p in candidates}
    values = {n: [_value(t, steady) for t in ts] for n, ts in trials.items()}
    ranked = sorted((p for p in candidates if trials[p.trial]
                     and all(feasible(trial_summary(t)) for t in trials[p.trial])),
                    key=lambda p: (*sig.rank_key(values[p.trial], direction), p.trial))
    recorded = extensions(studies.search.user_attrs)
    given: dict[int, _Given] = {}
    for p in candidates:
        e = recorded.get(settings_key(p.settings))
        if e is not None:
            given[p.trial] = _Given(e, [_value(t, steady) for t in measured.extension_baseline(e)],
                                    sum(t.user_attrs.get("round") == e.round
                                        for t in trials[p.trial]))
    return Standing(ranked, values, [_value(t, steady) for t in measured.pooled(None)], steady,
                     given)



def call(exp: Experiment, studies: st.Studies, standing: Standing, p: Pick,
          each: float) -> str:
    """Candidate ``p`` against the baseline at ``each``, as the report calls it."""
    searched = searched_values(studies, p.settings, standing.steady)
    return sig.judge(standing.values[p.trial], searched, standing.against(p.trial),
                     metric=exp.goals[0].label, direction=directions(exp)[0], confidence=each,
                     min_runs=MIN_RUNS, rank_alpha=standing.rank_alpha(p.trial, 1 - each)
                     ).outcome


def last_round(studies: st.Studies) -> int:
    """The highest confirmation round the study holds (0: none)."""
    return max((t.user_attrs.get("round") or 0
                for t in studies.reference.get_trials(deepcopy=False)
                if t.user_attrs.get("kind") == TrialKind.CONFIRM), default=0)



def every_judged(studies: st.Studies, candidates: Sequence[Pick]) -> list[Pick]:
    """Tonight's candidates and every other configuration the report judges (``judged``: an
    earlier night's, in a study continued over nights), each named by the search trial of its
    first confirmation run: the report chooses among all of them, so a tie-break is about
    whichever it would adopt."""
    picks = list(candidates)
    seen = {settings_key(p.settings) for p in picks}
    return picks + [p for key, p in Measured.read(studies).judged().items() if key not in seen]


def judged(studies: st.Studies) -> int:
    """How many candidates the report judges against the baseline (``Measured.judged``)."""
    return len(Measured.read(studies).judged())


def completed(studies: st.Studies) -> int:
    return sum(1 for t in studies.reference.get_trials(deepcopy=False,
                                                       states=[TrialState.COMPLETE])
               if t.user_attrs.get("kind") == TrialKind.CONFIRM)
