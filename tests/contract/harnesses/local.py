"""The local stack (demo service in a cgroup, stress-ng, private Prometheus) under the contracts."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.clock import SystemClock
from autotune.experiment import parse_experiment
from autotune.platforms.local.service import LocalService
from autotune.platforms.local.stack import build

EXPERIMENT = """
name: contract-local
target: {local: {workload: demo, cpus: 1.0, load: {rate: 100}}}
parameters:
  - {name: GOMAXPROCS, type: int, low: 1, high: 4}
  - {name: forcegc_interval_ms, env: FORCEGC_INTERVAL_MS, type: int, values: [0, 500]}
chaos: {stress: {workers: 1, load: 30}}
measure: {warmup: 1s, window: 4s}
metrics: {p99: 'sum(up{ {{selector}} })'}
objective: {minimize: p99}
"""


class LocalHarness:
    families = frozenset({"target", "injector", "metrics"})

    def __init__(self, tmp: Path, request: pytest.FixtureRequest | None = None) -> None:
        self.experiment = parse_experiment(EXPERIMENT)
        self.clock = SystemClock()
        self.backends = build(self.experiment, tmp, self.clock)
        target = self.backends.target
        assert isinstance(target, LocalService)
        self.target = target

    def env_seen(self) -> dict[str, str]:
        service = self.target.service
        if service is None or not service.running():
            return {}
        raw = Path(f"/proc/{service.pid}/environ").read_bytes().split(b"\0")
        env = dict(x.decode().split("=", 1) for x in raw if b"=" in x)
        wanted = {p.env_var for p in self.experiment.parameters}
        return {k: v for k, v in env.items() if k in wanted}

    def original_env(self) -> dict[str, str]:
        return {}

    def stress_present(self) -> bool:
        for pid in self.target.limit.pids("service"):
            try:
                if Path(f"/proc/{pid}/comm").read_text().startswith("stress-ng"):
                    return True
            except OSError:
                continue
        return False

    def query(self, kind: str) -> str:
        return {"value": "sum(up)", "empty": 'up{job="no-such-job"}',
                "invalid": "sum(up"}[kind]

    def teardown(self) -> None:
        self.backends.injector.cleanup()
        self.backends.target.restore()
        self.backends.source.close()


HARNESSES = [pytest.param(LocalHarness, id="local", marks=pytest.mark.integration)]
