"""Build a simulated study in a temporary directory, for tests of the study engine."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.backends import build
from autotune.clock import FakeClock
from autotune.experiment import Experiment, parse_experiment
from autotune.platforms.simulated import World
from autotune.progress import SilentProgress
from autotune.study import storage as st
from autotune.study.journal import Journal
from autotune.study.loop import RunResult, StudyRunner
from autotune.study.trial import Backends


def document(tmp: Path, **overrides: Any) -> dict[str, Any]:
    """The simulated experiment as a file would hold it; ``overrides`` by dotted path
    (``**{"study.sampler": "gp"}``)."""
    doc: dict[str, Any] = {
        "name": "sim",
        "target": {"simulated": {
            "optimum": {"GOMAXPROCS": 2, "gc": 2000},
            "unset": {"GOMAXPROCS": 8, "gc": 0},
            "noise": 0.02,
            "state_file": str(tmp / "world.json"),
        }},
        "parameters": [
            {"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 16},
            {"name": "gc", "env": "FORCEGC_INTERVAL_MS", "type": "int",
             "values": [0, 100, 500, 2000, 5000, 10000]},
        ],
        "baseline": {"repeats": 2, "params": {"GOMAXPROCS": None, "gc": 0}},
        "chaos": {"stress": {"workers": 2, "load": 50}},
        "measure": {"warmup": "2s", "window": "10s"},
        "metrics": {"p99": "surface", "stress_fraction": "stress"},
        "objective": {"minimize": "p99"},
        "constraints": ["p99 <= 1"],
        "study": {"trials": 5, "sampler": "tpe", "seed": 3},
    }
    for dotted, value in overrides.items():
        node = doc
        *path, last = dotted.split(".")
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    return doc


def experiment(tmp: Path, **overrides: Any) -> Experiment:
    return parse_experiment(yaml.safe_dump(document(tmp, **overrides)))


@dataclass
class Rig:
    exp: Experiment
    tmp: Path
    clock: FakeClock
    backends: Backends
    world: World
    url: str

    def runner(self) -> StudyRunner:
        return StudyRunner(self.exp, self.backends, clock=self.clock, progress=SilentProgress(),
                           journal=Journal(self.tmp / "trials.jsonl"), experiment_hash="test")

    def run(self, budget: int | None = None, new_study: bool = False) -> RunResult:
        studies = st.open_for_run(self.exp, self.url, new_study=new_study)
        return self.runner().run(studies, budget or self.exp.study.trials)

    def studies(self) -> st.Studies:
        return st.open_existing(self.exp, self.url)


def rig(tmp: Path, exp: Experiment | None = None, **overrides: Any) -> Rig:
    exp = exp or experiment(tmp, **overrides)
    clock = FakeClock()
    backends = build(exp, tmp, clock)
    return Rig(exp, tmp, clock, backends, World(tmp / "world.json"),
               f"sqlite:///{tmp}/study.db")
