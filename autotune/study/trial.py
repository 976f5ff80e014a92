"""One trial: apply -> warmup -> inject -> measure -> recover -> read. The undo steps always run.

With several chaos scenarios (``chaos.scenarios``) the steps from inject to read run once per
scenario, in the trial's order (``autotune.study.scenarios.order``), a warm-up between two: the
service settles from one storm before the next window starts.

Everything here talks to the backends only through their Protocols. The steps fill the trial's
``Measurement`` (part of its ``TrialRecord``, which the loop stores once the trial ended).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from autotune import redaction
from autotune.chaos.base import Blocker, Injection, Injector
from autotune.clock import Clock
from autotune.errors import AutotuneError, ChaosError, MetricsError, StressNotRecovered
from autotune.experiment.expressions import split_scenario
from autotune.experiment.models import Burst, Experiment, Scenario
from autotune.live import Live, Window
from autotune.metrics import promql
from autotune.metrics.base import MetricSource, RangeSource, Reading, Unavailable
from autotune.study import diagnostics, scenarios
from autotune.study.interrupts import Interrupted, shielded
from autotune.study.record import (
    Attempt,
    EarlyRead,
    InjectionRecord,
    MeasuredWindow,
    Measurement,
    ScenarioWindow,
)
from autotune.targets.base import Env, NoiseProbe, Target

log = logging.getLogger(__name__)

# The dead-man switch must outlive a slow verification but not linger after a crash.
DEAD_MAN_MARGIN = 15.0


@dataclass(frozen=True)
class Backends:
    target: Target
    injector: Injector
    source: MetricSource
    blocker: Blocker | None = None
    """Holds the service's Ps for a ``blocked_p`` scenario (the local demo service only)."""


class TrialFailed(AutotuneError):
    """The trial could not produce a measurement; ``reason`` is recorded with it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Screened(Exception):
    """The candidate was judged hopeless part-way through its window (``study.screening``); the
    stress is removed and the trial ends. ``reason`` is the evidence, in words."""

    def __init__(self, reason: str, after: float, metrics: Mapping[str, float]) -> None:
        super().__init__(reason)
        self.reason, self.after, self.metrics = reason, after, dict(metrics)


class Screen(Protocol):
    """Judges a search trial part-way through its window (``autotune.study.screening``)."""

    @property
    def checkpoints(self) -> tuple[float, ...]:
        """Seconds into the window at which the metrics are read, ascending."""

    @property
    def reads(self) -> tuple[str, ...]:
        """The metrics read at each checkpoint: at least the objective's (a recording reads
        more, so that a replay can answer a shorter window from them)."""

    def judge(self, after: float, metrics: Mapping[str, float]) -> str | None:
        """Why the candidate is hopeless on the first ``after`` seconds (the trial ends), or
        None to go on."""


PhaseListener = Callable[[str], None]


def _no_listener(name: str) -> None:
    """Nobody displays the phases (the default of ``TrialContext.on_phase``)."""


@dataclass(frozen=True)
class TrialContext:
    """What every step of one trial works with; the loop builds it per trial."""

    exp: Experiment
    backends: Backends
    clock: Clock
    labels: Mapping[str, str]
    """Put on whatever the trial creates in the cluster (stress objects), to find it again."""
    measurement: Measurement
    """Filled by the steps as they run."""
    on_phase: PhaseListener = _no_listener
    number: int = 0
    """The trial's number: it rotates the order of several scenarios."""
    screen: Screen | None = None
    """Reads the objective part-way through the window and may end the trial (search trials
    under ``study.screening``; a recorded grid's short windows)."""


class _Phases:
    """Times each phase: ``phases`` sums seconds per phase name; ``timeline``
    lists every phase run as ``(name, start, seconds)`` (start from the trial's first phase), so
    overhead and overlaps can be read per trial."""

    def __init__(self, clock: Clock, measurement: Measurement, listener: PhaseListener) -> None:
        self.clock, self.measurement, self.listener = clock, measurement, listener
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
            timings = self.measurement.phases
            timings[name] = round(timings.get(name, 0.0) + seconds, 3)
            self.measurement.timeline.append((name, round(t0 - self.origin, 3), round(seconds, 3)))


def measure(
    exp: Experiment,
    backends: Backends,
    env: Env,
    *,
    clock: Clock,
    labels: Mapping[str, str],
    record: dict[str, Any],
    on_phase: PhaseListener = _no_listener,
    screen: Screen | None = None,
) -> dict[str, float]:
    """``run_phases`` for callers outside the study loop (the benchmarks): ``record`` receives
    the measurement's keys as the journal stores them, also when the trial fails."""
    measurement = Measurement()
    try:
        return run_phases(TrialContext(exp, backends, clock, labels, measurement, on_phase,
                                       screen=screen), env)
    finally:
        record.update(measurement.as_attrs())


