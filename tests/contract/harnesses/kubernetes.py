"""The Kubernetes target and the Chaos Mesh injector, run through the contract suites against
the real control plane (tests/kubernetes/conftest.py: kube-apiserver, the controllers, kwok),
wired the way ``autotune run`` wires them."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.experiment import parse_experiment
from autotune.platforms.kubernetes.stack import build
from tests.kubernetes.conftest import Plane, start_world

EXPERIMENT = """
name: contract
target:
  kubernetes: {{namespace: {namespace}, deployment: api, container: api,
               kubeconfig: {kubeconfig}, rollout_timeout: 30s}}
parameters:
  - {{name: GOMAXPROCS, type: int, values: [2, 4, 8]}}
  - {{name: forcegc_interval_ms, env: FORCEGC_INTERVAL_MS, type: int, values: [500, 2000]}}
chaos: {{stress: {{workers: 2, load: 50}}}}
prometheus: {{url: "http://127.0.0.1:9", scrape_interval: 0.1s}}
measure: {{warmup: 0.1s, window: 0.4s, load: {{metric: rate}}}}
metrics: {{p99: 'up{{ {{{{selector}}}} }}', rate: 'count(up{{ {{{{selector}}}} }})'}}
objective: {{minimize: p99}}
"""


class KubernetesHarness:
    families = frozenset({"target", "injector"})

    def __init__(self, tmp: Path, request: pytest.FixtureRequest) -> None:
        plane: Plane = request.getfixturevalue("plane")
        self.world, self._stop = start_world(plane, tmp)
        self.experiment = parse_experiment(EXPERIMENT.format(
            namespace=self.world.namespace, kubeconfig=self.world.kubeconfig))
        self.clock = self.world.clock
        self.backends = build(self.experiment, tmp / "results", self.clock)
        self._original = self.env_seen()

    def _vars(self) -> set[str]:
        return {p.env_var for p in self.experiment.parameters}

    def env_seen(self) -> dict[str, str]:
        """The env of the running pods (all must agree), as the API server stores them."""
        self.world.settled()
        seen = []
        for pod in self.world.pods():
            env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env") or []
                   if e["name"] in self._vars()}
            seen.append(env)
        assert seen and all(env == seen[0] for env in seen), seen
        return seen[0]

    def original_env(self) -> dict[str, str]:
        return dict(self._original)

    def stress_present(self) -> bool:
        return bool(self.world.chaos_left()) or bool(self.world.chaos.stressed_pods())

    def query(self, kind: str) -> str:
        raise NotImplementedError("the Kubernetes harness provides no metric source")

    def teardown(self) -> None:
        try:
            self.backends.injector.cleanup()
            self.backends.target.restore()
        finally:
            self._stop()


HARNESSES = [pytest.param(KubernetesHarness, id="kubernetes")]
