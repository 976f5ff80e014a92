"""The pool runner (``autotune.study.pool``) on simulated members: the budget is shared and never
overshot, every member measures the baseline, a member that stops leaves the others going, and
each member's target ends restored. The same against the real control plane:
tests/kubernetes/test_pool.py."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotune import cli
from autotune.clock import FakeClock, SystemClock
from autotune.errors import ExitCode, ExperimentError, StudyError, TargetError
from autotune.evidence.members import differing, member_baselines
from autotune.experiment import Experiment, parse_experiment
from autotune.live import Live
from autotune.platforms import simulated
from autotune.progress import SilentProgress
from autotune.report import build_report, document, history, markdown
from autotune.study import nightly
from autotune.study.confirmation.candidates import BASELINE
from autotune.study.confirmation.run import confirm
from autotune.study.confirmation.standing import pooled_values
from autotune.study.interrupts import Interrupted, StopRequest, shielded, signals_as_exceptions
from autotune.study.journal import Journal
from autotune.study.pool import Member, PoolRunner, StoppableClock, baseline_runs
from autotune.study.storage import open_existing, open_for_run
from autotune.study.trial import Backends

DOC: dict[str, Any] = {
    "name": "pooled",
    "target": {"simulated": {"optimum": {"GOMAXPROCS": 2}, "unset": {"GOMAXPROCS": 8},
                             "apply_seconds": 1.0}},
    "parameters": [{"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 16}],
    "baseline": {"repeats": 2},
    "chaos": {"stress": {"workers": 1, "load": 50}},
    "measure": {"warmup": "1s", "window": "5s"},
    "metrics": {"p99": "surface"},
    "objective": {"minimize": "p99"},
    "study": {"trials": 9, "sampler": "tpe", "seed": 4, "stop_after_failures": 2,
              "early_stop": None},
}


class Breaks:
    """A member's target that stops answering after ``after`` applies (a node gone)."""

    def __init__(self, inner: simulated.SimulatedService, after: int) -> None:
        self.inner, self.after, self.applied = inner, after, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def apply(self, env: dict[str, str | None]) -> Live:
        self.applied += 1
        if self.applied > self.after:
            raise TargetError("the member's node is gone")
        return self.inner.apply(env)


def members(tmp: Path, exp: Experiment, n: int, breaks: int | None = None) -> list[Member]:
    out = []
    for i in range(n):
        clock = FakeClock()
        world = simulated.World(tmp / f"world-{i}.json")
        target: Any = simulated.SimulatedService(exp, world, clock)
        if breaks is not None and i == 1:
            target = Breaks(target, breaks)
        out.append(Member(f"copy-{i}", exp, Backends(
            target=target, injector=simulated.SimulatedInjector(world, clock),
            source=simulated.SimulatedMetrics(exp, world, seed=i)), clock))
    return out


def run(tmp: Path, pool: list[Member], exp: Experiment, url: str | None = None
        ) -> tuple[Any, list[dict[str, Any]]]:
    journal = Journal(tmp / "trials.jsonl")
    runner = PoolRunner(exp, pool, progress=SilentProgress(), journal=journal, experiment_hash="t")
    studies = open_for_run(exp, url or f"sqlite:///{tmp}/study.db")
    try:
        outcome: Any = runner.run(studies, exp.study.trials)
    except (StudyError, Interrupted) as e:
        outcome = e
    return outcome, list(journal.entries())


def applied(pool: list[Member]) -> list[Any]:
    return [m.backends.target.world.load()["applied"] for m in pool]  # type: ignore[attr-defined]


