"""Confirmation runs: re-measure the top search configurations and the baseline, interleaved.

A search trial is measured once, and the best of many single measurements is optimistic. So the
top configurations and the baseline are measured again, ``repeats`` rounds, each round holding
every configuration once in a shuffled order: slow drift of the host or cluster (other tenants,
thermal state, a noisy neighbour arriving) then hits every configuration alike instead of
favouring whichever ran first.

Confirmation trials live in the reference study with user attrs ``kind="confirm"``,
``candidate`` (the search trial number, or ``"baseline"``), ``round`` (1-based) and
``settings``; they never count as search trials. A (configuration, round) pair that already
completed, or is queued, is not scheduled again, so a resumed confirm continues where it stopped.
Configurations are matched by their settings, not by trial number.

**Adaptive rounds.** After the fixed rounds, while the best candidate is not separated from the
runner-up or from the baseline (the bootstrap interval of the relative difference of medians,
over the candidates' confirmation runs and the baseline's repeats + interleaved runs, still
spans "no difference" and a worthwhile one), one more shuffled round measures just
the unresolved ones (the best always, the runner-up and/or the baseline), until ``extra``
trials are spent. The report then says "better", "equivalent within 5%" or "not told apart"
(with the interval's two ends), honest answers all.

**Sequential confirmation** (the default of ``autotune run`` and ``autotune confirm``; the fixed
rounds above are ``--fixed``). ``repeats`` is the most rounds (looks) there will be. Round 1
measures the top candidates and the baseline, shuffled; after each round the evidence is looked
at with the interval the report computes: the best candidate (best mean over its confirmation
runs, as the report chooses among candidates: ``significance.typical``) against the baseline,
and against the runner-up. A comparison is decided when its interval says "better" (low > 0) or
"equivalent within PRACTICAL" (high < 5%), on at least ``LOOK_RUNS`` runs of the best ("better"
also needs the exact rank test: ``significance.separation_p``). Confirmation
stops when the best is decided "better" than the baseline (the report then adopts it, whatever
the runner-up), or when both comparisons are decided (``undecided``); otherwise the next round
measures the best and what is not decided against it (the baseline, the runner-up), shuffled,
until ``repeats`` rounds.

**What a verdict is judged on.** A candidate's verdict rests on its confirmation runs only, not
on the search measurement that chose it: that one is the best of many and biased towards looking
better (the winner's curse), and pooling it made the confirmation adopt wrongly when nothing
differed (docs/measurements/null-2026-12-04.txt). The baseline pools its repeats before the
search and its interleaved runs (neither was chosen). The search measurement may still rule a
candidate out (it can only flatter it: ``significance.judge``), and the report shows it in a
column of its own. When the baseline drifted between its repeats and its interleaved runs, a
look judges every run scaled by the baseline's trend in time, as the report does
(``steadiness``; ``autotune.evidence.drift``).

Its error rate under repeated looks and several candidates, and the limits of that claim. The
looks spend alpha = 5% unequally (``look_levels``): the looks that may stop the confirmation
early share ``INTERIM_ALPHA`` = 1% equally, and the verdict gets the other 4% (a 96% interval).
A look that *cannot* decide spends nothing (``silent_looks``): an early look needs
``LOOK_RUNS`` = 4 runs of the leader (at 1% or less the exact rank test cannot call "better" on
3 runs against 6), so with a candidate with no earlier run the looks after rounds 1 to 3 cannot
decide, the default 3 rounds (and ``--repeats 4``) have no early look that decides, and the
verdict gets the whole 5% (95%, as one fixed look; 96% from 5 rounds on, or when tonight's
candidates already hold runs from an earlier night). Which looks are silent depends
only on the runs held before tonight's first round, so the split is fixed in advance. The
report adopts if any of the ``k`` candidates it judges is called better, so each is judged at
``significance.each_of(level, k)`` (98.33% each for 3 candidates at the default verdict):
Bonferroni over the candidates. The study records the family's levels (``CONFIDENCE_ATTR``,
``LOOK_CONFIDENCE_ATTR``, the latter only when an early look could decide); a later call never
lowers either; ``k`` is counted from the runs (a study continued over nights judges every
night's candidates). An early look stops only when the report, judging at the verdict's level,
would make the call the look made, for the best and the runner-up against the baseline
(``undecided``). By Bonferroni's inequality a wrong candidate-vs-baseline call at any look has
probability at most alpha, for any split and whatever the dependence between looks and
candidates. Why most of it at the end: a strict constant level at the early looks and nearly the
nominal one at the last is the Haybittle-Peto shape. For a wrong "better" (the call that changes
production) the bound is exact for the default schedule, not nominal: "better" needs the exact
one-sided rank-sum test at p <= 1 - the call's level (``significance.separation_p``), so when
nothing differs, the runs are exchangeable (no drift) and their number is fixed in advance (3
rounds; an extension round is a second look counted exactly for its one candidate, below;
``--fixed``'s adaptive rounds re-test at one level and are not exact) each candidate's
wrong "better" has at most its share (at 3 runs
against 6, 1 / C(9, 3) = 1.2% against each of 3 candidates' 1.67%), whatever the runs'
distribution. The percentile bootstrap alone overshot at 3-6 runs a side. Simulated with nothing
differing (``benchmarks/bench_significance.py``; docs/measurements/exact-2026-12-04.txt): the
whole confirmation, 3 of 7 search values confirmed, adopts wrongly in 2.9-3.3% of runs at noise
sigma 0.1-0.3 (4.4-6.0% on the bootstrap alone; 12.7-19.7% when the search value was pooled and
each candidate judged at the family's level); the whole product replayed with every
configuration alike (``whole_run --null``), 4-5% (5-5.5% with the extension round: 11 of 200,
5 of 100; a chance drift call and its scaling, which is not exact, make most of the rest).
``k`` only grows over nights: a study continued night after night gets harder to adopt from,
and a report re-made on night 2 may call night 1's candidate unclear.

**Extension** (``extension_round``, since 2026-12-05). After the planned rounds, a leader the
report would call undecided ("unclear") against the baseline gets one or two more runs, and the
baseline as many, the fewest that could still make it "better", and is then judged at a
stricter rank-test level, chosen so that a wrong "better" at either look (the planned one or
this one) stays within the candidate's share of alpha (``autotune.evidence.extension``, counted
exactly: at 3 runs against 6 and 1.67%, a leader one crossing short gets one run a side and may
keep that one crossing at 4 against 7, p <= 0.61%; two or three short, two runs a side and up
to 3 crossings at 5 against 8, p <= 0.54%; the two looks together are wrong at most 1.54% of
the time). The level is recorded (``EXTENSION_ATTR``) before the round is measured, and the
report holds the candidate to it. It is given only when no earlier look could decide (the
default rounds: the count assumes one planned look), and once per call. It costs 2 or 4 trials
in the runs it is given in; what it buys was replayed before it was adopted
(docs/measurements/extension-2026-12-05.txt, extension-2026-12-05b.txt).

**Tie-break** (``tiebreak_round``, since 2026-12-05 (e)). After the looks, when the report
would adopt (it calls a candidate better) and another candidate may be better than the one it
would choose (``autotune.evidence.tiebreak.contests``), the two get one more run each, the
baseline none, at most ``TIE_BREAKS`` (2) times; the report then chooses on all their runs.
The other candidate is one the report also calls better whose runs overlap the leader's and
whose mean is within 10%, or (since 2026-12-06) one the looks dropped on one or two runs whose
mean, with its search measurement, is better than the leader's and which the tie-break's runs
could still make better (``_revivable``). It adds no ADOPT: it is given only when the report
would already adopt, and the baseline gets no run. A candidate it measures again is held to
its share of alpha as planned (3 runs against the baseline's 6 pass by chance with 1 / C(9, 3)
= 1.2%, whenever the decision to measure them was taken). One more run can make the leader's
call "unclear" (the runs differ, or a drifted baseline's trend scales a later run), and when the
rival is not called better either the verdict becomes INCONCLUSIVE: 1 replayed run in 1600.
Not after an extension (the night keeps back trials for one or the other). Replayed before it
was adopted (docs/measurements/tiebreak-2026-12-05.txt, tiebreak-2026-12-06.txt).

The runner-up comparison only decides when to stop measuring, not the verdict.
"""

