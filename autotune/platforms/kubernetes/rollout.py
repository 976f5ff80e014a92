"""Is a Deployment's rollout complete? Pure functions over Deployment, ReplicaSet and Pod objects.

They follow the controllers and kubectl:

- ``rollout_state`` is ``kubectl rollout status`` (kubernetes/kubernetes
  staging/src/k8s.io/kubectl/pkg/polymorphichelpers/rollout_status.go, DeploymentStatusViewer):
  generation observed, no progress deadline exceeded, every replica updated, no old replica
  left, every updated replica available. Two differences: a ``ProgressDeadlineExceeded``
  condition that was already there when we patched is stale (a reused ReplicaSet keeps it until
  the controller sees progress: pkg/controller/deployment/progress.go, syncRolloutStatus, and
  util.DeploymentTimedOut returns true for a TimedOut reason whatever its age), and a paused
  Deployment is reported at once (pkg/controller/deployment/sync.go, checkPausedConditions: the
  controller never rolls a paused Deployment out).
- ``new_replicaset`` is pkg/controller/deployment/util/deployment_util.go FindNewReplicaSet:
  the oldest ReplicaSet owned by the Deployment whose pod template equals the Deployment's,
  ignoring the ``pod-template-hash`` label (EqualIgnoreHash).
- ``measured_pods``: once the counters say the rollout is complete, the pods a window measures
  are the *Ready*, *active* pods (pkg/controller/controller_utils.go IsPodActive: not
  Succeeded, not Failed, no deletionTimestamp) *owned by the new ReplicaSet* (controller
  ownerReference; the pod-template-hash label must agree), however many there are then: an
  autoscaler may have moved the replica count since. Evicted pods (phase Failed, kept until the
  pod garbage collector's threshold), foreign pods with the same labels and old pods still
  Terminating (a long preStop hook, a NotReady node: kubectl does not wait for them either,
  the ReplicaSet's status no longer counts them) are not the window's business;
  ``terminating_pods`` names the old ones, which still use their node's CPU.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from autotune.platforms.kubernetes.errors import TargetProblem
from autotune.platforms.kubernetes.objects import POD_TEMPLATE_HASH, Obj, full_name, name_of

TIMED_OUT = "ProgressDeadlineExceeded"


@dataclass(frozen=True)
class ReplicaSetRef:
    """The new ReplicaSet of a rollout: its name, uid and pod-template-hash."""

    name: str
    uid: str
    pod_template_hash: str


def controller_of(obj: Obj) -> Obj | None:
    """The ownerReference with ``controller: true``, if any."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owned_by(obj: Obj, owner: Obj) -> bool:
    ref = controller_of(obj)
    if ref is None:
        return False
    meta = owner.get("metadata", {})
    uid = meta.get("uid")
    if uid and ref.get("uid"):
        return bool(ref.get("uid") == uid)
    return bool(ref.get("name") == meta.get("name"))


def is_active(pod: Obj) -> bool:
    """controller.IsPodActive: not finished (Succeeded/Failed) and not being deleted."""
    phase = pod.get("status", {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod.get("metadata", {}).get(
        "deletionTimestamp")


def is_ready(pod: Obj) -> bool:
    if pod.get("status", {}).get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or [])


def _without_hash(template: Obj) -> Obj:
    t = copy.deepcopy(template)
    (t.get("metadata") or {}).get("labels", {}).pop(POD_TEMPLATE_HASH, None)
    return t


def new_replicaset(deployment: Obj, replicasets: Iterable[Obj]) -> ReplicaSetRef | None:
    """FindNewReplicaSet: the oldest owned ReplicaSet with the Deployment's pod template."""
    template = _without_hash(deployment.get("spec", {}).get("template") or {})
    owned = sorted((rs for rs in replicasets if owned_by(rs, deployment)),
                   key=lambda rs: (rs.get("metadata", {}).get("creationTimestamp", ""),
                                   name_of(rs)))
    for rs in owned:
        if _without_hash(rs.get("spec", {}).get("template") or {}) == template:
            labels = rs.get("metadata", {}).get("labels") or {}
            return ReplicaSetRef(name_of(rs), str(rs.get("metadata", {}).get("uid", "")),
                                 str(labels.get(POD_TEMPLATE_HASH, "")))
    return None


def progressing(deployment: Obj) -> Obj | None:
    for cond in deployment.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Progressing":
            return dict(cond)
    return None


def rollout_state(deployment: Obj, generation: int, stale: Obj | None = None) -> str | None:
    """None once the rollout of ``generation`` is complete, else what it is waiting for.

    ``stale``: the Progressing condition as it was when we patched; the same condition later
    says nothing about our rollout. A fresh ``ProgressDeadlineExceeded`` or a paused Deployment
    raises ``TargetProblem``.
    """
    status = deployment.get("status") or {}
    replicas = int(deployment.get("spec", {}).get("replicas", 1))
    if deployment.get("spec", {}).get("paused"):
        raise TargetProblem(f"Deployment {full_name(deployment)} is paused: the controller "
                            "does not roll it out. Resume it (kubectl rollout resume) or "
                            "choose another Deployment")
    if int(status.get("observedGeneration", 0)) < generation:
        return f"generation {generation} not yet observed by the controller"
    cond = progressing(deployment)
    if cond is not None and cond.get("reason") == TIMED_OUT and cond != stale:
        raise TargetProblem(f"the rollout of Deployment {full_name(deployment)} exceeded its "
                            f"progress deadline: {cond.get('message', '')}")
    updated = int(status.get("updatedReplicas", 0))
    total = int(status.get("replicas", 0))
    available = int(status.get("availableReplicas", 0))
    if updated < replicas:
        return f"{updated} of {replicas} replicas updated"
    if total > updated:
        return f"{total - updated} old replicas pending termination"
    if available < updated:
        return f"{available} of {updated} updated replicas available"
    return None


def stale_condition(patched: Obj) -> Obj | None:
    """The Progressing condition of a Deployment as our patch returned it, if it is a timeout
    (only a timeout can be mistaken for our rollout's verdict)."""
    cond = progressing(patched)
    return cond if cond is not None and cond.get("reason") == TIMED_OUT else None


def rollout_pods(pods: Mapping[str, Obj], new: ReplicaSetRef) -> dict[str, Obj]:
    """The active pods of the new ReplicaSet (by controller reference and template hash)."""
    out = {}
    for name, pod in pods.items():
        ref = controller_of(pod) or {}
        labels = pod.get("metadata", {}).get("labels") or {}
        same = (ref.get("uid") == new.uid if new.uid and ref.get("uid")
                else ref.get("name") == new.name)
        mine = ref.get("kind", "ReplicaSet") == "ReplicaSet" and same
        if mine and labels.get(POD_TEMPLATE_HASH) == new.pod_template_hash and is_active(pod):
            out[name] = pod
    return out


def measured_pods(pods: Mapping[str, Obj], new: ReplicaSetRef) -> dict[str, Obj]:
    """The Ready, active pods of the new ReplicaSet: what a window stresses and measures."""
    return {n: p for n, p in rollout_pods(pods, new).items() if is_ready(p)}


def terminating_pods(pods: Mapping[str, Obj], new: ReplicaSetRef) -> list[str]:
    """Pods of older ReplicaSets of the Deployment still being deleted."""
    return sorted(n for n, p in pods.items()
                  if p.get("metadata", {}).get("deletionTimestamp")
                  and (controller_of(p) or {}).get("kind", "ReplicaSet") == "ReplicaSet"
                  and (controller_of(p) or {}).get("name") != new.name
                  and p.get("status", {}).get("phase") not in ("Succeeded", "Failed"))
