"""The record of one trial, filled as the trial runs and written once it ended.

``TrialRecord.as_attrs()`` gives the JSON-able dict the run journal and the Optuna user attr
``record`` receive. Its keys and value shapes are a stored format: reports, history and
``status`` read it back from studies and journals written by earlier versions, so a field only
appears once its step ran (a key absent and a key with an empty value say different things:
``attempts: []`` is a trial whose first stressed window failed, no ``attempts`` one that never
got that far).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.experiment.models import Setting
from autotune.study.kinds import TrialKind


@dataclass
class InjectionRecord:
    id: str
    started: float
    details: Mapping[str, Any]
    """The injector's own facts; stored beside ``id`` and ``started`` (and may override them,
    as they always could)."""
    recovered: float | None = None
    """Wall-clock time at which the stress was removed; ``None`` while it is on."""

    def as_attrs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "started": self.started, **dict(self.details)}
        if self.recovered is not None:
            out["recovered"] = self.recovered
        return out


@dataclass
class Attempt:
    """One stressed window and the CPU other processes on the host used during it."""

    start: float
    end: float
    foreign_cores: float | None

    def as_attrs(self) -> dict[str, Any]:
        return {"window": [self.start, self.end], "foreign_cores": self.foreign_cores}


@dataclass
class LoadCheck:
    """The served request rate against the baseline's (``measure.load``)."""

    metric: str
    rate: float
    baseline: float | None
    deviation: float | None = None
    """``rate / baseline - 1``; ``None`` while there is no baseline to compare with."""

    def as_attrs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"metric": self.metric, "rate": self.rate,
                               "baseline": self.baseline}
        if self.deviation is not None:
            out["deviation"] = self.deviation
        return out


@dataclass
class MeasuredWindow:
    start: float
    end: float
    seconds: float

    def as_attrs(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "seconds": self.seconds}


@dataclass
class ScenarioWindow:
    """One scenario's window of a trial that measures several (``chaos.scenarios``)."""

    name: str
    position: int
    """Its place in this trial's order (0: first), which rotates from trial to trial."""
    window: MeasuredWindow | None = None
    metrics: dict[str, float] | None = None
    unavailable: dict[str, str] | None = None
    schedtrace: dict[str, Any] | None = None
    insight: dict[str, Any] | None = None

    def as_attrs(self) -> dict[str, Any]:
        return _present({
            "name": self.name, "position": self.position,
            "window": None if self.window is None else self.window.as_attrs(),
            "metrics": self.metrics, "unavailable": self.unavailable,
            "schedtrace": self.schedtrace, "insight": self.insight,
        })


@dataclass
class EarlyRead:
    """The objective's metrics read part-way through a search trial's window (``study.screening``):
    over the window's first ``after`` seconds, while the stress still runs."""

    after: float
    metrics: dict[str, float]
    unavailable: dict[str, str] | None = None
    verdict: str | None = None
    """Why the candidate was screened out here (the trial ended); None: it went on."""

    def as_attrs(self) -> dict[str, Any]:
        return _present({"after": self.after, "metrics": self.metrics,
                         "unavailable": self.unavailable, "verdict": self.verdict})


def measured_at(record: Mapping[str, Any]) -> float | None:
    """When a stored trial's measurement ended, epoch seconds: its start plus its duration (the
    window closes just before the trial ends; ``autotune.evidence.drift`` puts runs on a time
    line with it), or None for a record without a start."""
    started, seconds = record.get("started"), record.get("seconds")
    if not isinstance(started, int | float):
        return None
    return float(started) + (float(seconds) if isinstance(seconds, int | float) else 0.0)


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


