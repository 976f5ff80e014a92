"""autotune's load generator as a pod in the target's namespace (``target.kubernetes.load``).

One pod per measured candidate: created once the candidate's rollout is complete, deleted
before the next candidate, on restore, and by cleanup (``autotune cleanup``, the next run's
start). So every trial gets the same open-loop rate from the same place, and the generator's
client-side histogram, selected by ``{{load_selector}}``, can be the objective. Its series are
scraped like any pod's (the ``prometheus.io`` annotations below, or a PodMonitor on the labels).

A pod nobody deletes still ends: ``activeDeadlineSeconds`` makes the kubelet kill it (kubernetes
``pkg/kubelet/active_deadline.go``) and the generator's own ``-max-duration`` stops it first.
It runs the image's ``autotune-loadgen`` with ``-in-cluster``, which the generator accepts only
inside a pod (it refuses non-loopback targets anywhere else).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Mapping

from autotune.clock import Clock
from autotune.errors import TargetError
from autotune.experiment.models import REQUEST_MOUNT, ClusterLoad
from autotune.live import Matcher
from autotune.platforms.kubernetes.client import Kube
from autotune.platforms.kubernetes.errors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    Unauthorized,
    reraise_as,
)
from autotune.platforms.kubernetes.objects import (
    MANAGED_BY_LABEL,
    MANAGER,
    PODS,
    STUDY_LABEL,
    Obj,
    Selection,
    label_selector,
    label_value,
    name_of,
    object_name,
    one,
)

log = logging.getLogger(__name__)

BINARY = "/usr/local/bin/autotune-loadgen"
CONTAINER = "loadgen"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "load"
# Past the caller's seconds: the generator's own -max-duration ends it first.
DEADLINE_MARGIN = 60
REQUEST_VOLUME = "request"
REQUEST_FILE = "request.json"


def manifest(spec: ClusterLoad, *, namespace: str, name: str, study: str,
             seconds: float, avoid: Mapping[str, str] | None = None) -> Obj:
    """The generator's pod, sending ``spec.rate`` requests/s to ``spec.url`` for at most
    ``seconds``, preferably on a node without pods labelled ``avoid`` (the candidate's: the
    generator's own CPU would otherwise add to the stress on their node)."""
    limit = max(1, math.ceil(seconds))
    pod: Obj = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGER, STUDY_LABEL: label_value(study),
                       COMPONENT_LABEL: COMPONENT},
            "annotations": {"prometheus.io/scrape": "true",
                            "prometheus.io/port": str(spec.metrics_port),
                            "prometheus.io/path": "/metrics"},
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": limit + DEADLINE_MARGIN,
            "terminationGracePeriodSeconds": 5,
            "automountServiceAccountToken": False,
            # Pod Security "restricted" (pod-security-admission policy/check_*.go): non-root,
            # a seccomp profile, no privilege escalation, every capability dropped.
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                "runAsGroup": 10001,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": CONTAINER,
                "image": spec.image,
                "command": [BINARY],
                "args": ["-in-cluster", "-target", spec.url, "-rate", f"{spec.rate:g}",
                         "-connections", str(spec.connections),
                         "-listen", f":{spec.metrics_port}", "-max-duration", f"{limit}s"],
                "ports": [{"name": "metrics", "containerPort": spec.metrics_port}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": spec.metrics_port},
                                   "periodSeconds": 2},
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
                # A namespace with a ResourceQuota rejects a pod without them ("must specify").
                "resources": {
                    "requests": {"cpu": spec.resources.cpu_request,
                                 "memory": spec.resources.memory_request},
                    "limits": {"cpu": spec.resources.cpu_limit,
                               "memory": spec.resources.memory_limit}},
            }],
        },
    }
    if spec.image_pull_secrets:
        pod["spec"]["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    if spec.request_secret is not None:
        # The kubelet mounts it (the pod's creator needs no right to read Secrets); only its
        # file's path is in the spec, and the generator reads path, headers and body from it.
        container = pod["spec"]["containers"][0]
        container["args"] += ["-request-file", f"{REQUEST_MOUNT}/{REQUEST_FILE}"]
        container["volumeMounts"] = [{"name": REQUEST_VOLUME, "mountPath": REQUEST_MOUNT,
                                      "readOnly": True}]
        pod["spec"]["volumes"] = [{"name": REQUEST_VOLUME, "secret": {
            "secretName": spec.request_secret.name,
            "items": [{"key": spec.request_secret.key, "path": REQUEST_FILE}]}}]
    if avoid:
        pod["spec"]["affinity"] = {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100,
                "podAffinityTerm": {"labelSelector": {"matchLabels": dict(avoid)},
                                    "topologyKey": "kubernetes.io/hostname"}}]}}
    return pod


