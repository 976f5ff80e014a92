"""Why the best configuration beat the baseline, in one paragraph built from measured figures.

Every number in the text is one of the inputs, formatted (never a difference, ratio or estimate
computed here), and a figure that was not measured (``None``) is never mentioned. Which contrasts
are worth a clause is decided by their size (thresholds below); figures that were measured on
both sides but hardly differ are named as "about the same", because ruling a mechanism out is
part of an explanation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

# Shares (0..1) must differ by this much to be a contrast: CFS throttling and GC's CPU share move
# by a few points between repeats of one configuration, so less is not evidence of a mechanism.
THROTTLE_POINTS = 0.05
GC_CPU_POINTS = 0.05
# P-idle time is noisier (runtime/metrics updates /cpu/classes/* only at the end of GC cycles).
IDLE_POINTS = 0.10
# Latency-like figures vary multiplicatively; a factor of 2 is beyond repeat noise (the demo's
# repeats differ by 1.09x median, 2.0x at worst for a saturated service).
RATIO = 2.0
# A run queue shorter than half a spilled batch (overflow.SPILL_BATCH / 2) is not a queue worth
# naming, whatever the ratio.
RUNQ_FLOOR = 64
# Another configuration is named when its p99 is at least this many times the worse of the two.
WORST_RATIO = 2.0
_EPS = 1e-9


@dataclass(frozen=True)
class Evidence:
    """What was measured for one configuration. Seconds for times, 0..1 for shares; ``settings``
    maps a parameter to its value, ``None`` meaning the variable was left unset."""

    label: str
    settings: Mapping[str, str | None] = field(default_factory=dict)
    cpu_limit: float | None = None  # cores
    p99: float | None = None
    sched_p99: float | None = None
    gc_pause_p99: float | None = None
    throttled_share: float | None = None  # of CFS periods
    # GC's share of the CPU the program used (cpu/classes gc / (total - idle)): a share of
    # total would shrink with GOMAXPROCS alone, since total counts every P's idle time too
    gc_cpu_share: float | None = None
    idle_share: float | None = None  # P idle: /cpu/classes/idle / /cpu/classes/total
    overflow_count: int | None = None
    overflow_longest: float | None = None
    overflow_threshold: int | None = None
    runq_p999: float | None = None
    gomaxprocs: int | None = None

    @property
    def overflowed(self) -> bool | None:
        """Whether run-queue overflow fired; ``None`` when it was not watched."""
        return None if self.overflow_count is None else self.overflow_count > 0


@dataclass(frozen=True)
class Breakdown:
    """Where one configuration's CPU went, in cores (CPU-seconds per second, from the rates of
    ``/cpu/classes/*``), and the share of CFS periods in which it was throttled (0..1)."""

    label: str
    user: float | None
    gc: float | None
    idle: float | None
    total: float | None
    throttled_share: float | None

    @property
    def other(self) -> float | None:
        """``total`` minus the named classes (scavenger, ...), when all of them were measured.
        Clamped at 0: the rates of separately scraped counters do not add up exactly."""
        if None in (self.user, self.gc, self.idle, self.total):
            return None
        assert self.user is not None and self.gc is not None and self.idle is not None
        assert self.total is not None
        return max(0.0, self.total - self.user - self.gc - self.idle)


# ---------------------------------------------------------------------------------------------
# Units


def duration(seconds: float, *, space: bool = True) -> str:
    """``0.0057`` -> ``5.7 ms``, ``0.052`` -> ``52 ms``, ``3.1`` -> ``3.1 s``, ``1e-4`` ->
    ``100 µs``: two significant digits below 10 of a unit, whole units above."""
    if math.isinf(seconds):
        return "∞"
    sep = " " if space else ""
    if seconds == 0:
        return f"0{sep}s"
    units = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
    for i, (unit, scale) in enumerate(units):
        if abs(seconds) >= scale or unit == "ns":
            text = _number(seconds / scale)
            if float(text) >= 1000 and i > 0:  # 999.7 µs rounds to 1000 µs: say 1 ms
                unit = units[i - 1][0]
                text = _number(float(text) / 1000)
            return f"{text}{sep}{unit}"
    raise AssertionError("unreachable")


def _number(value: float) -> str:
    if abs(value) >= 10:
        return f"{value:.0f}"
    text = f"{value:.2g}"
    return text if "e" not in text else f"{value:f}".rstrip("0").rstrip(".")


def percent(share: float) -> str:
    """``0.41`` -> ``41%``, ``0.057`` -> ``5.7%``, ``0.004`` -> ``0.4%``."""
    value = share * 100
    if value == 0 or abs(value) >= 10:
        return f"{value:.0f}%"
    return f"{value:.1f}".rstrip("0").rstrip(".") + "%"


def cores(value: float) -> str:
    """A CPU amount: ``1.0`` -> ``1``, ``0.5`` -> ``0.5``."""
    return f"{value:.3g}"


def _join(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


# ---------------------------------------------------------------------------------------------
# Contrasts


def _both(a: float | None, b: float | None) -> tuple[float, float] | None:
    return None if a is None or b is None else (a, b)


def _points_apart(a: float | None, b: float | None, points: float) -> bool:
    pair = _both(a, b)
    return pair is not None and abs(pair[0] - pair[1]) >= points - _EPS


def _ratio_apart(a: float | None, b: float | None, floor: float = 0.0) -> bool:
    pair = _both(a, b)
    if pair is None:
        return False
    low, high = sorted(pair)
    return high >= floor and (low <= 0 < high or (low > 0 and high / low >= RATIO - _EPS))


def _moved(verb_down: str, verb_up: str, before: float, after: float) -> str:
    return verb_down if after < before else verb_up


def _overflow_phrase(e: Evidence, form: str) -> str:
    """A fired overflow as a clause (``state``: "the run queue held ..."), a verb phrase
    (``verb``: "let its run queue hold ...") or a noun phrase (``noun``: "its run queue at ...")."""
    assert e.overflow_count
    how_long = ""
    if e.overflow_longest is not None:
        how_long = f" for {duration(e.overflow_longest)}"
        if e.overflow_count > 1:
            how_long += f" (the longest of {e.overflow_count} bursts)"
    if e.overflow_threshold is None:
        head = {"state": "the run queue overflowed", "verb": "overflowed its run queue",
                "noun": "its run queue overflowing"}[form]
        return head + how_long
    head = {"state": "the run queue held", "verb": "let its run queue hold",
            "noun": "its run queue at"}[form]
    return f"{head} >= {e.overflow_threshold} goroutines{how_long}"


def _says(label: str, key: str, value: object) -> bool:
    return re.search(rf"\b{re.escape(key)}={re.escape(str(value))}(?![\w.])", label) is not None


def _settings_changes(baseline: Evidence, best: Evidence) -> list[str]:
    out: list[str] = []
    keys = [k for k in best.settings if k in baseline.settings]
    keys += [k for k in baseline.settings if k in best.settings and k not in keys]
    gomaxprocs_differ = (baseline.gomaxprocs is not None and best.gomaxprocs is not None
                         and baseline.gomaxprocs != best.gomaxprocs)
    for key in keys:
        before, after = baseline.settings[key], best.settings[key]
        if key == "GOMAXPROCS" and gomaxprocs_differ:
            continue  # the effective values are stated instead
        if before == after:
            continue
        if after is None:
            out.append(f"{key} unset ({before} in the baseline)")
        elif before is None:
            out.append(f"{key}={after} (unset in the baseline)")
        else:
            out.append(f"{key}={after} ({before} in the baseline)")
    # The effective value is news unless the label already says it.
    if gomaxprocs_differ and not _says(best.label, "GOMAXPROCS", best.gomaxprocs):
        out.insert(0, f"GOMAXPROCS={best.gomaxprocs}")
    return out


@dataclass
class _Story:
    before: list[str] = field(default_factory=list)  # what the baseline showed
    after: list[str] = field(default_factory=list)  # what the best changed
    same: list[str] = field(default_factory=list)  # measured on both, about equal


def _contrast_shares(
    story: _Story, a: float | None, b: float | None, points: float,
    before: Callable[[str], str], after: Callable[[str, bool], str], same: str,
) -> None:
    pair = _both(a, b)
    if pair is None:
        return
    if _points_apart(a, b, points):
        story.before.append(before(percent(pair[0])))
        story.after.append(after(percent(pair[1]), pair[1] < pair[0]))
    else:
        story.same.append(f"{same} ({percent(pair[0])} and {percent(pair[1])})")


def _story(baseline: Evidence, best: Evidence) -> _Story:
    s = _Story()
    # Overflow first: when it fired it is the most direct evidence of scheduler trouble.
    b_over, o_over = baseline.overflowed, best.overflowed
    if b_over:
        s.before.append(_overflow_phrase(baseline, "state"))
        if o_over is False:
            s.after.append("removed the overflow")
        elif o_over:
            longest = best.overflow_longest
            s.after.append("still overflowed its run queue"
                           + (f" for {duration(longest)}" if longest is not None else ""))
    elif o_over:
        s.after.append(_overflow_phrase(best, "verb"))

    _contrast_shares(
        s, baseline.throttled_share, best.throttled_share, THROTTLE_POINTS,
        lambda v: f"{v} of CFS periods were throttled",
        lambda v, down: f"{'cut' if down else 'raised'} throttling to {v}",
        "throttling")
    _contrast_shares(
        s, baseline.gc_cpu_share, best.gc_cpu_share, GC_CPU_POINTS,
        lambda v: f"GC took {v} of the CPU",
        lambda v, down: f"{'cut' if down else 'raised'} GC's share of the CPU to {v}",
        "GC's share of the CPU")
    _contrast_shares(
        s, baseline.idle_share, best.idle_share, IDLE_POINTS,
        lambda v: f"Ps were idle {v} of the time",
        lambda v, down: f"{'cut' if down else 'raised'} P idle time to {v}",
        "P idle time")

    for name, a, b in (("scheduling latency p99", baseline.sched_p99, best.sched_p99),
                       ("GC pause p99", baseline.gc_pause_p99, best.gc_pause_p99)):
        pair = _both(a, b)
        if pair is None:
            continue
        if _ratio_apart(a, b):
            s.before.append(f"the {name} was {duration(pair[0])}")
            verb = _moved("cut", "raised", *pair)
            s.after.append(f"{verb} the {name} to {duration(pair[1])}")
        else:
            s.same.append(f"the {name} ({duration(pair[0])} and {duration(pair[1])})")

    runq = _both(baseline.runq_p999, best.runq_p999)
    if runq is not None and not (b_over or o_over) and _ratio_apart(*runq, floor=RUNQ_FLOOR):
        s.before.append(f"the run queue's p99.9 was {runq[0]:g} goroutines")
        s.after.append(f"{_moved('cut', 'raised', *runq)} it to {runq[1]:g}")
    return s


def _context(baseline: Evidence, best: Evidence) -> tuple[str, str, str]:
    """The shared "Under a N-CPU limit, " opening, or per-side mentions when the limits differ."""
    a, b = baseline.cpu_limit, best.cpu_limit
    if a is not None and b is not None and a != b:
        return "", f" (under a {cores(a)}-CPU limit)", f" (under a {cores(b)}-CPU limit)"
    limit = a if a is not None else b
    return (f"Under a {cores(limit)}-CPU limit, " if limit is not None else ""), "", ""


def _worst(baseline: Evidence, best: Evidence, others: Sequence[Evidence]) -> str | None:
    measured = [o for o in others if o.p99 is not None]
    reference = [e.p99 for e in (baseline, best) if e.p99 is not None]
    if not measured or not reference:
        return None
    worst = max(measured, key=lambda o: o.p99 or 0.0)
    assert worst.p99 is not None
    if worst.p99 < WORST_RATIO * max(reference) - _EPS:
        return None
    facts = []
    if worst.throttled_share is not None:
        facts.append(f"{percent(worst.throttled_share)} of its CFS periods throttled")
    if worst.gc_cpu_share is not None:
        facts.append(f"{percent(worst.gc_cpu_share)} of its CPU spent in GC")
    if worst.overflowed:
        facts.append(_overflow_phrase(worst, "noun"))
    text = (f"The worst configuration measured, {worst.label}, reached a p99 of "
            f"{duration(worst.p99)}")
    return text + (f", with {_join(facts)}." if facts else ".")


def explain(baseline: Evidence, best: Evidence, others: Sequence[Evidence] = ()) -> str:
    """One paragraph on why ``best`` differs from ``baseline`` (and how bad the worst of
    ``others`` was, when it was dramatically worse), from the measured figures only."""
    story = _story(baseline, best)
    opening, base_limit, best_limit = _context(baseline, best)
    p99 = _both(baseline.p99, best.p99)
    after = list(story.after)
    if p99 is not None:
        if duration(p99[0]) == duration(p99[1]):
            after.append(f"left p99 at {duration(p99[1])}")
        else:
            after.append(f"{_moved('cut', 'raised', *p99)} p99 from {duration(p99[0])} "
                         f"to {duration(p99[1])}")
    worst = _worst(baseline, best, others)
    same = ""
    if story.same:
        same = f"{_join(story.same)} {'was' if len(story.same) == 1 else 'were'} about the same"
    if not story.before and not after and worst is None:
        text = ("There is not enough measured evidence to explain the difference between "
                f"{baseline.label} and {best.label}")
        return text + (f": {same} in both." if same else ".")

    sentences: list[str] = []
    if story.before:
        running = ""
        if (baseline.gomaxprocs is not None and best.gomaxprocs is not None
                and baseline.gomaxprocs != best.gomaxprocs
                and not _says(baseline.label, "GOMAXPROCS", baseline.gomaxprocs)):
            running = f" and GOMAXPROCS={baseline.gomaxprocs}"
        sentences.append(f"{opening}with {baseline.label}{base_limit}{running}, "
                         f"{_join(story.before)}.")
        opening = ""
    if after:
        changes = _settings_changes(baseline, best)
        with_ = f", with {_join(changes)}," if changes else ""
        sentences.append(f"{opening}{best.label}{best_limit}{with_} {_join(after)}.")
    mechanisms = story.before or story.after
    if same:
        sentences.append(f"{same} in both." if mechanisms
                         else f"No measured figure explains it: {same} in both.")
    elif after and not mechanisms:
        sentences.append("No scheduler or CPU figure was measured on both sides to explain it.")
    if worst is not None:
        sentences.append(worst)
    return " ".join(_cap(s) for s in sentences)
