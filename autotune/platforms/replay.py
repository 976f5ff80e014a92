"""A recorded grid played back: every trial answers with a measurement that really happened.

Trials on a real stack cost tens of seconds, so samplers and initial designs are compared offline
on a grid measured once (``benchmarks/grid_local.py`` writes it: one CSV row per trial, the
configuration as ``NAME=value ...`` with ``unset`` for a variable left unset, one column per
metric). For the configuration a trial applies, every metric comes from one recorded repeat of
it, drawn at random; the noise a study sees is the noise the stack really had. A configuration
the grid lacks reads as ``Unavailable``, so its trial fails with the reason instead of receiving
an invented value. The values were recorded under the grid's own stress: the replay does not
model a different ``chaos`` section.

A read over a shorter window than the recorded one answers from the repeat's
``<metric>_first_<N>s`` column (``grid_local.py --early N``), read live in the same trial: a
grid without it leaves the screen (``study.screening``) nothing to judge. The recorded window is
``measure.window``, or ``target.replay.window`` when the experiment measures a shorter window than
the grid did: its every window is then answered from the first seconds of the recorded ones, so
one recording answers "what would a shorter window have decided?".

Time is the injected clock's. Applying a configuration waits the drawn repeat's recorded
``overhead_s`` (restart, readiness and scrape lag beyond the warm-up and window: the grid's
median when a row lacks it); the trial's phases then wait the experiment's warm-up and window as
on a real stack. On a ``FakeClock`` (``autotune run`` of a ``target.replay``) the whole run takes
seconds, and the clock says how long the recording stack would have needed.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import math
import random
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.chaos.base import Injection
from autotune.clock import Clock
from autotune.errors import ChaosError, TargetError
from autotune.experiment.expressions import split_scenario
from autotune.experiment.models import BlockedP, Experiment, Parameter, Stress
from autotune.live import Live, Matcher, Window
from autotune.metrics.base import Reading, Unavailable
from autotune.runlock import RunLock
from autotune.study.scenarios import qualified
from autotune.study.trial import Backends
from autotune.targets.base import Env, NoiseProbe

UNSET = "unset"
# Bookkeeping columns grid_local.py writes before the metrics; every other column is a metric.
_NOT_METRICS = frozenset({"order", "config", "repeat", "state", "failure", "seconds",
                          "overhead_s", "foreign_cores_max", "attempts", "warmup_s"})

Measurement = Mapping[str, float]


def early_column(metric: str, after: float) -> str:
    """The grid column of ``metric`` read over a window's first ``after`` seconds."""
    return f"{metric}_first_{after:g}s"

EnvKey = tuple[str | None, ...]


@dataclass(frozen=True)
class Repeat:
    """One recorded trial of a configuration: what it measured and what it cost."""

    metrics: Measurement
    overhead: float | None
    """Seconds beyond warm-up and window (restart, readiness); None if not recorded."""


@dataclass(frozen=True)
class ReplayGrid:
    """The COMPLETE rows of a recorded grid: configuration label -> its repeats."""

    path: Path
    rows: Mapping[str, tuple[Repeat, ...]]
    metrics: tuple[str, ...]
    skipped: int
    """Rows that were not COMPLETE (a failed trial has no measurement to replay)."""
    sha256: str = ""
    """Of the file's bytes: which recording this is, whatever its path."""

    @property
    def overhead(self) -> float:
        """The median recorded overhead of every repeat (0 when none was recorded)."""
        known = [r.overhead for reps in self.rows.values() for r in reps
                 if r.overhead is not None]
        return statistics.median(known) if known else 0.0

    @classmethod
    def load(cls, path: str | Path) -> ReplayGrid:
        path = Path(path)
        try:
            data = path.read_bytes()
            reader = csv.DictReader(data.decode("utf-8").splitlines())
            columns = list(reader.fieldnames or [])
            records = list(reader)
        except OSError as e:
            raise TargetError(f"cannot read the grid {path}: {e.strerror or e}") from None
        except (UnicodeDecodeError, csv.Error):
            raise TargetError(f"{path} is not a recorded grid: not a UTF-8 CSV file") from None
        if not {"config", "state"} <= set(columns):
            # Its content is not echoed: the path may name any file (a .env, a key).
            raise TargetError(f"{path} is not a recorded grid: its first line has no columns "
                              "named config and state (benchmarks/grid_local.py writes them)")
        metrics = tuple(c for c in columns if c not in _NOT_METRICS)
        rows: dict[str, list[Repeat]] = {}
        skipped = 0
        for record in records:
            if record["state"] != "COMPLETE":
                skipped += 1
                continue
            rows.setdefault(record["config"].strip(), []).append(
                Repeat(_measurement(record, metrics), _seconds(record.get("overhead_s"))))
        return cls(path, {k: tuple(v) for k, v in rows.items()}, metrics, skipped,
                   hashlib.sha256(data).hexdigest())


def _seconds(text: str | None) -> float | None:
    try:
        value = float(text or "nan")
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


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


@dataclass
class _Storm:
    start: float
    expires: float
    scenario: str | None
    end: float | None = None


