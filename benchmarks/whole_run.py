"""The whole ``autotune run`` on recorded grids: how long to a verdict, and how often it is right.

Each (grid, seed) plays what ``autotune run`` does (``run_night``: baseline repeats, the Go-aware
design, the search, the confirmation rounds, the verdict) against a ``target.replay``: every
measurement one recorded repeat of its configuration, every trial costed at its recorded restart
overhead plus the experiment's warm-up and window on a ``FakeClock``. The clock at the verdict is
the **simulated wall time to verdict** (calibration, Prometheus start-up and captures are left
out: they do not depend on the strategy).

Correctness against the grid's ground truth (the median of every recorded repeat):

- **within 10%**: what production runs after the verdict (the adopted configuration, else the
  baseline) has a true value within 10% of the best of the space and the baseline;
- **correct verdict**: ADOPT when the truth is better than the baseline by more than the
  equivalence margin (``significance.PRACTICAL``, 5%), KEEP when not. INCONCLUSIVE is never
  correct, and an ADOPT is correct only if the adopted configuration is truly better than the
  baseline by more than the margin.

    .venv/bin/python -m benchmarks.whole_run            # experiments/replay.yaml + benchmarks/grids
    .venv/bin/python -m benchmarks.whole_run --fixed    # the fixed confirmation rounds
    .venv/bin/python -m benchmarks.whole_run --screening 5   # study.screening {after: 5s}
    .venv/bin/python -m benchmarks.whole_run --trials 6      # study.trials: the search's ceiling

``--drift F`` makes the host drift during every run: each read of an objective's metric is
scaled by ``1 + F * t / 360`` at the simulated second ``t`` the window ends (F per 6 simulated
minutes, about one run; F < 0: the host gets faster). Every configuration drifts alike, so the
truth (and which configuration is best) does not change; what changes is that measurements taken
at different times differ by more than the recorded noise: the baseline's repeats come first,
the search in the middle, the confirmation last. The live demo of 2026-12-03 read its baseline
~20% slower at the end than at the start (docs/measurements/demo-2026-12-03e.txt).

``--window 8`` measures every window over its first 8 s only: the replay answers each read
from the grid's ``<metric>_first_8s`` columns (``target.replay.window``), and each trial costs
8 s of window instead of the recorded one. The truth stays the median of the full recorded
windows, so a shorter window is right only when its noisier reads still pick what the longer
ones would have.

``--null SIGMA`` makes every configuration equal to Go's default: every read of a metric is the
baseline's recorded median of it times ``exp(SIGMA * z)``, one standard normal ``z`` per read
(drawn from the run's seed), so the objective of every trial, the baseline's included, is a
continuous draw from one distribution. The truth is then "nothing differs": the correct verdict is
KEEP, every ADOPT is wrong (the confirmation's false-ADOPT rate on the whole product), and every
run is within 10%. Continuous, because the recorded repeats of two configurations never tie.
With ``--drift F`` too, every configuration reads like the baseline and then drifts: the
false-ADOPT rate on a drifting host.

With ``--screening`` or ``--window`` a grid that did not record the metrics over the window's
first seconds (``grid_local.py --early``) is not played: its row says so. "screened" is the
median number of screened search trials; "lost" counts screened trials, over all seeds, whose
configuration is truly within 10% of the best (a screen that threw away a winner).

"missed s/t/v" splits the runs that are not within 10% by where every configuration within 10%
was lost (``missed_at``): the **s**earch never completed a measurement of one (a screened one
counts as not measured), none was among the confirmation's **t**op candidates, or the
**v**erdict chose something worse than one it confirmed (or than a baseline within 10%).

Not a test: it prints a table for a human, and writes every run to --out (JSON).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from autotune.clock import FakeClock
from autotune.errors import TargetError
from autotune.evidence.significance import PRACTICAL
from autotune.experiment import load_experiment
from autotune.experiment.models import Experiment, Screening
from autotune.live import Live, Window
from autotune.metrics.base import MetricSource, Reading
from autotune.platforms.replay import Replay, ReplayGrid, early_column
from autotune.progress import SilentProgress
from autotune.report.history import verdict_record
from autotune.study import nightly
from autotune.study.confirmation.candidates import BASELINE
from autotune.study.kinds import TrialKind
from autotune.study.loop import StudyRunner
from autotune.study.objective import score
from autotune.study.space import settings_key, to_env
from benchmarks.replay import WITHIN, _NoJournal, _quiet, label, nearest_rank, truth
from benchmarks.workers import map_jobs

GRIDS = Path(__file__).parent / "grids"
DEMO = Path("experiments/replay.yaml")
"""The demo's grid (what ``make demo`` measures), shipped as the user's replay example."""


@dataclass(frozen=True)
class Ground:
    """The grid's answer: the best value over the space and the baseline, and the verdict."""

    sign: float
    values: Mapping[str, float]
    baseline: float
    best: float
    best_label: str
    adopt: bool
    """The truth is better than the baseline by more than PRACTICAL."""

    def gain(self, value: float) -> float:
        """Relative improvement over the baseline, positive when better."""
        return self.sign * (self.baseline - value) / abs(self.baseline)

    def within(self, value: float) -> bool:
        return self.sign * (value - self.best) <= WITHIN * abs(self.best)


