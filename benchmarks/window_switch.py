"""What a window that lengthens when the baseline's repeats disagree would buy, emulated.

Not built yet (docs/measurements/exhaustive-2026-12-03.txt says why it is the lever left): a run
would measure its baseline repeats, and when their relative range (``(max - min) / median``,
the noise the stop rule uses) exceeds a threshold T, measure everything after at the long
window instead of the short one. This emulates it from two ``whole_run`` replays of one grid,
one at each window, with the same seeds: per seed, the baseline's first ``baseline.repeats``
draws at the short window (the replay's own per-configuration stream, so the very values that
run drew) give the range; a run above T is scored as that seed's long-window run, else as its
short-window one.

The design it prices: the baseline repeats are measured at the long window with a read at the
short one (the reads ``study.screening`` already takes part-way), so a run that stays short pays
``(long - short) x repeats`` seconds more, added here, and none measures its baseline twice
(re-measuring it at the long window would cost more than always measuring long). The emulation
is approximate: a switched run's later draws are the long run's, whose baseline draws were
the same values read over the full window.

    python -m benchmarks.whole_run GRID --seeds 100 --window 10 --out /tmp/short.json
    python -m benchmarks.whole_run GRID --seeds 100 --out /tmp/long.json
    python -m benchmarks.window_switch GRID /tmp/short.json /tmp/long.json --short 10

Not a test: it prints a table for a human.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from autotune.clock import FakeClock
from autotune.experiment import load_experiment
from autotune.platforms.replay import Replay, ReplayGrid
from autotune.study.night.early_stop import baseline_noise
from autotune.study.objective import score
from autotune.study.space import to_env
from benchmarks.whole_run import shorter_window


def baseline_ranges(path: Path, short: float, seeds: list[int]) -> dict[int, float | None]:
    """Per seed: the relative range of the baseline repeats' objective over the short window."""
    exp, _ = load_experiment(path)
    exp = exp.model_copy(update=shorter_window(exp, short))
    assert exp.target.replay is not None
    grid = ReplayGrid.load(exp.target.replay.grid)
    env = to_env(exp, exp.baseline_settings())
    out: dict[int, float | None] = {}
    for seed in seeds:
        replay = Replay(exp, grid, FakeClock(), seed)
        values = []
        for _ in range(exp.baseline.repeats):
            drawn = replay.draw(env)
            if drawn is None:
                raise SystemExit(f"{path}: the baseline is not recorded")
            values.append(score(exp, {n: drawn.metrics[replay.column(n, short)]
                                      for n in exp.required_metrics}).values[0])
        out[seed] = baseline_noise(values)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", type=Path, help="the replay experiment both runs played")
    parser.add_argument("short_runs", type=Path, help="whole_run --out of the short window")
    parser.add_argument("long_runs", type=Path, help="whole_run --out of the long window")
    parser.add_argument("--short", type=float, required=True, metavar="SECONDS")
    parser.add_argument("--thresholds", default="0.1,0.2,0.25,0.3,0.4,0.5")
    args = parser.parse_args(argv)
    exp, _ = load_experiment(args.experiment)
    long_s = exp.target.replay.window if exp.target.replay and exp.target.replay.window else (
        exp.measure.window)
    # A whole_run file may hold several grids: this one's runs only.
    short = {r["seed"]: r for r in json.loads(args.short_runs.read_text())["runs"]
             if r["grid"] == args.experiment.name}
    long = {r["seed"]: r for r in json.loads(args.long_runs.read_text())["runs"]
            if r["grid"] == args.experiment.name}
    seeds = sorted(short.keys() & long.keys())
    if not seeds:
        raise SystemExit("the two files share no seed")
    ranges = baseline_ranges(args.experiment, args.short, seeds)
    extra = (long_s - args.short) * exp.baseline.repeats
    print(f"{args.experiment.name}: {len(seeds)} seeds, short {args.short:g} s, long {long_s:g} s"
          f"; a run that stays short pays {extra:g} s for its long baseline windows")
    print(f"{'rule':<22} {'long':>5} {'min':>5} {'within':>7} {'correct':>8}")

    def row(name: str, picked: list[dict[str, object]], minutes: list[float]) -> None:
        n = len(picked)
        print(f"{name:<22} {sum(p is long[s] for s, p in zip(seeds, picked, strict=True)):>5} "
              f"{statistics.median(minutes):>5.1f} "
              f"{sum(bool(p['within']) for p in picked) / n:>7.0%} "
              f"{sum(bool(p['correct']) for p in picked) / n:>8.0%}")

    row("always short", [short[s] for s in seeds], [short[s]["simulated_s"] / 60 for s in seeds])
    row("always long", [long[s] for s in seeds], [long[s]["simulated_s"] / 60 for s in seeds])
    for t in (float(x) for x in args.thresholds.split(",")):
        switched = {s: (r := ranges[s]) is None or r > t for s in seeds}
        picked = [long[s] if switched[s] else short[s] for s in seeds]
        minutes = [(long[s]["simulated_s"] if switched[s] else short[s]["simulated_s"] + extra)
                   / 60 for s in seeds]
        row(f"range > {t:.0%}: long", picked, minutes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
