"""The replay platform (a recorded grid played back) through the contract suites. It answers
metrics by name, so the query kinds are names: only "value" is a column of the grid."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.clock import FakeClock
from autotune.experiment import parse_experiment
from autotune.platforms.replay import Replay, ReplayGrid

EXPERIMENT = """
name: contract-replay
target: {local: {workload: demo}}
parameters:
  - {name: GOMAXPROCS, type: int, values: [1, 8]}
  - {name: gc, env: FORCEGC_INTERVAL_MS, type: int, values: [0, 500]}
chaos: {stress: {workers: 2, load: 50}}
measure: {warmup: 1s, window: 5s}
metrics: {value: x}
objective: {minimize: value}
"""


class ReplayHarness:
    families = frozenset({"target", "injector", "metrics"})

    def __init__(self, tmp: Path, request: pytest.FixtureRequest | None = None) -> None:
        (tmp / "grid.csv").write_text("config,state,value\nGOMAXPROCS=1 gc=0,COMPLETE,0.004\n")
        self.experiment = parse_experiment(EXPERIMENT)
        self.clock = FakeClock()
        self.replay = Replay(self.experiment, ReplayGrid.load(tmp / "grid.csv"), self.clock, 1)
        self.backends = self.replay.backends()

    def env_seen(self) -> dict[str, str]:
        return {k: v for k, v in (self.replay.applied or {}).items() if v is not None}

    def original_env(self) -> dict[str, str]:
        return {}

    def stress_present(self) -> bool:
        return bool(self.replay.active)

    def query(self, kind: str) -> str:
        return kind

    def teardown(self) -> None:
        self.backends.injector.cleanup()
        self.backends.target.restore()


HARNESSES = [pytest.param(ReplayHarness, id="replay")]
