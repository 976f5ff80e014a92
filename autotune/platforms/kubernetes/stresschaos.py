"""Chaos Mesh StressChaos as the Injector: one object per injection, verified in, verified gone.

Facts this relies on (Chaos Mesh v2.8.3: controllers/common, controllers/chaosimpl/stresschaos):

- the spec cannot be updated, so every injection is a new object with a unique name;
- unknown fields are silently pruned by the API server, so every object is validated against the
  CRD's schema tightened with ``additionalProperties: false`` and created with
  ``fieldValidation=Strict``; ``workers`` is checked to be 1..8192 (0 "injects" nothing);
- *injected* means ``desiredPhase == Run``, container records present and all ``Injected``, and
  a stress-ng PID in ``status.instances[<record id>].uid`` for a CPU stressor, a memStress PID in
  ``.memoryUid`` for a memory stressor (chaos-daemon runs the two as separate processes and
  reports each: pkg/chaosdaemon/stress_server_linux.go); ``AllRecovered`` is not trusted;
- when no pod matched at creation Chaos Mesh never selects again: a Warning event ``Failed``
  whose message is the *selection*'s ("Failed to select targets: ...") with no records fails the
  injection at once. Chaos Mesh emits ``Failed`` for every failed activity (chaos-mesh
  controllers/common/records/controller.go: "select targets", "apply chaos", "recover chaos",
  "update records" on an update conflict; the message format is "Failed to <activity>: <err>",
  controllers/utils/recorder): the others are transient and only reported;
- *recovered* means the object is gone: the ``chaos-mesh/records`` finalizer only goes once every
  record is "Not Injected". We never force it (the ``chaos-mesh.chaos-mesh.org/cleanFinalizer``
  annotation can leave stress-ng running); ``duration`` is the dead-man switch if we die
  *before* deleting.
- a recovery can fail for good: when cancelling stress-ng fails, v2.8.3 leaves the record
  Injected with no event and does not requeue (chaosimpl/stresschaos/impl.go Recover returns
  (Injected, nil) after the CancelStressors error, so records/controller.go sees no error), and a
  deleted object is not requeued for its ``duration`` either. The wait is bounded; then
  ``StressNotRecovered`` names the pods still stressed, the injector refuses any further
  injection and the target any further candidate (``StressGuard``): the study must stop.

Its size (~530 lines) is Chaos Mesh's whole lifecycle as one Injector, with the upstream
checks ported next to the calls they guard.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import uuid
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import jsonschema
import yaml

from autotune.chaos.base import Injection
from autotune.clock import Clock
from autotune.errors import ChaosError, StressNotRecovered
from autotune.experiment.models import Stress
from autotune.live import Live
from autotune.platforms.kubernetes.client import Kube
from autotune.platforms.kubernetes.deployment import StressGuard
from autotune.platforms.kubernetes.errors import (
    ApiError,
    ChaosProblem,
    Conflict,
    NotFound,
    reraise_as,
)
from autotune.platforms.kubernetes.objects import (
    EVENTS,
    MANAGED_BY_LABEL,
    MANAGER,
    STRESSCHAOS,
    STUDY_LABEL,
    TRIAL_LABEL,
    Obj,
    PodPlacement,
    Selection,
    label_value,
    name_of,
    object_name,
    one,
    ours,
)

log = logging.getLogger(__name__)

CRD_FILE = "data/chaos-mesh/chaos-mesh.org_stresschaos.yaml"
MAX_WORKERS = 8192
CRD_MISSING = ("the StressChaos CRD (stresschaos.chaos-mesh.org/v1alpha1) is not installed in "
               "this cluster: install Chaos Mesh (v2.x, see https://chaos-mesh.org/docs/) first")


# --- the CRD schema -------------------------------------------------------------------------

@functools.cache
def crd() -> Obj:
    text = (resources.files("autotune") / CRD_FILE).read_text(encoding="utf-8")
    data: Obj = yaml.safe_load(text)
    return data


def tighten(schema: Any) -> Any:
    """A copy of an OpenAPI schema where every object that lists ``properties`` allows no other."""
    if isinstance(schema, list):
        return [tighten(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: tighten(v) for k, v in schema.items()}
    if "properties" in schema:
        out["properties"] = {k: tighten(v) for k, v in schema["properties"].items()}
        out.setdefault("additionalProperties", False)
    return out


@functools.cache
def _validator() -> jsonschema.Draft7Validator:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(tighten(copy.deepcopy(schema)))


def manifest_problems(manifest: Obj) -> list[str]:
    """Why the API server (or Chaos Mesh) would drop, reject or ignore part of this object."""
    problems = []
    for error in sorted(_validator().iter_errors(manifest), key=lambda e: list(e.path)):
        where = ".".join(str(p) for p in error.path) or "(top level)"
        problems.append(f"{where}: {error.message}")
    spec = manifest.get("spec") or {}
    stressors = spec.get("stressors") or {}
    # Stressors.Normalize (api/v1alpha1/stresschaos_types.go) drops a stressor of 0 workers:
    # Chaos Mesh then reports Injected while nothing runs.
    for kind in ("cpu", "memory"):
        if kind not in stressors:
            continue
        workers = (stressors.get(kind) or {}).get("workers")
        if not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
            problems.append(f"spec.stressors.{kind}.workers: must be 1..{MAX_WORKERS} "
                            f"(0 reports Injected while nothing runs), not {workers!r}")
    if not stressors.get("cpu") and not stressors.get("memory"):
        problems.append("spec.stressors: give cpu or memory (Chaos Mesh's webhook refuses an "
                        "object with neither: missing stressors)")
    if "stressngStressors" in spec:
        problems.append("spec.stressngStressors: never used (ignored or crashes chaos-daemon)")
    return problems


# --- rendering ------------------------------------------------------------------------------

def go_duration(seconds: float) -> str:
    return f"{max(1, math.ceil(seconds))}s"


def identity(study: str | None, labels: Mapping[str, str]) -> dict[str, str]:
    """Labels of an object we create: the caller's, with our ownership always in place."""
    out = {k: label_value(v) for k, v in labels.items()}
    out[MANAGED_BY_LABEL] = MANAGER
    if study is not None:
        out[STUDY_LABEL] = label_value(study)
    return out