def test_three_members_share_the_budget_and_each_measures_the_baseline(tmp_path: Path) -> None:
    exp = parse_experiment(yaml.safe_dump(DOC))
    pool = members(tmp_path, exp, 3)
    slow = pool[0].backends.target.apply
    searching = threading.Event()
    """Set when the slow member applies its first search candidate (its third apply)."""
    calls = {m.name: 0 for m in pool}

    def slow_apply(env: dict[str, str | None]) -> Live:
        calls["copy-0"] += 1
        if calls["copy-0"] <= 2:
            time.sleep(0.2)  # a slower member: the others must not measure its baseline repeats
        else:
            searching.set()
        return slow(env)

    def waiting(name: str, apply: Any) -> Any:
        def wait_then_apply(env: dict[str, str | None]) -> Live:
            calls[name] += 1
            if calls[name] == 3:
                # Without this, on a loaded host the fast members can finish the whole budget
                # while the slow one still measures its baseline, and "every member measured
                # a search trial" would depend on the host's speed.
                assert searching.wait(timeout=60), "copy-0 never reached a search trial"
            return apply(env)
        return wait_then_apply

    pool[0].backends.target.apply = slow_apply  # type: ignore[method-assign]
    for m in pool[1:]:
        m.backends.target.apply = waiting(m.name, m.backends.target.apply)  # type: ignore[method-assign]
    result, records = run(tmp_path, pool, exp)
    search = [r for r in records if r["kind"] == "search"]
    assert [r["state"] for r in search] == ["COMPLETE"] * 9  # exactly the budget, not over
    assert result.completed == 9
    names = [m.name for m in pool]
    baseline = sorted(r["member"] for r in records if r["kind"] == "baseline")
    assert baseline == sorted(names * 2)
    assert {r["member"] for r in search} == set(names)
    assert [b.member for b in member_baselines(baseline_runs(optuna.load_study(
        study_name="pooled:reference", storage=f"sqlite:///{tmp_path}/study.db")))] != []
    assert applied(pool) == [None, None, None]  # every member restored


def test_a_member_that_stops_leaves_the_others_going(tmp_path: Path) -> None:
    exp = parse_experiment(yaml.safe_dump(DOC))
    pool = members(tmp_path, exp, 3, breaks=2)
    result, records = run(tmp_path, pool, exp)
    assert not isinstance(result, BaseException), result
    failed = [r for r in records if r["state"] == "FAIL"]
    assert {r["member"] for r in failed} == {"copy-1"}
    assert all("the member's node is gone" in r["failure"] for r in failed)
    assert len(failed) == 2  # its failure limit; then it stops, alone
    assert result.completed == 9
    assert result.members[1].startswith("copy-1: stopped: 2 trials in a row failed")
    assert applied(pool) == [None, None, None]
    study = optuna.load_study(study_name="pooled", storage=f"sqlite:///{tmp_path}/study.db")
    assert len(study.get_trials(states=[TrialState.COMPLETE])) == 9


def test_when_every_member_stops_the_run_fails_with_the_reason(tmp_path: Path) -> None:
    exp = parse_experiment(yaml.safe_dump(DOC))
    pool = members(tmp_path, exp, 2)
    for m in pool:
        object.__setattr__(m, "backends", Backends(Breaks(m.backends.target, 0),  # type: ignore[arg-type]
                                                   m.backends.injector, m.backends.source))
    outcome, _ = run(tmp_path, pool, exp)
    assert isinstance(outcome, StudyError)
    assert "every member of the pool stopped" in str(outcome)


def test_sigterm_stops_every_member_at_its_next_wait_and_each_is_restored(
        tmp_path: Path) -> None:
    exp = parse_experiment(yaml.safe_dump(DOC))
    pool = members(tmp_path, exp, 3)
    original = pool[2].backends.target.apply
    sent: list[int] = []

    def apply_then_signal(env: dict[str, str | None]) -> Live:
        live = original(env)
        if not sent:  # a real SIGTERM, sent from a member's thread: the main thread gets it
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
        return live

    pool[2].backends.target.apply = apply_then_signal  # type: ignore[method-assign]
    with signals_as_exceptions():
        outcome, records = run(tmp_path, pool, exp)
    assert isinstance(outcome, Interrupted) and outcome.signame == "SIGTERM"
    assert any(r.get("failure") == "interrupted (SIGTERM)" for r in records)
    assert len([r for r in records if r["state"] == "COMPLETE" and r["kind"] == "search"]) < 9
    # No member outlives the run (a signal raised inside Thread.join once let the one being
    # joined go on unrestored: autotune.study.pool.PoolRunner.run)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("member ")]
    assert applied(pool) == [None, None, None]