from __future__ import annotations

import logging
import math
import random
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from optuna.trial import FrozenTrial, TrialState

from autotune.evidence import significance as sig
from autotune.evidence.drift import Trend, steadied
from autotune.evidence.extension import MOST_ADDED, extension_level, extension_levels
from autotune.evidence.members import differing
from autotune.evidence.tiebreak import TIE_BREAKS, TIE_GAP, contests
from autotune.experiment.models import Experiment, Setting
from autotune.study import storage as st
from autotune.study.kinds import TrialKind
from autotune.study.loop import trial_summary
from autotune.study.objective import directions
from autotune.study.record import measured_at
from autotune.study.space import settings_key

log = logging.getLogger(__name__)

BASELINE = "baseline"
"""The ``candidate`` of a confirmation run of the baseline (a label, not a ``TrialKind``)."""

CONFIDENCE_ATTR = "confirm_confidence"
"""Search-study user attr: the confidence of the sequential confirmation's verdict (its last
look); the report's verdict uses it (absent: ``significance.CONFIDENCE``, a fixed design)."""

LOOK_CONFIDENCE_ATTR = "confirm_look_confidence"
"""Search-study user attr: the confidence of each earlier look that can decide, the ones that may
stop the confirmation. Absent when no early look could decide (``silent_looks``: one round, or
the default 3 with no earlier runs), and in studies confirmed before the split (they looked at
``CONFIDENCE_ATTR`` every time)."""

RULE_ATTR = "verdict_rule"
"""Search-study user attr: the rule its confirmation was run under (``RULE``). Absent in a study
confirmed before 2026-12-04, when a candidate's search measurement counted as evidence for it
and each candidate was judged at the family's level: the report, judging by today's rule, says
that a report made then may have given another verdict on the same runs."""

RULE = 3
"""Confirmation runs alone for "better", Bonferroni over the candidates (module docstring), and
"better" held to its level by the exact rank test (``significance.separation_p``; 3 since
2026-12-04 (d), 2 before)."""

EXTENSION_ATTR = "confirm_extension"
"""Search-study user attr: ``{settings key: Extension as a dict}`` for each candidate given an
extension round (``extension_round``), recorded before that round is measured (``extensions``
reads it back)."""

@dataclass(frozen=True)
class Extension:
    """One candidate's extension round (``extension_round``). The baseline's runs in that round
    count in this candidate's comparison only (in the report and in a later night's looks):
    pooled for the other candidates (judged on their planned runs at their full share) they
    would be a second look nothing pays for, and they stay out of the drift trend too."""

    level: float
    """The rank test's level, recorded before the round was measured."""
    round: int
    """The confirmation round the extension was measured in."""
    runs: tuple[int, int]
    """The candidate's and the baseline's runs at the planned look the level was counted for."""
    added: int = 1
    """Runs of each the round adds (``autotune.evidence.extension``: the fewest that could
    pass; 1 in a study extended before 2026-12-05 (b))."""

    def judged_at(self, alpha: float) -> float:
        """The level to judge the candidate at when its share of alpha is ``alpha``: the
        recorded one, or the two-look level recounted at ``alpha`` when a study continued over
        nights judges more candidates and ``alpha`` shrank (0 when no level fits: it cannot be
        called better)."""
        if not 1 <= self.added <= MOST_ADDED:  # a record this version cannot count
            return 0.0
        again = extension_level(*self.runs, alpha, self.added)
        return min(self.level, 0.0 if again is None else again)

    def in_part(self, measured: tuple[int, int]) -> bool:
        """Whether the round was measured in part: ``measured``, the candidate's and the
        baseline's completed runs in it, is neither none nor ``added`` of each (a run failed for
        good)."""
        return measured not in ((0, 0), (self.added, self.added))

    def level_for(self, alpha: float, measured: tuple[int, int]) -> float:
        """The level the report and the looks judge the candidate at (``judged_at``), or 0 when
        the round was measured in part (``in_part``): its level was counted for ``added`` runs
        of each, and no other count is paid for, so it cannot be called better. A round not yet
        measured already holds the candidate to the stricter level."""
        return 0.0 if self.in_part(measured) else self.judged_at(alpha)

    def record(self) -> dict[str, Any]:
        return {"level": self.level, "round": self.round, "runs": list(self.runs),
                "added": self.added}


def extensions(attrs: Mapping[str, Any]) -> dict[str, Extension]:
    """The extension rounds a study's search-study user attrs record, by settings key. Pure."""
    return {key: Extension(level=float(e["level"]), round=int(e["round"]),
                           runs=(int(e["runs"][0]), int(e["runs"][1])),
                           added=int(e.get("added", 1)))
            for key, e in (attrs.get(EXTENSION_ATTR) or {}).items()}


@dataclass(frozen=True)
class Offer:
    """An extension round ``extension_for`` gives: ``added`` more runs of the leader and of the
    baseline, the leader then called better at a rank-test p-value <= ``level``."""

    added: int
    level: float


MIN_RUNS = 3
"""Runs a side before the report may call "better": three confirmation runs."""

