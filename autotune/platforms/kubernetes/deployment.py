"""The Kubernetes target: the env of one container of one Deployment.

``apply(env)`` saves the original values of the parameters' variables once, with the order of
the whole env list (an annotation on the Deployment, so a later run can undo a dead one, and a
JSON file under the results directory, for humans), strategic-merge-patches exactly those
variables (``None`` deletes the entry), waits with a watch until the rollout is complete (see
rollout.py: new generation observed, every replica of the *new ReplicaSet* available, no old
pod left) and checks that the running pods carry the candidate env.

``restore()`` puts the original entries back byte for byte (a value or a ``valueFrom``) *and*
their order, so the Deployment returns to its original ReplicaSet. At 0 replicas it restores
and forgets without waiting for pods that will not come.

The patches themselves, and the reading of Deployment and pod JSON, are pure functions in
envpatch.py (with the strategic merge patch semantics they rely on); this module makes the API
calls: it reads, patches, watches and verifies.

Its size (~730 lines) is one class, the Target, whose every method calls the API; the next
cut is the rollout wait (``_await_rollout``, ``_verify_env``, ``_live``) into its own module.
"""

from __future__ import annotations

import json
import logging
import math
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune import files
from autotune.clock import Clock
from autotune.errors import TargetError
from autotune.experiment import models
from autotune.insight import podlog, schedtrace
from autotune.live import Live, Matcher, Window
from autotune.platforms.kubernetes import managedfields, writers
from autotune.platforms.kubernetes.client import Kube
from autotune.platforms.kubernetes.envpatch import (
    Original,
    annotation_patch,
    any_of,
    container_status,
    duplicated,
    entry_value,
    env_entries,
    env_names,
    env_patch,
    find_container,
    gomaxprocs_note,
    pod_container,
    restore_patch,
    shown_entry,
    unusable_reason,
    written_of,
    written_patch,
)
from autotune.platforms.kubernetes.errors import (
    ApiError,
    Conflict,
    Forbidden,
    TargetProblem,
    reraise_as,
)
from autotune.platforms.kubernetes.lease import RunLease
from autotune.platforms.kubernetes.loadgen import LoadGenerator
from autotune.platforms.kubernetes.objects import (
    AUTOSCALERS,
    CONFIGMAPS,
    DEPLOYMENTS,
    NODES,
    ORIGINAL_ENV_ANNOTATION,
    POD_TEMPLATE_HASH,
    PODS,
    REPLICASETS,
    WRITTEN_ENV_ANNOTATION,
    Obj,
    PodPlacement,
    Selection,
    name_of,
    one,
    selector_of,
)
from autotune.platforms.kubernetes.pprof import PodProxy
from autotune.platforms.kubernetes.rollout import (
    ReplicaSetRef,
    controller_of,
    is_active,
    measured_pods,
    new_replicaset,
    owned_by,
    rollout_pods,
    rollout_state,
    stale_condition,
    terminating_pods,
)
from autotune.targets.base import Env, NoiseProbe

log = logging.getLogger(__name__)

# A run's record on the Deployment (envpatch.py), removed from its ReplicaSets as well.
RECORD_ANNOTATIONS = frozenset({ORIGINAL_ENV_ANNOTATION, WRITTEN_ENV_ANNOTATION})

GODEBUG = "GODEBUG"


class StressGuard:
    """Shared by the target and the injector of one run: once a stress could not be confirmed
    gone, the target refuses to apply another candidate (the pods may still be stressed); and
    the injector cleans up other runs' StressChaos only while this run holds the run Lease
    (``owns``), so a run that was refused never removes the stress of the run that holds it."""

    def __init__(self) -> None:
        self.stuck: Exception | None = None
        self.owns: Callable[[], bool] = lambda: True

    def check(self) -> None:
        if self.stuck is not None:
            raise self.stuck


# --- the target -----------------------------------------------------------------------------

