"""Chaos Mesh v2.8.3's controller for StressChaos, simulated against the real API server.

No chaos-daemon can run here (there is no container to stress), so the controller is ours to
simulate, but only that: it watches StressChaos through the real API (the real CRD, installed
from autotune's package data, so schema validation and pruning are the API server's) and
writes what v2.8.3 writes, in the order it writes it. Ported from chaos-mesh v2.8.3
(tag v2.8.3, commit 60ec97f1):

- the pipeline (controllers/common/pipeline/pipeline.go, step.go): one reconcile runs
  InitFinalizer, DesiredPhase, Condition, Records, CleanFinalizer in turn; a step asking to be
  requeued ends the pass; one worker (MaxConcurrentReconciles 1); every write is a full-object
  update retried on conflict (retry.DefaultBackoff) after a fresh GET;
- finalizers (controllers/common/finalizers/controller.go): ``chaos-mesh/records`` is added
  with a Normal ``FinalizerInited`` event; on deletion every finalizer goes once every record is
  "Not Injected" (or the ``chaos-mesh.chaos-mesh.org/cleanFinalizer: forced`` annotation), with
  the event whose reason is (sic) ``FinalizerInited`` and message "Finalizer has been removed";
- desired phase (controllers/common/desiredphase/controller.go): Stop when deleted, when
  creationTimestamp + duration has passed, or when paused; else Run; Normal events Started,
  TimeUp, Paused, Deleted; requeued for the end of the duration;
- conditions (controllers/common/condition/controller.go): Selected, AllInjected, AllRecovered,
  Paused, each "True"/"False";
- records (controllers/common/records/controller.go): selection only while there are no
  records; a failed selection is a Warning ``Failed`` "Failed to select targets: no pod is
  selected" and *no requeue*; records ``<ns>/<pod>/<container>`` start "Not Injected"; Apply or
  Recover by desiredPhase; a failed one appends a Failed entry to the record's events, emits
  "Failed to apply chaos: <err>" / "Failed to recover chaos: <err>" and requeues with backoff;
  a failed records write is "Failed to update records: <err>" and a requeue;
- StressChaos itself (controllers/chaosimpl/stresschaos/impl.go, chaosimpl/utils/record.go):
  ``status.instances[<record id>] = {uid: <stress-ng instance>, startTime}`` for a CPU
  stressor, ``{memoryUid: <memStress instance>, memoryStartTime}`` for a memory one (both for
  both); a pod or container that is gone counts as recovered; a chaos-daemon that cannot be
  reached is a failed Recover (record stays Injected, event, requeue); **a CancelStressors
  error returns (Injected, nil): the record stays Injected with no event, no status write and
  no requeue**, so a deleted object keeps its finalizer;
- the pod selector for ``selector.pods`` (pkg/selector/pod/selector.go selectSpecifiedPods):
  the named pods as they are, whatever their phase, skipping missing ones and other namespaces;
  ``mode: all`` keeps all; the first container when ``containerNames`` is empty;
- the webhooks (api/v1alpha1/zz_generated.chaosmesh.go, stresschaos_webhook.go): a real
  validating and mutating admission webhook served over HTTPS on 127.0.0.1 and registered with
  the API server: "Cannot update chaos spec" on a spec change, "missing stressors", duration
  parse errors; the mutating one sets ``selector.namespaces`` to the object's namespace.

What the tests can turn on (attributes of ``ChaosMesh``): ``daemon_unreachable`` (decode
error: Apply and Recover fail with an event and are retried), ``cancel_fails`` (CancelStressors
fails: the stress stays, silently), ``exec_fails`` (ExecStressors fails), ``select_nothing``
(the controller's cache has not seen the pods), ``conflict_once`` (the first records write
loses a conflict), ``stopped`` (chaos-controller-manager is down: nothing happens at all).
``injections`` is what chaos-daemon would have run: which pods, when, until when.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import heapq
import itertools
import json
import re
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.controlplane.cluster import Admin, ApiFailure
from tests.controlplane.watch import Informer

Obj = dict[str, Any]

FINALIZER = "chaos-mesh/records"
CLEAN_FINALIZER = "chaos-mesh.chaos-mesh.org/cleanFinalizer"
PAUSE = "experiment.chaos-mesh.org/pause"
NOT_INJECTED, INJECTED = "Not Injected", "Injected"
GROUP_PATH = "/apis/chaos-mesh.org/v1alpha1"
_instance_ids = itertools.count(20001)


@dataclass
class Injection:
    """The processes chaos-daemon would have started for one record: stress-ng for the CPU
    stressor, memStress for the memory one (pkg/chaosdaemon/stress_server_linux.go)."""

    name: str
    pod: str
    workers: int
    load: int | None
    start: float
    end: float | None = None
    memory: dict[str, Any] | None = None
    """The memory stressor's workers and size, when given."""