def run_phases(ctx: TrialContext, env: Env) -> dict[str, float]:
    """Run the phases for one candidate; fill ``ctx.measurement``; return the metric values.

    Raises ``TrialFailed`` with the reason when no trustworthy measurement could be made, and
    ``Screened`` when ``ctx.screen`` ended the trial part-way. Interrupts propagate (after the
    undo steps ran).
    """
    phases = _Phases(ctx.clock, ctx.measurement, ctx.on_phase)
    try:
        with phases("apply"):
            live = ctx.backends.target.apply(env)
        ctx.measurement.live = dict(live.details)
        with phases("observe"):
            ctx.backends.source.observe(live)
        with phases("warmup"):
            ctx.clock.sleep(ctx.exp.measure.warmup)
        if not ctx.exp.chaos.scenarios:
            window = _measure_guarded(ctx, phases, live, ctx.exp.chaos.runs()[0])
            with phases("read"):
                return _read(ctx, live, window)
        return _each_scenario(ctx, phases, live)
    except TrialFailed:
        raise
    except AutotuneError as e:  # recorded in the study and shown by status and the report
        raise TrialFailed(redaction.scrub(f"{phases.current}: {e}")) from e


def _each_scenario(ctx: TrialContext, phases: _Phases, live: Live) -> dict[str, float]:
    """Measure and read every scenario in this trial's order; combine their values."""
    m = ctx.measurement
    m.scenarios = []
    per: dict[str, dict[str, float]] = {}
    problems = []
    for position, scenario in enumerate(scenarios.order(ctx.exp, ctx.number)):
        if position:
            with phases("warmup"):
                ctx.clock.sleep(ctx.exp.measure.warmup)
        record = ScenarioWindow(scenario.name, position)
        m.scenarios.append(record)
        m.window = m.metrics = m.unavailable = None  # never the previous scenario's
        window = _measure_guarded(ctx, phases, live, scenario)
        with phases("read"):
            try:
                per[scenario.name] = _read(ctx, live, window)
            except MetricsError as e:
                problems.append(f"under {scenario.name}: {e}")
            finally:
                record.window, record.metrics = m.window, m.metrics
                record.unavailable = m.unavailable
                record.schedtrace, record.insight = m.schedtrace, m.insight
                m.schedtrace = m.insight = None
    # The report's scheduler section reads one trace per trial: that of the first stormy
    # scenario in the file's order (each scenario's own stays in its window's record).
    windows = {w.name: w for w in m.scenarios}
    shown = next((windows[s.name] for s in ctx.exp.chaos.scenarios
                  if not s.quiet and s.name in windows), m.scenarios[0])
    m.schedtrace, m.insight = shown.schedtrace, shown.insight
    first, last = m.scenarios[0].window, m.scenarios[-1].window
    if first is not None and last is not None:
        m.window = MeasuredWindow(first.start, last.end, round(last.end - first.start, 3))
    m.metrics = scenarios.combine(ctx.exp, per)
    m.unavailable = {scenarios.qualified(name, w.name): why for w in m.scenarios
                     for name, why in (w.unavailable or {}).items()} or None
    if problems:
        raise MetricsError("; ".join(problems))
    return m.metrics


def _measure_guarded(ctx: TrialContext, phases: _Phases, live: Live,
                     scenario: Scenario) -> Window:
    """Measure under stress, re-measuring while other processes on the host were too busy."""
    exp, b, clock, m = ctx.exp, ctx.backends, ctx.clock, ctx.measurement
    guard = exp.measure.noise_guard
    probe = b.target.noise_probe() if guard.enabled else None
    if m.attempts is None:
        m.attempts = []
    attempts = m.attempts
    tries = 1 + (guard.retries if probe is not None else 0)
    for attempt in range(tries):
        window, foreign = _stressed_window(ctx, phases, live, probe, scenario)
        changes = b.target.check(live)
        if changes:
            m.changes.append(dict(changes))
        attempts.append(Attempt(window.start, window.end,
                                None if foreign is None else round(foreign, 3)))
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
        f"{tries} attempt(s) ({', '.join(str(a.foreign_cores) for a in attempts)})"
    )