def ground(exp: Experiment, grid: ReplayGrid) -> Ground:
    t = truth(exp, grid)
    repeats = [score(exp, m).values[0]
               for m in Replay(exp, grid, FakeClock()).recorded(
                   to_env(exp, exp.baseline_settings()))
               if exp.required_metrics <= m.keys()]
    if not repeats:
        raise SystemExit(f"{grid.path}: the baseline is not recorded")
    base = statistics.median(repeats)
    best = min([base, *t.values.values()], key=lambda v: t.sign * v)
    best_label = ("baseline" if best == base and t.sign * (t.best - base) >= 0
                  else label(exp, json.loads(t.best_key)))
    adopt = t.sign * (base - t.best) / abs(base) > PRACTICAL
    return Ground(t.sign, t.values, base, best, best_label, adopt)


@dataclass
class Outcome:
    grid: str
    seed: int
    verdict: str
    chosen: str | None
    """The adopted configuration's label (None: the baseline stays)."""
    true_value: float | None
    within: bool
    correct: bool
    simulated_s: float
    search: int
    confirm: int
    baseline: int
    failed: int
    stop: str
    seconds: float
    screened: int = 0
    lost: int = 0
    """Screened trials whose configuration is truly within 10% of the best."""
    missed: str | None = None
    """Where a run that is not within 10% lost the good configurations (``missed_at``)."""
    error: str | None = None
    extended: int = 0
    """Runs a side the extension round added (``autotune.study.confirmation.extension``; 0:
    none was given)."""


MISSES = ("search", "top", "verdict")

DRIFT_SPAN = 360.0
"""``--drift F`` is the drift over this many simulated seconds (about one run)."""


class _Rewritten:
    """A metric source that passes observe and close through and rewrites what ``read``
    returns (``rewrite``): the shared shape of ``Drifting`` and ``Null``."""

    def __init__(self, source: MetricSource) -> None:
        self.source = source

    def observe(self, live: Live) -> None:
        self.source.observe(live)

    def read(self, queries: Mapping[str, str], window: Window,
             live: Live) -> dict[str, Reading]:
        return self.rewrite(self.source.read(queries, window, live))

    def rewrite(self, read: dict[str, Reading]) -> dict[str, Reading]:
        raise NotImplementedError

    def close(self) -> None:
        self.source.close()


class Drifting(_Rewritten):
    """A metric source whose objective reads drift with the simulated time (``--drift``)."""

    def __init__(self, source: MetricSource, metrics: set[str], drift: float,
                 clock: FakeClock) -> None:
        super().__init__(source)
        self.metrics, self.drift, self.clock = metrics, drift, clock

    def factor(self, at: float) -> float:
        return max(0.1, 1 + self.drift * at / DRIFT_SPAN)

    def rewrite(self, read: dict[str, Reading]) -> dict[str, Reading]:
        factor = self.factor(self.clock.monotonic())
        return {name: value * factor if name in self.metrics and isinstance(value, float)
                else value for name, value in read.items()}


class Null(_Rewritten):
    """A metric source under which every configuration reads like the baseline (``--null``)."""

    def __init__(self, source: MetricSource, medians: Mapping[str, float], sigma: float,
                 seed: int) -> None:
        super().__init__(source)
        self.medians, self.sigma = medians, sigma
        self.rng = random.Random(f"null:{seed}")

    def rewrite(self, read: dict[str, Reading]) -> dict[str, Reading]:
        # One factor per read: an objective that combines several metrics scales as one.
        factor = math.exp(self.sigma * self.rng.gauss(0.0, 1.0))
        return {name: self.medians[name] * factor
                if name in self.medians and isinstance(value, float) else value
                for name, value in read.items()}


