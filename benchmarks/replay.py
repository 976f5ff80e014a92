"""Compare search strategies offline on a recorded grid: many seeds in minutes, not days.

Each (strategy, seed) runs the real study loop (StudyRunner, its samplers and initial design) on
the replay platform: every trial answers with one recorded repeat of its configuration. After
each completed search trial we take the configuration the study would recommend at that point
(the best by the median of its search measurements, as confirmation picks it) and look up its
TRUE value: the grid's median over all repeats. A strategy is good when that true value gets
within 10% of the grid's best early.

    .venv/bin/python -m benchmarks.replay --seeds 30 --trials 12 --strategies random,tpe,gp
    .venv/bin/python -m benchmarks.replay --subset forcegc_interval_ms=0     # the 4x2 sub-grid

"trials to within 10%" is the number of completed search trials until the recommendation is
first within 10% of the best (a run that never gets there counts as trials + 1, shown ">N");
p90 is the nearest-rank 90th percentile over seeds. "repeats" is the share of search trials that
measured a configuration the same run had already measured. "final" is the share of runs whose
last recommendation is within 10%. Not a test: it prints numbers for a human to judge.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from autotune.clock import FakeClock
from autotune.errors import AutotuneError
from autotune.experiment import load_experiment
from autotune.experiment.models import Design, Experiment, Setting
from autotune.platforms.replay import Replay, ReplayGrid
from autotune.progress import SilentProgress
from autotune.study import storage as st
from autotune.study.confirmation.candidates import top_configurations
from autotune.study.journal import Journal
from autotune.study.loop import StudyRunner, trial_summary
from autotune.study.objective import directions, score
from autotune.study.space import grid, settings_key, to_env
from benchmarks.workers import map_jobs

DEFAULT_GRID = Path("docs/measurements/grid-local-2026-11-29.csv")
DEFAULT_EXPERIMENT = Path("experiments/local.yaml")
WITHIN = 0.10

_BARE = Design(prior=False, points=0)
STRATEGIES: dict[str, dict[str, Any]] = {
    "random": {"sampler": "random", "design": _BARE},
    "tpe": {"sampler": "tpe", "design": _BARE},
    "gp": {"sampler": "gp", "design": _BARE},
    "tpe+design": {"sampler": "tpe", "design": Design()},
    "gp+design": {"sampler": "gp", "design": Design()},
    "auto": {"sampler": "auto", "design": Design()},  # what a user gets by default
}


@dataclass(frozen=True)
class Truth:
    """The grid's verdict on the search space, one objective (the first goal)."""

    sign: float
    """+1 to minimize, -1 to maximize: ``sign * value`` is smaller when better."""
    values: Mapping[str, float]
    """settings_key -> median objective over every repeat (feasible configurations only)."""
    best_key: str
    best: float
    missing: int
    """Configurations of the space the grid has no (feasible, complete) measurement of."""

    def within(self, value: float) -> bool:
        return self.sign * (value - self.best) <= WITHIN * abs(self.best)


def truth(exp: Experiment, grid_: ReplayGrid) -> Truth:
    recorded = Replay(exp, grid_, FakeClock()).recorded
    sign = 1.0 if directions(exp)[0] == "minimize" else -1.0
    values: dict[str, float] = {}
    missing = 0
    for settings in space(exp):
        repeats = [m for m in recorded(to_env(exp, settings))
                   if exp.required_metrics <= m.keys()]
        scored = [score(exp, m) for m in repeats]
        # Truly feasible: every constraint holds at the median of its repeats.
        if not scored or any(statistics.median(s.violations[c] for s in scored) > 0
                             for c in scored[0].violations):
            missing += 1
            continue
        values[settings_key(settings)] = statistics.median(s.values[0] for s in scored)
    if not values:
        raise SystemExit("no configuration of the space is recorded (feasibly) in the grid")
    best_key = min(values, key=lambda k: sign * values[k])
    return Truth(sign, values, best_key, values[best_key], missing)


def space(exp: Experiment) -> list[dict[str, Setting]]:
    axes = grid(exp)
    return [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]


@dataclass
class Run:
    strategy: str
    seed: int
    trials_to_within: int
    """Completed search trials until the recommendation was within 10%; trials + 1 if never."""
    recommended: list[float | None] = field(default_factory=list)
    """True value of the recommendation after each completed search trial."""
    configurations: list[str] = field(default_factory=list)
    """What each completed search trial measured, in order."""
    repeats: int = 0
    completed: int = 0
    failed: int = 0
    seconds: float = 0.0
    error: str | None = None


