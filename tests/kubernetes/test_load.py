"""Issue 9.10: comparable load in a cluster, against the real control plane.
``target.kubernetes.load`` runs autotune's load
generator as a pod in the namespace for every measured candidate; its client-side histogram,
selected by ``{{load_selector}}``, is the objective. End state: no generator pod, no
StressChaos, the env as found."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ExperimentError, NotUndone, StudyError, TargetError
from autotune.experiment import parse_experiment
from autotune.platforms.kubernetes import stack
from autotune.platforms.kubernetes.loadgen import BINARY, load_pods
from autotune.platforms.kubernetes.permissions import CLUSTER_NEEDED, needed
from autotune.study.loop import RunResult
from autotune.study.profiles import capture_pair
from autotune.study.storage import open_for_run
from tests.kubernetes.conftest import (
    ORIGINAL_ENV,
    Plane,
    World,
    deployment_manifest,
    start_world,
)
from tests.kubernetes.fake_prometheus import TOKEN, FakePrometheus
from tests.kubernetes.test_study import run
from tests.support.rbac import assert_used_exactly_granted

LOAD = ('\n    load: {url: "http://api.shop.svc:8080/", rate: 50, image: "example/autotune:0.1", '
        'ready_timeout: 3s}')
CLIENT_P99 = ("\n  client_p99: 'histogram_quantile(0.99, sum by (le) (rate("
              "loadgen_request_duration_seconds_bucket{ {{load_selector}} }[{{window}}])))'")


def _generators(world: World) -> list[dict[str, Any]]:
    return [p for p in world.items("pods")
            if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "load"
            and not p["metadata"].get("deletionTimestamp")]


@pytest.fixture(autouse=True)
def _may_create_pods(world: World) -> None:
    world.grant("rbac-load.yaml")


def test_every_measured_candidate_gets_the_same_load_and_none_is_left(world: World) -> None:
    exp = world.experiment(trials=2, target=LOAD, metrics=CLIENT_P99)
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    assert [r["state"] for r in records] == ["COMPLETE"] * 3
    created = [r.body for r in world.proxy.seen("POST", "/pods$")]
    assert len(created) == len(records), "one generator per measured candidate"
    for record, pod in zip(records, created, strict=True):
        name = pod["metadata"]["name"]
        assert record["live"]["load_pod"] == name
        assert f'pod="{name}"' in record["queries"]["client_p99"]
        assert record["metrics"]["client_p99"] == 0.004
        [container] = pod["spec"]["containers"]
        assert container["command"] == [BINARY]
        assert container["args"][:5] == ["-in-cluster", "-target", "http://api.shop.svc:8080/",
                                         "-rate", "50"]
        # Ends even if nobody deletes it: after one trial's windows, not the trial's whole
        # bound (its rollout, retries; review finding: 31 minutes of load after a kill).
        assert pod["spec"]["activeDeadlineSeconds"] == math.ceil(exp.load_seconds) + 60
        tries = 1 + exp.measure.noise_guard.retries
        assert exp.load_seconds == exp.max_trial_seconds - 10 * tries  # without the rollout
        # preferably not on the candidate's nodes (its CPU would add to their stress)
        term = pod["spec"]["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
        assert term == {"labelSelector": {"matchLabels": {"app": "api"}},
                        "topologyKey": "kubernetes.io/hostname"}
    deleted = [r.path.rsplit("/", 1)[1] for r in world.proxy.seen("DELETE", "/pods/")]
    assert deleted == [p["metadata"]["name"] for p in created]
    assert _generators(world) == []
    world.assert_pristine()


def test_a_lost_answer_to_the_generators_create_leaves_no_second_generator(
        world: World) -> None:
    # The pod was created, its answer lost: the client's retry got 409. That failed the trial
    # and the pod was nobody's to delete: it sent load until its deadline, beside the next
    # trial's own generator (twice the rate in that window).
    exp = world.experiment(trials=1, target=LOAD, metrics=CLIENT_P99)
    world.proxy.fail("POST", "/pods$", 500, after=True)
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    assert [r["state"] for r in records] == ["COMPLETE"] * 2
    assert len(world.proxy.seen("POST", "/pods$")) == 3  # the retried create, then trial 2's
    assert _generators(world) == []
    world.assert_pristine()


def test_a_generator_that_cannot_start_fails_the_trial_with_the_reason(world: World) -> None:
    exp = world.experiment(trials=1, stop_after=1, metrics=CLIENT_P99,
                           target=LOAD.replace("example/autotune:0.1",
                                               "registry.invalid/missing:1.0"))
    _, records = run(world, exp, world.backends(exp))
    assert records[0]["state"] == "FAIL"
    assert re.search(r"the load generator pod autotune-api-test-tload-1-\w+ cannot start: "
                     r"ErrImagePull", records[0]["failure"]), records[0]["failure"]
    assert _generators(world) == []
    world.assert_pristine()


def test_a_dead_runs_generator_is_removed_by_the_next_start_and_by_cleanup(
        world: World) -> None:
    exp = world.experiment(target=LOAD, metrics=CLIENT_P99)
    dead = world.target(exp)
    dead.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})
    world.dies()
    assert len(_generators(world)) == 1
    starting = world.target(exp)  # the next run's start
    said = starting.cleanup()
    assert said[0].startswith(f"load generator pod {world.namespace}/autotune-api-test-tload-1-")
    assert _generators(world) == []
    starting.restore()
    world.assert_pristine()
    # `autotune cleanup --namespace` finds them for any study
    world.target(exp).apply({"GOMAXPROCS": "4", "FORCEGC_INTERVAL_MS": None})
    world.dies()
    done = stack.cleanup_namespace(world.namespace, kubeconfig=str(world.kubeconfig),
                                   clock=world.clock)
    assert any(line.startswith(f"load generator pod {world.namespace}/") for line in done), done
    assert _generators(world) == []
    world.assert_pristine()


def test_without_the_right_to_create_pods_the_run_stops_undone_not_said_otherwise(
        world: World) -> None:
    # Review finding: deploy/rbac-load.yaml not applied (a night runs no validate --cluster):
    # the refused create left the pod "running", every later stop failed on "delete pods", and
    # the run ended NOT UNDONE with the env back and no pod anywhere.
    world.deny("create", "pods")
    world.deny("delete", "pods")
    exp = world.experiment(trials=2, stop_after=2, target=LOAD, metrics=CLIENT_P99)
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, StudyError) and not isinstance(outcome, NotUndone), outcome
    assert [r["state"] for r in records] == ["FAIL", "FAIL"], records
    assert all("forbidden" in r["failure"].lower() for r in records), records
    assert _generators(world) == []
    world.assert_pristine()


def test_validate_names_the_rbac_file_for_creating_pods(world: World) -> None:
    world.deny("create", "pods")
    exp = world.experiment(target=LOAD, metrics=CLIENT_P99)
    [problem] = stack.validate_cluster(exp)
    assert problem.startswith(f"not allowed to create pods in namespace '{world.namespace}'")
    assert problem.endswith("see deploy/rbac-load.yaml")


def test_load_selector_needs_the_generator_and_the_generator_replaces_measure_load(
        world: World) -> None:
    with pytest.raises(ExperimentError, match=r"metrics.client_p99: \{\{load_selector\}\} "
                                              r"selects the load generator's series: it needs "
                                              r"target.kubernetes.load"):
        world.experiment(metrics=CLIENT_P99)
    text = world.experiment_text(trials=1, stop_after=1, metrics=CLIENT_P99,
                                 target=LOAD).replace(
        ", load: {metric: request_rate, tolerance: 0.1}", "")
    assert parse_experiment(text).target.kubernetes is not None
    assert load_pods("api-test") == ("app.kubernetes.io/component=load,"
                                     "app.kubernetes.io/managed-by=autotune,"
                                     "autotune/study=api-test")


def test_with_every_option_on_the_code_uses_exactly_the_tables(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Load generator, schedtrace and captures all on, every optional Role applied: the
    requests autotune sends are exactly the permission tables, no more, no less."""
    world.grant("rbac-schedtrace.yaml", "rbac-capture.yaml")
    world.serve_logs()
    world.serve_pprof(6060)
    world.admin.create(world.path("configmaps"), {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": "api-config"},
                                                  "data": {"LOG_FORMAT": "json"}})
    world.patch("deployments", "api", {"spec": {"template": {"spec": {"containers": [
        {"name": "api", "envFrom": [{"configMapRef": {"name": "api-config"}}]}]}}}})
    world.settled()
    exp = world.experiment(trials=1, stop_after=1, target=LOAD + "\n    pprof_port: 6060",
                           measure=", schedtrace: 100ms, capture: [trace, cpu]",
                           metrics=CLIENT_P99)
    assert stack.validate_cluster(exp) == []
    world.proxy.fail("POST", "/stresschaos$", 500, after=True)  # a lost answer: retry, 409, get
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    assert all(r["state"] == "COMPLETE" for r in records), records
    monkeypatch.chdir(world.tmp)
    studies = open_for_run(exp, f"sqlite:///{world.tmp}/study.db")
    done = capture_pair(exp, studies, world.backends(exp), world.clock, None)
    assert all("files" in c for c in done), done
    world.target(exp).apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})
    world.dies()
    stack.cleanup_namespace(world.namespace, kubeconfig=str(world.kubeconfig),
                            clock=world.clock)
    assert_used_exactly_granted(world.verbs(), (*needed(True, True, True), *CLUSTER_NEEDED))