LOOK_RUNS = MIN_RUNS + 1
"""Runs of the leader before an early look may decide. An early look holds at most
``INTERIM_ALPHA`` = 1%, and "better" needs the exact rank test at that level
(``significance.separation_p``): 3 runs against 6 (3 baseline repeats and one a round) separate
by chance with probability 1 / C(9, 3) = 1.2%, so a look on 3 runs could never call it; 4
against 7 do with 0.30%. It is a count, not a computation: with more baseline repeats 3 runs
might pass at 1% (3 against 7: 0.83%), and with 4 or more candidates (1% / 4 each) or several
deciding looks a look may spend a share that 4 runs cannot reach; both only make the
confirmation more careful than it could be, never less. A look on fewer runs does not stop on
"equivalent" either: a look spends its share on any call, so one that can call only one side
would still spend it."""

INTERIM_ALPHA = 0.01
"""The share of alpha (of ``1 - significance.CONFIDENCE`` = 5%) the looks before the verdict
that can decide spend between them; the verdict spends the rest, all of it when none can
(module docstring)."""


@dataclass(frozen=True)
class LookLevels:
    """The confidence of the looks of one sequential confirmation."""

    interim: float
    """Each look after rounds 1 .. looks - 1 (1.0 when there are none)."""
    verdict: float
    """The look after the last round: the report's verdict."""


def look_levels(looks: int, silent: int = 0) -> LookLevels:
    """The levels of ``looks`` looks such that a wrong decisive call at any of them has
    probability at most ``1 - significance.CONFIDENCE`` (module docstring). Pure.

    ``silent``: how many of the first looks cannot decide whatever the runs say (the leader has
    fewer than ``LOOK_RUNS`` runs there: ``silent_looks``). They spend nothing; when no early
    look can decide, the verdict gets the whole 5%."""
    if looks < 1:
        raise ValueError("looks must be >= 1")
    if silent < 0:
        raise ValueError("silent must be >= 0")
    alpha = 1 - sig.CONFIDENCE
    deciding = max(0, looks - 1 - silent)
    if deciding == 0:
        return LookLevels(interim=1.0, verdict=sig.CONFIDENCE)
    return LookLevels(interim=1 - INTERIM_ALPHA / deciding, verdict=1 - (alpha - INTERIM_ALPHA))


def silent_looks(looks: int, prior: int) -> int:
    """How many of the first ``looks - 1`` early looks cannot decide when no candidate has more
    than ``prior`` confirmation runs before this confirmation starts: each round gives a
    configuration at most one run, so after round ``r`` the leader has at most ``prior + r``,
    and an early look with fewer than ``LOOK_RUNS`` calls nothing (``undecided``). It depends
    only on what was measured before tonight's first round, so the split stays fixed in
    advance. Pure."""
    return min(max(0, looks - 1), max(0, LOOK_RUNS - 1 - prior))


def undecided(
    best: Sequence[float], baseline: Sequence[float], runner_up: Sequence[float] | None,
    *, levels: LookLevels, metric: str, direction: sig.Direction,
    searched: tuple[Sequence[float], Sequence[float]] = ((), ()),
    rank_alpha: tuple[float | None, float | None] = (None, None),
    own: tuple[Sequence[float], Sequence[float]] = ((), ()),
) -> list[str]:
    """Which comparisons one early look leaves open: ``BASELINE`` and/or ``"runner-up"`` ([]
    when the confirmation may stop). Pure.

    - The best against the baseline is decided when its interval at ``levels.interim`` says
      "better" or "equivalent" on at least ``LOOK_RUNS`` runs of the best (``silent_looks``),
      and its interval at
      ``levels.verdict``, the level the report then judges these runs at, says the same: an
      "equivalent" at 99.5% that 96% calls "better" would stop on one call and be reported as
      another, a 4% look the split does not pay for.
    - The runner-up does not matter once the best is decided "better": the report adopts the
      best mean among the feasible candidates called better (``significance.typical``), and
      the best is the best mean of tonight's feasible candidates (``_standing``), so the
      runner-up's runs cannot change the verdict or the configuration adopted (a candidate of
      an earlier night, with a better mean and called better, still can: the report judges
      it at the verdict's level). Measuring the runner-up until separated was priced and
      dropped: 0.7 simulated minutes a run; within-10% a point either way on the demo grids
      and 3 points lower on the outside service (12-03b/c/d 97/93/89% with those rounds,
      96/94/90% without; inventory 76% against 73%; docs/measurements/choice-2026-12-03.txt).
      After the looks, a tie-break may still give both one or two more runs
      (``tiebreak_round``): only when the report would call both better and their means are
      within 10%.
    - Otherwise the runner-up is decided when the best is separated from it at
      ``levels.interim`` and the report's call on the runner-up against the baseline is not
      "unclear" and the same at both levels: the report adopts the best among every candidate
      called better, and says INCONCLUSIVE while one is unclear. Candidates beyond the
      runner-up (the third of ``top``, an earlier night's) are not looked at: their 1 or 2 runs
      rarely decide anything.
    """
    def outcome(a: Sequence[float], b: Sequence[float], confidence: float) -> str:
        # As the report calls it: "better" needs MIN_RUNS a side, "equivalent" does not.
        return sig.compare(a, b, metric=metric, direction=direction, confidence=confidence,
                           min_runs=MIN_RUNS).outcome

    def against(a: Sequence[float], search: Sequence[float], confidence: float,
                alpha: float | None, extra: Sequence[float]) -> str:
        # As the report judges a candidate (significance.judge; ``alpha``: its rank test's
        # level after an extension round, Extension, which only ever lowers it, and ``extra``
        # the baseline's runs in that round, which count for it alone).
        return sig.judge(a, search, [*baseline, *extra], metric=metric, direction=direction,
                         confidence=confidence, min_runs=MIN_RUNS, rank_alpha=alpha).outcome

    # A look at 100% is one the split gave nothing (``silent_looks``): it never decides.
    call = (against(best, searched[0], levels.interim, rank_alpha[0], own[0])
            if len(best) >= LOOK_RUNS and levels.interim < 1.0 else "unclear")
    todo = ([] if call != "unclear"
            and call == against(best, searched[0], levels.verdict, rank_alpha[0], own[0])
            else [BASELINE])
    # When the best is better the report adopts it (both rank candidates by the mean of every
    # run, significance.typical): the runner-up cannot change the verdict.
    if runner_up is not None and not (call == "better" and not todo):
        separated = (min(len(best), len(runner_up)) >= MIN_RUNS
                     and outcome(best, runner_up, levels.interim) != "unclear")
        last = against(runner_up, searched[1], levels.verdict, rank_alpha[1], own[1])
        final = last != "unclear" and last == against(runner_up, searched[1], levels.interim,
                                                      rank_alpha[1], own[1])
        if not (separated and final):
            todo.append("runner-up")
    return todo