def test_a_member_waiting_on_the_real_clock_stops_at_once() -> None:
    stop = StopRequest()
    clock = StoppableClock(SystemClock(), stop)
    threading.Timer(0.05, stop.request, args=("SIGTERM",)).start()
    began = time.monotonic()
    with pytest.raises(Interrupted):
        clock.sleep(600)  # a measurement window
    assert time.monotonic() - began < 60
    with shielded():
        clock.sleep(0.01)  # undoing: never interrupted


def test_pool_members_are_the_target_then_each_copy(tmp_path: Path) -> None:
    doc = kube_doc([{"namespace": "b"}, {"namespace": "c", "deployment": "api-copy"}])
    exp = parse_experiment(yaml.safe_dump(doc))
    assert [m.member for m in exp.pool_members()] == ["a/api", "b/api", "c/api-copy"]
    assert all(m.target.kubernetes is not None and m.target.kubernetes.pool == []
               for m in exp.pool_members())


def test_a_namespace_shared_by_two_members_is_refused_naming_the_field() -> None:
    doc = kube_doc([{"namespace": "b"}, {"namespace": "a", "deployment": "api-copy"}])
    with pytest.raises(ExperimentError) as e:
        parse_experiment(yaml.safe_dump(doc))
    assert "target.kubernetes.pool[1].namespace: 'a'" in str(e.value)


def kube_doc(pool: list[dict[str, str]]) -> dict[str, Any]:
    return {**DOC, "target": {"kubernetes": {"namespace": "a", "deployment": "api",
                                             "container": "api", "pool": pool}},
            "prometheus": {"url": "http://127.0.0.1:9090"},
            "metrics": {"p99": "histogram_quantile(0.99, rate(x_bucket{ {{selector}} }[1m]))",
                        "rate": "sum(rate(x_count{ {{selector}} }[1m]))"},
            "measure": {"warmup": "1s", "window": "2m", "load": {"metric": "rate"}}}


def test_a_member_is_called_different_only_when_apart_and_far() -> None:
    runs = [("a", 3.0), ("a", 3.2), ("b", 3.1), ("b", 2.9), ("c", 4.0), ("c", 4.4)]
    found = {b.member: b for b in member_baselines(runs)}
    assert [m for m, b in found.items() if b.differs] == ["c"]
    assert "DIFFERS" in found["c"].text("p99") and "DIFFERS" not in found["a"].text("p99")
    # apart but within 10% of the pool: noise a 1-3 run baseline cannot tell from a difference
    close = member_baselines([("a", 3.0), ("b", 3.05), ("c", 3.2)])
    assert not any(b.differs for b in close)
    # far but overlapping the others' runs: not called different either
    assert not any(b.differs for b in member_baselines(
        [("a", 3.0), ("a", 5.0), ("b", 3.1), ("c", 4.5), ("c", 4.6)]))
    assert member_baselines([("a", 1.0), ("a", 2.0)]) == []  # one member: nothing to compare



def test_two_members_apart_leave_out_the_one_that_is_not_the_target() -> None:
    # Review finding: with two members the pool's median is their midpoint, so both were
    # "apart and far" and both left out: every baseline run was dropped, and the report said
    # the baseline was never measured (INCONCLUSIVE).
    runs = [("a", 10.0), ("a", 10.2), ("a", 9.9), ("b", 13.0), ("b", 12.8), ("b", 13.1)]
    assert differing(runs, reference="a") == {"b"}
    assert differing(runs, reference="b") == {"a"}
    assert differing(runs) == {"a", "b"}, "without the target, neither can be kept"
    # a third member that agrees with one of them settles it without a reference
    assert differing([*runs, ("c", 10.1), ("c", 10.0)]) == {"b"}

