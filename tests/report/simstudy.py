"""A real study on the simulated backend, driven by a FakeClock: seconds of CPU, no sleeping."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.backends import build
from autotune.clock import FakeClock
from autotune.experiment import Experiment, parse_experiment
from autotune.progress import SilentProgress
from autotune.study import storage as st
from autotune.study.journal import Journal
from autotune.study.loop import StudyRunner

EXPERIMENT = """
name: report-sim
target:
  simulated:
    optimum: {GOMAXPROCS: 2, forcegc_interval_ms: 2000}
    unset: {GOMAXPROCS: 8, forcegc_interval_ms: 0}
    floor: 0.003
    noise: 0.03
    state_file: {state}
parameters:
  - {name: GOMAXPROCS, type: int, low: 1, high: 16}
  - {name: forcegc_interval_ms, env: FORCEGC_INTERVAL_MS, type: int,
     values: [0, 100, 500, 2000, 5000, 10000]}
baseline: {repeats: 3, params: {GOMAXPROCS: null, forcegc_interval_ms: 0}}
chaos: {stress: {workers: 2, load: 50}}
measure: {warmup: 1s, window: 5s, noise_guard: {enabled: false}}
metrics:
  p99_latency: {query: surface, unit: s}
  stress_fraction: stress
  gc_pause_p99: {query: go_gc_pause_p99, unit: s}
objective: {minimize: p99_latency}
constraints: ['p99_latency <= 0.5']
study: {trials: 3, sampler: random, seed: 11}
"""


@dataclass
class SimStudy:
    exp: Experiment
    studies: st.Studies
    runner: StudyRunner
    clock: FakeClock


def open_sim(tmp: Path, experiment: str = EXPERIMENT) -> SimStudy:
    exp = parse_experiment(experiment.replace("{state}", str(tmp / "world.json")))
    clock = FakeClock()
    studies = st.open_for_run(exp, f"sqlite:///{tmp}/study.db")
    runner = StudyRunner(exp, build(exp, tmp, clock), clock=clock, progress=SilentProgress(),
                         journal=Journal(tmp / "trials.jsonl"), experiment_hash="test")
    return SimStudy(exp, studies, runner, clock)


def run_sim(tmp: Path, trials: int = 3) -> SimStudy:
    sim = open_sim(tmp)
    sim.runner.run(sim.studies, trials)
    return sim
