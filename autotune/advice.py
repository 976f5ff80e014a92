"""What ``validate`` says about a valid experiment that may still measure the wrong thing.

These are warnings, not errors: the run would work, but a figure would mean less than it seems.

- A constraint on a runtime-latency quantile whose bound falls inside one of client_golang's
  re-bucketed histogram buckets compares an interpolation (see ``metrics/buckets.py``). Not for
  the demo service (``workload: demo``), which exports the runtime's fine buckets; a service of
  your own (a cluster's, or ``target.local.command``) exports client_golang's.
- A query that does not select the candidate (no ``{{selector}}`` nor ``{{load_selector}}``)
  reads every series it matches: other pods, the baseline's and earlier candidates' series
  still in range, so each trial reads much the same number. One with a fixed range (``[5m]``)
  instead of ``{{window}}`` reaches back before the window, into earlier trials.
- A GOMAXPROCS range far from the CPU limit: Go >= 1.25 picks GOMAXPROCS from the container's
  CPU limit (rounded up, at least 2) when the variable is unset, which is the baseline; a range
  that excludes that value, or reaches far beyond the limit, spends trials where the answer is
  already known (more Ps than CPUs of quota are descheduled by the CFS throttle).
"""

from __future__ import annotations

import math
import re

from autotune.experiment.models import Experiment, Parameter
from autotune.metrics.buckets import RUNTIME_HISTOGRAMS, bucket_around
from autotune.study import space
from autotune.study.design import go_default_gomaxprocs

FAR_BEYOND = 8
"""A GOMAXPROCS range reaching beyond this many times the CPU limit (rounded up) is "far".
The demo's 8 Ps on 1 CPU stay inside on purpose: they show the run-queue overflow."""


def _seconds(x: float) -> str:
    return f"{x * 1000:.3g} ms" if x < 1 else f"{x:.3g} s"


def bucket_warnings(exp: Experiment) -> list[str]:
    local = exp.target.local
    if exp.target.kind not in ("kubernetes", "local") or (
            local is not None and local.command is None):
        return []  # the demo's own buckets are fine (review finding: a command's were skipped)
    out = []
    for i, c in enumerate(exp.parsed_constraints):
        if c.metric not in exp.metrics:
            continue
        query = exp.metric(c.metric).query
        if "histogram_quantile" not in query:
            continue
        family = RUNTIME_HISTOGRAMS.search(query)
        around = bucket_around(c.bound)
        if family is None or around is None:
            continue
        lower, upper = around
        top = "+Inf" if math.isinf(upper) else _seconds(upper)
        out.append(
            f"constraints[{i}]: '{c.text}' falls inside one bucket ({_seconds(lower)}, {top}] of "
            f"{family.group(0)} as client_golang exports it (runtime histograms re-bucketed "
            "about 10x wide): histogram_quantile interpolates inside that bucket, so the "
            "constraint compares an interpolation, not a measurement. Use a bucket boundary "
            f"({_seconds(lower)} or {top}) or export the runtime's own buckets")
    return out


_FIXED_RANGE = re.compile(r"\[\s*\d+(?:\.\d+)?(?:ms|[smhdwy])")


def query_warnings(exp: Experiment) -> list[str]:
    if exp.target.kind not in ("kubernetes", "local"):
        return []  # a replay or a simulation has no PromQL
    out = []
    for name in exp.metrics:
        query = exp.metric(name).query
        if not query:
            continue  # a schedtrace figure
        if "{{selector}}" not in query and "{{load_selector}}" not in query:
            out.append(f"metrics.{name}: the query has no {{{{selector}}}} (nor "
                       "{{load_selector}}): it reads every series it matches, not only the "
                       "candidate's, so the baseline's and earlier candidates' series mix into "
                       "every trial's value. Put {{selector}} in each selector's braces")
        fixed = _FIXED_RANGE.search(query)
        if fixed is not None:
            out.append(f"metrics.{name}: the range {fixed.group(0)}...] is fixed: it reaches "
                       "back before the trial's window, into earlier trials. Use [{{window}}]")
    return out


def _gomaxprocs(exp: Experiment) -> tuple[int, Parameter] | None:
    for i, p in enumerate(exp.parameters):
        if p.env_var.upper() == "GOMAXPROCS":
            return i, p
    return None


def gomaxprocs_warnings(exp: Experiment, cpu_limit: float | None) -> list[str]:
    found = _gomaxprocs(exp)
    if found is None or cpu_limit is None or cpu_limit <= 0:
        return []
    i, p = found
    values = space.domain(p)
    numbers = ([float(v) for v in values if isinstance(v, int | float)] if values is not None
               else [float(p.low or 0), float(p.high or 0)])
    if not numbers:
        return []
    low, high = min(numbers), max(numbers)
    default = go_default_gomaxprocs(cpu_limit)
    explain = (f"with the variable unset, Go >= 1.25 uses the {cpu_limit:g}-CPU limit: "
               f"GOMAXPROCS={default} (ceil, at least 2; re-checked every second), which is the "
               "baseline; Go < 1.25 uses the node's CPU count, and automaxprocs floor(limit)")
    out = []
    if not low <= default <= high:
        out.append(f"parameters[{i}] ({p.name}): the range {low:g}..{high:g} does not include "
                   f"Go's own default for this limit ({default}); {explain}")
    far = FAR_BEYOND * math.ceil(cpu_limit)
    if low > far or high > far:
        out.append(f"parameters[{i}] ({p.name}): values above {far} are more than "
                   f"{FAR_BEYOND}x the {cpu_limit:g}-CPU limit: the CFS quota deschedules the "
                   "extra Ps' threads, so these trials mostly re-measure throttling; "
                   f"{explain}")
    return out


def advise(exp: Experiment, cpu_limit: float | None = None) -> list[str]:
    """Warnings for a valid experiment. ``cpu_limit``: the target's, when known (a local
    target's ``cpus``; a cluster's from the Deployment, known only to ``--cluster``)."""
    if cpu_limit is None and exp.target.local is not None:
        cpu_limit = exp.target.local.cpus
    if cpu_limit is None and exp.target.replay is not None:
        cpu_limit = exp.target.replay.cpus
    return (bucket_warnings(exp) + query_warnings(exp)
            + gomaxprocs_warnings(exp, cpu_limit))
