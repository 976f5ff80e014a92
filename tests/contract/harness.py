"""What a backend family provides to run the contract suites.

Each module in ``tests/contract/harnesses/`` exposes ``HARNESSES``: a list of
``pytest.param(factory, id=..., marks=...)`` where ``factory(tmp_path, request) -> Harness``
(``request`` gives a harness the package's fixtures, e.g. the Kubernetes control plane). The
suites in this folder run every test once per harness, so the simulated, local and Kubernetes
backends are held to the same contract.
"""

from __future__ import annotations

from typing import Protocol

from autotune.clock import Clock
from autotune.experiment.models import Experiment
from autotune.study.trial import Backends


class Harness(Protocol):
    families: frozenset[str]
    """Which suites apply: "target", "injector", "metrics" (a backend may cover only some)."""
    experiment: Experiment
    backends: Backends
    clock: Clock

    def env_seen(self) -> dict[str, str]:
        """The environment variables the running service really has (of the parameters' vars),
        observed independently of the Target (process environ, pod spec in the API server)."""

    def original_env(self) -> dict[str, str]:
        """What ``env_seen`` showed before the first ``apply`` (what restore must bring back)."""

    def stress_present(self) -> bool:
        """Whether stress is really in place, observed independently of the Injector
        (stress-ng processes in the cgroup, StressChaos objects in the API server)."""

    def query(self, kind: str) -> str:
        """A rendered query for the metric source: kind is 'value' (one series, a number),
        'empty' (selects nothing) or 'invalid' (a syntax error)."""

    def teardown(self) -> None: ...