def test_the_report_names_the_member_of_every_trial_and_compares_their_baselines(
        tmp_path: Path) -> None:
    exp = parse_experiment(yaml.safe_dump({**DOC, "study": {**DOC["study"], "trials": 4}}))
    pool = members(tmp_path, exp, 2)
    result, _ = run(tmp_path, pool, exp)
    assert result.completed == 4
    report = build_report(exp, open_existing(exp, f"sqlite:///{tmp_path}/study.db"))
    text = markdown.render(document.build(report, {}))
    section = text.split("## Pool members")[1].split("\n## ")[0]
    for m in pool:
        assert f"| {m.name} |" in section
    assert all(f"@{t.member}" in text for t in report.trials)
    assert {t.member for t in report.trials} == {"copy-0", "copy-1"}


def test_a_member_that_measures_higher_is_named_and_kept_out_of_the_verdict(
        tmp_path: Path) -> None:
    exp = parse_experiment(yaml.safe_dump(DOC))
    pool = members(tmp_path, exp, 3)
    # copy-2 runs on a slower node: everything it measures is 3x higher
    assert exp.target.simulated is not None
    slow = exp.model_copy(update={"target": exp.target.model_copy(update={
        "simulated": exp.target.simulated.model_copy(update={"floor": 0.006})})})
    world = pool[2].backends.target.world  # type: ignore[attr-defined]
    pool[2].backends.target.lock.release()  # type: ignore[attr-defined]
    pool[2] = Member("copy-2", slow, Backends(
        target=simulated.SimulatedService(slow, world, pool[2].clock),
        injector=pool[2].backends.injector,
        source=simulated.SimulatedMetrics(slow, world, seed=2)), pool[2].clock)
    runner = PoolRunner(exp, pool, progress=SilentProgress(), journal=Journal(tmp_path / "j.jsonl"),
                        experiment_hash="t")
    studies = open_for_run(exp, f"sqlite:///{tmp_path}/study.db")
    runner.run(studies, exp.study.trials)
    found = {b.member: b for b in member_baselines(baseline_runs(studies.reference))}
    assert [m for m, b in found.items() if b.differs] == ["copy-2"]
    assert confirm(exp, studies, runner, top=2, repeats=3, seed=1) > 0
    reference = studies.reference.get_trials(states=[TrialState.COMPLETE])
    assert {t.user_attrs["member"] for t in reference
            if t.user_attrs.get("kind") == "confirm"} == {"copy-0"}  # on the target
    # the baseline the verdict compares with: copy-0's and copy-1's runs, never copy-2's
    alike = [t.values[0] for t in reference if t.user_attrs.get("member") in ("copy-0", "copy-1")
             and (t.user_attrs.get("kind") == "baseline"
                  or t.user_attrs.get("candidate") == BASELINE)]
    assert sorted(pooled_values(studies, None)) == sorted(alike)
    assert max(pooled_values(studies, None)) < min(found["copy-2"].values)
    # and every candidate's: its confirmation runs alone (search trials, copy-2's among them,
    # are never a candidate's evidence: the one that chose it is biased)
    search = studies.search.get_trials(states=[TrialState.COMPLETE])
    for t in search:
        assert sorted(pooled_values(studies, t.params)) == sorted(
            u.values[0] for u in reference if u.user_attrs.get("kind") == "confirm"
            and u.user_attrs.get("candidate") != BASELINE
            and u.user_attrs["settings"] == t.params)
    assert applied(pool) == [None, None, None]


def test_a_finite_space_is_measured_once_by_the_pool(tmp_path: Path) -> None:
    doc = {**DOC, "parameters": [{"name": "GOMAXPROCS", "type": "int", "values": [1, 2, 4, 8]}],
           "study": {**DOC["study"], "trials": 12}}
    exp = parse_experiment(yaml.safe_dump(doc))
    pool = members(tmp_path, exp, 3)
    result, records = run(tmp_path, pool, exp)
    search = [r["settings"]["GOMAXPROCS"] for r in records
              if r["kind"] == "search" and r["state"] == "COMPLETE"]
    assert sorted(search) == [1, 2, 4, 8]  # each once: none measured twice side by side
    assert result.stop_reason == "every configuration measured"
    assert applied(pool) == [None, None, None]


