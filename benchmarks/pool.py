"""A pool of equivalent targets against one: time to verdict of the whole ``autotune run``.

Each seed plays ``run_night`` (baseline, design, search, confirmation, verdict) on a recorded grid
(``target.replay``) twice: with one target, and with a pool of ``--members`` replayed copies of it
(``autotune.study.pool``), each drawing its own recorded repeats on a ``FakeClock`` of its own.
The pool's simulated wall time is the slowest member's search, then the confirmation on the lead
member. Printed per grid (median over seeds):

- the single target's minutes to verdict, and the pool's: the search (baseline and search
  trials; a pool's slowest member) plus the confirmation (on one member), and its runs;
- **parallel efficiency of the search**: the slowest member's time over the sum of every
  member's (1/members when the trials are shared out evenly);
- who measured what: trials per member, and that every member measured the baseline;
- the verdicts, judged as ``benchmarks.whole_run`` judges them.

The members run in threads on simulated clocks that advance only when a member waits, so which
member takes the next trial follows real time, not the simulated one: fair here, where every
trial of a grid costs about the same, but not a model of members of different speeds.

    .venv/bin/python -m benchmarks.pool                 # demo grid, 10 seeds, 12 trials, 3 members
    .venv/bin/python -m benchmarks.pool --seeds 30 --grid benchmarks/grids/inventory-2026-12-02.yaml
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from autotune.clock import FakeClock
from autotune.evidence.significance import PRACTICAL
from autotune.experiment import Experiment, load_experiment
from autotune.platforms.replay import Replay, ReplayGrid
from autotune.progress import SilentProgress
from autotune.report.history import verdict_record
from autotune.study import nightly
from autotune.study import storage as st
from autotune.study.kinds import TrialKind
from autotune.study.loop import RunResult, StudyRunner
from autotune.study.pool import Member, PoolRunner
from autotune.study.space import settings_key
from benchmarks.replay import _NoJournal
from benchmarks.whole_run import ground


class Lockstep:
    """The members' simulated clocks kept in step: a member that waits goes on only once no
    other live member is behind it in simulated time (a conservative discrete-event
    simulation), so the next trial goes to the member that is free first in simulated time, as
    on a cluster. A member's thread joins at its first wait; a thread that ended no longer
    holds the others back (the confirmation then runs on the lead alone)."""

    def __init__(self, members: int) -> None:
        self.clocks = [_StepClock(self, i) for i in range(members)]
        self.cond = threading.Condition()
        self.threads: dict[int, threading.Thread] = {}

    def behind(self, i: int) -> bool:
        me = self.clocks[i].monotonic()
        return any(j != i and t.is_alive() and self.clocks[j].monotonic() < me
                   for j, t in self.threads.items())


class _StepClock(FakeClock):
    def __init__(self, step: Lockstep, i: int) -> None:
        super().__init__()
        self.step, self.i = step, i

    def sleep(self, seconds: float) -> None:
        with self.step.cond:
            if threading.current_thread() is not threading.main_thread():
                self.step.threads.setdefault(self.i, threading.current_thread())
            super().sleep(seconds)
            self.step.cond.notify_all()
            while self.step.behind(self.i):
                self.step.cond.wait(0.05)  # also notices a member whose thread ended


class _Timed(PoolRunner):
    """Remembers every member's clock when the search ends."""

    searched: list[float]

    def run(self, studies: st.Studies, budget: int, stop_rule: Any = None) -> RunResult:
        result = super().run(studies, budget, stop_rule)
        self.searched = [m.clock.monotonic() for m in self.members]
        return result


class _TimedOne(StudyRunner):
    """Remembers its clock when the search ends."""

    searched: list[float]

    def run(self, studies: st.Studies, budget: int, stop_rule: Any = None) -> RunResult:
        result = super().run(studies, budget, stop_rule)
        self.searched = [self.clock.monotonic()]
        return result


def _experiment(path: Path, seed: int, trials: int) -> Experiment:
    exp, _ = load_experiment(path)
    return exp.model_copy(update={"study": exp.study.model_copy(
        update={"seed": seed, "trials": trials, "early_stop": None})})