def test_validate_live_does_not_try_the_generators_series(
        world: World, prometheus: FakePrometheus, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROM_TOKEN", TOKEN)
    prometheus.state.pods = [p["metadata"]["name"] for p in world.pods()]
    exp = world.experiment(prometheus=prometheus.url, token_env="PROM_TOKEN", target=LOAD,
                           metrics=CLIENT_P99)
    problems = stack.validate_live(exp)  # no generator runs outside a trial: nothing to read
    assert len(problems) == 1 and problems[0].startswith("metrics.gc_pause_p99: nan"), problems
    assert not any("loadgen_" in q for q in prometheus.state.seen)


def test_a_generator_that_cannot_be_deleted_never_keeps_the_env_from_coming_back(
        world: World) -> None:

    exp = world.experiment(target=LOAD, metrics=CLIENT_P99)
    target = world.target(exp)
    target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})
    world.deny("delete", "pods")
    with pytest.raises(TargetError, match=r"forbidden.*cannot delete resource \"pods\""):
        target.restore()
    assert world.template_env() == ORIGINAL_ENV and world.annotations() == {}
    assert len(_generators(world)) == 1, "left for cleanup, which says so"
    world.grant("rbac-load.yaml")
    starting = world.target(exp)
    assert starting.cleanup()[0].startswith(f"load generator pod {world.namespace}/")
    starting.restore()
    assert _generators(world) == []
    world.assert_pristine()


