"""``load.rate: auto``: find what the service sustains under its CPU limit; load a fraction of it.

Once per run, before the first trial, without stress: the service runs with the baseline settings
in its cgroup, and the open-loop load generator offers a few rates, each for a short step
(restarted per step: its rate is fixed per process). Each step's counters and latency histogram
come from the generator's own ``/metrics`` (``loadgen_requests_scheduled_total``,
``loadgen_requests_total{outcome}``, ``loadgen_request_duration_seconds_bucket``), read after a
settling period and at the end of the step.

A step is **stable** when at least ``MIN_RATIO`` (97 %) of the requests due in it completed ok,
at most 1 % failed or were dropped, and its p99 (from the scheduled send time) stayed at or below
``P99_MAX`` (100 ms: one CFS period; above it requests wait for the next quota period, the queue
of an overloaded server). The ramp doubles the rate from ``START_RATE`` until a step is not
stable, then narrows the gap between the best stable and the lowest unstable rate (probing the
unstable step's achieved rate first when it lies inside) until it is within 10 %, all within
``BUDGET`` seconds. The **capacity** is the highest stable rate below every unstable one; with no
such rate there is no capacity, and the caller fails with the reason instead of inventing one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.clock import Clock
from autotune.errors import TargetError

START_RATE = 50.0
MAX_RATE = 20_000.0
MIN_RATIO = 0.97
MAX_ERROR_RATIO = 0.01
P99_MAX = 0.1
PRECISION = 0.10
BUDGET = 20.0
SETTLE = 0.5
SPAN = 1.0


class StepFailed(TargetError):
    """A step could not be measured at all (the service died, the generator did not answer)."""


@dataclass(frozen=True)
class Counters:
    """One reading of the load generator's /metrics."""

    scheduled: float
    ok: float
    failed: float
    """error + dropped"""
    buckets: tuple[tuple[float, float], ...]
    """(le, cumulative count) of loadgen_request_duration_seconds, +Inf last."""


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_counters(text: str) -> Counters:
    """The counters a step needs, from the Prometheus text format; ValueError if absent."""
    scheduled: float | None = None
    outcomes: dict[str, float] = {}
    buckets: list[tuple[float, float]] = []
    for name, labels, value in _SAMPLE.findall(text):
        lab = dict(_LABEL.findall(labels))
        if name == "loadgen_requests_scheduled_total":
            scheduled = float(value)
        elif name == "loadgen_requests_total" and "outcome" in lab:
            outcomes[lab["outcome"]] = float(value)
        elif name == "loadgen_request_duration_seconds_bucket" and "le" in lab:
            buckets.append((float(lab["le"]), float(value)))
    if scheduled is None or "ok" not in outcomes or not buckets:
        raise ValueError("the load generator's /metrics lacks loadgen_requests_scheduled_total, "
                         "loadgen_requests_total or loadgen_request_duration_seconds_bucket")
    buckets.sort()
    return Counters(scheduled, outcomes["ok"],
                    outcomes.get("error", 0.0) + outcomes.get("dropped", 0.0), tuple(buckets))


def p99_between(before: Counters, after: Counters) -> float | None:
    """The upper bound of the bucket holding the 99th percentile of the requests completed
    between two readings (conservative: never below the true p99); None if there were none."""
    counts = [(le, a - b) for (le, a), (_, b) in zip(after.buckets, before.buckets, strict=True)]
    total = counts[-1][1] if counts else 0.0
    if total <= 0:
        return None
    for le, n in counts:
        if n >= 0.99 * total:
            return le
    return math.inf


@dataclass(frozen=True)
class Step:
    rate: float
    """Offered (the generator's -rate), requests per second."""
    seconds: float
    scheduled: float
    ok: float
    failed: float
    p99: float | None

    @classmethod
    def between(cls, rate: float, seconds: float, before: Counters, after: Counters) -> Step:
        return cls(rate, seconds, after.scheduled - before.scheduled, after.ok - before.ok,
                   after.failed - before.failed, p99_between(before, after))

    @property
    def achieved(self) -> float:
        return self.ok / self.seconds if self.seconds > 0 else 0.0

    def problem(self, min_ratio: float = MIN_RATIO, p99_max: float = P99_MAX) -> str | None:
        """Why this step is not stable, or None if it is."""
        if self.scheduled <= 0:
            return "no request was due"
        if self.ok < min_ratio * self.scheduled:
            return f"{self.ok:.0f} of {self.scheduled:.0f} due requests completed ok"
        if self.failed > MAX_ERROR_RATIO * self.scheduled:
            return f"{self.failed:.0f} of {self.scheduled:.0f} requests failed or were dropped"
        if self.p99 is None or self.p99 > p99_max:
            return f"p99 {self.p99} s above {p99_max:g} s"
        return None

    def record(self) -> dict[str, Any]:
        out = asdict(self)
        out["seconds"] = round(self.seconds, 3)
        out["achieved"] = round(self.achieved, 1)
        out["stable"] = self.problem() is None
        return out


