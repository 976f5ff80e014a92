"""The env patches of the Kubernetes target, and the readings of Deployment and pod JSON the
target needs (its container, env entries, CPU limit, the pods' name regex): pure functions of
plain JSON dicts (no API call, no clock), so every patch can be checked byte for byte
(tests/kubernetes/golden) and the Target (deployment.py) only sends them.

The patches are strategic merge patches of the pod template's ``containers`` list, merged by
``name`` as apimachinery does (k8s.io/apimachinery/pkg/util/strategicpatch/patch.go):

- ``env_patch`` sets exactly the tuned variables (``value``, with ``valueFrom: null`` so a
  reference the variable had is dropped) or deletes them (``$patch: delete``); other entries
  are left alone.
- ``restore_patch`` puts the ``Original`` entries back byte for byte (a value or a
  ``valueFrom``) *and* their order, with ``$setElementOrder/env`` as ``kubectl apply`` sends
  it: a deleted variable would otherwise come back at the end of the list (strategic merge
  appends), the pod template would differ from the original, and the Deployment would keep a
  new ReplicaSet instead of returning to the original one. The entries that are not deletions
  must come in that order (validatePatchWithSetOrderList), or the API server rejects the
  whole patch.
- ``annotation_patch`` records (or, for None, removes) the ``Original`` on the Deployment
  (objects.ORIGINAL_ENV_ANNOTATION), so a later run can undo a dead one.
- ``written_patch`` records every value the run wrote to a tuned variable
  (objects.WRITTEN_ENV_ANNOTATION), sent with each candidate's env: the undo of a dead run
  keeps a value that is neither the original nor one of those (someone else's, set since).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autotune.platforms.kubernetes.errors import TargetProblem
from autotune.platforms.kubernetes.objects import (
    ORIGINAL_ENV_ANNOTATION,
    WRITTEN_ENV_ANNOTATION,
    Obj,
    full_name,
)
from autotune.targets.base import Env

_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def any_of(values: Sequence[str]) -> str:
    """A PromQL regex matching exactly one of the values (targets may not import metrics)."""
    return "|".join(_RE2_SPECIAL.sub(r"\\\1", v) for v in sorted(values))


# --- the saved original ---------------------------------------------------------------------

@dataclass(frozen=True)
class Original:
    """The env entries of the tuned variables as found (None: the variable was not set), the
    order of the container's whole env list (names only: other values are not ours), and which
    managedFields entries owned each entry (managedfields.owners: given back after the
    restore)."""

    container: str
    env: Mapping[str, Obj | None]
    study: str
    saved_at: str
    order: tuple[str, ...] = ()
    owners: Mapping[str, Sequence[Obj]] = field(default_factory=dict)

    def to_json(self) -> str:
        data: Obj = {"container": self.container, "env": dict(self.env),
                     "order": list(self.order), "study": self.study, "saved_at": self.saved_at}
        if self.owners:  # a record without owners reads as before they were recorded
            data["owners"] = {k: list(v) for k, v in self.owners.items()}
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Original:
        data = json.loads(text)
        return cls(container=str(data["container"]), env=dict(data["env"]),
                   study=str(data.get("study", "")), saved_at=str(data.get("saved_at", "")),
                   order=tuple(str(n) for n in data.get("order") or ()),
                   owners=_owners(data.get("owners")))

    @classmethod
    def of(cls, deployment: Obj) -> Original | None:
        text = (deployment.get("metadata", {}).get("annotations") or {}).get(
            ORIGINAL_ENV_ANNOTATION)
        if not text:
            return None
        try:
            return cls.from_json(text)
        except (ValueError, KeyError, TypeError) as e:
            raise TargetProblem(f"the annotation {ORIGINAL_ENV_ANNOTATION} on Deployment "
                                f"{full_name(deployment)} is not autotune's format ({e}); "
                                "restore the env by hand and remove the annotations "
                                f"{ORIGINAL_ENV_ANNOTATION} and {WRITTEN_ENV_ANNOTATION}"
                                ) from None


def _owners(raw: object) -> dict[str, list[Obj]]:
    """The recorded owners, leniently: a malformed record costs only the ownership's return
    (the env is restored all the same), never the restore."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): [dict(o) for o in v if _owner_entry(o)]
            for k, v in raw.items() if isinstance(v, list)}