class Replay:
    """A grid seen through one experiment's parameters, and the state its three backends share:
    what is applied, which stress is in place, and a random stream per configuration (so two
    strategies that measure a configuration equally often, with the same seed, get the same
    values: the comparison is not blurred by luck in the draws)."""

    def __init__(self, exp: Experiment, grid: ReplayGrid, clock: Clock,
                 seed: int | None = None) -> None:
        self.exp, self.grid, self.clock, self.seed = exp, grid, clock, seed
        spec = exp.target.replay
        self.recorded_window = spec.window if spec is not None and spec.window is not None \
            else exp.measure.window
        """The window the grid's plain columns were measured over."""
        if exp.measure.window > self.recorded_window + 1e-6:
            raise TargetError(f"measure.window ({exp.measure.window:g}s) is longer than the "
                              f"window the grid was recorded with (target.replay.window "
                              f"{self.recorded_window:g}s): a replay cannot lengthen a measurement")
        needed = {self.column(m) for m in exp.required_metrics}
        for scenario in exp.chaos.scenarios:
            needed |= {qualified(self.column(split_scenario(m)[0]), scenario.name)
                       for m in exp.required_metrics}
        missing = sorted(needed - set(grid.metrics))
        if missing:
            # Every trial would fail on them: refuse before the first one.
            raise TargetError(f"{grid.path} has no column for the metric(s) {', '.join(missing)} "
                              f"the objective, constraints or measure.load need (its metrics: "
                              f"{', '.join(grid.metrics) or 'none'})")
        self.vars = tuple(p.env_var for p in exp.parameters)
        self.configs: dict[EnvKey, tuple[Repeat, ...]] = {}
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
        self.current: Repeat | None = None
        """The repeat the applied configuration answers with (drawn when it is applied)."""
        self.generation = 0
        self.active: dict[str, float] = {}
        """Injection id -> the time its dead-man switch ends it."""
        self.storms: dict[str, _Storm] = {}
        """Injection id -> when it ran, and its scenario: which one a window was under."""
        self.injections = itertools.count(1)
        self._streams: dict[EnvKey, random.Random] = {}

    def backends(self, lock: RunLock | None = None) -> Backends:
        return Backends(target=ReplayService(self, lock), injector=ReplayInjector(self),
                        source=ReplayMetrics(self), blocker=ReplayBlocker(self))

    def started(self, prefix: str, duration: float, labels: Mapping[str, str]) -> str:
        """Book a stress (or held Ps) from now for ``duration``; return its id."""
        if self.applied is None:
            raise ChaosError("nothing is running to inject into")
        inj_id = f"{prefix}-{next(self.injections)}"
        now = self.clock.now()
        self.active[inj_id] = now + duration
        self.storms[inj_id] = _Storm(now, now + duration, labels.get("autotune/scenario"))
        return inj_id

    def ended(self, inj_id: str) -> None:
        self.active.pop(inj_id, None)
        storm = self.storms.get(inj_id)
        if storm is not None and storm.end is None:
            storm.end = self.clock.now()

    def column(self, metric: str, seconds: float | None = None) -> str:
        """The grid column answering ``metric`` over a window of ``seconds`` (the experiment's
        window when None): its first-seconds column when shorter than the recorded window."""
        seconds = self.exp.measure.window if seconds is None else seconds
        return early_column(metric, seconds) if seconds < self.recorded_window - 1e-6 else metric

    def scenario(self, window: Window) -> str | None:
        """The scenario ``window`` was measured under (module doc); None without scenarios or
        when it cannot be told."""
        scenarios = self.exp.chaos.scenarios
        if not scenarios:
            return None
        under: dict[str, float] = {}
        for storm in self.storms.values():
            stop = min(storm.expires if storm.end is None else storm.end, window.end)
            overlap = stop - max(storm.start, window.start)
            if storm.scenario is not None and overlap > 0:
                under[storm.scenario] = under.get(storm.scenario, 0.0) + overlap
        if under:
            return max(under, key=lambda n: under[n])
        quiet = [s.name for s in scenarios if s.quiet]
        return quiet[0] if len(quiet) == 1 else None

    def key(self, env: Env) -> EnvKey:
        return tuple(env.get(var) for var in self.vars)

    def label(self, env: Env) -> str:
        return " ".join(f"{p.name}={UNSET if v is None else v}"
                        for p, v in zip(self.exp.parameters, self.key(env), strict=True))

    def recorded(self, env: Env) -> tuple[Measurement, ...]:
        """Every recorded repeat of the configuration (empty if the grid lacks it)."""
        return tuple(r.metrics for r in self.configs.get(self.key(env), ()))

    def draw(self, env: Env) -> Repeat | None:
        key = self.key(env)
        repeats = self.configs.get(key)
        if not repeats:
            return None
        if key not in self._streams:
            self._streams[key] = random.Random(
                None if self.seed is None else f"{self.seed}:{self.label(env)}")
        return self._streams[key].choice(repeats)


