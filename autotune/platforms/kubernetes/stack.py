"""The Kubernetes backend assembled: build it, check a cluster can run it, clean a namespace.

This is the composition root of the cluster mode: the Deployment target and the StressChaos
injector share one ``StressGuard`` so that a stress that could not be removed stops every
later trial.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from autotune.advice import gomaxprocs_warnings
from autotune.clock import Clock, SystemClock
from autotune.errors import AutotuneError, ExperimentError, MetricsError
from autotune.experiment.models import Experiment, KubernetesTarget, Setting
from autotune.experiment.templates import placeholders
from autotune.live import Matcher, Window
from autotune.metrics import promql
from autotune.metrics.base import Unavailable
from autotune.metrics.prometheus import PrometheusSource, PrometheusUnreachable
from autotune.platforms.kubernetes.client import Kube, connect
from autotune.platforms.kubernetes.deployment import KubernetesTarget as DeploymentTarget
from autotune.platforms.kubernetes.deployment import (
    StressGuard,
    restore_annotated,
    unrecord_replicasets,
    unrecorded,
)
from autotune.platforms.kubernetes.errors import TargetProblem
from autotune.platforms.kubernetes.lease import RunLease
from autotune.platforms.kubernetes.loadgen import LoadGenerator, remove_all
from autotune.platforms.kubernetes.objects import (
    DEPLOYMENTS,
    ORIGINAL_ENV_ANNOTATION,
    STRESSCHAOS,
    PodPlacement,
    Selection,
)
from autotune.platforms.kubernetes.permissions import needed
from autotune.platforms.kubernetes.stresschaos import (
    CRD_MISSING,
    RECOVER_TIMEOUT,
    ChaosMeshInjector,
)
from autotune.study.design import cpu_limit
from autotune.study.trial import DEAD_MAN_MARGIN, Backends

log = logging.getLogger(__name__)


def _spec(exp: Experiment) -> KubernetesTarget:
    if exp.target.kubernetes is None:
        raise AutotuneError("not a kubernetes experiment")
    return exp.target.kubernetes


def _kube(exp: Experiment, clock: Clock, context: str | None) -> Kube:
    spec = _spec(exp)
    return connect(clock, context=context or spec.context, kubeconfig=spec.kubeconfig)


def _parts(exp: Experiment, kube: Kube, clock: Clock,
           results: Path | None) -> tuple[DeploymentTarget, ChaosMeshInjector]:
    spec = _spec(exp)
    guard = StressGuard()
    # Renewed on every trial: it outlives the longest trial, then a dead run's lease expires.
    lease = RunLease(kube, namespace=spec.namespace, deployment=spec.deployment,
                     study=exp.name, duration=exp.max_trial_seconds + 60)
    load = (LoadGenerator(spec.load, kube, clock, namespace=spec.namespace, study=exp.name)
            if spec.load is not None else None)
    target = DeploymentTarget(spec, kube, clock, variables=[p.env_var for p in exp.parameters],
                              study=exp.name, state_dir=results, guard=guard,
                              lease=lease if results is not None else None,
                              schedtrace_ms=exp.measure.schedtrace_ms, load=load,
                              load_seconds=exp.load_seconds)
    injector = ChaosMeshInjector(kube, clock, namespace=spec.namespace, study=exp.name,
                                 guard=guard)
    return target, injector


def build(exp: Experiment, results: Path, clock: Clock, context: str | None = None, *,
          preflight: bool = True) -> Backends:
    """The target, the injector and the metric source of a kubernetes experiment.

    With ``preflight`` (a run, a confirmation; not ``autotune cleanup``): refuses external
    writers of the tuned variables, reads the scrape interval the cluster's Prometheus really
    uses and rejects a window shorter than four of them before anything changes. An
    unreachable Prometheus only warns here: every trial then fails with that reason, which the
    study's failure limit turns into a stop.
    """
    target, injector = _parts(exp, _kube(exp, clock, context), clock, results)
    if not preflight:
        # ``autotune cleanup``: nothing is measured, so nothing is asked of Prometheus (its
        # interval, the window against it): a metrics problem must not stop a restore.
        return Backends(target=target, injector=injector,
                        source=PrometheusSource(exp.prometheus, clock, window=exp.measure.window))
    _refuse_external_writers(exp, target)
    source = _source(exp, clock, target)
    return Backends(target=target, injector=injector, source=source)


EXTERNAL_WRITERS_ADVICE = (
    "What to do: for envFrom, give the tuned variables their own env entries or remove them "
    "from the ConfigMap/Secret; for a GitOps controller, pause its sync or self-heal for the "
    "study (Argo CD: argocd app set <app> --sync-policy none; Flux: flux suspend "
    "kustomization <name>). Then set target.kubernetes.allow_external_writers: true to run "
    "anyway")


def external_writers(exp: Experiment,
                     target: DeploymentTarget) -> tuple[list[str], list[str]]:
    """(problems, warnings) about who else sets the tuned variables (writers.py); with
    ``allow_external_writers`` the problems are only warnings."""
    unset = [p.env_var for p in exp.parameters if exp.baseline_settings().get(p.name) is None]
    found, warned = target.external_writers(unset)
    if _spec(exp).allow_external_writers:
        return [], found + warned
    return found, warned


def _refuse_external_writers(exp: Experiment, target: DeploymentTarget) -> None:
    found, warned = external_writers(exp, target)
    for warning in warned:
        log.warning("%s", warning)
    if found:
        raise TargetProblem("; ".join(found) + ". " + EXTERNAL_WRITERS_ADVICE)


def _source(exp: Experiment, clock: Clock, target: DeploymentTarget) -> PrometheusSource:
    source = PrometheusSource(exp.prometheus, clock, window=exp.measure.window)
    try:
        scope = target.current().scope
    except AutotuneError:
        scope = ()  # no running pod yet: the global interval still bounds the window
    # Where the interval must be inferred from samples and the pods have none yet: the
    # namespace's other pods, found by the same service discovery.
    namespace = (Matcher("namespace", _spec(exp).namespace),)
    try:
        source.learn_interval(scope, wider=namespace)
    except PrometheusUnreachable as e:
        # Like any query to it: each trial fails with the reason until it answers, and the
        # first one it answers learns the interval (observe) and holds the window to it.
        log.warning("%s; asking again at the first trial", e)
        return source
    except MetricsError as e:
        # Never the private Prometheus's 1 s: every wait and the window rule would be wrong.
        raise ExperimentError([str(e)]) from None
    screening = exp.study.screening
    problems = [p for p in (
        source.check_window(exp.measure.window),
        # screening reads the window's first seconds as a window of their own
        source.check_window(screening.after, "study.screening.after") if screening else None,
    ) if p is not None]
    if problems:
        raise ExperimentError(problems)
    versions = source.go_versions(scope) if scope else []
    if versions:  # the nightly fingerprint's Go version: what the running pods report
        target.facts["go_version"] = ", ".join(versions)
    return source


# --- validate: can this cluster run the experiment? -----------------------------------------

def validate_cluster(exp: Experiment, context: str | None = None,
                     warnings: list[str] | None = None) -> list[str]:
    """Problems that would stop a run (empty: none); what deserves attention but does not stop
    it is appended to ``warnings``. Changes nothing in the cluster."""
    clock = SystemClock()
    try:
        kube = _kube(exp, clock, context)
    except AutotuneError as e:
        return [str(e)]
    spec = _spec(exp)
    problems = _access(kube, spec.namespace, exp.measure.schedtrace_period is not None,
                       bool(exp.measure.capture), spec.load is not None)
    target, injector = _parts(exp, kube, clock, None)
    try:
        facts = target.describe()
    except AutotuneError as e:
        return [*problems, str(e)]
    log.info("target: %s", facts)
    if warnings is not None:
        warnings += gomaxprocs_warnings(exp, cpu_limit(facts))
    hpa = facts.get("autoscaler")
    if hpa and warnings is not None:
        warnings.append(
            f"HorizontalPodAutoscaler {hpa['name']} scales {target.where} "
            f"({hpa['min_replicas']}..{hpa['max_replicas']} replicas on "
            f"{', '.join(hpa['metrics']) or 'its metrics'}); the stress will make a CPU HPA "
            f"scale up. Trials are {facts['replica_changes']}")
    unusable = target.usable()
    if unusable is not None:
        problems.append(unusable)
    try:
        found, warned = external_writers(exp, target)
    except AutotuneError as e:
        found, warned = [str(e)], []
    problems += [f"{p}. {EXTERNAL_WRITERS_ADVICE}" for p in found]
    if warnings is not None:
        warnings += warned
    try:
        if not kube.serves(STRESSCHAOS):
            return [*problems, CRD_MISSING]
    except AutotuneError as e:
        return [*problems, str(e)]
    return problems + _dry_runs(exp, target, injector)


def _access(kube: Kube, namespace: str, schedtrace: bool, capture: bool,
            load: bool) -> list[str]:
    problems = []
    for permission in needed(schedtrace, capture, load):
        verb, kind = permission.verb, permission.kind
        try:
            allowed, reason = kube.can_i(verb, kind, namespace)
        except AutotuneError as e:
            return [f"cannot check permissions (SelfSubjectAccessReview): {e}"]
        if not allowed:
            why = f" ({reason})" if reason else ""
            problems.append(f"not allowed to {verb} {kind.resource} in namespace "
                            f"{namespace!r}{why}: see {permission.granted_in}")
    return problems


def _dry_runs(exp: Experiment, target: DeploymentTarget, injector: ChaosMeshInjector) -> list[str]:
    """Server-side dry runs: the env patch of the baseline and of a candidate, and a StressChaos."""
    problems = []
    first: dict[str, Setting] = {p.name: p.values[0] if p.values else p.low
                                 for p in exp.parameters}
    for label, settings in (("baseline", exp.baseline_settings()), ("a candidate", first)):
        env: dict[str, str | None] = {}
        for p in exp.parameters:
            value = settings.get(p.name)
            env[p.env_var] = None if value is None else p.format(value)
        try:
            target.dry_run(env)
        except AutotuneError as e:
            problems.append(f"patching the env of {label} would fail: {e}")
    try:
        live = target.current()
        duration = exp.measure.window + DEAD_MAN_MARGIN
        if not isinstance(live.placement, PodPlacement):
            raise AutotuneError("the target did not report where its pods run")
        for stress in exp.chaos.stresses:  # one StressChaos per scenario that has a stress
            injector.dry_run(live.placement, stress, duration)
    except AutotuneError as e:
        problems.append(f"creating the StressChaos would fail: {e}")
    return problems


# --- validate live: do the queries return one number each? ----------------------------------

def validate_live(exp: Experiment, context: str | None = None) -> list[str]:
    """Read the real scrape interval and check the window against it; check every pod is
    scraped; run every metric query over the last window against the running pods; report the
    ones that return no series, several series or NaN."""
    clock = SystemClock()
    try:
        target, _ = _parts(exp, _kube(exp, clock, context), clock, None)
        live = target.current()
    except AutotuneError as e:
        return [str(e)]
    now = clock.now()
    window = Window(now - exp.measure.window, now)
    values = promql.values(live, window.seconds)
    # The generator's series exist only while autotune's generator pod runs (in a trial).
    generated = {name for name in exp.metrics
                 if "load_selector" in placeholders(exp.metric(name).query)}
    for name in sorted(generated):
        log.info("metrics.%s: not tried, it reads the load generator's series, which exist "
                 "only during a trial", name)
    queries = {name: promql.render(exp.metric(name).query, values) for name in exp.metrics
               if exp.metric(name).query and name not in generated}
    source = PrometheusSource(exp.prometheus, clock)
    problems: list[str] = []
    try:
        interval = source.learn_interval(live.scope)
        log.info("Prometheus scrapes the service every %gs (%s)", interval,
                 source.interval_source)
        short = source.check_window(exp.measure.window)
        if short is not None:
            problems.append(short)
        source.observe(live)
        readings = source.read(queries, window, live)
    except AutotuneError as e:
        return [*problems, f"prometheus: {e}"]
    finally:
        source.close()
    return problems + [f"metrics.{name}: {reading.reason}" for name, reading in readings.items()
                       if isinstance(reading, Unavailable)]


# --- cleanup of a namespace -----------------------------------------------------------------

def cleanup_namespace(namespace: str, *, context: str | None = None,
                      kubeconfig: str | None = None, clock: Clock | None = None,
                      rollout_timeout: float = 300.0, recover_timeout: float = RECOVER_TIMEOUT,
                      force: bool = False,
                      failed: list[AutotuneError] | None = None) -> list[str]:
    """Remove every StressChaos and load generator pod autotune left in ``namespace`` (any
    study) and restore every Deployment that still carries an original env saved by autotune.
    Says what it did.

    It holds the run Lease of every Deployment in the namespace meanwhile (renewed before each
    restore, which may wait out a rollout): a run that is alive there keeps its stress
    (``TargetProblem`` naming it, exit 1), and no run starts while we clean. ``force``: remove
    the stress all the same (that run's window is then discarded); a Deployment whose Lease
    another run holds is never restored under it.

    A step that fails does not stop the others: a StressChaos that will not go does not keep
    the Deployments from their original env (their rollout replaces the stressed pods), nor
    does one Deployment's failed rollout keep the next from being restored. The failures are
    appended to ``failed``; without it, the first is raised once every step was tried.
    ``recover_timeout``: how long a StressChaos's deletion may take before it is called stuck
    (``stresschaos.RECOVER_TIMEOUT``)."""
    clock = clock or SystemClock()
    kube = connect(clock, context=context, kubeconfig=kubeconfig)
    items, _ = kube.list(Selection(DEPLOYMENTS, namespace))
    held: dict[str, RunLease] = {}
    busy: set[str] = set()
    done: list[str] = []
    problems: list[AutotuneError] = []

    def attempt(step: Callable[[], list[str]]) -> None:
        try:
            done.extend(step())
        except AutotuneError as e:
            log.error("cleanup of namespace %s: %s", namespace, e)
            problems.append(e)

    try:
        for dep in items:
            name = dep["metadata"]["name"]
            lease = RunLease(kube, namespace=namespace, deployment=name, study="cleanup",
                             duration=rollout_timeout + 60)
            try:
                lease.acquire()
            except TargetProblem as e:
                if not force:
                    raise TargetProblem(
                        f"cleanup of namespace {namespace!r} refused: {e}. Cleaning up now "
                        "would remove that run's stress in the middle of its window; wait for "
                        "it to end (or its Lease to expire), or use --force") from None
                log.warning("--force: %s; its stress is removed, its Deployment left alone", e)
                busy.add(name)
                continue
            held[name] = lease
        attempt(lambda: ChaosMeshInjector(kube, clock, namespace=namespace, study=None,
                                          recover_timeout=recover_timeout).cleanup())
        attempt(lambda: remove_all(kube, namespace, None))  # a dead run's generator
        for dep in items:
            name = dep["metadata"]["name"]
            annotated = ORIGINAL_ENV_ANNOTATION in (dep.get("metadata", {}).get("annotations")
                                                    or {})
            if name in busy:
                if annotated:
                    done.append(f"Deployment {namespace}/{name}: left alone, a live run tunes it")
                continue
            if annotated:
                attempt(partial(_restored, kube, clock, dep, rollout_timeout, held[name]))
            else:  # a finished run's record on its ReplicaSets (deployment.unrecord_replicasets)
                attempt(partial(_unrecorded, kube, dep))
    finally:
        for lease in held.values():
            lease.release()
    if failed is not None:
        failed.extend(problems)
    elif problems:
        raise problems[0]
    return done


def _restored(kube: Kube, clock: Clock, dep: dict[str, Any], timeout: float,
              lease: RunLease) -> list[str]:
    line = restore_annotated(kube, clock, dep, timeout, lease=lease)
    return [line] if line else []


def _unrecorded(kube: Kube, dep: dict[str, Any]) -> list[str]:
    meta = dep["metadata"]  # an ApiError below is the step's failure, said
    return unrecorded(f"Deployment {meta['namespace']}/{meta['name']}",
                      unrecord_replicasets(kube, dep))


def describe(exp: Experiment, context: str | None = None) -> dict[str, Any]:
    """The target's facts (for reports and ``doctor``)."""
    clock = SystemClock()
    target, _ = _parts(exp, _kube(exp, clock, context), clock, None)
    return target.describe()
