"""Whole runs through the study loop against the fake cluster, and every failure the issue
names. Each test asserts the END STATE: no StressChaos left, the Deployment's env as found, no
autotune annotation, and the failed trial recorded with its reason."""

from __future__ import annotations

import os
import re
import signal
import threading
from typing import Any

from autotune.errors import AutotuneError, StudyError, TargetError
from autotune.experiment import Experiment
from autotune.study.interrupts import Interrupted, signals_as_exceptions
from autotune.study.journal import Journal
from autotune.study.loop import RunResult, StudyRunner
from autotune.study.storage import open_for_run
from autotune.study.trial import Backends
from tests.kubernetes.conftest import NAMESPACE, FakeMetrics, World
from tests.kubernetes.test_chaos import assert_valid


class Silent:
    def study_started(self, info: dict[str, Any]) -> None: ...

    def trial_started(self, number: int, kind: str, settings: dict[str, Any]) -> None: ...

    def phase(self, name: str) -> None: ...

    def trial_finished(self, record: dict[str, Any], best: dict[str, Any] | None) -> None: ...


def run(world: World, exp: Experiment, backends: Backends) -> tuple[RunResult | BaseException,
                                                                    list[dict[str, Any]]]:
    journal = Journal(world.tmp / "trials.jsonl")
    studies = open_for_run(exp, f"sqlite:///{world.tmp}/study.db")
    runner = StudyRunner(exp, backends, clock=world.clock, progress=Silent(), journal=journal,
                         experiment_hash="test")
    outcome: RunResult | BaseException
    try:
        outcome = runner.run(studies, exp.study.trials)
    except (AutotuneError, Interrupted) as e:
        outcome = e
    return outcome, list(journal.entries())


def failed_once(world: World, message: str, **exp: Any) -> list[dict[str, Any]]:
    """Run a study that stops at its first failed trial; check the reason and the end state."""
    experiment = world.experiment(stop_after=1, **exp)
    outcome, records = run(world, experiment, world.backends(experiment))
    assert isinstance(outcome, StudyError), outcome
    assert records[-1]["state"] == "FAIL"
    assert re.search(message, records[-1]["failure"]), records[-1]["failure"]
    world.assert_pristine()
    return records


# --- whole studies --------------------------------------------------------------------------

def test_a_three_trial_study_measures_under_real_stress_and_restores(world: World) -> None:
    exp = world.experiment(trials=3)
    backends = world.backends(exp)
    outcome, records = run(world, exp, backends)
    assert isinstance(outcome, RunResult), outcome
    assert outcome.completed == 3 and outcome.stop_reason == "budget reached"
    assert [r["kind"] for r in records] == ["baseline", "search", "search", "search"]
    assert all(r["state"] == "COMPLETE" for r in records)
    for r in records:
        assert r["injections"] and all(i["pods"] == sorted(r["live"]["pods"][j]["name"]
                                       for j in range(len(r["live"]["pods"])))
                                       for i in r["injections"])
        assert all(i["name"].startswith("autotune-api-test-t") for i in r["injections"])
    assert records[0]["env"] == {"GOMAXPROCS": None, "FORCEGC_INTERVAL_MS": None}
    assert len(world.fake.injected) == 2 * len(records)  # two bursts per window
    assert all(i.end is not None for i in world.fake.injected)
    for created in world.fake.created_chaos:
        assert_valid(created)
    world.assert_pristine()
    assert isinstance(backends.source, FakeMetrics) and backends.source.closed


def test_an_interrupt_during_a_read_still_restores(world: World) -> None:
    exp = world.experiment(trials=3)
    outcome, records = run(world, exp, world.backends(exp, interrupt_on_read=2))
    assert isinstance(outcome, Interrupted)
    assert [r["state"] for r in records] == ["COMPLETE", "FAIL"]
    assert records[-1]["failure"] == "interrupted (SIGTERM)"
    world.assert_pristine()


def test_sigterm_while_waiting_for_injection_removes_the_stresschaos(world: World) -> None:
    world.fake.chaos = "never-inject"
    exp = world.experiment()
    backends = world.backends(exp)
    backends = Backends(backends.target, world.injector(timeout=30), backends.source)
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        with signals_as_exceptions():
            outcome, records = run(world, exp, backends)
    finally:
        timer.cancel()
    assert isinstance(outcome, Interrupted) and outcome.signame == "SIGTERM"
    assert records[-1]["failure"] == "interrupted (SIGTERM)"
    world.assert_pristine()