class KubernetesTarget:
    """The Target protocol for ``target.kubernetes``."""

    def __init__(self, spec: models.KubernetesTarget, kube: Kube, clock: Clock, *,
                 variables: Sequence[str], study: str, state_dir: Path | None = None,
                 guard: StressGuard | None = None, lease: RunLease | None = None,
                 schedtrace_ms: int | None = None, load: LoadGenerator | None = None,
                 load_seconds: float = 0.0) -> None:
        self.spec, self.kube, self.clock = spec, kube, clock
        self.variables, self.study = list(variables), study
        self.schedtrace_ms = schedtrace_ms
        """``measure.schedtrace``: every candidate runs with GODEBUG=schedtrace=<ms> merged into
        the container's own GODEBUG, which is saved and restored like a parameter's variable."""
        if schedtrace_ms is not None and GODEBUG not in self.variables:
            self.variables.append(GODEBUG)
        self.load, self.load_seconds = load, load_seconds
        """``target.kubernetes.load``: a generator pod per measured candidate, for at most
        ``load_seconds`` (``Experiment.load_seconds``: its start, every scenario's warm-up
        and window, their margins), then ended by its own deadline if nobody deleted it."""
        self._measured = 0
        self.state_file = (state_dir / f"original-env.{spec.namespace}.{spec.deployment}.json"
                           if state_dir is not None else None)
        self.guard = guard or StressGuard()
        self.lease = lease
        """Held from the first change to the Deployment until it is restored."""
        if lease is not None:
            self.guard.owns = lambda: lease.held
        self.facts: dict[str, Any] = {}
        """Learnt elsewhere (the Go version the pods report to Prometheus), for describe()."""
        self._original: Original | None = None
        self._left: Original | None = None
        """The original of a phase that ended by leaving a candidate on the Deployment
        (``on_finish: leave`` or ``best``). ``autotune run`` and the nightly job measure again
        on the same target after the search (the confirmation, the drift check): their first
        change saves this, not the env this run left, as the original."""
        self._written: Env | None = None
        """The tuned variables as the last candidate set them (to tell another writer's change)."""
        self._ever: list[dict[str, str | None]] = []
        """Every candidate env this run (or the dead run whose original it adopted) wrote, the
        last written last: recorded on the Deployment with each (envpatch.written_patch)."""
        self._terminating: list[str] = []
        """Old pods still terminating when the last rollout completed (not measured)."""

    @property
    def where(self) -> str:
        return f"Deployment {self.spec.namespace}/{self.spec.deployment}"

    # --- Target protocol ----------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        with reraise_as(TargetError):
            dep = self._deployment()
        c = find_container(dep, self.spec.container)
        resources = c.get("resources") or {}
        env = env_entries(c)
        limit = (resources.get("limits") or {}).get("cpu")
        return {
            "kind": "kubernetes",
            "namespace": self.spec.namespace,
            "deployment": self.spec.deployment,
            "container": self.spec.container,
            "replicas": int(dep.get("spec", {}).get("replicas", 1)),
            "image": c.get("image"),
            "cpu_limit": None if limit is None else str(limit),
            "cpu_request": _str_or_none((resources.get("requests") or {}).get("cpu")),
            "memory_limit": _str_or_none((resources.get("limits") or {}).get("memory")),
            "image_ids": self._image_ids(dep),
            "node_types": self._node_types(dep),
            "env": {v: shown_entry(env.get(v)) for v in self.variables},
            "gomaxprocs_default": gomaxprocs_note(limit, entry_value(env.get("GOMAXPROCS"))),
            "on_finish": self.spec.on_finish,
            "autoscaler": self.autoscaler(),
            "replica_changes": REPLICA_CHANGES,
            **self.facts,
        }

    def _node_types(self, dep: Obj) -> list[str] | None:
        """The instance types of the nodes the pods run on (the well-known label
        ``node.kubernetes.io/instance-type``); None when no node says, or when ``get nodes``
        is not granted (the ClusterRole's; deploy/README.md: the fingerprint then has no node
        types, which is not a change of environment: fingerprint.OBSERVED)."""
        with reraise_as(TargetError):
            items, _ = self.kube.list(self._pods(self._selector(dep)))
            nodes = {str(p["spec"]["nodeName"]) for p in items
                     if is_active(p) and (p.get("spec") or {}).get("nodeName")}
            types = set()
            for name in sorted(nodes):
                try:
                    node = self.kube.get(NODES, None, name) or {}
                except Forbidden as e:
                    log.warning("%s: the pods' node types are unknown (%s): the environment "
                                "fingerprint has none tonight", self.where, e)
                    return None
                label = ((node.get("metadata") or {}).get("labels") or {}).get(INSTANCE_TYPE)
                if label:
                    types.add(str(label))
        return sorted(types) or None

    def _image_ids(self, dep: Obj) -> list[str] | None:
        """The digests the running pods' container really pulled (``imageID``): a tag can move
        under the same image reference. None when no pod reports one yet."""
        with reraise_as(TargetError):
            items, _ = self.kube.list(self._pods(self._selector(dep)))
        ids = {str(s["imageID"]) for p in items if is_active(p)
               if (s := container_status(p, self.spec.container)).get("imageID")}
        return sorted(ids) or None

    def autoscaler(self) -> dict[str, Any] | None:
        """The HorizontalPodAutoscaler that scales this Deployment, if any (its bounds and
        metrics), found the way the HPA controller resolves ``scaleTargetRef``."""
        with reraise_as(TargetError):
            items, _ = self.kube.list(Selection(AUTOSCALERS, self.spec.namespace))
        for hpa in items:
            ref = hpa.get("spec", {}).get("scaleTargetRef") or {}
            if ref.get("kind") == "Deployment" and ref.get("name") == self.spec.deployment:
                spec = hpa["spec"]
                metrics = [m.get("resource", {}).get("name") or m.get("type")
                           for m in spec.get("metrics") or []]
                return {"name": hpa["metadata"]["name"],
                        "min_replicas": int(spec.get("minReplicas", 1)),
                        "max_replicas": int(spec.get("maxReplicas", 1)),
                        "metrics": [str(m) for m in metrics]}
        return None

    def apply(self, env: Env) -> Live:
        return self._apply(env, measured=True)

    def _apply(self, env: Env, measured: bool) -> Live:
        """``measured``: a candidate to measure (schedtrace on, the load generator started),
        not the study's final choice."""
        unknown = sorted(set(env) - set(self.variables))
        if unknown:
            raise TargetError(f"not a parameter's variable: {', '.join(unknown)}")
        self.guard.check()
        with reraise_as(TargetError):
            self._hold()
            dep = self._deployment()
            usable_problem = self._unusable(dep)
            if usable_problem is not None:
                raise TargetProblem(f"{self.where} {usable_problem}")
            self._save_original(dep)
            self._adopt_outside_changes(dep)
            if self.load is not None:
                self.load.stop()  # the rollout is not measured: no load on it
            full = self._godebug(env, measured)
            self._ever = [c for c in self._ever if c != dict(full)] + [dict(full)]
            patched = self.kube.patch(DEPLOYMENTS, self.spec.namespace, self.spec.deployment,
                                      written_patch(env_patch(self.spec.container, full),
                                                    self._ever))
            self._written = dict(full)
            try:
                new, pods = self._await_rollout(patched, self.spec.rollout_timeout)
            except TargetError as e:
                raise type(e)(f"{e}; {self._roll_back()}") from None
            self._verify_env(pods, full)
            live = self._live(patched, new, pods, env)
        if measured and self.load is not None:
            self._measured += 1
            name = self.load.start(str(self._measured), self.load_seconds,
                                   avoid=_placement(live).pod_labels)
            live = replace(live, load_scope=self.load.scope(name), load_pods=(name,),
                           details={**live.details, "load_pod": name})
        return live

    def _godebug(self, env: Env, measured: bool) -> Env:
        """``env`` plus GODEBUG: with schedtrace merged in for a measured candidate, as the
        container had it (or the candidate set it) for the study's final choice."""
        if self.schedtrace_ms is None:
            return env
        assert self._original is not None
        if GODEBUG in env:  # a parameter tunes GODEBUG itself: trace on top of its value
            base = env[GODEBUG]
        else:
            entry = self._original.env.get(GODEBUG)
            if entry is not None and "value" not in entry:
                source = ", ".join(sorted(set(entry) - {"name"}))
                raise TargetProblem(
                    f"{self.where}: GODEBUG is set from {source}, not as a "
                    "value: measure.schedtrace cannot add schedtrace= to it. Set GODEBUG as a "
                    "plain value, or turn measure.schedtrace off")
            base = entry_value(entry)
        return {**env, GODEBUG: schedtrace.merge_godebug(base, self.schedtrace_ms)
                if measured else base}

    def check(self, live: Live) -> Mapping[str, Any]:
        placement = _placement(live)
        self._check_env(live)
        if live.load_pods and self.load is not None:
            problem = self.load.alive()
            if problem is not None:
                raise TargetError(f"{problem}: the load changed during the window, which is "
                                  "discarded")
        with reraise_as(TargetError):
            items, _ = self.kube.list(self._pods(placement.selector))
        before = {p["name"]: p for p in live.details.get("pods", [])}
        now = {str(p["metadata"]["name"]): p for p in items if is_active(p)
               and p.get("metadata", {}).get("labels", {}).get(POD_TEMPLATE_HASH)
               == placement.pod_template_hash}
        changes = [f"pod {n} is gone" for n in sorted(before.keys() - now.keys())]
        added = sorted(now.keys() - before.keys())
        for name in sorted(before.keys() & now.keys()):
            status = container_status(now[name], self.spec.container)
            old = before[name]
            if (status.get("containerID"), status.get("restartCount", 0)) != (
                    old["containerID"], old["restartCount"]):
                changes.append(f"container {self.spec.container} of pod {name} restarted "
                               f"(restartCount {old['restartCount']} -> "
                               f"{status.get('restartCount', 0)})")
        if changes:
            raise TargetError(f"{self.where} changed during the measurement ("
                              f"{'; '.join(changes)}): the stress may have stopped, so the "
                              "window is discarded")
        if not added:
            return {}
        log.warning("%s scaled up during the window (new pods %s): measured per pod, over the "
                    "pods present when the window started", self.where, ", ".join(added))
        return {"scaled_up": added, "measured_pods": sorted(before)}

    def _check_env(self, live: Live) -> None:
        """The Deployment still declares the candidate's env: another writer (a GitOps
        controller, a person) that changed it during the window changed the pods too, or is
        about to: the window is discarded, naming the writer from managedFields."""
        with reraise_as(TargetError):
            dep = self._deployment()
        declared = env_entries(find_container(dep, self.spec.container))
        wrong = [f"{v}={shown_entry(declared.get(v)) or 'unset'} (want {value or 'unset'})"
                 for v, value in live.env.items()
                 if (declared.get(v) is None) != (value is None)
                 or (value is not None and entry_value(declared.get(v)) != value)]
        if not wrong:
            return
        who = writers.changed_by(dep, self.spec.container)
        by = f" by {', '.join(who)}" if who else ""
        raise TargetError(
            f"the env of {self.where} was changed{by} during the measurement "
            f"({'; '.join(wrong)}): the window is discarded. A GitOps controller (Argo CD "
            "self-heal, Flux) reverts candidates: pause its sync for the study "
            "(target.kubernetes.allow_external_writers only lets the run start)")

    def restore(self, best: Env | None = None) -> None:
        """Put the original env back, unless ``on_finish`` says to leave the last candidate or
        to keep ``best`` (the study's best feasible candidate); without a best, the original
        comes back, the safe default. The load generator stops first; its failure to stop
        never keeps the env from coming back (it is raised after).
        """
        try:
            if self.load is not None:
                with reraise_as(TargetError):
                    self.load.stop()
        finally:
            self._restore_env(best)

    def _restore_env(self, best: Env | None) -> None:
        if self._original is None:
            self._release()
            return
        with reraise_as(TargetError):
            self._adopt_outside_changes(self._deployment())
        original = self._original
        if best is not None and self.spec.on_finish == "best" and self.guard.stuck is None:
            self.finish_with(best)
            self._left = original
            self._release()
            return
        with reraise_as(TargetError):
            if self.spec.on_finish == "leave":
                self._forget(keep_file=True)
                self._left = original
                log.info("%s: left with the last candidate's env (on_finish: leave); the "
                         "original is in %s", self.where, self.state_file)
                self._release()
                return
            self._put_back(original)
            self._forget()
            self._left = None
            self._release()

    def finish_with(self, env: Env) -> Live:
        """Apply ``env`` as the study's choice and keep it: a later ``restore()`` does nothing.
        Without schedtrace: the container's own GODEBUG comes back."""
        live = self._apply(env, measured=False)
        with reraise_as(TargetError):
            self._forget()
        return live

    def cleanup(self) -> list[str]:
        """Restore the Deployment if a run that did not finish left its original env on it.
        Takes the run Lease first: a run that is still alive is not "unfinished"."""
        with reraise_as(TargetError):
            self._hold()
        done = self.load.cleanup() if self.load is not None else []
        with reraise_as(TargetError):
            dep = self._deployment()
            original = Original.of(dep)
            if original is None:
                # A finished run's record left on the ReplicaSets (by an earlier version, or
                # its removal failed): before an owner's rollout undo brings it back.
                return [*done, *unrecorded(self.where, self._unrecord_replicasets())]
            original = self._kept_since(dep, original)
            self._put_back(original)
            self._forget()
        return [*done, f"{self.where}: restored the original env of {', '.join(original.env)} "
                f"saved by an unfinished run of study {original.study!r} at {original.saved_at}"]

    def noise_probe(self) -> NoiseProbe | None:
        return None  # other tenants' CPU on the node is not observable from here

    def pprof(self, live: Live) -> PodProxy | str:
        """``target.kubernetes.pprof_port`` of the candidate's first pod, through the pod proxy
        (a trace is of one process; the StressChaos stresses every pod alike)."""
        if self.spec.pprof_port is None:
            return "target.kubernetes.pprof_port is not set"
        if not live.pods:
            return "the candidate has no pod to capture"
        return PodProxy(self.kube, self.spec.namespace, sorted(live.pods)[0], self.spec.pprof_port)

    def schedtrace(self, live: Live, window: Window) -> schedtrace.Trace | str:
        """The SCHED lines each pod of ``live`` printed during ``window``, from its log. With
        several pods, the trace of the pod whose run queues held the most goroutines (p99.9):
        overflow is a per-process event, and summing processes would invent queues."""
        if self.schedtrace_ms is None:
            return "measure.schedtrace is off"
        names = [str(p["name"]) for p in live.details.get("pods", [])]
        if not names:
            return "the candidate has no pod to read"
        # Whole seconds back to a little before the window (the kubelet filters by its stamps).
        since = math.ceil(self.clock.now() - window.start) + 2
        traces: dict[str, schedtrace.Trace] = {}
        for name in names:
            try:
                text, cut = self.kube.pod_log(self.spec.namespace, name, self.spec.container,
                                              since)
            except Forbidden as e:
                return f"{e} (apply deploy/rbac-schedtrace.yaml)"
            except ApiError as e:
                return f"reading the log of pod {name}: {e}"
            found = podlog.trace_in_window(text, window.start, window.end, truncated=cut)
            if isinstance(found, str):
                return f"pod {name}: {found}"
            traces[name] = found
        worst = max(traces, key=lambda n: _runnable_p999(traces[n]))
        source = (f"pod {worst}" if len(traces) == 1 else
                  f"pod {worst}, the most runnable goroutines of {len(traces)} pods")
        # The busiest pod of complete traces only: another pod's missing part may hold more.
        incomplete = "; ".join(f"pod {n}: {t.incomplete}" for n, t in sorted(traces.items())
                               if t.incomplete)
        return replace(traces[worst], source=source, incomplete=incomplete)

    def _hold(self) -> None:
        if self.lease is not None:
            self.lease.acquire()  # takes it, or renews it: every trial passes here

    def _still_hold(self) -> None:
        """Renew the Lease before putting the original back or dropping its record. A run
        whose Lease expired meanwhile (two long rollouts) and was taken over must not touch
        the Deployment: the run that took it adopted the saved original and restores it, and
        our patch or our removal of the annotation (which it wrote) would undo its work."""
        if self.lease is None:
            return
        try:
            self.lease.acquire()
        except TargetProblem as e:
            raise TargetProblem(
                f"{self.where}: this run's Lease expired and another run took the Deployment "
                f"over, so this run leaves it to that run, which restores the original env it "
                f"adopted ({e})") from None

    def _release(self) -> None:
        if self.lease is not None:
            self.lease.release()

    # --- for validation and the start of a run -----------------------------------------

    def external_writers(self, unset: Sequence[str]) -> tuple[list[str], list[str]]:
        """(problems, warnings): what besides autotune sets the tuned variables. ``unset``: the
        variables the study leaves unset (the baseline), which an envFrom source must not set;
        a GitOps controller that owns the env is a problem for every variable (writers.py)."""
        with reraise_as(TargetError):
            dep = self._deployment()
            container = find_container(dep, self.spec.container)
            problems = writers.env_from_problems(container, list(unset), self._configmap_keys)
        found, warnings = writers.writer_problems(dep, self.spec.container)
        return [f"{self.where}: {p}" for p in problems + found], [
            f"{self.where}: {w}" for w in warnings]

    def _configmap_keys(self, name: str) -> list[str] | str | None:
        try:
            cm = self.kube.get(CONFIGMAPS, self.spec.namespace, name)
        except Forbidden:
            return "not allowed to get configmaps: see deploy/rbac.yaml"
        if cm is None:
            return None
        return sorted({*(cm.get("data") or {}), *(cm.get("binaryData") or {})})


    def dry_run(self, env: Env) -> None:
        """Let the API server (and its admission webhooks) judge the patch that applies ``env``
        and the one that would restore the env afterwards; change nothing. (The restore is
        judged against the env as it is now: its order check, apimachinery's
        validatePatchWithSetOrderList, depends only on the patch itself.)"""
        with reraise_as(TargetError):
            dep = self._deployment()
            container = find_container(dep, self.spec.container)
            entries = env_entries(container)
            original = Original(container=self.spec.container, study=self.study, saved_at="",
                                env={v: entries.get(v) for v in self.variables},
                                order=tuple(env_names(container)))
            applied = self.kube.patch(DEPLOYMENTS, self.spec.namespace, self.spec.deployment,
                                      env_patch(self.spec.container, env), dry_run=True)
            after = env_names(find_container(applied, self.spec.container))
            try:
                self.kube.patch(DEPLOYMENTS, self.spec.namespace, self.spec.deployment,
                                restore_patch(original, after), dry_run=True)
            except ApiError as e:
                raise TargetError(f"restoring the env afterwards would fail: {e}") from e

    def usable(self) -> str | None:
        """Why the Deployment cannot be tuned as it is (paused, 0 replicas), or None."""
        with reraise_as(TargetError):
            problem = self._unusable(self._deployment())
        return None if problem is None else f"{self.where} {problem}"

    def _unusable(self, dep: Obj) -> str | None:
        """Paused, 0 replicas, or a tuned variable listed twice in the container's env."""
        return unusable_reason(dep) or duplicated(find_container(dep, self.spec.container),
                                                  self.variables)

    def current(self) -> Live:
        """The pods running now, as a Live, without changing anything (to try the queries)."""
        with reraise_as(TargetError):
            dep = self._deployment()
            new = self._new_replicaset(dep)
            items, _ = self.kube.list(self._pods(self._selector(dep)))
        pods = rollout_pods({str(p["metadata"]["name"]): p for p in items}, new)
        if not pods:
            raise TargetProblem(f"{self.where} has no running pod")
        env = env_entries(find_container(dep, self.spec.container))
        return self._live(dep, new, pods, {v: entry_value(env.get(v)) for v in self.variables})

    # --- internals ----------------------------------------------------------------------

    def _deployment(self) -> Obj:
        dep = self.kube.get(DEPLOYMENTS, self.spec.namespace, self.spec.deployment)
        if dep is None:
            raise TargetProblem(f"{self.where} not found; check target.kubernetes.namespace, "
                                ".deployment and the kube context")
        return dep

    @staticmethod
    def _selector(dep: Obj) -> str:
        selector = dep.get("spec", {}).get("selector") or {}
        return selector_of(selector.get("matchLabels") or {}, selector.get("matchExpressions"))

    def _pods(self, selector: str | None) -> Selection:
        return Selection(PODS, self.spec.namespace, labels=selector)

    def _replicasets(self, dep: Obj) -> list[Obj]:
        items, _ = self.kube.list(Selection(REPLICASETS, self.spec.namespace,
                                            labels=self._selector(dep)))
        return [rs for rs in items if owned_by(rs, dep)]

    def _new_replicaset(self, dep: Obj) -> ReplicaSetRef:
        new = new_replicaset(dep, self._replicasets(dep))
        if new is None:
            raise TargetError(f"{self.where} has no ReplicaSet with its current pod template "
                              "(the Deployment controller has not created it)")
        return new

    def _save_original(self, dep: Obj) -> None:
        """Record the original env before the first change (or adopt a dead run's record)."""
        if self._original is not None:
            return
        container = find_container(dep, self.spec.container)
        current = env_entries(container)
        annotated = Original.of(dep)
        found = annotated
        if found is not None:  # a dead run's record: its written candidates come with it
            self._ever = [*(written_of(dep) or []), *self._ever]
            log.warning("%s carries the original env saved by an unfinished run of study %r "
                        "(%s): keeping that as the original", self.where, found.study,
                        found.saved_at)
        elif self._left is not None:
            # The env on the Deployment is the candidate this run left there (on_finish).
            found = self._left
            log.info("%s: measured again after leaving a candidate on it; the original is still "
                     "the one saved at %s", self.where, found.saved_at)
        fresh = {v: current.get(v) for v in self.variables}
        owned = managedfields.owners(_managed_fields(dep), self.spec.container,
                                     [v for v in self.variables if v not in (found.env if found
                                                                             else {})])
        original = Original(
            container=found.container if found else self.spec.container,
            env={**fresh, **(found.env if found else {})},
            study=found.study if found else self.study,
            saved_at=found.saved_at if found else _iso(self.clock.now()),
            order=found.order if found else tuple(env_names(container)),
            owners={**owned, **(found.owners if found else {})})
        if annotated is None or original.env != annotated.env:
            self.kube.patch(DEPLOYMENTS, self.spec.namespace, self.spec.deployment,
                            annotation_patch(original))
        self._original = original
        self._write_file(original)

    def _write_file(self, original: Original) -> None:
        if self.state_file is None:
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        # Never through a link planted in the results directory (the CronJob's volume):
        # autotune.files (review finding: a fixed .tmp name, written through a link).
        files.replace(self.state_file, json.dumps(
            {"deployment": self.where, **json.loads(original.to_json())}, indent=1,
            sort_keys=True))

    def _adopt_outside_changes(self, dep: Obj) -> None:
        """A tuned variable another writer changed since this run last set it (a ``kubectl
        apply`` or a ``helm upgrade`` in the night) holds production's new value: it replaces
        the saved original's entry, so that the restore puts theirs back, not the value from
        before the run (review finding: the restore silently undid their change)."""
        if self._written is None or self._original is None:
            return
        live = env_entries(find_container(dep, self._original.container))
        changed: dict[str, Obj | None] = {}
        for var, value in self._written.items():
            if var not in self._original.env:
                continue
            entry = live.get(var)
            ours = (entry is None if value is None else
                    entry is not None and entry.get("value") == value
                    and not entry.get("valueFrom"))
            # A value of an earlier candidate is this run's too (a `kubectl rollout undo`
            # during the night brings one back): not another writer's original.
            earlier = (entry is None or not entry.get("valueFrom")) and any(
                var in c and c[var] == (None if entry is None else entry.get("value"))
                for c in self._ever)
            if not ours and not earlier:
                changed[var] = entry
        if not changed:
            return
        # Their write made them the entries' owners: those are given back after the restore.
        # Not autotune's share of them (a candidate had re-added the entry; their forced apply
        # of it shared what was equal): it is ours only for the study, and given back it would
        # keep a half entry ({name} without its value) once they stop declaring it.
        owned = {v: [o for o in found if o.get("manager") != writers.FIELD_MANAGER]
                 for v, found in managedfields.owners(_managed_fields(dep),
                                                      self._original.container,
                                                      sorted(changed)).items()}
        original = replace(self._original, env={**self._original.env, **changed},
                           owners={**self._original.owners,
                                   **owned})
        log.warning("%s: %s changed by another writer since this run set %s: the new entries "
                    "are what the restore puts back", self.where, ", ".join(sorted(changed)),
                    "it" if len(changed) == 1 else "them")
        self._still_hold()
        self.kube.patch(DEPLOYMENTS, self.spec.namespace, self.spec.deployment,
                        annotation_patch(original))
        self._original = original
        self._write_file(original)

    def _kept_since(self, dep: Obj, original: Original) -> Original:
        """The undo of a dead run keeps what someone else set since (``kubectl set env`` during
        the day), as a run keeps another writer's change within it (``_adopt_outside_changes``),
        and puts back anything of the run's: every tuned variable goes back when the live env
        is one of the candidates the run recorded writing (``kubectl rollout undo`` brings back
        an earlier one), else each whose live value is the last candidate's (where the run
        died). A record from before candidates were recorded: everything goes back."""
        written = written_of(dep)
        if not written:
            return original
        live = env_entries(find_container(dep, original.container))

        def plain(var: str) -> str | None:
            entry = live.get(var)
            return None if entry is None else entry.get("value")

        def a_reference(var: str) -> bool:
            entry = live.get(var)
            return entry is not None and (bool(entry.get("valueFrom")) or "value" not in entry)

        if any(all(not a_reference(v) and plain(v) == value for v, value in c.items())
               for c in written):
            return original
        last = written[-1]
        changed: dict[str, Obj | None] = {}
        for var, was in original.env.items():
            entry = live.get(var)
            if entry == was:
                continue
            if a_reference(var) or var not in last or plain(var) != last[var]:
                changed[var] = entry
        if not changed:
            return original
        log.warning("%s: %s set by someone else since the unfinished run: kept",
                    self.where, ", ".join(f"{v}={shown_entry(e) if e else '(unset)'}"
                                          for v, e in sorted(changed.items())))
        return replace(original, env={**original.env, **changed},
                       owners={v: o for v, o in original.owners.items() if v not in changed})

    def _forget(self, keep_file: bool = False) -> None:
        """Drop the saved original: from the Deployment, from disk and from memory."""
        self._still_hold()
        self.kube.patch(DEPLOYMENTS, self.spec.namespace, self.spec.deployment,
                        annotation_patch(None))
        self._unrecord_replicasets()
        if self.state_file is not None and not keep_file:
            self.state_file.unlink(missing_ok=True)
        self._original = None
        self._written = None
        self._ever = []

    def _unrecord_replicasets(self) -> list[str]:
        """``unrecord_replicasets`` for this Deployment. Not fatal (the run's record is off the
        Deployment; an older Role may not grant the patch): said with the command that does it
        by hand, and tried again by the next run's or ``autotune cleanup``'s start."""
        dep: Obj | None = None
        try:
            dep = self._deployment()
            return unrecord_replicasets(self.kube, dep)
        except (ApiError, TargetError) as e:
            selector = self._selector(dep) if dep is not None else "<the Deployment's selector>"
            log.warning("%s: the run's record is off the Deployment but not off its ReplicaSets "
                        "(%s): a `kubectl rollout undo` would bring it back, and the next run "
                        "would take it for a killed run's; the next run or `autotune cleanup` "
                        "removes it, or `kubectl -n %s annotate rs -l %s %s- %s-`", self.where,
                        e, self.spec.namespace, shlex.quote(selector), ORIGINAL_ENV_ANNOTATION,
                        WRITTEN_ENV_ANNOTATION)
            return []

    def _restore_patch(self, original: Original) -> Obj:
        dep = self._deployment()
        current = env_names(find_container(dep, original.container))
        return restore_patch(original, current)

    def _put_back(self, original: Original) -> None:
        self._still_hold()
        patched = self.kube.patch(DEPLOYMENTS, self.spec.namespace, self.spec.deployment,
                                  self._restore_patch(original))
        # The template holds the original again: what autotune wrote last is the original, so a
        # restore tried again after a failed wait below neither takes it for another writer's
        # change of the candidate nor misses a change someone makes in between (valueFrom
        # entries are not compared: ``_adopt_outside_changes`` reads values).
        self._written = {v: (None if e is None else e.get("value"))
                         for v, e in original.env.items() if e is None or not e.get("valueFrom")}
        patched, given = self._give_back(original, patched, last=False)
        try:
            if int(patched.get("spec", {}).get("replicas", 1)) < 1:
                # Scaled to 0 (by a person or a scaler): the template is restored, no pod will
                # come to prove it, and the saved original must go all the same.
                log.info("%s has 0 replicas: env restored without waiting for pods", self.where)
            else:
                self._await_rollout(patched, self.spec.rollout_timeout)
        finally:
            if not given:
                # The Deployment controller's status writes outlasted the retries (a rollout on
                # a busy control plane: a fresh CI run met it); once the rollout is over they
                # have stopped, so once more, and only then warn.
                try:
                    self._give_back(original, self._deployment(), last=True)
                except (ApiError, TargetError) as e:  # the env is back: said, not raised
                    log.warning("%s: the env is restored, but its field ownership stays with "
                                "autotune (%s)", self.where, e)

    def _give_back(self, original: Original, dep: Obj, *, last: bool) -> tuple[Obj, bool]:
        """Set the ownership of the restored entries back to what was recorded with them
        (managedfields.py says why); say whether it was. Optimistic: the Deployment
        controller's status writes move the resourceVersion during a rollout, so a conflict
        waits (0.1 s, doubling: they come in bursts), re-reads and tries again, 5 times in all.
        Not fatal: the env is back; with ``last``, a later apply of the declaring tool is warned
        about."""
        recorded = {v: o for v, o in original.owners.items() if original.env.get(v) is not None}
        why = ""
        for attempt in range(5):
            fields = managedfields.given_back(_managed_fields(dep), original.container, recorded)
            if fields is None:
                return dep, True
            try:
                given = self.kube.patch(DEPLOYMENTS, self.spec.namespace, self.spec.deployment,
                                        {"metadata": {"resourceVersion": dep["metadata"][
                                            "resourceVersion"], "managedFields": fields}})
                if managedfields.given_back(_managed_fields(given), original.container,
                                            recorded) is None:
                    return given, True
                # A record it cannot decode, it ignores (decodeLiveOrNew keeps the live ones).
                why, dep = "the API server did not take the recorded owners", given
                break
            except Conflict:
                why = "the Deployment kept changing"
                if attempt == 4:
                    break
                self.clock.sleep(0.1 * 2 ** attempt)
                try:
                    dep = self._deployment()
                except (ApiError, TargetError) as e:  # the env is back: said, not raised
                    why = str(e)
                    break
            except ApiError as e:  # a record the API server refuses: the env is back anyway
                why = str(e)
                break
        if last:
            log.warning("%s: the env is restored, but its field ownership stays with autotune "
                        "(%s): a server-side apply that stops declaring %s will not remove it",
                        self.where, why, ", ".join(sorted(recorded)))
        return dep, False

    def _roll_back(self) -> str:
        """After a failed rollout: re-apply the original env without waiting for it."""
        if self._original is None:
            return "nothing to roll back"
        try:
            self.kube.patch(DEPLOYMENTS, self.spec.namespace, self.spec.deployment,
                            self._restore_patch(self._original))
        except (ApiError, TargetError) as e:
            return f"re-applying the original env failed too: {e}"
        self._written = None  # the template holds the original again, not a candidate
        return "re-applied the original env (its rollout continues in the background)"

    def _await_rollout(self, dep: Obj, timeout: float) -> tuple[ReplicaSetRef, dict[str, Obj]]:
        """Wait for the rollout of ``dep``'s generation as ``kubectl rollout status`` does (the
        Deployment's counters: rollout.py), then take the Ready pods of the new ReplicaSet:
        those a window measures. Old pods still terminating and a replica count an autoscaler
        moved meanwhile do not hold it up (they are recorded with the candidate)."""
        generation = int(dep.get("metadata", {}).get("generation", 0))
        replicas = int(dep.get("spec", {}).get("replicas", 1))
        if replicas < 1:
            raise TargetProblem(f"{self.where} has 0 replicas: there is nothing to measure")
        stale = stale_condition(dep)
        deadline = self.clock.monotonic() + timeout
        waiting = ["no status yet"]

        def rolled_out(state: dict[str, Obj]) -> Obj | None:
            current = state.get(self.spec.deployment)
            if current is None:
                waiting[0] = "the Deployment is gone"
                return None
            reason = rollout_state(current, generation, stale)
            waiting[0] = reason or ""
            return current if reason is None else None

        while True:
            remaining = max(0.0, deadline - self.clock.monotonic())
            done = self.kube.wait(one(DEPLOYMENTS, self.spec.namespace, self.spec.deployment),
                                  rolled_out, remaining)
            if done is None:
                break
            new = new_replicaset(done, self._replicasets(done))
            if new is None:
                raise TargetError(f"the rollout of {self.where} completed but no ReplicaSet "
                                  "has its pod template")
            items, _ = self.kube.list(self._pods(self._selector(done)))
            state = {str(p["metadata"]["name"]): p for p in items}
            pods = measured_pods(state, new)
            if pods:
                self._terminating = terminating_pods(state, new)
                return new, pods
            # The counters said available but no pod is Ready now (one just failed its
            # probe): look again shortly, within the same deadline.
            waiting[0] = f"no Ready pod of ReplicaSet {new.name}"
            if self.clock.monotonic() >= deadline:
                break
            self.clock.sleep(min(1.0, max(0.0, deadline - self.clock.monotonic())))
        raise TargetError(f"the rollout of {self.where} did not complete within "
                          f"{timeout:g}s ({waiting[0]})")

    def _verify_env(self, pods: Mapping[str, Obj], env: Env) -> None:
        wrong = []
        for name, pod in sorted(pods.items()):
            seen = env_entries(pod_container(pod, self.spec.container))
            for var, value in env.items():
                entry = seen.get(var)
                actual = entry_value(entry) if entry is not None else None
                if (entry is None) != (value is None) or actual != value:
                    wrong.append(f"{name}: {var}={shown_entry(entry)} (want "
                                 f"{'unset' if value is None else value})")
        if wrong:
            raise TargetError(f"the pods of {self.where} do not run the candidate env "
                              f"({'; '.join(wrong)}); a mutating webhook or another controller "
                              "may be rewriting it")

    def _live(self, dep: Obj, new: ReplicaSetRef, pods: Mapping[str, Obj], env: Env) -> Live:
        names = sorted(pods)
        selector = dep.get("spec", {}).get("selector") or {}
        container = find_container(dep, self.spec.container)
        cpu_limit = ((container.get("resources") or {}).get("limits") or {}).get("cpu")
        details_pods = []
        for name in names:
            status = container_status(pods[name], self.spec.container)
            details_pods.append({"name": name, "containerID": status.get("containerID"),
                                 "restartCount": int(status.get("restartCount", 0)),
                                 "node": pods[name].get("spec", {}).get("nodeName"),
                                 "owner": (controller_of(pods[name]) or {}).get("name")})
        placement = PodPlacement(
            namespace=self.spec.namespace, container=self.spec.container, pods=tuple(names),
            pod_labels=dict(selector.get("matchLabels") or {}),
            pod_expressions=tuple(dict(e) for e in selector.get("matchExpressions") or []),
            pod_template_hash=new.pod_template_hash or None)
        return Live(
            env=dict(env),
            since=self.clock.now(),
            scope=(Matcher("namespace", self.spec.namespace),
                   Matcher("pod", any_of(names), regex=True)),
            placement=placement,
            pods=tuple(names),
            details={"namespace": self.spec.namespace, "deployment": self.spec.deployment,
                     "container": self.spec.container, "replicaset": new.name,
                     "generation": int(dep.get("metadata", {}).get("generation", 0)),
                     "replicas": int(dep.get("spec", {}).get("replicas", 1)),
                     "terminating_pods": list(self._terminating),
                     "cpu_limit": _str_or_none(cpu_limit),
                     "gomaxprocs_default": gomaxprocs_note(cpu_limit, env.get("GOMAXPROCS")),
                     "pods": details_pods},
        )


