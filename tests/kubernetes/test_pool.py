"""A pool of three Deployments (``target.kubernetes.pool``), one namespace each, measuring one
study in parallel against the real control plane. Each test asserts the END STATE of every
member: no StressChaos, the env as found, no annotation, no Lease."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autotune.errors import AutotuneError
from autotune.evidence.members import member_baselines
from autotune.experiment import Experiment, parse_experiment
from autotune.progress import SilentProgress
from autotune.study.interrupts import Interrupted, signals_as_exceptions
from autotune.study.journal import Journal
from autotune.study.loop import RunResult
from autotune.study.pool import Member, PoolRunner, baseline_runs
from autotune.study.storage import open_for_run
from tests.kubernetes.conftest import Plane, World, start_world


@pytest.fixture
def worlds(plane: Plane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[World]]:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    started, stops = [], []
    try:
        for i in range(3):
            (tmp_path / f"m{i}").mkdir()
            w, stop = start_world(plane, tmp_path / f"m{i}")
            started.append(w)
            stops.append(stop)
        yield started
    finally:
        for stop in stops:
            stop()


def pool_experiment(worlds: list[World], trials: int) -> Experiment:
    members = ", ".join(f"{{namespace: {w.namespace}}}" for w in worlds[1:])
    text = worlds[0].experiment_text(trials=trials, target=f"\n    pool: [{members}]")
    # 32 configurations: a 12-trial search never runs out of new ones
    text = text.replace("type: int, values: [2, 4, 8, 16]", "type: int, low: 1, high: 16")
    return parse_experiment(text)


def run_pool(worlds: list[World], exp: Experiment, db: Path, rates: tuple[float, ...] = ()
             ) -> tuple[RunResult | BaseException, list[dict[str, Any]], PoolRunner]:
    """``rates``: the requests/s each member serves (default 100 each)."""
    members = [Member(m.member or "", m, w.backends(m), w.clock)
               for m, w in zip(exp.pool_members(), worlds, strict=True)]
    for member, rate in zip(members, rates, strict=False):
        member.backends.source.rate = rate  # type: ignore[attr-defined]
    journal = Journal(db.parent / "trials.jsonl")
    runner = PoolRunner(exp, members, progress=SilentProgress(), journal=journal,
                        experiment_hash="test")
    outcome: RunResult | BaseException
    try:
        outcome = runner.run(open_for_run(exp, f"sqlite:///{db}"), exp.study.trials)
    except (AutotuneError, Interrupted) as e:
        outcome = e
    return outcome, list(journal.entries()), runner


def test_three_members_run_one_study_and_a_failure_mid_trial_stays_with_its_member(
        worlds: list[World], tmp_path: Path) -> None:
    exp = pool_experiment(worlds, trials=12)
    names = [m.member for m in exp.pool_members()]
    assert names == [f"{w.namespace}/api" for w in worlds]
    failing = worlds[1]
    restarted: list[str] = []

    def restart_once(seconds: float) -> None:
        # a container restarts in member 2's window, once: that trial must fail, only that one
        if not restarted and seconds >= 0.5 and failing.chaos_left():
            restarted.append(failing.pods()[0]["metadata"]["name"])
            failing.restart_container(restarted[-1])

    failing.clock.on_sleep = restart_once
    # each member under its own load: 40% apart, far beyond measure.load.tolerance (10%)
    outcome, records, runner = run_pool(worlds, exp, tmp_path / "study.db",
                                        rates=(100.0, 140.0, 80.0))
    assert isinstance(outcome, RunResult), outcome
    assert restarted
    assert outcome.completed == 12 and outcome.stop_reason == "budget reached"
    failed = [r for r in records if r["state"] == "FAIL"]
    assert [r["member"] for r in failed] == [names[1]]
    assert "changed during the measurement" in failed[0]["failure"]
    # the others went on, and so did the member whose trial failed
    search = [r for r in records if r["kind"] == "search" and r["state"] == "COMPLETE"]
    assert len(search) == 12
    assert {r["member"] for r in search} == set(names)
    # every member measured the baseline under its own stress, in its own namespace
    baseline = [r for r in records if r["kind"] == "baseline" and r["state"] == "COMPLETE"]
    assert sorted(r["member"] for r in baseline) == sorted(names)
    for r in records:
        namespace = r["member"].split("/")[0]
        assert all(i["namespace"] == namespace for i in r.get("injections") or []), r
    assert [line.split(":")[0] for line in outcome.members] == names
    study = optuna.load_study(study_name=exp.name, storage=f"sqlite:///{tmp_path}/study.db")
    assert len(study.get_trials(states=[TrialState.COMPLETE])) == 12  # not one over
    assert {b.member for b in member_baselines(baseline_runs(
        optuna.load_study(study_name=f"{exp.name}:reference",
                          storage=f"sqlite:///{tmp_path}/study.db")))} == set(names)
    assert runner.member == names[0]  # the confirmation runs on the target itself
    for w in worlds:
        w.assert_pristine()


def test_sigterm_stops_every_member_and_each_is_restored(
        worlds: list[World], tmp_path: Path) -> None:
    exp = pool_experiment(worlds, trials=12)
    # SIGTERM (to the main thread, as a signal always is) once member 3 is under stress
    watcher = worlds[2].when(lambda: bool(worlds[2].chaos_left()),
                             lambda: os.kill(os.getpid(), signal.SIGTERM))
    try:
        with signals_as_exceptions():
            outcome, records, _ = run_pool(worlds, exp, tmp_path / "study.db")
    finally:
        watcher.stop()
    assert watcher.fired
    assert isinstance(outcome, Interrupted) and outcome.signame == "SIGTERM"
    assert any(r["failure"] == "interrupted (SIGTERM)" for r in records if r.get("failure"))
    for w in worlds:
        w.assert_pristine()