def render(*, name: str, placement: PodPlacement, stress: Stress, duration: float,
           labels: Mapping[str, str]) -> Obj:
    """The StressChaos for one injection (see chaos/stresschaos.yaml for a commented example).

    Fixed by design: ``mode: all`` over exactly the pods the candidate was verified to run in
    (``selector.pods``), the tuned container named explicitly (empty means the *first*
    container). Chaos Mesh returns named pods as they are and skips the missing ones
    (pkg/selector/pod/selector.go, ``selectSpecifiedPods``), so a pod that an autoscaler adds
    later, an old pod or a foreign pod with the same labels is never stressed, also not by the
    later bursts of a pattern; a pod replaced in between is caught by ``Target.check``.
    """
    selector: Obj = {"pods": {placement.namespace: sorted(placement.pods)}}
    return {
        "apiVersion": STRESSCHAOS.api_version,
        "kind": STRESSCHAOS.kind,
        "metadata": {"name": name, "namespace": placement.namespace, "labels": dict(labels)},
        "spec": {
            "mode": "all",
            "selector": selector,
            "containerNames": [placement.container],
            "stressors": stressors(stress),
            "duration": go_duration(duration),
        },
    }


def stressors(stress: Stress) -> Obj:
    """``spec.stressors``: cpu (stress-ng in the container) and/or memory (memStress)."""
    out: Obj = {}
    if stress.workers or stress.memory is None:  # 0 workers alone: refused by manifest_problems
        out["cpu"] = {"workers": stress.workers, "load": stress.load}
    if stress.memory is not None:
        out["memory"] = {"workers": stress.memory.workers, "size": stress.memory.size}
    return out


def _placement(live: Live) -> PodPlacement:
    p = live.placement
    if not isinstance(p, PodPlacement) or not p.pods:
        raise ChaosError("the live candidate does not say which pods it runs in: StressChaos "
                         "needs a Kubernetes target")
    return p


# --- status ---------------------------------------------------------------------------------

def records(obj: Obj) -> list[Obj]:
    experiment = (obj.get("status") or {}).get("experiment") or {}
    return list(experiment.get("containerRecords") or [])


