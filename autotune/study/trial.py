"""One trial: apply -> warmup -> inject -> measure -> recover -> read. The undo steps always run.

Everything here talks to the backends only through their Protocols. The record this builds is
JSON-able and is what the journal and the Optuna user attrs receive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from autotune.chaos.base import Injection, Injector
from autotune.clock import Clock
from autotune.errors import AutotuneError, ChaosError, MetricsError, StressNotRecovered
from autotune.experiment.models import Burst, Experiment
from autotune.live import Live, Window
from autotune.metrics import promql
from autotune.metrics.base import MetricSource, RangeSource, Reading, Unavailable
from autotune.study import diagnostics
from autotune.study.interrupts import shielded
from autotune.targets.base import Env, NoiseProbe, Target

log = logging.getLogger(__name__)

# The dead-man switch must outlive a slow verification but not linger after a crash.
DEAD_MAN_MARGIN = 15.0


@dataclass(frozen=True)
class Backends:
    target: Target
    injector: Injector
    source: MetricSource


class TrialFailed(AutotuneError):
    """The trial could not produce a measurement; ``reason`` is recorded with it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


PhaseListener = Callable[[str], None]


class _Phases:
    """Times each phase: ``record["phases"]`` sums seconds per phase name; ``record["timeline"]``
    lists every phase run as ``[name, start, seconds]`` (start from the trial's first phase), so
    overhead and overlaps can be read per trial."""

    def __init__(self, clock: Clock, record: dict[str, Any], listener: PhaseListener) -> None:
        self.clock, self.record, self.listener = clock, record, listener
        self.current = "start"
        self.origin = clock.monotonic()

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.current = name
        self.listener(name)
        t0 = self.clock.monotonic()
        try:
            yield
        finally:
            seconds = self.clock.monotonic() - t0
            timings = self.record.setdefault("phases", {})
            timings[name] = round(timings.get(name, 0.0) + seconds, 3)
            self.record.setdefault("timeline", []).append(
                [name, round(t0 - self.origin, 3), round(seconds, 3)])


def measure(
    exp: Experiment,
    backends: Backends,
    env: Env,
    *,
    clock: Clock,
    labels: Mapping[str, str],
    record: dict[str, Any],
    on_phase: PhaseListener = lambda _: None,
) -> dict[str, float]:
    """Run the phases for one candidate; fill ``record``; return the metric values.

    Raises ``TrialFailed`` with the reason when no trustworthy measurement could be made.
    Interrupts propagate (after the undo steps ran).
    """
    phases = _Phases(clock, record, on_phase)
    try:
        with phases("apply"):
            live = backends.target.apply(env)
        record["live"] = dict(live.details)
        with phases("observe"):
            backends.source.observe(live)
        with phases("warmup"):
            clock.sleep(exp.measure.warmup)
        window = _measure_guarded(exp, backends, live, clock, labels, record, phases)
        with phases("read"):
            return _read(exp, backends.source, backends.target, live, window, record)
    except TrialFailed:
        raise
    except AutotuneError as e:
        raise TrialFailed(f"{phases.current}: {e}") from e


def _measure_guarded(
    exp: Experiment,
    b: Backends,
    live: Live,
    clock: Clock,
    labels: Mapping[str, str],
    record: dict[str, Any],
    phases: _Phases,
) -> Window:
    """Measure under stress, re-measuring while other processes on the host were too busy."""
    guard = exp.measure.noise_guard
    probe = b.target.noise_probe() if guard.enabled else None
    attempts: list[dict[str, Any]] = record.setdefault("attempts", [])
    tries = 1 + (guard.retries if probe is not None else 0)
    for attempt in range(tries):
        window, foreign = _stressed_window(exp, b, live, clock, labels, record, phases, probe)
        changes = b.target.check(live)
        if changes:
            record.setdefault("changes", []).append(dict(changes))
        attempts.append({"window": [window.start, window.end],
                         "foreign_cores": None if foreign is None else round(foreign, 3)})
        if foreign is None or foreign <= guard.max_foreign_cores:
            return window
        log.warning("other processes used %.2f cores during the window (limit %.2f); %s",
                    foreign, guard.max_foreign_cores,
                    "re-measuring" if attempt + 1 < tries else "giving up")
        if attempt + 1 < tries:
            with phases("warmup"):
                clock.sleep(min(exp.measure.warmup, 5.0))
    raise TrialFailed(
        f"noise guard: other processes used more than {guard.max_foreign_cores:g} cores in all "
        f"{tries} attempt(s) ({', '.join(str(a['foreign_cores']) for a in attempts)})"
    )


