"""Issue 15.10: the rollout wait is ``kubectl rollout status``'s (kubectl
polymorphichelpers/rollout_status.go: the Deployment's counters and observedGeneration), not
"every old pod gone and exactly N pods", on the real controllers: old pods that linger
Terminating and an autoscaler that moves the replica count between two waits do not turn a
complete rollout into a timeout and a roll-back. The window measures the Ready pods of the new
ReplicaSet at its start, and the candidate records what it did not measure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kubernetes.conftest import (
    ORIGINAL_ENV,
    Plane,
    World,
    deployment_manifest,
    start_world,
)

CANDIDATE = {"GOMAXPROCS": "4", "FORCEGC_INTERVAL_MS": "500"}


@pytest.fixture
def lingering(plane: Plane, tmp_path: Path) -> Iterator[World]:
    """Deleted pods stay Terminating for 2 minutes (a long preStop hook, a NotReady node)."""
    def deployment(namespace: str, node: str) -> dict[str, Any]:
        return deployment_manifest(namespace, node, annotations={"autotune.test/linger": "120s"})

    world, stop = start_world(plane, tmp_path, deployment=deployment)
    try:
        yield world
    finally:
        stop()


def test_old_pods_that_linger_terminating_do_not_hold_the_rollout_up(lingering: World) -> None:
    world = lingering
    old = {p["metadata"]["name"] for p in world.pods()}
    target = world.target(world.experiment(rollout_timeout="20s"))
    live = target.apply(CANDIDATE)
    assert set(live.pods).isdisjoint(old)
    terminating = set(live.details["terminating_pods"])
    assert terminating and terminating <= old, live.details
    assert all(p["metadata"].get("deletionTimestamp") for p in world.pods(terminating=True)
               if p["metadata"]["name"] in terminating), "they are still there, Terminating"
    target.restore()
    assert world.template_env() == ORIGINAL_ENV and world.annotations() == {}


def test_an_autoscaler_between_the_two_waits_does_not_time_the_rollout_out(
        world: World) -> None:
    """The counters say complete; right then an HPA scales to 3 and the new pod cannot start
    (no room on the node): the two Ready pods are measured, the third is not waited for."""
    def scale_up() -> None:
        world.cordon()
        world.scale(3)
        world.admin.wait_for(lambda: len(world.pods()) == 3, 30, "the third pod")

    world.proxy.on("GET", "/replicasets$", scale_up)
    target = world.target(world.experiment(rollout_timeout="10s"))
    live = target.apply(CANDIDATE)
    assert len(live.pods) == 2 and live.details["replicas"] in (2, 3)
    assert all(p["status"]["phase"] == "Running" for p in world.pods()
               if p["metadata"]["name"] in live.pods)
    world.cordon(False)
    target.restore()
    world.scale(2)
    world.assert_pristine()
