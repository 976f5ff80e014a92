"""The client layer against the real API server (faults from the proxy in front of it):
credentials, the error vocabulary, retries and watches."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from autotune.clock import SystemClock, wait_until
from autotune.errors import PrerequisiteError, TargetError
from autotune.platforms.kubernetes.client import configuration, connect
from autotune.platforms.kubernetes.errors import ApiError, reraise_as
from autotune.platforms.kubernetes.objects import (
    DEPLOYMENTS,
    PODS,
    Selection,
    label_value,
    one,
    ours,
    selector_of,
)
from tests.kubernetes.conftest import World


def test_missing_kubeconfig_is_a_clear_error(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))
    with pytest.raises(PrerequisiteError, match=r"no Kubernetes credentials.*KUBECONFIG"):
        configuration()
    with pytest.raises(PrerequisiteError, match=r"the kubeconfig .*missing.yaml \(target.kubernetes"
                                                r".kubeconfig, or --kubeconfig\) does not exist"):
        configuration(kubeconfig=str(tmp_path / "missing.yaml"))
    # Review finding: a kubeconfig that is not YAML, or not a mapping, was a traceback (exit 3).
    for name, text in (("broken.yaml", "apiVersion: v1\nclusters: [\n"),
                       ("list.yaml", "- a\n- b\n")):
        (tmp_path / name).write_text(text)
        with pytest.raises(PrerequisiteError, match=rf"cannot use the kubeconfig .*{name}: "):
            configuration(kubeconfig=str(tmp_path / name))


def test_context_override_and_unknown_context(world: World) -> None:
    cfg = configuration(kubeconfig=str(world.kubeconfig), context="other")
    assert cfg.host == world.proxy.url
    with pytest.raises(PrerequisiteError, match=r"context 'nope'"):
        configuration(kubeconfig=str(world.kubeconfig), context="nope")


def test_in_cluster_credentials_are_used_without_a_kubeconfig(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    # No service-account token on this machine: the loader says so, as a PrerequisiteError.
    with pytest.raises(PrerequisiteError, match=r"cannot use the in-cluster service account"):
        configuration()


def test_401_says_credentials(world: World) -> None:
    expired = world.tmp / "expired"
    expired.write_text(world.plane.cp.kubeconfig("not-a-token", server=world.proxy.url))
    with pytest.raises(ApiError, match=r"did not accept our credentials \(401") as e:
        connect(world.clock, kubeconfig=str(expired)).get(DEPLOYMENTS, world.namespace, "api")
    assert e.value.status == 401


def test_403_names_the_verb_and_the_resource(world: World) -> None:
    world.deny("patch", "deployments")
    with pytest.raises(ApiError) as e:
        world.kube().patch(DEPLOYMENTS, world.namespace, "api",
                           {"metadata": {"labels": {"a": "b"}}})
    text = str(e.value)
    assert "forbidden (403): not allowed to patch deployments.apps \"api\"" in text
    assert "Grant the verb 'patch' on deployments.apps" in text
    assert 'cannot patch resource "deployments" in API group "apps"' in text


def test_404_is_none_for_get(world: World) -> None:
    assert world.kube().get(DEPLOYMENTS, world.namespace, "nope") is None


def test_422_carries_the_servers_message(world: World) -> None:
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "api", "env": [{"name": "X", "value": "1",
                                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]}}}}
    with pytest.raises(ApiError, match=r"rejected the request to patch .*\(422\).*may not be "
                                       "specified when `value` is not empty"):
        world.kube().patch(DEPLOYMENTS, world.namespace, "api", patch)


def test_transient_errors_are_retried_then_reported(world: World) -> None:
    kube = world.kube()
    world.proxy.fail("GET", "/deployments/api$", 500, times=2)
    assert kube.get(DEPLOYMENTS, world.namespace, "api") is not None
    world.proxy.fail("GET", "/deployments/api$", 503, times=10, message="etcd is down")
    with pytest.raises(ApiError, match=r"failed to get .*\(503\) after 5 attempts: etcd is down"):
        kube.get(DEPLOYMENTS, world.namespace, "api")
    assert world.clock.offset > 0, "the backoff sleeps on the injected clock"


def test_unreachable_server(world: World) -> None:
    kube = world.kube()
    world.proxy.stop()
    with pytest.raises(ApiError, match=r"cannot reach the Kubernetes API server at http://127"):
        kube.get(DEPLOYMENTS, world.namespace, "api")


def test_slow_response_is_survived(world: World) -> None:
    world.proxy.delay("GET", "/deployments/api$", 0.3)
    started = time.monotonic()
    assert world.kube().get(DEPLOYMENTS, world.namespace, "api") is not None
    assert time.monotonic() - started >= 0.3


def test_reraise_as_keeps_the_message() -> None:
    with pytest.raises(TargetError, match=r"boom") as e, reraise_as(TargetError):
        raise ApiError("boom", 500)
    assert isinstance(e.value.__cause__, ApiError)


def _add_pod_once_watched(world: World) -> threading.Thread:
    """Add pod ``late`` once the waiter watches pods (the proxy saw its watch request), so that
    the pod comes after the list, through the watch; not after a fixed delay, which a busy
    machine may take before the wait even listed."""

    def watched() -> bool:
        return any(r.query.get("watch") == "true" and r.path.endswith("/pods")
                   for r in list(world.proxy.requests))

    def add() -> None:
        if wait_until(SystemClock(), watched, timeout=5, every=0.01):
            world.add_pod("late", {"app": "late"})

    thread = threading.Thread(target=add, daemon=True)
    thread.start()
    return thread


def test_wait_sees_changes_through_the_watch(world: World) -> None:
    world.grant("rbac-load.yaml")  # watching pods (the load generator's permissions)
    kube = world.kube()
    adder = _add_pod_once_watched(world)
    found = kube.wait(Selection(PODS, world.namespace, labels="app=late"),
                      lambda s: s.get("late"), timeout=5)
    adder.join(timeout=5)
    assert found is not None and found["metadata"]["name"] == "late"
    watches = [r for r in world.proxy.requests if r.query.get("watch") == "true"]
    assert watches and watches[0].query["resourceVersion"], "watch from the list's version"


def test_wait_relists_after_410_gone(world: World) -> None:
    world.grant("rbac-load.yaml")  # watching pods (the load generator's permissions)
    kube = world.kube()
    world.proxy.gone_watch("/pods$")
    adder = _add_pod_once_watched(world)
    found = kube.wait(Selection(PODS, world.namespace, labels="app=late"),
                      lambda s: s.get("late"), timeout=5)
    adder.join(timeout=5)
    assert found is not None
    lists = [r for r in world.proxy.requests if r.path.endswith("/pods")
             and r.query.get("watch") != "true"]
    assert len(lists) >= 2, "a 410 must make the waiter list again"


def test_wait_times_out_with_none(world: World) -> None:
    started = time.monotonic()
    assert world.kube().wait(one(DEPLOYMENTS, world.namespace, "api"), lambda s: None, 1) is None
    assert time.monotonic() - started < 3


def test_labels_and_selectors() -> None:
    assert label_value("my_study.v2-") == "my_study.v2"
    assert len(label_value("x" * 100)) == 63
    assert ours("api") == "app.kubernetes.io/managed-by=autotune,autotune/study=api"
    assert ours() == "app.kubernetes.io/managed-by=autotune"
    assert selector_of({"app": "api"}, [{"key": "track", "operator": "In",
                                         "values": ["a", "b"]},
                                        {"key": "canary", "operator": "DoesNotExist"}]) == (
        "app=api,track in (a,b),!canary")


def test_connect_uses_the_kubeconfig(world: World) -> None:
    kube = connect(world.clock, kubeconfig=str(world.kubeconfig))
    assert kube.host == world.proxy.url
    assert kube.get(DEPLOYMENTS, world.namespace, "api") is not None
