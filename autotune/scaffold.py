"""The first experiment for a service: what ``autotune init`` writes, from what it found.

Pure: it takes what the edges learned (the series the service's ``/metrics`` exports, its CPU
limit, how to start or find it) and returns the experiment as YAML text that validates. The
rules, each one a reason the file is a better start than a hand-written one:

- **Latency**: the service's own request-latency histogram when it exports one (a ``_bucket``
  series named like ``*_request_duration_seconds``), else the load generator's client-side
  histogram (local targets always have it: the load generator is ours).
- **Go runtime series**: a metric for each runtime series the service exports (GC pauses,
  scheduling latency, the Ps' idle time, GC rate, GOMAXPROCS) and only those: a query over a
  series that does not exist fails every trial.
- **A Go-aware space for the CPU limit**: GOMAXPROCS from 1 to twice the limit (1 is where
  latency-bound services on one CPU often win; Go's own default, the limit rounded up and at
  least 2, is always a value, so the baseline's setting is in the space); GOGC with 100 (Go's
  default) and 400 (the relaxed GC the Go-aware first guess tries); a forced-GC interval, with 0
  (off), when the service has such a knob.
- **Stress**: half the CPU limit, continuous, locally; bursts at the whole limit on a cluster
  (a neighbour's spikes), with a window of at least 4 scrapes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from autotune.errors import PrerequisiteError
from autotune.experiment import parse_experiment
from autotune.experiment.models import NAME_PATTERN
from autotune.study.design import RAISED_GOGC, go_default_gomaxprocs

LATENCY_SUFFIXES = ("_request_duration_seconds", "_request_latency_seconds", "_latency_seconds",
                    "_duration_seconds")
"""Names a request-latency histogram ends with, best first (Prometheus' naming conventions:
base unit seconds)."""

NOT_REQUESTS = ("go_", "process_", "promhttp_", "prometheus_", "loadgen_")
"""Histograms that are not the service's requests: the runtime's, client_golang's own, ours."""

LOADGEN_HISTOGRAM = "loadgen_request_duration_seconds"
CONVENTIONAL_HISTOGRAM = "http_request_duration_seconds"
"""What a cluster experiment assumes when the service's /metrics could not be read: the name
of client_golang's examples and most HTTP middleware; ``validate --live`` checks it."""

GOGC_VALUES = (50, 100, 200, 400)
FORCEGC_VALUES = (0, 500, 2000)

_Q = "{{selector}}"
_W = "{{window}}"


def _p99(histogram: str) -> str:
    return (f"histogram_quantile(0.99, sum by (le) (rate({histogram}_bucket{{ {_Q} }}"
            f"[{_W}])))")


RUNTIME_METRICS: tuple[tuple[str, tuple[str, ...], str, str | None, str], ...] = (
    ("gc_pause_p99", ("go_sched_pauses_total_gc_seconds_bucket",),
     _p99("go_sched_pauses_total_gc_seconds"), "s", "stop-the-world GC pauses, p99"),
    ("sched_latency_p99", ("go_sched_latencies_seconds_bucket",),
     _p99("go_sched_latencies_seconds"), "s", "time goroutines wait runnable, p99"),
    ("p_idle_fraction",
     ("go_cpu_classes_idle_cpu_seconds_total", "go_cpu_classes_total_cpu_seconds_total",
      "go_gc_cycles_total_gc_cycles_total"),
     # /cpu/classes/* advance only at the end of a GC cycle: valid over >= 2 cycles.
     f"(sum(rate(go_cpu_classes_idle_cpu_seconds_total{{ {_Q} }}[{_W}])) / "
     f"sum(rate(go_cpu_classes_total_cpu_seconds_total{{ {_Q} }}[{_W}]))) and on() "
     f"(sum(increase(go_gc_cycles_total_gc_cycles_total{{ {_Q} }}[{_W}])) >= 2)",
     None, "fraction of the Ps' time spent idle (needs >= 2 GC cycles in the window)"),
    ("gc_rate", ("go_gc_cycles_total_gc_cycles_total",),
     f"sum(rate(go_gc_cycles_total_gc_cycles_total{{ {_Q} }}[{_W}]))", "1/s",
     "GC cycles per second"),
    ("gomaxprocs", ("go_sched_gomaxprocs_threads",),
     f"max(max_over_time(go_sched_gomaxprocs_threads{{ {_Q} }}[{_W}]))", None,
     "GOMAXPROCS the service really ran with"),
)
"""(metric, the series it needs, query, unit, description): the Go runtime's metrics as
client_golang exports them with ``collectors.WithGoCollectorRuntimeMetrics``."""

ENABLE_RUNTIME_METRICS = (
    "collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics("
    "collectors.MetricsAll))")


