"""The extension round (autotune.evidence.extension, autotune.study.confirm.extension_round):
one more run of an undecided leader and of the baseline, held to its level at both looks."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from autotune.evidence import significance as sig
from autotune.evidence.extension import UP_TO, extension_level
from autotune.experiment import Experiment
from autotune.report import build_report
from autotune.study.confirm import (
    CONFIDENCE_ATTR,
    EXTENSION_ATTR,
    Extension,
    confirm,
    extension_for,
    look_levels,
    silent_looks,
)
from autotune.study.night.budget import confirm_reserve
from autotune.study.space import settings_key
from autotune.study.storage import Studies
from benchmarks.bench_significance import confirmation_false_adopt
from tests.report.builder import Builder, m
from tests.report.builder import experiment as builder_experiment
from tests.report.simstudy import EXPERIMENT, open_sim


def _union(n: int, m_: int, alpha: float, level: float) -> float:
    """P(the planned look or the extension calls "better") when nothing differs, counted over
    every equally likely order of n + m + 2 distinct runs with the product's own p-value
    (``separation_p``), not with the module's crossing count."""
    total = n + m_ + 2
    hits = cases = 0
    for new_c, new_b in itertools.permutations(range(total), 2):
        rest = [v for v in range(total) if v not in (new_c, new_b)]
        for picked in itertools.combinations(rest, n):
            c = [float(v) for v in picked]
            b = [float(v) for v in rest if v not in picked]
            first = sig.separation_p(c, b, direction="minimize") <= alpha + 1e-9
            second = sig.separation_p([*c, float(new_c)], [*b, float(new_b)],
                                      direction="minimize") <= level + 1e-9
            hits += first or second
            cases += 1
    return hits / cases


@pytest.mark.parametrize(("n", "m_", "alpha"), [(3, 6, 0.05 / 3), (2, 4, 0.05), (3, 4, 0.1)])
def test_both_looks_together_stay_within_alpha_and_no_looser_level_would(
        n: int, m_: int, alpha: float) -> None:
    level = extension_level(n, m_, alpha)
    assert level is not None
    assert _union(n, m_, alpha, level) <= alpha + 1e-9
    # The next attainable level at n + 1 against m + 1 would overshoot: the level is the
    # largest that holds, not a guess on the safe side.
    looser = min(p for p in _attainable(n + 1, m_ + 1) if p > level + 1e-12)
    assert _union(n, m_, alpha, looser) > alpha


def _attainable(n: int, m_: int) -> set[float]:
    values = [float(v) for v in range(n + m_)]
    return {round(sig.separation_p(list(c), [v for v in values if v not in c],
                                   direction="minimize"), 12)
            for c in itertools.combinations(values, n)}


def test_the_default_confirmation_allows_one_crossing_at_four_against_seven() -> None:
    # 3 runs against 6 at 1.67% (each of 3 candidates): planned, U = 0 (1/84 = 1.19%); the
    # extension, U <= 1 at 4 against 7 (2/330 = 0.61%): together 1.39%.
    assert extension_level(3, 6, 0.05 / 3) == pytest.approx(2 / 330)
    assert _union(3, 6, 0.05 / 3, 2 / 330) == pytest.approx(0.013852813852813853)
    # No level fits when even the extension's best split is too likely (1 against 1, 1%).
    assert extension_level(1, 1, 0.01) is None
    # A sample beyond UP_TO gets no extension (the count would cost more than it tells).
    assert extension_level(5, UP_TO - 4, 0.05) is None


def _leader(tmp: Path, candidate: list[float], baseline: list[float],
            extra: tuple[float, float] | None = None) -> Builder:
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
        level = extension_for(candidate, [candidate[0] * 0.9], baseline, each=EACH,
                              metric="p99_latency", direction="minimize")
        assert level is not None
        bld.studies.search.set_user_attr(EXTENSION_ATTR, {
            settings_key(settings): Extension(level, 4, (3, 6)).record()})
        bld.add("reference", "confirm", base, m(extra[1]), candidate="baseline", round=4)
        bld.add("reference", "confirm", settings, m(extra[0]), candidate=0, round=4)
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
    level = extension_for(CANDIDATE, [6.3], BASELINE, each=EACH, metric="p99_latency",
                          direction="minimize")
    assert level == pytest.approx(2 / 330)
    # Its fourth run beats every baseline run and the baseline's seventh is slower than every
    # candidate run: one crossing in 28 pairs, p = 2/330 -> ADOPT, at the stricter level.
    after = build_report(*_parts(_leader(tmp_path / "b", CANDIDATE, BASELINE, (7.1, 10.5))))
    assert after.verdict == "adopt", after.reason
    assert "rank test p = 0.0061 (at most 0.0061 to call it better)" in after.reason
    assert "One more round after the planned ones measured #0 (rank test at p <= 0.0061)" in (
        after.evidence_note)
    # The same runs with a second crossing in the extension (the new baseline run 8.0 is
    # faster than 9.5): 4/330 = 1.2% is under the planned look's 1.67%, but not under the
    # extension's level.
    worse = build_report(*_parts(_leader(tmp_path / "c", CANDIDATE, BASELINE, (7.1, 8.0))))
    assert worse.verdict == "inconclusive"


