"""How often the nightly drift check alerts ("drifted", what ``--fail-on-drift`` turns into
exit 4) when nothing differs, and how often it alerts when production really became better.
Simulated, no I/O.

A night's check as ``autotune.study.night.drift.check_drift`` runs it: ``--repeats`` rounds of
production and the last recommendation (one run each a round), a look, then while production
may still be better (``more_rounds``) one more round, up to ``--extra`` runs; every look is
``judge_drift``, the product's. ``--stop-rule unclear``: the stop rule before 2026-12-07 (more
rounds only while the recommendation's comparison was "unclear"), for the "before" table.
Each read is ``median * exp(noise * z)``, production's median ``1 - gain`` (minimize: ``gain``
> 0 is a real drift). Two rules for the "drifted" call's rank test: ``5% each look`` (the
product before 2026-12-07) and ``drift_level`` (the looks share the 5%).

    .venv/bin/python -m benchmarks.bench_drift_alert [--sims 10000] [--stop-rule unclear]

Not a test: it prints rates for a human to judge (docs/measurements/drift-alert-2026-12-07.txt).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from autotune.study.night.drift import ALPHA, Drift, drift_level, judge_drift, more_rounds

RECOMMENDATION = {"night": "simulated", "settings": {"GOMAXPROCS": 4}}
RESAMPLES = 2000
"""The bootstrap's resamples (the product's 10 000 only sharpen the interval; the alert's
level is the rank test's, which is exact)."""


def unclear_only(now: Drift, spent: int, extra: int) -> bool:
    """The stop rule before 2026-12-07: more rounds only while the recommendation's comparison
    was "unclear" (it stopped at "not better", also when production looked better but not yet
    significantly)."""
    return spent + 2 <= extra and (now.comparison is None
                                   or now.comparison.outcome == "unclear")


def night(gain: float, noise: float, repeats: int, extra: int, alpha: float,
          rng: np.random.Generator, old_stop: bool = False) -> tuple[str, int]:
    """One drift check: its status and how many runs it measured."""
    most = repeats + extra // 2
    recommended = list(np.exp(noise * rng.standard_normal(most)))
    production = list((1 - gain) * np.exp(noise * rng.standard_normal(most)))
    n, spent = repeats, 0
    while True:
        now = judge_drift(recommended[:n], production[:n], metric="p99", direction="minimize",
                          recommendation=RECOMMENDATION, production_settings={},
                          alpha=alpha, resamples=RESAMPLES)
        if not (unclear_only if old_stop else more_rounds)(now, spent, extra):
            return now.status, 2 * n
        n, spent = n + 1, spent + 2


def row(args: tuple[float, float, int, int, str, int, int, bool]) -> tuple[Counter[str], int]:
    gain, noise, repeats, extra, rule, sims, seed, old_stop = args
    alpha = ALPHA if rule == "5% each look" else drift_level(repeats, extra)
    rng = np.random.default_rng(seed)
    statuses: Counter[str] = Counter()
    runs = 0
    for _ in range(sims):
        status, measured = night(gain, noise, repeats, extra, alpha, rng, old_stop)
        statuses[status] += 1
        runs += measured
    return statuses, runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=10_000, help="nights per row (null row)")
    ap.add_argument("--power-sims", type=int, default=2_000, help="nights per drifted row")
    ap.add_argument("--noise", type=float, default=0.2,
                    help="sd of log p99 per run (0.196: the demo's cpuset grids)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--extra", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--stop-rule", choices=("settled", "unclear"), default="settled",
                    help="unclear: the stop rule before 2026-12-07")
    args = ap.parse_args()
    start = time.monotonic()
    rules = ("5% each look", "drift_level")
    print(f"noise {args.noise}, {args.repeats} rounds, --extra {args.extra}, stop rule "
          f"{args.stop_rule}; drift_level: {drift_level(args.repeats, args.extra):.4g} a look")
    cells = [(gain, rule) for gain in (0.0, 0.1, 0.2, 0.3) for rule in rules]
    jobs = [(gain, args.noise, args.repeats, args.extra, rule,
             args.sims if gain == 0 else args.power_sims, 1000 + i, args.stop_rule == "unclear")
            for i, (gain, rule) in enumerate(cells)]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(row, jobs))
    print(f"{'production better by':>20}  {'rule':<13} {'nights':>6}  {'drifted':>8}  "
          f"{'still best':>10}  {'inconclusive':>12}  {'runs':>5}")
    for (gain, rule), job, (statuses, runs) in zip(cells, jobs, results, strict=True):
        sims = job[5]
        share = {k: statuses[k] / sims for k in ("drifted", "still best", "inconclusive")}
        print(f"{gain:>20.0%}  {rule:<13} {sims:>6}  {share['drifted']:>8.2%}  "
              f"{share['still best']:>10.2%}  {share['inconclusive']:>12.2%}  "
              f"{runs / sims:>5.2f}")
    print(f"({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()