class _Dumper(yaml.SafeDumper):
    """Lists of plain values inline (``values: [1, 2, 4]``, ``command: [./server, ...]``), as
    the shipped experiments write them; mappings in block style."""


def _list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(isinstance(x, str | int | float) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _list)


def exported_series(exposition: str) -> frozenset[str]:
    """The names of the samples in a Prometheus text exposition (``/metrics``)."""
    names = set()
    for line in exposition.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            match = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
            if match:
                names.add(match.group(0))
    return frozenset(names)


def latency_histogram(series: frozenset[str]) -> str | None:
    """The service's request-latency histogram, if it exports one (see LATENCY_SUFFIXES)."""
    histograms = [s.removesuffix("_bucket") for s in series
                  if s.endswith("_bucket") and not s.startswith(NOT_REQUESTS)]
    for suffix in LATENCY_SUFFIXES:
        named = sorted((h for h in histograms if h.endswith(suffix)), key=lambda h: (len(h), h))
        if named:
            return named[0]
    return None


def gomaxprocs_values(cpu_limit: float | None) -> list[int]:
    """1, the powers of two and Go's default up to twice the limit (1, 2, 4, 8 without one)."""
    if cpu_limit is None:
        return [1, 2, 4, 8]
    ceiling = 2 * math.ceil(cpu_limit)
    values = {1, go_default_gomaxprocs(cpu_limit), math.ceil(cpu_limit), ceiling}
    values |= {2 ** k for k in range(1, 12) if 2 ** k <= ceiling}
    return sorted(values)


@dataclass(frozen=True)
class Service:
    """What ``autotune init`` learned about the service (the edges fill it in)."""

    name: str
    series: frozenset[str] | None
    """The sample names its ``/metrics`` exports; None when it could not be read."""
    cpu_limit: float | None
    local_command: tuple[str, ...] | None = None
    cwd: str | None = None
    health: str = "/healthz"
    metrics_path: str = "/metrics"
    path: str = "/"
    deployment: tuple[str, str, str] | None = None
    """namespace, Deployment, container."""
    prometheus_url: str | None = None
    forcegc_env: str | None = None
    service_job: str | None = None
    """The local Prometheus' job of the service (its ``process_*`` series carry it)."""
    findings: list[str] = field(default_factory=list)


def experiment_name(text: str) -> str:
    """A valid experiment name from a command or Deployment name."""
    base = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._") or "service"
    name = base[:63]
    if not re.match(NAME_PATTERN, name):
        name = f"svc-{name}"[:63]
    return name


