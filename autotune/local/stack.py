"""The local backends wired together: service + load in a CPU-limited cgroup, stress-ng in the same
cgroup, a private Prometheus (unless the experiment names one).

One process registry (``results/<name>/processes.json``) records every process the three start,
so a later run or ``autotune cleanup`` can stop what a killed run left behind.
"""

from __future__ import annotations

import os
from pathlib import Path

from autotune.clock import Clock
from autotune.experiment.models import Experiment
from autotune.local import cgroups, gobuild, proc
from autotune.local.prometheus import EmbeddedPrometheus
from autotune.local.service import LocalService
from autotune.local.stress_ng import StressNgInjector
from autotune.metrics.prometheus import PrometheusSource
from autotune.study.trial import Backends


def cgroup_prefix(exp: Experiment) -> str:
    return f"autotune-{exp.name}"


def choose_mode(exp: Experiment) -> cgroups.Mode:
    assert exp.target.local is not None
    wanted = exp.target.local.isolation
    mode = cgroups.detect() if wanted != "affinity" else cgroups.Mode("affinity",
                                                                      reason="asked for")
    if wanted == "cgroup" and mode.kind == "affinity":
        from autotune.errors import PrerequisiteError

        raise PrerequisiteError(f"target.local.isolation is cgroup, but: {mode.reason}")
    return mode


def build(exp: Experiment, results: Path, clock: Clock) -> Backends:
    assert exp.target.local is not None
    registry = proc.Registry(results / "processes.json")
    logs = results / "logs"
    mode = choose_mode(exp)
    limit = cgroups.CpuLimit(mode=mode, cpus=exp.target.local.cpus,
                             name=f"{cgroup_prefix(exp)}-{os.getpid()}")
    target = LocalService(exp, limit, registry, logs, clock, resolve=gobuild.build)
    embedded = None
    if exp.prometheus.url is None:
        embedded = EmbeddedPrometheus(exp.prometheus.scrape_interval, registry, logs,
                                      cgroup_procs=limit.procs_files("tools"))
    source = PrometheusSource(exp.prometheus, clock, embedded=embedded)
    return Backends(target=target,
                    injector=StressNgInjector(registry, clock), source=source)
