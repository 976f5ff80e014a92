"""Every Injector: stress is really there after inject and really gone after recover."""

from __future__ import annotations

from autotune.study.space import to_env
from tests.contract.harness import Harness

LABELS = {"app.kubernetes.io/managed-by": "autotune", "autotune/study": "contract",
          "autotune/trial": "0"}


def _live(h: Harness):  # type: ignore[no-untyped-def]
    exp = h.experiment
    settings = {p.name: (p.values[0] if p.values else p.low) for p in exp.parameters}
    return h.backends.target.apply(to_env(exp, settings))  # type: ignore[arg-type]


def test_inject_then_recover(harness: Harness) -> None:
    live = _live(harness)
    inj = harness.backends.injector.inject(live, harness.experiment.chaos.stress, 60, LABELS)
    assert harness.stress_present()
    assert inj.id in harness.backends.injector.active()
    harness.backends.injector.recover(inj)
    assert not harness.stress_present()
    assert harness.backends.injector.active() == []


def test_recover_is_idempotent(harness: Harness) -> None:
    live = _live(harness)
    inj = harness.backends.injector.inject(live, harness.experiment.chaos.stress, 60, LABELS)
    harness.backends.injector.recover(inj)
    harness.backends.injector.recover(inj)
    assert not harness.stress_present()


def test_cleanup_removes_what_a_dead_run_left(harness: Harness) -> None:
    live = _live(harness)
    harness.backends.injector.inject(live, harness.experiment.chaos.stress, 60, LABELS)
    removed = harness.backends.injector.cleanup()
    assert removed
    assert not harness.stress_present()
    assert harness.backends.injector.active() == []
    assert harness.backends.injector.cleanup() == []
