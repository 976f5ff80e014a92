"""A stateful fake Kubernetes API server, reached over HTTP by the real ``kubernetes`` client.

Why not kmock (PyPI, by kopf's author)? It is asyncio/aiohttp-only, its emulator merges patches
as plain dicts (no strategic merge by name), has no label/field selectors, reports a constant
resourceVersion, ignores ``timeoutSeconds`` and never answers 410. Those are exactly the
behaviours autotune depends on, so this is a small stdlib ``ThreadingHTTPServer`` instead.

What it serves (namespaced paths of the real API):

- ``deployments`` (apps/v1): get, list, watch, strategic-merge / JSON-merge patch (containers and
  env merge by name, ``$patch: delete``, null deletes a key), ``dryRun=All``; ``generation``
  bumps on a spec change and a simulated controller rolls out: new pods (new names and
  containerIDs, env copied from the template) while the old ones terminate, then are gone.
  ``rollout = "never"`` leaves every rollout stuck; ``stuck_when(env)`` only some (a candidate
  whose pods crash-loop).
- ``pods`` and ``events`` (v1): list and watch with label and field selectors; bare pods (the
  load generator) are created after a strict schema check (``kubernetes_validate``, as the API
  server's strict decoding) Pending, then Running and Ready, or stuck waiting with
  ``pod_failure`` (ErrImagePull ...), and deleted.
- ``leases`` (coordination.k8s.io/v1): create (409 AlreadyExists), get, update (PUT) with the
  API server's optimistic concurrency (a stale ``metadata.resourceVersion`` is 409 Conflict, as
  apiserver/pkg/registry/generic/registry/store.go Update), delete.
- ``horizontalpodautoscalers`` (autoscaling/v2): list; ``add_hpa`` adds a CPU HPA whose
  controller scales the Deployment up by one replica shortly after stress lands on its pods.
- ``stresschaos`` (chaos-mesh.org/v1alpha1): create (validated against the CRD's schema; unknown
  fields are 400 with ``fieldValidation=Strict`` and silently pruned otherwise), get, list,
  watch, delete; a simulated Chaos Mesh selects pods by the selector, adds the
  ``chaos-mesh/records`` finalizer, sets records Injected and ``instances[id].uid``; on delete
  the records go "Not Injected" and then the finalizer and the object go. ``chaos`` can be
  ``"select-nothing"`` (Warning event ``Failed``, no records), ``"never-inject"`` or
  ``"stuck-deleting"``; ``webhook_denial`` makes the admission webhook refuse creation.
- ``pods/log`` (v1): the kubelet's container log, as ``GET .../pods/<name>/log`` serves it
  (kubernetes pkg/registry/core/pod/rest/log.go, pkg/kubelet/kuberuntime/logs/logs.go): text,
  ``container`` required when the pod has several (400 otherwise, as strategy.go LogLocation),
  ``sinceSeconds``, ``limitBytes``, ``timestamps=true`` prefixing each line with the
  RFC3339NanoFixed time and a space. Its content is a Go runtime's: when the container's env
  has ``GODEBUG=...schedtrace=<ms>``, one recorded real go1.25 SCHED line every <ms> from the
  pod's start (its own ``SCHED <t>ms:`` counting from there; the recording's idle phases),
  between the program's own lines.
  ``log_runnable`` overwrites the global run queue of those lines for chosen pods.
- ``pods/proxy`` (v1): ``GET .../pods/<name>:<port>/proxy/<path>`` as the API server proxies it
  (pkg/registry/core/pod/rest/subresources.go ProxyREST, strategy.go ResourceLocation): the
  pod's own answer and status pass through; a port nothing listens on is 503 "error trying to
  reach service: ... connection refused". Pods listen on ``pprof_port`` and serve
  net/http/pprof's trace and profile there (a trace header, a gzip body); every proxied request
  is kept in ``proxied`` with the StressChaos objects that existed when it arrived.
- discovery of chaos-mesh.org/v1alpha1 and the CRD itself (``crd_installed``),
  SelfSubjectAccessReview (``denied`` holds (verb, resource) pairs, also enforced on requests),
  and injected failures (``fail(...)``: any status, or a delay).

Watches behave like the real ones: every object and list carries a resourceVersion (one global
counter), ``?watch=1`` streams JSON lines over chunked encoding, ``timeoutSeconds`` closes the
stream (after a BOOKMARK), and a resourceVersion older than the retained history gets an
ERROR event with code 410.
"""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import heapq
import itertools
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import kubernetes_validate

from autotune.kubernetes.stresschaos import crd, tighten

Obj = dict[str, Any]
K8S_VERSION = kubernetes_validate.latest_version()

RESOURCES: dict[str, tuple[str, str, str]] = {
    "deployments": ("apps", "v1", "Deployment"),
    "replicasets": ("apps", "v1", "ReplicaSet"),
    "pods": ("", "v1", "Pod"),
    "events": ("", "v1", "Event"),
    "stresschaos": ("chaos-mesh.org", "v1alpha1", "StressChaos"),
    "horizontalpodautoscalers": ("autoscaling", "v2", "HorizontalPodAutoscaler"),
    "leases": ("coordination.k8s.io", "v1", "Lease"),
    "nodes": ("", "v1", "Node"),
}
CLUSTER_SCOPED = {"nodes"}
USER = "system:serviceaccount:autotune:autotune"
FINALIZER = "chaos-mesh/records"
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name", "volumes": "name",
              "volumeMounts": "mountPath", "ports": "containerPort"}


class HttpError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


@dataclass
class Failure:
    method: str
    path: str
    status: int | None
    times: int
    message: str
    delay: float
    after: bool = False
    """Fail *after* doing the work: the response is lost, the change is made."""


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    content_type: str


@dataclass
class Injected:
    """What the simulated Chaos Mesh really did: stress on these pods from start to end."""

    name: str
    pods: list[str]
    workers: int
    start: float
    end: float | None = None


