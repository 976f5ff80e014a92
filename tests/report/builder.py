"""Studies built trial by trial (optuna.trial.create_trial), fully deterministic: the golden
report and the summarize tests need exact inputs, not a sampler's choices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from autotune.experiment import Experiment, Setting, parse_experiment
from autotune.study import storage as st
from autotune.study.confirmation.attrs import RULE, RULE_ATTR
from autotune.study.objective import score
from autotune.study.space import to_env

EXPERIMENT = """
name: golden
description: a fixed study for the golden report
target:
  kubernetes: {namespace: shop, deployment: api, container: api}
prometheus: {url: "http://prometheus.monitoring:9090"}
parameters:
  - {name: GOMAXPROCS, type: int, values: [1, 2, 4, 8]}
  - {name: GOGC, type: int, low: 25, high: 400, step: 25}
baseline: {repeats: 3, params: {GOMAXPROCS: null, GOGC: null}}
chaos: {stress: {workers: 2, load: 40}, pattern: {every: 30s, burst: 5s}}
measure: {warmup: 20s, window: 60s, load: {metric: request_rate}}
metrics:
  p99_latency: {query: 'histogram_quantile(0.99, x)', unit: s}
  gc_pause_p99: {query: 'histogram_quantile(0.99, y)', unit: s}
  p_idle_fraction: 'rate(a[1m]) / rate(b[1m])'
  request_rate: {query: 'sum(rate(z[1m]))', unit: 1/s}
