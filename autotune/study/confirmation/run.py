"""``confirm``: re-measure the top search configurations and the baseline, interleaved, and the
plan of its first round.

A search trial is measured once, and the best of many single measurements is optimistic. So the
top configurations and the baseline are measured again, ``repeats`` rounds, each round holding
every configuration once in a shuffled order: slow drift of the host or cluster (other tenants,
thermal state, a noisy neighbour arriving) then hits every configuration alike instead of
favouring whichever ran first.

Confirmation trials live in the reference study with user attrs ``kind="confirm"``,
``candidate`` (the search trial number, or ``"baseline"``), ``round`` (1-based) and
``settings``; they never count as search trials. A (configuration, round) pair that already
completed, or is queued, is not scheduled again, so a resumed confirm continues where it stopped
(and one that did not finish counts the looks and tie-breaks it already had: ``held_rounds``).
Configurations are matched by their settings, not by trial number.

What follows round 1: the sequential looks (``looks``), at most one extension round
(``extension``) and at most ``TIE_BREAKS`` tie-breaks (``tiebreak``); with ``--fixed``, the
fixed rounds and their adaptive rounds (``adaptive``). The runner-up comparison only decides
when to stop measuring, not the verdict.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from optuna.trial import TrialState

from autotune.evidence import significance as sig
from autotune.evidence.extension import extension_levels
from autotune.evidence.tiebreak import TIE_BREAKS
from autotune.experiment.models import Experiment, Setting
from autotune.study import storage as st
from autotune.study.confirmation.adaptive import adaptive_round
from autotune.study.confirmation.attrs import (
    CONFIDENCE_ATTR,
    LOOK_CONFIDENCE_ATTR,
    ROUNDS_ATTR,
    RULE,
    RULE_ATTR,
)
from autotune.study.confirmation.candidates import BASELINE, HOLDING, Pick, top_configurations
from autotune.study.confirmation.extension import extension_round
from autotune.study.confirmation.looks import (
    LookLevels,
    look_levels,
    sequential_round,
    silent_looks,
)
from autotune.study.confirmation.standing import (
    MIN_RUNS,
    completed,
    judged,
    last_round,
    pooled_values,
)
from autotune.study.confirmation.tiebreak import tiebreak_round
from autotune.study.kinds import TrialKind
from autotune.study.loop import completed_search, trial_summary
from autotune.study.objective import directions
from autotune.study.space import settings_key

log = logging.getLogger(__name__)


class ReferenceRunner(Protocol):
    def run_reference(
        self, studies: st.Studies, entries: list[dict[str, Any]],
        then: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> int: ...



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
    after_round: int = 0,
) -> Plan:
    """The confirmation schedule: rounds ``after_round + 1`` .. ``after_round + repeats``
    (``ROUNDS_ATTR``: after an earlier search's confirmations). Pure (given ``seed``).

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
        for t in reference if t.get("kind") == TrialKind.CONFIRM and t.get("state") in HOLDING
    }
    rng = random.Random(seed)
    entries = []
    already = 0
    for r in range(after_round + 1, after_round + repeats + 1):
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
    """Sequential (``looks``): round 1 measures the top ``top`` search configurations and
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
    reference = [{**trial_summary(t), **{k: t.user_attrs.get(k) for k in ROUND_ATTRS}}
                 for t in studies.reference.get_trials(deepcopy=False)]
    sequential = sequential and len(directions(exp)) == 1
    if repeats < MIN_RUNS and (sequential or not extra):  # --fixed: its extra rounds add runs
        log.warning("--repeats %d: tonight's candidates get at most %d confirmation run(s), "
                    "fewer than the %d an ADOPT needs; this confirmation can KEEP or say "
                    "INCONCLUSIVE, not adopt them", repeats, repeats, MIN_RUNS)
    searched = completed_search(studies.search)
    rounds_of = studies.search.user_attrs.get(ROUNDS_ATTR) or {}
    same_search = rounds_of.get("search_trials") == searched
    # Without the record (a study confirmed by an autotune older than it), rounds count from 1
    # as they did then: what is held is resumed; the record starts here.
    after = (int(rounds_of["after_round"]) if same_search
             else last_round(studies) if rounds_of else 0)
    schedule = plan(exp, search, reference, top=top, repeats=1 if sequential else repeats,
                    seed=seed, after_round=after)
    options = {"top": top, "repeats": repeats, "sequential": sequential}
    resumed, since = _resumes(studies, rounds_of, same_search, options)
    so_far = held_rounds(reference, since)
    before_it = [t for t in reference if (t.get("round") or 0) <= since]
    if not schedule.candidates:
        log.warning("nothing to confirm: the search has no feasible completed trial")
        return 0
    record = {"search_trials": searched, "after_round": after, "since_round": since,
              "options": options}
    if resumed:
        log.info("resuming the confirmation begun after round %d: %d look round(s), %s, "
                 "%d tie-break(s) already", since, so_far.looks,
                 "its extension" if so_far.extended else "no extension", so_far.ties)
    else:
        studies.search.set_user_attr(ROUNDS_ATTR, {**record, "open": True})
    before = completed(studies)
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
    prior = _prior_runs(before_it, schedule.candidates)
    levels = (look_levels(repeats, silent_looks(repeats, prior))
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
    _warn_if_no_adopt_possible(studies, prior + repeats,
                               len(schedule.candidates), repeats, verdict,
                               extendable=sequential and interim >= 1.0)

    # Round 1 is the plan's: held before ``since`` when this call is a later one on the same
    # search (its slots were done), else among the rounds it holds itself.
    rounds = max(1, so_far.looks + (1 if since > after else 0))
    # An extension ends the looks and leaves no tie-break; a tie-break, the looks.
    phase = "ties" if so_far.extended or so_far.ties else "looks"
    ties = TIE_BREAKS if so_far.extended else so_far.ties

    def next_look() -> list[dict[str, Any]]:
        # Rounds are counted per confirmation (``held_rounds``), not per study: a study
        # continued night after night keeps earlier nights' confirmation rounds (they are
        # evidence), and a new search's candidates still get their ``repeats`` looks, no more.
        # Then at most one extension, then at most TIE_BREAKS tie-breaks; once a look has
        # stopped the looks, no new look.
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
    studies.search.set_user_attr(ROUNDS_ATTR, {**record, "open": False})
    # Counted here rather than trusting the runner's count: queued trials already exist when
    # they run, which a "did a new trial appear" count misses.
    return completed(studies) - before


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


def _resumes(studies: st.Studies, rounds_of: Mapping[str, Any], same_search: bool,
             options: Mapping[str, Any]) -> tuple[bool, int]:
    """Whether this call resumes a confirmation that did not finish (killed, or its night
    failed in it: ``ROUNDS_ATTR`` still open) of the same search with the same options, and
    the last round before that confirmation's own (else before this call's). Resumed, it goes
    on as it was planned: what it measured in its own rounds counts against its looks,
    extension and tie-breaks (``held_rounds``), and its levels count only what was held
    before them. Any other call is a new confirmation after every round held (a later call
    with more --repeats, a night whose search added nothing: docs/report.md)."""
    if not (same_search and rounds_of.get("open") is True and "since_round" in rounds_of):
        return False, last_round(studies)
    since = int(rounds_of["since_round"])
    if rounds_of.get("options") != dict(options):
        # Its looks were taken at its own levels; more at other levels are covered by neither
        # plan: a new confirmation instead, the earlier runs held before it.
        log.warning("the confirmation begun after round %d did not finish and had other "
                    "options (%s; now %s): this is a new confirmation of its candidates",
                    since, rounds_of.get("options"), dict(options))
        return False, last_round(studies)
    return True, since


ROUND_ATTRS = ("candidate", "round", "tiebreak", "extension")
"""The user attrs of a reference trial that place it in a confirmation's rounds."""


