r"""Ground truth for the local demo: every configuration of an experiment's grid, repeated, in
shuffled order, measured with the same trial phases a study uses. Writes one CSV row per trial.

    python benchmarks/grid_local.py experiments/local.yaml --repeats 2 --out results/grid.csv

Then summarise (table, repeat spread, best/worst, baseline, per-trial overhead):

    python benchmarks/grid_local.py --summarize results/grid.csv

--early 3,5,8 also reads every metric over each window's first 3, 5 and 8 seconds while the
stress runs, as screening does (``study.screening``), into columns ``<metric>_first_<N>s``: what
the whole-run replay screens on, and what it answers a shorter window from
(``target.replay.window``, ``whole_run.py --window``).

An experiment with several chaos scenarios (experiments/robust.yaml) measures every scenario in
each trial, as a study does: the CSV holds ``<metric>@<scenario>`` per scenario, which the
replay answers each scenario's window from.

Ad-hoc points instead of the grid (how the demo's defaults were chosen): each --point is a label
and the variables it sets; the experiment's parameters it does not name stay unset. --env passes
workload knobs to the service in every trial, --no-stress leaves the CPU stress out. Rate, CPU
limit, stress level, warm-up and window come from the experiment file. The CSV does not record
--env or --no-stress: say them in --out.

    python benchmarks/grid_local.py experiments/local.yaml --env DEMO_LIVE_HEAP_MB=64 \
        --point default --point 'gmp1 GOMAXPROCS=1' --point 'gogc400 GOGC=400' \
        --out results/heap64.csv
    python benchmarks/grid_local.py experiments/local.yaml --no-stress --point default \
        --out results/nostress.csv
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import itertools
import math
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.chaos.base import Injection
from autotune.clock import Clock, SystemClock
from autotune.experiment import load_experiment
from autotune.experiment.models import Experiment, Setting, Stress
from autotune.live import Live
from autotune.platforms.local.stack import build
from autotune.platforms.replay import early_column
from autotune.study.interrupts import signals_as_exceptions
from autotune.study.scenarios import qualified
from autotune.study.space import grid, to_env
from autotune.study.trial import TrialFailed, measure

FIELDS = ["order", "config", "repeat", "state", "failure", "seconds", "overhead_s",
          "foreign_cores_max", "attempts"]
WARMUP_FIELD = "warmup_s"
"""With --warmups: the warm-up this trial had (the CSV then holds every warm-up's trials, and
one ``<out>-w<N>.csv`` per warm-up is written for the replay)."""

Point = tuple[str, Mapping[str, str | None]]
"""A label and the environment of the service (None: the variable is unset)."""


def configs(exp: Experiment, subset: dict[str, list[str]]) -> list[dict[str, Setting]]:
    space = grid(exp)
    for name, keep in subset.items():
        space[name] = [v for v in space[name] if str(v) in keep]
    names = list(space)
    out: list[dict[str, Setting]] = [dict(zip(names, combo, strict=True))
                                     for combo in itertools.product(*space.values())]
    out.insert(0, exp.baseline_settings())
    return out


def label(settings: dict[str, Setting]) -> str:
    return " ".join(f"{k}={'unset' if v is None else v}" for k, v in settings.items())


def points(exp: Experiment, subset: dict[str, list[str]], named: Sequence[Point],
           extra: Mapping[str, str]) -> list[Point]:
    """The grid's configurations, or the named points; ``extra`` is added to every one."""
    if named:
        unset = to_env(exp, {})
        return [(name, {**unset, **extra, **env}) for name, env in named]
    return [(label(c), {**to_env(exp, c), **extra}) for c in configs(exp, subset)]


class Recorder:
    """A screen that judges nothing: the early reads are only recorded (``--early``). It reads
    every metric, so that a replay can also answer a shorter window (``target.replay.window``)
    from these columns."""

    def __init__(self, checkpoints: Sequence[float], reads: Sequence[str]) -> None:
        self.checkpoints = tuple(sorted(checkpoints))
        self.reads = tuple(reads)

    def judge(self, after: float, metrics: Mapping[str, float]) -> str | None:
        return None