def _stressed_window(
    ctx: TrialContext, phases: _Phases, live: Live, probe: NoiseProbe | None,
    scenario: Scenario,
) -> tuple[Window, float | None]:
    """Stress and measure one window. The noise probe covers exactly the window (it ends before
    the stress is removed, so the stress's own CPU is still accounted as ours). A scenario's
    held Ps (``blocked_p``) last the whole window, under any pattern."""
    exp, b, clock = ctx.exp, ctx.backends, ctx.clock
    pattern, stress, length = scenario.pattern, scenario.stress, exp.measure.window
    labels = dict(ctx.labels)
    named = scenario.name if exp.chaos.scenarios else None
    if named is not None:
        labels["autotune/scenario"] = named
    if ctx.measurement.injections is None:
        ctx.measurement.injections = []
    injections = ctx.measurement.injections

    def inject(duration: float) -> Injection | None:
        if stress is None:
            return None
        try:
            inj = b.injector.inject(live, stress, duration + DEAD_MAN_MARGIN, labels)
        except StressNotRecovered:
            raise
        except ChaosError:
            # A target that changed under us (its pods replaced by another writer) is the
            # cause of a stress that found no pod: say that instead, when it is so.
            b.target.check(live)
            raise
        injections.append(_injected(inj, named))
        return inj

    def recover(inj: Injection | None, during: BaseException | None) -> None:
        """Remove ``inj``; ``during``: what ends the window early, if anything."""
        if inj is None:
            return
        try:
            with shielded(), phases("recover"):
                b.injector.recover(inj)
        except ChaosError as e:
            if not isinstance(during, Interrupted) or isinstance(e, StressNotRecovered):
                raise  # a stress that may still run outranks what ended the window
            # The interrupt must go on: in its place this error would fail only the trial, and
            # the run would start the next one until the SIGKILL after the grace period. The
            # run's end removes the stress again (``StudyRunner._finish``), loudly if it can't.
            log.error("could not remove the stress while stopping on %s: %s", during.signame, e)
            return
        _recovered(injections, inj.id, clock.now())

    held = None
    if scenario.blocked_p is not None:
        if b.blocker is None:
            raise ChaosError(f"scenario {scenario.name}: blocked_p needs the local demo "
                             "service (nothing here can hold its Ps)")
        with phases("inject"):
            held = b.blocker.block(live, scenario.blocked_p, length + DEAD_MAN_MARGIN, labels)
    def early(start: float, after: float) -> None:
        _early(ctx, live, probe, start, after)

    failed = False
    try:
        if held is not None:
            injections.append(_injected(held, named))
        return _window(ctx, phases, probe, pattern, length, inject, recover, early)
    except BaseException:
        failed = True
        raise
    finally:
        if held is not None:
            assert b.blocker is not None
            try:
                with shielded(), phases("recover"):
                    b.blocker.release(held)
                _recovered(injections, held.id, clock.now())
            except ChaosError as e:
                if not failed or isinstance(e, StressNotRecovered):
                    raise  # Ps that may still be held outrank what ended the window
                # What ended the window (an interrupt, a lost stress) is the story; the run's
                # end releases the Ps again (_finish), and says so if it cannot either.
                log.error("could not release the held Ps of scenario %s: %s", scenario.name, e)


def _injected(inj: Injection, scenario: str | None) -> InjectionRecord:
    details = dict(inj.details)
    if scenario is not None:
        details.setdefault("scenario", scenario)
    return InjectionRecord(inj.id, inj.started, details)


def _recovered(injections: list[InjectionRecord], inj_id: str, when: float) -> None:
    for record in reversed(injections):
        if record.id == inj_id:
            record.recovered = when
            return


@contextmanager
def _removed_after(inj: Injection | None,
                   recover: Callable[[Injection | None, BaseException | None], None]
                   ) -> Iterator[None]:
    """The stress ``inj`` is removed when the block ends, told what ended it early (an
    interrupt, a screen's verdict, an error), if anything."""
    try:
        yield
    except BaseException as e:
        recover(inj, e)
        raise
    recover(inj, None)