def run(path: Path, seed: int, trials: int, members: int) -> dict[str, Any]:
    exp = _experiment(path, seed, trials)
    assert exp.target.replay is not None
    grid = ReplayGrid.load(exp.target.replay.grid)
    truth = ground(exp, grid)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pool-bench-") as tmp:
        journal = _NoJournal(Path(tmp) / "j.jsonl")
        runner: StudyRunner
        if members == 1:
            clock = FakeClock()
            runner = _TimedOne(exp, Replay(exp, grid, clock, seed).backends(), clock=clock,
                               progress=SilentProgress(), journal=journal, experiment_hash="pool")
        else:
            pool = []
            for i, c in enumerate(Lockstep(members).clocks):
                pool.append(Member(f"copy-{i + 1}", exp,
                                   Replay(exp, grid, c, seed * 100 + i).backends(), c))
            runner = _Timed(exp, pool, progress=SilentProgress(), journal=journal,
                            experiment_hash="pool")
        night = nightly.run_night(exp, f"sqlite:///{tmp}/study.db", runner,
                                  nightly.NightOptions(budget=trials), verdict_record)
        by_member: Counter[str] = Counter()
        baseline_members: set[str] = set()
        for t in night.studies.search.get_trials(deepcopy=False, states=[TrialState.COMPLETE]):
            by_member[str(t.user_attrs.get("member"))] += 1
        night_reference = []
        for t in night.studies.reference.get_trials(deepcopy=False,
                                                     states=[TrialState.COMPLETE]):
            night_reference.append(t.user_attrs.get("kind"))
            if t.user_attrs.get("kind") == TrialKind.BASELINE:
                baseline_members.add(str(t.user_attrs.get("member")))
        night.studies.storage.engine.dispose()
    if isinstance(runner, _Timed):
        lead = runner.members[0].clock.monotonic()
        confirm = lead - runner.searched[0]
        wall = max(max(runner.searched) + confirm, lead)
        efficiency = max(runner.searched) / sum(runner.searched)
    else:
        assert isinstance(runner, _TimedOne)
        wall, efficiency = runner.clock.monotonic(), 1.0
        confirm = wall - runner.searched[0]
    confirm_runs = sum(1 for t in night_reference if t == TrialKind.CONFIRM)
    v = night.verdict
    if v["verdict"] == "adopt" and v.get("candidate"):
        value = truth.values.get(settings_key(v["candidate"]["settings"]))
        correct = truth.adopt and value is not None and truth.gain(value) > PRACTICAL
    else:
        value, correct = truth.baseline, v["verdict"] == "keep current" and not truth.adopt
    return {"wall_min": wall / 60, "search_min": (wall - confirm) / 60,
            "confirm_min": confirm / 60, "confirm_runs": confirm_runs,
            "efficiency": efficiency, "verdict": v["verdict"],
            "correct": correct, "within": value is not None and truth.within(value),
            "search": sum(by_member.values()), "per_member": sorted(by_member.values()),
            "baseline_on_every_member": len(baseline_members) == members,
            "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", type=Path, default=Path("experiments/replay.yaml"),
                    help="an experiment with a target.replay (default: the demo's grid)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--members", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"{args.grid}: {args.trials}-trial study, {args.seeds} seeds, "
          f"1 target against a pool of {args.members}")
    for members in (1, args.members):
        runs = [run(args.grid, seed, args.trials, members) for seed in range(1, args.seeds + 1)]
        walls = sorted(r["wall_min"] for r in runs)
        p90 = walls[max(0, math.ceil(0.9 * len(walls)) - 1)]
        print(f"  {members} member(s): to verdict median {statistics.median(walls):.1f} min "
              f"(p90 {p90:.1f}) = search {statistics.median(r['search_min'] for r in runs):.1f}"
              f" + confirmation {statistics.median(r['confirm_min'] for r in runs):.1f} "
              f"({statistics.median(r['confirm_runs'] for r in runs):.0f} runs); search "
              f"efficiency median "
              f"{statistics.median(r['efficiency'] for r in runs):.2f}; search trials "
              f"{Counter(r['search'] for r in runs)}; per member "
              f"{Counter(tuple(r['per_member']) for r in runs).most_common(3)}; baseline on "
              f"every member {sum(r['baseline_on_every_member'] for r in runs)}/{len(runs)}; "
              f"correct verdicts {sum(r['correct'] for r in runs)}/{len(runs)}, within 10% "
              f"{sum(r['within'] for r in runs)}/{len(runs)}; "
              f"{statistics.median(r['seconds'] for r in runs):.1f} s a run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
