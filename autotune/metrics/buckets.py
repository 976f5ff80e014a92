"""The histogram buckets a real Go service exports for its runtime latencies.

client_golang's Go collector (prometheus/client_golang ``internal/go_runtime_metrics.go``,
``RuntimeMetricsBucketsForUnit(buckets, "seconds")``) keeps only runtime/metrics bucket
boundaries about 10x apart and merges everything above 1 s into +Inf. Applied to the runtime's
time-histogram boundaries (identical for ``/sched/latencies:seconds`` and
``/sched/pauses/*:seconds``; Go 1.21 to 1.27 checked) this leaves the ``le`` values below:
a p99 between 0.92 ms and 10.5 ms is a linear interpolation inside one bucket, whatever the
service really did. ``tests/unit/test_buckets.py`` re-derives the table from a Go program.

Our demo service exports the same metric names with the runtime's fine buckets, so the
warning is for services instrumented with client_golang's defaults (a cluster target).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence

CLIENT_GOLANG_SECONDS_LE: tuple[float, ...] = (
    0.0, 6.4e-08, 6.4e-07, 7.168e-06, 8.192e-05, 0.000917504, 0.01048576, 0.117440512, math.inf)
"""Upper bounds (``le``) of client_golang's re-bucketed runtime histograms in seconds."""

RUNTIME_HISTOGRAMS = re.compile(
    r"\bgo_(sched_latencies|sched_pauses_[a-z_]+|gc_pauses)_seconds_bucket\b")
"""client_golang names of the runtime histograms it re-buckets (the ``_seconds`` family)."""


def rebucket(boundaries: Sequence[float], base: float = 10.0) -> list[float]:
    """client_golang's ``reBucketExp`` on runtime/metrics boundaries (lower-bound inclusive,
    -Inf first), then the "seconds" rule: the first boundary above 1 s becomes +Inf."""
    buckets = list(boundaries)
    out: list[float] = []
    bucket = buckets[0]
    if bucket == -math.inf:
        out.append(bucket)
        buckets = buckets[1:]
        bucket = buckets[0]
    for nxt in buckets[1:]:
        if (bucket >= 0 and nxt < bucket * base) or (bucket < 0 and nxt < bucket / base):
            continue
        out.append(bucket)
        bucket = nxt
    out.append(bucket)
    for i, b in enumerate(out):
        if b > 1:
            return [*out[:i], math.inf]
    return out


def bucket_around(value: float, bounds: Sequence[float] = CLIENT_GOLANG_SECONDS_LE
                  ) -> tuple[float, float] | None:
    """The bucket ``(lower, upper]`` strictly containing ``value``; None when ``value`` is a
    boundary (then a constraint on it is meaningful). Above the last finite bound,
    histogram_quantile answers that bound, so a constraint there can never fail."""
    if any(math.isclose(value, b, rel_tol=0.01) for b in bounds):
        return None  # 0.0105 means the 0.01048576 bound: written as people round it
    for lower, upper in itertools.pairwise(bounds):
        if lower < value < upper and lower > 0:
            return lower, upper
    return None