def not_injected(obj: Obj) -> str | None:
    """None when the stress is really running (as the module docstring defines it), else what
    is missing."""
    status = obj.get("status") or {}
    phase = (status.get("experiment") or {}).get("desiredPhase")
    if phase != "Run":
        return f"desiredPhase is {phase!r}, not 'Run'"
    recs = records(obj)
    if not recs:
        return "no container records yet"
    pending = [f"{r.get('id')}: {r.get('phase')}" for r in recs if r.get("phase") != "Injected"]
    if pending:
        return f"records not Injected ({'; '.join(pending)})"
    instances = status.get("instances") or {}
    stressors = (obj.get("spec") or {}).get("stressors") or {}
    memory = bool((stressors.get("memory") or {}).get("workers"))
    if (stressors.get("cpu") or {}).get("workers") or not memory:
        no_pid = [str(r.get("id")) for r in recs if not _pid(instances.get(r.get("id")))]
        if no_pid:
            return (f"no stress-ng process reported (status.instances[].uid) for "
                    f"{', '.join(no_pid)}")
    if memory:
        no_pid = [str(r.get("id")) for r in recs
                  if not (instances.get(r.get("id")) or {}).get("memoryUid")]
        if no_pid:
            return (f"no memStress process reported (status.instances[].memoryUid) for "
                    f"{', '.join(no_pid)}")
    return None


def _pid(instance: Obj | None) -> str | None:
    """The stress-ng instance of a record: ``uid`` in v2.8.3 (Chaos Mesh's master renames the
    Go field to CpuUID; accept a ``cpuUid`` too so a CRD upgrade does not read as a failure)."""
    instance = instance or {}
    return instance.get("uid") or instance.get("cpuUid")


def record_pods(obj: Obj) -> set[str]:
    """Pod names from record ids ("namespace/pod/container")."""
    pods = set()
    for r in records(obj):
        parts = str(r.get("id", "")).split("/")
        if len(parts) >= 2:
            pods.add(parts[1])
    return pods


# --- events -------------------------------------------------------------------------------

SELECTION_FAILED = "Failed to select targets"


def selection_failure(events: Sequence[Obj]) -> Obj | None:
    """The Warning ``Failed`` event of a failed pod selection, if any. Chaos Mesh records every
    failed activity as ``Failed`` ("Failed to <activity>: <error>"); only "select targets"
    (no pod matched, or the selector is invalid) is final: selection never runs again."""
    for e in events:
        if e.get("reason") == "Failed" and str(e.get("message", "")).startswith(SELECTION_FAILED):
            return dict(e)
    return None


# --- the injector ---------------------------------------------------------------------------

RECOVER_TIMEOUT = 120.0
"""How long removing a StressChaos may take (its finalizer: chaos-daemon stops stress-ng in every
pod) before the run calls the stress stuck. A stopped night can wait for it twice (the trial's
removal, then the run's cleanup) before its restore: deploy/base/cronjob.yaml's grace period."""


