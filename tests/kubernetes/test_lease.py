"""Issue 15.7: the run Lease against the real API server, with answers lost on the way back.

The client retries a POST or PUT whose answer was a 5xx or never came; the write may have
happened. The retry then meets 409 (AlreadyExists after a create, a stale resourceVersion after
an update), and a Lease that holds our own ``holderIdentity`` is ours, not another run's.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import optuna
import pytest

from autotune.errors import AutotuneError, TargetError
from autotune.progress import SilentProgress
from autotune.report import history
from autotune.study import nightly
from autotune.study.journal import Journal
from autotune.study.loop import StudyRunner
from tests.kubernetes.conftest import World


def test_a_lost_create_answer_is_our_own_lease(world: World) -> None:
    target = world.target()
    assert target.lease is not None
    world.proxy.fail("POST", "/leases$", 500, after=True)  # created, the answer lost
    target.lease.acquire()
    assert target.lease.held
    [lease] = world.items("leases")
    assert lease["spec"]["holderIdentity"] == target.lease.holder
    assert len(world.proxy.seen("POST", "/leases$")) == 2, "the create was retried"
    target.lease.release()
    assert world.items("leases") == []


@pytest.mark.parametrize("status", [500, None])
def test_a_lost_renewal_answer_is_our_own_renewal(world: World, status: int | None) -> None:
    target = world.target()
    assert target.lease is not None
    target.lease.acquire()
    world.proxy.fail("PUT", "/leases/", status, after=True)  # renewed, the answer lost
    world.clock.sleep(5)
    target.lease.acquire()  # the renewal of the next trial
    [lease] = world.items("leases")
    assert lease["spec"]["holderIdentity"] == target.lease.holder
    assert lease["spec"]["leaseTransitions"] == 0, "no takeover: it was ours all along"
    target.lease.release()


def test_another_runs_lease_still_stops_us(world: World) -> None:
    other, ours = world.target(), world.target()
    assert other.lease is not None and ours.lease is not None
    other.lease.holder = "autotune-api-28912345-abcde pid 1 study api-test"
    other.lease.acquire()
    world.proxy.fail("POST", "/leases$", 500)
    with pytest.raises(TargetError, match="another autotune run holds"):
        ours.lease.acquire()
    other.lease.release()


def test_releasing_never_deletes_a_lease_another_run_took_over_meanwhile(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # Review finding: release read the Lease, then deleted it unconditionally. Our Lease
    # expired (a stalled run), another run took it over between our read and our delete: the
    # delete removed the new holder's Lease, and a third run could then start on the same
    # Deployment. The read is played stale here: the version from before the takeover.
    ours, other = world.target(), world.target()
    assert ours.lease is not None and other.lease is not None
    other.lease.holder = "autotune-api-28912345-abcde pid 1 study api-test"
    ours.lease.acquire()
    [read_before] = world.items("leases")
    world.age_leases(3600)  # ours expires
    other.lease.acquire()  # and is taken over
    monkeypatch.setattr(ours.lease.kube, "get", lambda *_: read_before)
    ours.lease.release()
    [lease] = world.items("leases")
    assert lease["spec"]["holderIdentity"] == other.lease.holder
    monkeypatch.undo()
    other.lease.release()
    assert world.items("leases") == []


def test_a_holder_whose_clock_is_behind_is_not_taken_over(world: World) -> None:
    # Item left from the reliability review: renewTime was written by the holder's clock and
    # judged by the taker's. A holder on a host whose clock runs behind by more than the Lease's
    # duration (a laptop after a suspend, an unsynced VM) looked expired while it ran, and a
    # second run (the CronJob) took the Deployment over. Both now time it by the API server.
    behind, nightly = world.target(), world.target()
    assert behind.lease is not None and nightly.lease is not None
    behind.lease.holder = "laptop pid 4242 study api-test"
    skew = behind.lease.duration + 600.0
    behind.lease.kube.clock = _Skewed(world.clock, -skew)
    behind.lease.acquire()
    with pytest.raises(TargetError, match="another autotune run holds"):
        nightly.lease.acquire()
    [lease] = world.items("leases")
    assert lease["spec"]["holderIdentity"] == behind.lease.holder
    renewed = dt.datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
    assert abs(renewed.timestamp() - time.time()) < 5, "renewed by the API server's clock"
    behind.lease.release()
    assert world.items("leases") == []


class _Skewed:
    """A host's clock ``offset`` seconds off (its monotonic time is not: it has no epoch)."""

    def __init__(self, inner: Any, offset: float) -> None:
        self.inner, self.offset = inner, offset

    def now(self) -> float:
        return float(self.inner.now()) + self.offset

    def monotonic(self) -> float:
        return float(self.inner.monotonic())

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def test_a_run_that_lost_its_lease_leaves_the_deployment_to_the_run_that_took_it(
        world: World) -> None:
    # Review finding: the Lease was renewed only when a trial applied, never before the
    # restore. A run stalled past its Lease (two long rollouts) was taken over by the CronJob;
    # the stalled run's restore then patched the Deployment under it and removed the
    # annotation the new run had written: the new run's later restore had nothing to put back,
    # and its candidate stayed on the Deployment.
    original = world.template_env()
    stalled, nightly = world.target(), world.target()
    assert stalled.lease is not None and nightly.lease is not None
    nightly.lease.holder = "autotune-api-28912345-abcde pid 1 study api-test"
    stalled.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "500"})
    world.age_leases(3600)  # the stalled run's Lease expires
    nightly.cleanup()  # takes it over, restores what the stalled run left
    nightly.apply({"GOMAXPROCS": "4", "FORCEGC_INTERVAL_MS": None})
    saved, candidate = world.annotations(), world.template_env()
    assert saved, "the nightly run saved the original"
    with pytest.raises(TargetError, match="this run's Lease expired and another run took"):
        stalled.restore()
    assert not stalled.lease.held, "its stress guard no longer claims the StressChaos"
    assert world.annotations() == saved and world.template_env() == candidate
    nightly.restore()
    assert world.template_env() == original and world.annotations() == {}
    assert world.items("leases") == []


