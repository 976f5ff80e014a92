"""The environment fingerprint: what a study's numbers were measured on. Two runs whose
fingerprints differ measure different things, so a night compares them to decide whether it
continues the current study or starts another (``autotune.study.night.opening``).

**Environment fingerprint.** What the numbers were measured on, from the target's own
``describe()`` (only fields it really reports, and only those that are not None: an unknown
field is absent, never defaulted) plus the experiment's stress profile (``chaos``):

- kubernetes: ``namespace``, ``deployment``, ``container``, ``image`` (the reference),
  ``image_ids`` (the running pods' image digests), ``cpu_limit``, ``cpu_request``,
  ``memory_limit``, ``node_types`` (the pods' nodes' instance types), ``go_version`` (what the
  running pods report in Prometheus, go_info);
- local: ``workload``, ``command``, ``cpus``, ``host_cpus``, ``isolation``, ``load`` (the load
  spec; a calibrated rate is measured, not configured, and is left out), ``binary_sha256`` and
  ``go_version`` of the service's binary;
- simulated: ``noise``;
- replay: ``grid_sha256`` (the recording, wherever its file is) and ``cpus``.

Replicas are left out on purpose (an HPA changes them night to night): the fingerprint is what
the night is configured and built on, taken before its first trial. Its id is the first 8 hex
digits of the SHA-256 of its canonical JSON.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.experiment.models import Experiment

TARGET_FIELDS: dict[str, tuple[str, ...]] = {
    "kubernetes": ("namespace", "deployment", "container", "image", "image_ids", "cpu_limit",
                   "cpu_request", "memory_limit", "node_types", "go_version"),
    "local": ("workload", "command", "cpus", "host_cpus", "isolation", "load", "binary_sha256",
              "go_version"),
    "simulated": ("noise",),
    "replay": ("grid_sha256", "cpus"),
}
"""The ``describe()`` fields that identify an environment, per target kind."""

OBSERVED = frozenset({"go_version", "node_types", "image_ids"})
"""Fields read from what runs rather than from what is declared: the Go version from Prometheus
(unreachable at the start, or no ``go_info``), the nodes' instance types (no label, or no ``get
nodes``), the pods' image digests (no pod reporting one yet). Absent on one night, such a field
was not seen, not changed: comparing it then split the study night after night (review finding:
a Prometheus down at one night's start started a new study, and the next night another). A
declared field (a limit, the image reference) that disappears is a change."""


@dataclass(frozen=True)
class Environment:
    fields: dict[str, Any]

    @property
    def id(self) -> str:
        return environment_id(self.fields)

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "fields": self.fields}


def environment(exp: Experiment, described: Mapping[str, Any]) -> Environment:
    """The fingerprint of what the target reports and the stress it gets. Pure."""
    kind = str(described.get("kind", exp.target.kind))
    fields: dict[str, Any] = {"target": kind}
    for name in TARGET_FIELDS.get(kind, ()):
        if described.get(name) is not None:
            fields[name] = described[name]
    fields["stress"] = exp.chaos.canonical()
    # Through JSON, so a fingerprint compares equal to the one read back from the storage.
    return Environment(json.loads(json.dumps(fields, sort_keys=True, default=str)))


def environment_id(fields: Mapping[str, Any]) -> str:
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def environment_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``field: old -> new`` for every field that differs; a field one side lacks is
    ``absent`` there, but an ``OBSERVED`` one is then not compared. Pure."""
    out = []
    for name in sorted(old.keys() | new.keys()):
        if name in OBSERVED and (name not in old or name not in new):
            continue  # not seen on one of the two nights: unknown, not changed
        if old.get(name) != new.get(name) or (name in old) != (name in new):
            before = _shown(old[name]) if name in old else "absent"
            after = _shown(new[name]) if name in new else "absent"
            out.append(f"{name}: {before} -> {after}")
    return out


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def declared_changes(exp: Experiment, before: Mapping[str, Any],
                     after: Mapping[str, Any]) -> list[str]:
    """How what the target declares (not ``OBSERVED``: a candidate's rollout may move pods to
    another node type) changed between two ``describe()`` answers of one run: a CD rollout of a
    new image, another limit. Pure."""
    a, b = environment(exp, before).fields, environment(exp, after).fields
    return environment_changes({k: v for k, v in a.items() if k not in OBSERVED},
                               {k: v for k, v in b.items() if k not in OBSERVED})
