"""Small pure pieces: durations, PromQL rendering, result interpretation, sampler seeds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune.experiment.durations import DURATION_PATTERN, parse_duration
from autotune.live import Matcher
from autotune.metrics import promql
from autotune.metrics.base import Unavailable
from autotune.metrics.prometheus import interpret
from autotune.study.samplers import derive_seed
from tests.support.simulated import rig


@pytest.mark.parametrize(("text", "seconds"), [
    ("500ms", 0.5), ("15s", 15), ("1m30s", 90), ("2h", 7200), (3, 3.0), ("1.5s", 1.5),
    (" 1 m 30 s ", 90), ("2m 5s", 125)])
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds
    # what editors check (autotune schema) takes what validate takes
    assert isinstance(text, int) or re.match(DURATION_PATTERN, text)


@pytest.mark.parametrize("bad", ["10 parsecs", "", "s", "5x", "1s2", "1 5s", "1.5 .5s", True,
                                 [1]])
def test_bad_durations(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)
    assert not isinstance(bad, str) or not re.match(DURATION_PATTERN, bad)


def test_selector_values_are_escaped() -> None:
    sel = promql.render_selector((Matcher("pod", 'a"b\\c'), Matcher("x", promql.any_of(
        ["api-1.x", "api-2"]), regex=True)))
    assert sel == 'pod="a\\"b\\\\c",x=~"api-1\\\\.x|api-2"'
    with pytest.raises(ValueError):
        promql.render_selector((Matcher("bad-label", "v"),))


def test_render_fills_placeholders_only() -> None:
    out = promql.render("rate(x{ {{ selector }} }[{{window}}])",
                        {"selector": 'job="a"', "window": promql.render_window(15)})
    assert out == 'rate(x{ job="a" }[15s])'
    assert promql.render_window(0.5) == "500ms"
    with pytest.raises(ValueError, match="unknown placeholder"):
        promql.render("{{nope}}", {})


def test_interpret_never_invents() -> None:
    assert interpret([{"metric": {}, "value": [1, "0.25"]}], "q") == 0.25
    assert interpret([1, "3"], "q") == 3.0  # scalar
    assert isinstance(interpret([], "q"), Unavailable)
    many = interpret([{"metric": {"a": "1"}, "value": [1, "1"]},
                      {"metric": {"a": "2"}, "value": [1, "2"]}], "q")
    assert isinstance(many, Unavailable) and "2 series" in many.reason
    for raw in ("NaN", "+Inf"):
        value = interpret([{"metric": {}, "value": [1, raw]}], "q")
        assert isinstance(value, Unavailable), value


def test_derived_seed_differs_per_trial_count() -> None:
    assert derive_seed(None, 5) is None
    assert derive_seed(1, 0) != derive_seed(1, 3)
    assert derive_seed(1, 3) == derive_seed(1, 3)


def test_resume_does_not_replay_earlier_suggestions(tmp_path: Path) -> None:
    r = rig(tmp_path, **{"study.sampler": "random", "study.seed": 11, "baseline.repeats": 1})
    r.run(budget=4)
    rig(tmp_path, exp=r.exp).run(budget=8)
    params = [tuple(sorted(t.params.items())) for t in r.studies().search.get_trials()]
    assert params[4:] != params[:4]
