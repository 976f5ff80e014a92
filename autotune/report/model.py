"""The report as frozen data: what ``summarize`` computes and every renderer only renders.

Dict fields hold JSON-able data (settings, env, describe() output) and are never mutated.
Fractions (improvements, interval bounds) are fractions, not percent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from autotune.evidence.significance import Comparison, Verdict
from autotune.experiment.models import Scalar, Setting

SCHEMA_VERSION = 1

EvidenceKind = Literal["confirmation", "search", "none"]


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: Literal["minimize", "maximize"]
    unit: str


@dataclass(frozen=True)
class ParameterInfo:
    name: str
    env: str
    type: str
    values: tuple[Scalar, ...] | None
    low: float | None
    high: float | None
    log: bool


@dataclass(frozen=True)
class DeploymentRef:
    namespace: str
    name: str
    container: str


@dataclass(frozen=True)
class Environment:
    """Where and how the numbers were measured. "not recorded" where the study does not say."""

    target_kind: str
    target: dict[str, Any]
    """The target's describe() as recorded by the run."""
    cpu_limit: str
    go_version: str
    gomaxprocs_default: str
    """What GOMAXPROCS the service had with the variable unset (Go >= 1.25: its cgroup's CPU
    limit, else the CPUs it may run on)."""
    autotune_version: str
    """Of the code that wrote this report."""
    measured_with: tuple[str, ...]
    """autotune versions found in the trial records."""
    sampler: str
    stress: str
    measure: str
    study: str
    storage: str
    hosts: tuple[str, ...]
    first_trial: str | None
    last_trial: str | None
    generated: str


@dataclass(frozen=True)
class Spread:
    median: float
    min: float
    max: float
    n: int
    mean: float | None = None
    """What the report ranks candidates by after a confirmation (``significance.rank_key``: the
    mean, then the median), shown next to the median the verdict's interval is about. None in a
    report.json written before 2026-12-04 (the committed demo report, rendered by today's code
    in tests/report/test_browser.py)."""


@dataclass(frozen=True)
class MetricSummary:
    """One declared metric over a configuration's runs."""

    name: str
    unit: str
    values: tuple[float, ...]
    median: float | None
    unavailable: int
    """Runs in which it could not be read."""
    reasons: tuple[str, ...]
    """The distinct reasons recorded for those runs."""


@dataclass(frozen=True)
class Run:
    """One measurement used as evidence for a configuration."""

    study: Literal["search", "reference"]
    number: int
    round: int | None
    values: tuple[float, ...]
    feasible: bool


@dataclass(frozen=True)
class Configuration:
    id: str
    """"baseline", or "#N" where N is the first search trial that measured the settings."""
    trial: int | None
    settings: dict[str, Setting]
    env: dict[str, str | None]
    """Environment variables; None means "leave unset"."""
    runs: tuple[Run, ...]
    objectives: tuple[Spread, ...]
    """One per objective, over ``runs``."""
    metrics: tuple[MetricSummary, ...]
    """Every declared metric, in the experiment's order."""
    feasible: bool
    """Every run satisfied every constraint."""
    search_values: tuple[float, ...]
    """Primary objective of the search trials with these settings (empty for the baseline)."""
    comparisons: tuple[Comparison, ...]
    """Against the baseline, one per objective (empty for the baseline)."""


@dataclass(frozen=True)
class ScenarioCell:
    """One configuration under one chaos scenario: its runs' values of the metric there."""

    scenario: str
    values: tuple[float, ...]
    median: float | None
    comparison: Comparison | None
    """Against the baseline under the same scenario (None for the baseline itself)."""


@dataclass(frozen=True)
class ScenarioRow:
    config: str
    settings: dict[str, Setting]
    cells: tuple[ScenarioCell, ...]


@dataclass(frozen=True)
class Robustness:
    """Several chaos scenarios (``chaos.scenarios``): the top configurations under each."""

    metric: str
    """The primary objective's metric, read per scenario as ``<metric>@<scenario>``."""
    combine: str
    scenarios: tuple[str, ...]
    rows: tuple[ScenarioRow, ...]
    """The baseline, the chosen configuration, then the next candidates (at most 3 besides
    the baseline)."""
    winners: dict[str, str]
    """By scenario: the measured configuration with the best median there."""
    winner_runs: dict[str, int]
    """By scenario: how many runs the winner's median there rests on (1: a single search
    trial, as likely lucky as best)."""
    weakest: str | None
    """Where the chosen configuration gains least on the baseline, in words."""
    fragile: tuple[str, ...]
    """A scenario's own winner that loses clearly under another, in words."""