objective: {minimize: p99_latency}
constraints: ['gc_pause_p99 <= 0.005']
study: {trials: 10, sampler: tpe, seed: 3}
"""

T0 = 1_800_000_000.0
TARGET = {"kind": "kubernetes", "namespace": "shop", "deployment": "api", "container": "api",
          "image": "registry.example/api:1.4.2", "cpu_limit": "1",
          "gomaxprocs_default": "GOMAXPROCS unset: Go >= 1.25 uses the CPU limit (1), max(2, "
                                "ceil) = 2"}


def experiment(text: str = EXPERIMENT) -> Experiment:
    return parse_experiment(text)


def _distributions(exp: Experiment) -> dict[str, BaseDistribution]:
    out: dict[str, BaseDistribution] = {}
    for p in exp.parameters:
        if p.values is not None:
            out[p.name] = CategoricalDistribution(list(p.values))
        else:
            assert p.low is not None and p.high is not None
            out[p.name] = IntDistribution(int(p.low), int(p.high), step=int(p.step or 1))
    return out


class Builder:
    def __init__(self, exp: Experiment, tmp: Path) -> None:
        self.exp = exp
        self.studies = st.open_for_run(exp, f"sqlite:///{tmp}/study.db")
        self.clock = T0
        s = self.studies.search
        s.set_user_attr("target", TARGET)
        s.set_user_attr("chaos", exp.chaos.model_dump(mode="json"))
        s.set_user_attr("measure", exp.measure.model_dump(mode="json"))
        s.set_user_attr("sampler", "tpe")
        # Confirmation trials added here are judged as today's confirm() records them.
        s.set_user_attr(RULE_ATTR, RULE)

    def add(
        self,
        study: str,
        kind: str,
        settings: dict[str, Setting],
        metrics: dict[str, float] | None,
        *,
        unavailable: dict[str, str] | None = None,
        failure: str | None = None,
        record_extra: dict[str, Any] | None = None,
        **attrs: Any,
    ) -> int:
        """One trial with a record like the loop writes; ``metrics`` None means it failed."""
        target = self.studies.search if study == "search" else self.studies.reference
        number = len(target.get_trials(deepcopy=False))
        self.clock += 100.0
        record: dict[str, Any] = {
            "study": self.studies.name, "number": number, "kind": kind, "settings": settings,
            "env": to_env(self.exp, settings), "started": self.clock,
            "sampler": "tpe" if kind == "search" else "fixed", "autotune_version": "0.1.0",
            "host": "ci-runner", "experiment_hash": "golden", "target": "kubernetes",
            "live": {"go_version": "go1.25.4", "pods": ["api-7d9f-abcde"]},
            "phases": {"apply": 12.0, "warmup": 20.0, "inject": 1.5, "measure": 60.0,
                       "recover": 2.0, "read": 0.2},
            "finished": self.clock + 96.0, "seconds": 96.0, **(record_extra or {}),
        }
        user_attrs: dict[str, Any] = {"kind": kind, "settings": settings, **attrs}
        if failure is not None:  # on a COMPLETE trial: inherited from the attempt it retried
            user_attrs["failure"] = failure
        if metrics is None:
            record.update(state="FAIL", failure=failure)
            user_attrs["record"] = record
            trial = optuna.trial.create_trial(state=TrialState.FAIL, user_attrs=user_attrs,
                                              **self._params(kind, settings))
        else:
            scored = score(self.exp, metrics)
            record.update(state="COMPLETE", metrics=metrics, unavailable=unavailable or {},
                          values=list(scored.values), constraints=scored.violations,
                          feasible=scored.feasible)
            user_attrs["record"] = record
            trial = optuna.trial.create_trial(values=list(scored.values), user_attrs=user_attrs,
                                              constraints=scored.violations,
                                              **self._params(kind, settings))
        target.add_trial(trial)
        return number

    def _params(self, kind: str, settings: dict[str, Setting]) -> dict[str, Any]:
        if kind != "search":
            return {}
        return {"params": dict(settings), "distributions": _distributions(self.exp)}


def m(p99: float, gc: float = 0.002, idle: float | None = 0.3) -> dict[str, float]:
    out = {"p99_latency": p99, "gc_pause_p99": gc}
    if idle is not None:
        out["p_idle_fraction"] = idle
    out["request_rate"] = 100.0  # the same load in every window (measure.load)
    return out


NO_IDLE = {"p_idle_fraction": "no series for rate(a[1m]) / rate(b[1m]) (GC cycles < 2 in the "
                              "window)"}


def golden_study(tmp: Path) -> Builder:
    """Baseline repeats, 8 search trials (one failed, one infeasible, one diagnostic unreadable),
    then three interleaved, shuffled confirmation rounds of #1, #6, #3 and the baseline."""
    b = Builder(experiment(), tmp)
    base: dict[str, Setting] = {"GOMAXPROCS": None, "GOGC": None}
    for i, p99 in enumerate((0.012, 0.032, 0.018), start=1):
        b.add("reference", "baseline", base, m(p99), repeat=i)
    search: list[tuple[dict[str, Setting], dict[str, float] | None]] = [
        ({"GOMAXPROCS": 8, "GOGC": 100}, m(0.055)),
        ({"GOMAXPROCS": 2, "GOGC": 400}, m(0.0031, 0.0012, 0.45)),
        ({"GOMAXPROCS": 4, "GOGC": 25}, None),
        ({"GOMAXPROCS": 1, "GOGC": 200}, m(0.0035, 0.0015, None)),
        ({"GOMAXPROCS": 4, "GOGC": 50}, m(0.140, 0.008)),
        ({"GOMAXPROCS": 2, "GOGC": 100}, m(0.009)),
        ({"GOMAXPROCS": 1, "GOGC": 400}, m(0.0033, 0.0011, 0.5)),
        ({"GOMAXPROCS": 8, "GOGC": 400}, m(0.020)),
    ]
    for settings, metrics in search:
        b.add("search", "search", settings, metrics,
              unavailable=NO_IDLE if metrics and "p_idle_fraction" not in metrics else None,
              failure=None if metrics else "inject: no pod matched the selector (Chaos Mesh "
                                           "Warning event Failed)")
    configs: dict[int | str, dict[str, Setting]] = {
        "baseline": base, 1: search[1][0], 6: search[6][0], 3: search[3][0]}
    rounds: list[list[tuple[int | str, float | None]]] = [
        [(6, 0.0036), ("baseline", 0.015), (1, 0.0032), (3, 0.0041)],
        [(1, 0.0030), (3, 0.0038), (6, None), (6, 0.0031), ("baseline", 0.029)],
        [("baseline", 0.011), (3, 0.0036), (6, 0.0040), (1, 0.0034)],
    ]
    for r, entries in enumerate(rounds, start=1):
        for candidate, value in entries:
            unreadable = candidate == 3 and r == 2
            b.add("reference", "confirm", configs[candidate],
                  None if value is None else m(value, 0.0013, None if unreadable else 0.4),
                  unavailable=NO_IDLE if unreadable else None,
                  failure="recover: stress still present 60s after delete" if value is None
                  else None,
                  candidate=candidate, round=r)
    return b