@dataclass
class FakeCluster:
    delay: float = 0.02
    rollout: str = "normal"
    stuck_when: Callable[[dict[str, str | None]], bool] | None = None
    """A rollout to a template whose first container has such an env never completes (the
    candidate's pods crash-loop); restoring another env rolls out normally."""
    chaos: str = "inject"
    """"inject"; "select-nothing"; "never-inject"; "stuck-deleting"; "conflict-events" (a
    ``Failed`` event for an update conflict before selecting, then inject); "recover-fails"
    (cancelling stress-ng fails: records stay Injected, no requeue, the finalizer stays)."""
    progress_deadline: float | None = None
    """Seconds after which a stuck rollout gets Progressing=False ProgressDeadlineExceeded."""
    hpa_delay: float = 0.0
    """Seconds between stress landing on a Deployment's pods and its HPA scaling it up."""
    pod_start_delay: float = 0.0
    """New pods of a rollout stay Pending (not Ready) this long."""
    """Seconds after which a stuck rollout gets Progressing=False ProgressDeadlineExceeded."""
    crd_installed: bool = True
    webhook_denial: str | None = None
    denied: set[tuple[str, str]] = field(default_factory=set)
    requests: list[Request] = field(default_factory=list)
    now: Callable[[], float] = time.time
    """The pods' clock, for their logs (a test's fast-forwarding clock)."""
    log_runnable: dict[str, int] = field(default_factory=dict)
    pprof_port: int | None = None
    """The port the pods serve net/http/pprof on (None: they do not)."""
    pod_failure: str | None = None
    """A waiting reason (ErrImagePull, ...) every created bare pod gets instead of running."""
    created_pods: list[Obj] = field(default_factory=list)
    deleted_pods: list[str] = field(default_factory=list)
    proxied: list[tuple[str, list[str]]] = field(default_factory=list)
    """Pod name -> the global run-queue length its SCHED lines report (default: as recorded)."""
    created_chaos: list[Obj] = field(default_factory=list)
    injected: list[Injected] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.rv = 1000
        self.oldest_rv = 0
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.history: list[tuple[int, str, str, Obj]] = []
        self.failures: list[Failure] = []
        self.expire_next_watch = False
        self.watch_faults: list[tuple[str, str]] = []
        self.verbs: set[tuple[str, str]] = set()
        self.started: dict[tuple[str, str], float] = {}
        self.stopping = False
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._server: ThreadingHTTPServer | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.cluster = self  # type: ignore[attr-defined]
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True,
                         name="fake-api").start()
        threading.Thread(target=self._run_timers, daemon=True, name="fake-controllers").start()
        return f"http://127.0.0.1:{server.server_address[1]}"

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def kubeconfig(self, url: str) -> str:
        return json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}},
                         {"name": "other", "context": {"cluster": "fake", "user": "fake"}}],
        })

    # --- knobs for tests ----------------------------------------------------------------

    def fail(self, method: str, path: str, status: int | None, *, times: int = 1,
             message: str = "injected failure", delay: float = 0.0, after: bool = False) -> None:
        """The next ``times`` requests whose path contains ``path`` fail (or are slow);
        ``after``: the server did the work, the answer is an error (a lost response)."""
        with self.cond:
            self.failures.append(Failure(method.upper(), path, status, times, message, delay,
                                         after))

    def break_watch(self, plural: str, fault: str) -> None:
        """The next watch of ``plural`` breaks when its first event is due, instead of sending
        it: "500" (an ERROR event, code 500), "504" (ERROR 504 "Too large resource version",
        what an API server behind the others answers), or "cut" (the event is torn in the
        middle and the stream ends, as when a proxy drops the connection)."""
        with self.cond:
            self.watch_faults.append((plural, fault))

    def expire_history(self) -> None:
        """Forget the event history: a watch from an older resourceVersion gets 410 Gone."""
        with self.cond:
            self.oldest_rv = self.rv
            self.history.clear()
            self.expire_next_watch = True

    # --- seeding and inspecting state ---------------------------------------------------

    def add_deployment(self, namespace: str, name: str, *, container: str = "api",
                       env: list[Obj] | None = None, replicas: int = 2,
                       cpu_limit: str = "1", image: str = "example/api:1.0") -> Obj:
        labels = {"app": name}
        containers = [{"name": container, "image": image, "env": list(env or []),
                       "resources": {"limits": {"cpu": cpu_limit}, "requests": {"cpu": "500m"}}},
                      {"name": "sidecar", "image": "example/proxy:1.0"}]
        return self.add_manifest({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": containers}}}})

    def add_manifest(self, manifest: Obj) -> Obj:
        """A Deployment as ``kubectl apply`` would create it, rolled out, its pods running."""
        dep = copy.deepcopy(manifest)
        dep["metadata"].update(generation=1)
        dep["metadata"].setdefault("annotations", {})
        dep["spec"].setdefault("replicas", 1)
        dep["status"] = {}
        replicas = int(dep["spec"]["replicas"])
        with self.cond:
            self._store("deployments", dep, "ADDED")
            rs = self._replicaset_for(dep)
            for _ in range(replicas):
                self._store("pods", self._new_pod(dep, rs), "ADDED")
            self._scale_rs(rs, replicas)
            self._finish_status(dep, replicas, replicas)
            return copy.deepcopy(dep)

    def get(self, plural: str, namespace: str, name: str) -> Obj | None:
        with self.cond:
            obj = self.objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def items(self, plural: str, namespace: str | None = None) -> list[Obj]:
        with self.cond:
            return [copy.deepcopy(o) for (p, ns, _), o in sorted(self.objects.items())
                    if p == plural and (namespace is None or ns == namespace)]

    def pods_of(self, namespace: str, deployment: str, *, terminating: bool = False) -> list[Obj]:
        """The Deployment's pods: owned by one of its ReplicaSets, not finished (Failed or
        Succeeded), and unless ``terminating``, not being deleted."""
        dep = self.get("deployments", namespace, deployment)
        if dep is None:
            return []
        owned = {rs["metadata"]["uid"] for rs in self.items("replicasets", namespace)
                 if _controller_uid(rs) == dep["metadata"]["uid"]}
        return [p for p in self.items("pods", namespace)
                if _controller_uid(p) in owned
                and p["status"]["phase"] not in ("Failed", "Succeeded")
                and (terminating or not p["metadata"].get("deletionTimestamp"))]

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        """``kubectl scale``: a spec change (generation + 1); the controller adds or removes
        pods of the current ReplicaSet at once."""
        with self.cond:
            dep = self.objects[("deployments", namespace, name)]
            dep["spec"]["replicas"] = replicas
            dep["metadata"]["generation"] += 1
            self._store("deployments", dep, "MODIFIED")
            rs = self._replicaset_for(dep)
            current = [p for p in self.pods_of(namespace, name)
                       if _controller_uid(p) == rs["metadata"]["uid"]]
            for pod in current[replicas:]:
                self._store("pods", pod, "DELETED")
            for _ in range(replicas - len(current)):
                self._store("pods", self._new_pod(dep, rs), "ADDED")
            self._scale_rs(rs, replicas)
            self._finish_status(dep, replicas, replicas)

    def set_env(self, namespace: str, name: str, env: list[Obj]) -> None:
        """``kubectl edit``: the first container's env list replaced; a normal rollout."""
        with self.cond:
            dep = self.objects[("deployments", namespace, name)]
            dep["spec"]["template"]["spec"]["containers"][0]["env"] = copy.deepcopy(env)
            dep["metadata"]["generation"] += 1
            self._store("deployments", dep, "MODIFIED")
            self._start_rollout(namespace, name, dep["metadata"]["generation"])

    def pause(self, namespace: str, name: str) -> None:
        """``kubectl rollout pause``."""
        with self.cond:
            dep = self.objects[("deployments", namespace, name)]
            dep["spec"]["paused"] = True
            dep["metadata"]["generation"] += 1
            dep["status"]["observedGeneration"] = dep["metadata"]["generation"]
            self._store("deployments", dep, "MODIFIED")

    def restart_pod(self, namespace: str, name: str) -> None:
        """The container restarts: new containerID, restartCount + 1 (the stress is gone)."""
        with self.cond:
            pod = self.objects[("pods", namespace, name)]
            for s in pod["status"]["containerStatuses"]:
                s["restartCount"] += 1
                s["containerID"] = _container_id()
            self._store("pods", pod, "MODIFIED")

    def add_node(self, name: str, labels: dict[str, str]) -> Obj:
        """A Node (cluster-scoped: stored under namespace "")."""
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "namespace": "", "labels": dict(labels)}}
        with self.cond:
            return self._store("nodes", node, "ADDED")

    def add_hpa(self, namespace: str, deployment: str, *, min_replicas: int = 1,
                max_replicas: int = 5) -> Obj:
        """A CPU HorizontalPodAutoscaler on ``deployment``. Like the HPA controller
        (kubernetes pkg/controller/podautoscaler/horizontal.go: desired = ceil(current x
        utilization / target), written through the scale subresource, which bumps the
        Deployment's generation), it scales up once the pods' CPU rises: here ``hpa_delay`` s after
        a StressChaos is injected into them, by one replica, up to ``max_replicas``."""
        hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": deployment, "namespace": namespace},
               "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                           "name": deployment},
                        "minReplicas": min_replicas, "maxReplicas": max_replicas,
                        "metrics": [{"type": "Resource", "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 70}}}]},
               "status": {}}
        with self.cond:
            return self._store("horizontalpodautoscalers", hpa, "ADDED")

    def _autoscale(self, namespace: str, stressed: list[str]) -> None:
        for hpa in self.items("horizontalpodautoscalers", namespace):
            spec = hpa["spec"]
            name = spec["scaleTargetRef"]["name"]
            pods = {p["metadata"]["name"] for p in self.pods_of(namespace, name)}
            dep = self.objects.get(("deployments", namespace, name))
            if dep is None or not pods & set(stressed):
                continue
            replicas = min(spec["maxReplicas"], int(dep["spec"]["replicas"]) + 1)
            if replicas <= int(dep["spec"]["replicas"]):
                continue
            if self.hpa_delay <= 0:  # in the same instant as the injection (deterministic)
                self.scale(namespace, name, replicas)
            else:
                self._later(self.hpa_delay, functools.partial(self.scale, namespace, name,
                                                              replicas))

    def add_pod(self, namespace: str, name: str, labels: dict[str, str], *,
                phase: str = "Running", reason: str | None = None,
                owner: Obj | None = None) -> None:
        """A pod: by default one no Deployment owns (started by hand with the same labels);
        ``phase="Failed", reason="Evicted", owner=<a ReplicaSet>`` is an evicted pod, which the
        ReplicaSet no longer counts and the pod GC removes only past its threshold."""
        meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels)}
        if owner is not None:
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                        "name": owner["metadata"]["name"],
                                        "uid": owner["metadata"]["uid"], "controller": True}]
            meta["labels"].update(owner["spec"]["template"]["metadata"]["labels"])
        status: Obj = {"phase": phase,
                       "conditions": [{"type": "Ready", "status": str(phase == "Running")}],
                       "containerStatuses": [{"name": "api", "containerID": _container_id(),
                                              "restartCount": 0, "ready": phase == "Running"}]}
        if reason is not None:
            status["reason"] = reason
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
               "spec": {"containers": [{"name": "api", "image": "example/api:1.0"}]},
               "status": status}
        with self.cond:
            self._store("pods", pod, "ADDED")

    # --- the store ----------------------------------------------------------------------

    def _store(self, plural: str, obj: Obj, event: str) -> Obj:
        """Persist (or, for DELETED, remove) an object with a new resourceVersion and tell
        the watchers. Caller holds the lock."""
        meta = obj.setdefault("metadata", {})
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        key = (plural, meta["namespace"], meta["name"])
        if plural == "pods":
            self.started.setdefault((meta["namespace"], meta["name"]), self.now())
        if event == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.history.append((self.rv, event, plural, copy.deepcopy(obj)))
        self.cond.notify_all()
        return obj

    def _later(self, delay: float, action: Callable[[], None]) -> None:
        with self.cond:
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), action))
            self.cond.notify_all()

    def _run_timers(self) -> None:
        with self.cond:
            while not self.stopping:
                if not self._timers:
                    self.cond.wait(0.5)
                    continue
                due, _, action = self._timers[0]
                if due > time.monotonic():
                    self.cond.wait(due - time.monotonic())
                    continue
                heapq.heappop(self._timers)
                action()

    # --- HTTP ---------------------------------------------------------------------------

    def handle(self, h: _Handler, method: str) -> None:
        url = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        self.requests.append(Request(method, url.path, query, body,
                                     h.headers.get("Content-Type", "")))
        try:
            self._maybe_fail(method, url.path)
            if method == "GET" and query.get("watch") in ("1", "true"):
                self._watch(h, url.path, query)
                return
            if method == "GET" and _POD_LOG.match(url.path):
                h.send_text(200, self._pod_log(url.path, query))
                return
            if method == "GET" and _POD_PROXY.match(url.path):
                code, data = self._pod_proxy(url.path, query)
                h.send_bytes(code, data)
                return
            code, payload = self._route(method, url.path, query, body, h.headers)
            self._maybe_fail(method, url.path, after=True)
        except HttpError as e:
            code, payload = e.code, _status(e.code, e.reason, e.message)
        except Exception as e:  # a bug in the fake: answer like a broken server would
            code, payload = 500, _status(500, "InternalError", f"fake: {type(e).__name__}: {e}")
        h.send_json(code, payload)

    def _maybe_fail(self, method: str, path: str, after: bool = False) -> None:
        with self.cond:
            failure = next((f for f in self.failures if f.times > 0 and f.method == method
                            and f.path in path and f.after == after), None)
            if failure is not None:
                failure.times -= 1
        if failure is None:
            return
        if failure.delay:
            time.sleep(failure.delay)
        if failure.status is not None:
            reason = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
                      410: "Gone", 429: "TooManyRequests"}.get(failure.status, "InternalError")
            raise HttpError(failure.status, reason, failure.message)

    def _route(self, method: str, path: str, query: dict[str, str], body: Any,
               headers: Any) -> tuple[int, Obj]:
        if path == "/apis/chaos-mesh.org/v1alpha1":
            return self._discovery()
        if path.startswith("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"):
            if not self.crd_installed or not path.endswith("/stresschaos.chaos-mesh.org"):
                raise HttpError(404, "NotFound", "customresourcedefinitions.apiextensions.k8s.io "
                                f"\"{path.rsplit('/', 1)[1]}\" not found")
            return 200, crd()
        if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" and method == "POST":
            return self._access_review(body)
        plural, namespace, name = _parse_path(path)
        verb = {"GET": "get" if name else "list", "POST": "create", "PATCH": "patch",
                "PUT": "update", "DELETE": "delete"}[method]
        self._authorize(verb, plural, namespace, name)
        if method == "GET":
            return (200, self._get(plural, namespace, name) if name
                    else self._list(plural, namespace, query))
        if method == "POST":
            return self._create(plural, namespace, body, query)
        if name is None:
            raise HttpError(405, "MethodNotAllowed", f"{method} needs an object name")
        if method == "PUT":
            return 200, self._update(plural, namespace, name, body)
        if method == "PATCH":
            return 200, self._patch(plural, namespace, name, body, query,
                                    headers.get("Content-Type", ""))
        return 200, self._delete(plural, namespace, name)

    def _discovery(self) -> tuple[int, Obj]:
        if not self.crd_installed:
            raise HttpError(404, "NotFound", "the server could not find the requested resource")
        return 200, {"kind": "APIResourceList", "apiVersion": "v1",
                     "groupVersion": "chaos-mesh.org/v1alpha1",
                     "resources": [{"name": "stresschaos", "singularName": "stresschaos",
                                    "namespaced": True, "kind": "StressChaos",
                                    "verbs": ["create", "delete", "get", "list", "patch",
                                              "update", "watch"]}]}

    def _access_review(self, body: Obj) -> tuple[int, Obj]:
        self.verbs.add(("create", "selfsubjectaccessreviews"))
        if ("create", "selfsubjectaccessreviews") in self.denied:
            raise HttpError(403, "Forbidden", f'selfsubjectaccessreviews.authorization.k8s.io is '
                            f'forbidden: User "{USER}" cannot create resource '
                            '"selfsubjectaccessreviews"')
        attrs = body["spec"]["resourceAttributes"]
        resource = "/".join(filter(None, (attrs["resource"], attrs.get("subresource"))))
        allowed = (attrs["verb"], resource) not in self.denied
        body["status"] = {"allowed": allowed, "reason": "" if allowed else "no RBAC rule"}
        return 201, body

    def _authorize(self, verb: str, plural: str, namespace: str, name: str | None) -> None:
        self.verbs.add((verb, plural))
        if (verb, plural) in self.denied:
            group = RESOURCES[plural.split("/")[0]][0]
            what = f'{plural}.{group}' if group else plural
            target = f' "{name}"' if name else ""
            raise HttpError(403, "Forbidden",
                            f'{what}{target} is forbidden: User "{USER}" cannot {verb} resource '
                            f'"{plural}" in API group "{group}" in the namespace "{namespace}"')
        if plural == "stresschaos" and not self.crd_installed:
            raise HttpError(404, "NotFound", "the server could not find the requested resource")

    # --- verbs --------------------------------------------------------------------------

    def _pod_log(self, path: str, query: dict[str, str]) -> str:
        match = _POD_LOG.match(path)
        assert match is not None
        namespace, name = match["ns"], match["name"]
        self._authorize("get", "pods/log", namespace, name)
        with self.cond:
            pod = copy.deepcopy(self.get("pods", namespace, name))
            started = self.started.get((namespace, name))
        if pod is None or started is None:
            raise HttpError(404, "NotFound", f'pods "{name}" not found')
        containers = pod["spec"]["containers"]
        wanted = query.get("container")
        if not wanted:
            if len(containers) > 1:
                names = " ".join(c["name"] for c in containers)
                raise HttpError(400, "BadRequest", f"a container name must be specified for pod "
                                f"{name}, choose one of: [{names}]")
            wanted = containers[0]["name"]
        container = next((c for c in containers if c["name"] == wanted), None)
        if container is None:
            raise HttpError(400, "BadRequest", f"container {wanted} is not valid for pod {name}")
        now = self.now()
        since = float(query["sinceSeconds"]) if "sinceSeconds" in query else None
        lines = [(at, line) for at, line in self._runtime_output(pod, container, started, now)
                 if since is None or at >= now - since]
        stamps = query.get("timestamps") in ("1", "true")
        text = "".join(f"{_log_stamp(at)} {line}\n" if stamps else f"{line}\n"
                       for at, line in lines)
        limit = int(query.get("limitBytes") or 0)
        return text[:limit] if limit else text

    def _pod_proxy(self, path: str, query: dict[str, str]) -> tuple[int, bytes]:
        match = _POD_PROXY.match(path)
        assert match is not None
        namespace, name, port = match["ns"], match["name"], int(match["port"])
        self._authorize("get", "pods/proxy", namespace, name)
        with self.cond:
            pod = self.get("pods", namespace, name)
            chaos = [o["metadata"]["name"] for o in self.items("stresschaos", namespace)]
            self.proxied.append((path, chaos))
        if pod is None:
            raise HttpError(404, "NotFound", f'pods "{name}" not found')
        if port != self.pprof_port:
            raise HttpError(503, "ServiceUnavailable", f"error trying to reach service: dial "
                            f"tcp 10.244.0.7:{port}: connect: connection refused")
        route = match["rest"] or "/"
        seconds = query.get("seconds", "30")
        body = f"{name} {route} {seconds}s".encode()
        if route == "/debug/pprof/trace":
            return 200, b"go 1.25 trace\x00\x00\x00" + body
        if route == "/debug/pprof/profile":
            return 200, gzip.compress(body)
        return 404, b"404 page not found\n"

    def _runtime_output(self, pod: Obj, container: Obj, started: float,
                        now: float) -> Iterator[tuple[float, str]]:
        """What the container printed since it started: the program's own line every second
        and, with GODEBUG schedtrace, the Go runtime's SCHED lines."""
        godebug = next((str(e.get("value", "")) for e in container.get("env") or []
                        if e.get("name") == "GODEBUG"), "")
        period = next((int(v) for k, _, v in (i.partition("=") for i in godebug.split(","))
                       if k == "schedtrace" and v.isdigit() and int(v) > 0), None)
        runnable = self.log_runnable.get(pod["metadata"]["name"])
        recorded = _recorded_sched()
        events: list[tuple[float, str]] = [
            (started + k, f'level=info msg="served" n={k}') for k in range(int(now - started) + 1)]
        if period is not None:
            for k in range(int((now - started) * 1000 // period) + 1):
                body = recorded[k % len(recorded)]
                if runnable is not None:
                    body = re.sub(r"runqueue=\d+", f"runqueue={runnable}", body)
                events.append((started + k * period / 1000, f"SCHED {k * period}ms: {body}"))
        return iter(sorted(e for e in events if e[0] <= now))

    def _get(self, plural: str, namespace: str, name: str) -> Obj:
        obj = self.get(plural, namespace, name)
        if obj is None:
            raise HttpError(404, "NotFound", f'{_resource(plural)} "{name}" not found')
        return obj

    def _list(self, plural: str, namespace: str, query: dict[str, str]) -> Obj:
        with self.cond:
            items = [o for o in self.items(plural, namespace) if _selected(o, query)]
            version = str(self.rv)
        group, api_version, kind = RESOURCES[plural]
        return {"apiVersion": f"{group}/{api_version}" if group else api_version,
                "kind": f"{kind}List", "metadata": {"resourceVersion": version}, "items": items}

    def _update(self, plural: str, namespace: str, name: str, body: Obj) -> Obj:
        if plural != "leases":
            raise HttpError(405, "MethodNotAllowed", f"the fake does not update {plural}")
        with self.cond:
            current = self._get(plural, namespace, name)
            if body.get("metadata", {}).get("resourceVersion") != (
                    current["metadata"]["resourceVersion"]):
                raise HttpError(409, "Conflict", f'Operation cannot be fulfilled on '
                                f'{_resource(plural)} "{name}": the object has been modified; '
                                "please apply your changes to the latest version and try again")
            updated = copy.deepcopy(body)
            updated["metadata"] = {**current["metadata"], **updated["metadata"]}
            return copy.deepcopy(self._store(plural, updated, "MODIFIED"))

    def _create(self, plural: str, namespace: str, body: Obj,
                query: dict[str, str]) -> tuple[int, Obj]:
        if plural == "leases":
            with self.cond:
                name = body.get("metadata", {}).get("name", "")
                if (plural, namespace, name) in self.objects:
                    raise HttpError(409, "AlreadyExists",
                                    f'{_resource(plural)} "{name}" already exists')
                body["metadata"]["namespace"] = namespace
                return 201, copy.deepcopy(self._store(plural, body, "ADDED"))
        if plural == "pods":
            return 201, self._create_pod(namespace, body, query)
        if plural != "stresschaos":
            raise HttpError(405, "MethodNotAllowed", f"the fake does not create {plural}")
        name = body.get("metadata", {}).get("name", "")
        if self.webhook_denial is not None:
            raise HttpError(403, "Forbidden", 'admission webhook "vauth.kb.io" denied the '
                            f"request: {self.webhook_denial}")
        body = self._admit_chaos(body, strict=query.get("fieldValidation") == "Strict")
        body["metadata"]["namespace"] = namespace
        with self.cond:
            if ("stresschaos", namespace, name) in self.objects:
                raise HttpError(409, "AlreadyExists",
                                f'{_resource(plural)} "{name}" already exists')
            if query.get("dryRun") == "All":
                return 201, body
            body["metadata"]["generation"] = 1
            self.created_chaos.append(copy.deepcopy(body))
            stored = self._store("stresschaos", body, "ADDED")
            self._later(self.delay, lambda: self._chaos_select(namespace, name))
            return 201, copy.deepcopy(stored)

    def _create_pod(self, namespace: str, body: Obj, query: dict[str, str]) -> Obj:
        """A bare pod (the load generator): validated against the Pod schema (unknown fields are
        400 with fieldValidation=Strict, as apiserver's strict decoding), Pending, then Running
        and Ready after ``delay`` as the kubelet reports it; ``pod_failure`` makes it end Failed
        with that reason instead (an image that cannot be pulled)."""
        try:
            kubernetes_validate.validate(body, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise HttpError(400, "BadRequest", f"Pod in version \"v1\" cannot be handled as a "
                            f"Pod: {str(e).splitlines()[0]}") from None
        name = body.get("metadata", {}).get("name", "")
        body["metadata"]["namespace"] = namespace
        body["status"] = {"phase": "Pending", "conditions": [
            {"type": "Ready", "status": "False"}]}
        with self.cond:
            if ("pods", namespace, name) in self.objects:
                raise HttpError(409, "AlreadyExists", f'pods "{name}" already exists')
            stored = self._store("pods", body, "ADDED")
            self.created_pods.append(copy.deepcopy(body))
        container = body["spec"]["containers"][0]["name"]
        if self.pod_failure is not None:
            status: Obj = {"phase": "Pending", "containerStatuses": [{
                "name": container, "ready": False, "restartCount": 0,
                "state": {"waiting": {"reason": self.pod_failure, "message": "fake"}}}]}
        else:
            status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                      "containerStatuses": [{"name": container, "ready": True,
                                             "restartCount": 0, "containerID": _container_id(),
                                             "state": {"running": {}}}]}
        self._later(self.delay, lambda: self._start_pod(body, status))
        return copy.deepcopy(stored)

    def _admit_chaos(self, body: Obj, strict: bool) -> Obj:
        name = body.get("metadata", {}).get("name", "")
        schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        unknown = [e for e in jsonschema.Draft7Validator(tighten(schema)).iter_errors(body)
                   if e.validator == "additionalProperties"]
        if unknown and strict:
            fields = [f'unknown field "{".".join(map(str, e.path))}"' for e in unknown]
            raise HttpError(400, "BadRequest", f'StressChaos in version "v1alpha1" cannot be '
                            f'handled as a StressChaos: strict decoding error: {", ".join(fields)}')
        body = _prune(copy.deepcopy(body), schema)
        invalid = list(jsonschema.Draft7Validator(schema).iter_errors(body))
        if invalid:
            details = "; ".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in invalid)
            raise HttpError(422, "Invalid", f'StressChaos.chaos-mesh.org "{name}" is invalid: '
                            f"{details}")
        return body

    def _patch(self, plural: str, namespace: str, name: str, patch: Obj, query: dict[str, str],
               content_type: str) -> Obj:
        if plural != "deployments":
            raise HttpError(405, "MethodNotAllowed", f"the fake does not patch {plural}")
        with self.cond:
            current = self._get(plural, namespace, name)
            updated = copy.deepcopy(current)
            if "strategic-merge-patch" in content_type:
                _strategic_merge(updated, patch)
            elif "merge-patch" in content_type:
                _strategic_merge(updated, _without_directives(patch))
            else:
                raise HttpError(415, "UnsupportedMediaType", f"{content_type} not supported")
            _validate_deployment(updated, strict=query.get("fieldValidation") == "Strict")
            changed = updated["spec"] != current["spec"]
            if changed:
                updated["metadata"]["generation"] = current["metadata"]["generation"] + 1
            if query.get("dryRun") == "All":
                return updated
            if updated == current:
                return current
            stored = self._store("deployments", updated, "MODIFIED")
            if changed:
                self._start_rollout(namespace, name, updated["metadata"]["generation"])
            return copy.deepcopy(stored)

    def _delete(self, plural: str, namespace: str, name: str) -> Obj:
        if plural == "leases":
            with self.cond:
                obj = self._get(plural, namespace, name)
                self._store(plural, obj, "DELETED")
                return copy.deepcopy(obj)
        if plural == "pods":
            with self.cond:
                obj = self._get(plural, namespace, name)
                self._store(plural, obj, "DELETED")
                self.deleted_pods.append(name)
                return copy.deepcopy(obj)
        if plural != "stresschaos":
            raise HttpError(405, "MethodNotAllowed", f"the fake does not delete {plural}")
        with self.cond:
            obj = self.objects.get((plural, namespace, name))
            if obj is None:
                raise HttpError(404, "NotFound", f'{_resource(plural)} "{name}" not found')
            if not obj["metadata"].get("finalizers"):
                self._store(plural, obj, "DELETED")
                return copy.deepcopy(obj)
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = _now()
                self._store(plural, obj, "MODIFIED")
            self._later(self.delay, lambda: self._chaos_recover(namespace, name))
            return copy.deepcopy(obj)

    # --- watch --------------------------------------------------------------------------

    def _watch(self, h: _Handler, path: str, query: dict[str, str]) -> None:
        plural, namespace, _ = _parse_path(path)
        self._authorize("watch", plural, namespace, None)
        timeout = float(query.get("timeoutSeconds") or 5)
        deadline = time.monotonic() + timeout
        h.start_stream()
        try:
            for event in self._events(plural, namespace, query, deadline):
                fault = self._watch_fault(plural, event)
                if fault is not None:
                    h.write_chunk(fault)
                    break
                h.write_chunk(json.dumps(event).encode() + b"\n")
            h.end_stream()
        except (BrokenPipeError, ConnectionResetError):
            return

    def _watch_fault(self, plural: str, event: Obj) -> bytes | None:
        """What to send instead of ``event`` when a fault is armed for this kind."""
        if event.get("type") == "BOOKMARK":
            return None
        with self.cond:
            fault = next((f for p, f in self.watch_faults if p == plural), None)
            if fault is None:
                return None
            self.watch_faults.remove((plural, fault))
        if fault == "cut":
            return json.dumps(event).encode()[:40]  # torn inside the event, then the end
        code, reason, message = {
            "500": (500, "InternalError", "etcdserver: request timed out"),
            # staging/src/k8s.io/apiserver/pkg/storage/cacher: a watch cache behind the
            # requested revision answers "Too large resource version" (504, Timeout).
            "504": (504, "Timeout", f"Too large resource version: {self.rv + 5}, current: "
                                    f"{self.rv}"),
        }[fault]
        status = _status(code, reason, message)
        if fault == "504":
            status["details"] = {"causes": [{"reason": "ResourceVersionTooLarge",
                                             "message": "Too large resource version"}]}
        return json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"

    def _events(self, plural: str, namespace: str, query: dict[str, str],
                deadline: float) -> Iterator[Obj]:
        since = query.get("resourceVersion") or "0"
        first: list[Obj] = []
        with self.cond:
            if since == "0":
                first = [{"type": "ADDED", "object": o} for o in self.items(plural, namespace)
                         if _selected(o, query)]
                since = str(self.rv)
            elif int(since) < self.oldest_rv or self.expire_next_watch:
                self.expire_next_watch = False
                first = [{"type": "ERROR", "object": _status(
                    410, "Expired", f"too old resource version: {since} ({self.rv})")}]
                since = ""
        yield from first
        if not since:
            return
        last = int(since)
        while True:
            with self.cond:
                pending = [(rv, t, o) for rv, t, p, o in self.history
                           if rv > last and p == plural
                           and o["metadata"].get("namespace") == namespace]
                if not pending:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self.stopping:
                        group, version, kind = RESOURCES[plural]
                        yield {"type": "BOOKMARK", "object": {
                            "kind": kind, "apiVersion": f"{group}/{version}".lstrip("/"),
                            "metadata": {"resourceVersion": str(self.rv)}}}
                        return
                    self.cond.wait(remaining)
                    continue
                last = pending[-1][0]
            for _, kind, obj in pending:
                if _selected(obj, query):
                    yield {"type": kind, "object": copy.deepcopy(obj)}

    # --- the Deployment controller ------------------------------------------------------
    # Follows kubernetes/kubernetes pkg/controller/deployment: a template change gets a new
    # ReplicaSet named <deployment>-<pod-template-hash> owned by the Deployment, or reuses the
    # old one with the same template (sync.go getNewReplicaSet / util.FindNewReplicaSet); the
    # status counts only active pods (replica_set.go calculateStatus, FilterActivePods); the
    # observed generation is written before the rollout progresses, with the Progressing
    # condition left as it was (progress.go syncRolloutStatus only replaces it on progress, so a
    # reused ReplicaSet keeps an old ProgressDeadlineExceeded until then); a paused Deployment
    # is not rolled out (sync.go checkPausedConditions: Progressing=Unknown DeploymentPaused).

    def _replicaset_for(self, dep: Obj) -> Obj:
        """The ReplicaSet of the Deployment's current template, created if missing."""
        template = copy.deepcopy(dep["spec"]["template"])
        template["metadata"]["labels"].pop("pod-template-hash", None)
        pod_hash = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        namespace, name = dep["metadata"]["namespace"], f"{dep['metadata']['name']}-{pod_hash}"
        existing = self.objects.get(("replicasets", namespace, name))
        if existing is not None:
            return existing
        template["metadata"]["labels"]["pod-template-hash"] = pod_hash
        selector = copy.deepcopy(dep["spec"]["selector"])
        selector.setdefault("matchLabels", {})["pod-template-hash"] = pod_hash
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": {"name": name, "namespace": namespace,
                           "labels": dict(template["metadata"]["labels"]),
                           "creationTimestamp": _now_precise(),
                           "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                "name": dep["metadata"]["name"],
                                                "uid": dep["metadata"]["uid"],
                                                "controller": True}]},
              "spec": {"replicas": 0, "selector": selector, "template": template},
              "status": {"replicas": 0}}
        return self._store("replicasets", rs, "ADDED")

    def _scale_rs(self, rs: Obj, replicas: int) -> None:
        rs["spec"]["replicas"] = replicas
        rs["status"] = {"replicas": replicas, "readyReplicas": replicas,
                        "availableReplicas": replicas}
        self._store("replicasets", rs, "MODIFIED")

    def _new_pod(self, dep: Obj, rs: Obj) -> Obj:
        template = copy.deepcopy(rs["spec"]["template"])
        name = f"{rs['metadata']['name']}-{uuid.uuid4().hex[:5]}"
        containers = template["spec"]["containers"]
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": dep["metadata"]["namespace"],
                         "labels": dict(template["metadata"]["labels"]),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": rs["metadata"]["name"],
                                              "uid": rs["metadata"]["uid"],
                                              "controller": True}]},
            "spec": {**template["spec"], "nodeName": "node-1"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": c["name"], "containerID": _container_id(),
                                              "restartCount": 0, "ready": True,
                                              "image": c.get("image"),
                                              "imageID": _image_id(c.get("image"))}
                                             for c in containers]},
        }

    def _finish_status(self, dep: Obj, replicas: int, total: int) -> None:
        now = _now()
        dep["status"] = {"observedGeneration": dep["metadata"]["generation"],
                         "replicas": total, "updatedReplicas": replicas,
                         "readyReplicas": replicas, "availableReplicas": min(total, replicas),
                         "conditions": [
                             {"type": "Available", "status": "True", "lastUpdateTime": now,
                              "lastTransitionTime": now, "reason": "MinimumReplicasAvailable"},
                             {"type": "Progressing", "status": "True", "lastUpdateTime": now,
                              "lastTransitionTime": now, "reason": "NewReplicaSetAvailable",
                              "message": f'ReplicaSet "{dep["metadata"]["name"]}" has '
                                         "successfully progressed."}]}
        self._store("deployments", dep, "MODIFIED")

    def _set_progressing(self, dep: Obj, status: str, reason: str, message: str) -> None:
        now = _now()
        conditions = [c for c in dep["status"].get("conditions") or []
                      if c.get("type") != "Progressing"]
        conditions.append({"type": "Progressing", "status": status, "reason": reason,
                           "message": message, "lastUpdateTime": now,
                           "lastTransitionTime": now})
        dep["status"]["conditions"] = conditions

    def _start_rollout(self, namespace: str, name: str, generation: int) -> None:
        dep = self.objects[("deployments", namespace, name)]
        env = {e["name"]: e.get("value")
               for e in dep["spec"]["template"]["spec"]["containers"][0].get("env") or []}
        status = dep.setdefault("status", {})
        status["observedGeneration"] = generation
        if dep["spec"].get("paused"):
            self._set_progressing(dep, "Unknown", "DeploymentPaused", "Deployment is paused")
            self._store("deployments", dep, "MODIFIED")
            return
        rs = self._replicaset_for(dep)
        if not rs["spec"]["replicas"]:
            status["updatedReplicas"] = 0  # a new template: none of its pods exists yet
        self._store("deployments", dep, "MODIFIED")
        if self.rollout == "never" or (self.stuck_when is not None and self.stuck_when(env)):
            if self.progress_deadline is not None:
                self._later(self.progress_deadline,
                            lambda: self._time_out(namespace, name, generation, rs))
            return
        self._later(self.delay, lambda: self._roll(namespace, name, generation))

    def _time_out(self, namespace: str, name: str, generation: int, rs: Obj) -> None:
        dep = self.objects.get(("deployments", namespace, name))
        if dep is None or dep["metadata"]["generation"] != generation:
            return
        self._set_progressing(dep, "False", "ProgressDeadlineExceeded",
                              f'ReplicaSet "{rs["metadata"]["name"]}" has timed out progressing.')
        self._store("deployments", dep, "MODIFIED")

    def _roll(self, namespace: str, name: str, generation: int) -> None:
        dep = self.objects.get(("deployments", namespace, name))
        if dep is None or dep["metadata"]["generation"] != generation:
            return  # superseded by a newer spec
        rs = self._replicaset_for(dep)
        old = [p for p in self.pods_of(namespace, name)
               if _controller_uid(p) != rs["metadata"]["uid"]]
        replicas = int(dep["spec"]["replicas"])
        for pod in old:
            pod["metadata"]["deletionTimestamp"] = _now()
            self._store("pods", pod, "MODIFIED")
        for other in self.items("replicasets", namespace):
            if (_controller_uid(other) == dep["metadata"]["uid"]
                    and other["metadata"]["uid"] != rs["metadata"]["uid"]):
                self._scale_rs(self.objects[("replicasets", namespace,
                                             other["metadata"]["name"])], 0)
        current = [p for p in self.pods_of(namespace, name)
                   if _controller_uid(p) == rs["metadata"]["uid"]]
        for _ in range(replicas - len(current)):
            pod = self._new_pod(dep, rs)
            if self.pod_start_delay:
                running = copy.deepcopy(pod["status"])
                pod["status"] = {"phase": "Pending", "conditions": [
                    {"type": "Ready", "status": "False"}]}
                self._later(self.pod_start_delay, functools.partial(self._start_pod, pod, running))
            self._store("pods", pod, "ADDED")
        self._scale_rs(rs, replicas)
        self._finish_status(dep, replicas, replicas + len(old))
        self._later(self.delay, lambda: self._reap(namespace, name, generation, old))

    def _start_pod(self, pod: Obj, status: Obj) -> None:
        key = ("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
        if key in self.objects:
            self.objects[key]["status"] = status
            self._store("pods", self.objects[key], "MODIFIED")

    def _reap(self, namespace: str, name: str, generation: int, old: list[Obj]) -> None:
        for pod in old:
            if ("pods", namespace, pod["metadata"]["name"]) in self.objects:
                self._store("pods", pod, "DELETED")
        dep = self.objects.get(("deployments", namespace, name))
        if dep is not None and dep["metadata"]["generation"] == generation:
            replicas = int(dep["spec"]["replicas"])
            self._finish_status(dep, replicas, replicas)

    # --- the Chaos Mesh controller ------------------------------------------------------

    def _event(self, obj: Obj, kind: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        self._store("events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}",
                         "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "StressChaos",
                               "name": meta["name"], "namespace": meta["namespace"],
                               "uid": meta["uid"]},
            "reason": reason, "message": message, "type": kind, "count": 1,
            "source": {"component": "chaos-controller-manager"},
            "firstTimestamp": _now(), "lastTimestamp": _now()}, "ADDED")

    def _chaos_select(self, namespace: str, name: str) -> None:
        obj = self.objects.get(("stresschaos", namespace, name))
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        obj["metadata"]["finalizers"] = [FINALIZER]
        if self.chaos == "conflict-events" and not obj.get("status"):
            # chaos-mesh controllers/common/records/controller.go: a failed status update is
            # recorded as Failed{Activity: "update records"} and the object is requeued.
            self._event(obj, "Warning", "Failed", "Failed to update records: Operation cannot be "
                        f'fulfilled on stresschaos.chaos-mesh.org "{name}": the object has been '
                        "modified; please apply your changes to the latest version and try again")
            obj["status"] = {"experiment": {"desiredPhase": "Run"}}
            self._store("stresschaos", obj, "MODIFIED")
            self._later(self.delay * 5, lambda: self._chaos_select(namespace, name))
            return
        self._event(obj, "Normal", "FinalizerInited", "Finalizer has been inited")
        pods = [] if self.chaos == "select-nothing" else self._select(obj)
        if not pods:
            # pkg/selector/pod/selector.go ErrNoPodSelected, recorded as
            # Failed{Activity: "select targets"} (controllers/common/records/controller.go).
            self._event(obj, "Warning", "Failed",
                        "Failed to select targets: no pod is selected")
            obj["status"] = {"experiment": {"desiredPhase": "Run"}}
            self._store("stresschaos", obj, "MODIFIED")
            return
        containers = obj["spec"].get("containerNames") or []
        records = []
        for pod in pods:
            container = containers[0] if containers else pod["spec"]["containers"][0]["name"]
            records.append({"id": f"{namespace}/{pod['metadata']['name']}/{container}",
                            "selectorKey": ".", "phase": "Not Injected", "injectedCount": 0,
                            "recoveredCount": 0, "events": []})
        obj["status"] = {"experiment": {"desiredPhase": "Run", "containerRecords": records}}
        self._store("stresschaos", obj, "MODIFIED")
        if self.chaos == "never-inject":
            self._event(obj, "Warning", "Failed",
                        "Failed to apply chaos: rpc error: chaos-daemon unreachable")
            return
        self._later(self.delay, lambda: self._chaos_inject(namespace, name))

    def _select(self, obj: Obj) -> list[Obj]:
        selector = obj["spec"]["selector"]
        if selector.get("pods"):
            # pkg/selector/pod/selector.go selectSpecifiedPods: named pods as they are (no
            # other selector applies), missing ones skipped, only the object's namespace
            # (namespace-scoped mode).
            own = obj["metadata"]["namespace"]
            return [pod for ns, names in selector["pods"].items() if ns == own
                    for name in names
                    if (pod := self.objects.get(("pods", ns, name))) is not None]
        labels = selector.get("labelSelectors") or {}
        phases = selector.get("podPhaseSelectors") or []
        chosen = []
        for ns in selector.get("namespaces") or [obj["metadata"]["namespace"]]:
            for pod in self.items("pods", ns):
                pod_labels = pod["metadata"].get("labels") or {}
                if all(pod_labels.get(k) == v for k, v in labels.items()) and (
                        not phases or pod["status"]["phase"] in phases):
                    chosen.append(pod)
        return chosen

    def _chaos_inject(self, namespace: str, name: str) -> None:
        obj = self.objects.get(("stresschaos", namespace, name))
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        instances = {}
        for record in obj["status"]["experiment"]["containerRecords"]:
            record.update(phase="Injected", injectedCount=1)
            record["events"].append({"operation": "Apply", "type": "Succeeded",
                                     "timestamp": _now()})
            instances[record["id"]] = {"uid": str(10000 + len(self.injected)),
                                       "startTime": _now()}
        obj["status"]["instances"] = instances
        self._event(obj, "Normal", "Applied", "Successfully apply chaos")
        self._store("stresschaos", obj, "MODIFIED")
        records = obj["status"]["experiment"]["containerRecords"]
        pods = sorted(r["id"].split("/")[1] for r in records)
        self.injected.append(Injected(name, pods, obj["spec"]["stressors"]["cpu"]["workers"],
                                      time.time()))
        self._autoscale(namespace, pods)

    def _chaos_recover(self, namespace: str, name: str) -> None:
        obj = self.objects.get(("stresschaos", namespace, name))
        if obj is None or self.chaos == "stuck-deleting":
            return
        experiment = (obj.get("status") or {}).get("experiment") or {}
        if self.chaos == "recover-fails":
            # v2.8.3 records/controller.go: Recover() failed -> the record keeps "Injected", a
            # Failed{Activity: "recover chaos"} event, and no requeue for a deleted object.
            experiment["desiredPhase"] = "Stop"
            self._event(obj, "Warning", "Failed", "Failed to recover chaos: rpc error: code = "
                        "Unknown desc = cancel stress-ng: no such process")
            self._store("stresschaos", obj, "MODIFIED")
            return
        for record in experiment.get("containerRecords") or []:
            if record["phase"] == "Injected":
                record.update(phase="Not Injected", recoveredCount=1)
        experiment["desiredPhase"] = "Stop"
        self._store("stresschaos", obj, "MODIFIED")
        for entry in self.injected:
            if entry.name == name and entry.end is None:
                entry.end = time.time()
        self._later(self.delay, lambda: self._chaos_release(namespace, name))

    def _chaos_release(self, namespace: str, name: str) -> None:
        obj = self.objects.get(("stresschaos", namespace, name))
        if obj is None:
            return
        obj["metadata"]["finalizers"] = []
        self._store("stresschaos", obj, "DELETED")


