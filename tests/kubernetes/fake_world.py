"""The fake API server's world, for what the real control plane cannot serve: ``pods/proxy``
(the API server proxies only to a pod's global-unicast IP, and kwok's pods have no process
behind theirs; pkg/registry/core/pod/strategy.go ResourceLocation). tests/kubernetes/conftest.py
has the real one; a module that needs this one overrides the ``world`` fixture with
``fake_world``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from autotune.experiment import Experiment, parse_experiment
from autotune.kubernetes.client import Kube, connect
from autotune.kubernetes.deployment import KubernetesTarget, StressGuard
from autotune.kubernetes.lease import RunLease
from autotune.kubernetes.loadgen import LoadGenerator
from autotune.kubernetes.stresschaos import ChaosMeshInjector
from autotune.live import Live, Window
from autotune.metrics.base import Reading, Unavailable
from autotune.study.interrupts import Interrupted
from autotune.study.trial import Backends
from tests.kubernetes.fake_api import FakeCluster
from tests.kubernetes.fake_prometheus import FakePrometheus

NAMESPACE, DEPLOYMENT, CONTAINER = "shop", "api", "api"
ORIGINAL_ENV = [{"name": "LOG_LEVEL", "value": "info"}, {"name": "GOMAXPROCS", "value": "8"}]

EXPERIMENT = """
name: api-test
target:
  kubernetes:
    namespace: shop
    deployment: api
    container: api
    kubeconfig: {kubeconfig}
    rollout_timeout: {rollout_timeout}{target}
parameters:
  - {{name: GOMAXPROCS, type: int, values: [2, 4, 8, 16]}}
  - {{name: forcegc_interval_ms, env: FORCEGC_INTERVAL_MS, type: int, values: [500, 2000]}}
baseline: {{repeats: 1, params: {{GOMAXPROCS: null, forcegc_interval_ms: null}}}}
chaos:
  stress: {{workers: 4, load: 100}}
  pattern: {pattern}
prometheus: {{url: "{prometheus}", scrape_interval: 0.1s, token_env: {token_env}}}
measure: {{warmup: 0.1s, window: 0.4s, load: {{metric: request_rate, tolerance: 0.1}}{measure}}}
metrics:{metrics}
  request_rate: >-
    sum(rate(http_request_duration_seconds_count{{ {{{{selector}}}} }}[{{{{window}}}}]))
  p99_latency: >-
    histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{{
    {{{{selector}}}} }}[{{{{window}}}}])))
  gc_pause_p99: >-
    histogram_quantile(0.99, sum by (le) (rate(go_sched_pauses_total_gc_seconds_bucket{{
    {{{{selector}}}} }}[{{{{window}}}}])))
objective: {{minimize: p99_latency}}
constraints: ['gc_pause_p99 <= 0.5']
study: {{trials: {trials}, seed: 3, stop_after_failures: {stop_after}}}
"""


class FastClock:
    """Real time for waiting on the fake API server; ``sleep`` fast-forwards instead.

    Warm-up and measurement windows take no time, while watches and their deadlines still run
    against the fake's real (millisecond) controllers.
    """

    def __init__(self) -> None:
        self.offset = 0.0
        self.on_sleep: Callable[[float], None] | None = None

    def now(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.offset += seconds
            if self.on_sleep is not None:
                self.on_sleep(seconds)


class FakeMetrics:
    """A MetricSource answering only when the fake Chaos Mesh really stressed the candidate's
    pods since it went live, and only for queries selecting exactly those pods."""

    def __init__(self, fake: FakeCluster, *, interrupt_on_read: int | None = None) -> None:
        self.fake, self.interrupt_on_read = fake, interrupt_on_read
        self.rate = 100.0
        """Requests/s the candidate served: the load generator's, whatever the settings."""
        self.reads = 0
        self.closed = False

    def observe(self, live: Live) -> None:
        return None

    def read(self, queries: Mapping[str, str], window: Window, live: Live) -> dict[str, Reading]:
        self.reads += 1
        if self.interrupt_on_read == self.reads:
            raise Interrupted("SIGTERM")
        pods = sorted(live.placement["pods"])
        stressed = [i for i in self.fake.injected if i.pods == pods]
        out: dict[str, Reading] = {}
        load = live.details.get("load_pod")
        for name, query in queries.items():
            if "loadgen_" in query:  # the in-cluster generator's own histogram
                out[name] = (0.004 if load and f'pod="{load}"' in query and self._serving(load)
                             else Unavailable(f"no series for {query}"))
                continue
            if not all(p in query for p in pods) or f'namespace="{NAMESPACE}"' not in query:
                out[name] = Unavailable(f"no series for {query}")
            elif not stressed:
                out[name] = Unavailable("no stress was injected on the candidate's pods")
            elif name == "request_rate":
                out[name] = self.rate
            else:
                procs = int(live.env.get("GOMAXPROCS") or 8)
                out[name] = 0.003 * (1 + abs(procs - 2) / 4)
        return out

    def _serving(self, pod: str) -> bool:
        found = self.fake.get("pods", NAMESPACE, pod)
        return found is not None and found["status"].get("phase") == "Running"

    def close(self) -> None:
        self.closed = True


