"""The plain progress log (cron jobs, CI, pipes): the best search trial is logged when it changes,
not again after every confirmation run that cannot change it."""

from __future__ import annotations

import logging

import pytest

from autotune.progress import PlainProgress

BEST = {"number": 1, "values": [0.0049], "settings": {"GOMAXPROCS": 2, "GOGC": 400}}


def _finished(progress: PlainProgress, number: int, kind: str, best: dict[str, object]) -> None:
    progress.trial_finished({"number": number, "kind": kind, "state": "COMPLETE",
                             "values": [0.005], "feasible": True, "seconds": 20.0}, best)


def test_the_best_search_trial_is_logged_once_until_it_changes(
        caplog: pytest.LogCaptureFixture) -> None:
    progress = PlainProgress()
    with caplog.at_level(logging.INFO, logger="autotune.run"):
        _finished(progress, 1, "search", BEST)
        for number in range(3, 10):  # the confirmation's runs
            _finished(progress, number, "confirm", BEST)
        better = {**BEST, "number": 12, "values": [0.0041]}
        _finished(progress, 12, "search", better)
    lines = [r.getMessage() for r in caplog.records if "best search trial" in r.getMessage()]
    assert lines == ["best search trial so far: #1 value=0.0049 GOMAXPROCS=2 GOGC=400",
                     "best search trial so far: #12 value=0.0041 GOMAXPROCS=2 GOGC=400"]