INSTANCE_TYPE = "node.kubernetes.io/instance-type"

REPLICA_CHANGES = (
    "measured per pod: each window's queries select the pods present when it started, which "
    "are the pods the StressChaos stressed; pods an autoscaler adds during a window are recorded "
    "with the trial (changes.scaled_up) and not measured. A scale-up moves load off the measured "
    "pods: pin the HPA (minReplicas = maxReplicas) for the study when trials must see equal load")


def _placement(live: Live) -> PodPlacement:
    if not isinstance(live.placement, PodPlacement):
        raise TargetError("the live candidate was not started by the Kubernetes target")
    return live.placement


def unrecord_replicasets(kube: Kube, dep: Obj) -> list[str]:
    """Remove a run's record from the ReplicaSets of ``dep`` (a Deployment); the names of those
    that carried it. The Deployment controller copies the Deployment's annotations to its new
    ReplicaSet and never removes them (copyDeploymentAnnotationsToReplicaSet, kubernetes/
    kubernetes' pkg/controller/deployment/util/deployment_util.go), and ``kubectl rollout
    undo`` copies a ReplicaSet's annotations back to the Deployment (kubectl's
    pkg/polymorphichelpers/rollback.go): left there, an owner's rollout undo after a finished
    run brought the record back, and the next night's start-up cleanup took it for a killed
    run's and put the env from before the run back over the owner's choice. Called once the
    Deployment's own record is gone (its template rolled out: the controller copied what it
    would), so there is nothing left to copy; the controller's own ReplicaSet updates carry a
    resourceVersion, so a sync on a stale Deployment conflicts rather than copying it again."""
    meta = dep.get("metadata", {})
    namespace = str(meta.get("namespace"))
    items, _ = kube.list(Selection(REPLICASETS, namespace,
                                   labels=KubernetesTarget._selector(dep)))
    marked = [name_of(rs) for rs in items if owned_by(rs, dep)
              and RECORD_ANNOTATIONS & set(rs.get("metadata", {}).get("annotations") or {})]
    for name in marked:
        kube.patch(REPLICASETS, namespace, name, annotation_patch(None))
    return marked