def test_validate_says_the_target_is_a_pool_and_refuses_a_shared_namespace(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "pool.yaml"
    good.write_text(yaml.safe_dump(kube_doc([{"namespace": "b"}, {"namespace": "c"}])))
    assert cli.main(["validate", str(good)]) == ExitCode.OK
    assert "kubernetes target in a pool of 3" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(kube_doc([{"namespace": "a"}])))
    assert cli.main(["validate", str(bad)]) == ExitCode.CONFIG
    assert "target.kubernetes.pool[0].namespace: 'a'" in capsys.readouterr().err


class Closes:
    """A member's metric source that records whether it was closed."""

    def __init__(self, inner: simulated.SimulatedMetrics) -> None:
        self.inner, self.closed = inner, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def close(self) -> None:
        self.closed = True


class RefusesCleanup:
    """A member's target whose claim fails (a dead run's leftovers it may not remove)."""

    def __init__(self, inner: simulated.SimulatedService) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def cleanup(self) -> list[str]:
        raise TargetError("the member's leftovers may not be removed")


@pytest.mark.parametrize("fails", ["claim", "design"])
def test_a_pool_night_that_fails_before_its_members_run_closes_every_metric_session(
        tmp_path: Path, fails: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Review finding (2026-12-06): a night that failed before its run closed only the lead's
    # Prometheus session; the other members' stayed open until the process ended.
    exp = parse_experiment(yaml.safe_dump(DOC))
    pool = []
    for i, m in enumerate(members(tmp_path, exp, 3)):
        target = RefusesCleanup(m.backends.target) if fails == "claim" and i == 2 else None
        pool.append(dataclasses.replace(m, backends=dataclasses.replace(
            m.backends, source=Closes(m.backends.source),
            target=target or m.backends.target)))
    if fails == "design":
        def refuse(*args: Any, **kwargs: Any) -> int:
            raise StudyError("the design could not be queued")
        monkeypatch.setattr("autotune.study.pool.enqueue_design", refuse)
    runner = PoolRunner(exp, pool, progress=SilentProgress(),
                        journal=Journal(tmp_path / "trials.jsonl"), experiment_hash="t")
    with pytest.raises((TargetError, StudyError)):
        nightly.run_night(exp, f"sqlite:///{tmp_path}/study.db", runner,
                          nightly.NightOptions(budget=3), history.verdict_record)
    assert [m.backends.source.closed for m in pool] == [True, True, True]  # type: ignore[attr-defined]


def test_after_the_search_the_pool_holds_to_the_leads_deadline(tmp_path: Path) -> None:
    # The confirmation and the drift runs run on the lead after the search: they hold to the
    # lead's study.deadline, each run estimated from the longest trial of any member.
    exp = parse_experiment(yaml.safe_dump({**DOC, "study": {**DOC["study"], "deadline": "1h"}}))
    pool = members(tmp_path, exp, 3)
    pool[2].backends.target.apply = _slower(pool[2])  # type: ignore[method-assign]
    runner = PoolRunner(exp, pool, progress=SilentProgress(), journal=Journal(
        tmp_path / "trials.jsonl"), experiment_hash="t")
    result = runner.run(open_for_run(exp, f"sqlite:///{tmp_path}/study.db"), exp.study.trials)
    assert result.completed == 9
    assert runner.deadline == 3600.0  # the lead's clock read 0 when its search began
    assert runner.clock is pool[0].clock
    measured = result.completed + 3 * 2  # every member's baseline repeats too
    assert len(runner.trial_seconds) == measured
    assert max(runner.trial_seconds) >= 30  # the slow member's trials count


def _slower(m: Member) -> Any:
    apply = m.backends.target.apply

    def slow(env: dict[str, str | None]) -> Live:
        m.clock.sleep(30)  # a slow rollout on this member's clock
        return apply(env)
    return slow
