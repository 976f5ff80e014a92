"""Measure everything: how often picking by measurements is within 10% of the best on a grid.

``whole_run`` scores a strategy by the share of runs whose outcome has a true value (the median
of the grid's recorded repeats) within 10% of the best. This benchmark plays the bluntest
strategy there is on the replay's own draws (one recorded repeat per measurement, with
replacement, per-configuration streams seeded like ``target.replay``): **measure every
configuration of the space (and the baseline) k times and keep the best median** (or, with
``--statistic mean``, the best mean), and reports how often its pick is within 10% of the best,
and what measuring everything would cost.

A reference, not a bound, either way. It picks without having to prove anything (no verdict, so
no INCONCLUSIVE that keeps a slower default), and it spreads its measurements evenly where a
strategy that re-measures its leaders can do better. On a grid that recorded a configuration
twice, every draw is one of its two values, so a median of an odd number of draws is never its
true value (their mean): the median the product uses (robust to one throttled window) then needs
an even number of draws, or many, to find the truth, where the mean of a few already does. The
two statistics side by side tell how much of a grid's within-10% share is the statistic and the
number of draws, and how many draws the grid needs (docs/measurements/exhaustive-2026-12-03.txt).

    .venv/bin/python -m benchmarks.exhaustive                    # every shipped grid
    .venv/bin/python -m benchmarks.exhaustive GRID.yaml --window 10 --draws 1,2,3,5
    .venv/bin/python -m benchmarks.exhaustive --statistic mean --draws 3,5,9

``--window`` reads each measurement over the window's first seconds, as ``whole_run --window``
does (the truth stays the full recorded windows). Grids with ``chaos.scenarios`` are not played
(their objective combines several windows per trial): their row says so. An infeasible draw (a
constraint violated) rules its configuration out of that run, as a failed trial would (so a
larger k is also more chances to be ruled out).

Not a test: it prints a table for a human.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
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

STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "median": statistics.median, "mean": statistics.fmean}


@dataclass(frozen=True)
class Exhaustive:
    grid: str
    statistic: str
    draws: int
    runs: int
    within: float
    """Share of runs whose pick is truly within 10% of the best."""
    trials: int
    """Trials one such run measures: ``draws`` x (the space + the baseline)."""
    minutes: float
    """What those trials cost at the grid's median recorded overhead + warm-up + window."""


def pick(exp: Experiment, replay: Replay, draws: int, statistic: str = "median") -> str | None:
    """One exhaustive run: every configuration (and the baseline, key ``""``) measured
    ``draws`` times; the settings key of the best ``statistic`` of its draws (``""``: the
    baseline), or None when every configuration drew an infeasible or unrecorded measurement."""
    summary = STATISTICS[statistic]
    sign = 1.0 if exp.goals[0].direction == "minimize" else -1.0
    seconds = exp.measure.window
    summaries: dict[str, float] = {}
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
            summaries[key] = summary(values)
    if not summaries:
        return None
    return min(summaries, key=lambda k: sign * summaries[k])


def exhaustive(path: Path, draws: int, seeds: int, window: float | None,
               statistic: str = "median") -> Exhaustive:
    exp, _ = load_experiment(path)
    if window is not None:
        exp = exp.model_copy(update=shorter_window(exp, window))
    assert exp.target.replay is not None
    grid = ReplayGrid.load(exp.target.replay.grid)
    g: Ground = ground(exp, grid)
    hits = 0
    for seed in range(seeds):
        chosen = pick(exp, Replay(exp, grid, FakeClock(), seed), draws, statistic)
        value = g.baseline if chosen == "" else g.values.get(chosen or "")
        hits += value is not None and g.within(value)
    trials = draws * (len(space(exp)) + 1)
    per_trial = grid.overhead + exp.measure.warmup + exp.measure.window
    return Exhaustive(path.name, statistic, draws, seeds, hits / seeds, trials,
                      round(trials * per_trial / 60, 1))


def table(rows: Sequence[Exhaustive | tuple[str, str]]) -> str:
    lines = [f"{'grid':<28} {'of':<6} {'draws':>5} {'trials':>6} {'min':>6} {'within':>7}"]
    for r in rows:
        if isinstance(r, tuple):
            lines.append(f"{r[0]:<28} {r[1]}")
        else:
            lines.append(f"{r.grid:<28} {r.statistic:<6} {r.draws:>5} {r.trials:>6} "
                         f"{r.minutes:>6.1f} {r.within:>7.1%}")
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
    parser.add_argument("--statistic", choices=sorted(STATISTICS), default="median",
                        help="what summarises a configuration's draws (the product: median)")
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
        rows += [exhaustive(path, k, args.seeds, args.window, args.statistic) for k in draws]
    print(f"{args.seeds} seeds per row; every configuration measured k times, best "
          f"{args.statistic} kept{f'; {args.window:g} s reads' if args.window else ''}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