@dataclass
class World:
    """One test's cluster: the fake, how to reach it, and helpers to build what a run uses."""

    fake: FakeCluster
    url: str
    kubeconfig: Path
    tmp: Path
    clock: FastClock = field(default_factory=FastClock)

    def experiment(self, *, rollout_timeout: str = "3s", trials: int = 3, stop_after: int = 5,
                   pattern: str = "{every: 0.2s, burst: 0.1s}",
                   prometheus: str = "http://127.0.0.1:9", token_env: str = "null",
                   measure: str = "", metrics: str = "", target: str = "") -> Experiment:
        """``measure``: more ``key: value`` items for measure (", schedtrace: 100ms");
        ``metrics``: more metric lines ("\n  runq: {schedtrace: runq_total_p999}");
        ``target``: more target.kubernetes lines ("\n    pprof_port: 6060")."""
        return parse_experiment(EXPERIMENT.format(
            kubeconfig=self.kubeconfig, rollout_timeout=rollout_timeout, trials=trials,
            stop_after=stop_after, pattern=pattern, prometheus=prometheus, token_env=token_env,
            measure=measure, metrics=metrics, target=target))

    def kube(self) -> Kube:
        return connect(self.clock, kubeconfig=str(self.kubeconfig))

    def target(self, exp: Experiment | None = None, *,
               guard: StressGuard | None = None) -> KubernetesTarget:
        exp = exp or self.experiment()
        spec = exp.target.kubernetes
        assert spec is not None
        kube = self.kube()
        lease = RunLease(kube, self.clock, namespace=spec.namespace, deployment=spec.deployment,
                         study=exp.name, duration=exp.max_trial_seconds + 60)
        load = (LoadGenerator(spec.load, kube, self.clock, namespace=spec.namespace,
                              study=exp.name) if spec.load is not None else None)
        return KubernetesTarget(spec, kube, self.clock,
                                variables=[p.env_var for p in exp.parameters], study=exp.name,
                                state_dir=self.tmp / "results", guard=guard, lease=lease,
                                schedtrace_ms=exp.measure.schedtrace_ms, load=load,
                                load_seconds=exp.max_trial_seconds)

    def injector(self, *, timeout: float = 1.0, study: str | None = "api-test",
                 guard: StressGuard | None = None) -> ChaosMeshInjector:
        return ChaosMeshInjector(self.kube(), self.clock, namespace=NAMESPACE, study=study,
                                 inject_timeout=timeout, recover_timeout=timeout, check_every=1,
                                 guard=guard)

    def backends(self, exp: Experiment | None = None, **metrics: Any) -> Backends:
        """Wired as stack.build wires them: the target and the injector share a guard."""
        guard = StressGuard()
        return Backends(target=self.target(exp, guard=guard), injector=self.injector(guard=guard),
                        source=FakeMetrics(self.fake, **metrics))

    # --- what is really in the cluster ---------------------------------------------------

    def template_env(self) -> list[dict[str, Any]]:
        dep = self.fake.get("deployments", NAMESPACE, DEPLOYMENT)
        assert dep is not None
        return list(dep["spec"]["template"]["spec"]["containers"][0].get("env") or [])

    def pod_envs(self) -> list[list[dict[str, Any]]]:
        return [p["spec"]["containers"][0].get("env") or []
                for p in self.fake.pods_of(NAMESPACE, DEPLOYMENT)]

    def annotations(self) -> dict[str, str]:
        dep = self.fake.get("deployments", NAMESPACE, DEPLOYMENT)
        assert dep is not None
        return dict(dep["metadata"].get("annotations") or {})

    def chaos_left(self) -> list[str]:
        return [o["metadata"]["name"] for o in self.fake.items("stresschaos")]

    def assert_pristine(self) -> None:
        """The end state every run must leave: no stress, the env as found, no annotation."""
        assert self.chaos_left() == []
        assert self.template_env() == ORIGINAL_ENV
        assert all(env == ORIGINAL_ENV for env in self.pod_envs())
        assert self.annotations() == {}
        assert self.fake.items("leases") == [], "the run Lease is released"


def start_world(tmp: Path) -> tuple[World, Callable[[], None]]:
    clock = FastClock()
    fake = FakeCluster(now=clock.now)  # the pods' logs are stamped on the run's clock
    url = fake.start()
    fake.add_deployment(NAMESPACE, DEPLOYMENT, container=CONTAINER, env=list(ORIGINAL_ENV))
    fake.add_node("node-1", {"node.kubernetes.io/instance-type": "m5.large"})
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(fake.kubeconfig(url))
    return World(fake, url, kubeconfig, tmp, clock), fake.stop


def fake_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    w, stop = start_world(tmp_path)
    try:
        yield w
    finally:
        stop()