# Trials in these states hold their (configuration, round) slot: done, or about to run.
_HOLDING = (TrialState.COMPLETE.name, TrialState.WAITING.name, TrialState.RUNNING.name)


class ReferenceRunner(Protocol):
    def run_reference(
        self, studies: st.Studies, entries: list[dict[str, Any]],
        then: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> int: ...


@dataclass(frozen=True)
class Pick:
    """A distinct search configuration; ``trial`` is the first search trial that measured it."""

    trial: int
    settings: dict[str, Setting]
    values: tuple[float, ...]
    """Median over the search trials with these settings, one per objective."""
    trials: tuple[int, ...]


def _feasible(summary: Mapping[str, Any]) -> bool:
    return all(v <= 0 for v in (summary.get("constraints") or {}).values())


def top_configurations(
    summaries: Sequence[Mapping[str, Any]],
    dirs: Sequence[str],
    top: int,
    *,
    exclude: Sequence[Mapping[str, Any]] = (),
) -> list[Pick]:
    """The best ``top`` distinct feasible configurations of the search, best first. Pure.

    ``summaries`` are ``trial_summary`` dicts of the search study. Trials with the same settings
    are one configuration, summarised by their median (a repeat should not count as luck twice);
    it is feasible only if every one of its trials was. With several objectives: the
    configurations on the Pareto front of those medians, ordered by the first objective, up to
    ``top``. Configurations equal to one in ``exclude`` (the baseline) are skipped.
    """
    excluded = {settings_key(s) for s in exclude}
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for s in summaries:
        if (s.get("kind", TrialKind.SEARCH) != TrialKind.SEARCH
                or s.get("state") != TrialState.COMPLETE.name or not s.get("values")):
            continue
        groups.setdefault(settings_key(s["settings"]), []).append(s)
    picks = []
    for key, members in groups.items():
        if key in excluded or not all(_feasible(m) for m in members):
            continue
        members = sorted(members, key=lambda m: int(m["number"]))
        values = tuple(statistics.median(m["values"][i] for m in members)
                       for i in range(len(dirs)))
        picks.append(Pick(trial=int(members[0]["number"]), settings=dict(members[0]["settings"]),
                          values=values, trials=tuple(int(m["number"]) for m in members)))
    signs = [1.0 if d == "minimize" else -1.0 for d in dirs]

    def oriented(p: Pick) -> tuple[float, ...]:
        return tuple(s * v for s, v in zip(signs, p.values, strict=True))

    if len(dirs) > 1:
        picks = [p for p in picks if not any(_dominates(oriented(q), oriented(p)) for q in picks)]
    return sorted(picks, key=lambda p: (oriented(p), p.trial))[:top]


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


@dataclass(frozen=True)
class Plan:
    candidates: tuple[Pick, ...]
    entries: tuple[dict[str, Any], ...]
    """User attrs of the trials still to queue, in run order."""
    already: int
    """(configuration, round) slots already completed or queued."""


def plan(
    exp: Experiment,
    search: Sequence[Mapping[str, Any]],
    reference: Sequence[Mapping[str, Any]],
    *,
    top: int,
    repeats: int,
    seed: int | None,
) -> Plan:
    """The confirmation schedule. Pure (given ``seed``).

    ``search`` and ``reference`` are trial summaries, the reference ones with ``round`` added.
    Rounds are shuffled independently of what is already done, so a resumed plan with the same
    seed runs the remaining slots in the order the first plan had them.
    """
    if top < 1 or repeats < 1:
        raise ValueError("top and repeats must be >= 1")
    baseline = exp.baseline_settings()
    picks = top_configurations(search, directions(exp), top, exclude=[baseline])
    if not picks:
        return Plan((), (), 0)
    configs: list[tuple[int | str, dict[str, Setting]]] = [(BASELINE, baseline)]
    configs += [(p.trial, p.settings) for p in picks]
    held = {
        (BASELINE if t.get("candidate") == BASELINE else settings_key(t["settings"]),
         t.get("round"))
        for t in reference if t.get("kind") == TrialKind.CONFIRM and t.get("state") in _HOLDING
    }
    rng = random.Random(seed)
    entries = []
    already = 0
    for r in range(1, repeats + 1):
        for candidate, settings in rng.sample(configs, k=len(configs)):
            key = BASELINE if candidate == BASELINE else settings_key(settings)
            if (key, r) in held:
                already += 1
                continue
            entries.append({"kind": TrialKind.CONFIRM.value, "settings": settings,
                            "candidate": candidate, "round": r})
    return Plan(tuple(picks), tuple(entries), already)


def confirm(
    exp: Experiment,
    studies: st.Studies,
    runner: ReferenceRunner,
    *,
    top: int = 3,
    repeats: int = 3,
    seed: int | None = None,
    extra: int = 0,
    sequential: bool = True,
) -> int:
    """Sequential (module docstring): round 1 measures the top ``top`` search configurations and
    the baseline, each later round the best and the baseline, until the verdict is decisive or
    ``repeats`` rounds are done. Fixed (``sequential=False``): ``repeats`` rounds of every
    candidate and the baseline, interleaved and shuffled, then adaptive rounds within ``extra``
    more trials. Returns how many confirmation trials completed in this call.

    Queued confirmation trials a dead run left behind run too (they hold their slot).
    Returns 0 without measuring anything when the search has no feasible configuration.
    """
    for line in st.fail_orphans(studies, exp.max_trial_seconds):
        log.warning("%s", line)
    search = [trial_summary(t) for t in studies.search.get_trials(deepcopy=False)]
    reference = [{**trial_summary(t), "candidate": t.user_attrs.get("candidate"),
                  "round": t.user_attrs.get("round")}
                 for t in studies.reference.get_trials(deepcopy=False)]
    sequential = sequential and len(directions(exp)) == 1
    if sequential and repeats < MIN_RUNS:
        log.warning("--repeats %d: tonight's candidates get at most %d confirmation run(s), "
                    "fewer than the %d an ADOPT needs; this confirmation can KEEP or say "
                    "INCONCLUSIVE, not adopt them", repeats, repeats, MIN_RUNS)
    schedule = plan(exp, search, reference, top=top, repeats=1 if sequential else repeats,
                    seed=seed)
    if not schedule.candidates:
        log.warning("nothing to confirm: the search has no feasible completed trial")
        return 0
    before = _completed(studies)
    if schedule.entries or any(t["state"] == TrialState.WAITING.name for t in reference):
        log.info("confirming %s and the baseline: %d runs to go, %d done or queued",
                 ", ".join(f"#{p.trial}" for p in schedule.candidates), len(schedule.entries),
                 schedule.already)
    else:
        log.info("every fixed confirmation round is already complete")
    if studies.search.user_attrs.get(RULE_ATTR) != RULE:
        studies.search.set_user_attr(RULE_ATTR, RULE)
    spent = 0
    rng = random.Random(seed)
    # The verdict and the earlier looks hold at the highest level any confirmation of this
    # study used: a later call with other rounds must not lower them (nor a --fixed one).
    levels = (look_levels(repeats, silent_looks(repeats, _prior_runs(reference,
                                                                       schedule.candidates)))
              if sequential else LookLevels(1.0, sig.CONFIDENCE))
    verdict, interim = levels.verdict, levels.interim
    recorded = studies.search.user_attrs.get(CONFIDENCE_ATTR)
    if recorded is not None:
        verdict = max(verdict, float(recorded))
        # A study confirmed before the split looked at the verdict's level every time; one
        # whose looks were all silent recorded none (then the fallback is at most tonight's).
        interim = max(interim, float(studies.search.user_attrs.get(LOOK_CONFIDENCE_ATTR,
                                                                   recorded)))
    if sequential and verdict != recorded:
        studies.search.set_user_attr(CONFIDENCE_ATTR, verdict)
    # No early look that can decide (one round, or too few runs before round ``repeats``):
    # nothing to record (a later call whose looks can decide records its own, and must not
    # inherit a level of 100%).
    if sequential and interim < 1.0 and interim != studies.search.user_attrs.get(
            LOOK_CONFIDENCE_ATTR):
        studies.search.set_user_attr(LOOK_CONFIDENCE_ATTR, interim)
    used = LookLevels(interim=interim, verdict=verdict)
    _warn_if_no_adopt_possible(studies, _prior_runs(reference, schedule.candidates) + repeats,
                               len(schedule.candidates), repeats, verdict,
                               extendable=sequential and interim >= 1.0)

    rounds = 1  # round 1 is the plan's
    phase = "looks"
    ties = 0

    def next_look() -> list[dict[str, Any]]:
        # Rounds are counted per call, not per study: a study continued night after night
        # keeps earlier nights' confirmation rounds (they are evidence), and tonight's
        # candidates still get their ``repeats`` looks, no more. Then at most one extension,
        # then at most TIE_BREAKS tie-breaks; once a look has stopped the looks, no new look.
        nonlocal rounds, phase, ties
        if phase == "looks":
            if rounds < repeats:
                entries = sequential_round(exp, studies, schedule.candidates, used)
                if entries:
                    rounds += 1
                    return rng.sample(entries, k=len(entries))
                phase = "ties"  # decided early: no extension
            else:
                phase = "extension"
        if phase == "extension":
            phase = "ties"
            entries = extension_round(exp, studies, schedule.candidates, used)
            if entries:
                # No tie-break after an extension: the night keeps back trials for one or
                # the other (night.budget.confirm_reserve), and a rival the tie-break could
                # still call better may follow an extended leader that became better.
                ties = TIE_BREAKS
                return rng.sample(entries, k=len(entries))
        if ties >= TIE_BREAKS:
            return []
        ties += 1
        entries = tiebreak_round(exp, studies, schedule.candidates, used,
                                 left=TIE_BREAKS - ties + 1)
        return rng.sample(entries, k=len(entries))

    def next_round() -> list[dict[str, Any]]:
        nonlocal spent
        if spent >= extra or len(directions(exp)) != 1:
            return []
        entries = adaptive_round(exp, studies, schedule.candidates, repeats)
        entries = rng.sample(entries, k=len(entries))[: extra - spent]
        if entries:
            log.info("not yet separated: one more round of %s",
                     ", ".join(e["candidate"] if e["candidate"] == BASELINE
                               else f"#{e['candidate']}" for e in entries))
        spent += len(entries)
        return entries

    # One call, so the backends stay up between rounds (a restarted local Prometheus costs
    # ~6 s before it scrapes a new target).
    runner.run_reference(studies, list(schedule.entries),
                         then=next_look if sequential else next_round)
    # Counted here rather than trusting the runner's count: queued trials already exist when
    # they run, which a "did a new trial appear" count misses.
    return _completed(studies) - before


def _warn_if_no_adopt_possible(studies: st.Studies, runs: int, tonight: int, repeats: int,
                               verdict: float, *, extendable: bool = False) -> None:
    """Warn when the planned runs cannot reach the exact rank test's level whatever they read
    (``significance.separation_p``: its smallest p-value is 1 / C(n + m, n)), nor can an
    extension round's: e.g. a study confirmed at 99.9% before (each of 3 at 0.033%; 5 runs
    against 8 give 0.078% at best) or ``--top 65``. ``runs``: the most a candidate can hold at
    the verdict; the baseline's and the candidates' counts are the report's (``pooled_values``,
    ``judged``).
    ``extendable``: an extension round may follow the planned ones (``extension_round``); a plan
    whose planned runs cannot pass but whose extension can (``--top 5``: 4 against 7 at 0.61%)
    is said so at INFO, not warned about."""
    baseline = len(pooled_values(studies, None)) + repeats
    k = max(tonight, judged(studies))
    level = 1 - sig.each_of(verdict, k)
    best = 1 / math.comb(runs + baseline, runs)
    if runs >= MIN_RUNS and best > level and extendable and any(
            e is not None for e in extension_levels(runs, baseline, level)):
        log.info("%d runs of a candidate against %d of the baseline cannot pass the exact rank "
                 "test at the %.2f%% each of %d candidates may spend: only an extension round "
                 "(more runs of the leader and of the baseline) can adopt", runs, baseline,
                 level * 100, k)
    elif runs >= MIN_RUNS and best > level:
        log.warning("this confirmation cannot adopt: at most %d runs of a candidate against %d "
                    "of the baseline separate by chance with probability %.2f%% at best, above "
                    "the %.2f%% each of %d candidates may spend (the exact rank test, "
                    "significance.separation_p); confirm fewer candidates (--top), more rounds "
                    "(--repeats) or more baseline repeats", runs, baseline, best * 100,
                    level * 100, k)


def _prior_runs(reference: Sequence[Mapping[str, Any]], candidates: Sequence[Pick]) -> int:
    """The most confirmation runs any of tonight's candidates holds (done or queued) before its
    first round: an earlier night's, or a dead run's (``silent_looks``)."""
    counts: dict[str, int] = {}
    for t in reference:
        if (t.get("kind") == TrialKind.CONFIRM and t.get("candidate") != BASELINE
                and t.get("state") in _HOLDING):
            key = settings_key(t.get("settings") or {})
            counts[key] = counts.get(key, 0) + 1
    return max((counts.get(settings_key(p.settings), 0) for p in candidates), default=0)


def comparable(trials: Iterable[FrozenTrial]) -> Callable[[FrozenTrial], bool]:
    """Whether a trial's measurement may join the verdict: in a pool (``autotune.study.pool``),
    not one measured by a member whose baseline DIFFERS (``autotune.evidence.members``)."""
    runs = [(str(t.user_attrs["member"]), float(t.values[0])) for t in trials
            if t.user_attrs.get("member") and t.user_attrs.get("kind") == TrialKind.BASELINE
            and t.values]
    left_out = differing(runs)
    return lambda t: t.user_attrs.get("member") not in left_out


def pooled_values(
    studies: st.Studies, settings: Mapping[str, Any] | None
) -> list[float]:
    """The completed measurements of a configuration's first objective its verdict rests on: its
    confirmation runs (not the search trial that chose it: module docstring); for ``None`` (the
    baseline) its repeats and interleaved runs. In a pool, not those of a member whose baseline
    differs (``comparable``)."""
    return [t.values[0] for t in _Measured.read(studies).pooled(settings)]


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
    return _Measured.read(studies).steadiness()


def _value(t: FrozenTrial, steady: Trend | None) -> float:
    """A trial's first objective, scaled by ``steady`` when it has one and a time (as
    ``autotune.report.summarize`` scales a row)."""
    at = measured_at(t.user_attrs.get("record") or {})
    value = float(t.values[0])
    return value if steady is None or at is None else steady.scale(at, value)


@dataclass(frozen=True)
class _Measured:
    """The reference study's completed runs a look may judge, read once: in the report's order
    (``autotune.report.summarize``: the reference study's order), so that a look and the report,
    bootstrapping with one seed, draw the same resamples; in a pool, not a differing member's
    (``comparable``)."""

    runs: list[FrozenTrial]
    extension_rounds: frozenset[int]

    @staticmethod
    def read(studies: st.Studies) -> _Measured:
        reference = studies.reference.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
        mine = comparable(reference)
        return _Measured([t for t in reference if mine(t) and t.values],
                         frozenset(e.round for e in extensions(studies.search.user_attrs).values()))

    def pooled(self, settings: Mapping[str, Any] | None) -> list[FrozenTrial]:
        """The runs ``pooled_values`` takes its values from. The baseline's leave out those of
        extension rounds (``Extension``: they count for their candidate alone)."""
        if settings is None:
            return [t for t in self.runs if t.user_attrs.get("kind") == TrialKind.BASELINE
                    or (t.user_attrs.get("kind") == TrialKind.CONFIRM
                        and t.user_attrs.get("candidate") == BASELINE
                        and t.user_attrs.get("round") not in self.extension_rounds)]
        key = settings_key(settings)
        return [t for t in self.runs if t.user_attrs.get("kind") == TrialKind.CONFIRM
                and t.user_attrs.get("candidate") != BASELINE
                and settings_key(t.user_attrs.get("settings", {})) == key]

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
class _Standing:
    """What one look judges: the candidates the report may adopt, best first, the values of
    their confirmation runs and the baseline's, all scaled by ``steady`` when it is not None."""

    ranked: list[Pick]
    values: dict[int, list[float]]
    baseline: list[float]
    """The baseline's runs every candidate is judged against (``_Measured.pooled``)."""
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


def _standing(exp: Experiment, studies: st.Studies, candidates: Sequence[Pick]) -> _Standing:
    """The measured candidates the report may adopt, best first (by ``significance.rank_key``
    of the confirmation runs of each, as the report chooses), those runs by trial, and the
    baseline's, scaled by the baseline's trend when it drifted (``steadiness``, found once a
    look). A candidate with a run that violated a constraint is left out: the report never
    adopts it, so it must not lead (nor be the runner-up) a look."""
    direction = directions(exp)[0]
    measured = _Measured.read(studies)
    steady = measured.steadiness()
    trials = {p.trial: measured.pooled(p.settings) for p in candidates}
    values = {n: [_value(t, steady) for t in ts] for n, ts in trials.items()}
    ranked = sorted((p for p in candidates if trials[p.trial]
                     and all(_feasible(trial_summary(t)) for t in trials[p.trial])),
                    key=lambda p: (*sig.rank_key(values[p.trial], direction), p.trial))
    recorded = extensions(studies.search.user_attrs)
    given: dict[int, _Given] = {}
    for p in candidates:
        e = recorded.get(settings_key(p.settings))
        if e is not None:
            given[p.trial] = _Given(e, [_value(t, steady) for t in measured.extension_baseline(e)],
                                    sum(t.user_attrs.get("round") == e.round
                                        for t in trials[p.trial]))
    return _Standing(ranked, values, [_value(t, steady) for t in measured.pooled(None)], steady,
                     given)


def sequential_round(
    exp: Experiment, studies: st.Studies, candidates: Sequence[Pick], levels: LookLevels,
) -> list[dict[str, Any]]:
    """The next round of the sequential confirmation, or [] when the look after the last round
    is decisive (module docstring; ``confirm`` stops after ``repeats`` rounds). The round holds
    the best and what is not yet separated from it: the baseline, the runner-up. Its number
    follows every confirmation round of the study (a continued study keeps earlier nights')."""
    direction = directions(exp)[0]
    standing = _standing(exp, studies, candidates)
    ranked, values, baseline, steady = (standing.ranked, standing.values, standing.baseline,
                                        standing.steady)
    # Each candidate at the level the report will judge it: Bonferroni over every candidate
    # it judges (module docstring).
    k = judged(studies)
    levels = LookLevels(interim=sig.each_of(levels.interim, k),
                        verdict=sig.each_of(levels.verdict, k))
    done = _last_round(studies)
    if not ranked or not baseline:
        return []
    best, metric = ranked[0], exp.goals[0].label
    runner_up = ranked[1] if len(ranked) > 1 else None
    # An extended candidate is judged as the report judges it: at its extension's level
    # (Extension.level_for) against the baseline with that round's runs.
    alpha = 1 - levels.verdict
    pending = undecided(values[best.trial], baseline,
                        None if runner_up is None else values[runner_up.trial],
                        levels=levels, metric=metric, direction=direction,
                        searched=(searched_values(studies, best.settings, steady),
                                  () if runner_up is None
                                  else searched_values(studies, runner_up.settings, steady)),
                        rank_alpha=(standing.rank_alpha(best.trial, alpha),
                                    None if runner_up is None
                                    else standing.rank_alpha(runner_up.trial, alpha)),
                        own=(standing.own(best.trial),
                             () if runner_up is None else standing.own(runner_up.trial)))
    if not pending:
        log.info("confirmation decided after round %d at %.4g%% confidence: %s", done,
                 levels.interim * 100, sig.describe(sig.judge(
                     values[best.trial], searched_values(studies, best.settings, steady),
                     standing.against(best.trial), metric=metric, direction=direction,
                     confidence=levels.interim, min_runs=MIN_RUNS,
                     rank_alpha=standing.rank_alpha(best.trial, alpha))))
        return []
    todo: list[tuple[int | str, dict[str, Setting]]] = []
    if BASELINE in pending:
        todo.append((BASELINE, exp.baseline_settings()))
    if runner_up is not None and "runner-up" in pending:
        todo.append((runner_up.trial, runner_up.settings))
    log.info("round %d undecided: one more round of #%d and %s", done, best.trial,
             ", ".join(c if c == BASELINE else f"#{c}" for c, _ in todo))
    todo.append((best.trial, best.settings))
    return [{"kind": TrialKind.CONFIRM.value, "settings": settings, "candidate": candidate,
             "round": done + 1, "sequential": True} for candidate, settings in todo]


def extension_round(
    exp: Experiment, studies: st.Studies, candidates: Sequence[Pick], levels: LookLevels,
) -> list[dict[str, Any]]:
    """One more round of the leader and the baseline after the planned ones, or [] (module
    docstring, "Extension"; ``autotune.evidence.extension``). Given when no earlier look could
    decide (the level is counted for one planned look), no candidate is already better (the
    report would adopt it), the leader has had no extension before, and ``extension_for``
    gives it one. The ``Extension`` is recorded before the round is measured."""
    if levels.interim < 1.0:
        return []
    direction, metric = directions(exp)[0], exp.goals[0].label
    standing = _standing(exp, studies, candidates)
    if not standing.ranked or not standing.baseline:
        return []
    recorded = extensions(studies.search.user_attrs)
    each = sig.each_of(levels.verdict, judged(studies))
    best = standing.ranked[0]
    key = settings_key(best.settings)
    if key in recorded or any(_call(exp, studies, standing, p, each) == "better"
                              for p in standing.ranked):
        return []
    mine = standing.values[best.trial]
    offer = extension_for(mine, searched_values(studies, best.settings, standing.steady),
                          standing.baseline, each=each, metric=metric, direction=direction)
    if offer is None:
        return []
    done = _last_round(studies)
    given = Extension(level=offer.level, round=done + 1,
                      runs=(len(mine), len(standing.baseline)), added=offer.added)
    studies.search.set_user_attr(EXTENSION_ATTR, {
        **{k: e.record() for k, e in recorded.items()}, key: given.record()})
    log.info("round %d left #%d undecided: %d more run(s) of #%d and of the baseline, judged "
             "at p <= %.2g so that a wrong 'better' at either look stays within %.2g", done,
             best.trial, offer.added, best.trial, offer.level, 1 - each)
    # Shuffled by ``confirm`` like every round. "extension": for the record (trials.jsonl);
    # the report finds the round by Extension.
    return [{"kind": TrialKind.CONFIRM.value, "settings": settings, "candidate": candidate,
             "round": given.round, "sequential": True, "extension": True}
            for _ in range(offer.added)
            for candidate, settings in ((BASELINE, exp.baseline_settings()),
                                        (best.trial, best.settings))]


def tiebreak_round(
    exp: Experiment, studies: st.Studies, candidates: Sequence[Pick], levels: LookLevels,
    *, left: int = 1,
) -> list[dict[str, Any]]:
    """One more run of the leader (the candidate the report would adopt: the best mean among
    those it calls better, of any night: ``_every_judged``) and of its closest rival, or []
    (module docstring, "Tie-break"; ``autotune.evidence.tiebreak``). A rival is another
    candidate called better, or one that ``left`` more runs (this round's and the tie-breaks
    after it) could still make better (``_revivable``), and it ``contests`` the leader; the
    closest is the best by the mean of what ``_hint`` reads. ``confirm`` asks after the looks,
    at most ``TIE_BREAKS`` times."""
    direction = directions(exp)[0]
    standing = _standing(exp, studies, _every_judged(studies, candidates))
    if len(standing.ranked) < 2 or not standing.baseline:
        return []
    each = sig.each_of(levels.verdict, judged(studies))
    calls = {p.trial: _call(exp, studies, standing, p, each) for p in standing.ranked}
    adoptable = [p for p in standing.ranked if calls[p.trial] == "better"]
    if not adoptable:
        return []  # the report would not adopt: no choice to make
    leader = adoptable[0]
    mine = standing.values[leader.trial]
    hints = {p.trial: _hint(studies, standing, p, calls[p.trial]) for p in standing.ranked}
    rivals = sorted((p for p in standing.ranked if p is not leader
                     and (calls[p.trial] == "better"
                          or (calls[p.trial] == "unclear"
                              and _revivable(standing, p, left, 1 - each, direction)))
                     and contests(mine, hints[p.trial], direction,
                                  adoptable=calls[p.trial] == "better")),
                    key=lambda p: (*sig.rank_key(hints[p.trial], direction), p.trial))
    if not rivals:
        return []
    rival = rivals[0]
    if calls[rival.trial] == "better":
        why = (f"both are better than the baseline, their runs overlap and their means are "
               f"within {TIE_GAP:.0%}")
    else:
        why = (f"#{rival.trial}'s mean is better (with its search measurement) and its "
               f"{len(standing.values[rival.trial])} run(s) could still be called better")
    log.info("#%d and #%d: %s: one more run of each before choosing by the mean",
             leader.trial, rival.trial, why)
    # Shuffled by ``confirm`` like every round; "tiebreak": for the record (trials.jsonl).
    return [{"kind": TrialKind.CONFIRM.value, "settings": p.settings, "candidate": p.trial,
             "round": _last_round(studies) + 1, "sequential": True, "tiebreak": True}
            for p in (leader, rival)]


def _every_judged(studies: st.Studies, candidates: Sequence[Pick]) -> list[Pick]:
    """Tonight's candidates and every other configuration the report judges (``judged``: an
    earlier night's, in a study continued over nights), each named by the search trial of its
    first confirmation run: the report chooses among all of them, so a tie-break is about
    whichever it would adopt."""
    picks = list(candidates)
    seen = {settings_key(p.settings) for p in picks}
    for t in _Measured.read(studies).runs:
        candidate = t.user_attrs.get("candidate")
        if t.user_attrs.get("kind") != TrialKind.CONFIRM or not isinstance(candidate, int):
            continue
        key = settings_key(t.user_attrs.get("settings", {}))
        if key not in seen:
            seen.add(key)
            picks.append(Pick(candidate, dict(t.user_attrs["settings"]), (), ()))
    return picks


def _hint(studies: st.Studies, standing: _Standing, p: Pick, call: str) -> list[float]:
    """What says whether candidate ``p`` contests the leader: its confirmation runs, and for
    one not called better its search measurements too. A search value flatters (the best of
    many looks better than it is): it decides only where a tie-break's runs go, never a call or
    the choice (``autotune.evidence.tiebreak``)."""
    mine = list(standing.values[p.trial])
    if call == "better":
        return mine
    return [*mine, *searched_values(studies, p.settings, standing.steady)]


def _revivable(standing: _Standing, p: Pick, left: int, alpha: float,
               direction: sig.Direction) -> bool:
    """Whether ``left`` more runs of candidate ``p`` (the baseline none) could make the report
    call it better: at least ``MIN_RUNS`` runs then, and the rank test's p-value at best (every
    new run better than all so far) within ``alpha``, its share. Pure.

    Why its share still holds: when nothing differs, a wrong "better" needs all its runs to
    separate from the baseline's, and that has the same chance whenever the decision to measure
    it again was taken: deciding on its first run(s) can only give up runs, never add a way to
    pass. And no ADOPT comes from it: a tie-break is given only when the report already
    adopts."""
    mine = standing.values[p.trial]
    if len(mine) + left < MIN_RUNS or standing.rank_alpha(p.trial, alpha) is not None:
        return False  # an extended candidate is held to its extension's count
    return _best_possible_p(mine, standing.against(p.trial), direction, left,
                            baseline_added=0) <= alpha + 1e-9


def _call(exp: Experiment, studies: st.Studies, standing: _Standing, p: Pick,
          each: float) -> str:
    """Candidate ``p`` against the baseline at ``each``, as the report calls it."""
    searched = searched_values(studies, p.settings, standing.steady)
    return sig.judge(standing.values[p.trial], searched, standing.against(p.trial),
                     metric=exp.goals[0].label, direction=directions(exp)[0], confidence=each,
                     min_runs=MIN_RUNS, rank_alpha=standing.rank_alpha(p.trial, 1 - each)
                     ).outcome


def _last_round(studies: st.Studies) -> int:
    """The highest confirmation round the study holds (0: none)."""
    return max((t.user_attrs.get("round") or 0
                for t in studies.reference.get_trials(deepcopy=False)
                if t.user_attrs.get("kind") == TrialKind.CONFIRM), default=0)


def extension_for(
    mine: Sequence[float], searched: Sequence[float], baseline: Sequence[float], *, each: float,
    metric: str, direction: sig.Direction,
) -> Offer | None:
    """The extension round for a leader with confirmation runs ``mine`` (and the search values
    that chose it, ``searched``), judged at ``each`` against ``baseline``, or None when it gets
    none: it is not undecided as the report judges it, or no round of the sizes
    ``autotune.evidence.extension`` counts could make it "better" at the level it allows. The
    round is the smallest that could (the count assumes it). Pure."""
    if len(mine) < MIN_RUNS:
        return None
    call = sig.judge(mine, searched, baseline, metric=metric, direction=direction,
                     confidence=each, min_runs=MIN_RUNS)
    if call.outcome != "unclear":
        return None
    levels = extension_levels(len(mine), len(baseline), 1 - each)
    for added, level in enumerate(levels, start=1):
        if level is not None and _best_possible_p(mine, baseline, direction,
                                                  added) <= level + 1e-9:
            return Offer(added, level)
    return None


def _best_possible_p(mine: Sequence[float], baseline: Sequence[float],
                     direction: sig.Direction, added: int,
                     baseline_added: int | None = None) -> float:
    """The rank test's p after ``added`` more runs of the candidate and ``baseline_added``
    (default: as many) of the baseline, at best: the candidate's new runs better than every run
    so far and the baseline's worse, all distinct (ties would share a mid-rank and understate
    it). Pure."""
    low, high = min([*mine, *baseline]), max([*mine, *baseline])
    beyond = high - low + abs(high) + abs(low) + 1.0
    sign = 1.0 if direction == "minimize" else -1.0
    best = [(low if sign > 0 else high) - sign * (beyond + i) for i in range(added)]
    worst = [(high if sign > 0 else low) + sign * (beyond + i)
             for i in range(added if baseline_added is None else baseline_added)]
    return sig.separation_p([*mine, *best], [*baseline, *worst], direction=direction)


def adaptive_round(
    exp: Experiment, studies: st.Studies, candidates: Sequence[Pick], repeats: int
) -> list[dict[str, Any]]:
    """The next adaptive round's entries, or [] when the best candidate is separated from the
    runner-up and from the baseline (or there is nothing to separate). Like the sequential
    looks it leads with the best mean among the candidates feasible in every run (``_standing``)."""
    direction = directions(exp)[0]
    standing = _standing(exp, studies, candidates)
    ranked, values, baseline = standing.ranked, standing.values, standing.baseline
    if not ranked or not baseline:
        return []
    best = ranked[0]
    metric = exp.goals[0].label
    # At the level the report judges each candidate of a fixed design (95% shared by them).
    level = sig.each_of(sig.CONFIDENCE, judged(studies))

    def unresolved(a: list[float], b: list[float]) -> bool:
        return sig.compare(a, b, metric=metric, direction=direction,
                           confidence=level).outcome == "unclear"

    todo: list[tuple[int | str, dict[str, Setting]]] = []
    if len(ranked) > 1 and unresolved(values[best.trial], values[ranked[1].trial]):
        todo.append((ranked[1].trial, ranked[1].settings))
    if sig.judge(values[best.trial], searched_values(studies, best.settings, standing.steady),
                 baseline,
                 metric=metric, direction=direction, confidence=level,
                 min_runs=2).outcome == "unclear":
        todo.append((BASELINE, exp.baseline_settings()))
    if not todo:
        return []
    todo.append((best.trial, best.settings))
    held = [t.user_attrs.get("round") or 0 for t in studies.reference.get_trials(deepcopy=False)
            if t.user_attrs.get("kind") == TrialKind.CONFIRM]
    r = max([repeats, *held]) + 1
    return [{"kind": TrialKind.CONFIRM.value, "settings": settings, "candidate": candidate,
             "round": r, "adaptive": True} for candidate, settings in todo]


def judged(studies: st.Studies) -> int:
    """How many candidates the report judges against the baseline: every configuration with a
    completed confirmation run (tonight's and earlier nights'), as ``summarize`` groups them."""
    reference = studies.reference.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
    mine = comparable(reference)
    return len({settings_key(t.user_attrs.get("settings", {})) for t in reference
                if mine(t) and t.values and t.user_attrs.get("kind") == TrialKind.CONFIRM
                and t.user_attrs.get("candidate") != BASELINE})


def _completed(studies: st.Studies) -> int:
    return sum(1 for t in studies.reference.get_trials(deepcopy=False,
                                                       states=[TrialState.COMPLETE])
               if t.user_attrs.get("kind") == TrialKind.CONFIRM)
