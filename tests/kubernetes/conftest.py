"""The Kubernetes suite's world: a real control plane (etcd, kube-apiserver, the controller
manager, the scheduler; kwok for the kubelets), one per test package, and per test a namespace
of its own with:

- the ``api`` Deployment (containers ``api`` and ``sidecar``, 2 replicas) rolled out by the real
  Deployment and ReplicaSet controllers onto a kwok node of its own, which a test may cordon;
- autotune's identity: the ServiceAccount, Role and RoleBinding of deploy/rbac.yaml (and the
  optional rbac-*.yaml a test asks for) applied as they are, with only the namespaces rewritten,
  and a real token for it (TokenRequest): every request autotune makes is authorized by RBAC;
- a fault proxy between autotune and the API server (tests/controlplane/proxy.py), which also
  records every request;
- Chaos Mesh's controller simulated against the real API (tests/controlplane/chaos_controller.py)
  and its admission webhooks served for real.

``AUTOTUNE_CONTROLPLANE=0`` skips the suite on a machine that cannot build the control plane
(never in CI, where a skip fails the run).
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.experiment import Experiment, parse_experiment
from autotune.live import Live, Window
from autotune.metrics.base import Reading, Unavailable
from autotune.platforms.kubernetes.client import Kube, connect
from autotune.platforms.kubernetes.deployment import KubernetesTarget, StressGuard
from autotune.platforms.kubernetes.lease import RunLease
from autotune.platforms.kubernetes.loadgen import LoadGenerator
from autotune.platforms.kubernetes.stresschaos import ChaosMeshInjector
from autotune.study.interrupts import Interrupted
from autotune.study.trial import Backends
from tests.controlplane.chaos_controller import ChaosMesh, Webhooks
from tests.controlplane.cluster import (
    REPO,
    Admin,
    ApiFailure,
    ControlPlane,
    binaries,
    build,
    collection_path,
    documents,
)
from tests.controlplane.podnet import POD_IP, PprofServer, add_address, remove_address
from tests.controlplane.proxy import FaultProxy
from tests.controlplane.runtime import Logs
from tests.kubernetes.fake_prometheus import FakePrometheus

DEPLOYMENT, CONTAINER = "api", "api"
ORIGINAL_ENV = [{"name": "LOG_LEVEL", "value": "info"}, {"name": "GOMAXPROCS", "value": "8"}]
Obj = dict[str, Any]

EXPERIMENT = """
name: api-test
target:
  kubernetes:
    namespace: {namespace}
    deployment: api
    container: api
    kubeconfig: {kubeconfig}
    rollout_timeout: {rollout_timeout}{target}
parameters:
  - {{name: GOMAXPROCS, type: int, values: [2, 4, 8, 16]}}
  - {{name: forcegc_interval_ms, env: FORCEGC_INTERVAL_MS, type: int, values: [500, 2000]}}
baseline: {{repeats: 1, params: {{GOMAXPROCS: null, forcegc_interval_ms: null}}}}
chaos:
  stress: {{workers: 4, load: 100}}
  pattern: {pattern}
prometheus: {{url: "{prometheus}", scrape_interval: 0.1s, token_env: {token_env}}}
measure: {{warmup: 1s, window: 4s, load: {{metric: request_rate, tolerance: 0.1}}{measure}}}
metrics:{metrics}
  request_rate: >-
    sum(rate(http_request_duration_seconds_count{{ {{{{selector}}}} }}[{{{{window}}}}]))
  p99_latency: >-
    histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{{
    {{{{selector}}}} }}[{{{{window}}}}])))
  gc_pause_p99: >-
    histogram_quantile(0.99, sum by (le) (rate(go_sched_pauses_total_gc_seconds_bucket{{
    {{{{selector}}}} }}[{{{{window}}}}])))