def baseline_medians(exp: Experiment, grid: ReplayGrid) -> dict[str, float]:
    """The median of every metric over the baseline's recorded repeats."""
    repeats = Replay(exp, grid, FakeClock()).recorded(to_env(exp, exp.baseline_settings()))
    names = {name for m in repeats for name, v in m.items() if isinstance(v, float)}
    return {name: statistics.median(v for m in repeats if isinstance(v := m.get(name), float))
            for name in names}


def missed_at(g: Ground, searched: set[str], confirmed: set[str], within: bool) -> str | None:
    """The stage at which a run that ends outside 10% of the best lost every configuration
    within 10%: ``search`` (the search never measured one), ``top`` (it did, but none was among
    the confirmation's candidates), ``verdict`` (one was confirmed, or the baseline is one, and
    the verdict chose something worse). None when the run is within 10%. Pure.

    ``searched`` and ``confirmed`` are settings keys; a baseline within 10% counts as measured
    and confirmed at every stage (the baseline is measured by every run). ``top`` also holds a
    run that confirmed nothing, and one whose good configuration measured infeasible."""
    if within:
        return None
    good = {k for k, v in g.values.items() if g.within(v)}
    if g.within(g.baseline):
        return "verdict"
    if not good & searched:
        return "search"
    return "verdict" if good & confirmed else "top"


def run_one(path: Path, seed: int, options: Mapping[str, Any]) -> Outcome:
    exp, _ = load_experiment(path)
    options = dict(options)
    study = {"seed": seed}
    if "early_stop" in options:
        study["early_stop"] = options.pop("early_stop")
    if "trials" in options:
        study["trials"] = options.pop("trials")
    if "sampler" in options:
        study["sampler"] = options.pop("sampler")
    if "screening" in options:
        after, factor = options.pop("screening")
        study["screening"] = Screening(after=after, factor=factor)
    update: dict[str, Any] = {"study": exp.study.model_copy(update=study)}
    if "window" in options:
        update.update(shorter_window(exp, options.pop("window")))
    if "baseline_repeats" in options:
        update["baseline"] = exp.baseline.model_copy(
            update={"repeats": options.pop("baseline_repeats")})
    drift = options.pop("drift", None)
    null = options.pop("null", None)
    exp = exp.model_copy(update=update)
    assert exp.target.replay is not None
    grid = ReplayGrid.load(exp.target.replay.grid)
    g = ground(exp, grid)
    t0 = time.perf_counter()
    clock = FakeClock()
    with tempfile.TemporaryDirectory(prefix="whole-run-") as tmp:
        backends = Replay(exp, grid, clock, seed).backends()
        # Null inside Drifting: with both, every configuration reads like the baseline and
        # then drifts, the null case of a drifting host.
        if null:
            backends = dataclasses.replace(backends, source=Null(
                backends.source, baseline_medians(exp, grid), null, seed))
        if drift:
            backends = dataclasses.replace(backends, source=Drifting(
                backends.source, {m for goal in exp.goals for m in goal.terms}, drift, clock))
        runner = StudyRunner(exp, backends, clock=clock,
                             progress=SilentProgress(), journal=_NoJournal(Path(tmp) / "j.jsonl"),
                             experiment_hash="whole-run")
        night = nightly.run_night(exp, f"sqlite:///{tmp}/study.db", runner,
                                  nightly.NightOptions(budget=exp.study.trials, **options),
                                  verdict_record)
        studies = night.studies
        counts = {kind: 0 for kind in TrialKind}
        failed = screened = lost = extended = 0
        searched: set[str] = set()
        confirmed: set[str] = set()
        for study in (studies.search, studies.reference):
            for t in study.get_trials(deepcopy=False):
                if t.state == TrialState.COMPLETE:
                    kind = TrialKind(t.user_attrs.get("kind", TrialKind.SEARCH))
                    counts[kind] += 1
                    if kind == TrialKind.SEARCH:
                        searched.add(settings_key(t.user_attrs.get("settings") or t.params))
                    elif kind == TrialKind.CONFIRM and t.user_attrs.get("candidate") != BASELINE:
                        confirmed.add(settings_key(t.user_attrs["settings"]))
                        extended += bool(t.user_attrs.get("extension"))
                elif t.state == TrialState.FAIL:
                    failed += 1
                elif t.state == TrialState.PRUNED:
                    screened += 1
                    true = g.values.get(settings_key(t.user_attrs["settings"]))
                    lost += true is not None and g.within(true)
        studies.storage.engine.dispose()
    v = night.verdict
    adopted = v["verdict"] == "adopt" and v.get("candidate")
    if adopted:
        settings = v["candidate"]["settings"]
        chosen: str | None = label(exp, settings)
        true_value = g.values.get(settings_key(settings))
    else:
        chosen, true_value = None, g.baseline
    within = true_value is not None and g.within(true_value)
    if null:  # nothing differs: KEEP is right, an ADOPT wrong but harmless
        within, correct = True, v["verdict"] == "keep current"
    elif v["verdict"] == "adopt":
        correct = g.adopt and true_value is not None and g.gain(true_value) > PRACTICAL
    else:
        correct = v["verdict"] == "keep current" and not g.adopt
    return Outcome(grid=path.name, seed=seed, verdict=str(v["verdict"]), chosen=chosen,
                   true_value=true_value, within=within, correct=correct,
                   simulated_s=round(clock.monotonic(), 1), search=counts[TrialKind.SEARCH],
                   confirm=counts[TrialKind.CONFIRM], baseline=counts[TrialKind.BASELINE],
                   failed=failed, stop=night.result.stop_reason,
                   seconds=round(time.perf_counter() - t0, 2), screened=screened, lost=lost,
                   missed=missed_at(g, searched, confirmed, within), extended=extended)