class ChaosMeshInjector:
    """The Injector protocol with Chaos Mesh's StressChaos, in the target's namespace."""

    def __init__(self, kube: Kube, clock: Clock, *, namespace: str, study: str | None,
                 inject_timeout: float = 60.0, recover_timeout: float = RECOVER_TIMEOUT,
                 check_every: float = 2.0, guard: StressGuard | None = None) -> None:
        self.kube, self.clock = kube, clock
        self.namespace, self.study = namespace, study
        self.inject_timeout, self.recover_timeout = inject_timeout, recover_timeout
        self.check_every = check_every
        self.guard = guard or StressGuard()
        self._recovered: set[str] = set()

    # --- Injector protocol --------------------------------------------------------------

    def inject(self, live: Live, stress: Stress, duration: float,
               labels: Mapping[str, str]) -> Injection:
        self.guard.check()
        placement = _placement(live)
        namespace = placement.namespace
        name = object_name(self.study, labels.get(TRIAL_LABEL), uuid.uuid4().hex[:8])
        manifest = render(name=name, placement=placement, stress=stress, duration=duration,
                          labels=identity(self.study, labels))
        problems = manifest_problems(manifest)
        if problems:
            raise ChaosError(f"refusing to create an invalid StressChaos: {'; '.join(problems)}")
        self._create(manifest)
        # Past its duration the stress is over whatever we see: no point waiting longer.
        timeout = min(self.inject_timeout, duration)
        try:
            with reraise_as(ChaosError):
                obj = self._await_injected(namespace, name, set(placement.pods), timeout)
        except StressNotRecovered:
            raise
        except ChaosError as e:
            raise type(e)(f"{e}; {self._remove_after_failure(namespace, name)}") from None
        except BaseException:
            self._remove_after_failure(namespace, name)
            raise
        instances = (obj.get("status") or {}).get("instances") or {}
        return Injection(id=name, started=self.clock.now(), details={
            "kind": "StressChaos", "name": name, "namespace": namespace,
            "pods": sorted(record_pods(obj)), "duration": manifest["spec"]["duration"],
            "workers": stress.workers, "load": stress.load,
            **({"memory": stress.memory.model_dump()} if stress.memory is not None else {}),
            "stress_pids": {k: _pid(v) for k, v in sorted(instances.items())},
            **({"memstress_pids": {k: (v or {}).get("memoryUid")
                                   for k, v in sorted(instances.items())}}
               if stress.memory is not None else {}),
        })

    def recover(self, injection: Injection) -> None:
        """Delete the StressChaos and wait until it is gone. A stress that did not last until
        now (the object deleted by someone else, being deleted, or no longer injected: paused,
        past its duration) fails the recovery with the reason: the window it was to stress
        is discarded, never recorded as measured under stress."""
        namespace = str(injection.details.get("namespace", self.namespace))
        if injection.id in self._recovered:
            return  # idempotent: removed (and judged) already
        with reraise_as(ChaosError):
            lost: str | None = None
            unread: Exception | None = None
            try:
                lost = self._lost(namespace, injection.id)
            except Exception as e:
                # Whether it lasted cannot be read (the API server failing): the stress goes
                # all the same, then the window fails with that reason.
                unread = e
            if self.kube.delete(STRESSCHAOS, namespace, injection.id):
                self._await_gone(namespace, injection.id)
            elif lost is None and unread is None:
                lost = "it was gone when autotune deleted it"
            if unread is not None:
                raise unread
        self._recovered.add(injection.id)
        if lost is not None:
            raise ChaosError(f"StressChaos {namespace}/{injection.id} did not last the window "
                             f"({lost}): someone else deleted or stopped it (another run's "
                             "cleanup, autotune cleanup --namespace --force, a person), so "
                             "the window was not measured under stress and is discarded")

    def _lost(self, namespace: str, name: str) -> str | None:
        """Why the stress of ``name`` is not running as injected now, or None."""
        current = self.kube.get(STRESSCHAOS, namespace, name)
        if current is None:
            return "it no longer exists"
        if current.get("metadata", {}).get("deletionTimestamp"):
            return "it was already being deleted"
        problem = not_injected(current)
        return None if problem is None else f"no longer injected: {problem}"

    def active(self) -> list[str]:
        return sorted(name_of(o) for o in self._ours())

    def cleanup(self) -> list[str]:
        if not self.guard.owns():
            # Refused the run Lease: what is labelled with our study belongs to the run that
            # holds it (its live stress), not to a dead run.
            log.debug("not holding the run Lease: StressChaos objects left to its holder")
            return []
        found = self._ours()
        if not found:
            return []
        with reraise_as(ChaosError):
            for obj in found:
                self.kube.delete(STRESSCHAOS, self.namespace, name_of(obj))
            remaining: list[dict[str, Obj]] = [{}]

            def all_gone(state: dict[str, Obj]) -> bool | None:
                remaining[0] = dict(state)
                return True if not state else None

            if self.kube.wait(Selection(STRESSCHAOS, self.namespace, labels=self._selector()),
                              all_gone, self.recover_timeout) is None:
                self._stuck(list(remaining[0].values()),
                            f"StressChaos objects still present {self.recover_timeout:g}s "
                            f"after deletion in namespace {self.namespace!r}")
        return [f"StressChaos {self.namespace}/{name_of(o)} ("
                f"trial {(o.get('metadata', {}).get('labels') or {}).get(TRIAL_LABEL, '?')})"
                for o in found]

    # --- for validation -----------------------------------------------------------------

    def dry_run(self, placement: PodPlacement, stress: Stress, duration: float) -> None:
        """Let the API server, the CRD schema and Chaos Mesh's webhooks judge a StressChaos."""
        name = object_name(self.study, "dry-run", uuid.uuid4().hex[:8])
        manifest = render(name=name, placement=placement, stress=stress, duration=duration,
                          labels=identity(self.study, {}))
        problems = manifest_problems(manifest)
        if problems:
            raise ChaosError(f"invalid StressChaos: {'; '.join(problems)}")
        self._create(manifest, dry_run=True)

    # --- internals ----------------------------------------------------------------------

    def _selector(self) -> str:
        return ours(self.study)

    def _ours(self) -> list[Obj]:
        try:
            with reraise_as(ChaosError):
                items, _ = self.kube.list(Selection(STRESSCHAOS, self.namespace,
                                                    labels=self._selector()))
        except ChaosError as e:
            if isinstance(e.__cause__, NotFound):
                return []  # no CRD: nothing of ours can exist (inject says what is missing)
            raise
        return items

    def _create(self, manifest: Obj, dry_run: bool = False) -> None:
        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        try:
            self.kube.create(STRESSCHAOS, namespace, manifest, dry_run=dry_run)
        except NotFound as e:
            raise ChaosProblem(CRD_MISSING) from e
        except Conflict as e:
            if not dry_run and self._is_ours(namespace, name):
                log.debug("StressChaos %s/%s already created by a retried request", namespace,
                          name)
                return
            raise ChaosProblem(str(e)) from e
        except ApiError as e:
            raise ChaosProblem(str(e)) from e

    def _is_ours(self, namespace: str, name: str) -> bool:
        with reraise_as(ChaosError):
            existing = self.kube.get(STRESSCHAOS, namespace, name)
        labels = (existing or {}).get("metadata", {}).get("labels") or {}
        return labels.get(MANAGED_BY_LABEL) == MANAGER

    def _await_injected(self, namespace: str, name: str, pods: set[str],
                        timeout: float) -> Obj:
        seen = {"state": "nothing reported yet", "warnings": ""}

        def injected(state: dict[str, Obj]) -> Obj | None:
            obj = state.get(name)
            if obj is None:
                raise ChaosError(f"StressChaos {namespace}/{name} was deleted by someone else "
                                 "before it was injected")
            problem = not_injected(obj)
            if problem is not None:
                seen["state"] = problem
                return None
            selected = record_pods(obj)
            if selected != pods:
                raise ChaosError(f"StressChaos {namespace}/{name} stressed pods "
                                 f"{sorted(selected)} but the candidate runs in {sorted(pods)}")
            return obj

        def failed(state: dict[str, Obj]) -> None:
            warnings = self._warnings(namespace, name)
            obj = state.get(name) or {}
            selection = selection_failure(warnings)
            if selection is not None and not records(obj):
                raise ChaosError(
                    f"Chaos Mesh selected no pod for StressChaos {namespace}/{name} "
                    f"({_messages([selection])}) and never retries selection: check that the "
                    "pods are Running with the Deployment's labels")
            if warnings:
                seen["warnings"] = f"; Chaos Mesh warnings: {_messages(warnings)}"

        obj = self.kube.wait(one(STRESSCHAOS, namespace, name), injected, timeout,
                             every=self.check_every, poll=failed)
        if obj is None:
            raise ChaosError(
                f"StressChaos {namespace}/{name} was not confirmed injected within "
                f"{timeout:g}s ({seen['state']}{seen['warnings']}): check that chaos-daemon runs "
                "on the pods' nodes and read the chaos-controller-manager logs")
        return obj

    def _warnings(self, namespace: str, name: str) -> list[Obj]:
        items, _ = self.kube.list(Selection(EVENTS, namespace,
                                            fields=f"involvedObject.name={name}"))
        return [e for e in items if e.get("type") == "Warning"]

    def _await_gone(self, namespace: str, name: str) -> None:
        last: list[Obj | None] = [None]

        def gone(state: dict[str, Obj]) -> bool | None:
            last[0] = state.get(name)
            return True if last[0] is None else None

        if self.kube.wait(one(STRESSCHAOS, namespace, name), gone,
                          self.recover_timeout) is None:
            self._stuck([last[0] or {"metadata": {"name": name}}],
                        f"StressChaos {namespace}/{name} still exists "
                        f"{self.recover_timeout:g}s after its deletion")

    def _stuck(self, objects: list[Obj], head: str) -> None:
        """Deletion not confirmed: say which pods may still be stressed and what to do, make
        the run refuse any further trial, raise ``StressNotRecovered``."""
        pods = sorted({p for o in objects for p in still_injected(o)})
        states = "; ".join(f"{name_of(o)}: {_stuck_state(o)}" for o in objects)
        failures = _recover_failures(self.kube, self.namespace, objects)
        where = (f"stress-ng may still run in pods {', '.join(pods)} (records still Injected)"
                 if pods else "no record is still Injected, but the finalizer is still there")
        error = StressNotRecovered(
            f"{head} ({states}{failures}): {where}. "
            f"{stuck_advice(self.namespace, pods, [name_of(o) for o in objects])}",
            namespace=self.namespace, objects=[name_of(o) for o in objects], pods=pods)
        self.guard.stuck = error
        raise error

    def _remove_after_failure(self, namespace: str, name: str) -> str:
        try:
            with reraise_as(ChaosError):
                self.kube.delete(STRESSCHAOS, namespace, name)
                self._await_gone(namespace, name)
        except StressNotRecovered:
            raise
        except ChaosError as e:
            log.error("could not remove StressChaos %s/%s: %s", namespace, name, e)
            return f"and removing it failed: {e}"
        return f"StressChaos {namespace}/{name} removed"