class Requeue(Exception):
    """A step asks for the object to be reconciled again (with backoff)."""


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def go_duration(text: str) -> float | None:
    """time.ParseDuration for what StressChaos durations use (e.g. "65s", "1m30s", "500ms")."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * units[u] for n, u in parts)


class ChaosMesh:
    """The simulated chaos-controller-manager for the StressChaos of one namespace."""

    def __init__(self, admin: Admin, namespace: str, delay: float = 0.02) -> None:
        self.admin, self.namespace, self.delay = admin, namespace, delay
        self.daemon_unreachable = False
        self.cancel_fails = False
        self.exec_fails: str | None = None
        self.select_nothing = False
        self.conflict_once = False
        self.stopped = False
        self.injections: list[Injection] = []
        self.on_inject: list[Any] = []
        """Called with the pods a records write is about to report Injected (before it): what
        the stress does to the world at once (an autoscaler seeing the CPU rise)."""
        self.reconciles = 0
        self._queue: list[tuple[float, int, str]] = []
        self._failures: dict[str, int] = {}
        self._cv = threading.Condition()
        self._seq = itertools.count()
        self._done = threading.Event()
        self._informer = Informer(admin, f"{GROUP_PATH}/namespaces/{namespace}/stresschaos",
                                  self._on_event, f"chaos-mesh-{namespace}")
        self._worker = threading.Thread(target=self._work, name=f"chaos-{namespace}",
                                        daemon=True)
        self._last_seen: dict[str, Obj] = {}

    def start(self) -> ChaosMesh:
        self._worker.start()
        self._informer.start()
        return self

    def stop(self) -> None:
        self._done.set()
        with self._cv:
            self._cv.notify_all()
        self._informer.stop()
        self._worker.join(timeout=5)

    # --- queue -------------------------------------------------------------------------

    def _on_event(self, kind: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self._last_seen.pop(name, None)
            return
        before = self._last_seen.get(name)
        self._last_seen[name] = obj
        # fx.go StatusRecordEventsChangePredicate: a change of the records' events alone does
        # not trigger a reconcile.
        if before is not None and _without_record_events(before) == _without_record_events(obj):
            return
        self.enqueue(name)

    def enqueue(self, name: str, after: float = 0.0) -> None:
        with self._cv:
            heapq.heappush(self._queue, (time.monotonic() + after, next(self._seq), name))
            self._cv.notify_all()

    def _work(self) -> None:
        while not self._done.is_set():
            with self._cv:
                while not self._done.is_set():
                    if self._queue and self._queue[0][0] <= time.monotonic():
                        _, _, name = heapq.heappop(self._queue)
                        # One queue entry per object at a time, as a workqueue dedups.
                        self._queue = [q for q in self._queue if q[2] != name]
                        heapq.heapify(self._queue)
                        break
                    wait = self._queue[0][0] - time.monotonic() if self._queue else 1.0
                    self._cv.wait(timeout=max(0.001, min(wait, 1.0)))
                else:
                    return
            if self.stopped:
                self.enqueue(name, 0.2)  # the manager is down: the object waits for it
                continue
            time.sleep(self.delay)
            try:
                self.reconcile(name)
                self._failures.pop(name, None)
            except Requeue:
                n = self._failures.get(name, 0) + 1
                self._failures[name] = n
                self.enqueue(name, min(0.005 * 2 ** n, 2.0))  # the workqueue's backoff, capped
            except ApiFailure:
                self.enqueue(name, 0.1)

    # --- one reconcile (pipeline.go) ------------------------------------------------------

    def _path(self, name: str = "") -> str:
        base = f"{GROUP_PATH}/namespaces/{self.namespace}/stresschaos"
        return f"{base}/{name}" if name else base

    def _get(self, name: str) -> Obj | None:
        return self.admin.get(self._path(name))

    def _update(self, name: str, change: Any) -> Obj | None:
        """retry.RetryOnConflict(DefaultBackoff): a fresh GET, the change, a full update."""
        for attempt in range(4):
            obj = self._get(name)
            if obj is None:
                return None
            change(obj)
            try:
                updated: Obj = self.admin.replace(self._path(name), obj)
                return updated
            except ApiFailure as e:
                if e.status != 409 or attempt == 3:
                    raise
                time.sleep(0.01 * 5 ** attempt)
        return None

    def reconcile(self, name: str) -> None:
        self.reconciles += 1
        requeue_after: float | None = None
        for step in (self._init_finalizer, self._desired_phase, self._conditions,
                     self._records, self._clean_finalizer):
            obj = self._get(name)
            if obj is None:
                return
            after = step(obj)
            if after is not None:
                requeue_after = after if requeue_after is None else min(requeue_after, after)
        if requeue_after is not None and requeue_after > 0:
            self.enqueue(name, requeue_after)

    # finalizers/controller.go InitReconciler
    def _init_finalizer(self, obj: Obj) -> float | None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") or FINALIZER in (meta.get("finalizers") or []):
            return None
        self._event(obj, "Normal", "FinalizerInited", "Finalizer has been inited",
                    "initFinalizers", {"chaos-mesh.org/type": "finalizer-inited"})
        self._update(meta["name"], lambda o: o["metadata"].__setitem__(
            "finalizers", [*(o["metadata"].get("finalizers") or []), FINALIZER]))
        self._event(obj, "Normal", "Updated", "Successfully update finalizer of resource",
                    "initFinalizers", {"chaos-mesh.org/type": "updated",
                                       "chaos-mesh.org/field": "finalizer"})
        return None

    # desiredphase/controller.go CalcDesiredPhase
    def _desired_phase(self, obj: Obj) -> float | None:
        meta = obj["metadata"]
        status = obj.get("status") or {}
        current = (status.get("experiment") or {}).get("desiredPhase", "")
        requeue = None
        if meta.get("deletionTimestamp"):
            want, events = "Stop", [("Deleted", "Experiment has been deleted")]
        else:
            seconds = go_duration(str(obj["spec"].get("duration") or ""))
            stop_at = (_epoch(meta["creationTimestamp"]) + seconds
                       if seconds is not None else None)
            if stop_at is not None and stop_at < time.time():
                want, events = "Stop", [("TimeUp", "Time up according to the duration")]
            else:
                requeue = (stop_at - time.time()) if stop_at is not None else None
                if (meta.get("annotations") or {}).get(PAUSE) == "true":
                    want, events = "Stop", [("Paused", "Experiment has been paused")]
                else:
                    want, events = "Run", [("Started", "Experiment has started")]
        if want != current:
            for reason, message in events:
                self._event(obj, "Normal", reason, message, "desiredphase", {})

            def set_phase(o: Obj) -> None:
                o.setdefault("status", {}).setdefault("experiment", {})["desiredPhase"] = want

            self._update(meta["name"], set_phase)
        return requeue

    # condition/controller.go
    def _conditions(self, obj: Obj) -> float | None:
        records = ((obj.get("status") or {}).get("experiment") or {}).get("containerRecords")
        paused = (obj["metadata"].get("annotations") or {}).get(PAUSE) == "true"
        want = {
            "Selected": records is not None,
            "AllInjected": records is not None and all(r["phase"] == INJECTED
                                                       for r in records),
            "AllRecovered": records is not None and all(r["phase"] == NOT_INJECTED
                                                        for r in records),
            "Paused": paused,
        }
        conditions = [{"type": k, "status": "True" if v else "False", "reason": ""}
                      for k, v in want.items()]
        have = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions")
                or []}
        if have != {c["type"]: c["status"] for c in conditions}:
            self._update(obj["metadata"]["name"], lambda o: o.setdefault("status", {})
                         .__setitem__("conditions", conditions))
        return None

    # records/controller.go Reconcile
    def _records(self, obj: Obj) -> float | None:
        name = obj["metadata"]["name"]
        status = obj.get("status") or {}
        experiment = status.get("experiment") or {}
        records = copy.deepcopy(experiment.get("containerRecords"))
        instances = copy.deepcopy(status.get("instances") or {})
        should_update = False
        if records is None:
            pods = self._select(obj)
            if isinstance(pods, str):
                self._event(obj, "Warning", "Failed", f"Failed to select targets: {pods}",
                            "records", {"chaos-mesh.org/type": "failed",
                                        "chaos-mesh.org/activity": "select targets"})
                return None  # no requeue: selection runs again only on a later change
            records = [{"id": f"{self.namespace}/{pod}/{container}", "selectorKey": ".",
                        "phase": NOT_INJECTED, "injectedCount": 0, "recoveredCount": 0,
                        "events": []} for pod, container in pods]
            should_update = True
        desired = experiment.get("desiredPhase")
        need_retry = False
        newly: list[str] = []
        for record in records:
            if desired == "Run" and record["phase"] != INJECTED:
                operation = "Apply"
            elif desired == "Stop" and record["phase"] != NOT_INJECTED:
                operation = "Recover"
            else:
                continue
            before = record["phase"]
            if operation == "Apply":
                phase, err = self._apply(obj, record["id"], instances)
            else:
                phase, err = self._recover(obj, record["id"], instances)
            record["phase"] = phase
            if phase != before:
                should_update = True
            if err is not None:
                record["events"].append({"type": "Failed", "operation": operation,
                                         "message": err, "timestamp": _now()})
                activity = "apply chaos" if operation == "Apply" else "recover chaos"
                self._event(obj, "Warning", "Failed", f"Failed to {activity}: {err}",
                            "records", {"chaos-mesh.org/type": "failed",
                                        "chaos-mesh.org/activity": activity})
                need_retry = should_update = True
            elif operation == "Apply" and phase == INJECTED:
                newly.append(record["id"].split("/")[1])
                record["injectedCount"] += 1
                record["events"].append({"type": "Succeeded", "operation": "Apply",
                                         "timestamp": _now()})
                self._event(obj, "Normal", "Applied",
                            f"Successfully apply chaos for {record['id']}", "records",
                            {"chaos-mesh.org/type": "applied"})
            elif operation == "Recover" and phase == NOT_INJECTED:
                record["recoveredCount"] += 1
                record["events"].append({"type": "Succeeded", "operation": "Recover",
                                         "timestamp": _now()})
                self._event(obj, "Normal", "Recovered",
                            f"Successfully recover chaos for {record['id']}", "records",
                            {"chaos-mesh.org/type": "recovered"})
            # (Injected, nil) from a failed CancelStressors: no branch, no event, no retry.
        if newly and should_update and not self.conflict_once:
            for callback in self.on_inject:
                callback(newly)
        if should_update:
            if self.conflict_once:
                self.conflict_once = False
                self._event(obj, "Warning", "Failed", "Failed to update records: Operation "
                            f'cannot be fulfilled on stresschaos.chaos-mesh.org "{name}": the '
                            "object has been modified; please apply your changes to the latest "
                            "version and try again", "records",
                            {"chaos-mesh.org/type": "failed",
                             "chaos-mesh.org/activity": "update records"})
                raise Requeue()

            def write(o: Obj) -> None:
                o.setdefault("status", {}).setdefault("experiment", {})[
                    "containerRecords"] = records
                o["status"]["instances"] = instances

            self._update(name, write)
            self._event(obj, "Normal", "Updated", "Successfully update records of resource",
                        "records", {"chaos-mesh.org/type": "updated",
                                    "chaos-mesh.org/field": "records"})
        if need_retry:
            raise Requeue()
        return None

    # finalizers/controller.go CleanReconciler
    def _clean_finalizer(self, obj: Obj) -> float | None:
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp"):
            return None
        records = ((obj.get("status") or {}).get("experiment") or {}).get(
            "containerRecords") or []
        resumed = all(r["phase"] == NOT_INJECTED for r in records)
        forced = (meta.get("annotations") or {}).get(CLEAN_FINALIZER) == "forced"
        if forced or (resumed and meta.get("finalizers")):
            self._event(obj, "Normal", "FinalizerInited", "Finalizer has been removed",
                        "initFinalizers", {"chaos-mesh.org/type": "finalizer-removed"})
            self._update(meta["name"], lambda o: o["metadata"].__setitem__("finalizers", []))
        return None

    # --- pkg/selector/pod/selector.go selectSpecifiedPods, container/selector.go ----------

    def _select(self, obj: Obj) -> list[tuple[str, str]] | str:
        spec = obj["spec"]
        named = (spec.get("selector") or {}).get("pods") or {}
        if not named:
            return "only selector.pods is simulated here"
        pods = []
        if not self.select_nothing:
            for ns, names in named.items():
                if ns != self.namespace:
                    continue  # namespace-scoped: other namespaces are skipped (logged only)
                for pod_name in names:
                    pod = self.admin.get(f"/api/v1/namespaces/{ns}/pods/{pod_name}")
                    if pod is not None:
                        pods.append(pod)
        if not pods:
            return "no pod is selected"
        wanted = spec.get("containerNames") or []
        targets = []
        for pod in pods:
            names = [c["name"] for c in pod["spec"]["containers"]]
            chosen = [n for n in names if n in wanted] if wanted else names[:1]
            targets += [(pod["metadata"]["name"], c) for c in chosen]
        if not targets:
            return "no target has been selected"
        return targets

    # --- chaosimpl/stresschaos/impl.go, chaosimpl/utils/record.go --------------------------

    def _decode(self, record_id: str) -> str | None:
        """DecodeContainerRecord: None, "not found" (ErrContainerNotFound), or another error."""
        parts = record_id.split("/")
        if len(parts) < 3:
            return "not found"
        pod = self.admin.get(f"/api/v1/namespaces/{parts[0]}/pods/{parts[1]}")
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        if not any(s.get("name") == parts[2] and s.get("containerID") for s in statuses):
            return "not found"
        if self.daemon_unreachable:
            node = (pod or {}).get("spec", {}).get("nodeName", "")
            return f"cannot find daemonIP on node {node}"
        return None

    def _apply(self, obj: Obj, record_id: str, instances: Obj) -> tuple[str, str | None]:
        problem = self._decode(record_id)
        if problem == "not found":
            return NOT_INJECTED, (f"container with id {record_id} not found: container not "
                                  "found")
        if problem is not None:
            return NOT_INJECTED, problem
        if record_id in instances:
            return INJECTED, None  # "an stress-ng instance is running for this pod"
        if self.exec_fails is not None:
            return NOT_INJECTED, self.exec_fails
        stressors = obj["spec"].get("stressors") or {}
        cpu, memory = stressors.get("cpu") or {}, stressors.get("memory") or {}
        # chaosimpl/stresschaos/impl.go Apply: uid is stress-ng's PID (CPU stressor), memoryUid
        # memStress's (memory stressor); a stressor that Normalize dropped has none.
        instance: Obj = {}
        if cpu.get("workers"):
            instance.update(uid=str(next(_instance_ids)), startTime=_now())
        if memory.get("workers"):
            instance.update(memoryUid=str(next(_instance_ids)), memoryStartTime=_now())
        instances[record_id] = instance
        self.injections.append(Injection(obj["metadata"]["name"], record_id.split("/")[1],
                                         int(cpu.get("workers", 0)), cpu.get("load"),
                                         time.time(),
                                         memory=dict(memory) if memory.get("workers") else None))
        return INJECTED, None

    def _recover(self, obj: Obj, record_id: str, instances: Obj) -> tuple[str, str | None]:
        problem = self._decode(record_id)
        if problem == "not found":
            self._ended(obj, record_id)  # the container is gone, and its stress with it
            return NOT_INJECTED, None
        if problem is not None:
            return INJECTED, problem
        if record_id not in instances:
            return NOT_INJECTED, None  # "Pod seems already recovered"
        if self.cancel_fails:
            return INJECTED, None  # impl.go: the error is only logged
        del instances[record_id]
        self._ended(obj, record_id)
        return NOT_INJECTED, None

    def _ended(self, obj: Obj, record_id: str) -> None:
        pod = record_id.split("/")[1]
        for i in self.injections:
            if i.name == obj["metadata"]["name"] and i.pod == pod and i.end is None:
                i.end = time.time()

    # --- controllers/utils/recorder -------------------------------------------------------

    def _event(self, obj: Obj, kind: str, reason: str, message: str, component: str,
               annotations: dict[str, str]) -> None:
        meta = obj["metadata"]
        self.admin.create(f"/api/v1/namespaces/{self.namespace}/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{time.time_ns():x}",
                         "namespace": self.namespace, "annotations": annotations},
            "involvedObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "StressChaos",
                               "name": meta["name"], "namespace": self.namespace,
                               "uid": meta["uid"], "resourceVersion":
                                   meta.get("resourceVersion", "")},
            "reason": reason, "message": message, "type": kind, "count": 1,
            "source": {"component": component},
            "firstTimestamp": _now(), "lastTimestamp": _now()})

    # --- what the tests look at -----------------------------------------------------------

    def active(self) -> list[Injection]:
        return [i for i in self.injections if i.end is None]

    def stressed_pods(self) -> list[str]:
        return sorted({i.pod for i in self.active()})


def _without_record_events(obj: Obj) -> Obj:
    o = copy.deepcopy(obj)
    o["metadata"].pop("resourceVersion", None)
    o["metadata"].pop("generation", None)
    o["metadata"].pop("managedFields", None)
    for r in ((o.get("status") or {}).get("experiment") or {}).get("containerRecords") or []:
        r.pop("events", None)
    return o


# --- the admission webhooks (api/v1alpha1, served for real) -----------------------------------

class Webhooks:
    """A validating and a mutating admission webhook for StressChaos, registered with the real
    API server (url: https://127.0.0.1:<port>/...), as Chaos Mesh's helm chart registers
    ``vstresschaos.kb.io`` and ``mstresschaos.kb.io``, and ``vauth.kb.io``, Chaos Mesh's
    authorization webhook:
    ``deny[namespace]`` makes it refuse every create there with that message."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.deny: dict[str, str] = {}
        self.reviews: list[Obj] = []

    def start(self, admin: Admin) -> Webhooks:
        key, cert = self.workdir / "webhook.key", self.workdir / "webhook.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                        "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
        owner = self

        class Handler(_WebhookHandler):
            hooks = owner

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        url = f"https://127.0.0.1:{self.server.server_address[1]}"
        bundle = base64.b64encode(cert.read_bytes()).decode()
        rule = {"apiGroups": ["chaos-mesh.org"], "apiVersions": ["v1alpha1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["stresschaos"]}
        common = {"admissionReviewVersions": ["v1"], "sideEffects": "None",
                  "failurePolicy": "Fail", "rules": [rule], "timeoutSeconds": 5}
        # vauth.kb.io is Chaos Mesh's authorization webhook (security mode): whether the
        # creator may create chaos in the namespaces the selector names.
        admin.apply({"apiVersion": "admissionregistration.k8s.io/v1",
                     "kind": "ValidatingWebhookConfiguration",
                     "metadata": {"name": "chaos-mesh-validation"},
                     "webhooks": [{"name": "vstresschaos.kb.io", **common, "clientConfig": {
                         "url": f"{url}/validate-chaos-mesh-org-v1alpha1-stresschaos",
                         "caBundle": bundle}},
                                  {"name": "vauth.kb.io", **common, "clientConfig": {
                                      "url": f"{url}/validate-auth", "caBundle": bundle}}]})
        admin.apply({"apiVersion": "admissionregistration.k8s.io/v1",
                     "kind": "MutatingWebhookConfiguration",
                     "metadata": {"name": "chaos-mesh-mutation"},
                     "webhooks": [{"name": "mstresschaos.kb.io", **common,
                                   "reinvocationPolicy": "Never", "clientConfig": {
                                       "url": f"{url}/mutate-chaos-mesh-org-v1alpha1-stresschaos",
                                       "caBundle": bundle}}]})
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def review(self, path: str, request: Obj) -> Obj:
        obj = request.get("object") or {}
        answer: Obj = {"uid": request["uid"], "allowed": True}
        if path.startswith("/mutate"):
            selector = (obj.get("spec") or {}).get("selector") or {}
            if not selector.get("namespaces"):  # PodSelector.Default
                patch = [{"op": "add", "path": "/spec/selector/namespaces",
                          "value": [obj["metadata"].get("namespace") or request["namespace"]]}]
                answer.update(patchType="JSONPatch",
                              patch=base64.b64encode(json.dumps(patch).encode()).decode())
            return answer
        if path == "/validate-auth":
            namespace = request.get("namespace", "")
            problem = (self.deny.get(namespace) if request["operation"] == "CREATE"
                       else None)
        else:
            problem = self._invalid(request, obj)
        if problem is not None:
            answer.update(allowed=False, status={"code": 403, "message": problem})
        return answer

    def _invalid(self, request: Obj, obj: Obj) -> str | None:
        old = request.get("oldObject")
        if request["operation"] == "UPDATE" and old is not None and old.get("spec") != obj.get(
                "spec"):
            return "Cannot update chaos spec"
        spec = obj.get("spec") or {}
        stressors = spec.get("stressors")
        if not spec.get("stressngStressors") and (
                not stressors or not (stressors.get("cpu") or stressors.get("memory"))):
            return "Spec.Stressors: Invalid value: \"null\": missing stressors"
        duration = spec.get("duration")
        if duration and go_duration(str(duration)) is None:
            return (f"Spec.Duration: Invalid value: \"{duration}\": parse duration field error: "
                    f"time: invalid duration \"{duration}\"")
        return None


class _WebhookHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hooks: Webhooks

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.hooks.reviews.append(review)
        # The API server adds ?timeout=<n>s to the registered URL.
        answer = self.hooks.review(self.path.split("?")[0], review["request"])
        data = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "response": answer}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


