"""The one table of what autotune asks the API server to do, as RBAC (verb, resource) pairs.

Each entry names the calls that need it. deploy/rbac.yaml must grant exactly these
(tests/kubernetes/test_permissions.py checks both directions, and runs a study, a cleanup and
a validation against the fake API server to check that the code uses nothing else).
Chaos Mesh's own admission webhook also checks "create stresschaos" in the target namespace.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.platforms.kubernetes.objects import (
    ACCESS_REVIEWS,
    AUTOSCALERS,
    CONFIGMAPS,
    DEPLOYMENTS,
    EVENTS,
    LEASES,
    NODES,
    POD_LOGS,
    POD_PROXY,
    PODS,
    REPLICASETS,
    STRESSCHAOS,
    Kind,
)


@dataclass(frozen=True)
class Permission:
    verb: str
    kind: Kind
    used_by: str
    granted_in: str = "deploy/rbac.yaml"


NEEDED: tuple[Permission, ...] = (
    Permission("get", DEPLOYMENTS, "KubernetesTarget._deployment (describe, apply, restore)"),
    Permission("list", DEPLOYMENTS, "Kube.wait (rollout) and stack.cleanup_namespace"),
    Permission("watch", DEPLOYMENTS, "Kube.wait for the rollout"),
    Permission("patch", DEPLOYMENTS, "env patch, restore, the original-env annotation"),
    Permission("list", REPLICASETS, "KubernetesTarget._replicasets: the rollout's new one"),
    Permission("patch", REPLICASETS, "KubernetesTarget._unrecord_replicasets: the record the "
               "Deployment controller copied to them"),
    Permission("list", PODS, "KubernetesTarget: the new ReplicaSet's Ready pods, check"),
    Permission("get", LEASES, "RunLease.acquire/release: is another run tuning the Deployment"),
    Permission("create", LEASES, "RunLease.acquire: the first run takes the Lease"),
    Permission("update", LEASES, "RunLease.acquire: renew on every trial, take over an expired"),
    Permission("delete", LEASES, "RunLease.release: the Deployment is restored"),
    Permission("list", AUTOSCALERS, "KubernetesTarget.autoscaler: an HPA scaling the Deployment"),
    Permission("list", EVENTS, "ChaosMeshInjector._warnings: Chaos Mesh's Failed events"),
    Permission("get", CONFIGMAPS, "KubernetesTarget.external_writers: does an envFrom "
               "ConfigMap set a tuned variable"),
    Permission("create", STRESSCHAOS, "ChaosMeshInjector.inject and dry_run"),
    Permission("get", STRESSCHAOS, "ChaosMeshInjector._is_ours after a retried create (409)"),
    Permission("list", STRESSCHAOS, "Kube.wait, ChaosMeshInjector.active and cleanup"),
    Permission("watch", STRESSCHAOS, "Kube.wait: injected / gone"),
    Permission("delete", STRESSCHAOS, "ChaosMeshInjector.recover and cleanup"),
)

# Cluster-scoped (a ClusterRole in deploy/rbac.yaml): validate --cluster asks the API server
# for its access (SelfSubjectAccessReview), and describe reads the pods' nodes. The manifest and
# first-night tests check deploy/rbac.yaml grants exactly these.
CLUSTER_NEEDED: tuple[Permission, ...] = (
    Permission("create", ACCESS_REVIEWS, "stack.validate_cluster: SelfSubjectAccessReview"),
    Permission("get", NODES, "KubernetesTarget.describe: the pods' node type (fingerprint)"),
)

# Only with ``measure.schedtrace``: logs can hold what a service prints about its users, so the
# base Role does not grant them.
SCHEDTRACE_NEEDED: tuple[Permission, ...] = (
    Permission("get", POD_LOGS, "KubernetesTarget.schedtrace: the SCHED lines in the pods' log",
               "deploy/rbac-schedtrace.yaml"),
)

# Only with ``measure.capture``: the pod proxy reaches any port of any pod in the namespace.
CAPTURE_NEEDED: tuple[Permission, ...] = (
    Permission("get", POD_PROXY, "PodProxy.get: net/http/pprof of a pod (trace, CPU profile)",
               "deploy/rbac-capture.yaml"),
)


# Only with ``target.kubernetes.load``: creating pods is as much as running any image there.
LOAD_NEEDED: tuple[Permission, ...] = (
    Permission("create", PODS, "LoadGenerator.start: the load generator's pod",
               "deploy/rbac-load.yaml"),
    Permission("watch", PODS, "LoadGenerator.start: Kube.wait until the generator serves",
               "deploy/rbac-load.yaml"),
    Permission("delete", PODS, "LoadGenerator.stop and cleanup", "deploy/rbac-load.yaml"),
)


def needed(schedtrace: bool, capture: bool, load: bool = False) -> tuple[Permission, ...]:
    """The namespaced permissions a run of an experiment needs."""
    return (*NEEDED, *(SCHEDTRACE_NEEDED if schedtrace else ()),
            *(CAPTURE_NEEDED if capture else ()), *(LOAD_NEEDED if load else ()))
