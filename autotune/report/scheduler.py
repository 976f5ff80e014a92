"""Inside the Go scheduler: what the baseline, the candidates and the worst configuration did
with their CPU, their run queues and their scheduling latency, and a paragraph that explains
the verdict from those figures only. Pure: reads what the trials recorded (study/diagnostics.py).

Per configuration, each figure is the median over its runs (search, repeats and confirmation
runs alike); a figure no run recorded is absent. The heat maps show one run per side: the run of
the baseline and of the chosen configuration whose objective is nearest to its median.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.experiment.expressions import split_scenario
from autotune.experiment.models import Experiment
from autotune.insight.explain import Breakdown, Evidence, explain
from autotune.report.model import Configuration, Insight, SchedulerRow
from autotune.study.design import cpu_limit

Details = Mapping[tuple[str, int], Mapping[str, Any]]

HISTOGRAM_FAMILIES = {"sched_p99": "go_sched_latencies_seconds",
                      "gc_pause_p99": "go_sched_pauses_total_gc_seconds"}


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _records(c: Configuration, details: Details) -> list[Mapping[str, Any]]:
    return [details.get((r.study, r.number), {}).get("record") or {} for r in c.runs]


def _quantile_metric(exp: Experiment, family: str) -> str | None:
    """The experiment's p99 metric over ``family``, when it declares one."""
    for name in exp.metrics:
        query = exp.metric(name).query
        if family in query and "histogram_quantile(0.99" in query.replace(" ", ""):
            return name
    return None


def _latency_goal(exp: Experiment) -> bool:
    """The objective is a request latency's p99 in seconds: one metric minimized alone, a
    histogram's 0.99 quantile, in s (or no unit given). Only then do its medians read as the
    explanation's "p99 from 20 ms to 10 ms"; a throughput, a weighted sum or a figure in ms
    would be printed as seconds under a name it is not."""
    goal = exp.goals[0]
    if goal.direction != "minimize" or len(goal.terms) != 1:
        return False
    [(name, weight)] = goal.terms.items()
    metric = exp.metric(split_scenario(name)[0])  # p99@held: p99 under one scenario
    return (weight == 1.0 and metric.unit in ("", "s")
            and "histogram_quantile(0.99," in metric.query.replace(" ", ""))


def _cpu(records: Sequence[Mapping[str, Any]], key: str) -> float | None:
    return _median([float(r["insight"]["cpu"][key]) for r in records
                    if key in ((r.get("insight") or {}).get("cpu") or {})])


def _share(records: Sequence[Mapping[str, Any]], part: str, whole: str,
           minus: str | None = None) -> float | None:
    shares = []
    for r in records:
        cpu = (r.get("insight") or {}).get("cpu") or {}
        if part in cpu and whole in cpu and (minus is None or minus in cpu):
            denominator = float(cpu[whole]) - (float(cpu[minus]) if minus else 0.0)
            if denominator > 0:
                shares.append(float(cpu[part]) / denominator)
    return _median(shares)


def _label(c: Configuration) -> str:
    set_ = {k: v for k, v in c.env.items() if v is not None}
    what = ", ".join(f"{k}={v}" for k, v in set_.items()) or "nothing set"
    return f"the baseline ({what})" if c.id == "baseline" else f"{c.id} ({what})"


def _gomaxprocs(c: Configuration, records: Sequence[Mapping[str, Any]]) -> int | None:
    value = c.env.get("GOMAXPROCS")
    if value is not None:
        return int(value)
    seen = [(r.get("live") or {}).get("gomaxprocs_effective") for r in records]
    known = [int(v) for v in seen if isinstance(v, int | float)]
    return known[0] if known else None


