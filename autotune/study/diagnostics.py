"""What a trial records to explain *why* a setting wins (``measure.insight``, ``.schedtrace``).

After the objective's metrics, for the same window:

- the distribution over time of scheduling latency and of GC pauses (``go_sched_latencies_seconds``,
  ``go_sched_pauses_total_gc_seconds``): a range query of each histogram's per-step increase,
  stored as a compact heat (autotune/insight/heatmap.py). The step spans at least two scrape
  intervals (``increase`` needs two samples) and cuts the window into about a dozen columns;
- where the CPU went: the rates of ``/cpu/classes/{user,gc/total,idle,total}`` and the share of
  CFS periods throttled (``container_cpu_cfs_*``: cAdvisor in a cluster, the demo service's own
  cgroup locally);
- the run queues from Go >= 1.26's ``go_sched_goroutines_runnable_goroutines`` gauge and the
  overflow detector's verdict on them, when the service exports it;
- with ``measure.schedtrace``, the run queues from the service's ``GODEBUG=schedtrace`` lines in
  the window (every 100 ms, not every scrape), their summary figures (usable as metrics) and
  the overflow detector's verdict.

None of it can fail a trial: a figure that cannot be read is recorded under ``unavailable`` with
the reason, never replaced by a number.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from autotune.errors import MetricsError
from autotune.experiment.models import Experiment
from autotune.insight import heatmap, overflow, schedtrace
from autotune.live import Live, Window
from autotune.metrics import promql
from autotune.metrics.base import MetricSource, RangeSource, Unavailable
from autotune.targets.base import SchedtraceReader, Target

log = logging.getLogger(__name__)

HISTOGRAMS = {
    "sched_latency": "go_sched_latencies_seconds_bucket",
    "gc_pause": "go_sched_pauses_total_gc_seconds_bucket",
}
CPU_CLASSES = {"user": "user", "gc": "gc_total", "idle": "idle", "total": "total"}
RUNNABLE = "go_sched_goroutines_runnable_goroutines"
COLUMNS = 12


def heat_step(window: float, scrape_interval: float) -> float:
    return round(max(2 * scrape_interval, window / COLUMNS), 3)


def _cpu_queries(exp: Experiment, selector: str, window: str) -> dict[str, str]:
    queries = {name: f"sum(rate(go_cpu_classes_{cls}_cpu_seconds_total{{ {selector} }}"
                     f"[{window}]))" for name, cls in CPU_CLASSES.items()}
    # cAdvisor also reports the pod's own cgroup (container="") and the pause container.
    cadvisor = ', container!="", container!="POD"' if exp.target.kind == "kubernetes" else ""
    queries["throttled_share"] = (
        f"sum(increase(container_cpu_cfs_throttled_periods_total{{ {selector}{cadvisor} }}"
        f"[{window}])) / sum(increase(container_cpu_cfs_periods_total{{ {selector}{cadvisor} }}"
        f"[{window}]))")
    return queries


def collect(exp: Experiment, source: MetricSource, live: Live, window: Window) -> dict[str, Any]:
    """The heat maps and the CPU breakdown of one trial's window (see the module doc)."""
    selector = promql.render_selector(live.scope)
    out: dict[str, Any] = {"heat": {}, "cpu": {}, "unavailable": {}}
    queries = _cpu_queries(exp, selector, promql.render_window(window.seconds))
    for name, reading in source.read(queries, window, live).items():
        if isinstance(reading, Unavailable):
            out["unavailable"][name] = reading.reason
        else:
            out["cpu"][name] = reading
    if not isinstance(source, RangeSource):
        out["unavailable"]["heat"] = "this metric source gives no values over time"
        return out
    step = heat_step(window.seconds, source.scrape_interval)
    for name, family in HISTOGRAMS.items():
        query = (f"sum by (le) (increase({family}{{ {selector} }}"
                 f"[{promql.render_window(step)}]))")
        result = source.read_range(query, window, step)
        if isinstance(result, Unavailable):
            out["unavailable"][name] = result.reason
            continue
        try:
            heat = heatmap.from_range(result, start=window.start, step=step)
        except MetricsError as e:
            out["unavailable"][name] = str(e)
            continue
        out["heat"][name] = heat.to_json()
    runnable = runnable_queues(exp, source, selector, window)
    if isinstance(runnable, str):
        out["unavailable"]["runnable"] = runnable
    else:
        out["runnable"] = runnable
    return out


