"""Measure everything: how often picking by measurements is within 10% of the best on a grid.

``whole_run`` scores a strategy by the share of runs whose outcome has a true value (the median
of the grid's recorded repeats) within 10% of the best. On a noisy grid part of that share is
out of any strategy's hands: each measurement is one recorded repeat, drawn at random, and a
configuration recorded at 7.9 and 23.7 ms (true value: 15.8) measures 7.9 half the time. This
benchmark plays the bluntest strategy there is, **measure every configuration of the space (and
the baseline) k times and keep the best median**, on the replay's own draws (one recorded repeat
each, with replacement, per-configuration streams seeded like ``target.replay``), and reports how
often *its* pick is within 10% of the best, and what it would cost.

A reference, not a bound, both ways: it picks without having to prove anything (no verdict, so
no INCONCLUSIVE that keeps a slower default), and it spreads its measurements evenly where a
strategy that re-measures its leaders can do better (every configuration measured is one more
chance for a lucky draw to win). What it tells: whether a grid's within-10% share is mostly its
draws (when measuring everything 3 times picks right in under half the runs, a 95% goal there
measures the grid more than any strategy) or leaves a strategy headroom (docs/measurements/
exhaustive-2026-12-03.txt).

    .venv/bin/python -m benchmarks.exhaustive                    # every shipped grid
    .venv/bin/python -m benchmarks.exhaustive GRID.yaml --window 10 --draws 1,2,3,5

``--window`` reads each measurement over the window's first seconds, as ``whole_run --window``
does (the truth stays the full recorded windows). Grids with ``chaos.scenarios`` are not played
(their objective combines several windows per trial): their row says so. An infeasible draw (a
constraint violated) rules its configuration out of that run, as a failed trial would.

Not a test: it prints a table for a human.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autotune.clock import FakeClock
from autotune.experiment import load_experiment
from autotune.experiment.models import Experiment
from autotune.platforms.replay import Replay, ReplayGrid
from autotune.study.objective import score
from autotune.study.space import settings_key, to_env
from benchmarks.replay import space
from benchmarks.whole_run import DEMO, GRIDS, Ground, ground, shorter_window, unrecorded


@dataclass(frozen=True)
class Exhaustive:
    grid: str
    draws: int
    runs: int
    within: float
    """Share of runs whose pick is truly within 10% of the best."""
    trials: int
    """Trials one such run measures: ``draws`` x (the space + the baseline)."""
    minutes: float
    """What those trials cost at the grid's median recorded overhead + warm-up + window."""


def pick(exp: Experiment, replay: Replay, draws: int) -> str | None:
    """One exhaustive run: every configuration (and the baseline, as ``None``'s key ``""``)
    measured ``draws`` times; the settings key of the best median (``""``: the baseline), or
    None when every configuration drew an infeasible or unrecorded measurement."""
    sign = 1.0 if exp.goals[0].direction == "minimize" else -1.0
    seconds = exp.measure.window
    medians: dict[str, float] = {}
    configurations = [("", exp.baseline_settings()), *((settings_key(s), s) for s in space(exp))]
    for key, settings in configurations:
        env = to_env(exp, settings)
        values = []
        for _ in range(draws):
            drawn = replay.draw(env)
            if drawn is None:
                break
            metrics = {name: drawn.metrics.get(replay.column(name, seconds))
                       for name in exp.metrics}
            known = {n: v for n, v in metrics.items() if v is not None}
            if not exp.required_metrics <= known.keys():
                break
            scored = score(exp, known)
            if not scored.feasible:
                break
            values.append(scored.values[0])
        else:
            medians[key] = statistics.median(values)
    if not medians:
        return None
    return min(medians, key=lambda k: sign * medians[k])


def exhaustive(path: Path, draws: int, seeds: int, window: float | None) -> Exhaustive:
    exp, _ = load_experiment(path)
    if window is not None:
        exp = exp.model_copy(update=shorter_window(exp, window))
    assert exp.target.replay is not None
    grid = ReplayGrid.load(exp.target.replay.grid)
    g: Ground = ground(exp, grid)
    hits = 0
    for seed in range(seeds):
        chosen = pick(exp, Replay(exp, grid, FakeClock(), seed), draws)
        value = g.baseline if chosen == "" else g.values.get(chosen or "")
        hits += value is not None and g.within(value)
    trials = draws * (len(space(exp)) + 1)
    per_trial = grid.overhead + exp.measure.warmup + exp.measure.window
    return Exhaustive(path.name, draws, seeds, hits / seeds, trials,
                   round(trials * per_trial / 60, 1))


def table(rows: Sequence[Exhaustive | tuple[str, str]]) -> str:
    lines = [f"{'grid':<28} {'draws':>5} {'trials':>6} {'min':>6} {'within':>7}"]
    for r in rows:
        if isinstance(r, tuple):
            lines.append(f"{r[0]:<28} {r[1]}")
        else:
            lines.append(f"{r.grid:<28} {r.draws:>5} {r.trials:>6} {r.minutes:>6.1f} "
                         f"{r.within:>7.0%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiments", nargs="*", type=Path,
                        help="replay experiments (default: experiments/replay.yaml and "
                             "benchmarks/grids/*.yaml)")
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--draws", default="1,2,3", help="comma-separated k values")
    parser.add_argument("--window", type=float, default=None, metavar="SECONDS",
                        help="read every measurement over the window's first SECONDS")
    args = parser.parse_args(argv)
    draws = [int(k) for k in args.draws.split(",")]
    if any(k < 1 for k in draws):
        parser.error("--draws: every k must be >= 1")
    rows: list[Exhaustive | tuple[str, str]] = []
    for path in args.experiments or [DEMO, *sorted(GRIDS.glob("*.yaml"))]:
        exp, _ = load_experiment(path)
        why = ("not played: chaos.scenarios (several windows per trial)"
               if exp.chaos.scenarios else unrecorded(path, None, args.window))
        if why:
            rows.append((path.name, why))
            continue
        rows += [exhaustive(path, k, args.seeds, args.window) for k in draws]
    print(f"{args.seeds} seeds per row; every configuration measured k times, best median "
          f"kept{f'; {args.window:g} s reads' if args.window else ''}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
