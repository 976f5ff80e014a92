"""Issue 15.6: one run at a time, for real. A second run's start-up cleanup, or
``autotune cleanup --namespace``, must never remove the stress of a run that is alive; a window
whose StressChaos did not last is discarded, never recorded as measured under stress."""

from __future__ import annotations

import re
from typing import Any

import pytest

from autotune.cli import main
from autotune.errors import TargetError
from autotune.platforms.kubernetes import stack
from autotune.platforms.kubernetes.errors import TargetProblem
from autotune.study.loop import RunResult
from tests.kubernetes.conftest import World
from tests.kubernetes.test_study import run

CANDIDATE = {"GOMAXPROCS": "4", "FORCEGC_INTERVAL_MS": "500"}
LABELS = {"autotune/trial": "3"}


def _alive_in_a_window(world: World) -> tuple[Any, Any, Any]:
    """A run in the middle of a window: its candidate applied, its StressChaos injected."""
    exp = world.experiment(trials=1, stop_after=1)
    first = world.backends(exp)
    live = first.target.apply(CANDIDATE)
    injection = first.injector.inject(live, exp.chaos.stress, 60, LABELS)
    return first, live, injection


def test_a_second_run_stops_before_its_cleanup_touches_the_live_stress(world: World) -> None:
    first, _, injection = _alive_in_a_window(world)
    stressed = world.chaos.stressed_pods()
    exp = world.experiment(trials=1, stop_after=1)
    outcome, records = run(world, exp, world.backends(exp))  # same study: it would clean up
    assert isinstance(outcome, TargetError) and "another autotune run holds" in str(outcome)
    assert records == []
    assert world.chaos_left() == [injection.id], "the live run's StressChaos is untouched"
    assert world.chaos.stressed_pods() == stressed
    first.injector.recover(injection)  # the first run's window ends as it should
    first.target.restore()
    world.assert_pristine()


def test_cleanup_namespace_refuses_while_a_run_holds_a_lease(
        world: World, capsys: pytest.CaptureFixture[str]) -> None:
    first, _, injection = _alive_in_a_window(world)
    with pytest.raises(TargetProblem, match=r"cleanup of namespace .* refused: another autotune "
                                            r"run holds Lease .*/autotune-api \(.* pid \d+"):
        stack.cleanup_namespace(world.namespace, kubeconfig=str(world.kubeconfig),
                                clock=world.clock)
    assert world.chaos_left() == [injection.id]
    code = main(["cleanup", "--namespace", world.namespace, "--kubeconfig",
                 str(world.kubeconfig)])
    assert code == 1 and "refused" in capsys.readouterr().err
    assert world.chaos_left() == [injection.id]
    # --force removes the stress, never the live run's env
    done = stack.cleanup_namespace(world.namespace, kubeconfig=str(world.kubeconfig),
                                   clock=world.clock, force=True)
    assert any(injection.id in line for line in done), done
    assert world.chaos_left() == []
    assert world.annotations(), "the live run's saved original is left to that run"
    # ... and the live run sees its window was not stressed to the end
    with pytest.raises(Exception, match=r"did not last the window"):
        first.injector.recover(injection)
    first.target.restore()
    world.assert_pristine()


def test_a_window_whose_stresschaos_disappeared_is_discarded(world: World) -> None:
    exp = world.experiment(trials=1, stop_after=1)

    def someone_deletes_it(seconds: float) -> None:
        for name in world.chaos_left():
            world.admin.delete(world.path("stresschaos", name))

    world.clock.on_sleep = someone_deletes_it
    outcome, records = run(world, exp, world.backends(exp))
    world.clock.on_sleep = None
    assert records[0]["state"] == "FAIL", records[0]
    assert re.search(r"^recover: StressChaos .* did not last the window .*discarded",
                     records[0]["failure"]), records[0]["failure"]
    assert "metrics" not in records[0] or not records[0]["metrics"]
    world.assert_pristine()
    assert not isinstance(outcome, RunResult) or outcome.completed == 0
