"""Run-queue overflow: did the scheduler's local run queues spill into the global one for long?

Why the global queue tells: each P has a local run queue of 256 goroutines (``runq [256]guintptr``
in ``runtime/runtime2.go``). ``runqput`` (``runtime/proc.go``) appends a newly runnable goroutine
to the current P's queue; when that queue is full it calls ``runqputslow``, which moves half of
it (128 goroutines) plus the new one to the global queue in one batch. Small global-queue lengths
are normal (goroutines preempted by sysmon, returning from syscalls without a P, or readied by
the netpoller go there), but 128 or more waiting means about one full spilled batch: a local queue
overflowed and the work is queued behind the scheduler rather than running.

The rule: **overflow when the p99.9 of the run-queue length stays >= threshold for a burst of
>= 2.5 s.** The series is cut into fixed steps (0.5 s) starting at its first sample; each step's
value is the p99.9 (nearest rank, so the maximum of fewer than 1000 samples) of the samples in it;
a burst is a maximal run of consecutive steps at or above the threshold, and a step with no
samples ends it. A burst lasts (number of steps) x step. The 2.5 s floor (five steps) ignores a
single spawn burst that the Ps drain within a couple of scheduler ticks, and keeps pressure that
outlives several GC cycles and sysmon preemption rounds (10 ms each), which is what costs latency.

Default thresholds (``default_threshold``):

- ``global``, the ``runqueue=`` of schedtrace: 128, one ``runqputslow`` batch, whatever GOMAXPROCS.
- ``total``, global plus all local queues (schedtrace's ``runqueue`` plus the bracketed lengths, or
  Go 1.26's ``/sched/goroutines/runnable`` metric): 256 x GOMAXPROCS / 2 = 128 per P. Work stealing
  (``runqsteal`` takes half of a victim's queue) keeps the local queues roughly level, and a queue
  that just spilled keeps 128, so 128 per P on average is the level at which the queues are as full
  as right after an overflow; it scales with GOMAXPROCS because more Ps drain more.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from autotune.insight.schedtrace import Sample, p999

Which = Literal["global", "total"]

LOCAL_QUEUE = 256  # len(p.runq) in runtime/runtime2.go
SPILL_BATCH = LOCAL_QUEUE // 2  # what runqputslow moves to the global queue (plus the new one)
STEP = 0.5
MIN_BURST = 2.5
# Step indices and burst lengths are multiples of a float step: without this slack, 0.3 / 0.1
# would land in step 2 and 25 x 0.1 s would not reach 2.5 s.
_EPS = 1e-9


@dataclass(frozen=True)
class Overflow:
    # (start, duration) in seconds, of the bursts that lasted at least min_burst
    bursts: tuple[tuple[float, float], ...]
    threshold: float

    @property
    def count(self) -> int:
        return len(self.bursts)

    @property
    def longest(self) -> float:
        return max((seconds for _, seconds in self.bursts), default=0.0)

    @property
    def fired(self) -> bool:
        return bool(self.bursts)

    def to_dict(self) -> dict[str, object]:
        return {
            "bursts": [list(b) for b in self.bursts],
            "count": self.count,
            "longest": self.longest,
            "threshold": self.threshold,
            "fired": self.fired,
        }


def default_threshold(gomaxprocs: int, which: Which = "total") -> int:
    """128 for the global queue; 128 per P for the total runnable count (see the module doc)."""
    if which == "global":
        return SPILL_BATCH
    return LOCAL_QUEUE * max(1, gomaxprocs) // 2


def detect(
    series: Iterable[tuple[float, float]],
    threshold: float,
    *,
    step: float = STEP,
    min_burst: float = MIN_BURST,
) -> Overflow:
    """Overflow bursts in ``series`` of (t seconds, run-queue length); order does not matter and
    points with a non-finite time or length (a failed read) are dropped."""
    if not step > 0 or not min_burst >= 0:
        raise ValueError(f"need step > 0 and min_burst >= 0, got {step}, {min_burst}")
    points = [(t, v) for t, v in series if math.isfinite(t) and math.isfinite(v)]
    if not points:
        return Overflow((), threshold)
    t0 = min(t for t, _ in points)
    by_step: dict[int, list[float]] = {}
    for t, v in points:
        by_step.setdefault(math.floor((t - t0) / step + _EPS), []).append(v)
    bursts: list[tuple[float, float]] = []
    run_start: int | None = None
    previous = -2
    for index in sorted(by_step):
        high = p999(by_step[index]) >= threshold
        if run_start is not None and (not high or index != previous + 1):
            _close(bursts, run_start, previous, t0, step, min_burst)
            run_start = None
        if high and run_start is None:
            run_start = index
        previous = index
    if run_start is not None:
        _close(bursts, run_start, previous, t0, step, min_burst)
    return Overflow(tuple(bursts), threshold)


def _close(
    bursts: list[tuple[float, float]], first: int, last: int, t0: float, step: float,
    min_burst: float,
) -> None:
    seconds = (last - first + 1) * step
    if seconds >= min_burst - _EPS:
        bursts.append((round(t0 + first * step, 6), round(seconds, 6)))


def from_samples(
    samples: Sequence[Sample],
    which: Which = "total",
    threshold: float | None = None,
    *,
    step: float = STEP,
    min_burst: float = MIN_BURST,
) -> Overflow:
    """``detect`` over schedtrace samples: the global queue, or global plus local queues (samples
    without local queues are left out). The default threshold uses the largest GOMAXPROCS seen
    (Go >= 1.25 may change it at run time; the larger one fires less). The step is widened to the
    sampling period when samples are not much denser than it: an empty step ends a burst, and with
    ``schedtrace=1000`` a 0.5 s step is empty every other time. Widened, a step spans 1.5 sampling
    periods, so jitter in the period cannot leave one empty."""
    used = list(samples) if which == "global" else [s for s in samples if s.local]
    if threshold is None:
        threshold = default_threshold(max((s.gomaxprocs for s in samples), default=1), which)
    if len(used) >= 2:
        ordered = sorted(s.at_ms for s in used)
        period = statistics.median(b - a for a, b in itertools.pairwise(ordered))
        step = max(step, 1.5 * period / 1000)
    series = [
        (s.at_ms / 1000, float(s.runqueue if which == "global" else s.runqueue + sum(s.local)))
        for s in used
    ]
    return detect(series, threshold, step=step, min_burst=min_burst)
