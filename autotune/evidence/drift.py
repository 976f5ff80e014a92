"""Did the host drift between the baseline's repeats and its confirmation runs? Pure.

(Within one run. Not the nightly drift check, ``autotune.study.nightly``, which asks whether
the configuration production runs is still the best.)

The verdict pools the baseline's repeats (measured before the search) with its runs interleaved
with the candidates' (a candidate is judged on its confirmation runs; its search trials only
help rule it out: ``significance.judge``). That is fair while the host measures alike from the
first trial to the last. When it drifts (a neighbour arrives or leaves, the machine warms, a
cluster's night load changes) the baseline's early repeats were measured under other conditions
than the confirmation, and pooling them biases the comparison: a host getting faster makes
every late candidate look better than the early baseline (a wrong ADOPT), one
getting slower hides a real gain (the live demo of 2026-12-03: baseline repeats 4.99, 4.96,
5.63 ms before the search, 6.01, 6.10, 6.06 ms interleaved at the end; INCONCLUSIVE).

The baseline is measured at both ends, so it shows the drift. It is called **drifted** when every
interleaved run lies outside the range of the repeats before the search, all on the same side,
AND the two medians differ by more than ``significance.PRACTICAL`` (5%), with at least two runs
on each side: the shape of the pool's member check (``autotune.evidence.members``), since with 2
or 3 runs a side a looser rule flags noise (two runs above three by chance: 1 in 10 on each
side).

**What the verdict does about it** (``steadied``). When drift is called, the primary objective
of every run of every configuration (confirmation runs, the baseline's, the search values that
may rule a candidate out) is judged scaled by the baseline's trend in time (``trend``): the
line through the logarithms of the baseline's runs against the time each ended (a steady
fraction per minute) whose slope is the median of the slopes between every two runs
(Theil-Sen), to what it would have read at the baseline's last run. Other
objectives, the metrics and the trial table stay as measured. The baseline is measured before
the search and in the confirmation rounds while it is undecided, so a candidate's run after the
baseline's last one is scaled by extending the line. The note and the reason say so, with the
rate per 10 minutes. It assumes the host drifted steadily and alike for every configuration and
pool member; a step (a neighbour arriving between two rounds) fits the line only roughly. The
line is fitted to the very runs it scales and its own uncertainty is not in the interval, so a
"better" on scaled runs is not held to its level the way the exact rank test holds one on runs
as measured (``significance.separation_p``): with nothing differing and no drift, 7 of the 10
wrong ADOPTs in 200 replayed runs followed a chance drift call (every interleaved baseline run
outside the repeats' range, 1 run in 10 at 3 vs 3), whose line lifts the early repeats to the
late ones' level; on a host getting 20% faster, 16 of 200 (least squares, 2026-12-04:
docs/measurements/exact-2026-12-04.txt; 10 and 19 of 200 with the median slope and the
extension round, 2026-12-05).

**Why the median slope** (since 2026-12-05, docs/measurements/theil-sen-2026-12-05.txt). The
least-squares line before it follows one outlying run: a single slow interleaved run (the
recorded grids' heavy tails) steepened the slope that scales every other run. Of the 15 pairwise
slopes of 6 runs (the default's 3 repeats and 3 interleaved runs), 5 pass through one outlying
run, and their median stays within the range of the other 10; from 5 runs up one outlier
cannot bend it, but with 4 (2 repeats and a look after round 2) 3 of the 6 slopes pass through
it and it can, as can two outliers of six. Replayed, the same 100 seeds a grid: no grid's rate
worse and a few better (a host slowing 20% per run: the clear-KEEP grid 89% -> 94% right, 12-03d
67% -> 68%; without drift three grids one run better; nothing differing, wrong ADOPTs 11 -> 10
of 200, 5 -> 5 of 100, a host getting faster 20 -> 19 of 200). Siegel's repeated median would
hold both cases; priced, it was one run worse on three grids and better on none (the less
efficient estimator: with 6 runs a noisier slope scales every run;
docs/measurements/siegel-2026-12-05.txt).

Priced on the whole-run replay (docs/measurements/drift-2026-12-04c.txt, 100 seeds a grid,
against the runs as measured): with a host slowing 20% per run the demo grids' correct verdicts
rise (12-03 40% -> 54%, 12-03d 47% -> 57%, 12-03b 87% -> 92%); with a host getting 20%
faster the clear-KEEP grid is right in 69% of runs instead of 4%, and the ADOPT grids, whose
gains that drift inflated, lose up to 7 points (inventory 98% -> 91%). Without drift it costs one
verdict in 100 on four of the eight grids, and wrong ADOPTs when nothing differs rise from 13 to
15 of 200 (5 to 6 of 100 at less noise): drift is called by chance in a few runs, and scaling
then follows a line fitted to noise.

Holding a scaled "better" at both ends of the slope's 95% interval (Student's t on the line's
residuals) was priced the same night (exact-2026-12-04.txt): wrong ADOPTs with nothing differing
10 -> 7 of 200, but with a host slowing 20% per run the demo grid 12-03 fell to 28% correct and
the outside inventory service to 71% (two clusters of 3 noisy runs bound a slope loosely), so it
was not taken.

Scaling whenever the line's slope is clear (p < 0.2), not only when drift is called, recovers
more under drift in simulation (benchmarks/bench_drift.py) and on the replay (12-03d 70% at
+20%), but the recorded grids' heavy tails make chance slopes: without drift it took 12-03 from
100% to 94% correct and the clear-KEEP grid to 97%, so it was not taken. Judging the interleaved
runs alone was tried before (drift-2026-12-04.txt) and did worse: 3 runs a side rarely decide,
and the clear-KEEP grid fell from 90% to 63% correct.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.evidence.significance import PRACTICAL

MIN_SIDE = 2
"""Runs a side before drift can be called (one run has no range to fall outside of)."""


@dataclass(frozen=True)
class Drift:
    """The baseline's runs before the search and interleaved with the candidates, which differ."""

    before: tuple[float, ...]
    interleaved: tuple[float, ...]

    @property
    def change(self) -> float:
        """Relative change of the median, interleaved against before (+: higher later)."""
        return statistics.median(self.interleaved) / statistics.median(self.before) - 1

    def text(self, metric: str) -> str:
        def runs(values: Sequence[float]) -> str:
            return ", ".join(f"{v:.4g}" for v in values)

        # "between", not "during the run": a study continued over several nights may have its
        # repeats from one night and its interleaved runs from another.
        return (f"The baseline drifted: {metric} {runs(self.before)} in its "
                f"{len(self.before)} repeats before the search, {runs(self.interleaved)} in its "
                f"{len(self.interleaved)} runs interleaved with the candidates ({self.change:+.0%}"
                " in the median, every interleaved run outside the earlier ones' range)")

    def warning(self, adjusted: Trend | None = None) -> str:
        """One sentence for the verdict's reason; ``adjusted``: the trend the verdict scaled
        every run by (``trend``), None when it judged the runs as measured."""
        head = (f"Caution: the baseline drifted {self.change:+.0%} between its repeats before "
                "the search and its runs interleaved with the candidates (every one outside the "
                "range of the repeats)")
        if adjusted is None:
            return (f"{head}, so early and late runs were measured under different conditions: "
                    "a run on a steadier host decides more surely than more repeats")
        return (f"{head}; the verdict judged every run scaled to the end of the run by the "
                f"baseline's trend in time ({adjusted.per_minutes(10):+.1%} per 10 minutes), "
                "which assumes the host drifted steadily: a run on a steadier host decides more "
                "surely than more repeats")