@dataclass(frozen=True)
class TrialRow:
    study: Literal["search", "reference"]
    number: int
    kind: str
    state: str
    settings: dict[str, Setting]
    values: tuple[float, ...] | None
    metrics: dict[str, float]
    unavailable: dict[str, str]
    constraints: dict[str, float]
    feasible: bool | None
    failure: str | None
    candidate: int | str | None
    round: int | None
    started: str | None
    seconds: float | None
    phases: dict[str, float]
    retry_of: int | None
    origin: str | None = None
    """Search trials: enqueued, prior, design or sampler (see autotune/study/design.py)."""
    timeline: tuple[tuple[str, float, float], ...] = ()
    """Every phase run: (name, start from the trial's first phase, seconds)."""
    member: str | None = None
    """The pool member that measured the trial (``target.kubernetes.pool``), else None."""
    at: float | None = None
    """When its measurement ended, epoch seconds (``autotune.study.record.measured_at``)."""
    step: Literal["extension", "tie-break"] | None = None
    """A confirmation run measured after the looks: in an extension round
    (``autotune.study.confirmation.extension``) or a tie-break
    (``autotune.study.confirmation.tiebreak``)."""


@dataclass(frozen=True)
class Failure:
    study: Literal["search", "reference"]
    number: int
    kind: str
    settings: dict[str, Setting]
    reason: str


@dataclass(frozen=True)
class HistoryPoint:
    """A complete search trial's primary objective, and the best feasible value so far."""

    number: int
    value: float
    feasible: bool
    best: float | None


@dataclass(frozen=True)
class SchedulerRow:
    """What one configuration did inside the Go runtime (medians over its runs; None: no run
    recorded it). Shares are 0..1; ``cpu`` in cores, from /cpu/classes."""

    id: str
    label: str
    runs: int
    throttled_share: float | None
    gc_cpu_share: float | None
    idle_share: float | None
    cpu: dict[str, float]
    overflow_runs: int | None
    """Runs whose run-queue overflow detector fired (None: no schedtrace)."""
    traced_runs: int
    overflow_longest: float | None
    runq_p999: float | None
    sched_p99: float | None
    gomaxprocs: int | None


@dataclass(frozen=True)
class Insight:
    rows: tuple[SchedulerRow, ...]
    """The baseline, the compared candidates, and the worst configuration measured."""
    explanation: str
    """Built only from figures in ``rows`` (autotune/insight/explain.py)."""
    chosen: str
    worst: str | None
    heat: dict[str, dict[str, Any]]
    """Per histogram (sched_latency, gc_pause): the baseline's and the chosen one's heat (one
    run each, nearest to its median), as stored by the trial."""


@dataclass(frozen=True)
class Counts:
    budget: int
    search_complete: int
    search_failed: int
    baseline_complete: int
    confirm_complete: int
    failed: int
    running: int
    search_screened: int = 0
    """Search trials screened out part-way (``study.screening``), counted in search_complete."""


@dataclass(frozen=True)
class Report:
    experiment: str
    description: str
    study: str
    objectives: tuple[Objective, ...]
    constraints: tuple[str, ...]
    parameters: tuple[ParameterInfo, ...]
    deployment: DeploymentRef | None
    environment: Environment
    counts: Counts
    evidence: EvidenceKind
    evidence_note: str
    method: str
    verdict: Verdict
    reason: str
    recommendation: str | None
    """The configuration id to adopt; None unless the verdict is "adopt"."""
    best_candidate: str | None
    """The recommendation, or else the most promising feasible candidate (for a forced export)."""
    repeats_needed: int | None
    separation: str | None
    """How the best candidate compares with the runner-up: better, equivalent within 5%, or not
    told apart (the interval's two ends in words)."""
    improvement: Comparison | None
    """The best candidate's primary comparison (a copy, for machine readers of report.json)."""
    baseline: Configuration | None
    candidates: tuple[Configuration, ...]
    """Best first: confirmed candidates by the mean of their runs (the order the verdict chooses
    in, ``significance.typical``), search-only ones by the primary objective's median."""
    baseline_band: Spread | None
    """The primary objective of the baseline repeats measured before the search."""
    history: tuple[HistoryPoint, ...]
    importance: dict[str, float] | None
    importance_note: str
    main_parameters: tuple[str, ...]
    """The (up to) two parameters the contour / heat map shows: the most important ones."""
    diagnostics: tuple[str, ...]
    """Declared metrics that are not part of an objective."""
    failures: tuple[Failure, ...]
    trials: tuple[TrialRow, ...]
    insight: Insight | None = None
    """Inside the Go scheduler (None: nothing was recorded, e.g. a simulated target)."""
    captures: tuple[dict[str, Any], ...] = ()
    """``measure.capture``: per configuration, the trace/profile files and how to open them, or
    why the capture failed (autotune/study/profiles.py)."""
    robustness: Robustness | None = None
    """With several chaos scenarios: the top configurations under each (None: one stress)."""
    schema: int = SCHEMA_VERSION

    def configuration(self, config_id: str | None) -> Configuration | None:
        for c in (self.baseline, *self.candidates):
            if c is not None and c.id == config_id:
                return c
        return None
