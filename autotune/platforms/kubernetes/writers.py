"""Who else sets the tuned variables: ``envFrom`` sources and GitOps controllers. Pure functions
over Deployment objects (the target reads what they need).

- **envFrom** (kubelet ``pkg/kubelet/kubelet_pods.go`` ``makeEnvironmentVariables``): the
  variables of every ``envFrom`` ConfigMap or Secret are set first (``prefix`` + key), then the
  ``env`` entries override them. So deleting a tuned variable's ``env`` entry (a candidate or
  baseline that leaves it unset) does not unset it when an ``envFrom`` source defines it: the
  measurement would silently not be of Go's default. A ConfigMap can be read to know; a
  Secret autotune does not read (its Role has no ``get secrets``), so it may define anything.
- **GitOps controllers** keep the Deployment as declared in git: Argo CD with self-heal and Flux's
  kustomize-controller re-apply it, reverting each candidate within seconds. They are recognised
  by their markers (Argo CD's ``argocd.argoproj.io/tracking-id`` annotation or
  ``argocd.argoproj.io/instance`` label; Flux's ``kustomize.toolkit.fluxcd.io/name`` and
  ``helm.toolkit.fluxcd.io/name`` labels) and by ``metadata.managedFields``: a known
  controller's field manager that owns the tuned container's ``env``. Another manager that owns
  it through server-side apply (operation ``Apply``) is only a warning: a person's
  ``kubectl apply --server-side`` re-applies only when run again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

FIELD_MANAGER = "autotune"
"""The field manager autotune's writes are recorded under (managedFields)."""

CONTROLLERS = {
    "argocd-controller": "Argo CD",
    "argocd-application-controller": "Argo CD",
    "kustomize-controller": "Flux (kustomize-controller)",
    "helm-controller": "Flux (helm-controller)",
    "kapp": "kapp-controller",
    "kapp-controller": "kapp-controller",
}
"""Field managers of controllers that re-apply a declared state on their own."""


@dataclass(frozen=True)
class EnvSource:
    kind: str  # "ConfigMap" or "Secret"
    name: str
    prefix: str = ""
    optional: bool = False

    def describe(self) -> str:
        prefix = f" with prefix {self.prefix!r}" if self.prefix else ""
        return f"{self.kind} {self.name}{prefix} (envFrom)"


def env_sources(container: Obj) -> list[EnvSource]:
    out = []
    for item in container.get("envFrom") or []:
        prefix = str(item.get("prefix") or "")
        for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            ref = item.get(key)
            if ref:
                out.append(EnvSource(kind, str(ref.get("name", "")), prefix,
                                     bool(ref.get("optional"))))
    return out


def env_from_problems(container: Obj, variables: Sequence[str],
                      configmap_keys: Callable[[str], list[str] | str | None]) -> list[str]:
    """Which of ``variables`` an envFrom source sets (or may set) for this container.

    ``configmap_keys(name)``: the ConfigMap's keys; a string says why it could not be read;
    None: it does not exist."""
    problems = []
    for source in env_sources(container):
        if source.kind == "Secret":
            problems.append(
                f"{source.describe()} may set {', '.join(variables)}: autotune does not read "
                "Secrets, so it cannot tell whether a candidate that leaves a variable unset "
                "really runs with Go's default")
            continue
        keys = configmap_keys(source.name)
        if isinstance(keys, str):
            problems.append(f"{source.describe()} could not be read ({keys}), so it may set "
                            f"{', '.join(variables)}")
            continue
        found = sorted(v for v in variables if v in {source.prefix + k for k in keys or []})
        if found:
            problems.append(
                f"{source.describe()} sets {', '.join(found)}: removing the env entry (a "
                "candidate or the baseline that leaves it unset) leaves the ConfigMap's value "
                "in force, so 'unset' would not be Go's default")
    return problems


def gitops_markers(deployment: Obj) -> list[str]:
    """The GitOps controllers a Deployment's labels and annotations name."""
    meta = deployment.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    found = []
    tracking = annotations.get("argocd.argoproj.io/tracking-id")
    if tracking:
        app = str(tracking).split(":", 1)[0]
        found.append(f"Argo CD application {app} (annotation argocd.argoproj.io/tracking-id)")
    elif labels.get("argocd.argoproj.io/instance"):
        found.append(f"Argo CD application {labels['argocd.argoproj.io/instance']} (label "
                     "argocd.argoproj.io/instance)")
    for key, what in (("kustomize.toolkit.fluxcd.io/name", "Flux Kustomization"),
                      ("helm.toolkit.fluxcd.io/name", "Flux HelmRelease")):
        if labels.get(key):
            where = labels.get(key.replace("/name", "/namespace"), "")
            found.append(f"{what} {where + '/' if where else ''}{labels[key]} (label {key})")
    return found


def env_owners(deployment: Obj, container: str) -> list[tuple[str, str, str]]:
    """(manager, operation, time) of every managedFields entry, other than autotune's, that
    owns the container's ``env`` (fieldsV1 ``f:spec.f:template.f:spec.f:containers.
    k:{"name":...}.f:env``)."""
    key = f'k:{{"name":"{container}"}}'
    out = []
    for entry in (deployment.get("metadata") or {}).get("managedFields") or []:
        manager = str(entry.get("manager", ""))
        if manager == FIELD_MANAGER:
            continue
        fields = entry.get("fieldsV1") or {}
        path: Mapping[str, Any] | None = fields
        for step in ("f:spec", "f:template", "f:spec", "f:containers", key):
            path = path.get(step) if isinstance(path, Mapping) else None
        if isinstance(path, Mapping) and "f:env" in path:
            out.append((manager, str(entry.get("operation", "")), str(entry.get("time", ""))))
    return out


def writer_problems(deployment: Obj, container: str) -> tuple[list[str], list[str]]:
    """(problems, warnings): GitOps controllers that keep the env as declared (problems), other
    server-side-apply owners of the env (warnings)."""
    problems = [f"{m}: it keeps the Deployment as declared in git and would revert each "
                "candidate's env" for m in gitops_markers(deployment)]
    warnings = []
    for manager, operation, _ in env_owners(deployment, container):
        known = CONTROLLERS.get(manager)
        if known is not None:
            problems.append(f"{known} (field manager {manager!r}) owns the env of container "
                            f"{container!r}: it re-applies it and would revert each candidate")
        elif operation == "Apply":
            warnings.append(f"field manager {manager!r} owns the env of container "
                            f"{container!r} through server-side apply: applying that again "
                            "during the study reverts the candidate")
    return _unique(problems), _unique(warnings)


def changed_by(deployment: Obj, container: str) -> list[str]:
    """The field managers, other than autotune, that own the container's env and wrote the
    Deployment no earlier than autotune's last write (managedFields' times, both the server's,
    to the second)."""
    ours = [str(e.get("time", "")) for e in (deployment.get("metadata") or {}).get(
        "managedFields") or [] if e.get("manager") == FIELD_MANAGER]
    since = max(ours, default="")
    return sorted({m for m, _, t in env_owners(deployment, container) if t and t >= since})


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