# --- HTTP plumbing ------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # one response = several writes: no 40 ms delayed-ACK stalls
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _dispatch(self, method: str) -> None:
        self.server.cluster.handle(self, method)  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def send_json(self, code: int, payload: Obj) -> None:
        self.send_bytes(code, json.dumps(payload).encode(), "application/json")

    def send_text(self, code: int, text: str) -> None:
        self.send_bytes(code, text.encode())

    def send_bytes(self, code: int, data: bytes, content_type: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# --- helpers ------------------------------------------------------------------------------

_PATH = re.compile(r"^/apis?/(?:(?P<group>[^/]+)/)?(?P<version>v[^/]+)/"
                   r"(?:namespaces/(?P<ns>[^/]+)/)?(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$")


_POD_PROXY = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/:]+):(?P<port>\d+)"
                        r"/proxy(?P<rest>/.*)?$")
_POD_LOG = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$")
RECORDED_SCHEDTRACE = Path(__file__).parent.parent / "data" / "schedtrace" / "go1.25.5.txt"


@functools.cache
def _recorded_sched() -> list[str]:
    """The bodies (after ``SCHED <t>ms: ``) of a real go1.25 schedtrace recording, its idle
    phases (empty global queue): a service at ease, until ``log_runnable`` says otherwise."""
    return [line.split(": ", 1)[1] for line in RECORDED_SCHEDTRACE.read_text().splitlines()
            if line.startswith("SCHED ") and " runqueue=0 " in line]