# --- issue 15.5: admitted by a namespace that enforces Pod Security and a quota ---------------

QUOTA = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"},
         "spec": {"hard": {"requests.cpu": "8", "requests.memory": "8Gi", "limits.cpu": "16",
                           "limits.memory": "16Gi"}}}


def _restricted_deployment(namespace: str, node: str) -> dict[str, Any]:
    """The service as a restricted namespace admits it: non-root, seccomp, no escalation, no
    capabilities, requests and limits."""
    dep = deployment_manifest(namespace, node)
    spec = dep["spec"]["template"]["spec"]
    spec["securityContext"] = {"runAsNonRoot": True, "runAsUser": 10001,
                               "seccompProfile": {"type": "RuntimeDefault"}}
    for c in spec["containers"]:
        c["securityContext"] = {"allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}}
        c["resources"] = {"requests": {"cpu": "500m", "memory": "64Mi"},
                          "limits": {"cpu": "1", "memory": "128Mi"}}
    return dep


@pytest.fixture
def restricted(plane: Plane, tmp_path: Path) -> Iterator[World]:
    world, stop = start_world(
        plane, tmp_path, rbac=("rbac.yaml", "rbac-load.yaml"), objects=(QUOTA,),
        namespace_labels={"pod-security.kubernetes.io/enforce": "restricted",
                          "pod-security.kubernetes.io/enforce-version": "latest"},
        deployment=_restricted_deployment)
    try:
        yield world
    finally:
        stop()


def test_the_generator_is_admitted_under_pod_security_restricted_and_a_quota(
        restricted: World) -> None:
    world = restricted
    exp = world.experiment(trials=1, metrics=CLIENT_P99, target=LOAD.replace(
        "ready_timeout: 3s}", "ready_timeout: 3s, image_pull_secrets: [registry]}"))
    target = world.target(exp)
    live = target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})
    assert live.details["load_pod"]
    [pod] = _generators(world)
    assert pod["status"]["phase"] == "Running"
    [container] = pod["spec"]["containers"]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "256Mi"}
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    quota = world.get("resourcequotas", "compute")
    assert quota is not None and quota["status"]["used"]["limits.memory"] != "0"
    target.restore()
    world.assert_pristine()


def test_a_request_secret_reaches_the_generator_only_through_the_kubelet(
        restricted: World) -> None:
    # Review finding: the only way to send a key was the URL's query, written into the pod's
    # args (kubectl get pod shows it to whoever may read pods). The Secret is mounted instead:
    # autotune never reads it (its Role has no secrets), and no request it sends holds it.
    world = restricted
    canary = "k3y-CANARY-in-the-secret"
    world.admin.create(world.path("secrets"), {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "api-load"},
        "stringData": {"req": json.dumps({"path": f"/v1/items?api_key={canary}"})}})
    exp = world.experiment(trials=1, metrics=CLIENT_P99, target=LOAD.replace(
        "ready_timeout: 3s}", "ready_timeout: 3s, request_secret: {name: api-load, key: req}}"))
    target = world.target(exp)
    target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})
    [pod] = _generators(world)
    assert pod["status"]["phase"] == "Running", "admitted under restricted, and scheduled"
    [container] = pod["spec"]["containers"]
    assert container["args"][-2:] == ["-request-file", "/etc/autotune-request/request.json"]
    assert container["volumeMounts"] == [{"name": "request", "mountPath": "/etc/autotune-request",
                                          "readOnly": True}]
    [volume] = pod["spec"]["volumes"]
    assert volume["secret"]["secretName"] == "api-load"
    assert volume["secret"]["items"] == [{"key": "req", "path": "request.json"}]
    target.restore()
    world.assert_pristine()
    sent = [r for verb in ("GET", "POST", "PUT", "PATCH", "DELETE")
            for r in world.proxy.seen(verb)]
    assert sent and not any("/secrets" in r.path for r in sent), "autotune reads no Secret"
    # No check that the canary is absent from what autotune sent or wrote: having read no
    # Secret it cannot hold it, so such a check could not fail. What would leak the key (the
    # old query in the pod's args) is what the args, mount and volume assertions exclude.