objective: {{minimize: p99_latency}}
constraints: ['gc_pause_p99 <= 0.5']
study: {{trials: {trials}, seed: 3, stop_after_failures: {stop_after}}}
"""


class FastClock:
    """Real time for waiting on the API server; ``sleep`` fast-forwards instead.

    Warm-up and measurement windows take no time, while watches and their deadlines still run
    against the real controllers. The experiments' windows (4 s, bursts of 1 s every 2 s) are
    long next to what the controllers take in real time, so every burst happens as planned.
    """

    def __init__(self) -> None:
        self.offset = 0.0
        self.on_sleep: Callable[[float], None] | None = None
        self.ticks: list[Callable[[], None]] = []
        """Called on every sleep before ``on_sleep``: what happens in the cluster as the
        clock advances (the containers' logs)."""

    def now(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            for tick in self.ticks:  # what happened up to now (new pods start now)
                tick()
            self.offset += seconds
            for tick in self.ticks:  # and during the sleep
                tick()
            if self.on_sleep is not None:
                self.on_sleep(seconds)


# --- the control plane, once per package ------------------------------------------------------

@dataclass
class Plane:
    cp: ControlPlane
    hooks: Webhooks
    pod_ip: bool = False
    """Whether podnet.POD_IP is on the loopback interface (root): pods/proxy can reach it."""


@pytest.fixture(scope="package")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    yield from start_plane(tmp_path_factory)


def start_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    """The control plane of one test package (tests/kubernetes, tests/contract), stopped with
    it: it never runs next to the local stack's measurements."""
    if os.environ.get("AUTOTUNE_CONTROLPLANE") == "0":
        if os.environ.get("CI"):
            pytest.fail("AUTOTUNE_CONTROLPLANE=0 in CI: the Kubernetes suite must run")
        pytest.skip("AUTOTUNE_CONTROLPLANE=0: the Kubernetes suite needs the test control plane")
    bins = binaries() or build()
    cp = ControlPlane(bins, tmp_path_factory.mktemp("controlplane")).start()
    hooks = Webhooks(cp.workdir)
    pod_ip = add_address()
    try:
        hooks.start(cp.admin)
        cp.admin.apply(_cluster_role())
        yield Plane(cp, hooks, pod_ip)
    finally:
        hooks.stop()
        cp.stop()
        if pod_ip:
            remove_address()


def _cluster_role() -> Obj:
    [role] = [d for d in documents((REPO / "deploy" / "rbac.yaml").read_text())
              if d["kind"] == "ClusterRole"]
    return role


# --- one namespace per test -----------------------------------------------------------------

RBAC_FILES = ("rbac.yaml", "rbac-load.yaml", "rbac-schedtrace.yaml", "rbac-capture.yaml")


def rbac_documents(namespace: str, files: tuple[str, ...] = ("rbac.yaml",)) -> list[Obj]:
    """deploy/rbac*.yaml as a cluster admin would apply them for a target namespace and an
    autotune namespace that are both ``namespace`` (only namespaces and the cluster-wide
    binding's name are rewritten)."""
    out = []
    for name in files:
        for doc in documents((REPO / "deploy" / name).read_text()):
            if doc["kind"] == "ClusterRole":
                continue  # cluster-wide, applied once
            meta = doc["metadata"]
            if doc["kind"] == "ClusterRoleBinding":
                meta["name"] = f"{meta['name']}-{namespace}"
            else:
                meta["namespace"] = namespace
            for subject in doc.get("subjects") or []:
                subject["namespace"] = namespace
            out.append(doc)
    return out


@dataclass
class World:
    """One test's namespace in the real cluster, and how to reach it as autotune does."""

    plane: Plane
    namespace: str
    tmp: Path
    proxy: FaultProxy
    chaos: ChaosMesh
    token: str
    kubeconfig: Path
    node: str
    clock: FastClock = field(default_factory=FastClock)
    logs: Logs | None = None
    """The containers' logs kwok serves (``pods/log``), written as the clock advances."""
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    @property
    def admin(self) -> Admin:
        return self.plane.cp.admin

    # --- what autotune runs with -------------------------------------------------------

    def experiment(self, *, rollout_timeout: str = "10s", trials: int = 3, stop_after: int = 5,
                   pattern: str = "{every: 2s, burst: 1s}",
                   prometheus: str = "http://127.0.0.1:9", token_env: str = "null",
                   measure: str = "", metrics: str = "", target: str = "") -> Experiment:
        return parse_experiment(self.experiment_text(
            rollout_timeout=rollout_timeout, trials=trials, stop_after=stop_after,
            pattern=pattern, prometheus=prometheus, token_env=token_env, measure=measure,
            metrics=metrics, target=target))

    def experiment_text(self, *, rollout_timeout: str = "10s", trials: int = 3,
                        stop_after: int = 5, pattern: str = "{every: 2s, burst: 1s}",
                        prometheus: str = "http://127.0.0.1:9", token_env: str = "null",
                        measure: str = "", metrics: str = "", target: str = "") -> str:
        return EXPERIMENT.format(
            namespace=self.namespace, kubeconfig=self.kubeconfig,
            rollout_timeout=rollout_timeout, trials=trials, stop_after=stop_after,
            pattern=pattern, prometheus=prometheus, token_env=token_env, measure=measure,
            metrics=metrics, target=target)

    def kube(self) -> Kube:
        return connect(self.clock, kubeconfig=str(self.kubeconfig))

    def target(self, exp: Experiment | None = None, *, guard: StressGuard | None = None,
               variables: list[str] | None = None) -> KubernetesTarget:
        """As stack.build makes it; ``variables``: other parameters' variables than the
        experiment's (in that order)."""
        exp = exp or self.experiment()
        spec = exp.target.kubernetes
        assert spec is not None
        kube = self.kube()
        lease = RunLease(kube, namespace=spec.namespace, deployment=spec.deployment,
                         study=exp.name, duration=exp.max_trial_seconds + 60)
        load = (LoadGenerator(spec.load, kube, self.clock, namespace=spec.namespace,
                              study=exp.name) if spec.load is not None else None)
        return KubernetesTarget(spec, kube, self.clock,
                                variables=variables or [p.env_var for p in exp.parameters],
                                study=exp.name, state_dir=self.tmp / "results", guard=guard,
                                lease=lease,
                                schedtrace_ms=exp.measure.schedtrace_ms, load=load,
                                load_seconds=exp.load_seconds)

    def injector(self, *, timeout: float = 5.0, study: str | None = "api-test",
                 guard: StressGuard | None = None) -> ChaosMeshInjector:
        return ChaosMeshInjector(self.kube(), self.clock, namespace=self.namespace, study=study,
                                 inject_timeout=timeout, recover_timeout=timeout,
                                 check_every=1, guard=guard)

    def backends(self, exp: Experiment | None = None, **metrics: Any) -> Backends:
        """Wired as stack.build wires them: the target and the injector share a guard."""
        guard = StressGuard()
        return Backends(target=self.target(exp, guard=guard), injector=self.injector(guard=guard),
                        source=StressedMetrics(self, **metrics))

    # --- the cluster, as an admin sees it ------------------------------------------------

    def path(self, plural: str, name: str = "", sub: str = "") -> str:
        group = {"deployments": "/apis/apps/v1", "replicasets": "/apis/apps/v1",
                 "leases": "/apis/coordination.k8s.io/v1",
                 "stresschaos": "/apis/chaos-mesh.org/v1alpha1",
                 "horizontalpodautoscalers": "/apis/autoscaling/v2",
                 "roles": "/apis/rbac.authorization.k8s.io/v1",
                 "logs": "/apis/kwok.x-k8s.io/v1alpha1"}.get(plural, "/api/v1")
        out = f"{group}/namespaces/{self.namespace}/{plural}"
        if name:
            out += f"/{name}"
        return out + (f"/{sub}" if sub else "")

    def get(self, plural: str, name: str) -> Obj | None:
        return self.admin.get(self.path(plural, name))

    def items(self, plural: str, **params: str) -> list[Obj]:
        return self.admin.list(self.path(plural), **params)

    def deployment(self, name: str = DEPLOYMENT) -> Obj:
        found = self.get("deployments", name)
        assert found is not None, f"Deployment {name} is gone"
        return found

    def pods(self, deployment: str = DEPLOYMENT, *, terminating: bool = False) -> list[Obj]:
        """The Deployment's pods (its labels, a ReplicaSet owns them), by name; without
        ``terminating``, only the active ones (not being deleted, not finished)."""
        found = [p for p in self.items("pods", labelSelector=f"app={deployment}") if _owned(p)]
        if not terminating:
            found = [p for p in found if not p["metadata"].get("deletionTimestamp")
                     and p["status"].get("phase") not in ("Succeeded", "Failed")]
        return sorted(found, key=lambda p: p["metadata"]["name"])

    def template_env(self) -> list[Obj]:
        return list(self.deployment()["spec"]["template"]["spec"]["containers"][0].get("env")
                    or [])

    def pod_envs(self) -> list[list[Obj]]:
        return [p["spec"]["containers"][0].get("env") or [] for p in self.pods()]

    def annotations(self) -> dict[str, str]:
        """autotune's annotations on the Deployment (the controller's own revision is not)."""
        found = self.deployment()["metadata"].get("annotations") or {}
        return {k: v for k, v in found.items() if not k.startswith("deployment.kubernetes.io/")}

    def age_leases(self, seconds: float) -> None:
        """Move every Lease's times ``seconds`` back: as the API server's clock has them when
        their holders last renewed them that long ago (a dead run's). The run Lease is timed by
        the API server's clock (``Kube.server_now``), which the tests' fast-forwarding clock
        does not move."""
        for lease in self.items("leases"):
            spec = lease["spec"]
            for key in ("acquireTime", "renewTime"):
                then = dt.datetime.fromisoformat(spec[key].replace("Z", "+00:00"))
                spec[key] = (then - dt.timedelta(seconds=seconds)).strftime(
                    "%Y-%m-%dT%H:%M:%S.%fZ")
            self.admin.replace(self.path("leases", lease["metadata"]["name"]), lease)

    def chaos_left(self) -> list[str]:
        try:
            return [o["metadata"]["name"] for o in self.items("stresschaos")]
        except ApiFailure as e:
            if e.status == 404:  # the CRD is not installed: no StressChaos can exist
                return []
            raise

    def settled(self, timeout: float = 30) -> Obj:
        """Wait until the Deployment's rollout is complete and only its new pods exist."""
        def done() -> Obj | None:
            dep = self.deployment()
            status = dep.get("status") or {}
            want = int(dep["spec"].get("replicas", 1))
            ok = (status.get("observedGeneration") == dep["metadata"]["generation"]
                  and status.get("updatedReplicas", 0) == want
                  and status.get("availableReplicas", 0) == want
                  and status.get("replicas", 0) == want
                  and len([p for p in self.pods(terminating=True) if p["status"].get("phase")
                           not in ("Succeeded", "Failed")]) == want)
            return dep if ok else None

        found: Obj = self.admin.wait_for(done, timeout, "the Deployment to settle")
        return found

    def replicaset_records(self) -> dict[str, list[str]]:
        """autotune's annotations on the Deployment's ReplicaSets, by ReplicaSet: the
        Deployment controller copies the Deployment's annotations to its new ReplicaSet and
        ``kubectl rollout undo`` copies them back (``rollout_undo``)."""
        found = {}
        for rs in self.items("replicasets", labelSelector=f"app={DEPLOYMENT}"):
            ours = sorted(k for k in rs["metadata"].get("annotations") or {}
                          if k.startswith("autotune/"))
            if ours:
                found[rs["metadata"]["name"]] = ours
        return found

    def assert_pristine(self) -> None:
        """The end state every run must leave: no stress, the env as found, no annotation
        (on the Deployment or any of its ReplicaSets), no Lease."""
        assert self.chaos_left() == []
        assert self.chaos.stressed_pods() == [], "chaos-daemon still runs stress-ng"
        assert self.template_env() == ORIGINAL_ENV
        self.settled()
        assert all(env == ORIGINAL_ENV for env in self.pod_envs())
        assert self.annotations() == {}
        assert self.replicaset_records() == {}, "a later rollout undo would bring them back"
        assert self.items("leases") == [], "the run Lease is released"

    # --- what a test does to the cluster ---------------------------------------------------

    def patch(self, plural: str, name: str, patch: Obj, kind: str = "strategic",
              sub: str = "") -> Obj:
        return self.admin.patch(self.path(plural, name, sub), patch, kind)

    def rollout_undo(self) -> None:
        """``kubectl rollout undo deploy/api``, as kubectl does it (our port of
        DeploymentRollbacker.Rollback and deploymentRevision in kubernetes/kubectl's
        pkg/polymorphichelpers/rollback.go): the ReplicaSet of the second-highest revision
        gives its pod template (less the pod-template-hash label) and its annotations (less
        those kubectl keeps from the Deployment) to the Deployment, both replaced in one JSON
        patch; the rollout is then awaited."""
        skipped = {"kubectl.kubernetes.io/last-applied-configuration",
                   "deployment.kubernetes.io/revision",
                   "deployment.kubernetes.io/revision-history",
                   "deployment.kubernetes.io/desired-replicas",
                   "deployment.kubernetes.io/max-replicas",
                   "deprecated.deployment.rollback.to"}
        dep = self.deployment()
        owned = [rs for rs in self.items("replicasets")
                 if any(ref.get("uid") == dep["metadata"]["uid"] and ref.get("controller")
                        for ref in rs["metadata"].get("ownerReferences") or [])]
        by_revision = sorted(owned, key=lambda rs: int(
            rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]))
        assert len(by_revision) >= 2, "no rollout history"
        previous = by_revision[-2]
        template = previous["spec"]["template"]
        template["metadata"]["labels"].pop("pod-template-hash", None)
        kept = {k: v for k, v in (dep["metadata"].get("annotations") or {}).items()
                if k in skipped}
        annotations = {**kept, **{k: v for k, v in (previous["metadata"].get("annotations")
                                                     or {}).items() if k not in skipped}}
        self.admin.patch(self.path("deployments", DEPLOYMENT), [
            {"op": "replace", "path": "/spec/template", "value": template},
            {"op": "replace", "path": "/metadata/annotations", "value": annotations}], "json",
            manager="kubectl-rollout")
        self.settled()

    def scale(self, replicas: int, name: str = DEPLOYMENT) -> None:
        self.patch("deployments", name, {"spec": {"replicas": replicas}}, "merge")

    def set_env(self, env: list[Obj], container: str = CONTAINER) -> None:
        """Another writer replaces the container's env (kubectl edit, a GitOps controller)."""
        dep = self.deployment()
        for c in dep["spec"]["template"]["spec"]["containers"]:
            if c["name"] == container:
                c["env"] = env
        self.admin.replace(self.path("deployments", DEPLOYMENT), dep)

    def pause(self) -> None:
        self.patch("deployments", DEPLOYMENT, {"spec": {"paused": True}}, "merge")

    def cordon(self, unschedulable: bool = True) -> None:
        """No new pod of the Deployment can be scheduled: every rollout stays stuck."""
        self.admin.patch(f"/api/v1/nodes/{self.node}",
                         {"spec": {"unschedulable": unschedulable}}, "merge")

    def restart_container(self, pod: str, container: str = CONTAINER) -> None:
        """What the kubelet reports after a container restart: a new containerID, one more
        restart (written to the pod's status as the kubelet does)."""
        found = self.get("pods", pod)
        assert found is not None
        statuses = found["status"]["containerStatuses"]
        for s in statuses:
            if s["name"] == container:
                s["restartCount"] = int(s.get("restartCount", 0)) + 1
                s["containerID"] = f"containerd://{uuid.uuid4().hex}"
        self.patch("pods", pod, {"status": {"containerStatuses": statuses}}, "merge",
                   sub="status")

    def evict(self, pod: str, reason: str = "Evicted") -> None:
        """kwok ends the pod as the kubelet ends an evicted one: phase Failed, kept."""
        self.patch("pods", pod, {"metadata": {"annotations": {"autotune.test/fail": reason}}},
                   "merge")

    def add_pod(self, name: str, labels: Mapping[str, str], **annotations: str) -> Obj:
        return self.admin.create(self.path("pods"), {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": dict(labels), "annotations": annotations},
            "spec": {"nodeSelector": {"autotune.test/node": self.node},
                     "containers": [{"name": "main", "image": "example/other:1.0"}]}})

    def deny(self, verb: str, resource: str) -> None:
        """Take ``verb`` on ``resource`` ("deployments", "stresschaos", "pods/log") away from
        autotune's Role: the API server then answers 403 as RBAC would."""
        for role in self.items("roles"):
            changed = False
            for rule in role["rules"]:
                if resource in rule.get("resources", []) and verb in rule.get("verbs", []):
                    rule["verbs"] = [v for v in rule["verbs"] if v != verb]
                    changed = True
            if changed:
                role["rules"] = [r for r in role["rules"] if r["verbs"]]
                self.admin.replace(self.path("roles", role["metadata"]["name"]), role)

    def grant(self, *files: str) -> None:
        """Apply more of deploy/rbac-*.yaml (schedtrace, capture, load)."""
        for doc in rbac_documents(self.namespace, files):
            self.admin.apply(doc, update=True)

    def verbs(self) -> set[tuple[str, str]]:
        """(verb, resource) of every request autotune sent through the proxy, as RBAC names
        them."""
        out = set()
        for r in self.proxy.requests:
            found = rbac_verb(r.method, r.path, r.query)
            if found is not None:
                out.add(found)
        return out

    def created_chaos(self) -> list[Obj]:
        return [r.body for r in self.proxy.seen("POST", r"/stresschaos$")
                if r.query.get("dryRun") is None]

    def add_hpa(self, *, min_replicas: int = 1, max_replicas: int = 5) -> Obj:
        """A CPU HorizontalPodAutoscaler on the Deployment, and its decision: the real HPA
        controller runs, but no metrics API serves the pods' CPU here, so what it would decide
        when the stress lands (pkg/controller/podautoscaler/horizontal.go: desired =
        ceil(current x utilization / target), through the scale subresource) is made by the
        test, one replica up, at once, up to ``max_replicas``."""
        hpa = self.admin.create(self.path("horizontalpodautoscalers"), {
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": DEPLOYMENT},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": DEPLOYMENT},
                     "minReplicas": min_replicas, "maxReplicas": max_replicas,
                     "metrics": [{"type": "Resource", "resource": {
                         "name": "cpu",
                         "target": {"type": "Utilization", "averageUtilization": 70}}}]}})

        def scale_up(stressed: list[str]) -> None:
            mine = {p["metadata"]["name"] for p in self.pods()}
            if not mine & set(stressed):
                return
            scale = self.admin.request("GET", self.path("deployments", DEPLOYMENT, "scale"))
            replicas = min(max_replicas, int(scale["spec"]["replicas"]) + 1)
            if replicas > int(scale["spec"]["replicas"]):
                scale["spec"]["replicas"] = replicas
                self.admin.replace(self.path("deployments", DEPLOYMENT, "scale"), scale)

        self.chaos.on_inject.append(scale_up)
        return dict(hpa)

    def serve_logs(self) -> Logs:
        """From now on the pods print their logs (and SCHED lines when their GODEBUG asks),
        which kwok serves as ``pods/log``."""
        if self.logs is None:
            self.logs = Logs(self.admin, self.namespace, self.tmp / "podlogs", self.clock.now)
            self.clock.ticks.append(self.logs.tick)
            # and right before the kubelet reads a log: a process writes while time passes
            self.proxy.on("GET", r"/pods/[^/]+/log$", self.logs.tick, times=10**9)
        return self.logs

    def serve_pprof(self, port: int = 6060) -> PprofServer:
        """The Deployment's Running pods get ``POD_IP`` (as the clock advances: a CNI for the
        test), where net/http/pprof answers on ``port``: the API server's pod proxy reaches it
        for real."""
        assert self.plane.pod_ip, f"{POD_IP} could not be added to the loopback interface"
        server = PprofServer(port, self.chaos.stressed_pods).start()
        self.cleanups.append(server.stop)

        def route() -> None:
            for pod in self.pods():
                if pod["status"].get("phase") == "Running" and (
                        pod["status"].get("podIP") != POD_IP):
                    self.patch("pods", pod["metadata"]["name"], {"status": {
                        "podIP": POD_IP, "podIPs": [{"ip": POD_IP}]}}, "merge", sub="status")

        self.clock.ticks.append(route)
        return server

    def dies(self) -> None:
        """A run of this world that changed the Deployment was killed (nothing restored,
        nothing released): time passes until its run Lease expires, as it must before another
        run may take over (the leases last the longest trial plus a margin)."""
        self.clock.sleep(3600)
        self.age_leases(3600)  # timed by the API server's clock, which the sleep did not move

    def when(self, condition: Callable[[], bool], action: Callable[[], None]) -> Watcher:
        """Run ``action`` once, as soon as ``condition`` holds (polled in a thread)."""
        return Watcher(condition, action).start()

    def webhook_denial(self, message: str) -> None:
        self.plane.hooks.deny[self.namespace] = message