def _queues(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A run's run queues: schedtrace's (a sample every 100 ms) when traced, else Go 1.26's
    runnable gauge (a sample per scrape), else None."""
    trace = record.get("schedtrace") or {}
    if trace.get("overflow") and (trace["overflow"].get("fired")
                                  or not trace.get("incomplete")):
        # An incomplete trace shows an overflow it saw, never that there was none.
        return trace
    runnable = (record.get("insight") or {}).get("runnable") or {}
    return runnable if runnable.get("overflow") else None


def evidence(exp: Experiment, c: Configuration, details: Details,
             limit: float | None) -> tuple[Evidence, SchedulerRow]:
    records = _records(c, details)
    metrics = {key: _quantile_metric(exp, family) for key, family in HISTOGRAM_FAMILIES.items()}

    def metric(name: str | None) -> float | None:
        if name is None:
            return None
        return _median([float(r["metrics"][name]) for r in records
                        if name in (r.get("metrics") or {})])

    traces = [t for t in map(_queues, records) if t is not None]
    overflow_count = sum(int(t["overflow"]["count"]) for t in traces) if traces else None
    longest = max((float(t["overflow"]["longest"]) for t in traces), default=None)
    threshold = int(traces[0]["overflow"]["threshold"]) if traces else None
    runq = _median([float(t["summary"]["runq_total_p999"]) for t in traces
                    if "runq_total_p999" in t.get("summary", {})])
    throttled = _median([float(r["insight"]["cpu"]["throttled_share"]) for r in records
                         if "throttled_share" in ((r.get("insight") or {}).get("cpu") or {})])
    p99 = c.objectives[0].median if c.objectives and _latency_goal(exp) else None
    label = _label(c)
    ev = Evidence(
        label=label, settings=dict(c.env), cpu_limit=limit, p99=p99,
        sched_p99=metric(metrics["sched_p99"]), gc_pause_p99=metric(metrics["gc_pause_p99"]),
        throttled_share=throttled, gc_cpu_share=_share(records, "gc", "total", "idle"),
        idle_share=_share(records, "idle", "total"), overflow_count=overflow_count,
        overflow_longest=longest, overflow_threshold=threshold, runq_p999=runq,
        gomaxprocs=_gomaxprocs(c, records))
    breakdown = Breakdown(label=c.id, user=_cpu(records, "user"), gc=_cpu(records, "gc"),
                          idle=_cpu(records, "idle"), total=_cpu(records, "total"),
                          throttled_share=throttled)
    row = SchedulerRow(
        id=c.id, label=label, runs=len(records), throttled_share=throttled,
        gc_cpu_share=ev.gc_cpu_share, idle_share=ev.idle_share,
        cpu={k: v for k, v in (("user", breakdown.user), ("gc", breakdown.gc),
                               ("idle", breakdown.idle), ("total", breakdown.total))
             if v is not None},
        overflow_runs=sum(1 for t in traces if t["overflow"]["count"]) if traces else None,
        traced_runs=len(traces), overflow_longest=longest, runq_p999=runq,
        sched_p99=ev.sched_p99, gomaxprocs=ev.gomaxprocs)
    return ev, row


def _heat_of(c: Configuration, details: Details, name: str) -> dict[str, Any] | None:
    """The stored heat of the run nearest to the configuration's median."""
    if not c.runs or not c.objectives:
        return None
    median = c.objectives[0].median
    for run in sorted(c.runs, key=lambda r: abs(r.values[0] - median) if r.values else 1e300):
        record = details.get((run.study, run.number), {}).get("record") or {}
        heat = ((record.get("insight") or {}).get("heat") or {}).get(name)
        if heat:
            return {"run": f"{run.study} #{run.number}", **heat}
    return None


def _worst(exp: Experiment, configs: Sequence[Configuration],
           found: Sequence[Configuration]) -> Configuration | None:
    """The worst measured configuration by the objective's direction, when it is not
    already shown."""
    shown = {tuple(sorted(c.env.items(), key=str)) for c in configs}
    ranked = [c for c in found if c.objectives
              and tuple(sorted(c.env.items(), key=str)) not in shown]
    if not ranked:
        return None
    pick = max if exp.goals[0].direction == "minimize" else min
    return pick(ranked, key=lambda c: c.objectives[0].median)


def build(exp: Experiment, baseline: Configuration | None, candidates: Sequence[Configuration],
          chosen: str | None, everything: Sequence[Configuration], details: Details,
          target: Mapping[str, Any]) -> Insight | None:
    """``candidates``: the compared ones; ``everything``: every configuration measured (for the
    worst); ``chosen``: the recommendation or the best candidate."""
    best = next((c for c in candidates if c.id == chosen), None)
    if baseline is None or best is None:
        return None
    limit = cpu_limit(target)
    shown = [baseline, *candidates]
    worst = _worst(exp, shown, everything)
    if worst is not None:
        shown.append(worst)
    pairs = {c.id: evidence(exp, c, details, limit) for c in shown}
    rows = tuple(row for _, row in pairs.values())
    if not any(r.cpu or r.traced_runs or r.throttled_share is not None for r in rows):
        return None  # nothing was recorded (simulated targets, insight off)
    others = [pairs[c.id][0] for c in shown if c.id not in (baseline.id, best.id)]
    text = explain(pairs[baseline.id][0], pairs[best.id][0], others)
    heat = {}
    for name in ("sched_latency", "gc_pause"):
        sides = {"baseline": _heat_of(baseline, details, name),
                 "best": _heat_of(best, details, name)}
        if sides["baseline"] and sides["best"]:
            heat[name] = sides
    return Insight(rows=rows, explanation=text, chosen=best.id, heat=heat,
                   worst=worst.id if worst is not None else None)