def _log_stamp(at: float) -> str:
    """RFC3339NanoFixed, UTC (kubernetes pkg/kubelet/types/constants.go)."""
    seconds, nanos = divmod(round(at * 1e9), 1_000_000_000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{nanos:09d}Z"


def _parse_path(path: str) -> tuple[str, str, str | None]:
    match = _PATH.match(path)
    if match is None or match["plural"] not in RESOURCES:
        raise HttpError(404, "NotFound", "the server could not find the requested resource")
    group, version, _ = RESOURCES[match["plural"]]
    if path.startswith("/api/") != (group == "") or match["version"] != version:
        raise HttpError(404, "NotFound", "the server could not find the requested resource")
    if (match["ns"] is None) != (match["plural"] in CLUSTER_SCOPED):
        raise HttpError(404, "NotFound", "the server could not find the requested resource")
    return match["plural"], match["ns"] or "", match["name"]


def _resource(plural: str) -> str:
    group = RESOURCES[plural][0]
    return f"{plural}.{group}" if group else plural


def _status(code: int, reason: str, message: str) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def _image_id(image: str | None) -> str:
    """What the kubelet reports: the repository and the digest the runtime pulled for a tag."""
    digest = hashlib.sha256((image or "").encode()).hexdigest()
    return f"docker.io/{(image or '').split(':')[0]}@sha256:{digest}"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _now_precise() -> str:
    """A creationTimestamp that orders objects created within the same second."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1e6) % 1000000:06d}Z"


def _controller_uid(obj: Obj) -> str | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _container_id() -> str:
    return "containerd://" + uuid.uuid4().hex + uuid.uuid4().hex


def _field(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _split_terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        terms.append(current.strip())
    return terms


def label_matches(labels: dict[str, str], selector: str) -> bool:
    for term in _split_terms(selector):
        if m := re.match(r"^(\S+)\s+(in|notin)\s+\((.*)\)$", term):
            key, op, values = m[1], m[2], {v.strip() for v in m[3].split(",")}
            if (op == "in") != (labels.get(key) in values):
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = re.split(r"==?", term, maxsplit=1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_matches(obj: Obj, selector: str) -> bool:
    for term in _split_terms(selector):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if _field(obj, key.strip()) == value.strip():
                return False
        else:
            key, value = re.split(r"==?", term, maxsplit=1)
            if _field(obj, key.strip()) != value.strip():
                return False
    return True


def _selected(obj: Obj, query: dict[str, str]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return (label_matches(labels, query.get("labelSelector", ""))
            and field_matches(obj, query.get("fieldSelector", "")))


def _strategic_merge(target: Obj, patch: Obj) -> None:
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _strategic_merge(target[key], value)
        elif isinstance(value, list) and key in MERGE_KEYS and isinstance(target.get(key), list):
            _merge_list(target[key], value, MERGE_KEYS[key])
        elif isinstance(value, list) and key in MERGE_KEYS:
            target[key] = []
            _merge_list(target[key], value, MERGE_KEYS[key])
        else:
            target[key] = _without_directives(copy.deepcopy(value))
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") and isinstance(target.get(key.split("/", 1)[1]),
                                                                list):
            _set_order(target[key.split("/", 1)[1]], value, MERGE_KEYS[key.split("/", 1)[1]])


def _set_order(items: list[Obj], order: list[Obj], key: str) -> None:
    """apimachinery/pkg/util/strategicpatch/patch.go normalizeElementOrder, simplified: the
    elements named in ``$setElementOrder`` come in that order; the others keep their relative
    place after them."""
    rank = {o.get(key): i for i, o in enumerate(order)}
    named = sorted((i for i in items if i.get(key) in rank), key=lambda i: rank[i.get(key)])
    items[:] = named + [i for i in items if i.get(key) not in rank]


def _merge_list(items: list[Obj], patch: list[Obj], key: str) -> None:
    for element in patch:
        if element.get("$patch") == "delete":
            items[:] = [i for i in items if i.get(key) != element.get(key)]
            continue
        existing = next((i for i in items if i.get(key) == element.get(key)), None)
        if existing is None:
            items.append(_without_directives(
                {k: v for k, v in copy.deepcopy(element).items() if v is not None}))
        else:
            _strategic_merge(existing, element)


def _without_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_without_directives(v) for v in value]
    return value


def _validate_deployment(dep: Obj, strict: bool = False) -> None:
    name = dep["metadata"]["name"]
    for i, c in enumerate(dep["spec"]["template"]["spec"]["containers"]):
        where = f"spec.template.spec.containers[{i}]"
        unknown = [f"{where}.env[{j}].{k}" for j, e in enumerate(c.get("env") or [])
                   for k in e if k not in ("name", "value", "valueFrom")]
        if unknown and strict:
            raise HttpError(400, "BadRequest", "strict decoding error: unknown field "
                            + ", ".join(f'"{u}"' for u in unknown))
        if not c.get("image"):
            raise HttpError(422, "Invalid", f'Deployment.apps "{name}" is invalid: '
                            f"{where}.image: Required value")
        for j, e in enumerate(c.get("env") or []):
            if "value" in e and "valueFrom" in e:
                raise HttpError(422, "Invalid", f'Deployment.apps "{name}" is invalid: '
                                f"{where}.env[{j}].valueFrom: Invalid value: \"\": may not be "
                                "specified when `value` is not empty")
            if not isinstance(e.get("value", ""), str):
                raise HttpError(400, "BadRequest", f"{where}.env[{j}].value: expected string")


def _prune(value: Any, schema: Obj) -> Any:
    """What the API server does without Strict: drop fields the schema does not declare."""
    if isinstance(value, dict) and "properties" in schema:
        props = schema["properties"]
        return {k: _prune(v, props[k]) for k, v in value.items() if k in props}
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        return {k: _prune(v, schema["additionalProperties"]) for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(v, schema["items"]) for v in value]
    return value
