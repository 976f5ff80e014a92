"""Kinds, selections, labels and the placement of a candidate: plain data, no I/O.

Objects are plain JSON dicts (``Obj``), the shapes users see in ``kubectl get -o json``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGER = "autotune"
STUDY_LABEL = "autotune/study"
TRIAL_LABEL = "autotune/trial"
ORIGINAL_ENV_ANNOTATION = "autotune/original-env"
WRITTEN_ENV_ANNOTATION = "autotune/written-env"
POD_TEMPLATE_HASH = "pod-template-hash"


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str

    @property
    def resource(self) -> str:
        """As in RBAC rules and kubectl: ``deployments.apps``, ``pods``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


DEPLOYMENTS = Kind("apps", "v1", "deployments", "Deployment")
REPLICASETS = Kind("apps", "v1", "replicasets", "ReplicaSet")
PODS = Kind("", "v1", "pods", "Pod")
POD_LOGS = Kind("", "v1", "pods/log", "Pod")  # a subresource: RBAC names it "pods/log"
POD_PROXY = Kind("", "v1", "pods/proxy", "Pod")
EVENTS = Kind("", "v1", "events", "Event")
CONFIGMAPS = Kind("", "v1", "configmaps", "ConfigMap")
AUTOSCALERS = Kind("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
NODES = Kind("", "v1", "nodes", "Node")
LEASES = Kind("coordination.k8s.io", "v1", "leases", "Lease")
STRESSCHAOS = Kind("chaos-mesh.org", "v1alpha1", "stresschaos", "StressChaos")
ACCESS_REVIEWS = Kind("authorization.k8s.io", "v1", "selfsubjectaccessreviews",
                      "SelfSubjectAccessReview")


@dataclass(frozen=True)
class Selection:
    """Objects of one kind in one namespace, narrowed by label and field selectors."""

    kind: Kind
    namespace: str
    labels: str | None = None
    fields: str | None = None

    def describe(self) -> str:
        narrowed = [s for s in (self.labels, self.fields) if s]
        where = f" matching {', '.join(narrowed)}" if narrowed else ""
        return f"{self.kind.resource} in namespace {self.namespace!r}{where}"


def one(kind: Kind, namespace: str, name: str) -> Selection:
    return Selection(kind, namespace, fields=f"metadata.name={name}")


# --- labels and selectors -----------------------------------------------------------------

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]")


def label_value(text: str) -> str:
    """``text`` as a valid label value (<= 63 characters, alphanumeric at both ends)."""
    value = _LABEL_VALUE_BAD.sub("-", text)[:63]
    return value.strip("._-")


def label_selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def selector_of(match_labels: Mapping[str, str], expressions: list[Obj] | None = None) -> str:
    """A Deployment's ``spec.selector`` as a label-selector string."""
    parts = [f"{k}={v}" for k, v in sorted(match_labels.items())]
    for e in expressions or []:
        key, op, values = e["key"], e["operator"], ",".join(e.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": key, "DoesNotExist": f"!{key}"}[op])
    return ",".join(parts)


def ours(study: str | None = None) -> str:
    """The label selector of objects autotune created (for one study, or for any)."""
    labels = {MANAGED_BY_LABEL: MANAGER}
    if study is not None:
        labels[STUDY_LABEL] = label_value(study)
    return label_selector(labels)


_DNS_BAD = re.compile(r"[^a-z0-9-]+")


def _dns(text: str) -> str:
    return _DNS_BAD.sub("-", text.lower()).strip("-")


def object_name(study: str | None, trial: str | None, unique: str) -> str:
    """The name of an object we create: ``autotune-<study>-t<trial>-<unique>``."""
    parts = ["autotune", _dns(study or "")[:30].strip("-"), f"t{_dns(trial)}" if trial else "",
             unique]
    return "-".join(p for p in parts if p)


def name_of(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def full_name(obj: Obj) -> str:
    meta = obj.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


# --- where a candidate runs -------------------------------------------------------------------

@dataclass(frozen=True)
class PodPlacement(Mapping[str, Any]):
    """Where a Deployment's candidate runs: what the StressChaos must select, and no more.

    A frozen, typed record; it is also a read-only mapping because ``Live.placement`` is one
    (the study records it without knowing the platform).
    """

    namespace: str
    container: str
    pods: tuple[str, ...]
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_expressions: tuple[Mapping[str, Any], ...] = ()
    pod_template_hash: str | None = None
    """The new ReplicaSet's hash: the StressChaos selects it too, so no other pod matches."""

    @property
    def selector(self) -> str:
        return selector_of(self.pod_labels, [dict(e) for e in self.pod_expressions])

    def _as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "container": self.container,
                "pods": list(self.pods), "pod_labels": dict(self.pod_labels),
                "pod_expressions": [dict(e) for e in self.pod_expressions],
                "pod_template_hash": self.pod_template_hash, "selector": self.selector}

    def __getitem__(self, key: str) -> Any:
        return self._as_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._as_dict())

    def __len__(self) -> int:
        return len(self._as_dict())