def _stressed_window(
    exp: Experiment,
    b: Backends,
    live: Live,
    clock: Clock,
    labels: Mapping[str, str],
    record: dict[str, Any],
    phases: _Phases,
    probe: NoiseProbe | None,
) -> tuple[Window, float | None]:
    """Stress and measure one window. The noise probe covers exactly the window (it ends before
    the stress is removed, so the stress's own CPU is still accounted as ours)."""
    pattern, stress, length = exp.chaos.pattern, exp.chaos.stress, exp.measure.window
    injections: list[dict[str, Any]] = record.setdefault("injections", [])

    def inject(duration: float) -> Injection:
        try:
            inj = b.injector.inject(live, stress, duration + DEAD_MAN_MARGIN, labels)
        except StressNotRecovered:
            raise
        except ChaosError:
            # A target that changed under us (its pods replaced by another writer) is the
            # cause of a stress that found no pod: say that instead, when it is so.
            b.target.check(live)
            raise
        injections.append({"id": inj.id, "started": inj.started, **dict(inj.details)})
        return inj

    def recover(inj: Injection) -> None:
        with shielded(), phases("recover"):
            b.injector.recover(inj)
        injections[-1]["recovered"] = clock.now()

    if not isinstance(pattern, Burst):
        with phases("inject"):
            inj = inject(length)
        try:
            start = clock.now()
            if probe is not None:
                probe.begin()
            with phases("measure"):
                clock.sleep(length)
            foreign = probe.end() if probe is not None else None
            # The nominal window: the sleep may overshoot by a millisecond, the queries must not.
            return Window(start, start + length), foreign
        finally:
            recover(inj)

    start = clock.now()
    end = start + length
    if probe is not None:
        probe.begin()
    with phases("measure"):
        while clock.now() < end:
            cycle = clock.now()
            inj = inject(pattern.burst)
            try:
                clock.sleep(min(pattern.burst, end - clock.now()))
            finally:
                recover(inj)
            clock.sleep(min(cycle + pattern.every, end) - clock.now())
    foreign = probe.end() if probe is not None else None
    return Window(start, end), foreign


def _read(
    exp: Experiment, source: MetricSource, target: Target, live: Live, window: Window,
    record: dict[str, Any],
) -> dict[str, float]:
    values = promql.values(live, window.seconds)
    queries = {name: promql.render(exp.metric(name).query, values) for name in exp.metrics
               if exp.metric(name).query}
    record["queries"] = queries
    record["window"] = {"start": window.start, "end": window.end, "seconds": window.seconds}
    readings: dict[str, Reading] = dict(source.read(queries, window, live))
    if exp.measure.schedtrace_period is not None:
        record["schedtrace"] = diagnostics.scheduler(exp, target, live, window)
        summary = record["schedtrace"].get("summary") or {}
        why = record["schedtrace"].get("unavailable", "not computed from this trace")
        for name in exp.metrics:
            figure = exp.metric(name).schedtrace
            if figure is not None:
                readings[name] = (summary[figure] if figure in summary
                                  else Unavailable(f"schedtrace: {why}"))
    if exp.measure.insight and isinstance(source, RangeSource):  # Prometheus, not a simulation
        record["insight"] = diagnostics.collect(exp, source, live, window)
    metrics: dict[str, float] = {}
    unavailable: dict[str, str] = {}
    for name in exp.metrics:
        reading = readings.get(name, Unavailable("the metric source returned nothing for it"))
        if isinstance(reading, Unavailable):
            unavailable[name] = reading.reason
        else:
            metrics[name] = reading
    record["metrics"] = metrics
    record["unavailable"] = unavailable
    missing = sorted(exp.required_metrics & unavailable.keys())
    if missing:
        raise MetricsError("; ".join(f"{m} unavailable: {unavailable[m]}" for m in missing))
    return metrics