def _job(args: tuple[Path, int, Mapping[str, Any]]) -> Outcome:
    return run_one(*args)


def summary(path: Path, runs: Sequence[Outcome], *, null: bool = False) -> dict[str, Any]:
    exp, _ = load_experiment(path)
    assert exp.target.replay is not None
    g = ground(exp, ReplayGrid.load(exp.target.replay.grid))
    if null:  # --null: every configuration is the baseline, whatever the grid recorded
        g = dataclasses.replace(g, values=dict.fromkeys(g.values, g.baseline), best=g.baseline,
                                best_label="baseline", adopt=False)
    minutes = [r.simulated_s / 60 for r in runs]
    verdicts: dict[str, int] = {}
    for r in runs:
        verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
    return {
        "grid": path.name, "runs": len(runs),
        "truth": {"verdict": "adopt" if g.adopt else "keep current", "best": g.best_label,
                  "gain": round(g.gain(g.best), 4), "baseline": g.baseline},
        "minutes": {"median": round(statistics.median(minutes), 2),
                    "p90": round(nearest_rank(minutes, 0.9), 2)},
        "within_share": round(sum(r.within for r in runs) / len(runs), 3),
        "correct_share": round(sum(r.correct for r in runs) / len(runs), 3),
        "verdicts": verdicts,
        "trials": {k: statistics.median(getattr(r, k) for r in runs)
                   for k in ("search", "confirm", "baseline", "failed", "screened")},
        "lost": sum(r.lost for r in runs),
        "missed": {stage: sum(r.missed == stage for r in runs) for stage in MISSES},
    }


def shorter_window(exp: Experiment, seconds: float) -> dict[str, Any]:
    """The experiment updates that measure every window over its first ``seconds`` only: the
    replay answers them from the grid's first-seconds columns (``target.replay.window``)."""
    assert exp.target.replay is not None
    # The grid's own window: a grid file may already replay a shorter window than recorded.
    recorded = exp.target.replay.window or exp.measure.window
    replay = exp.target.replay.model_copy(update={"window": recorded})
    return {"measure": exp.measure.model_copy(update={"window": seconds}),
            "target": exp.target.model_copy(update={"replay": replay})}


def unrecorded(path: Path, after: float | None, window: float | None) -> str | None:
    """Why a grid cannot play screening at ``after`` seconds or a window of ``window``
    seconds, or None."""
    exp, _ = load_experiment(path)
    assert exp.target.replay is not None
    grid = ReplayGrid.load(exp.target.replay.grid)
    if window is not None:
        exp = exp.model_copy(update=shorter_window(exp, window))
        try:  # the replay's own check: the columns its every window needs, scenarios included
            Replay(exp, grid, FakeClock())
        except TargetError as e:
            return f"not recorded ({e})"
    if after is None:
        return None
    columns = [early_column(n, after) for goal in exp.goals for n in goal.terms]
    missing = [c for c in columns if c not in grid.metrics]
    return f"not recorded (no column {', '.join(missing)})" if missing else None