def runnable_queues(exp: Experiment, source: RangeSource, selector: str,
                    window: Window) -> dict[str, Any] | str:
    """The run queues without schedtrace: Go >= 1.26's ``/sched/goroutines/runnable`` gauge
    (``go_sched_goroutines_runnable_goroutines``: global plus local queues), one sample per
    scrape, through the overflow detector per process; the busiest process is kept (a sum over
    pods would invent queues). Same shape as ``scheduler()``'s result; or why it is missing."""
    step = source.scrape_interval
    series = source.read_range(f"{RUNNABLE}{{ {selector} }}", window, step)
    if isinstance(series, Unavailable):
        return (f"{series.reason} (the gauge exists from Go 1.26, exported by client_golang "
                "with runtime metrics enabled)")
    procs = source.read_range(f"max(go_sched_gomaxprocs_threads{{ {selector} }})", window, step)
    gomaxprocs = 1 if isinstance(procs, Unavailable) else max(
        (int(float(v)) for s in procs for _, v in s.get("values", ()) if math.isfinite(float(v))),
        default=1)
    threshold = exp.measure.overflow_threshold or overflow.default_threshold(gomaxprocs)
    best: tuple[int, dict[str, Any]] | None = None
    for s in series:
        points = [(float(t) - window.start, float(v)) for t, v in s.get("values", ())
                  if math.isfinite(float(v))]
        if not points:
            continue
        # one sample per scrape: a step of 1.5 scrapes never leaves a step empty
        found = overflow.detect(points, threshold, step=max(overflow.STEP, 1.5 * step))
        peak = schedtrace.p999([int(v) for _, v in points])
        labels = s.get("metric") or {}
        entry = {"source": f"{RUNNABLE} {labels.get('pod') or labels.get('instance', '')}",
                 "series": {"t_ms": [round(t * 1000) for t, _ in points],
                            "runnable": [int(v) for _, v in points]},
                 "summary": {"runq_total_p999": float(peak), "samples": float(len(points))},
                 "overflow": found.to_dict()}
        if best is None or peak > best[0]:
            best = (peak, entry)
    if best is None:
        return f"no samples of {RUNNABLE} in the window"
    return best[1]


def scheduler(exp: Experiment, target: Target, live: Live, window: Window) -> dict[str, Any]:
    """The window's schedtrace: compact series, summary figures, overflow verdict."""
    if not isinstance(target, SchedtraceReader):
        return {"unavailable": "this target does not collect schedtrace"}
    trace = target.schedtrace(live, window)
    if isinstance(trace, str):
        return {"unavailable": trace}
    samples = list(trace.samples)
    if not samples:
        return {"unavailable": f"no schedtrace line in the window ({trace.skipped} malformed "
                               "lines skipped)", "skipped": trace.skipped}
    found = overflow.from_samples(samples, "total", exp.measure.overflow_threshold)
    summary = schedtrace.summarize(samples)
    summary["overflow_count"] = float(found.count)
    summary["overflow_longest"] = found.longest
    verdict = found.to_dict()
    if trace.incomplete and not found.fired:
        # Part of the window is missing: no overflow seen is not "no overflow".
        verdict["verdict"] = "trace incomplete"
    out = {"series": schedtrace.compact(samples), "summary": summary,
           "overflow": verdict, "skipped": trace.skipped,
           "reasons": list(trace.reasons)[:5]}
    if trace.incomplete:
        out["incomplete"] = trace.incomplete
    if trace.source:
        out["source"] = trace.source
    return out