@dataclass(frozen=True)
class Held:
    """What a confirmation already holds in its own rounds (``held_rounds``)."""

    looks: int = 0
    """Rounds of the looks: round 1 and each sequential round after it."""
    extended: bool = False
    ties: int = 0
    """Tie-break rounds."""


def held_rounds(reference: Sequence[Mapping[str, Any]], after: int) -> Held:
    """The rounds after ``after`` (``ROUNDS_ATTR``'s ``since_round``: a resumed confirmation's
    own) that the reference trials' summaries hold, in any state: a round that was queued was
    a look's decision, even if its runs failed or a crash left them undone. Pure."""
    looks: set[int] = set()
    ties: set[int] = set()
    extended = False
    for t in reference:
        number = t.get("round") or 0
        if t.get("kind") != TrialKind.CONFIRM or number <= after:
            continue
        if t.get("tiebreak"):
            ties.add(number)
        elif t.get("extension"):
            extended = True
        else:
            looks.add(number)
    return Held(looks=len(looks), extended=extended, ties=len(ties))


def _prior_runs(reference: Sequence[Mapping[str, Any]], candidates: Sequence[Pick]) -> int:
    """The most confirmation runs any of tonight's candidates holds (done or queued) before its
    first round: an earlier night's, or a dead run's (``silent_looks``)."""
    counts: dict[str, int] = {}
    for t in reference:
        if (t.get("kind") == TrialKind.CONFIRM and t.get("candidate") != BASELINE
                and t.get("state") in HOLDING):
            key = settings_key(t.get("settings") or {})
            counts[key] = counts.get(key, 0) + 1
    return max((counts.get(settings_key(p.settings), 0) for p in candidates), default=0)
