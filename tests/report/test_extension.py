"""The extension round (autotune.evidence.extension, autotune.study.confirmation.extension):
one or two more runs of an undecided leader and of the baseline, held to its level at both
looks."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from autotune.evidence import significance as sig
from autotune.evidence.extension import UP_TO, extension_level, extension_levels, union_bound
from autotune.experiment import Experiment
from autotune.report import build_report
from autotune.study.confirmation.attrs import CONFIDENCE_ATTR, EXTENSION_ATTR, Extension, extensions
from autotune.study.confirmation.candidates import top_configurations
from autotune.study.confirmation.extension import extension_for, extension_round
from autotune.study.confirmation.looks import (
    LookLevels,
    look_levels,
    sequential_round,
    silent_looks,
)
from autotune.study.confirmation.run import confirm
from autotune.study.confirmation.standing import pooled_values
from autotune.study.loop import trial_summary
from autotune.study.night.budget import confirm_reserve
from autotune.study.space import settings_key
from autotune.study.storage import Studies
from benchmarks.bench_significance import confirmation_false_adopt
from tests.report.builder import Builder, m
from tests.report.builder import experiment as builder_experiment
from tests.report.simstudy import EXPERIMENT, open_sim


def _p(c: Sequence[float], b: Sequence[float]) -> float:
    return sig.separation_p(c, b, direction="minimize")


def _union(n: int, m_: int, alpha: float, levels: Sequence[float | None]) -> float:
    """P(the planned look or the extension calls "better") when nothing differs, with the
    product's own p-value (``separation_p``), not with the module's crossing count: every
    split of the n + m planned runs is equally likely, and, given the split, every way the new
    runs fall among them. The extension takes the fewest runs a side (``levels``: 1, 2) whose
    best case passes."""
    p = functools.cache(lambda c, b: _p(c, b))
    planned = n + m_
    splits = list(itertools.combinations(range(planned), n))
    hits = 0.0
    for picked in splits:
        c = tuple(float(v) for v in picked)
        b = tuple(float(v) for v in range(planned) if v not in picked)
        if p(c, b) <= alpha + 1e-9:
            hits += 1
            continue
        chosen = [(added, level) for added, level in enumerate(levels, start=1)
                  if level is not None
                  and p((*(-1.0 - i for i in range(added)), *c),
                        (*b, *(planned + i for i in range(added)))) <= level + 1e-9]
        if not chosen:
            continue
        added, level = chosen[0]
        total = planned + 2 * added
        wins = cases = 0
        for new in itertools.combinations(range(total), 2 * added):
            rest = [v for v in range(total) if v not in new]
            for new_c in itertools.combinations(new, added):
                cc = sorted([*(rest[int(v)] for v in c), *new_c])
                bb = sorted([*(rest[int(v)] for v in b), *(v for v in new if v not in new_c)])
                wins += p(tuple(map(float, cc)), tuple(map(float, bb))) <= level + 1e-9
                cases += 1
        hits += wins / cases
    return hits / len(splits)


@pytest.mark.parametrize(("n", "m_", "alpha"), [(3, 6, 0.05 / 3), (2, 4, 0.05), (3, 4, 0.1)])
def test_both_looks_together_stay_within_alpha_and_no_looser_level_would(
        n: int, m_: int, alpha: float) -> None:
    levels = extension_levels(n, m_, alpha)
    assert all(level is not None for level in levels)
    union = _union(n, m_, alpha, levels)
    assert union <= alpha + 1e-9
    assert union == pytest.approx(union_bound(n, m_, alpha))
    # The next attainable level at n + k against m + k would overshoot, for either k: each
    # level is the largest that holds, not a guess on the safe side.
    for k in (1, 2):
        looser = min(p for p in _attainable(n + k, m_ + k) if p > levels[k - 1] + 1e-12)
        assert _union(n, m_, alpha, [looser if i == k - 1 else v
                                     for i, v in enumerate(levels)]) > alpha


def _attainable(n: int, m_: int) -> set[float]:
    values = [float(v) for v in range(n + m_)]
    return {round(_p(list(c), [v for v in values if v not in c]), 12)
            for c in itertools.combinations(values, n)}


def test_the_default_confirmation_allows_one_crossing_at_four_against_seven() -> None:
    # 3 runs against 6 at 1.67% (each of 3 candidates): planned, U = 0 (1/84 = 1.19%); one
    # crossing short, one run more a side, U <= 1 at 4 against 7 (2/330 = 0.61%); two or three
    # short, two more, U <= 3 at 5 against 8 (7/1287 = 0.54%): together 1.54%.
    assert extension_levels(3, 6, 0.05 / 3) == pytest.approx((2 / 330, 7 / 1287))
    assert extension_level(3, 6, 0.05 / 3, 2) == pytest.approx(7 / 1287)
    assert union_bound(3, 6, 0.05 / 3) == pytest.approx(0.015401265401265402)
    # No level fits when even the extension's best split is too likely (1 against 1, 1%).
    assert extension_levels(1, 1, 0.01) == (None, None)
    # A sample beyond UP_TO gets no extension (the count would cost more than it tells).
    assert extension_levels(5, UP_TO - 4, 0.05) == (None, None)


def _leader(tmp: Path, candidate: list[float], baseline: list[float],
            extra: tuple[list[float], list[float]] | None = None) -> Builder:
    """A sequential confirmation's evidence judged at 98.33% (each of 3 candidates' share of
    5%, here held by one): one candidate (#0) with its search trial and 3 confirmation rounds,
    the baseline's 3 repeats and 3 interleaved runs; ``extra``: the extension round's
    (candidate, baseline) runs, with the level it was given recorded."""
    bld = Builder(builder_experiment(), tmp)
    settings = {"GOMAXPROCS": 1, "GOGC": 400}
    base = bld.exp.baseline_settings()
    bld.add("search", "search", settings, m(candidate[0] * 0.9))
    for v in baseline[:3]:
        bld.add("reference", "baseline", base, m(v))
    for r, (c, b) in enumerate(zip(candidate, baseline[3:], strict=True), start=1):
        bld.add("reference", "confirm", base, m(b), candidate="baseline", round=r)
        bld.add("reference", "confirm", settings, m(c), candidate=0, round=r)
    bld.studies.search.set_user_attr(CONFIDENCE_ATTR, EACH)
    if extra is not None:
        offer = extension_for(candidate, [candidate[0] * 0.9], baseline, each=EACH,
                              metric="p99_latency", direction="minimize")
        # (a side shorter than the other: a run of the round that failed for good)
        assert offer is not None and offer.added == max(map(len, extra))
        bld.studies.search.set_user_attr(EXTENSION_ATTR, {
            settings_key(settings): Extension(offer.level, 4, (3, 6), offer.added).record()})
        for c, b in itertools.zip_longest(*extra):
            if b is not None:
                bld.add("reference", "confirm", base, m(b), candidate="baseline", round=4)
            if c is not None:
                bld.add("reference", "confirm", settings, m(c), candidate=0, round=4)
    return bld


EACH = 1 - 0.05 / 3
# One candidate run (9.5) slower than one baseline run (9.0): INCONCLUSIVE at 3 against 6
# (p = 2/84 = 2.4% > 1.67%).
CANDIDATE = [7.0, 7.2, 9.5]
BASELINE = [10.0, 10.2, 10.4, 9.0, 10.1, 10.3]


def test_a_leader_one_crossing_short_is_given_an_extension_and_judged_stricter(
        tmp_path: Path) -> None:
    before = build_report(*_parts(_leader(tmp_path / "a", CANDIDATE, BASELINE)))
    assert before.verdict == "inconclusive"
    offer = extension_for(CANDIDATE, [6.3], BASELINE, each=EACH, metric="p99_latency",
                          direction="minimize")
    assert offer is not None and offer.added == 1
    assert offer.level == pytest.approx(2 / 330)
    # Its fourth run beats every baseline run and the baseline's seventh is slower than every
    # candidate run: one crossing in 28 pairs, p = 2/330 -> ADOPT, at the stricter level.
    after = build_report(*_parts(_leader(tmp_path / "b", CANDIDATE, BASELINE, ([7.1], [10.5]))))
    assert after.verdict == "adopt", after.reason
    assert "rank test p = 0.0061 (at most 0.0061 to call it better)" in after.reason
    assert ("One more round after the planned ones measured #0 (rank test at p <= 0.0061) and "
            "the baseline as often") in after.evidence_note
    # The same runs with a second crossing in the extension (the new baseline run 8.0 is
    # faster than 9.5): 4/330 = 1.2% is under the planned look's 1.67%, but not under the
    # extension's level.
    worse = build_report(*_parts(_leader(tmp_path / "c", CANDIDATE, BASELINE, ([7.1], [8.0]))))
    assert worse.verdict == "inconclusive"


def _parts(bld: Builder) -> tuple[Experiment, Studies]:
    return bld.exp, bld.studies


def test_a_leader_two_or_three_crossings_short_is_given_two_more_runs(tmp_path: Path) -> None:
    # Two candidate runs (9.2, 9.5) slower than one baseline run (9.0): U = 2 at 3 against 6
    # (p = 4/84). One more run a side cannot pass (U <= 1 allowed at 4 against 7); two can
    # (U <= 3 at 5 against 8, p <= 7/1287).
    two_short = [7.0, 9.2, 9.5]
    offer = extension_for(two_short, [6.3], BASELINE, each=EACH, metric="p99_latency",
                          direction="minimize")
    assert offer is not None and offer.added == 2
    assert offer.level == pytest.approx(7 / 1287)
    # Both new runs beat every baseline run and the baseline's are the slowest: U = 2 at 5
    # against 8, p = 4/1287 -> ADOPT.
    after = build_report(*_parts(_leader(tmp_path / "a", two_short, BASELINE,
                                         ([7.1, 7.3], [10.5, 10.6]))))
    assert after.verdict == "adopt", after.reason
    assert "measured #0 twice (rank test at p <= 0.0054)" in after.evidence_note
    [held] = [c for c in after.candidates if c.id == "#0"]
    assert len(held.runs) == 5 and held.comparisons[0].n_baseline == 8
    # Both new runs slower than the baseline's 9.0: U = 4, p = 12/1287 = 0.93%, under the
    # planned look's 1.67% but not under the extension's level -> still INCONCLUSIVE.
    worse = build_report(*_parts(_leader(tmp_path / "b", two_short, BASELINE,
                                         ([9.3, 9.4], [10.5, 10.6]))))
    assert worse.verdict == "inconclusive", worse.reason


def test_a_round_measured_in_part_cannot_call_the_leader_better(tmp_path: Path) -> None:
    # The two-run round lost one baseline run for good: 5 against 7 was never counted (its
    # U = 2 would pass at 4/792 = 0.51% < 0.54%), so the leader cannot be called better.
    report = build_report(*_parts(_leader(tmp_path, [7.0, 9.2, 9.5], BASELINE,
                                          ([7.1, 7.3], [10.5]))))
    assert report.verdict == "inconclusive", report.reason
    assert "#0 twice (measured in part: it cannot be called better)" in report.evidence_note


@pytest.mark.parametrize(("extra", "adopt"), [(([7.1, 7.3], [10.5, 10.6]), True),
                                              (([7.1, 7.3], [10.5]), False)])
def test_a_later_look_judges_an_extended_leader_as_the_report_does(
        tmp_path: Path, extra: tuple[list[float], list[float]], adopt: bool) -> None:
    # A study continued on a later night looks at the leader again (sequential_round). It must
    # judge it as the report does: against the baseline with its extension round's runs, at the
    # round's level, and not at all when the round was measured in part. Measured in full (U = 2
    # at 5 against 8, p = 4/1287 <= 7/1287) the report adopts and the look stops; against the
    # planned baseline alone (5 against 6, p = 4/462 = 0.87%) it would go on. Measured in part
    # (5 against 7, p = 4/792 = 0.51%: under the level, but never counted) neither calls it.
    bld = _leader(tmp_path, [7.0, 9.2, 9.5], BASELINE, extra)
    report = build_report(*_parts(bld))
    assert report.verdict == ("adopt" if adopt else "inconclusive"), report.reason
    picks = top_configurations([trial_summary(t) for t in bld.studies.search.get_trials()],
                               ["minimize"], 1, exclude=[bld.exp.baseline_settings()])
    look = sequential_round(bld.exp, bld.studies, picks, LookLevels(EACH, EACH))
    assert (look == []) == adopt, look


_Candidate = tuple[dict[str, int], float, list[float]]


def _two_candidates(tmp: Path, first: _Candidate, second: _Candidate) -> Builder:
    """Two candidates (#0, #1), each ``(settings, search trial's p99, 3 confirmation runs)``,
    the baseline's 3 repeats (BASELINE[:3]) and its 3 interleaved runs (BASELINE[3:])."""
    bld = Builder(builder_experiment(), tmp)
    base = bld.exp.baseline_settings()
    for settings, searched, _ in (first, second):
        bld.add("search", "search", settings, m(searched))
    for v in BASELINE[:3]:
        bld.add("reference", "baseline", base, m(v))
    for r, (a, b, c) in enumerate(zip(first[2], second[2], BASELINE[3:], strict=True),
                                  start=1):
        bld.add("reference", "confirm", base, m(c), candidate="baseline", round=r)
        bld.add("reference", "confirm", first[0], m(a), candidate=0, round=r)
        bld.add("reference", "confirm", second[0], m(b), candidate=1, round=r)
    return bld


def test_an_earlier_nights_round_measured_in_part_does_not_hold_back_tonights_leader(
        tmp_path: Path) -> None:
    # An earlier night extended #1 (two runs a side) and lost one baseline run of that round
    # for good: #1 cannot be called better (the report). Its 5 runs all beat the planned
    # baseline, so judged at its recorded level (as before 2026-12-05 (c)) it read "better" and
    # tonight's undecided leader #0 (2 crossings at 3 against 6: p = 4/84 > 2.5%) got no
    # extension round, the report adopting nothing. Judged as the report judges it, #0 gets one.
    zero, one = {"GOMAXPROCS": 2, "GOGC": 400}, {"GOMAXPROCS": 1, "GOGC": 400}
    bld = _two_candidates(tmp_path, (zero, 6.3, [7.0, 9.2, 9.5]), (one, 8.0, [8.75, 8.8, 8.85]))
    base = bld.exp.baseline_settings()
    bld.studies.search.set_user_attr(EXTENSION_ATTR, {
        settings_key(one): Extension(7 / 1287, 4, (3, 6), 2).record()})
    bld.add("reference", "confirm", base, m(10.5), candidate="baseline", round=4)
    for v in (8.9, 8.95):
        bld.add("reference", "confirm", one, m(v), candidate=1, round=4)
    bld.studies.search.set_user_attr(CONFIDENCE_ATTR, 0.95)
    report = build_report(*_parts(bld))
    assert report.verdict == "inconclusive", report.reason
    assert "#1 twice (measured in part: it cannot be called better)" in report.evidence_note
    picks = top_configurations([trial_summary(t) for t in bld.studies.search.get_trials()],
                               ["minimize"], 2, exclude=[base])
    queued = extension_round(bld.exp, bld.studies, picks, LookLevels(1.0, 0.95))
    assert sorted(str(e["candidate"]) for e in queued) == sorted(
        ["0", "baseline"] * (len(queued) // 2)) and queued, queued


def test_a_record_from_before_two_run_rounds_reads_as_one_run() -> None:
    [old] = extensions({EXTENSION_ATTR: {"k": {"level": 2 / 330, "round": 4,
                                                "runs": [3, 6]}}}).values()
    assert old == Extension(2 / 330, 4, (3, 6), 1)
    assert old.judged_at(0.05 / 3) == pytest.approx(2 / 330)


@pytest.mark.parametrize("added", [1, 2])
def test_the_extension_runs_of_the_baseline_are_no_second_look_for_the_other_candidates(
        tmp_path: Path, added: int) -> None:
    # Two candidates, each at 1.67% (the family at 96.67%). The leader #0 (better mean) and
    # #1 each have one run slower than one baseline run (p = 2/84 = 2.4%): undecided. #0's
    # extension round crosses again (9.2 > 9.0): it stays undecided. The baseline's run in that
    # round is slow (10.6): pooled for #1 it would make its 3 runs against 7 pass at 2/120 =
    # 1.67% -- a second look at #1's full share that nothing pays for, and a wrong ADOPT when
    # nothing differs. #1 is judged on the planned runs alone. The same with a two-run round
    # (#0's new runs 9.2 and 10.65; both of the baseline's slow, 10.6 and 10.7: 3 against 8
    # would pass at 2/165 = 1.2%).
    one, two = {"GOMAXPROCS": 1, "GOGC": 400}, {"GOMAXPROCS": 2, "GOGC": 400}
    bld = _two_candidates(tmp_path, (one, 6.3, CANDIDATE), (two, 6.4, [8.0, 8.1, 9.6]))
    base = bld.exp.baseline_settings()
    bld.studies.search.set_user_attr(CONFIDENCE_ATTR, 1 - 2 * 0.05 / 3)
    level = 2 / 330 if added == 1 else 7 / 1287
    bld.studies.search.set_user_attr(EXTENSION_ATTR, {
        settings_key(one): Extension(level, 4, (3, 6), added).record()})
    for b, c in list(zip([10.6, 10.7], [9.2, 10.65], strict=True))[:added]:
        bld.add("reference", "confirm", base, m(b), candidate="baseline", round=4)
        bld.add("reference", "confirm", one, m(c), candidate=0, round=4)
    report = build_report(bld.exp, bld.studies)
    assert report.verdict == "inconclusive", report.reason
    second = next(c for c in report.candidates if c.id == "#1")
    assert second.comparisons[0].n_baseline == 6 and second.comparisons[0].outcome == "unclear"
    first = next(c for c in report.candidates if c.id == "#0")
    assert first.comparisons[0].n_baseline == 6 + added
    # The looks' pool of the baseline (what a later night's look judges #1 against) leaves
    # them out too.
    assert pooled_values(bld.studies, None) == pytest.approx(BASELINE)


def test_no_extension_for_a_leader_no_round_could_save() -> None:
    # Four crossings (9.5 > 9.0; 10.15 > 9.0, 10.0, 10.1): at best U = 4 at 5 against 8
    # (12/1287 = 0.93% > the two-run level's 0.54%): no round is spent.
    assert extension_for([7.0, 9.5, 10.15], [6.3], BASELINE, each=EACH, metric="x",
                         direction="minimize") is None
    # Already better, or clearly no better: nothing to extend.
    assert extension_for([7.0, 7.2, 7.4], [6.3], BASELINE, each=EACH, metric="x",
                         direction="minimize") is None
    assert extension_for([12.0, 12.5, 13.0], [11.0], BASELINE, each=EACH, metric="x",
                         direction="minimize") is None
    # Fewer than the 3 runs an ADOPT needs: none (``--repeats 2`` cannot adopt).
    assert extension_for([7.0, 9.5], [6.3], BASELINE, each=EACH, metric="x",
                         direction="minimize") is None


def test_the_confirmation_runs_the_extension_and_the_report_holds_it(tmp_path: Path) -> None:
    # The simulated world: noisy enough that 3 rounds rarely separate a real gain from the
    # baseline. Every seed that gets an extension: the round holds the leader and the baseline,
    # the level is recorded before it is measured, and the report judges at that level.
    extended = plain = 0
    for seed in range(4):
        sim = open_sim(tmp_path / str(seed), EXPERIMENT.replace("noise: 0.03", "noise: 0.25"))
        sim.runner.run(sim.studies, 6)
        confirm(sim.exp, sim.studies, sim.runner, top=3, repeats=3, seed=seed)
        recorded = sim.studies.search.user_attrs.get(EXTENSION_ATTR)
        rounds: dict[int, list[object]] = {}
        for t in sim.studies.reference.get_trials():
            # Tie-breaks (confirmation.tiebreak) are rounds of two candidates, no baseline.
            if t.user_attrs.get("kind") == "confirm" and not t.user_attrs.get("tiebreak"):
                rounds.setdefault(t.user_attrs["round"], []).append(t.user_attrs["candidate"])
        if recorded is None:
            assert max(rounds) <= 3
            plain += 1
            continue
        extended += 1
        [given] = recorded.values()
        level, added = given["level"], given["added"]
        assert max(rounds) == 4 and rounds[4].count("baseline") == added
        assert len(rounds[4]) == 2 * added
        report = build_report(sim.exp, sim.studies)
        assert f"rank test at p <= {level:.2g}" in report.evidence_note
        chosen = [c for c in report.candidates if c.comparisons and c.id != "baseline"]
        held = [c for c in chosen if len(c.runs) == 3 + added]
        assert held and held[0].comparisons[0].rank_level == pytest.approx(level)
    # Seed 0 is extended, seeds 1-3 are not (checked when written): both paths are run.
    assert extended >= 1 and plain >= 1, (extended, plain)


def test_the_budget_keeps_the_extension_back() -> None:
    assert confirm_reserve(3, 3, 0, sequential=True) == 4 + 3 * 2 + 4


def test_with_no_difference_the_confirmation_with_its_extension_adopts_under_five_percent(
) -> None:
    # benchmarks' play of confirm() and the report with the product's extension_for: top 3 of
    # 7 search values, nothing differs, so every ADOPT is wrong.
    default = look_levels(3, silent_looks(3, 0))
    rate = confirmation_false_adopt(default, 0.2, 300, np.random.default_rng(11), extend=True)
    assert rate <= 0.05


def test_no_extension_when_an_earlier_nights_candidate_is_already_better(
        tmp_path: Path) -> None:
    # Review finding: only tonight's candidates were asked whether one is already better. An
    # earlier night confirmed #1 (every run faster than every baseline run): the report adopts
    # it, so tonight's undecided leader #0's extension would spend trials for nothing.
    bld = _leader(tmp_path, [7.0, 9.2, 9.5], BASELINE)  # 2 crossings: p = 4/84 > 2.5%
    bld.studies.search.set_user_attr(CONFIDENCE_ATTR, 0.95)  # 97.5% each of the two judged
    earlier = {"GOMAXPROCS": 8, "GOGC": 400}
    base = bld.exp.baseline_settings()
    bld.add("search", "search", earlier, m(9.0))
    for r, v in enumerate([6.0, 6.1, 6.2], start=1):
        bld.add("reference", "confirm", earlier, m(v), candidate=1, round=r)
    report = build_report(*_parts(bld))
    assert report.verdict == "adopt" and report.best_candidate == "#1", report.reason
    tonight = top_configurations([trial_summary(t) for t in bld.studies.search.get_trials()],
                                 ["minimize"], 1, exclude=[base])
    assert [p.trial for p in tonight] == [0]
    assert extension_round(bld.exp, bld.studies, tonight, LookLevels(1.0, 0.95)) == []
