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

What follows is disclosure, not another verdict: the report's evidence note gives the baseline's
two groups of runs, and the verdict's reason (what ``autotune run`` prints and the nightly
history keeps) warns that early and late runs were measured under different conditions. Judging
the confirmation runs alone when drift is called (each candidate's against the baseline's
interleaved runs, measured in the same shuffled rounds) turns the live demo's INCONCLUSIVE into
the ADOPT its interleaved runs support, but it was priced on the whole-run replay with a host
drifting 20% over a run, either way, and did worse on average: 3 runs a side rarely decide, the
clear-KEEP grid fell from 90% to 63% correct, and without drift the replay's few recorded
repeats make false calls that cost 1-3 points (docs/measurements/drift-2026-12-04.txt).
"""

from __future__ import annotations

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

    def warning(self) -> str:
        """One sentence for the verdict's reason."""
        return (f"Caution: the baseline drifted {self.change:+.0%} between its repeats before "
                "the search and its runs interleaved with the candidates (every one outside the "
                "range of the repeats), so early and late runs were measured under different "
                "conditions: a run on a steadier host decides more surely than more repeats")


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