def _parts(bld: Builder) -> tuple[Experiment, Studies]:
    return bld.exp, bld.studies


def test_the_extension_run_of_the_baseline_is_no_second_look_for_the_other_candidates(
        tmp_path: Path) -> None:
    # Two candidates, each at 1.67% (the family at 96.67%). The leader #0 (better mean) and
    # #1 each have one run slower than one baseline run (p = 2/84 = 2.4%): undecided. #0's
    # extension round crosses again (9.2 > 9.0): it stays undecided. The baseline's run in that
    # round is slow (10.6): pooled for #1 it would make its 3 runs against 7 pass at 2/120 =
    # 1.67% -- a second look at #1's full share that nothing pays for, and a wrong ADOPT when
    # nothing differs. #1 is judged on the planned runs alone.
    bld = Builder(builder_experiment(), tmp_path)
    base = bld.exp.baseline_settings()
    one, two = {"GOMAXPROCS": 1, "GOGC": 400}, {"GOMAXPROCS": 2, "GOGC": 400}
    bld.add("search", "search", one, m(6.3))
    bld.add("search", "search", two, m(6.4))
    for v in BASELINE[:3]:
        bld.add("reference", "baseline", base, m(v))
    for r, (a, b, c) in enumerate(zip(CANDIDATE, [8.0, 8.1, 9.6], BASELINE[3:], strict=True),
                                  start=1):
        bld.add("reference", "confirm", base, m(c), candidate="baseline", round=r)
        bld.add("reference", "confirm", one, m(a), candidate=0, round=r)
        bld.add("reference", "confirm", two, m(b), candidate=1, round=r)
    bld.studies.search.set_user_attr(CONFIDENCE_ATTR, 1 - 2 * 0.05 / 3)
    bld.studies.search.set_user_attr(EXTENSION_ATTR, {
        settings_key(one): Extension(2 / 330, 4, (3, 6)).record()})
    bld.add("reference", "confirm", base, m(10.6), candidate="baseline", round=4)
    bld.add("reference", "confirm", one, m(9.2), candidate=0, round=4)
    report = build_report(bld.exp, bld.studies)
    assert report.verdict == "inconclusive", report.reason
    second = next(c for c in report.candidates if c.id == "#1")
    assert second.comparisons[0].n_baseline == 6 and second.comparisons[0].outcome == "unclear"
    first = next(c for c in report.candidates if c.id == "#0")
    assert first.comparisons[0].n_baseline == 7


def test_no_extension_for_a_leader_no_round_could_save() -> None:
    # Two crossings: at best U = 2 at 4 against 7 (1.2% > the level): no round is spent.
    assert extension_for([7.0, 9.2, 9.5], [6.3], BASELINE, each=EACH, metric="x",
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
            if t.user_attrs.get("kind") == "confirm":
                rounds.setdefault(t.user_attrs["round"], []).append(t.user_attrs["candidate"])
        if recorded is None:
            assert max(rounds) <= 3
            plain += 1
            continue
        extended += 1
        assert max(rounds) == 4 and "baseline" in rounds[4] and len(rounds[4]) == 2
        [given] = recorded.values()
        level = given["level"]
        report = build_report(sim.exp, sim.studies)
        assert f"rank test at p <= {level:.2g}" in report.evidence_note
        chosen = [c for c in report.candidates if c.comparisons and c.id != "baseline"]
        held = [c for c in chosen if len(c.runs) == 4]
        assert held and held[0].comparisons[0].rank_level == pytest.approx(level)
    # Seed 0 is extended, seeds 1-3 are not (checked when written): both paths are run.
    assert extended >= 1 and plain >= 1, (extended, plain)


def test_the_budget_keeps_the_extension_back() -> None:
    assert confirm_reserve(3, 3, 0, sequential=True) == 4 + 3 * 2 + 2


def test_with_no_difference_the_confirmation_with_its_extension_adopts_under_five_percent(
) -> None:
    # benchmarks' play of confirm() and the report with the product's extension_for: top 3 of
    # 7 search values, nothing differs, so every ADOPT is wrong.
    default = look_levels(3, silent_looks(3, 0))
    rate = confirmation_false_adopt(default, 0.2, 300, np.random.default_rng(11), extend=True)
    assert rate <= 0.05
