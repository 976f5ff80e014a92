"""Every Target: apply sets exactly the variables, check sees changes, restore puts things back."""

from __future__ import annotations

import json

import pytest

from autotune.errors import TargetError
from autotune.study.space import to_env
from tests.contract.harness import Harness


def _envs(h: Harness) -> tuple[dict[str, str | None], dict[str, str | None]]:
    exp = h.experiment
    first = {p.name: (p.values[0] if p.values else p.low) for p in exp.parameters}
    second = {p.name: (p.values[-1] if p.values else p.high) for p in exp.parameters}
    return to_env(exp, first), to_env(exp, second)  # type: ignore[arg-type]


def _expected(env: dict[str, str | None]) -> dict[str, str]:
    return {k: v for k, v in env.items() if v is not None}


def test_apply_sets_exactly_the_candidate_env(harness: Harness) -> None:
    first, second = _envs(harness)
    before = harness.clock.now()
    live = harness.backends.target.apply(first)
    assert harness.env_seen() == _expected(first)
    assert live.since >= before - 1
    live2 = harness.backends.target.apply(second)
    assert harness.env_seen() == _expected(second)
    assert live2.since >= live.since


def test_unset_removes_the_variable(harness: Harness) -> None:
    first, _ = _envs(harness)
    harness.backends.target.apply(first)
    var = next(iter(first))
    harness.backends.target.apply({**first, var: None})
    assert var not in harness.env_seen()


def test_check_passes_when_unchanged_and_fails_after_a_change(harness: Harness) -> None:
    first, second = _envs(harness)
    live = harness.backends.target.apply(first)
    facts = harness.backends.target.check(live)
    # Unchanged: check gives its facts about the window (JSON, for the trial's record) and
    # leaves the service as it was.
    assert json.loads(json.dumps(dict(facts))) == dict(facts)
    assert harness.env_seen() == _expected(first)
    harness.backends.target.apply(second)
    with pytest.raises(TargetError):
        harness.backends.target.check(live)


def test_restore_is_idempotent_and_brings_back_the_original(harness: Harness) -> None:
    original = harness.original_env()
    first, _ = _envs(harness)
    harness.backends.target.apply(first)
    harness.backends.target.restore()
    harness.backends.target.restore()
    assert harness.env_seen() == original


def test_describe_is_json_able(harness: Harness) -> None:
    assert json.loads(json.dumps(harness.backends.target.describe()))["kind"]