def drift(before: Sequence[float], interleaved: Sequence[float]) -> Drift | None:
    """The drift between the baseline's repeats before the search and its interleaved runs, or
    None when they agree (module docstring)."""
    if min(len(before), len(interleaved)) < MIN_SIDE:
        return None
    low, high = min(before), max(before)
    outside = (all(v > high for v in interleaved) or all(v < low for v in interleaved))
    median = statistics.median(before)
    if not outside or median == 0:
        return None
    found = Drift(tuple(before), tuple(interleaved))
    return found if abs(found.change) > PRACTICAL else None


@dataclass(frozen=True)
class Trend:
    """The baseline's drift as a straight line in time through the logarithms of its runs
    (a host slowing or speeding up by a steady fraction per minute), and the time every run is
    scaled to (``reference``: the baseline's last run, so that scaled values read as the host
    did at the end of the run)."""

    slope: float
    """Change of log(value) per second."""
    reference: float
    runs: int

    def scale(self, at: float, value: float) -> float:
        """``value``, measured at ``at``, as the trend says it would have read at
        ``reference``."""
        return value * math.exp(self.slope * (self.reference - at))

    def per_minutes(self, minutes: float) -> float:
        """The relative change the trend gives over ``minutes``."""
        return math.exp(self.slope * 60 * minutes) - 1

    def text(self, metric: str) -> str:
        """What the evidence note says when the verdict scaled every run by it."""
        return (f"So every run's {metric} (the values above are as measured) is judged scaled "
                "to what it would have read at the baseline's last run, by the baseline's trend "
                f"in time ({self.per_minutes(10):+.1%} per 10 minutes, the median slope between "
                f"every two of its {self.runs} runs, on a log scale); the configurations' {metric} "
                "values are the scaled ones, while other objectives, the metrics and the trial "
                "table are as measured")


def trend(runs: Sequence[tuple[float, float]]) -> Trend | None:
    """The line of log(value) on time through the baseline's ``(time, value)`` runs, its slope
    the median of the slopes between every two runs measured at different times (Theil-Sen:
    module docstring), or None when it cannot be fitted (fewer than two distinct times, or a
    value that is not positive: a drift is a factor, and a factor has no logarithm below
    zero). Pure."""
    if len({t for t, _ in runs}) < 2 or any(v <= 0 for _, v in runs):
        return None
    logs = [(t, math.log(v)) for t, v in runs]
    slope = statistics.median((y2 - y1) / (t2 - t1) for i, (t1, y1) in enumerate(logs)
                              for t2, y2 in logs[i + 1:] if t2 != t1)
    return Trend(slope=slope, reference=max(t for t, _ in runs), runs=len(runs))


def steadied(before: Sequence[tuple[float | None, float]],
             interleaved: Sequence[tuple[float | None, float]]) -> tuple[Drift | None,
                                                                         Trend | None]:
    """The baseline's drift between its repeats before the search and its interleaved runs,
    each a ``(time, value)`` run (``drift``), and, when there is one and every run has a time,
    the trend every run is judged scaled by (``trend``). Both the report and the
    confirmation's looks call it, so that they judge the same values. Pure."""
    shift = drift([v for _, v in before], [v for _, v in interleaved])
    timed = [(t, v) for t, v in (*before, *interleaved) if t is not None]
    if shift is None or len(timed) < len(before) + len(interleaved):
        return shift, None
    return shift, trend(timed)