def test_a_second_night_stops_at_the_lease_before_it_writes_to_the_study(world: World) -> None:
    # Kubernetes review finding: a night opened the study, queued its baseline repeats and
    # saved its record before the Lease was taken. A second run (a manual `autotune run`
    # while the CronJob's night ran) then left three baseline trials queued in the first
    # run's study, which its confirmation measured, and a failed night in its history.
    other = world.target()
    assert other.lease is not None
    other.lease.holder = "autotune-api-28912345-abcde pid 1 study api-test"
    other.lease.acquire()
    exp = world.experiment(trials=2)
    url = f"sqlite:///{world.tmp}/study.db"
    runner = StudyRunner(exp, world.backends(exp), clock=world.clock, progress=SilentProgress(),
                         journal=Journal(world.tmp / "trials.jsonl"), experiment_hash="test")
    with pytest.raises(AutotuneError, match="another autotune run holds"):
        nightly.run_night(exp, url, runner, nightly.NightOptions(budget=2),
                          history.verdict_record)
    assert optuna.study.get_all_study_names(storage=url) == []
    other.lease.release()
    world.assert_pristine()


def test_a_night_whose_claim_fails_half_way_gives_the_lease_back(world: World) -> None:
    # Review finding: the claim took the Lease (the target's cleanup), then the injector's
    # cleanup was refused; the night failed with the Lease held, and the operator's rerun after
    # the fix was refused as "another autotune run holds" until it expired.
    world.deny("list", "stresschaos")
    exp = world.experiment(trials=2)
    runner = StudyRunner(exp, world.backends(exp), clock=world.clock, progress=SilentProgress(),
                         journal=Journal(world.tmp / "trials.jsonl"), experiment_hash="test")
    with pytest.raises(AutotuneError, match="stresschaos"):
        nightly.run_night(exp, f"sqlite:///{world.tmp}/study.db", runner,
                          nightly.NightOptions(budget=2), history.verdict_record)
    assert world.items("leases") == []