def capacity(steps: Sequence[Step], min_ratio: float = MIN_RATIO,
             p99_max: float = P99_MAX) -> float | None:
    """The highest stable rate below every unstable one; None if there is none."""
    unstable = [s.rate for s in steps if s.problem(min_ratio, p99_max) is not None]
    ceiling = min(unstable, default=math.inf)
    stable = [s.rate for s in steps if s.problem(min_ratio, p99_max) is None and s.rate < ceiling]
    return max(stable, default=None)


def next_rate(steps: Sequence[Step], start: float = START_RATE, max_rate: float = MAX_RATE,
              precision: float = PRECISION) -> float | None:
    """The next rate to offer, or None when the capacity is known well enough."""
    if not steps:
        return start
    unstable = [s for s in steps if s.problem() is not None]
    best = capacity(steps)
    if not unstable:
        last = max(s.rate for s in steps)
        return None if last >= max_rate else min(max_rate, 2 * last)
    low_bad = min(unstable, key=lambda s: s.rate)
    if best is None:
        # Even the lowest rate tried was too much: try lower, down to a floor.
        return None if low_bad.rate <= start / 8 else low_bad.rate / 2
    if low_bad.rate <= best * (1 + precision):
        return None
    guess = 0.97 * low_bad.achieved
    tried = {round(s.rate) for s in steps}
    if best * (1 + precision / 2) < guess < low_bad.rate * (1 - precision / 2) \
            and round(guess) not in tried:
        return float(round(guess))
    return float(round(math.sqrt(best * low_bad.rate)))


@dataclass
class Calibration:
    capacity: float | None
    rate: float | None
    fraction: float
    seconds: float
    steps: list[Step] = field(default_factory=list)
    problem: str = ""
    """Why there is no capacity (then ``capacity`` and ``rate`` are None)."""
    note: str = ""
    """A caveat on a capacity that was found (e.g. it is only a lower bound)."""

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "capacity": self.capacity, "rate": self.rate, "fraction": self.fraction,
            "seconds": round(self.seconds, 2), "steps": [s.record() for s in self.steps],
            "criteria": {"min_ok_ratio": MIN_RATIO, "max_failed_ratio": MAX_ERROR_RATIO,
                         "p99_max_s": P99_MAX, "settle_s": SETTLE, "span_s": SPAN},
        }
        if self.problem:
            out["problem"] = self.problem
        if self.note:
            out["note"] = self.note
        return out


def run(step: Callable[[float], Step], clock: Clock, fraction: float,
        budget: float = BUDGET, step_seconds: float = SETTLE + SPAN) -> Calibration:
    """Offer rates chosen by ``next_rate`` through ``step(rate)`` until done or out of budget."""
    t0 = clock.monotonic()
    steps: list[Step] = []
    while True:
        rate = next_rate(steps)
        if rate is None:
            break
        if steps and clock.monotonic() - t0 + step_seconds > budget:
            break
        try:
            steps.append(step(rate))
        except StepFailed as e:
            return Calibration(None, None, fraction, clock.monotonic() - t0, steps, str(e))
    cap = capacity(steps)
    seconds = clock.monotonic() - t0
    if cap is None:
        lowest = min(steps, key=lambda s: s.rate)
        return Calibration(None, None, fraction, seconds, steps,
                           f"no stable rate: even {lowest.rate:g}/s was too much "
                           f"({lowest.problem()})")
    found = Calibration(cap, float(max(1, round(fraction * cap))), fraction, seconds, steps)
    if all(s.problem() is None for s in steps):
        found.note = (f"no rate up to {max(s.rate for s in steps):g}/s overloaded the service "
                         "(time or rate limit reached): the capacity is at least that")
    return found