def _owned(pod: Obj) -> bool:
    """A pod a ReplicaSet controls (not one started by hand with the same labels)."""
    return any(r.get("kind") == "ReplicaSet" and r.get("controller")
               for r in pod["metadata"].get("ownerReferences") or [])


class Watcher:
    def __init__(self, condition: Callable[[], bool], action: Callable[[], None]) -> None:
        self.condition, self.action = condition, action
        self.fired = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.condition():
                    self.fired = True
                    self.action()
                    return
            except ApiFailure:
                pass
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def rbac_verb(method: str, path: str, query: Mapping[str, str]) -> tuple[str, str] | None:
    """The RBAC (verb, resource) of a request; None for discovery (a non-resource URL every
    authenticated user may read)."""
    parts = path.strip("/").split("/")
    parts = parts[2:] if parts[0] == "api" else parts[3:]  # drop api/v1 or apis/group/v1
    if not parts:
        return None
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    resource = parts[0]
    named = len(parts) > 1
    if len(parts) > 2:
        resource = f"{resource}/{parts[2]}"
    if resource.startswith("pods/") and ":" in parts[1]:
        resource = "pods/proxy"
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
    if verb is None:
        verb = "watch" if query.get("watch") in ("true", "1") else ("get" if named else "list")
    return verb, resource