def _owner_entry(o: object) -> bool:
    """An entry the API server can decode (else it would ignore the whole list)."""
    return (isinstance(o, dict) and isinstance(o.get("manager"), str)
            and o.get("operation") in ("Apply", "Update")
            and isinstance(o.get("apiVersion"), str) and bool(o["apiVersion"])
            and isinstance(o.get("fields"), dict))


def _container_patch(container: str, entries: list[Obj],
                     order: Sequence[str] | None = None) -> Obj:
    patch: Obj = {"name": container, "env": entries}
    if order is not None:
        # apimachinery/pkg/util/strategicpatch/patch.go: "$setElementOrder/<list>" gives the
        # order of the merged list, as kubectl apply sends it.
        patch["$setElementOrder/env"] = [{"name": n} for n in order]
    return {"spec": {"template": {"spec": {"containers": [patch]}}}}


def env_patch(container: str, env: Env) -> Obj:
    """Set (or, for None, delete) exactly these variables; other env entries are untouched.

    ``valueFrom: null`` drops a reference the variable may have had, so the entry is valid.
    """
    entries: list[Obj] = []
    for var, value in env.items():
        if value is None:
            entries.append({"name": var, "$patch": "delete"})
        else:
            entries.append({"name": var, "value": value, "valueFrom": None})
    return _container_patch(container, entries)


def restore_order(original: Original, current: Sequence[str]) -> list[str] | None:
    """The env order after a restore: the original order of the names that will exist, then
    names someone else added meanwhile, in their current order. None: order unknown."""
    if not original.order:
        return None
    present = set(current) - {v for v, e in original.env.items() if e is None}
    present |= {v for v, e in original.env.items() if e is not None}
    first = [n for n in original.order if n in present]
    return first + [n for n in current if n in present and n not in first]


def restore_patch(original: Original, current: Sequence[str] = ()) -> Obj:
    """Put the original entries back (a value or a reference), or delete the ones we added,
    in the original order of the env list (``current``: the names in the list now)."""
    order = restore_order(original, current)
    puts: list[Obj] = []
    deletes: list[Obj] = []
    for var, entry in original.env.items():
        if entry is None:
            deletes.append({"name": var, "$patch": "delete"})
        elif "valueFrom" in entry:
            puts.append({**entry, "name": var, "value": None})
        else:
            # The API server omits an empty value ({"name": X} is X=""): say "" explicitly, or
            # the merge would keep the candidate's value.
            puts.append({**entry, "name": var, "value": entry.get("value", ""),
                         "valueFrom": None})
    if order is not None:
        # apimachinery strategicpatch/patch.go validatePatchWithSetOrderList: the entries that
        # are not deletions must come in the order of $setElementOrder, or the API server
        # rejects the whole patch (500) and the Deployment stays on the candidate.
        rank = {name: i for i, name in enumerate(order)}
        puts.sort(key=lambda e: rank[str(e["name"])])
    return _container_patch(original.container, puts + deletes, order)


def annotation_patch(original: Original | None) -> Obj:
    """Record ``original``; None: remove it and the values written (the run is undone)."""
    if original is None:
        return {"metadata": {"annotations": {ORIGINAL_ENV_ANNOTATION: None,
                                             WRITTEN_ENV_ANNOTATION: None}}}
    return {"metadata": {"annotations": {ORIGINAL_ENV_ANNOTATION: original.to_json()}}}


Written = Sequence[Mapping[str, str | None]]
"""Every candidate env a run wrote to the tuned variables (None: the entry deleted), the last
written last."""


def written_patch(patch: Obj, written: Written) -> Obj:
    """``patch`` (a candidate's env) with ``written`` recorded in the same request: a run
    killed right after it leaves no candidate of its own unrecorded."""
    data = json.dumps([dict(c) for c in written], sort_keys=True)
    return {**patch, "metadata": {"annotations": {WRITTEN_ENV_ANNOTATION: data}}}