def table(results: Sequence[Mapping[str, Any]]) -> str:
    lines = [f"{'grid':<28} {'truth':<14} {'min':>5} {'p90':>5} {'within':>7} {'correct':>8} "
             f"{'search':>6} {'confirm':>7} {'screened':>8} {'lost':>4} {'missed s/t/v':>12}"
             "  verdicts"]
    for s in results:
        if "skipped" in s:
            lines.append(f"{s['grid']:<28} {s['skipped']}")
            continue
        truth_ = s["truth"]
        verdict = f"{truth_['verdict']} {truth_['gain']:+.0%}"
        lines.append(
            f"{s['grid']:<28} {verdict:<14} "
            f"{s['minutes']['median']:>5.1f} {s['minutes']['p90']:>5.1f} "
            f"{s['within_share']:>7.0%} {s['correct_share']:>8.0%} "
            f"{s['trials']['search']:>6g} {s['trials']['confirm']:>7g} "
            f"{s['trials']['screened']:>8g} {s['lost']:>4} "
            f"{'/'.join(str(s['missed'][m]) for m in MISSES):>12}  "
            + ", ".join(f"{k} {n}" for k, n in sorted(s["verdicts"].items())))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiments", nargs="*", type=Path,
                        help="replay experiments (default: experiments/replay.yaml and "
                             "benchmarks/grids/*.yaml)")
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--top", type=int, default=None, help="as autotune run --top")
    parser.add_argument("--repeats", type=int, default=None, help="as autotune run --repeats")
    parser.add_argument("--extra", type=int, default=None, help="as autotune run --extra")
    parser.add_argument("--fixed", action="store_true", help="as autotune run --fixed")
    parser.add_argument("--trials", type=int, default=None, metavar="N",
                        help="override study.trials (the search's ceiling)")
    parser.add_argument("--early-stop", type=int, default=None, metavar="K",
                        help="override study.early_stop (0 = off)")
    parser.add_argument("--sampler", choices=["auto", "gp", "tpe", "random"], default=None,
                        help="as study.sampler (auto is tpe)")
    parser.add_argument("--baseline-repeats", type=int, default=None, metavar="N",
                        help="override baseline.repeats")
    parser.add_argument("--screening", type=float, default=None, metavar="SECONDS",
                        help="set study.screening.after (grids that recorded it only)")
    parser.add_argument("--factor", type=float, default=3.0,
                        help="study.screening.factor with --screening")
    parser.add_argument("--window", type=float, default=None, metavar="SECONDS",
                        help="measure every window over its first SECONDS only (grids that "
                             "recorded them: grid_local.py --early); the truth stays the "
                             "recorded full windows'")
    parser.add_argument("--drift", type=float, default=None, metavar="F",
                        help="scale the objective's reads by 1 + F per 6 simulated minutes "
                             "(every configuration alike; the truth unchanged)")
    parser.add_argument("--null", type=float, default=None, metavar="SIGMA",
                        help="every configuration reads like the baseline, with lognormal "
                             "noise SIGMA per read (the truth: nothing differs, KEEP)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--out", type=Path, default=Path("results/whole-run.json"))
    args = parser.parse_args(argv)
    paths = args.experiments or [DEMO, *sorted(GRIDS.glob("*.yaml"))]
    options: dict[str, Any] = {k: getattr(args, k) for k in ("top", "repeats", "extra")
                               if getattr(args, k) is not None}
    if args.fixed:
        options["sequential"] = False
    if args.early_stop is not None:
        options["early_stop"] = args.early_stop or None
    if args.trials is not None:
        options["trials"] = args.trials
    if args.baseline_repeats is not None:
        options["baseline_repeats"] = args.baseline_repeats
    if args.sampler is not None:
        options["sampler"] = args.sampler
    skipped: dict[Path, str] = {}
    if args.screening is not None:
        options["screening"] = (args.screening, args.factor)
    if args.window is not None:
        options["window"] = args.window
    if args.drift:
        options["drift"] = args.drift
    if args.null:
        options["null"] = args.null
    if args.screening is not None or args.window is not None:
        skipped = {p: why for p in paths
                   if (why := unrecorded(p, args.screening, args.window))}
    work = [(p, seed, options) for p in paths if p not in skipped
            for seed in range(args.seeds)]
    t0 = time.perf_counter()
    if args.jobs <= 1:
        _quiet()
        runs = [_job(w) for w in work]
    else:
        runs = map_jobs(_job, work, args.jobs, initializer=_quiet)
    results = [{"grid": p.name, "skipped": skipped[p]} if p in skipped
               else summary(p, [r for r in runs if r.grid == p.name], null=bool(args.null))
               for p in paths]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"options": options, "seeds": args.seeds,
                                    "summaries": results, "runs": [asdict(r) for r in runs]},
                                   indent=1))
    print(f"{args.seeds} seeds per grid, options {options or 'default'}; "
          f"wall {time.perf_counter() - t0:.0f}s")
    print(table(results))
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
