"""A study continued over nights: once the search has gone on, the confirmation numbers its
rounds after the earlier nights', so its first round measures the baseline with tonight's
candidates (review finding, 2026-12-06: round 1 was taken for night 1's round 1, whose baseline
slot was held). A confirmation of the same search continues in its own rounds."""

from __future__ import annotations

from pathlib import Path

from autotune.study.confirmation.attrs import ROUNDS_ATTR
from autotune.study.confirmation.run import confirm
from tests.report.builder import Builder, m
from tests.report.builder import experiment as builder_experiment
from tests.report.test_tiebreak import BASELINE, FIRST, SECOND, _Scripted


def test_the_second_nights_first_round_measures_the_baseline(tmp_path: Path) -> None:
    bld = Builder(builder_experiment(), tmp_path)
    bld.add("search", "search", FIRST, m(7.5))
    for v in BASELINE[:3]:
        bld.add("reference", "baseline", bld.exp.baseline_settings(), m(v))
    runner = _Scripted(bld, {"0": [7.7] * 6, "1": [7.2] * 6, "baseline": BASELINE * 2})
    confirm(bld.exp, bld.studies, runner, top=1, repeats=3, seed=1)
    night1 = len(runner.rounds)
    assert runner.rounds[0] == ["0", "baseline"]
    assert bld.studies.search.user_attrs[ROUNDS_ATTR] == {"search_trials": 1, "after_round": 0}
    bld.add("search", "search", SECOND, m(7.0))  # night 2's search finds a better one
    confirm(bld.exp, bld.studies, runner, top=1, repeats=3, seed=1)
    assert runner.rounds[night1] == ["1", "baseline"], runner.rounds
    # Night 2's rounds follow night 1's three.
    rounds = [t.user_attrs["round"] for t in bld.studies.reference.get_trials()
              if t.user_attrs.get("kind") == "confirm"]
    assert rounds[:2 * night1] == [1, 1, 2, 2, 3, 3] and min(rounds[2 * night1:]) == 4


def test_a_confirmation_of_the_same_search_continues_in_its_own_rounds(tmp_path: Path) -> None:
    # A confirmation died after #0's run in round 1, before the baseline's: run again on the
    # same search (nothing searched since), it fills round 1's missing slot, no new round.
    bld = Builder(builder_experiment(), tmp_path)
    bld.add("search", "search", FIRST, m(7.5))
    for v in BASELINE[:3]:
        bld.add("reference", "baseline", bld.exp.baseline_settings(), m(v))
    bld.studies.search.set_user_attr(ROUNDS_ATTR, {"search_trials": 1, "after_round": 0})
    bld.add("reference", "confirm", FIRST, m(7.7), candidate=0, round=1)
    runner = _Scripted(bld, {"0": [7.7] * 6, "baseline": BASELINE})
    confirm(bld.exp, bld.studies, runner, top=1, repeats=3, seed=1)
    assert runner.rounds[0] == ["baseline"]