def _window(
    ctx: TrialContext, phases: _Phases, probe: NoiseProbe | None,
    pattern: Burst | str, length: float,
    inject: Callable[[float], Injection | None],
    recover: Callable[[Injection | None, BaseException | None], None],
    early: Callable[[float, float], None],
) -> tuple[Window, float | None]:
    """One stressed window; ``early(start, after)`` at each of the screen's checkpoints."""
    clock = ctx.clock
    pending = [c for c in (ctx.screen.checkpoints if ctx.screen is not None else ())
               if c < length]
    if not isinstance(pattern, Burst):
        with phases("inject"):
            inj = inject(length)
        with _removed_after(inj, recover):
            start = clock.now()
            if probe is not None:
                probe.begin()
            with phases("measure"):
                for after in pending:
                    clock.sleep(max(0.0, start + after - clock.now()))
                    early(start, after)
                clock.sleep(max(0.0, start + length - clock.now()) if pending else length)
            foreign = probe.end() if probe is not None else None
        # The nominal window: the sleep may overshoot by a millisecond, the queries must not.
        return Window(start, start + length), foreign

    start = clock.now()
    end = start + length
    if probe is not None:
        probe.begin()
    with phases("measure"):
        while clock.now() < end:
            cycle = clock.now()
            inj = inject(pattern.burst)
            with _removed_after(inj, recover):
                clock.sleep(min(pattern.burst, end - clock.now()))
            clock.sleep(min(cycle + pattern.every, end) - clock.now())
            while pending and clock.now() - start >= pending[0] and clock.now() < end:
                early(start, pending.pop(0))  # at the first cycle's end past the checkpoint
    foreign = probe.end() if probe is not None else None
    return Window(start, end), foreign


def _queries(exp: Experiment, names: Iterable[str], live: Live, seconds: float) -> dict[str, str]:
    """The PromQL of each named metric that is a query, rendered for ``live`` over a window of
    ``seconds`` (a schedtrace figure is no query: it is left out)."""
    values = promql.values(live, seconds)
    return {name: promql.render(exp.metric(name).query, values) for name in names
            if exp.metric(name).query}


def _early(ctx: TrialContext, live: Live, probe: NoiseProbe | None, start: float,
           after: float) -> None:
    """Read the screen's metrics over the window's first ``after`` seconds and let the screen
    judge them; raise ``Screened`` when it says the candidate is hopeless. A read that fails,
    or a host that other processes kept busy so far, is recorded and judged by nobody: the
    trial goes on to its full window."""
    exp, screen, m = ctx.exp, ctx.screen, ctx.measurement
    assert screen is not None
    names = list(screen.reads)
    queries = _queries(exp, names, live, after)
    readings = ctx.backends.source.read(queries, Window(start, start + after), live)
    metrics = {n: r for n, r in readings.items() if not isinstance(r, Unavailable)}
    unavailable = {n: r.reason for n, r in readings.items() if isinstance(r, Unavailable)}
    unavailable.update({n: "not a query (screening reads Prometheus only)" for n in names
                        if n not in queries})
    if probe is not None:
        foreign, limit = probe.end(), exp.measure.noise_guard.max_foreign_cores
        if foreign > limit:
            unavailable["foreign_cores"] = (f"other processes used {foreign:.2f} cores so far "
                                            f"(limit {limit:g}): not judged")
    read = EarlyRead(after, metrics, unavailable or None)
    if m.early is None:
        m.early = []
    m.early.append(read)
    if unavailable:
        log.info("screening at %gs not judged: %s", after, "; ".join(
            f"{k}: {v}" for k, v in unavailable.items()))
        return
    read.verdict = screen.judge(after, metrics)
    if read.verdict is not None:
        raise Screened(read.verdict, after, metrics)


def _read(ctx: TrialContext, live: Live, window: Window) -> dict[str, float]:
    exp, source, m = ctx.exp, ctx.backends.source, ctx.measurement
    queries = _queries(exp, exp.metrics, live, window.seconds)
    m.queries = queries
    m.window = MeasuredWindow(window.start, window.end, window.seconds)
    readings: dict[str, Reading] = dict(source.read(queries, window, live))
    if exp.measure.schedtrace_period is not None:
        schedtrace = diagnostics.scheduler(exp, ctx.backends.target, live, window)
        m.schedtrace = schedtrace
        summary = schedtrace.get("summary") or {}
        why = schedtrace.get("unavailable", "not computed from this trace")
        for name in exp.metrics:
            figure = exp.metric(name).schedtrace
            if figure is not None:
                readings[name] = (summary[figure] if figure in summary
                                  else Unavailable(f"schedtrace: {why}"))
    if exp.measure.insight and isinstance(source, RangeSource):  # Prometheus, not a simulation
        m.insight = diagnostics.collect(exp, source, live, window)
    metrics: dict[str, float] = {}
    unavailable: dict[str, str] = {}
    for name in exp.metrics:
        reading = readings.get(name, Unavailable("the metric source returned nothing for it"))
        if isinstance(reading, Unavailable):
            unavailable[name] = reading.reason
        else:
            metrics[name] = reading
    m.metrics = metrics
    m.unavailable = unavailable
    required = {split_scenario(name)[0] for name in exp.required_metrics}
    missing = sorted(required & unavailable.keys())
    if missing:
        raise MetricsError("; ".join(f"{m} unavailable: {unavailable[m]}" for m in missing))
    return metrics

