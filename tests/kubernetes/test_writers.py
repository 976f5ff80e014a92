"""Issue 15.8 and 15.9: what besides autotune sets the tuned variables, on the real API server.

- envFrom: env overrides envFrom (kubelet makeEnvironmentVariables), so deleting a variable's
  env entry for the "unset" baseline leaves a ConfigMap's value in force;
- a GitOps controller (Argo CD, Flux) keeps the Deployment as declared and reverts candidates:
  here a second writer through the real API, server-side apply as Flux's kustomize-controller.

Both are reported by ``validate --cluster`` and refused by ``run`` (before anything changes)
unless ``target.kubernetes.allow_external_writers: true``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import TargetError
from autotune.platforms.kubernetes import stack
from autotune.study.loop import RunResult
from tests.kubernetes.conftest import (
    ORIGINAL_ENV,
    Plane,
    World,
    deployment_manifest,
    start_world,
)
from tests.kubernetes.test_study import run

ALLOW = "\n    allow_external_writers: true"


def _configmap(data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "api-config"},
            "data": data}


def _world_with_env_from(plane: Plane, tmp: Path, source: dict[str, Any],
                         objects: tuple[dict[str, Any], ...] = ()) -> tuple[World, Any]:
    def deployment(namespace: str, node: str) -> dict[str, Any]:
        dep = deployment_manifest(namespace, node)
        dep["spec"]["template"]["spec"]["containers"][0]["envFrom"] = [source]
        return dep

    return start_world(plane, tmp, objects=objects, deployment=deployment)


@pytest.fixture
def configmap_sets_gomaxprocs(plane: Plane, tmp_path: Path) -> Iterator[World]:
    """The baseline leaves GOMAXPROCS unset; the ConfigMap in envFrom sets it."""
    world, stop = _world_with_env_from(
        plane, tmp_path, {"configMapRef": {"name": "api-config"}},
        (_configmap({"GOMAXPROCS": "4", "LOG_FORMAT": "json"}),))
    # The baseline runs without GOMAXPROCS in env: the pods then get the ConfigMap's value.
    world.set_env([{"name": "LOG_LEVEL", "value": "info"}])
    world.settled()
    try:
        yield world
    finally:
        stop()


def test_a_configmap_in_envfrom_setting_a_tuned_variable_is_refused(
        configmap_sets_gomaxprocs: World) -> None:
    world = configmap_sets_gomaxprocs
    [problem] = stack.validate_cluster(world.experiment())
    assert re.search(r"ConfigMap api-config \(envFrom\) sets GOMAXPROCS: removing the env entry "
                     r".*leaves the ConfigMap's value in force", problem), problem
    assert "allow_external_writers: true" in problem
    before = world.deployment()
    with pytest.raises(TargetError, match=r"ConfigMap api-config \(envFrom\) sets GOMAXPROCS"):
        stack.build(world.experiment(), world.tmp / "results", world.clock)
    assert world.deployment()["metadata"]["generation"] == before["metadata"]["generation"]
    # the user who knows better says so: the run may start
    exp = world.experiment(target=ALLOW)
    warnings: list[str] = []
    assert stack.validate_cluster(exp, warnings=warnings) == []
    assert any("sets GOMAXPROCS" in w for w in warnings)


def test_a_configmap_that_sets_no_tuned_variable_is_fine(plane: Plane, tmp_path: Path) -> None:
    world, stop = _world_with_env_from(
        plane, tmp_path, {"configMapRef": {"name": "api-config"}, "prefix": "APP_"},
        (_configmap({"GOMAXPROCS": "4"}),))  # becomes APP_GOMAXPROCS: not ours
    try:
        assert stack.validate_cluster(world.experiment()) == []
    finally:
        stop()


def test_a_secret_in_envfrom_may_set_anything(plane: Plane, tmp_path: Path) -> None:
    world, stop = _world_with_env_from(plane, tmp_path,
                                       {"secretRef": {"name": "api-secret", "optional": True}})
    try:
        [problem] = stack.validate_cluster(world.experiment())
        assert "Secret api-secret (envFrom) may set GOMAXPROCS, FORCEGC_INTERVAL_MS" in problem
        assert "does not read Secrets" in problem
    finally:
        stop()


# --- GitOps -----------------------------------------------------------------------------------

def test_an_argo_cd_application_is_named(world: World) -> None:
    world.patch("deployments", "api", {"metadata": {"annotations": {
        "argocd.argoproj.io/tracking-id": f"shop-api:apps/Deployment:{world.namespace}/api"}}},
        "merge")
    [problem] = stack.validate_cluster(world.experiment())
    assert problem.startswith(f"Deployment {world.namespace}/api: Argo CD application shop-api "
                              "(annotation argocd.argoproj.io/tracking-id)")
    assert "argocd app set <app> --sync-policy none" in problem


class Reverter:
    """Flux's kustomize-controller as the cluster sees it: it server-side applies the
    Deployment as declared (the original env) whenever it differs."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.reverts = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def declared(self) -> dict[str, Any]:
        dep = deployment_manifest(self.world.namespace, self.world.node)
        dep["metadata"].pop("labels")
        return dep

    def apply(self) -> None:
        self.world.admin.patch(self.world.path("deployments", "api"), self.declared(), "apply",
                               manager="kustomize-controller")

    def start(self) -> Reverter:
        self.apply()  # it owns the env from now on, as after its first reconciliation
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stopped.wait(0.2):
            if self.world.template_env() != ORIGINAL_ENV:
                self.apply()
                self.reverts += 1

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)


def test_a_controller_that_owns_the_env_is_refused_and_its_reverts_are_discarded(
        world: World) -> None:
    reverter = Reverter(world).start()
    try:
        [problem] = stack.validate_cluster(world.experiment())
        assert ("Flux (kustomize-controller) (field manager 'kustomize-controller') owns the "
                "env of container 'api'") in problem, problem
        with pytest.raises(TargetError, match="kustomize-controller"):
            stack.build(world.experiment(), world.tmp / "results", world.clock)
        # allowed anyway: every window in which it reverted the candidate is discarded, named
        exp = world.experiment(trials=2, stop_after=1, target=ALLOW)
        outcome, records = run(world, exp, world.backends(exp))
        assert not isinstance(outcome, RunResult) or outcome.failed_this_run, outcome
        failed = [r for r in records if r["state"] == "FAIL"]
        # The writers named are every manager whose entry changed the env field lately: the
        # controller, and sometimes also the client that applied the candidate.
        assert failed and any(re.search(r"changed by [^(]*kustomize-controller[^(]* during "
                                        r"the measurement|do not run the candidate env",
                                        r["failure"]) for r in failed), [r["failure"]
                                                                          for r in failed]
        assert reverter.reverts > 0
    finally:
        reverter.stop()
    world.assert_pristine()
