"""What a window that lengthens when the baseline's repeats disagree would buy, emulated.

Not built (docs/measurements/exhaustive-2026-12-03.txt weighs it): a run would measure its
baseline repeats, and when their relative range (``(max - min) / median``, the noise the stop
rule uses) exceeds a threshold T, measure everything after at the long window instead of the
short one. This emulates it from two ``whole_run`` replays of one grid, one at each window, with
the same seeds: per seed, the baseline's first repeats drawn at the short window (the replay's
own per-configuration stream, so the very values that run drew) give the range; a run above T
is scored as that seed's long-window run, else as its short-window one. In the replay this is
exact for the verdict: a seed's draws are the same rows at either window, only read over
another length.

Two ways to build it, costed side by side (minutes: median and mean over the seeds, since a
mix of short and long runs is bimodal):

- **probe**: the baseline repeats are measured at the long window with a read at the short one
  (the reads ``study.screening`` already takes part-way). A run that stays short pays
  ``(long - short) x repeats`` seconds more; none measures anything twice.
- **re-measure**: the baseline repeats are measured at the short window, and a run that
  switches measures them again at the long one: ``repeats`` more trials at the grid's median
  recorded overhead + warm-up + long window. A run that stays short pays nothing.

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.clock import FakeClock
from autotune.experiment import load_experiment
from autotune.experiment.models import Experiment
from autotune.platforms.replay import Replay, ReplayGrid
from autotune.study.night.early_stop import baseline_noise
from autotune.study.objective import score
from autotune.study.space import to_env
from benchmarks.whole_run import shorter_window


def baseline_ranges(path: Path, short: float, seeds: Sequence[int],
                    repeats: int | None = None) -> dict[int, float | None]:
    """Per seed: the relative range of the first ``repeats`` (default: the file's
    ``baseline.repeats``) baseline measurements' objective over the short window."""
    exp, _ = load_experiment(path)
    exp = exp.model_copy(update=shorter_window(exp, short))
    assert exp.target.replay is not None
    grid = ReplayGrid.load(exp.target.replay.grid)
    env = to_env(exp, exp.baseline_settings())
    out: dict[int, float | None] = {}
    for seed in seeds:
        replay = Replay(exp, grid, FakeClock(), seed)
        values = []
        for _ in range(repeats or exp.baseline.repeats):
            drawn = replay.draw(env)
            if drawn is None:
                raise SystemExit(f"{path}: the baseline is not recorded")
            columns = {n: replay.column(n, short) for n in exp.required_metrics}
            missing = sorted(c for c in columns.values() if c not in drawn.metrics)
            if missing:
                raise SystemExit(f"{path}: a baseline repeat has no {', '.join(missing)}")
            values.append(score(exp, {n: drawn.metrics[c] for n, c in columns.items()}).values[0])
        out[seed] = baseline_noise(values)
    return out


def _runs(path: Path, grid: str, window: float | None) -> tuple[dict[int, Any], int | None]:
    """The grid's runs of a whole_run file by seed, and the baseline repeats it overrode; refuses
    a file played at another window than the one it is given as."""
    data = json.loads(path.read_text())
    played = data.get("options", {}).get("window")
    if played != window:
        raise SystemExit(f"{path} was played with --window {played}, not {window}")
    runs = {r["seed"]: r for r in data["runs"] if r["grid"] == grid}
    return runs, data.get("options", {}).get("baseline_repeats")


def _long_window(exp: Experiment) -> float:
    replay = exp.target.replay
    return replay.window if replay is not None and replay.window else exp.measure.window


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
    assert exp.target.replay is not None, "a replay experiment"
    long_s = _long_window(exp)
    grid_name = args.experiment.name
    short, repeats = _runs(args.short_runs, grid_name, args.short)
    long, long_repeats = _runs(args.long_runs, grid_name, None)
    if repeats != long_repeats:
        raise SystemExit("the two files ran different baseline repeats")
    seeds = sorted(short.keys() & long.keys())
    if not seeds:
        raise SystemExit(f"the two files share no seed of {grid_name}")
    repeats = repeats or exp.baseline.repeats
    ranges = baseline_ranges(args.experiment, args.short, seeds, repeats)
    overhead = ReplayGrid.load(exp.target.replay.grid).overhead
    probe = (long_s - args.short) * repeats
    again = repeats * (overhead + exp.measure.warmup + long_s)
    print(f"{grid_name}: {len(seeds)} seeds, short {args.short:g} s, long {long_s:g} s, "
          f"{repeats} baseline repeats; probe: a run that stays short pays {probe:g} s; "
          f"re-measure: a run that switches pays {again:.0f} s")
    print(f"{'rule':<20} {'long':>5} {'within':>7} {'correct':>8}   probe min (mean)   "
          f"re-measure min (mean)")

    def row(name: str, switched: Mapping[int, bool], add_probe: bool, add_again: bool) -> None:
        picked = [long[s] if switched[s] else short[s] for s in seeds]
        base = [p["simulated_s"] for p in picked]
        probe_m = [(b + (probe if add_probe and not switched[s] else 0)) / 60
                   for s, b in zip(seeds, base, strict=True)]
        again_m = [(b + (again if add_again and switched[s] else 0)) / 60
                   for s, b in zip(seeds, base, strict=True)]
        n = len(picked)
        print(f"{name:<20} {sum(switched.values()):>5} "
              f"{sum(bool(p['within']) for p in picked) / n:>7.0%} "
              f"{sum(bool(p['correct']) for p in picked) / n:>8.0%}   "
              f"{statistics.median(probe_m):>9.1f} ({statistics.fmean(probe_m):.1f})   "
              f"{statistics.median(again_m):>14.1f} ({statistics.fmean(again_m):.1f})")

    row("always short", {s: False for s in seeds}, False, False)
    row("always long", {s: True for s in seeds}, False, False)
    for t in (float(x) for x in args.thresholds.split(",")):
        row(f"range > {t:.0%}: long",
            {s: (r := ranges[s]) is None or r > t for s in seeds}, True, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