class _NoJournal(Journal):
    """The journal fsyncs every line: right for a real run, pure cost for a replayed one."""

    def append(self, entry: dict[str, Any]) -> None:
        return None


def strategy_experiment(exp: Experiment, name: str, seed: int, trials: int) -> Experiment:
    study = exp.study.model_copy(update={**STRATEGIES[name], "seed": seed, "trials": trials})
    return exp.model_copy(update={"study": study})


def run_one(exp: Experiment, grid_: ReplayGrid, truth_: Truth, name: str, seed: int,
            trials: int) -> Run:
    t0 = time.perf_counter()
    exp = strategy_experiment(exp, name, seed, trials)
    clock = FakeClock()
    error = None
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        studies = st.open_for_run(exp, f"sqlite:///{tmp}/study.db")
        runner = StudyRunner(exp, Replay(exp, grid_, clock, seed).backends(), clock=clock,
                             progress=SilentProgress(),
                             journal=_NoJournal(Path(tmp) / "trials.jsonl"),
                             experiment_hash="replay")
        try:
            runner.run(studies, trials)
        except AutotuneError as e:  # e.g. too many failures in a row: the run just ends early
            error = str(e)
        summaries = [trial_summary(t) for t in studies.search.get_trials(deepcopy=False)]
        studies.storage.engine.dispose()
    run = trajectory(exp, truth_, summaries, trials)
    run.strategy, run.seed, run.error = name, seed, error
    run.seconds = round(time.perf_counter() - t0, 2)
    return run


def trajectory(exp: Experiment, truth_: Truth, summaries: Sequence[Mapping[str, Any]],
               trials: int) -> Run:
    """What the study would have recommended after each of its first ``trials`` completed
    search trials, and how soon that was within 10% of the best. Pure."""
    ordered = sorted(summaries, key=lambda s: int(s["number"]))
    done = [s for s in ordered if s.get("state") == TrialState.COMPLETE.name][:trials]
    run = Run(strategy="", seed=0, trials_to_within=trials + 1, completed=len(done),
              failed=sum(1 for s in ordered if s.get("state") == TrialState.FAIL.name))
    seen: set[str] = set()
    for k, current in enumerate(done, start=1):
        key = settings_key(current["settings"])
        run.configurations.append(label(exp, current["settings"]))
        if key in seen:
            run.repeats += 1
        seen.add(key)
        upto = [s for s in ordered if int(s["number"]) <= int(current["number"])]
        picks = top_configurations(upto, directions(exp), 1)
        value = truth_.values.get(settings_key(picks[0].settings)) if picks else None
        run.recommended.append(value)
        if value is not None and truth_.within(value) and run.trials_to_within > trials:
            run.trials_to_within = k
    return run


