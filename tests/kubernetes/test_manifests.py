"""What the repository ships for clusters: the experiment, its Deployment, the StressChaos
template, the CRD copy and deploy/ — validated, and kept consistent with each other and the code."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from autotune import scaffold
from autotune.cli import (
    EXPORT_FORMATS,
    PROMOTE_DIR_VAR,
    PROMOTE_FORMAT_VAR,
    build_parser,
    main,
)
from autotune.experiment import Experiment, load_experiment
from autotune.experiment.durations import parse_duration
from autotune.experiment.models import Burst
from autotune.platforms.kubernetes import stack as cluster
from autotune.platforms.kubernetes.envpatch import cpu_cores
from autotune.platforms.kubernetes.objects import (
    MANAGED_BY_LABEL,
    STUDY_LABEL,
    TRIAL_LABEL,
    PodPlacement,
    object_name,
)
from autotune.platforms.kubernetes.permissions import (
    CAPTURE_NEEDED,
    CLUSTER_NEEDED,
    LOAD_NEEDED,
    NEEDED,
    SCHEDTRACE_NEEDED,
    Permission,
)
from autotune.platforms.kubernetes.stresschaos import CRD_FILE, RECOVER_TIMEOUT, render
from autotune.study.space import to_env
from autotune.study.trial import DEAD_MAN_MARGIN, Backends, measure
from tests.controlplane.chaos_controller import ChaosMesh
from tests.controlplane.cluster import documents
from tests.controlplane.proxy import FaultProxy
from tests.kubernetes.conftest import Plane, StressedMetrics, World
from tests.kubernetes.test_chaos import assert_valid

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSION = kubernetes_validate.latest_version()


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _api() -> Experiment:
    return load_experiment(ROOT / "experiments/api.yaml")[0]


def _deployment() -> dict[str, Any]:
    [dep] = _docs(ROOT / "experiments/api-deployment.yaml")
    return dep


def _api_container() -> dict[str, Any]:
    [container] = [c for c in _deployment()["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "api"]
    return container


def _by_kind(path: Path) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in _docs(path)}


# --- the CRD copy ---------------------------------------------------------------------------

def test_crd_copy_is_pristine() -> None:
    data = (ROOT / "autotune" / CRD_FILE).read_bytes()
    readme = (ROOT / "autotune/data/chaos-mesh/README.md").read_text()
    digest = re.search(r"sha256 ([0-9a-f]{64})", readme)
    assert digest and hashlib.sha256(data).hexdigest() == digest.group(1)


# --- experiments/api.yaml and its Deployment ------------------------------------------------

def test_api_experiment_is_the_seed_experiment() -> None:
    exp = _api()
    spec = exp.target.kubernetes
    assert spec is not None and (spec.namespace, spec.deployment, spec.container) == (
        "shop", "api", "api")
    # The rules `autotune init` follows, for the Deployment's own CPU limit (issue: 32 Ps on one
    # CPU, no GOMAXPROCS=1, no GOGC and no "off" before).
    limit = cpu_cores(_api_container()["resources"]["limits"]["cpu"])
    assert [p.values for p in exp.parameters] == [
        tuple(scaffold.gomaxprocs_values(limit)), scaffold.GOGC_VALUES, scaffold.FORCEGC_VALUES]
    assert [p.env_var for p in exp.parameters] == ["GOMAXPROCS", "GOGC", "FORCEGC_INTERVAL_MS"]
    assert 0 in scaffold.FORCEGC_VALUES and {100, 400} <= set(scaffold.GOGC_VALUES)
    assert (exp.chaos.stress.workers, exp.chaos.stress.load) == (4, 100)
    assert isinstance(exp.chaos.pattern, Burst)
    assert (exp.chaos.pattern.every, exp.chaos.pattern.burst) == (30, 5)
    assert exp.measure.window == 60
    assert exp.prometheus.url == "http://prometheus.monitoring:9090"
    assert exp.goals[0].minimize == "p99_latency" and exp.constraints
    queries = " ".join(exp.metric(m).query for m in exp.metrics)
    for name in ("go_sched_pauses_total_gc_seconds_bucket", "go_cpu_classes_idle_cpu_seconds_total",
                 "go_cpu_classes_total_cpu_seconds_total", "go_sched_latencies_seconds_bucket",
                 "go_gc_cycles_total_gc_cycles_total", "http_request_duration_seconds_bucket"):
        assert name in queries
    assert all("{{selector}}" in exp.metric(m).query and "{{window}}" in exp.metric(m).query
               for m in exp.metrics)


def test_autotune_validate_accepts_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(ROOT / "experiments/api.yaml")]) == 0
    assert "valid (kubernetes target" in capsys.readouterr().out


def test_the_deployment_manifest_is_valid_and_matches_the_experiment() -> None:
    dep = _deployment()
    kubernetes_validate.validate(dep, K8S_VERSION, strict=True)
    spec = _api().target.kubernetes
    assert spec is not None
    assert (dep["metadata"]["namespace"], dep["metadata"]["name"]) == (spec.namespace,
                                                                       spec.deployment)
    [container] = [c for c in dep["spec"]["template"]["spec"]["containers"]
                   if c["name"] == spec.container]
    assert container["resources"]["limits"]["cpu"], "the stress and GOMAXPROCS need a CPU limit"
    tuned = {p.env_var for p in _api().parameters}
    assert not tuned & {e["name"] for e in container.get("env", [])}, "baseline = unset"


@pytest.fixture
def shop(plane: Plane, tmp_path: Path) -> Iterator[World]:
    """The namespaces, the RBAC and the Deployment exactly as the repository ships them:
    deploy/rbac.yaml (ServiceAccount autotune/autotune, its Role in shop) and
    experiments/api-deployment.yaml, applied unchanged to the real API server."""
    admin = plane.cp.admin
    for name in ("shop", "autotune"):
        admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": name}})
    for name in ("shop", "autotune"):
        admin.wait_for(lambda n=name: admin.get(f"/api/v1/namespaces/{n}/serviceaccounts/"
                                                "default"), 30, "the default ServiceAccount")
    docs = [d for d in documents((ROOT / "deploy/rbac.yaml").read_text())]
    for doc in docs:
        admin.apply(doc)
    token = admin.create("/api/v1/namespaces/autotune/serviceaccounts/autotune/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}})["status"]["token"]
    proxy = FaultProxy(plane.cp.url)
    proxy.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(plane.cp.kubeconfig(token, server=proxy.url))
    chaos = ChaosMesh(admin, "shop").start()
    admin.create("/apis/apps/v1/namespaces/shop/deployments", _deployment())
    world = World(plane, "shop", tmp_path, proxy, chaos, token, kubeconfig, node="")
    admin.wait_for(lambda: (world.deployment().get("status") or {}).get("availableReplicas")
                   == 2, 60, "the shipped Deployment's rollout")
    try:
        yield world
    finally:
        chaos.stop()
        proxy.stop()
        for name in ("shop", "autotune"):
            admin.delete(f"/api/v1/namespaces/{name}")
        admin.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/"
                     "autotune-access-review")
        for name in ("shop", "autotune"):  # the next test may create them again
            admin.wait_for(lambda n=name: admin.get(f"/api/v1/namespaces/{n}") is None, 120,
                           f"namespace {name} to go")


def test_the_shipped_experiment_runs_a_trial_against_the_shipped_deployment(
        shop: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(shop.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    exp = _api()
    assert cluster.validate_cluster(exp) == []
    before = shop.deployment()["spec"]["template"]
    built = cluster.build(exp, shop.tmp / "results", shop.clock)
    backends = Backends(built.target, built.injector, StressedMetrics(shop))
    record: dict[str, Any] = {}
    env = to_env(exp, exp.baseline_settings())
    metrics = measure(exp, backends, env, clock=shop.clock, record=record,
                      labels={TRIAL_LABEL: "0"})
    assert set(metrics) == set(exp.metrics)
    assert len(record["injections"]) == 2  # a 60s window, a burst every 30s
    backends.target.restore()
    for created in shop.created_chaos():
        assert_valid(created)
    assert shop.items("stresschaos") == [] and shop.chaos.stressed_pods() == []
    after = shop.deployment()
    assert after["spec"]["template"] == before, "the shipped Deployment, as it was"
    assert "autotune/original-env" not in (after["metadata"].get("annotations") or {})


# --- chaos/ --------------------------------------------------------------------------------

def test_chaos_template_is_what_the_injector_renders() -> None:
    [shipped] = _docs(ROOT / "chaos/stresschaos.yaml")
    exp, dep = _api(), _deployment()
    assert isinstance(exp.chaos.pattern, Burst)
    name = object_name(exp.name, "12", shipped["metadata"]["name"].rsplit("-", 1)[1])
    rendered = render(
        name=name, stress=exp.chaos.stress, duration=exp.chaos.pattern.burst + DEAD_MAN_MARGIN,
        placement=PodPlacement(namespace="shop", container="api", pods=("x",),
                               pod_labels=dep["spec"]["selector"]["matchLabels"]),
        labels={MANAGED_BY_LABEL: "autotune", STUDY_LABEL: exp.name, TRIAL_LABEL: "12"})
    assert shipped == rendered
    assert_valid(shipped)


# --- deploy/ -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["rbac.yaml", "rbac-schedtrace.yaml", "rbac-capture.yaml",
                                  "rbac-load.yaml", "cronjob.yaml",
                                  "postgres-secret.example.yaml"])
def test_deploy_manifests_are_valid_kubernetes(name: str) -> None:
    docs = _docs(ROOT / "deploy" / name)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def _daily_interval(schedule: str) -> int:
    minute, hour, dom, month, dow = schedule.split()
    assert minute.isdigit() and hour.isdigit() and (dom, month, dow) == ("*", "*", "*"), (
        "only a daily schedule is checked here; extend this test with the new schedule")
    return 24 * 3600


def test_cronjob_cannot_overlap_and_stops_after_autotune() -> None:
    docs = _by_kind(ROOT / "deploy/cronjob.yaml")
    cron = docs["CronJob"]["spec"]
    job = cron["jobTemplate"]["spec"]
    pod = job["template"]["spec"]
    interval = _daily_interval(cron["schedule"])
    assert cron["concurrencyPolicy"] == "Forbid"
    assert cron["startingDeadlineSeconds"] < interval
    assert job["activeDeadlineSeconds"] < interval
    exp = _api()
    assert exp.study.deadline is not None and exp.target.kubernetes is not None
    assert exp.study.deadline + exp.max_trial_seconds / (
        1 + exp.measure.noise_guard.retries) < job["activeDeadlineSeconds"], (
        "autotune must stop starting trials before Kubernetes stops the Job")
    # The worst stop: the trial's removal of a stuck StressChaos times out, the run's cleanup
    # waits for it again, then the restore's rollout.
    assert pod["terminationGracePeriodSeconds"] > (2 * RECOVER_TIMEOUT
                                                    + exp.target.kubernetes.rollout_timeout), (
        "SIGTERM must leave time to remove the stress and restore the env (one rollout)")
    [container] = pod["containers"]
    storage = {e["name"]: e for e in container["env"]}["AUTOTUNE_STORAGE"]
    assert storage["valueFrom"]["secretKeyRef"]["optional"] is True
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert container["args"][1].startswith(mounts["experiment"] + "/")
    assert container["workingDir"] == mounts["data"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
              if "persistentVolumeClaim" in v]
    assert claims == [docs["PersistentVolumeClaim"]["metadata"]["name"]]
    rbac = _by_kind(ROOT / "deploy/rbac.yaml")
    assert pod["serviceAccountName"] == rbac["ServiceAccount"]["metadata"]["name"]


def test_cronjob_runs_autotune_itself_as_pid1() -> None:
    """The kubelet signals a container's PID 1 only, and a PID 1 receives only the signals it
    handles (pid_namespaces(7)): a shell there (none handles SIGTERM) would drop the SIGTERM
    that lets autotune restore the target. tests/faults/test_cronjob_sigterm.py runs this very
    command line as PID 1 of a PID namespace and signals it."""
    pod = _by_kind(ROOT / "deploy/cronjob.yaml")["CronJob"]["spec"]["jobTemplate"]["spec"][
        "template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["autotune"], "exec autotune: no shell, no wrapper"
    args = build_parser().parse_args(container["args"])
    assert (args.command, args.fail_on_drift, args.plain) == ("nightly", True, True)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[PROMOTE_DIR_VAR].startswith(container["workingDir"] + "/"), "on the PVC"
    assert env[PROMOTE_FORMAT_VAR] in EXPORT_FORMATS
    # The image's entrypoint is exec form too (a shell form would make /bin/sh PID 1 again).
    assert 'ENTRYPOINT ["autotune"]' in (ROOT / "deploy/Dockerfile").read_text()


def test_rbac_grants_exactly_what_a_run_needs() -> None:
    docs = _by_kind(ROOT / "deploy/rbac.yaml")
    granted = {(verb, group, resource)
               for rule in docs["Role"]["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    needed = {(p.verb, p.kind.group, p.kind.plural) for p in NEEDED}
    assert granted == needed, "deploy/rbac.yaml grants exactly the table's verbs"
    assert not any("*" in str(rule) for rule in docs["Role"]["rules"])
    assert docs["ClusterRole"]["rules"] == [{"apiGroups": [p.kind.group],
                                             "resources": [p.kind.plural],
                                             "verbs": [p.verb]} for p in CLUSTER_NEEDED]
    sa = docs["ServiceAccount"]["metadata"]
    for binding in ("RoleBinding", "ClusterRoleBinding"):
        [subject] = docs[binding]["subjects"]
        assert (subject["name"], subject["namespace"]) == (sa["name"], sa["namespace"])
    spec = _api().target.kubernetes
    assert spec is not None
    assert docs["Role"]["metadata"]["namespace"] == spec.namespace


@pytest.mark.parametrize("table", [SCHEDTRACE_NEEDED, CAPTURE_NEEDED, LOAD_NEEDED])
def test_each_optional_rbac_file_grants_exactly_its_table(table: tuple[Permission, ...]) -> None:
    [path] = {p.granted_in for p in table}
    docs = _by_kind(ROOT / path)
    granted = {(verb, group, resource)
               for rule in docs["Role"]["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert granted == {(p.verb, p.kind.group, p.kind.plural) for p in table}
    base = _by_kind(ROOT / "deploy/rbac.yaml")
    [subject] = docs["RoleBinding"]["subjects"]
    sa = base["ServiceAccount"]["metadata"]
    assert (subject["name"], subject["namespace"]) == (sa["name"], sa["namespace"])
    assert docs["RoleBinding"]["roleRef"]["name"] == docs["Role"]["metadata"]["name"]
    assert docs["Role"]["metadata"]["namespace"] == base["Role"]["metadata"]["namespace"]


def test_the_image_ships_the_load_generator_the_pod_runs() -> None:
    from autotune.platforms.kubernetes.loadgen import BINARY
    text = (ROOT / "deploy/Dockerfile").read_text()
    assert re.search(r"go build .* -o /out/autotune-loadgen \./cmd/loadgen$", text, re.M)
    assert f"COPY --from=loadgen /out/autotune-loadgen {BINARY}" in text


def test_dockerfile_runs_autotune_as_non_root() -> None:
    text = (ROOT / "deploy/Dockerfile").read_text()
    assert re.search(r"^USER 10001$", text, re.M)
    assert 'ENTRYPOINT ["autotune"]' in text
    assert "COPY autotune ./autotune" in text, "package data (the CRD) ships with the code"
    cron = _by_kind(ROOT / "deploy/cronjob.yaml")["CronJob"]["spec"]
    security = cron["jobTemplate"]["spec"]["template"]["spec"]["securityContext"]
    assert security["runAsUser"] == 10001


def test_the_monitors_scrape_the_example_deployment_often_enough() -> None:
    """deploy/monitoring.yaml: the PodMonitor/ServiceMonitor select the example's pods by its
    labels and port name, in its namespace, at an interval the example's window allows."""
    monitors = {d["kind"]: d for d in _docs(ROOT / "deploy/monitoring.yaml")
                if d["metadata"]["name"] == "api"}
    assert set(monitors) == {"PodMonitor", "ServiceMonitor"}
    dep, exp = _deployment(), _api()
    labels = dep["spec"]["template"]["metadata"]["labels"]
    ports = {p["name"] for c in dep["spec"]["template"]["spec"]["containers"]
             for p in c.get("ports", [])}
    assert exp.target.kubernetes is not None
    for kind, endpoints in (("PodMonitor", "podMetricsEndpoints"),
                            ("ServiceMonitor", "endpoints")):
        monitor = monitors[kind]
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["namespace"] == exp.target.kubernetes.namespace
        assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
        [endpoint] = monitor["spec"][endpoints]
        assert endpoint["port"] in ports
        assert not endpoint.get("relabelings"), "namespace and pod labels must stay"
        assert 4 * parse_duration(endpoint["interval"]) <= exp.measure.window


def test_the_load_generators_pods_are_scraped_by_a_podmonitor() -> None:
    """Issue 15.5: with the Prometheus Operator nothing reads the prometheus.io annotations;
    deploy/monitoring.yaml selects the generator's pods by the labels the code gives them, on
    the port it names, often enough for the example's window."""
    from autotune.experiment.models import ClusterLoad
    from autotune.platforms.kubernetes.loadgen import manifest

    [monitor] = [d for d in _docs(ROOT / "deploy/monitoring.yaml")
                 if d["metadata"]["name"] == "autotune-load"]
    spec = ClusterLoad(url="http://api.shop.svc:8080/", rate=100, image="x")
    pod = manifest(spec, namespace="shop", name="g", study="s", seconds=60)
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    [container] = pod["spec"]["containers"]
    assert endpoint["port"] in {p["name"] for p in container["ports"]}
    assert monitor["metadata"]["namespace"] == "shop"
    assert 4 * parse_duration(endpoint["interval"]) <= _api().measure.window