@dataclass
class Measurement:
    """What the phases of one trial (``trial.run_phases``) did and read. ``None`` (or, for
    ``phases``, ``timeline`` and ``changes``, empty) means the step that sets a field did not
    run."""

    phases: dict[str, float] = field(default_factory=dict)
    """Seconds per phase name, summed over the phase's runs."""
    timeline: list[tuple[str, float, float]] = field(default_factory=list)
    """Every phase run: name, start (seconds from the first phase), seconds."""
    live: dict[str, Any] | None = None
    attempts: list[Attempt] | None = None
    injections: list[InjectionRecord] | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)
    """What the target reported changed under us, per attempt that saw a change."""
    queries: dict[str, str] | None = None
    window: MeasuredWindow | None = None
    schedtrace: dict[str, Any] | None = None
    insight: dict[str, Any] | None = None
    metrics: dict[str, float] | None = None
    unavailable: dict[str, str] | None = None
    scenarios: list[ScenarioWindow] | None = None
    """With several chaos scenarios: each one's window and readings, in the order measured
    (``metrics`` then holds ``<metric>@<scenario>`` and the combination)."""
    early: list[EarlyRead] | None = None
    """Screening's reads part-way through the window (``study.screening``), in time order."""

    def as_attrs(self) -> dict[str, Any]:
        """The measurement's part of the stored record."""
        return _present({
            "phases": dict(self.phases) or None,
            "timeline": [list(run) for run in self.timeline] or None,
            "live": self.live,
            "attempts": None if self.attempts is None else [a.as_attrs() for a in self.attempts],
            "injections": (None if self.injections is None
                           else [i.as_attrs() for i in self.injections]),
            "changes": list(self.changes) or None,
            "queries": self.queries,
            "window": None if self.window is None else self.window.as_attrs(),
            "schedtrace": self.schedtrace, "insight": self.insight,
            "metrics": self.metrics, "unavailable": self.unavailable,
            "scenarios": (None if self.scenarios is None
                          else [w.as_attrs() for w in self.scenarios]),
            "early": None if self.early is None else [e.as_attrs() for e in self.early],
        })


@dataclass
class TrialRecord:
    """What one trial was, how it ran and what it measured. An optional field left ``None``
    is a step that did not run (or does not apply to the trial's kind)."""

    # --- known before the trial starts -----------------------------------------------------
    study: str
    number: int
    kind: TrialKind
    settings: dict[str, Setting]
    env: dict[str, str | None]
    started: float
    sampler: str
    autotune_version: str
    host: str
    experiment_hash: str
    target: str
    retry_of: Any = None
    """The number of the failed trial this one measures again (Optuna's ``failed_trial``)."""
    origin: str | None = None
    """Search trials: ``sampler``, or where a queued trial came from (design, prior, ...)."""
    why: str | None = None
    repaired_from: dict[str, Any] | None = None
    """Search trials: the sampler's proposal, when it repeated a measured configuration."""
    member: str | None = None
    """The pool member (``namespace/deployment``) that measured the trial (pools only)."""

    measurement: Measurement = field(default_factory=Measurement)
    """Filled by the phases (``trial.run_phases``)."""

    # --- the outcome (``loop``) -----------------------------------------------------------
    load: LoadCheck | None = None
    state: str | None = None
    values: list[float] | None = None
    constraints: dict[str, float] | None = None
    feasible: bool | None = None
    failure: str | None = None
    screened: str | None = None
    """Why a search trial was screened out part-way (state SCREENED; ``study.screening``)."""
    finished: float | None = None
    seconds: float | None = None

    def as_attrs(self) -> dict[str, Any]:
        """The stored form (see the module doc), keys in the order the steps set them."""
        out: dict[str, Any] = {
            "study": self.study, "number": self.number, "kind": self.kind.value,
            "settings": self.settings, "env": self.env, "started": self.started,
            "sampler": self.sampler, "autotune_version": self.autotune_version,
            "host": self.host, "experiment_hash": self.experiment_hash, "target": self.target,
        }
        out.update(_present({
            "retry_of": self.retry_of, "origin": self.origin, "why": self.why,
            "repaired_from": self.repaired_from, "member": self.member,
        }))
        out.update(self.measurement.as_attrs())
        out.update(_present({
            "load": None if self.load is None else self.load.as_attrs(),
            "state": self.state, "values": self.values, "constraints": self.constraints,
            "feasible": self.feasible, "failure": self.failure, "screened": self.screened,
            "finished": self.finished, "seconds": self.seconds,
        }))
        return out
