"""A recorded grid played back: every trial answers with a measurement that really happened.

Trials on a real stack cost tens of seconds, so samplers and initial designs are compared offline
on a grid measured once (``benchmarks/grid_local.py`` writes it: one CSV row per trial, the
configuration as ``NAME=value ...`` with ``unset`` for a variable left unset, one column per
metric). For the configuration a trial applies, every metric comes from one recorded repeat of
it, drawn at random; the noise a study sees is the noise the stack really had. A configuration
the grid lacks reads as ``Unavailable``, so its trial fails with the reason instead of receiving
an invented value. The values were recorded under the grid's own stress: the replay does not
model a different ``chaos`` section. Time is the injected clock's (a ``FakeClock`` makes a trial
free).
"""

from __future__ import annotations

import csv
import itertools
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.chaos.base import Injection
from autotune.clock import Clock
from autotune.errors import ChaosError, TargetError
from autotune.experiment.models import Experiment, Parameter, Stress
from autotune.live import Live, Matcher, Window
from autotune.metrics.base import Reading, Unavailable
from autotune.study.trial import Backends
from autotune.targets.base import Env, NoiseProbe

UNSET = "unset"
# Bookkeeping columns grid_local.py writes before the metrics; every other column is a metric.
_NOT_METRICS = frozenset({"order", "config", "repeat", "state", "failure", "seconds",
                          "overhead_s", "foreign_cores_max", "attempts"})

Measurement = Mapping[str, float]
EnvKey = tuple[str | None, ...]


@dataclass(frozen=True)
class ReplayGrid:
    """The COMPLETE rows of a recorded grid: configuration label -> its repeats."""

    path: Path
    rows: Mapping[str, tuple[Measurement, ...]]
    metrics: tuple[str, ...]
    skipped: int
    """Rows that were not COMPLETE (a failed trial has no measurement to replay)."""

    @classmethod
    def load(cls, path: str | Path) -> ReplayGrid:
        path = Path(path)
        try:
            with path.open(newline="") as f:
                reader = csv.DictReader(f)
                columns = list(reader.fieldnames or [])
                records = list(reader)
        except OSError as e:
            raise TargetError(f"cannot read the grid {path}: {e}") from None
        if not {"config", "state"} <= set(columns):
            raise TargetError(f"{path} is not a recorded grid: it needs the columns config and "
                              f"state (it has {', '.join(columns) or 'none'})")
        metrics = tuple(c for c in columns if c not in _NOT_METRICS)
        rows: dict[str, list[Measurement]] = {}
        skipped = 0
        for record in records:
            if record["state"] != "COMPLETE":
                skipped += 1
                continue
            rows.setdefault(record["config"].strip(), []).append(_measurement(record, metrics))
        return cls(path, {k: tuple(v) for k, v in rows.items()}, metrics, skipped)


def _measurement(record: Mapping[str, str], metrics: tuple[str, ...]) -> Measurement:
    out: dict[str, float] = {}
    for name in metrics:
        try:
            value = float(record.get(name) or "nan")
        except ValueError:
            continue
        # An empty cell is a metric that was unavailable in that trial; it stays unavailable.
        if math.isfinite(value):
            out[name] = value
    return out


def _env_text(p: Parameter, token: str) -> str | None:
    """The environment-variable text a grid label's value stands for; ValueError if the value
    is outside the parameter's space (the label was written with ``str(value)``)."""
    if token == UNSET:
        return None
    if p.values is not None:
        for v in p.values:
            if token in (str(v), p.format(v)):
                return p.format(v)
        raise ValueError(token)
    value = int(token) if p.type == "int" else float(token)
    if not p.contains(value):
        raise ValueError(token)
    return p.format(value)