class StressedMetrics:
    """A MetricSource answering only when the simulated Chaos Mesh really stressed the
    candidate's pods, and only for queries selecting exactly those pods."""

    def __init__(self, world: World, *, interrupt_on_read: int | None = None) -> None:
        self.world, self.interrupt_on_read = world, interrupt_on_read
        self.rate = 100.0
        """Requests/s the candidate served: the load generator's, whatever the settings."""
        self.reads = 0
        self.closed = False

    def observe(self, live: Live) -> None:
        return None

    def read(self, queries: Mapping[str, str], window: Window, live: Live) -> dict[str, Reading]:
        self.reads += 1
        if self.interrupt_on_read == self.reads:
            raise Interrupted("SIGTERM")
        pods = sorted(live.placement["pods"])
        stressed = {i.pod for i in self.world.chaos.injections}
        out: dict[str, Reading] = {}
        load = live.details.get("load_pod")
        for name, query in queries.items():
            if "loadgen_" in query:  # the in-cluster generator's own histogram
                out[name] = (0.004 if load and f'pod="{load}"' in query and self._serving(load)
                             else Unavailable(f"no series for {query}"))
                continue
            if not all(p in query for p in pods) or (
                    f'namespace="{self.world.namespace}"' not in query):
                out[name] = Unavailable(f"no series for {query}")
            elif not set(pods) <= stressed:
                out[name] = Unavailable("no stress was injected on the candidate's pods")
            elif name == "request_rate":
                out[name] = self.rate
            else:
                procs = int(live.env.get("GOMAXPROCS") or 8)
                out[name] = 0.003 * (1 + abs(procs - 2) / 4)
        return out

    def _serving(self, pod: str) -> bool:
        found = self.world.get("pods", pod)
        return found is not None and found["status"].get("phase") == "Running"

    def close(self) -> None:
        self.closed = True