def draft(service: Service) -> str:
    """The experiment as YAML text, with a header saying what was found and chosen; it
    validates (``parse_experiment`` is run on it before it is returned)."""
    notes = list(service.findings)
    series = service.series
    local = service.local_command is not None
    histogram = latency_histogram(series) if series is not None else None
    if series is None and not local:
        histogram = CONVENTIONAL_HISTOGRAM
    metrics: dict[str, Any] = {}
    if histogram is not None:
        metrics["p99_latency"] = {"query": _p99(histogram), "unit": "s",
                                  "description": f"server-side p99 of {histogram}"}
        notes.append(f"latency: the service's histogram {histogram}" if series is not None
                     else f"latency: {histogram} assumed (client_golang's usual name)")
    if local:
        client = {"query": _p99(LOADGEN_HISTOGRAM), "unit": "s",
                  "description": "client-side p99 (open loop, from the scheduled send time)"}
        metrics["p99_latency" if histogram is None else "client_p99"] = client
        if histogram is None:
            notes.append("latency: no request histogram found in /metrics: the load "
                         "generator's client-side p99")
        metrics["error_rate"] = {
            "query": f'sum(rate(loadgen_requests_total{{ {_Q}, outcome!="ok" }}[{_W}])) / '
                     f"sum(rate(loadgen_requests_total{{ {_Q} }}[{_W}]))",
            "description": "failed, timed-out or dropped requests / all requests"}
    elif histogram is None:
        raise PrerequisiteError(
            "the service's /metrics has no request-latency histogram (a histogram named like "
            "*_request_duration_seconds): export one with client_golang (promhttp's "
            "InstrumentHandlerDuration), or add autotune's load generator to the experiment "
            "(target.kubernetes.load) and measure its histogram instead")
    else:
        metrics["request_rate"] = {
            "query": f"sum(rate({histogram}_count{{ {_Q} }}[{_W}]))", "unit": "1/s",
            "description": "requests served per second (the load must match the baseline's)"}
    missing = []
    for name, needs, query, unit, description in RUNTIME_METRICS:
        if series is None or all(s in series for s in needs):
            spec: dict[str, Any] = {"query": query, "description": description}
            if unit:
                spec["unit"] = unit
            metrics[name] = spec
        else:
            missing.append(name)
    if series is None:
        notes.append("metrics: /metrics was not read (give --url to read it); the queries "
                     "assume client_golang's names: `autotune validate --live` checks them")
    elif missing:
        notes.append(f"metrics left out (the service does not export their series): "
                     f"{', '.join(missing)}; export them with {ENABLE_RUNTIME_METRICS}")
    if local and service.service_job and (series is None
                                          or "process_cpu_seconds_total" in series):
        metrics["service_cpu_cores"] = {
            "query": f'sum(rate(process_cpu_seconds_total{{ {_Q}, job="{service.service_job}" '
                     f"}}[{_W}]))",
            "description": "CPU the service used (the local Prometheus' job of the service)"}

    procs = gomaxprocs_values(service.cpu_limit)
    limit = "no CPU limit" if service.cpu_limit is None else f"a CPU limit of {service.cpu_limit:g}"
    notes.append(f"GOMAXPROCS {procs} for {limit}; GOGC {list(GOGC_VALUES)} "
                 f"(100 is Go's default, {RAISED_GOGC} the relaxed GC tried first)")
    parameters: list[dict[str, Any]] = [
        {"name": "GOMAXPROCS", "type": "int", "values": procs,
         "description": "Ps of the Go scheduler"},
        {"name": "GOGC", "type": "int", "values": list(GOGC_VALUES),
         "description": "GC target: heap growth in % before the next cycle"},
    ]
    baseline: dict[str, Any] = {"GOMAXPROCS": None, "GOGC": None}
    if service.forcegc_env:
        parameters.append({"name": "forcegc_interval_ms", "env": service.forcegc_env,
                           "type": "int", "values": list(FORCEGC_VALUES),
                           "description": "the service's forced runtime.GC() interval (0 = off)"})
        baseline["forcegc_interval_ms"] = None

    doc: dict[str, Any] = {"name": service.name,
                           "description": f"Go runtime settings of {service.name} under CPU "
                                          "stress (written by autotune init)"}
    if local:
        assert service.local_command is not None
        cpus = service.cpu_limit or 1.0
        doc["target"] = {"local": {
            "command": list(service.local_command),
            **({"cwd": service.cwd} if service.cwd else {}), "health": service.health,
            "metrics_path": service.metrics_path, "cpus": cpus,
            "load": {"rate": "auto", "auto_fraction": 0.3, "path": service.path}}}
        workers = math.ceil(cpus)
        doc["chaos"] = {"stress": {"workers": workers,
                                   "load": max(1, round(50 * cpus / workers))},
                        "pattern": "continuous"}
        doc["measure"] = {"warmup": "4s", "window": "15s"}
        doc["prometheus"] = {"scrape_interval": "1s"}
        study = {"trials": 8, "sampler": "auto"}
        constraints = ["error_rate <= 0.01"]
    else:
        assert service.deployment is not None and service.prometheus_url is not None
        namespace, deployment, container = service.deployment
        doc["target"] = {"kubernetes": {"namespace": namespace, "deployment": deployment,
                                        "container": container, "rollout_timeout": "5m",
                                        "on_finish": "restore"}}
        workers = math.ceil(service.cpu_limit or 1.0)
        doc["chaos"] = {"stress": {"workers": workers, "load": 100},
                        "pattern": {"every": "30s", "burst": "5s"}}
        # A window of >= 4 scrapes at the common 30 s interval; autotune reads the real one.
        doc["measure"] = {"warmup": "30s", "window": "2m",
                          "load": {"metric": "request_rate", "tolerance": 0.1}}
        doc["prometheus"] = {"url": service.prometheus_url}
        study = {"trials": 30, "sampler": "auto"}
        constraints = []
    doc["parameters"] = parameters
    doc["baseline"] = {"repeats": 3, "params": baseline}
    doc["metrics"] = metrics
    doc["objective"] = {"minimize": "p99_latency"}
    if constraints:
        doc["constraints"] = constraints
    doc["study"] = study
    order = ["name", "description", "target", "parameters", "baseline", "chaos", "prometheus",
             "measure", "metrics", "objective", "constraints", "study"]
    body = yaml.dump({k: doc[k] for k in order if k in doc}, Dumper=_Dumper, sort_keys=False,
                     width=10_000)  # a query on one line, as in the shipped experiments
    header = "\n".join(["# Written by `autotune init`. What it found and chose:"]
                       + [f"# - {note}" for note in notes]
                       + ["# Check it with `autotune validate`, then `autotune run` it.", ""])
    text = header + body
    parse_experiment(text)  # what we write must validate: a bug here is ours, not the user's
    return text