class Replay:
    """A grid seen through one experiment's parameters, and the state its three backends share:
    what is applied, which stress is in place, and a random stream per configuration (so two
    strategies that measure a configuration equally often, with the same seed, get the same
    values: the comparison is not blurred by luck in the draws)."""

    def __init__(self, exp: Experiment, grid: ReplayGrid, clock: Clock,
                 seed: int | None = None) -> None:
        self.exp, self.grid, self.clock, self.seed = exp, grid, clock, seed
        self.vars = tuple(p.env_var for p in exp.parameters)
        self.configs: dict[EnvKey, tuple[Measurement, ...]] = {}
        self.outside = 0
        """Recorded configurations the experiment's space cannot reach."""
        names = {p.name for p in exp.parameters}
        for label, repeats in grid.rows.items():
            tokens = {name: value for name, _, value in (t.partition("=") for t in label.split())}
            if set(tokens) != names:
                raise TargetError(
                    f"{grid.path}: configuration {label!r} sets {sorted(tokens)}, the "
                    f"experiment's parameters are {sorted(names)}")
            try:
                key = tuple(_env_text(p, tokens[p.name]) for p in exp.parameters)
            except ValueError:
                self.outside += 1
                continue
            self.configs[key] = self.configs.get(key, ()) + repeats
        self.applied: dict[str, str | None] | None = None
        self.generation = 0
        self.active: dict[str, float] = {}
        """Injection id -> the time its dead-man switch ends it."""
        self.injections = itertools.count(1)
        self._streams: dict[EnvKey, random.Random] = {}

    def backends(self) -> Backends:
        return Backends(target=ReplayService(self), injector=ReplayInjector(self),
                        source=ReplayMetrics(self))

    def key(self, env: Env) -> EnvKey:
        return tuple(env.get(var) for var in self.vars)

    def label(self, env: Env) -> str:
        return " ".join(f"{p.name}={UNSET if v is None else v}"
                        for p, v in zip(self.exp.parameters, self.key(env), strict=True))

    def recorded(self, env: Env) -> tuple[Measurement, ...]:
        """Every recorded repeat of the configuration (empty if the grid lacks it)."""
        return self.configs.get(self.key(env), ())

    def draw(self, env: Env) -> Measurement | None:
        key = self.key(env)
        repeats = self.configs.get(key)
        if not repeats:
            return None
        if key not in self._streams:
            self._streams[key] = random.Random(
                None if self.seed is None else f"{self.seed}:{self.label(env)}")
        return self._streams[key].choice(repeats)


class ReplayService:
    """The Target: applying is bookkeeping, and instant."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay

    def describe(self) -> dict[str, Any]:
        r = self.replay
        facts: dict[str, Any] = {
            "kind": "replay", "grid": str(r.grid.path), "configurations": len(r.configs),
            "measurements": sum(len(v) for v in r.configs.values()),
            "outside_space": r.outside, "failed_rows": r.grid.skipped}
        # A grid is recorded on the experiment's own local target (benchmarks/grid_local.py):
        # its CPU limit is a fact of the recording, which the initial design's prior needs.
        if r.exp.target.local is not None:
            facts["cpus"] = r.exp.target.local.cpus
        return facts

    def apply(self, env: Env) -> Live:
        r = self.replay
        unknown = set(env) - set(r.vars)
        if unknown:
            raise TargetError(f"unknown variables {sorted(unknown)}")
        r.generation += 1
        r.applied = dict(env)
        return Live(env=dict(env), since=r.clock.now(), scope=(Matcher("job", "replay"),),
                    details={"generation": r.generation, "configuration": r.label(env)})

    def check(self, live: Live) -> Mapping[str, Any]:
        if live.details.get("generation") != self.replay.generation:
            raise TargetError("the replayed service was reconfigured during the window")
        return {}

    def restore(self, best: Env | None = None) -> None:
        self.replay.applied = None

    def cleanup(self) -> list[str]:
        applied, self.replay.applied = self.replay.applied, None
        return [] if applied is None else [f"replayed settings {self.replay.label(applied)}"]

    def noise_probe(self) -> NoiseProbe | None:
        return None  # a recording has no neighbours


class ReplayInjector:
    def __init__(self, replay: Replay) -> None:
        self.replay = replay

    def inject(self, live: Live, stress: Stress, duration: float,
               labels: Mapping[str, str]) -> Injection:
        r = self.replay
        if r.applied is None:
            raise ChaosError("nothing is running to inject into")
        inj_id = f"replay-{next(r.injections)}"
        now = r.clock.now()
        r.active[inj_id] = now + duration
        return Injection(id=inj_id, started=now,
                         details={"workers": stress.workers, "load": stress.load})

    def recover(self, injection: Injection) -> None:
        self.replay.active.pop(injection.id, None)

    def active(self) -> list[str]:
        now = self.replay.clock.now()
        return [i for i, expires in self.replay.active.items() if expires > now]

    def cleanup(self) -> list[str]:
        removed = list(self.replay.active)
        self.replay.active.clear()
        return [f"replayed injection {i}" for i in removed]


class ReplayMetrics:
    """Answers each metric by name (the grid's columns are the experiment's metric names), all
    from the same recorded repeat; the rendered query text plays no part."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay

    def observe(self, live: Live) -> None:
        return None

    def read(self, queries: Mapping[str, str], window: Window, live: Live) -> dict[str, Reading]:
        r = self.replay
        if r.applied is None:
            return {name: Unavailable("no series: nothing is running") for name in queries}
        measured = r.draw(live.env)
        if measured is None:
            reason = (f"configuration {r.label(live.env)} was not recorded in {r.grid.path}: "
                      "the replay has no measurement of it")
            return {name: Unavailable(reason) for name in queries}
        return {name: measured[name] if name in measured else Unavailable(
                    f"no series: {name!r} was not recorded in this repeat of "
                    f"{r.label(live.env)} in {r.grid.path}")
                for name in queries}

    def close(self) -> None:
        return None
