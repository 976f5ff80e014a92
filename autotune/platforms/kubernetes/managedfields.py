"""Who owns the tuned env entries (``metadata.managedFields``), and giving that back after the
restore. Pure functions over plain JSON (the target sends the result).

Why: a write that changes a field moves the field's ownership to the writer's field manager
(structured-merge-diff's ``Updater``, called from apimachinery
``pkg/util/managedfields/internal/structuredmerge.go``; an entry re-added after a deletion is
wholly the writer's). Every candidate and the restore are autotune's writes, so after a study
autotune owned the restored entries and whoever declared them (``kubectl apply
--server-side``, a GitOps tool) did not: their next apply that stopped declaring a variable no
longer deleted it, since a field another manager owns stays (a Kubernetes review finding,
reproduced in tests/kubernetes/test_ownership.py).

So the target records, with the original entries, which managedFields entries owned each
variable's element of the container's ``env`` (fieldsV1 path ``f:spec`` ``f:template`` ``f:spec``
``f:containers`` ``k:{"name":<container>}`` ``f:env`` ``k:{"name":<variable>}``) and what they
owned under it; after the restore it sets every entry's ownership of those elements back to
the record. An update request may carry managedFields: the API server then takes them as the
new ownership (``decodeLiveOrNew`` in ``internal/fieldmanager.go``) and, since nothing else in
the object changes, moves no field to the writer.

An entry is the same entry when its identity is (``BuildManagerIdentifier`` in
``internal/managedfields.go``): everything but ``fieldsType``, ``fieldsV1`` and ``time``, and
for an ``Apply`` also without ``apiVersion``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]

_IGNORED = ("fieldsType", "fieldsV1", "time")


def element_path(container: str, variable: str) -> tuple[str, ...]:
    """The fieldsV1 path of one env entry (an associative list keyed by ``name``: ``k:`` and
    the key as compact JSON)."""
    return ("f:spec", "f:template", "f:spec", "f:containers", _key(container), "f:env",
            _key(variable))


def owners(managed_fields: Sequence[Obj], container: str,
           variables: Sequence[str]) -> dict[str, list[Obj]]:
    """For each variable, the entries that own something of its env element (none: an empty
    list): the entry's identity and time, and under ``fields`` what it owns there."""
    found: dict[str, list[Obj]] = {}
    for variable in variables:
        path = element_path(container, variable)
        found[variable] = []
        for entry in managed_fields:
            subtree = _get(entry.get("fieldsV1") or {}, path)
            if subtree is not None:
                owner = {k: v for k, v in entry.items() if k not in ("fieldsType", "fieldsV1")}
                found[variable].append({**owner, "fields": subtree})
    return found


def given_back(managed_fields: Sequence[Obj], container: str,
               recorded: Mapping[str, Sequence[Obj]]) -> list[Obj] | None:
    """``managed_fields`` with each recorded variable's element owned as recorded: taken from
    every entry, then given to the recorded ones (an entry gone since is re-created with its
    recorded time). Entries left owning nothing are dropped, as the API server drops them.
    None: nothing differs."""
    out = copy.deepcopy(list(managed_fields))
    emptied: list[Obj] = []
    for variable, owned in recorded.items():
        path = element_path(container, variable)
        for entry in out:
            fields = entry.get("fieldsV1")
            if isinstance(fields, dict) and _remove(fields, path) and not fields:
                emptied.append(entry)
        for owner in owned:
            same = next((e for e in out if identity(e) == identity(owner)), None)
            if same is None:
                same = {k: v for k, v in owner.items() if k != "fields"}
                same.update(fieldsType="FieldsV1", fieldsV1={})
                out.append(same)
            _put(same["fieldsV1"], path, copy.deepcopy(owner["fields"]))
    out = [e for e in out if not (e.get("fieldsV1") == {} and any(e is x for x in emptied))]
    return None if out == list(managed_fields) else out


def identity(entry: Mapping[str, Any]) -> str:
    kept = {k: v for k, v in entry.items() if k not in (*_IGNORED, "fields")}
    if kept.get("operation") == "Apply":
        kept.pop("apiVersion", None)
    return json.dumps(kept, sort_keys=True)


def _key(name: str) -> str:
    return "k:" + json.dumps({"name": name}, separators=(",", ":"))


def _get(fields: Mapping[str, Any], path: Sequence[str]) -> Obj | None:
    node: Any = fields
    for step in path:
        node = node.get(step) if isinstance(node, Mapping) else None
    return dict(node) if isinstance(node, Mapping) else None


def _remove(fields: Obj, path: Sequence[str]) -> bool:
    """Remove the subtree at ``path`` and the parents it leaves empty (an empty map is a
    leaf's ownership only where it was so before); True if something was removed."""
    step, rest = path[0], path[1:]
    child = fields.get(step)
    if not isinstance(child, dict):
        return False
    if rest:
        if not _remove(child, rest):
            return False
        if child:
            return True
    del fields[step]
    return True


def _put(fields: Obj, path: Sequence[str], subtree: Obj) -> None:
    node = fields
    for step in path[:-1]:
        node = node.setdefault(step, {})
    node[path[-1]] = subtree