class ReplayService:
    """The Target: applying is bookkeeping, and waits the recorded overhead on the clock.
    ``lock``: the experiment's run lock, held while the service exists (``autotune run``; a
    benchmark's private study needs none)."""

    def __init__(self, replay: Replay, lock: RunLock | None = None) -> None:
        self.replay, self.lock = replay, lock
        if lock is not None:
            lock.acquire()

    def describe(self) -> dict[str, Any]:
        r = self.replay
        facts: dict[str, Any] = {
            "kind": "replay", "grid": str(r.grid.path), "grid_sha256": r.grid.sha256,
            "configurations": len(r.configs),
            "measurements": sum(len(v) for v in r.configs.values()),
            "outside_space": r.outside, "failed_rows": r.grid.skipped,
            "overhead_median_s": round(r.grid.overhead, 3),
            "recorded_window_s": r.recorded_window}
        # The CPU limit the grid was recorded with is a fact of the recording, which the initial
        # design's prior needs: target.replay.cpus, or the local target a benchmark replays.
        target = r.exp.target
        cpus = (target.replay.cpus if target.replay is not None
                else target.local.cpus if target.local is not None else None)
        if cpus is not None:
            facts["cpus"] = cpus
        return facts

    def apply(self, env: Env) -> Live:
        r = self.replay
        unknown = set(env) - set(r.vars)
        if unknown:
            raise TargetError(f"unknown variables {sorted(unknown)}")
        r.generation += 1
        r.applied = dict(env)
        r.current = r.draw(env)
        overhead = r.current.overhead if r.current is not None else None
        r.clock.sleep(r.grid.overhead if overhead is None else overhead)
        return Live(env=dict(env), since=r.clock.now(), scope=(Matcher("job", "replay"),),
                    details={"generation": r.generation, "configuration": r.label(env)})

    def check(self, live: Live) -> Mapping[str, Any]:
        if live.details.get("generation") != self.replay.generation:
            raise TargetError("the replayed service was reconfigured during the window")
        return {}

    def restore(self, best: Env | None = None) -> None:
        self.replay.applied = self.replay.current = None

    def cleanup(self) -> list[str]:
        applied, self.replay.applied, self.replay.current = self.replay.applied, None, None
        return [] if applied is None else [f"replayed settings {self.replay.label(applied)}"]

    def noise_probe(self) -> NoiseProbe | None:
        return None  # a recording has no neighbours


class ReplayInjector:
    def __init__(self, replay: Replay) -> None:
        self.replay = replay

    def inject(self, live: Live, stress: Stress, duration: float,
               labels: Mapping[str, str]) -> Injection:
        r = self.replay
        inj_id = r.started("replay", duration, labels)
        return Injection(id=inj_id, started=r.clock.now(),
                         details={"workers": stress.workers, "load": stress.load})

    def recover(self, injection: Injection) -> None:
        self.replay.ended(injection.id)

    def active(self) -> list[str]:
        now = self.replay.clock.now()
        return [i for i, expires in self.replay.active.items() if expires > now]

    def cleanup(self) -> list[str]:
        removed = list(self.replay.active)
        for inj_id in removed:
            self.replay.ended(inj_id)
        return [f"replayed injection {i}" for i in removed]


class ReplayBlocker:
    """Held Ps (``blocked_p``) booked like a stress: the recording held them for real."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay

    def block(self, live: Live, spec: BlockedP, duration: float,
              labels: Mapping[str, str]) -> Injection:
        r = self.replay
        inj_id = r.started("replay-held", duration, labels)
        return Injection(id=inj_id, started=r.clock.now(),
                         details={"goroutines": spec.goroutines})

    def release(self, injection: Injection) -> None:
        self.replay.ended(injection.id)

    def cleanup(self) -> list[str]:
        return []  # the injector's cleanup ends every booked one, held Ps too


class ReplayMetrics:
    """Answers each metric by name (the grid's columns are the experiment's metric names), all
    from the repeat drawn when the configuration was applied; the rendered query text plays no
    part."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay

    def observe(self, live: Live) -> None:
        return None

    def read(self, queries: Mapping[str, str], window: Window, live: Live) -> dict[str, Reading]:
        r = self.replay
        if r.applied is None:
            return {name: Unavailable("no series: nothing is running") for name in queries}
        drawn = r.current
        if drawn is None:
            reason = (f"configuration {r.label(live.env)} was not recorded in {r.grid.path}: "
                      "the replay has no measurement of it")
            return {name: Unavailable(reason) for name in queries}
        measured = drawn.metrics
        columns = {name: r.column(name, window.seconds) for name in queries}
        if r.exp.chaos.scenarios:
            scenario = r.scenario(window)
            if scenario is None:
                return {name: Unavailable("the replay cannot tell which scenario this window "
                                          "was measured under") for name in queries}
            columns = {name: qualified(column, scenario) for name, column in columns.items()}
        return {name: measured[column] if column in measured else Unavailable(
                    f"no series: {column!r} was not recorded in this repeat of "
                    f"{r.label(live.env)} in {r.grid.path}")
                for name, column in columns.items()}

    def close(self) -> None:
        return None
