"""One run per Deployment: a ``coordination.k8s.io`` Lease in the target's namespace.

The CronJob's ``concurrencyPolicy: Forbid`` does not stop ``kubectl create job
--from=cronjob/...`` or a run by hand: a second run would patch the same Deployment, adopt the
first run's saved original env as "left by a dead run", and both would stress each other's
pods. So a run holds ``Lease <namespace>/autotune-<deployment>`` while it may change the
Deployment, the way client-go's leader election does (tools/leaderelection/resourcelock/
leaselock.go and leaderelection.go): create it, or take it over only once it expired
(``renewTime + leaseDurationSeconds`` in the past) with an update that carries the
resourceVersion read, so that of two runs racing for it one gets 409 Conflict and stops.

The holder renews on every trial (``apply``), so the duration is the longest a trial may take
plus a margin; a killed run's Lease expires after that and the next run takes over (and then
restores what the dead run left).

Its times are the API server's (``Kube.server_now``: the Date of the answer just read), not
the host's: the holder writes renewTime and the next run judges it, often on another host (a
laptop, the CronJob's node). With each on its own clock, a holder whose clock is behind by more
than the duration would look expired while it runs, and be taken over. client-go instead times
expiry from when the candidate itself saw the record change, which makes every candidate wait
a whole duration first; one clock for all keeps a dead run's takeover immediate.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import uuid
from typing import Any

from autotune.platforms.kubernetes.client import Kube
from autotune.platforms.kubernetes.errors import Conflict, TargetProblem
from autotune.platforms.kubernetes.objects import LEASES, MANAGED_BY_LABEL, MANAGER

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def _micro(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch(text: str | None) -> float:
    if not text:
        return 0.0
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def holder_identity(study: str) -> str:
    """Who holds it: in a Job, the pod name (the hostname) says which run; the random part
    keeps two processes apart that share a host name and a PID (PID 1 of two containers)."""
    return f"{socket.gethostname()} pid {os.getpid()} study {study} run {uuid.uuid4().hex[:8]}"


class RunLease:
    def __init__(self, kube: Kube, *, namespace: str, deployment: str,
                 study: str, duration: float) -> None:
        self.kube = kube
        self.namespace, self.name = namespace, f"autotune-{deployment}"
        self.holder, self.study = holder_identity(study), study
        self.duration = max(30, round(duration))
        self.held = False

    @property
    def where(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    def _spec(self, transitions: int, acquired: str | None = None) -> Obj:
        now = _micro(self.kube.server_now())
        return {"holderIdentity": self.holder, "leaseDurationSeconds": self.duration,
                "acquireTime": acquired or now, "renewTime": now,
                "leaseTransitions": transitions}

    def acquire(self) -> None:
        """Hold the Lease (create, renew, or take over an expired one); ``TargetProblem``
        (exit 1) when another live run holds it."""
        current = self.kube.get(LEASES, self.namespace, self.name)
        if current is None:
            body = {"apiVersion": LEASES.api_version, "kind": LEASES.kind,
                    "metadata": {"name": self.name, "namespace": self.namespace,
                                 "labels": {MANAGED_BY_LABEL: MANAGER}},
                    "spec": self._spec(0)}
            try:
                self.kube.create(LEASES, self.namespace, body)
            except Conflict:
                current = self.kube.get(LEASES, self.namespace, self.name)
                if current is None:
                    raise TargetProblem(f"{self.where} appeared and vanished while this run "
                                        "tried to take it; start again") from None
                if not self._mine(current):
                    self._refuse(current)
                # Ours: the create succeeded, its answer was lost, the retry met AlreadyExists.
            self.held = True
            return
        spec = current.get("spec") or {}
        mine = spec.get("holderIdentity") == self.holder
        if not mine and not self._expired(spec):
            self._refuse(current)
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        update = {**current, "spec": self._spec(transitions,
                                                spec.get("acquireTime") if mine else None)}
        try:
            self.kube.replace(LEASES, self.namespace, self.name, update)
        except Conflict:
            # Another run updated it between our read and our write (it won), or our own write
            # went through, its answer was lost and the retry carried a stale resourceVersion.
            latest = self.kube.get(LEASES, self.namespace, self.name) or current
            if not self._mine(latest):
                self._refuse(latest)
        if not mine and spec.get("holderIdentity"):
            log.warning("%s: took over from %s, whose lease expired (last renewed %s)",
                        self.where, spec.get("holderIdentity"), spec.get("renewTime"))
        self.held = True

    def _mine(self, lease: Obj) -> bool:
        """The Lease names this process as its holder (the identity is unique per process)."""
        return bool((lease.get("spec") or {}).get("holderIdentity") == self.holder)

    def _expired(self, spec: Obj) -> bool:
        renewed = _epoch(spec.get("renewTime") or spec.get("acquireTime"))
        return renewed + float(spec.get("leaseDurationSeconds") or 0) < self.kube.server_now()

    def _refuse(self, lease: Obj) -> None:
        # Not ours (any more): the stress guard stops removing the holder's StressChaos.
        self.held = False
        spec = lease.get("spec") or {}
        expires = _epoch(spec.get("renewTime")) + float(spec.get("leaseDurationSeconds") or 0)
        raise TargetProblem(
            f"another autotune run holds {self.where} ({spec.get('holderIdentity')}, renewed "
            f"{spec.get('renewTime')}): two runs must never tune the same Deployment (a "
            "second run started by hand or with kubectl create job --from=cronjob/...). Wait "
            f"for it to finish; if it died, its lease expires at {_micro(expires)} (the API "
            "server's clock)")

    def release(self) -> None:
        """Give the Lease up (delete it if it is still ours)."""
        if not self.held:
            return
        current = self.kube.get(LEASES, self.namespace, self.name)
        if current is not None and (current.get("spec") or {}).get("holderIdentity") == (
                self.holder):
            meta = current.get("metadata") or {}
            try:
                # Only the version we read: had ours expired and another run taken it over
                # in between, a plain delete would remove that run's Lease.
                self.kube.delete(LEASES, self.namespace, self.name, preconditions={
                    "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")})
            except Conflict:
                log.warning("%s: the Lease changed between reading and deleting it (another "
                            "run took it over): left to its holder", self.where)
        self.held = False