def deployment_manifest(namespace: str, node: str, *, env: list[Obj] | None = None,
                        replicas: int = 2, annotations: Mapping[str, str] | None = None) -> Obj:
    labels = {"app": DEPLOYMENT}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas, "selector": {"matchLabels": labels},
            # Every new pod at once, no old pod removed before the new ones are available: a
            # real rolling update, in one step instead of one per pod (faster tests).
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels, "annotations": dict(annotations or {})},
                "spec": {
                    "nodeSelector": {"autotune.test/node": node},
                    "terminationGracePeriodSeconds": 30,
                    "containers": [
                        {"name": CONTAINER, "image": "example/api:1.0",
                         "env": list(env if env is not None else ORIGINAL_ENV),
                         "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "500m"}}},
                        {"name": "sidecar", "image": "example/proxy:1.0"}]}}}}


def start_world(plane: Plane, tmp: Path, *, rbac: tuple[str, ...] = ("rbac.yaml",),
                namespace_labels: Mapping[str, str] | None = None,
                deployment: Callable[[str, str], Obj] | None = None,
                objects: tuple[Obj, ...] = ()) -> tuple[World, Callable[[], None]]:
    """A fresh namespace (``namespace_labels``: e.g. Pod Security's enforce level), the
    ``objects`` created in it first (a ResourceQuota...), then the Deployment
    (``deployment(namespace, node)``, default ``deployment_manifest``) rolled out."""
    admin = plane.cp.admin
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace, "labels": dict(namespace_labels or {})}})
    node = f"node-{namespace}"
    plane.cp.add_node(node, {"node.kubernetes.io/instance-type": "m5.large",
                             "autotune.test/node": node})
    admin.wait_for(lambda: admin.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
                   30, "the namespace's default ServiceAccount")
    for doc in rbac_documents(namespace, rbac):
        admin.apply(doc)
    token = admin.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/autotune/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 7200}})["status"]["token"]
    proxy = FaultProxy(plane.cp.url)
    proxy.start()
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(plane.cp.kubeconfig(token, server=proxy.url))
    chaos = ChaosMesh(admin, namespace).start()
    world = World(plane, namespace, tmp, proxy, chaos, token, kubeconfig, node)
    for obj in objects:
        admin.create(collection_path(obj, namespace), obj)
    admin.create(world.path("deployments"), (deployment or deployment_manifest)(namespace, node))
    world.settled()
    proxy.requests.clear()

    def stop() -> None:
        for cleanup in world.cleanups:
            cleanup()
        plane.cp.ensure_crds()
        chaos.stop()
        proxy.stop()
        plane.hooks.deny.pop(namespace, None)
        try:
            # Whatever a test left: the namespace goes, its objects with it (the finalizer of a
            # stuck StressChaos is forced so the namespace can go).
            for obj in admin.list(world.path("stresschaos")):
                admin.patch(world.path("stresschaos", obj["metadata"]["name"]),
                            {"metadata": {"finalizers": []}}, "merge")
            admin.delete(f"/api/v1/namespaces/{namespace}")
            admin.delete(f"/api/v1/nodes/{node}")
            for doc in rbac_documents(namespace, RBAC_FILES):
                if doc["kind"] == "ClusterRoleBinding":
                    admin.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/"
                                 + doc["metadata"]["name"])
        except ApiFailure:
            pass

    return world, stop


@pytest.fixture
def world(plane: Plane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    w, stop = start_world(plane, tmp_path)
    try:
        yield w
    finally:
        stop()


@pytest.fixture
def prometheus(world: World) -> Iterator[FakePrometheus]:
    fake = FakePrometheus(world.namespace)
    try:
        yield fake
    finally:
        fake.stop()


def load_yaml(text: str) -> Any:
    return yaml.safe_load(text)
