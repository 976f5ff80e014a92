"""A study continued over nights: once the search has gone on, the confirmation numbers its
rounds after the earlier nights', so its first round measures the baseline with tonight's
candidates (review finding, 2026-12-06: round 1 was taken for night 1's round 1, whose baseline
slot was held). A confirmation of the same search continues in its own rounds, and one that
did not finish is resumed as planned."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from autotune.study.confirmation.attrs import CONFIDENCE_ATTR, LOOK_CONFIDENCE_ATTR, ROUNDS_ATTR
from autotune.study.confirmation.run import confirm
from tests.report.builder import Builder, m
from tests.report.builder import experiment as builder_experiment
from tests.report.test_tiebreak import BASELINE, FIRST, SECOND, THIRD, _Scripted


def test_the_second_nights_first_round_measures_the_baseline(tmp_path: Path) -> None:
    bld = Builder(builder_experiment(), tmp_path)
    bld.add("search", "search", FIRST, m(7.5))
    for v in BASELINE[:3]:
        bld.add("reference", "baseline", bld.exp.baseline_settings(), m(v))
    runner = _Scripted(bld, {"0": [7.7] * 6, "1": [7.2] * 6, "baseline": BASELINE * 2})
    confirm(bld.exp, bld.studies, runner, top=1, repeats=3, seed=1)
    night1 = len(runner.rounds)
    assert runner.rounds[0] == ["0", "baseline"]
    assert bld.studies.search.user_attrs[ROUNDS_ATTR] == {
        "search_trials": 1, "after_round": 0, "since_round": 0, "open": False,
        "options": {"top": 1, "repeats": 3, "sequential": True}}
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


class _Died(Exception):
    """The process died between two rounds (SIGKILL, a node drained mid-night)."""


class _DiesAfter(_Scripted):
    """``_Scripted`` that dies once, after it has measured ``rounds`` rounds in all."""

    def __init__(self, bld: Builder, script: dict[str, list[float]], rounds: int) -> None:
        super().__init__(bld, script)
        self.dies_after: int | None = rounds

    def run_reference(self, studies: Any, entries: list[dict[str, Any]],
                      then: Any = None) -> int:
        def dying() -> list[dict[str, Any]]:
            if self.dies_after is not None and len(self.rounds) >= self.dies_after:
                self.dies_after = None
                raise _Died
            return list(then()) if then is not None else []
        return super().run_reference(studies, entries, then=dying)


def _three(tmp: Path) -> Builder:
    """test_tiebreak's three candidates and the baseline's repeats."""
    bld = Builder(builder_experiment(), tmp)
    for settings, v in ((FIRST, 7.5), (SECOND, 9.5), (THIRD, 10.9)):
        bld.add("search", "search", settings, m(v))
    for v in BASELINE[:3]:
        bld.add("reference", "baseline", bld.exp.baseline_settings(), m(v))
    return bld


# test_tiebreak's confirmation: round 1, two looks (repeats 3), then two tie-breaks.
_SCRIPT = {"0": [7.7, 12.2, 12.2, 7.7, 7.7, 7.7], "1": [9.8, 9.7, 10.9, 10.0, 9.9, 9.9],
           "2": [10.7], "baseline": BASELINE[3:]}
_WHOLE = [["0", "1", "2", "baseline"], ["0", "1", "baseline"], ["0", "1", "baseline"],
          ["0", "1"], ["0", "1"]]


@pytest.mark.parametrize("dies_after", [1, 2, 3, 4])
def test_a_confirmation_resumed_after_a_crash_looks_no_more_than_its_repeats(
        tmp_path: Path, dies_after: int) -> None:
    # Statistics review (2026-12-06): a confirmation resumed on the same search counted its
    # looks from 1 again: killed after round 2 of 3, it measured rounds 3 and 4 (a look more
    # than its levels were split for), killed in the tie-breaks, two looks and two tie-breaks
    # more. Resumed, it does what the uninterrupted one does, round for round.
    bld = _three(tmp_path)
    runner = _DiesAfter(bld, _SCRIPT, dies_after)
    with pytest.raises(_Died):
        confirm(bld.exp, bld.studies, runner, top=3, repeats=3, seed=1)
    assert bld.studies.search.user_attrs[ROUNDS_ATTR]["open"] is True
    confirm(bld.exp, bld.studies, runner, top=3, repeats=3, seed=1)
    assert runner.rounds == _WHOLE
    assert bld.studies.search.user_attrs[ROUNDS_ATTR]["open"] is False
    # Its levels are the ones it was planned with: no early look could decide (3 rounds).
    assert bld.studies.search.user_attrs[CONFIDENCE_ATTR] == 0.95
    assert LOOK_CONFIDENCE_ATTR not in bld.studies.search.user_attrs


def _close_to_the_baseline() -> dict[str, list[float]]:
    """Every configuration within noise of the baseline (sd 1.2 around 18.5-19): no look
    decides, so each confirmation of the search takes all its looks."""
    rng = random.Random(0)
    return {who: [round(rng.gauss(mean, sd), 1) for _ in range(20)]
            for who, mean, sd in (("0", 18.5, 1.2), ("1", 19, 1.2), ("2", 19, 1.2),
                                  ("baseline", 19, 1.0))}


def test_a_later_confirmation_of_the_same_search_resumes_as_planned(tmp_path: Path) -> None:
    # Review finding (2026-12-07): a confirmation that was a later call on the same search
    # (a night whose search added nothing) held its plan's round before its own rounds, and
    # its resume did not count it: killed after its first look round, it looked once more than
    # the uninterrupted one.
    def two_calls(bld: Builder, runner: _Scripted) -> tuple[int, list[list[Any]]]:
        confirm(bld.exp, bld.studies, runner, top=3, repeats=3, seed=1)  # finished
        first = len(runner.rounds)
        try:  # the same search again: a night whose search added nothing
            confirm(bld.exp, bld.studies, runner, top=3, repeats=3, seed=1)
        except _Died:
            confirm(bld.exp, bld.studies, runner, top=3, repeats=3, seed=1)
        return first, runner.rounds[first:]

    bld = _three(tmp_path / "whole")
    first, whole = two_calls(bld, _Scripted(bld, _close_to_the_baseline()))
    assert len(whole) == 2  # its two looks (the plan's round was held): one to die after
    bld = _three(tmp_path / "killed")
    assert two_calls(bld, _DiesAfter(bld, _close_to_the_baseline(), first + 1)) == (first, whole)


def test_a_confirmation_resumed_with_other_options_is_a_new_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Its looks were taken at the levels of 3 rounds; going on with 5 would take more at other
    # levels, covered by neither plan: a new confirmation after every round held, said so.
    bld = _three(tmp_path)
    runner = _DiesAfter(bld, _close_to_the_baseline(), 2)
    with pytest.raises(_Died):
        confirm(bld.exp, bld.studies, runner, top=3, repeats=3, seed=1)
    with caplog.at_level("WARNING", logger="autotune.study.confirmation.run"):
        confirm(bld.exp, bld.studies, runner, top=3, repeats=5, seed=1)
    assert "did not finish and had other options" in caplog.text
    record = bld.studies.search.user_attrs[ROUNDS_ATTR]
    assert record["since_round"] == 2 and record["options"]["repeats"] == 5
    assert not record["open"]