def _ready(pod: Obj) -> str | None:
    """None once the pod serves; else what it is waiting for (or a failure, raised)."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase in ("Failed", "Succeeded"):
        raise TargetError(f"the load generator pod {name_of(pod)} ended ({phase}: "
                          f"{status.get('reason') or status.get('message') or 'no reason'})")
    for c in status.get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                                     "CrashLoopBackOff", "CreateContainerConfigError"):
            raise TargetError(f"the load generator pod {name_of(pod)} cannot start: "
                              f"{waiting['reason']}: {waiting.get('message', '')}")
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    return None if phase == "Running" and ready else f"phase {phase or 'unknown'}, not ready"


class LoadGenerator:
    """Start, stop and clean up the generator's pods of one study in one namespace."""

    def __init__(self, spec: ClusterLoad, kube: Kube, clock: Clock, *, namespace: str,
                 study: str) -> None:
        self.spec, self.kube, self.clock = spec, kube, clock
        self.namespace, self.study = namespace, study
        self.running: str | None = None

    def scope(self, name: str) -> tuple[Matcher, ...]:
        """The PromQL matchers of one generator pod's series (``{{load_selector}}``)."""
        return (Matcher("namespace", self.namespace), Matcher("pod", name))

    def start(self, tag: str, seconds: float, avoid: Mapping[str, str] | None = None) -> str:
        """Replace any running generator with a new one; return once it serves."""
        self.stop()
        name = object_name(self.study, f"load-{tag}", uuid.uuid4().hex[:6])
        body = manifest(self.spec, namespace=self.namespace, name=name, study=self.study,
                        seconds=seconds, avoid=avoid)
        # Ours before the request is sent: a create whose answer was lost (or a signal while it
        # was in flight) leaves a pod that only ``stop`` knows to delete; it sends load to the
        # service until its own deadline otherwise, and the next trial's doubles the rate.
        self.running = name
        with reraise_as(TargetError):
            try:
                self.kube.create(PODS, self.namespace, body)
            except (BadRequest, Unauthorized, Forbidden, NotFound):
                # Refused by the API server (RBAC without deploy/rbac-load.yaml, admission, a
                # quota): nothing was created, nothing to delete. Kept, every later stop failed
                # on "delete pods" too and the run ended "NOT UNDONE" with everything undone
                # (review finding). Unless a first attempt whose answer was lost did create it
                # (the retry then meets the quota that pod fills): then it stays ours to delete.
                if not self._created(name):
                    self.running = None
                raise
            except Conflict:
                # The client retried a create that had gone through (the name is new each
                # time): ours, labelled so; anything else is someone else's pod.
                if not self._ours(name):
                    self.running = None  # someone else's pod: never ours to delete
                    raise
                log.debug("load generator pod %s already created by a retried request", name)
            waiting = ["not created yet"]

            def served(state: dict[str, Obj]) -> bool | None:
                pod = state.get(name)
                waiting[0] = "not listed yet" if pod is None else (_ready(pod) or "")
                return True if pod is not None and not waiting[0] else None

            if self.kube.wait(one(PODS, self.namespace, name), served,
                              self.spec.ready_timeout) is None:
                secret = self.spec.request_secret
                hint = ("" if secret is None else
                        f"; a missing Secret {secret.name} or key {secret.key} keeps it "
                        "creating (FailedMount in kubectl describe pod)")
                raise TargetError(f"the load generator pod {self.namespace}/{name} did not "
                                  f"become ready within {self.spec.ready_timeout:g}s "
                                  f"({waiting[0]}{hint})")
        secret = self.spec.request_secret
        log.info("load: %s sends %g/s to %s%s", name, self.spec.rate, self.spec.url,
                 "" if secret is None else f" (the request from Secret {secret.name})")
        return name

    def _created(self, name: str) -> bool:
        """Whether our pod ``name`` exists; True when that cannot be read (kept: a stop that
        fails is tried again, a pod forgotten sends load until its deadline)."""
        try:
            return self._ours(name)
        except ApiError:
            return True

    def _ours(self, name: str) -> bool:
        found, _ = self.kube.list(one(PODS, self.namespace, name))  # the Role has no get pods
        labels = (found[0].get("metadata", {}).get("labels") or {}) if found else {}
        return labels.get(MANAGED_BY_LABEL) == MANAGER and labels.get(
            STUDY_LABEL) == label_value(self.study)

    def alive(self) -> str | None:
        """None while the running generator serves; else why not."""
        if self.running is None:
            return "no load generator is running"
        with reraise_as(TargetError):  # list, not get: the Role needs no "get pods"
            found, _ = self.kube.list(one(PODS, self.namespace, self.running))
        pod = found[0] if found else None
        if pod is None:
            return f"the load generator pod {self.running} is gone"
        try:
            waiting = _ready(pod)
        except TargetError as e:
            return str(e)
        return None if waiting is None else f"the load generator pod {self.running}: {waiting}"

    def stop(self) -> None:
        if self.running is None:
            return
        with reraise_as(TargetError):
            self.kube.delete(PODS, self.namespace, self.running)
        # Only once it is deleted: a delete that failed is tried again by the next stop (the
        # run's end tries a failed restore again), not forgotten with the pod still sending.
        self.running = None

    def cleanup(self) -> list[str]:
        """Delete every generator pod of this study (a dead run's included)."""
        self.running = None
        with reraise_as(TargetError):
            return remove_all(self.kube, self.namespace, self.study)


def load_pods(study: str | None) -> str:
    """The label selector of autotune's generator pods (of one study, or of any)."""
    labels = {MANAGED_BY_LABEL: MANAGER, COMPONENT_LABEL: COMPONENT}
    if study is not None:
        labels[STUDY_LABEL] = label_value(study)
    return label_selector(labels)


def remove_all(kube: Kube, namespace: str, study: str | None) -> list[str]:
    """Delete the generator pods in ``namespace`` (of ``study``, or of any); say which."""
    found, _ = kube.list(Selection(PODS, namespace, labels=load_pods(study)))
    for pod in found:
        kube.delete(PODS, namespace, name_of(pod))
    return [f"load generator pod {namespace}/{name_of(p)}" for p in found]