def unrecorded(where: str, copies: Sequence[str]) -> list[str]:
    """What a cleanup says of a finished run's record it removed from ReplicaSets ``copies``."""
    return [f"{where}: removed a finished run's record from ReplicaSet {', '.join(copies)} "
            "(a rollout undo would have brought it back)"] if copies else []


def restore_annotated(kube: Kube, clock: Clock, deployment: Obj,
                      timeout: float = 300.0, lease: RunLease | None = None) -> str | None:
    """Undo a run that left its original env on ``deployment`` (for namespace cleanup), under
    ``lease`` (renewed before each change), the Deployment's run Lease the caller holds."""
    original = Original.of(deployment)
    if original is None:
        return None
    meta = deployment.get("metadata", {})
    spec = models.KubernetesTarget(namespace=str(meta.get("namespace")),
                                   deployment=str(meta.get("name")),
                                   container=original.container, rollout_timeout=timeout)
    return "; ".join(KubernetesTarget(spec, kube, clock, variables=list(original.env),
                                      study=original.study, lease=lease).cleanup()) or None


def _managed_fields(dep: Obj) -> list[Obj]:
    return list((dep.get("metadata") or {}).get("managedFields") or [])


def _runnable_p999(trace: schedtrace.Trace) -> int:
    counts = [s.runqueue + sum(s.local) for s in trace.samples]
    return schedtrace.p999(counts) if counts else -1


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