class NoStress:
    """An Injector that injects nothing (--no-stress): the service is measured alone."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def inject(self, live: Live, stress: Stress, duration: float,
               labels: Mapping[str, str]) -> Injection:
        return Injection(id="no-stress", started=self.clock.now(), details={"stress": "none"})

    def recover(self, injection: Injection) -> None:
        pass

    def active(self) -> list[str]:
        return []

    def cleanup(self) -> list[str]:
        return []


def _stress_text(exp: Experiment) -> str:
    """What the banner says the trials run under: the one stress, or each scenario's name (with
    ``chaos.scenarios`` there is no ``chaos.stress`` to print)."""
    if exp.chaos.scenarios:
        return "scenarios " + ", ".join(s.name for s in exp.chaos.scenarios)
    return str(exp.chaos.stress) if exp.chaos.stress is not None else "none (the experiment's)"


def sweep(path: Path, repeats: int, out: Path, seed: int, subset: dict[str, list[str]],
          named: Sequence[Point] = (), extra: Mapping[str, str] | None = None,
          stress: bool = True, early: Sequence[float] = (),
          warmups: Sequence[float] = ()) -> None:
    exp, _ = load_experiment(path)
    # With several warm-ups every (configuration, repeat) is measured at each, all in one
    # shuffled order: an A/B of the warm-up whose arms share the machine's drift.
    arms = list(warmups) or [exp.measure.warmup]
    schedule = [(p, r, w) for p in points(exp, subset, named, extra or {})
                for r in range(repeats) for w in arms]
    random.Random(seed).shuffle(schedule)
    results = Path("results") / f"{exp.name}-grid"
    results.mkdir(parents=True, exist_ok=True)
    clock = SystemClock()
    backends = build(exp, results, clock)
    trial_backends = backends if stress else dataclasses.replace(backends,
                                                                 injector=NoStress(clock))
    print(f"{len(schedule)} trials; stress: {_stress_text(exp) if stress else 'none'}; "
          f"extra env: {dict(extra or {})}", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    metric_names = list(exp.metrics)
    metric_names += [qualified(name, sc.name) for sc in exp.chaos.scenarios
                     for name in exp.metrics]
    queried = [name for name, metric in exp.metrics.items() if metric.query]
    early_names = [early_column(n, a) for a in sorted(early) for n in queried]
    screen = Recorder(early, queried) if early else None
    with out.open("w", newline="") as f, signals_as_exceptions():
        fields = FIELDS + ([WARMUP_FIELD] if warmups else []) + metric_names + early_names
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        try:
            for order, ((config, env), repeat, warmup) in enumerate(schedule):
                record: dict[str, Any] = {}
                t0 = time.monotonic()
                row: dict[str, Any] = {"order": order, "config": config, "repeat": repeat}
                trial_exp = exp
                if warmups:
                    row[WARMUP_FIELD] = warmup
                    trial_exp = exp.model_copy(update={
                        "measure": exp.measure.model_copy(update={"warmup": warmup})})
                try:
                    metrics = measure(trial_exp, trial_backends, env, clock=clock,
                                      labels={"autotune/trial": f"grid-{order}"}, record=record,
                                      screen=screen)
                    row.update(state="COMPLETE", **metrics)
                except TrialFailed as e:
                    row.update(state="FAIL", failure=e.reason)
                for read in record.get("early", []):
                    row.update({early_column(n, read["after"]): v
                                for n, v in read["metrics"].items()})
                seconds = time.monotonic() - t0
                foreign = [a["foreign_cores"] for a in record.get("attempts", [])
                           if a["foreign_cores"] is not None]
                # Beyond every scenario's warm-up and window (and a noise guard's re-measured
                # windows): restart, readiness, scrape lag.
                retries = max(0, len(record.get("attempts", [])) - len(exp.chaos.runs()))
                row.update(seconds=round(seconds, 2),
                           overhead_s=round(seconds - trial_exp.measured_seconds
                                            - exp.measure.window * retries, 2),
                           foreign_cores_max=max(foreign) if foreign else "",
                           attempts=len(record.get("attempts", [])))
                writer.writerow(row)
                f.flush()
                print(f"[{order + 1}/{len(schedule)}] {row['config']} r{repeat}"
                      f"{f' warm-up {warmup:g}s' if warmups else ''}: "
                      f"{row.get(exp.goals[0].label, row.get('failure'))}", flush=True)
        finally:
            backends.injector.cleanup()
            backends.target.restore()
            backends.source.close()
    for warmup in warmups:
        split(out, warmup)


def split(path: Path, warmup: float) -> Path:
    """The trials of one warm-up arm, as a grid of their own (what ``target.replay`` reads)."""
    rows = [r for r in csv.DictReader(path.open()) if float(r[WARMUP_FIELD]) == warmup]
    part = path.with_name(f"{path.stem}-w{warmup:g}{path.suffix}")
    with part.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
    return part


def summarize(path: Path, metric: str) -> None:
    reader = csv.DictReader(path.open())
    rows = list(reader)
    if WARMUP_FIELD not in (reader.fieldnames or []):
        _summarize_rows(rows, metric)
        return
    # A --warmups CSV holds every arm's trials. Pooled, a configuration's median, its repeat
    # spread (which would count the warm-up effect as noise) and best/worst would mix the arms,
    # so each arm gets the summary its own grid (<out>-w<N>.csv) would print. Only labelling a
    # pooled table would leave the spread and best/worst lines below it pooled all the same.
    for i, arm in enumerate(sorted({float(r[WARMUP_FIELD]) for r in rows})):
        print(f"{chr(10) if i else ''}warm-up {arm:g}s only:")
        _summarize_rows([r for r in rows if float(r[WARMUP_FIELD]) == arm], metric)


def _summarize_rows(rows: Sequence[dict[str, str]], metric: str) -> None:
    by: dict[str, list[float]] = defaultdict(list)
    failed = [r for r in rows if r["state"] != "COMPLETE"]
    for r in rows:
        if r["state"] == "COMPLETE":
            by[r["config"]].append(float(r[metric]))
    failures = "".join(f"\n  FAIL {r['config']}: {r['failure']}" for r in failed)
    table = sorted(by.items(), key=lambda kv: statistics.median(kv[1]))
    if not table:
        print(f"{len(rows)} trials, none COMPLETE{failures}")
        return
    print(f"{'configuration':<45} {'median ms':>10} {'repeats (ms)':<30}")
    for config, values in table:
        print(f"{config:<45} {statistics.median(values) * 1000:>10.2f} "
              f"{', '.join(f'{v * 1000:.2f}' for v in values):<30}")
    ratios = [max(v) / min(v) for v in by.values() if len(v) > 1 and min(v) > 0]
    if ratios:
        print(f"\nrepeat spread (max/min within a configuration): median "
              f"{statistics.median(ratios):.2f}x, max {max(ratios):.2f}x "
              f"over {len(ratios)} configs")
    baseline = [c for c in by if "unset" in c]
    if baseline:
        print(f"baseline {baseline[0]}: median {statistics.median(by[baseline[0]]) * 1000:.2f} ms")
    print(f"best {table[0][0]}: {statistics.median(table[0][1]) * 1000:.2f} ms; "
          f"worst {table[-1][0]}: {statistics.median(table[-1][1]) * 1000:.2f} ms")
    overhead = [float(r["overhead_s"]) for r in rows if r["state"] == "COMPLETE"]
    if overhead:
        print("per-trial overhead beyond warm-up + window: "
              f"median {statistics.median(overhead):.2f}s,"
              f" max {max(overhead):.2f}s")
    print(f"{len(rows)} trials, {len(failed)} failed{failures}")


def compare_warmups(path: Path, metric: str) -> None:
    """The warm-up A/B of a --warmups CSV: per configuration the median at each warm-up, and over
    all configurations the paired log-ratio (a bootstrap over configurations) and the rank
    agreement of the medians. GOGC=25-like outliers do not dominate: ratios, not differences."""
    rows = [r for r in csv.DictReader(path.open()) if r["state"] == "COMPLETE"]
    arms = sorted({float(r[WARMUP_FIELD]) for r in rows})
    if len(arms) != 2:
        print(f"{path}: {len(arms)} warm-up arm(s), want 2")
        return
    by: dict[tuple[str, float], list[float]] = defaultdict(list)
    for r in rows:
        by[(r["config"], float(r[WARMUP_FIELD]))].append(float(r[metric]))
    configs = sorted({c for c, _ in by if all((c, a) in by for a in arms)},
                     key=lambda c: statistics.median(by[(c, arms[1])]))
    if not configs:
        print(f"{path}: no configuration completed at both warm-ups")
        return
    short, long_ = arms
    medians = {(c, a): statistics.median(by[(c, a)]) for c in configs for a in arms}
    print(f"{'configuration':<45} {f'{short:g}s median':>10} {f'{long_:g}s median':>10} ratio")
    logs = []
    left_out = []
    for c in configs:
        a, b = medians[(c, short)], medians[(c, long_)]
        # The log of the ratio needs both medians positive (a latency of 0 is a broken read,
        # not a fast configuration): such a configuration is left out of the ratio, and said so.
        if a > 0 and b > 0:
            logs.append(math.log(a / b))
        else:
            left_out.append(c)
        ratio = f"{a / b:.3f}" if a > 0 and b > 0 else "left out (median <= 0)"
        print(f"{c:<45} {a * 1000:>10.3f} {b * 1000:>10.3f} {ratio}")
    print(f"\n{_ratio_text(logs, short, long_)}")
    if left_out:
        print(f"left out of the ratio: {len(left_out)} configuration(s) with a median <= 0 at "
              f"a warm-up (no log of their ratio): {', '.join(left_out)}")
    rho = _spearman([medians[(c, short)] for c in configs],
                    [medians[(c, long_)] for c in configs])
    print("Spearman rank agreement of the medians: " + (
        f"{rho:.3f}" if rho is not None else
        "not defined (fewer than 2 configurations)" if len(configs) < 2 else
        "not defined (every configuration ties at one warm-up)"))
    print("median repeat spread (max/min) per configuration: " + ", ".join(
        _spread_text(by, a) for a in arms))
    for a in arms:
        at = {c: medians[(c, a)] for c in configs}
        best = min(at, key=at.__getitem__)
        print(f"best at {a:g}s: {best} ({at[best] * 1000:.3f} ms)")


def _ratio_text(logs: Sequence[float], short: float, long_: float) -> str:
    """The geometric mean of the per-configuration median ratios, with its bootstrap interval
    over configurations (none from one configuration: it would be a single point)."""
    if not logs:
        return (f"{short:g}s / {long_:g}s: no ratio (no configuration has a median > 0 at both "
                "warm-ups)")
    if len(logs) < 2:
        interval = "no bootstrap interval from 1 configuration"
    else:
        rng = random.Random(0)
        means = sorted(statistics.fmean(rng.choices(logs, k=len(logs))) for _ in range(10000))
        interval = (f"95% bootstrap over configurations {math.exp(means[249]):.3f} .. "
                    f"{math.exp(means[9749]):.3f}")
    return (f"{len(logs)} configurations; {short:g}s / {long_:g}s, geometric mean of the "
            f"per-configuration median ratios {math.exp(statistics.fmean(logs)):.3f} "
            f"({interval}); median ratio {math.exp(statistics.median(logs)):.3f}")


def _spread_text(by: Mapping[tuple[str, float], list[float]], arm: float) -> str:
    """The median over configurations of max/min across one arm's repeats; with one repeat per
    configuration there is nothing to spread, which is said rather than a number made up."""
    repeated = [v for (_, w), v in by.items() if w == arm and len(v) > 1]
    if not repeated:
        return f"{arm:g}s not measured (needs >= 2 repeats)"
    ratios = [max(v) / min(v) for v in repeated if min(v) > 0]
    if not ratios:
        return f"{arm:g}s not measured (no repeats with every value > 0)"
    return f"{arm:g}s {statistics.median(ratios):.2f}x"


def _average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, tied values sharing the mean of the ranks they span (as Spearman's
    coefficient with ties wants)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start:end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def _spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation with ties: Pearson's correlation of the average ranks (the
    1 - 6 sum d^2 shortcut holds only without ties). None where it is not defined: fewer than 2
    values, or a constant rank vector."""
    if len(x) < 2:
        return None
    a, b = _average_ranks(x), _average_ranks(y)
    if len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return statistics.correlation(a, b)