def still_injected(obj: Obj) -> list[str]:
    """Pods whose record is not "Not Injected" (the stress may still run there)."""
    pods = []
    for r in records(obj):
        parts = str(r.get("id", "")).split("/")
        if r.get("phase") != "Not Injected" and len(parts) >= 2:
            pods.append(parts[1])
    return sorted(pods)


# chaos-mesh v2.8.3 controllers/common/finalizers/controller.go AnnotationCleanFinalizer: with
# the value "forced" the finalizer goes whatever the records say.
CLEAN_FINALIZER = "chaos-mesh.chaos-mesh.org/cleanFinalizer"


def stuck_advice(namespace: str, pods: Sequence[str], objects: Sequence[str] = ()) -> str:
    restart = (f"Restart the stressed pods (kubectl -n {namespace} delete pod "
               f"{' '.join(pods)}): a new container has no stress-ng. " if pods else "")
    names = " ".join(objects) or "<name>"
    return (
        f"{restart}Check the chaos-controller-manager and chaos-daemon logs (namespace "
        "chaos-mesh) and the object's status.experiment.containerRecords. Chaos Mesh v2.8.3 "
        "does not retry a recovery whose stress-ng cancel failed (the record stays Injected, "
        "silently), and a deleted object's duration does not stop the stress. autotune never "
        "removes the chaos-mesh/records finalizer itself: once the pods are restarted, remove "
        f"it with kubectl -n {namespace} annotate stresschaos {names} "
        f"{CLEAN_FINALIZER}=forced, then run autotune cleanup. The study stops: no trial runs "
        "on a pod that may still be stressed")


def _recover_failures(kube: Kube, namespace: str, objects: list[Obj]) -> str:
    """Chaos Mesh's own words about failed recoveries (Warning "Failed to recover chaos")."""
    messages = []
    for o in objects:
        try:
            items, _ = kube.list(Selection(EVENTS, namespace,
                                           fields=f"involvedObject.name={name_of(o)}"))
        except ApiError:
            continue
        messages += [str(e.get("message")) for e in items if e.get("reason") == "Failed"
                     and "recover" in str(e.get("message", ""))]
    return f"; Chaos Mesh said: {messages[-1]}" if messages else ""


def _stuck_state(obj: Obj) -> str:
    recs = [f"{r.get('id')}: {r.get('phase')}" for r in records(obj)]
    finalizers = obj.get("metadata", {}).get("finalizers") or []
    return (f"finalizers {finalizers}, records: {'; '.join(recs) or 'none'}")


def _messages(events: list[Obj]) -> str:
    return "; ".join(f"{e.get('reason')}: {e.get('message')}" for e in events[-3:])