def test_a_dead_runs_leftovers_are_undone_when_the_next_run_starts(world: World) -> None:
    exp = world.experiment(trials=1)
    dead = world.backends(exp)
    live = dead.target.apply({"GOMAXPROCS": "16", "FORCEGC_INTERVAL_MS": "500"})
    dead.injector.inject(live, exp.chaos.stress, 60, {"autotune/trial": "0"})
    outcome, _ = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult) and outcome.completed == 1
    world.assert_pristine()


# --- each failure the issue names: the trial fails with the reason, the cluster is clean ----
# (with a burst pattern the injections happen inside the "measure" phase)

def test_no_pod_selected(world: World) -> None:
    world.fake.chaos = "select-nothing"
    failed_once(world, r"^measure: Chaos Mesh selected no pod .*no pod is selected")


def test_injection_not_confirmed(world: World) -> None:
    world.fake.chaos = "never-inject"
    failed_once(world, r"^measure: StressChaos .* not confirmed injected within 1s")


def test_webhook_denial(world: World) -> None:
    world.fake.webhook_denial = "StressChaos is not allowed in namespace shop"
    failed_once(world, r'^measure: an admission webhook denied .*vauth.kb.io.*not allowed in')


def test_crd_missing(world: World) -> None:
    world.fake.crd_installed = False
    failed_once(world, r"^measure: the StressChaos CRD .* is not installed")


def test_rollout_timeout(world: World) -> None:
    # Every candidate crash-loops; only the original env (GOMAXPROCS=8, no forced GC) runs.
    world.fake.stuck_when = lambda env: ("FORCEGC_INTERVAL_MS" in env
                                         or env.get("GOMAXPROCS") != "8")
    records = failed_once(world, r"^apply: the rollout of Deployment shop/api did not complete "
                                 r"within 1s .*re-applied the original env",
                          rollout_timeout="1s")
    assert "injections" not in records[-1]


def test_pod_restart_during_the_window(world: World) -> None:
    restarted: list[str] = []

    def restart(seconds: float) -> None:
        pods = world.fake.pods_of(NAMESPACE, "api")
        if seconds >= 0.1 and world.chaos_left():
            restarted.append(pods[0]["metadata"]["name"])
            world.fake.restart_pod(NAMESPACE, restarted[-1])

    world.clock.on_sleep = restart
    failed_once(world, r"changed during the measurement .*restarted \(restartCount 0 -> \d\)")
    assert restarted


def test_forbidden_patch(world: World) -> None:
    world.fake.denied.add(("patch", "deployments"))
    failed_once(world, r"^apply: forbidden \(403\): not allowed to patch deployments.apps "
                       r"\"api\" .*Grant the verb 'patch'")


def test_deployment_not_found(world: World) -> None:
    world.fake.objects.pop(("deployments", NAMESPACE, "api"))
    exp = world.experiment(stop_after=1)
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, TargetError), "fails before any trial starts"
    assert "Deployment shop/api not found" in str(outcome)
    assert records == [] and world.chaos_left() == []


def test_deletion_not_confirmed_leaves_the_object_for_a_human(world: World) -> None:
    """Stuck deletion cannot end clean; it must say so, keep the finalizer and restore the env."""
    exp = world.experiment(stop_after=1)
    backends = world.backends(exp)
    injector = backends.injector
    world.clock.on_sleep = (lambda s: setattr(world.fake, "chaos", "stuck-deleting")
                            if world.chaos_left() else None)
    outcome, records = run(world, exp, backends)
    assert isinstance(outcome, StudyError)
    assert "cleanup incomplete: stress: StressChaos objects still present" in str(outcome)
    assert re.search(r"^recover: StressChaos .* still exists 1s after its deletion",
                     records[-1]["failure"])
    left = world.fake.items("stresschaos")
    assert left and all(o["metadata"]["finalizers"] == ["chaos-mesh/records"] for o in left)
    assert world.annotations() == {}
    world.fake.chaos = "inject"  # Chaos Mesh is repaired: a later `autotune cleanup` finishes
    world.clock.on_sleep = None
    assert len(injector.cleanup()) == len(left)
    world.assert_pristine()