def nearest_rank(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summarize(runs: Sequence[Run], truth_: Truth, trials: int) -> dict[str, Any]:
    hits = [r.trials_to_within for r in runs]
    searched = sum(r.completed for r in runs)
    final = [r.recommended[-1] if r.recommended else None for r in runs]
    return {
        "runs": len(runs),
        "trials_to_within": {"median": statistics.median(hits), "p90": nearest_rank(hits, 0.9)},
        "never": sum(1 for h in hits if h > trials),
        "repeat_share": round(sum(r.repeats for r in runs) / searched, 3) if searched else None,
        "final_within_share": round(
            sum(1 for v in final if v is not None and truth_.within(v)) / len(runs), 3),
        "failed_trials": sum(r.failed for r in runs),
        "errors": sorted({r.error for r in runs if r.error}),
        "seconds_per_run": round(statistics.mean(r.seconds for r in runs), 2),
    }


def restrict(exp: Experiment, subset: Mapping[str, Sequence[str]]) -> Experiment:
    """The experiment with some parameters limited to the given values (a sub-grid)."""
    params = []
    for p in exp.parameters:
        keep = subset.get(p.name)
        if keep is None:
            params.append(p)
            continue
        if p.values is not None:
            values = tuple(v for v in p.values if str(v) in keep or p.format(v) in keep)
        else:
            values = tuple(int(v) if p.type == "int" else float(v) for v in keep)
        if not values:
            raise SystemExit(f"--subset {p.name}: none of {list(keep)} is a value of it")
        params.append(p.model_copy(update={"values": values, "low": None, "high": None,
                                           "step": None, "log": False}))
    unknown = set(subset) - {p.name for p in exp.parameters}
    if unknown:
        raise SystemExit(f"--subset: no parameter named {', '.join(sorted(unknown))}")
    return exp.model_copy(update={"parameters": tuple(params)})


def _quiet() -> None:
    """Keep the table readable (no warnings or per-trial logs); one torch thread per worker,
    or two GP workers fight over the same cores."""
    warnings.simplefilter("ignore")
    logging.getLogger("autotune").setLevel(logging.ERROR)  # a crashed trial still shows
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


def _job(args: tuple[Experiment, ReplayGrid, Truth, str, int, int]) -> Run:
    return run_one(*args)


def compare(exp: Experiment, grid_: ReplayGrid, strategies: Sequence[str], seeds: int,
            trials: int, jobs: int) -> tuple[Truth, dict[str, list[Run]]]:
    truth_ = truth(exp, grid_)
    work = [(exp, grid_, truth_, name, seed, trials) for name in strategies
            for seed in range(seeds)]
    if jobs <= 1:
        _quiet()
        runs = [_job(w) for w in work]
    else:
        runs = map_jobs(_job, work, jobs, initializer=_quiet)
    by: dict[str, list[Run]] = {name: [] for name in strategies}
    for r in runs:
        by[r.strategy].append(r)
    return truth_, by


def label(exp: Experiment, settings: Mapping[str, Any]) -> str:
    """As grid_local.py labels a configuration (parameters in the experiment's order)."""
    return " ".join(f"{p.name}={'unset' if settings.get(p.name) is None else settings[p.name]}"
                    for p in exp.parameters)


def table(result: Mapping[str, Any]) -> str:
    n = result["trials"]
    lines = [
        f"grid {result['grid']}: {result['space']['recorded']} of "
        f"{result['space']['configurations']} configurations of the space recorded; best "
        f"{result['space']['best']['label']} = {result['space']['best']['value']:.4g}, "
        f"{len(result['space']['within'])} within 10%",
        f"{result['seeds']} seeds x {n} search trials; wall {result['wall_seconds']:.0f}s",
        "",
        f"{'strategy':<12} {'to within 10%':>14} {'p90':>5} {'never':>7} {'repeats':>8} "
        f"{'final':>6} {'s/run':>6}",
    ]

    def fmt(x: float) -> str:
        return f">{n}" if x > n else f"{x:g}"

    for name, s in result["strategies"].items():
        summary = s["summary"]
        hits = summary["trials_to_within"]
        lines.append(
            f"{name:<12} {fmt(hits['median']):>14} {fmt(hits['p90']):>5} "
            f"{summary['never']:>3}/{summary['runs']:<3} {summary['repeat_share']:>8.0%} "
            f"{summary['final_within_share']:>6.0%} {summary['seconds_per_run']:>6.2f}")
        for error in summary["errors"]:
            lines.append(f"  error: {error}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", type=Path, default=DEFAULT_GRID)
    parser.add_argument("--experiment", type=Path, default=DEFAULT_EXPERIMENT)
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--strategies", default="random,tpe,gp,auto",
                        help=f"comma-separated, of: {', '.join(STRATEGIES)}")
    parser.add_argument("--subset", action="append", default=[], metavar="NAME=V1,V2",
                        help="restrict a parameter to these values (repeatable)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--out", type=Path, default=Path("results/replay.json"))
    args = parser.parse_args(argv)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown or args.seeds < 1 or args.trials < 1:
        parser.error(f"unknown strategies {unknown}" if unknown else "--seeds/--trials >= 1")
    subset = {k: v.split(",") for k, v in (o.split("=", 1) for o in args.subset)}
    exp, _ = load_experiment(args.experiment)
    if len(exp.goals) != 1:
        parser.error("one objective only: 'within 10% of the best' needs a single best")
    exp = restrict(exp, subset)
    grid_ = ReplayGrid.load(args.grid)
    t0 = time.perf_counter()
    truth_, by = compare(exp, grid_, strategies, args.seeds, args.trials, args.jobs)
    n_space = len(space(exp))
    result: dict[str, Any] = {
        "grid": str(args.grid), "experiment": str(args.experiment), "subset": subset,
        "seeds": args.seeds, "trials": args.trials, "within": WITHIN,
        "space": {
            "configurations": n_space, "recorded": n_space - truth_.missing,
            "best": {"label": label(exp, json.loads(truth_.best_key)), "value": truth_.best},
            "within": sorted(label(exp, json.loads(k)) for k, v in truth_.values.items()
                             if truth_.within(v)),
        },
        "strategies": {
            name: {"overrides": {k: v.model_dump() if isinstance(v, Design) else v
                                 for k, v in STRATEGIES[name].items()},
                   "summary": summarize(runs, truth_, args.trials),
                   "runs": [asdict(r) for r in runs]}
            for name, runs in by.items()
        },
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(table(result))
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
