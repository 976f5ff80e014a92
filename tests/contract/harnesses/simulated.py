"""The simulated world, run through the contract suites like every real backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.backends import build
from autotune.clock import FakeClock
from autotune.experiment import parse_experiment
from autotune.platforms.simulated import World

EXPERIMENT = """
name: contract-sim
target:
  simulated:
    optimum: {GOMAXPROCS: 2, forcegc_interval_ms: 500}
    unset: {GOMAXPROCS: 4, forcegc_interval_ms: 0}
    state_file: {state}
parameters:
  - {name: GOMAXPROCS, type: int, low: 1, high: 8}
  - {name: forcegc_interval_ms, env: FORCEGC_INTERVAL_MS, type: int, values: [0, 500, 2000]}
chaos: {stress: {workers: 2, load: 50}}
measure: {warmup: 1s, window: 5s}
metrics: {p99: surface}
objective: {minimize: p99}
"""


class SimulatedHarness:
    families = frozenset({"target", "injector", "metrics"})

    def __init__(self, tmp: Path, request: pytest.FixtureRequest | None = None) -> None:
        state = tmp / "world.json"
        self.experiment = parse_experiment(EXPERIMENT.replace("{state}", str(state)))
        self.clock = FakeClock()
        self.backends = build(self.experiment, tmp, self.clock)
        self.world = World(state)

    def env_seen(self) -> dict[str, str]:
        applied = self.world.load().get("applied") or {"env": {}}
        return {k: v for k, v in applied["env"].items() if v is not None}

    def original_env(self) -> dict[str, str]:
        return {}

    def stress_present(self) -> bool:
        return bool(self.world.load()["active"])

    def query(self, kind: str) -> str:
        return {"value": "surface", "empty": "latency_of_nothing", "invalid": "rate(x[1m]"}[kind]

    def teardown(self) -> None:
        self.backends.injector.cleanup()
        self.backends.target.restore()


HARNESSES = [pytest.param(SimulatedHarness, id="simulated")]