def point(spec: str) -> Point:
    """--point 'LABEL [VAR=VALUE ...]'"""
    name, *assignments = spec.split() or [""]
    if not name or "=" in name:
        raise argparse.ArgumentTypeError(f"{spec!r}: want 'LABEL [VAR=VALUE ...]'")
    return name, dict(assignment(a) for a in assignments)


def assignment(spec: str) -> tuple[str, str]:
    """--env VAR=VALUE"""
    var, sep, value = spec.partition("=")
    if not var or not sep:
        raise argparse.ArgumentTypeError(f"{spec!r}: want VAR=VALUE")
    return var, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", nargs="?", type=Path)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("results/grid.csv"))
    parser.add_argument("--summarize", type=Path, help="summarise an existing CSV instead")
    parser.add_argument("--metric", default="p99_latency")
    parser.add_argument("--only", action="append", default=[], metavar="PARAM=V1,V2",
                        help="sweep only these values of a parameter (repeatable)")
    parser.add_argument("--point", action="append", default=[], type=point,
                        metavar="'LABEL [VAR=VALUE ...]'",
                        help="measure this point instead of the grid; parameters it does not "
                             "set are unset (repeatable)")
    parser.add_argument("--env", action="append", default=[], type=assignment,
                        metavar="VAR=VALUE",
                        help="also set this for the service in every trial, e.g. "
                             "DEMO_LIVE_HEAP_MB=64 (repeatable)")
    parser.add_argument("--no-stress", action="store_true",
                        help="measure without the experiment's CPU stress")
    parser.add_argument("--early", type=lambda v: [float(x) for x in v.split(",")], default=[],
                        metavar="S1,S2", help="also read the objective over each window's "
                        "first S1, S2 seconds (what screening would judge)")
    parser.add_argument("--warmups", type=lambda v: [float(x) for x in v.split(",")],
                        default=[], metavar="W1,W2",
                        help="measure every configuration and repeat at each of these warm-ups "
                        "(seconds), in one shuffled order: an A/B of measure.warmup; also "
                        "writes one <out>-w<N>.csv per warm-up")
    args = parser.parse_args(argv)
    subset = {k: v.split(",") for k, v in (o.split("=", 1) for o in args.only)}
    if args.summarize:
        summarize(args.summarize, args.metric)
        if WARMUP_FIELD in (next(csv.reader(args.summarize.open()), None) or []):
            print()
            compare_warmups(args.summarize, args.metric)
        return 0
    if args.experiment is None:
        parser.error("experiment file required")
    if args.point and args.only:
        parser.error("--point and --only do not mix: --only selects from the grid")
    sweep(args.experiment, args.repeats, args.out, args.seed, subset, named=args.point,
          extra=dict(args.env), stress=not args.no_stress, early=args.early,
          warmups=args.warmups)
    summarize(args.out, args.metric)
    if args.warmups:
        print()
        compare_warmups(args.out, args.metric)
    return 0


if __name__ == "__main__":
    sys.exit(main())
