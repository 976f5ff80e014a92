"""When should the verdict scale every run by the baseline's trend in time? Simulated, no I/O.

One candidate against the baseline, timed as a confirmation of the default 3 rounds lays them
out: 3 baseline repeats before the search (t = 0, 20, 40 s), then 3 rounds (starting at 240, 320
and 400 s) each holding the baseline, the candidate and 2 others in a shuffled order, 20 s a
trial. Every read is ``(1 - gain) * (1 + drift * t / 360) * exp(noise * z)``: the drift of
``benchmarks.whole_run --drift``, the same for every configuration.

Each row gives P(the candidate is called "better") at the level each of 3 candidates gets at the
default verdict (98.33%), with 3 confirmation runs against the baseline's 6, under these rules:

- ``as measured``: the runs as measured (the rule before 2026-12-04c);
- ``range``: scaled when ``drift`` calls drift (every interleaved run outside the range of the
  repeats, medians > 5% apart): the rule the product uses (``steadied``);
- ``p<0.2``, ``p<0.1``, ``p<0.05``: scaled when the slope of the line through the baseline's
  6 log runs differs from 0 at that two-sided p (Student's t, 4 degrees of freedom);
- ``always``: scaled whatever the slope.

``gate`` is how often each rule scales. With ``gain`` 0 every "better" is wrong (each of 3
candidates may have 1.67% since the exact rank test of 2026-12-04 (d), which at 3 vs 6 runs
holds it; 0.83% and the bootstrap alone, which overshot it, when these rows were measured:
docs/measurements/drift-2026-12-04c.txt).

    .venv/bin/python benchmarks/bench_drift.py [--sims 500]

Not a test: it prints rates for a human to judge (docs/measurements/drift-2026-12-04c.txt: the
simulation favours ``p<0.2``, the whole-run replay of the recorded grids does not: their heavy
tails make chance slopes).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

from autotune.evidence import significance as sig
from autotune.evidence.drift import Trend, drift, trend

LEVEL = sig.each_of(sig.CONFIDENCE, 3)
RULES = ("as measured", "range", "p<0.2", "p<0.1", "p<0.05", "always")
T_CRITICAL = {"p<0.2": 1.533, "p<0.1": 2.132, "p<0.05": 2.776}
"""Two-sided critical values of Student's t with 4 degrees of freedom (any t table)."""


def slope_t(times: list[float], values: list[float]) -> float:
    """The t statistic of the least-squares slope of log(value) on time (the gates' test; the
    product's ``trend`` scales by the median pairwise slope since 2026-12-05, and the results
    docs/measurements cites from this benchmark were measured with least squares)."""
    ys = [math.log(v) for v in values]
    slope, intercept = statistics.linear_regression(times, ys)
    mean = statistics.fmean(times)
    spread = sum((t - mean) ** 2 for t in times)
    residual = sum((y - intercept - slope * t) ** 2 for t, y in zip(times, ys, strict=True))
    se = math.sqrt(residual / (len(times) - 2) / spread)
    return slope / se if se > 0 else math.inf


def timeline(rng: random.Random) -> tuple[list[float], list[float]]:
    """When the baseline's 6 runs and the candidate's 3 were measured (module docstring)."""
    baseline, candidate = [0.0, 20.0, 40.0], []
    for start in (240.0, 320.0, 400.0):
        slots = [start + 20.0 * i for i in range(4)]
        rng.shuffle(slots)
        baseline.append(slots[0])
        candidate.append(slots[1])
    return baseline, candidate


def scaled(fitted: Trend, times: list[float], values: list[float]) -> list[float]:
    return [fitted.scale(t, v) for t, v in zip(times, values, strict=True)]


def cell(shift: float, noise: float, gain: float, sims: int) -> tuple[dict[str, float],
                                                                       dict[str, float]]:
    rng = random.Random(f"{shift}:{noise}:{gain}")
    better = dict.fromkeys(RULES, 0)
    gates = dict.fromkeys(RULES, 0)
    for k in range(sims):
        bt, ct = timeline(rng)

        def read(t: float, factor: float) -> float:
            return factor * (1 + shift * t / 360) * math.exp(noise * rng.gauss(0.0, 1.0))

        bv = [read(t, 1.0) for t in bt]
        cv = [read(t, 1 - gain) for t in ct]
        fitted = trend(list(zip(bt, bv, strict=True)))
        assert fitted is not None
        t = abs(slope_t(bt, bv))

        def outcome(c: list[float], b: list[float], k: int = k) -> str:
            return sig.compare(c, b, metric="x", direction="minimize", confidence=LEVEL,
                               min_runs=3, seed=k, resamples=2000).outcome

        measured = outcome(cv, bv)
        adjusted = outcome(scaled(fitted, ct, cv), scaled(fitted, bt, bv))
        gate = {"as measured": False, "range": drift(bv[:3], bv[3:]) is not None,
                **{rule: t > critical for rule, critical in T_CRITICAL.items()},
                "always": True}
        for rule in RULES:
            gates[rule] += gate[rule]
            better[rule] += (adjusted if gate[rule] else measured) == "better"
    return ({r: better[r] / sims for r in RULES}, {r: gates[r] / sims for r in RULES})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=500)
    args = parser.parse_args()
    t0 = time.perf_counter()
    print(f"P(called better) at {LEVEL:.4%} each, 3 runs vs 6; {args.sims} simulations a cell")
    print(f"{'drift':>6} {'noise':>5} {'gain':>4}  " + " ".join(f"{r:>11}" for r in RULES)
          + "   scaled in (range, p<0.2, p<0.1, p<0.05)")
    for shift in (0.0, 0.2, -0.2):
        for noise in (0.05, 0.1, 0.15):
            for gain in (0.0, 0.25):
                better, gates = cell(shift, noise, gain, args.sims)
                print(f"{shift:+6.1f} {noise:5.2f} {gain:4.2f}  "
                      + " ".join(f"{better[r]:11.3f}" for r in RULES) + "   "
                      + " ".join(f"{gates[r]:.2f}" for r in ("range", "p<0.2", "p<0.1",
                                                              "p<0.05")), flush=True)
    print(f"wall {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
