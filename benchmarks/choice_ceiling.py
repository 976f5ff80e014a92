"""How often choosing by the mean of n runs picks a recorded grid's best configuration: the
ceiling of any confirmation that chooses among its leaders by the mean (as the report does,
``autotune.evidence.significance.typical``), whatever its stopping rule.

The replay (``autotune.platforms.replay``) answers each measurement of a configuration with one
of its recorded repeats, drawn uniformly. So the mean of n runs of a configuration has an exact
distribution (multinomial over its repeats), and for the grid's best configuration and its
``--rivals`` nearest (by the truth: the median of each one's repeats) this prints, for each n,
the exact probability that the best's mean of n runs is better than every rival's mean of n
runs, each configuration measured n times independently, and that the best mean is one of a
configuration within 10% of the best (what ``whole_run`` counts as "within 10%"). No
simulation: the numbers are exact for the recorded repeats.

    .venv/bin/python -m benchmarks.choice_ceiling benchmarks/grids/demo-2026-12-05-cpuset-c.yaml
    .venv/bin/python -m benchmarks.choice_ceiling ... --window 10   # the first 10 s of each window

With ``--window`` the reads come from the grid's first-seconds columns, as ``whole_run
--window`` plays them; the best and its rivals stay those of the full recorded windows (the
truth ``whole_run`` judges "within 10%" against).

What it leaves out: the search (it assumes the best and its rivals all reach the confirmation)
and the verdict's test (it assumes every one is called better). A confirmation can do worse than
this (it drops a leader after a slow run); it cannot do better with n runs each of the same
configurations and a choice by the mean.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from autotune.clock import FakeClock
from autotune.experiment import load_experiment
from autotune.experiment.models import Experiment, Setting
from autotune.platforms.replay import Replay, ReplayGrid, early_column
from autotune.study.objective import directions
from autotune.study.space import settings_key, to_env
from benchmarks.replay import WITHIN, label, space, truth
from benchmarks.whole_run import shorter_window

RUNS = (3, 4, 5, 6, 8, 10, 12, 16, 20)


def mean_distribution(values: Sequence[float], n: int) -> list[tuple[float, float]]:
    """The exact distribution of the mean of ``n`` draws with replacement from ``values``
    (each equally likely): (mean, probability) pairs, sorted by the mean. Pure."""
    k = len(values)
    out: dict[float, float] = defaultdict(float)
    for counts in itertools.product(range(n + 1), repeat=k):
        if sum(counts) != n:
            continue
        ways = math.factorial(n)
        for c in counts:
            ways //= math.factorial(c)
        mean = sum(c * v for c, v in zip(counts, values, strict=True)) / n
        out[round(mean, 12)] += ways / k ** n
    return sorted(out.items())


def p_chosen(values: Sequence[Sequence[float]], n: int, sign: float = 1.0) -> list[float]:
    """For each configuration, P(the mean of its ``n`` draws is better than the mean of ``n``
    draws of every other one), all independent; ``sign`` 1 when lower is better, -1 when
    higher. A tie counts as chosen by none. Pure."""
    dists = [mean_distribution([sign * v for v in vs], n) for vs in values]
    out = []
    for i, mine in enumerate(dists):
        total = 0.0
        for mean, p in mine:
            beaten = 1.0
            for j, other in enumerate(dists):
                if j != i:
                    beaten *= sum(q for m, q in other if m > mean)
            total += p * beaten
        out.append(total)
    return out


def repeats(exp: Experiment, grid: ReplayGrid, settings_list: Sequence[dict[str, Setting]],
            column: str) -> list[list[float]]:
    """The recorded values of ``column`` for each configuration, in order."""
    replay = Replay(exp, grid, FakeClock())
    out = []
    for settings in settings_list:
        values = [float(v) for m in replay.recorded(to_env(exp, settings))
                  if isinstance(v := m.get(column), int | float)]
        if not values:
            raise SystemExit(f"{label(exp, settings)}: no recorded {column}")
        out.append(values)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", type=Path, help="a replay experiment (target.replay)")
    parser.add_argument("--rivals", type=int, default=2,
                        help="the configurations nearest the best by the truth (default 2: "
                             "the confirmation's three leaders)")
    parser.add_argument("--window", type=float, default=None, metavar="SECONDS",
                        help="read every run over its window's first SECONDS (as whole_run)")
    parser.add_argument("--runs", type=int, nargs="+", default=list(RUNS))
    args = parser.parse_args(argv)
    exp, _ = load_experiment(args.experiment)
    if exp.target.replay is None:
        raise SystemExit(f"{args.experiment}: not a replay experiment")
    grid = ReplayGrid.load(exp.target.replay.grid)
    t = truth(exp, grid)
    by_key = {k: s for s in space(exp) if (k := settings_key(s)) in t.values}
    ranked = sorted(t.values, key=lambda k: t.sign * t.values[k])[: 1 + args.rivals]
    metric = exp.goals[0].terms
    if len(metric) != 1:
        raise SystemExit("the objective combines several metrics: not supported")
    (name,) = metric
    column = name
    if args.window is not None:
        column = early_column(name, args.window)
        exp = exp.model_copy(update=shorter_window(exp, args.window))
    chosen = [by_key[k] for k in ranked]
    values = repeats(exp, grid, chosen, column)
    sign = 1.0 if directions(exp)[0] == "minimize" else -1.0
    good = [t.sign * (t.values[k] - t.best) <= WITHIN * abs(t.best) for k in ranked]
    print(f"{args.experiment} ({column}): the best and its {args.rivals} nearest by the truth")
    for settings, v, ok in zip(chosen, values, good, strict=True):
        print(f"  {label(exp, settings):<45} truth {t.values[settings_key(settings)]:.6g}"
              f"{' (within 10%)' if ok else '':<14} read {', '.join(f'{x:.6g}' for x in v)}")
    print("runs each  P(the best mean is the best's)  P(... is one within 10% of the best)")
    for n in args.runs:
        chance = p_chosen(values, n, sign)
        within = sum(p for p, ok in zip(chance, good, strict=True) if ok)
        print(f"  {n:>8}  {chance[0]:>28.3f}  {within:>34.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