def written_of(deployment: Obj) -> list[dict[str, str | None]] | None:
    """The candidates a (dead) run recorded writing; None when it recorded none (a run of an
    older autotune) or the record is not autotune's format."""
    text = (deployment.get("metadata", {}).get("annotations") or {}).get(
        WRITTEN_ENV_ANNOTATION)
    if not text:
        return None
    try:
        data = json.loads(text)
        return [{str(v): None if x is None else str(x) for v, x in c.items()} for c in data]
    except (ValueError, TypeError, AttributeError):
        return None


# --- reading Deployments and pods -----------------------------------------------------------

def find_container(deployment: Obj, name: str) -> Obj:
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get(
        "containers") or []
    for c in containers:
        if c.get("name") == name:
            return dict(c)
    names = ", ".join(str(c.get("name")) for c in containers) or "none"
    raise TargetProblem(f"Deployment {full_name(deployment)} has no container {name!r} "
                        f"(containers: {names}); fix target.kubernetes.container")


def env_entries(container: Obj) -> dict[str, Obj]:
    return {str(e.get("name")): dict(e) for e in container.get("env") or []}


def env_names(container: Obj) -> list[str]:
    return [str(e.get("name")) for e in container.get("env") or []]


def pod_container(pod: Obj, name: str) -> Obj:
    for c in pod.get("spec", {}).get("containers") or []:
        if c.get("name") == name:
            return dict(c)
    return {}


def container_status(pod: Obj, name: str) -> Obj:
    for s in pod.get("status", {}).get("containerStatuses") or []:
        if s.get("name") == name:
            return dict(s)
    return {}


def cpu_cores(quantity: object) -> float | None:
    """A Kubernetes CPU quantity ("500m", "2", 1.5) in cores."""
    if quantity is None:
        return None
    text = str(quantity).strip()
    try:
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        return None


def gomaxprocs_note(cpu_limit: object, gomaxprocs: str | None) -> str:
    """What GOMAXPROCS the service gets when the variable is unset (the baseline)."""
    if gomaxprocs is not None:
        return f"GOMAXPROCS={gomaxprocs} is set in the Deployment: the runtime uses it"
    cores = cpu_cores(cpu_limit)
    if cores is None:
        return ("GOMAXPROCS unset and no CPU limit: the Go runtime uses the node's CPU count")
    return (f"GOMAXPROCS unset: Go >= 1.25 uses the CPU limit ({cores:g}), "
            f"max(2, ceil) = {max(2, math.ceil(cores))}, re-checked every second; older Go uses "
            "the node's CPU count, or with automaxprocs max(1, floor) = "
            f"{max(1, math.floor(cores))}")


def unusable_reason(dep: Obj) -> str | None:
    """Why this Deployment cannot be tuned now, or None."""
    spec = dep.get("spec", {})
    if spec.get("paused"):
        return ("is paused: its controller would never roll a candidate out. Resume it "
                "(kubectl rollout resume) before tuning")
    if int(spec.get("replicas", 1)) < 1:
        return "has 0 replicas: there is nothing to measure"
    return None


def duplicated(container: Obj, variables: Sequence[str]) -> str | None:
    """Why the container's env cannot be tuned: a tuned variable listed twice, or None. The
    kubelet uses the last entry of a name, a strategic merge patch changes the first: every
    candidate would run with the old value, and the restore would copy one entry over the
    other (the pod template then differs from the original)."""
    names = env_names(container)
    twice = sorted({v for v in variables if names.count(v) > 1})
    if not twice:
        return None
    return (f"container {container.get('name')!r} lists {', '.join(twice)} more than once in "
            "its env (the kubelet uses the last entry, a patch changes the first): remove the "
            "duplicates before tuning")


def entry_value(entry: Obj | None) -> str | None:
    """An env entry's literal value; None when unset or set from a reference."""
    if entry is None or "value" not in entry:
        return None
    return str(entry["value"])


def shown_entry(entry: Obj | None) -> str | None:
    """An env entry for reports: its value, or where it comes from (never a secret's value)."""
    if entry is None:
        return None
    if "valueFrom" in entry and entry["valueFrom"] is not None:
        return f"<from {', '.join(sorted(entry['valueFrom']))}>"
    return entry_value(entry)
