"""The local backends wired together: service + load in a CPU-limited cgroup, stress-ng in the same
cgroup, a private Prometheus (unless the experiment names one).

One process registry (``results/<name>/processes.json``) records every process the three start,
so a later run or ``autotune cleanup`` can stop what a killed run left behind. The service tells
the private Prometheus its next generation's scrape targets ahead of time (``announce``).

Before anything else, ``build`` takes the experiment's run lock, ``results/<name>/run.lock``
(``autotune.runlock``), held as long as the backends exist: a second run of the experiment, or
an ``autotune cleanup`` of it, is refused while a run holds it; the CPU limit records it as the
owner of its cgroups.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from autotune.clock import Clock
from autotune.errors import PrerequisiteError
from autotune.experiment.models import Experiment
from autotune.metrics.prometheus import (
    PrometheusSource,
    PrometheusUnreachable,
    configured_interval,
)
from autotune.platforms.local import cgroups, gobuild, proc
from autotune.platforms.local.blocked_p import DemoBlocker
from autotune.platforms.local.prometheus import EmbeddedPrometheus
from autotune.platforms.local.service import LocalService
from autotune.platforms.local.stress_ng import StressNgInjector
from autotune.runlock import RunLock
from autotune.study.trial import Backends

log = logging.getLogger(__name__)


def cgroup_prefix(exp: Experiment) -> str:
    return f"autotune-{exp.name}"


def choose_mode(exp: Experiment, detect: cgroups.Mode | None = None) -> cgroups.Mode:
    assert exp.target.local is not None
    wanted = exp.target.local.isolation
    if wanted == "affinity":
        return cgroups.Mode("affinity", reason="asked for")
    mode = detect or cgroups.detect()
    if wanted in ("cgroup", "cpuset") and mode.kind == "affinity":
        raise PrerequisiteError(f"target.local.isolation is {wanted}, but: {mode.reason}")
    return mode


def run_lock(exp: Experiment, results: Path) -> RunLock:
    return RunLock(results / "run.lock",
                   why=f"One run (or cleanup) of experiment {exp.name!r} at a time: two would "
                       "share its service log, its process registry and its study's queue")


def make_limit(exp: Experiment, mode: cgroups.Mode, clock: Clock,
               lock: RunLock | None = None) -> cgroups.CpuLimit:
    """``auto`` gets a cpuset where the host can leave the service more CPUs than its quota
    (see ``cgroups``), ``cpuset`` wherever one can be written (saying loudly when it cannot,
    or when it is tight), ``cgroup`` the quota alone."""
    assert exp.target.local is not None
    wanted = exp.target.local.isolation
    limit = cgroups.CpuLimit(mode=mode, cpus=exp.target.local.cpus,
                             name=f"{cgroup_prefix(exp)}-{os.getpid()}",
                             want_cpuset=wanted in ("auto", "cpuset"),
                             tight_cpuset=wanted == "cpuset", clock=clock, lock=lock)
    if wanted == "cpuset" and limit.note:
        log.warning("target.local.isolation is cpuset: %s%s", limit.note,
                    "" if limit.isolation == "cpuset" else "; using the CPU quota alone")
    return limit


def build(exp: Experiment, results: Path, clock: Clock) -> Backends:
    assert exp.target.local is not None
    lock = run_lock(exp, results)
    lock.acquire()  # released when the limit that keeps it goes (or at exit, by the kernel)
    registry = proc.Registry(results / "processes.json")
    logs = results / "logs"
    limit = make_limit(exp, choose_mode(exp), clock, lock)
    embedded = None
    if exp.prometheus.url is None:
        embedded = EmbeddedPrometheus(exp.prometheus.scrape_interval, registry, logs,
                                      cgroup_procs=limit.procs_files("tools"), clock=clock)
    target = LocalService(exp, limit, registry, logs, clock, resolve=gobuild.build,
                          announce=embedded.announce if embedded is not None else None,
                          prepare=embedded.start if embedded is not None else None)
    source = PrometheusSource(exp.prometheus, clock, embedded=embedded,
                              warmup=exp.measure.warmup, window=exp.measure.window)
    if embedded is None and configured_interval(exp.prometheus) is None:
        # An existing server scrapes at its own pace: learn it now, or refuse to start with the
        # field to set, rather than wait and rate() as if it scraped every second. One that does
        # not answer yet is asked again at the first trial (observe), as on a cluster.
        try:
            source.learn_interval()
        except PrometheusUnreachable as e:
            log.warning("%s; asking again at the first trial", e)
    held = any(s.blocked_p is not None for s in exp.chaos.runs())
    return Backends(target=target,
                    injector=StressNgInjector(registry, clock, logs), source=source,
                    blocker=DemoBlocker(clock) if held else None)
