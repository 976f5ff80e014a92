"""The experiment file as frozen, typed models.

Pydantic checks structure (types, unknown keys, ranges of single fields); the cross-field rules
(a baseline value inside its parameter's range, objectives naming known metrics, ...) live in
``checks.py`` so that every problem is reported with its path in the file.

Its size (~560 lines) is the whole schema of an experiment file, kept in one place so that a
reader (and ``autotune schema``) sees every field and its description together.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from autotune.experiment.durations import DURATION_PATTERN, parse_duration
from autotune.experiment.expressions import Constraint, parse_constraint

MAX_DURATION = 365 * 86400.0
"""No period of a tuning run needs more than a year; far larger ones overflow the timers that
wait for them (``time.sleep`` takes at most ~292 years) and crash a run that validated."""


def _not_infinite(value: object) -> object:
    """A YAML .nan/.inf is a float: refused like any non-finite number (the model config's
    ``allow_inf_nan=False``), before ``parse_duration`` turns -.inf into "must not be
    negative" and lets .nan through."""
    if isinstance(value, float) and not math.isfinite(value):
        raise PydanticCustomError("finite_number", "Input should be a finite number")
    return value


def _at_most_a_year(seconds: float) -> float:
    if seconds > MAX_DURATION:
        raise ValueError("must be at most 365d")
    return seconds


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    BeforeValidator(_not_infinite),  # the last one listed runs first
    AfterValidator(_at_most_a_year),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": DURATION_PATTERN},
                {"type": "number", "minimum": 0, "maximum": MAX_DURATION},
            ],
            "description": "seconds, or a duration such as 500ms, 15s, 1m30s, 2h (at most 365d)",
        }
    ),
]
Scalar = int | float | str | bool
# Numbers are numbers: without Strict, pydantic turns `low: true` into 1.0 and `cpus: "2"` into
# 2.0 (a YAML boolean or a quoted string where a number was meant is a mistake to name, not to
# guess). An int still counts as a Number.
Number = Annotated[float, Strict()]
Count = Annotated[int, Strict()]
Setting = Scalar | None

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
IDENT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class Model(BaseModel):
    # allow_inf_nan: no number in an experiment may be NaN or infinite (YAML's .nan, .inf, or
    # text such as "inf"): one rule for every float field, in every model, tuple and mapping.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


MAX_ENUMERATED = 10_000
"""A range with more values than this is treated as continuous (sampled, never exhausted)."""


class Parameter(Model):
    """One runtime setting, applied as an environment variable of the service."""

    name: str = Field(pattern=IDENT_PATTERN, description="name used in baseline and reports")
    env: str | None = Field(
        default=None, pattern=IDENT_PATTERN, description="environment variable (default: name)"
    )
    type: Literal["int", "float", "categorical"]
    values: tuple[Scalar, ...] | None = Field(default=None, description="the allowed values")
    low: Number | None = None
    high: Number | None = None
    step: Number | None = Field(default=None, gt=0)
    log: bool = False
    description: str = ""

    @property
    def env_var(self) -> str:
        return self.env or self.name

    def contains(self, value: Scalar) -> bool:
        if self.values is not None:
            return any(value == v and type(value) is type(v) for v in self.values) or (
                self.type == "float" and _is_number(value) and float(value) in self.values
            )
        assert self.low is not None and self.high is not None
        if not _is_number(value) or (self.type == "int" and not isinstance(value, int)):
            return False
        if not self.low <= float(value) <= self.high:
            return False
        if self.step is not None:
            k = (float(value) - self.low) / self.step
            return abs(k - round(k)) < 1e-9
        return True

    def format(self, value: Scalar) -> str:
        """The environment-variable text of a value."""
        if isinstance(value, bool):
            return "true" if value else "false"
        if self.type == "int" and isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Baseline(Model):
    """The settings in production today; a parameter left out (or null) means "variable unset"."""

    repeats: Count = Field(default=3, ge=1, le=50)
    params: dict[str, Setting] = Field(default_factory=dict)


class LoadSpec(Model):
    """Open-loop HTTP load sent to a local target (127.0.0.1 only)."""

    rate: Annotated[float, Field(gt=0, le=50000)] | Literal["auto"] = Field(
        default=400.0,
        description="requests per second, or auto: a short unstressed calibration measures the "
                    "service's capacity under its CPU limit and sends auto_fraction of it",
    )
    auto_fraction: Number = Field(
        default=0.5, gt=0, le=0.95, description="with rate: auto, the share of measured capacity"
    )
    path: str = Field(default="/", pattern=r"^/")
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    body: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    connections: Count = Field(default=64, ge=1, le=10000)
    timeout: Duration = 5.0


class LocalTarget(Model):
    """Run the service on this machine in a CPU-limited cgroup, restarting it for each trial."""

    workload: Literal["demo"] | None = Field(
        default=None, description="a workload shipped with autotune (default: demo)"
    )
    command: tuple[str, ...] | None = Field(
        default=None, min_length=1,
        description="argv of your own service; '{port}' is replaced by the port it must use",
    )
    cwd: str | None = None
    port: Count | None = Field(default=None, ge=1, le=65535, description="default: a free port")
    health: str = Field(default="/healthz", pattern=r"^/")
    metrics_path: str | None = Field(
        default="/metrics", pattern=r"^/",
        description="Prometheus metrics of the service; null if it has none",
    )
    env: dict[str, str] = Field(default_factory=dict)
    cpus: Number = Field(default=1.0, gt=0, le=256, description="CFS quota, in CPUs")
    isolation: Literal["auto", "cpuset", "cgroup", "affinity"] = Field(
        default="auto",
        description="cpuset: the service (and its stress) get their own CPU(s) and quota, the "
                    "load generator and Prometheus the others; cgroup: quota only; affinity: "
                    "CPU pinning where no cgroup can be written; auto: the best this host allows",
    )
    ready_timeout: Duration = 30.0
    load: LoadSpec = Field(default_factory=LoadSpec)


# A Kubernetes resource quantity (apimachinery resource.Quantity), e.g. 250m, 1, 1.5, 64Mi, 1G.
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"


class LoadResources(Model):
    """Requests and limits of the load generator's container (Kubernetes quantities)."""

    cpu_request: str = Field(default="250m", pattern=_QUANTITY)
    cpu_limit: str = Field(default="1", pattern=_QUANTITY)
    memory_request: str = Field(default="64Mi", pattern=_QUANTITY)
    memory_limit: str = Field(default="256Mi", pattern=_QUANTITY)


class ClusterLoad(Model):
    """autotune's open-loop load generator as a pod in the target's namespace, sending to a
    Service: every trial gets the same load, and its client-side histogram
    (``loadgen_request_duration_seconds``, selected by ``{{load_selector}}``) can be the
    objective."""

    url: str = Field(pattern=r"^http://[^/@\s]+(/\S*)?$",
                     description="the Service to load, e.g. http://api.shop.svc:8080/")
    rate: Number = Field(gt=0, le=1e6, description="requests per second, open loop")
    connections: Count = Field(default=64, ge=1, le=10000)
    image: str = Field(min_length=1, description="an image with /usr/local/bin/autotune-loadgen "
                                                 "(deploy/Dockerfile builds one)")
    metrics_port: Count = Field(default=9100, ge=1, le=65535)
    ready_timeout: Duration = 120.0
    resources: LoadResources = Field(
        default_factory=lambda: LoadResources(),
        description="the generator container's requests and limits (a namespace with a "
                    "ResourceQuota rejects a pod without them)")
    image_pull_secrets: tuple[str, ...] = Field(
        default=(), description="names of Secrets in the namespace to pull the image with")


class KubernetesTarget(Model):
    """Patch the env of one container of one Deployment and wait for the rollout."""

    namespace: str
    deployment: str
    container: str
    context: str | None = None
    kubeconfig: str | None = None
    rollout_timeout: Duration = 300.0
    on_finish: Literal["restore", "best", "leave"] = "restore"
    pprof_port: Count | None = Field(
        default=None, ge=1, le=65535,
        description="the container port serving net/http/pprof, for measure.capture (reached "
                    "through the API server's pod proxy)")
    load: ClusterLoad | None = Field(
        default=None, description="run autotune's load generator in the namespace for every "
                                  "measured candidate")
    allow_external_writers: bool = Field(
        default=False,
        description="run even when something besides autotune sets the tuned variables: an "
                    "envFrom source that may define them (an 'unset' candidate then is not "
                    "unset) or a GitOps controller that owns the env (Argo CD, Flux: it may "
                    "revert each candidate). Without it, run and validate --cluster refuse and "
                    "say why")


class SimulatedTarget(Model):
    """A known response surface with noise, for trying autotune and for testing it.

    A metric whose query is ``surface`` reads ``floor * (1 + sensitivity * d^2)`` times a stress
    factor, where ``d`` is the normalised distance of the applied settings from ``optimum``;
    a metric whose query is ``stress`` reads the fraction of the window under stress.
    """

    optimum: dict[str, Scalar]
    unset: dict[str, Scalar] = Field(
        default_factory=dict, description="value the runtime uses when a variable is unset"
    )
    floor: Number = Field(default=0.002, gt=0)
    sensitivity: Number = Field(default=4.0, ge=0)
    noise: Number = Field(default=0.03, ge=0, le=1)
    stress_factor: Number = Field(default=3.0, ge=1)
    apply_seconds: Duration = 0.0
    state_file: str | None = Field(
        default=None, description="where the simulated world keeps its state (default: results/)"
    )


class Target(Model):
    local: LocalTarget | None = None
    kubernetes: KubernetesTarget | None = None
    simulated: SimulatedTarget | None = None

    @property
    def kind(self) -> str:
        for kind in ("local", "kubernetes", "simulated"):
            if getattr(self, kind) is not None:
                return kind
        return "none"


class Stress(Model):
    """CPU stress as Chaos Mesh's StressChaos ``stressors.cpu`` / stress-ng ``--cpu/--cpu-load``."""

    workers: Count = Field(ge=1, le=8192)
    load: Count = Field(default=100, ge=1, le=100, description="percent of a CPU per worker")


class Burst(Model):
    every: Duration
    burst: Duration


class Chaos(Model):
    stress: Stress
    pattern: Literal["continuous"] | Burst = "continuous"


PROMETHEUS_URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\s]+([/?#]\S*)?$"


def _prometheus_url(url: object) -> object:
    """``prometheus.url`` is checked here, not by a ``pattern``: pydantic's error for a pattern
    quotes the value, and this one may hold a password (``https://user:password@host``). No
    message shows it."""
    if not isinstance(url, str):
        return url  # None, or not text: reported as such
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ValueError("must start with http:// or https:// (the value is not shown: it may "
                         "hold a password)")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError("has a space or a control character (percent-encode it)")
    authority = rest
    for stop in "/?#":
        authority = authority.split(stop, 1)[0]
    host = authority.rpartition("@")[2]
    if host.startswith("["):  # an IPv6 address
        name, _, port = host[1:].partition("]")
        port = port.removeprefix(":")
    else:
        name, _, port = host.partition(":")
    if not name:
        raise ValueError("has no host")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError("the port is not a number from 1 to 65535 (a '/', '?', '#' or '@' in "
                         "the user name or password must be percent-encoded: %2F, %3F, %23, "
                         "%40)")
    return url


class Prometheus(Model):
    url: Annotated[
        str | None,
        BeforeValidator(_prometheus_url),
        WithJsonSchema({"anyOf": [{"type": "string", "pattern": PROMETHEUS_URL_PATTERN},
                                  {"type": "null"}]}),
    ] = Field(
        default=None,
        description="an existing Prometheus (http:// or https://; a user and password in it are "
                    "sent as HTTP basic auth); omit for local targets to start a private one",
    )
    scrape_interval: Duration = Field(
        default=1.0,
        description="how often Prometheus scrapes the service; our private one scrapes at this "
                    "(default 1s). For an existing server (url) what it reports wins "
                    "(/api/v1/targets, /api/v1/status/config); where it reports neither (a query "
                    "front end) a value set here is used, else the spacing of the service's up "
                    "samples, else autotune refuses to start. The default is never assumed for "
                    "an existing server",
    )
    token_env: str | None = Field(default=None, description="env var holding a bearer token")
    token_file: str | None = None
    verify_tls: bool = True
    ca_file: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: Duration = 10.0


class NoiseGuard(Model):
    """Re-measure a trial when other processes on the host used too much CPU during it."""

    enabled: bool = True
    max_foreign_cores: Number = Field(default=0.3, ge=0)
    retries: Count = Field(default=2, ge=0, le=10)


class LoadCheck(Model):
    """Trials compare only under the same load: a window whose served request rate differs from
    the baseline's by more than ``tolerance`` is not a measurement (the trial fails with the
    figures). Required for cluster targets, where autotune does not generate the load."""

    metric: str = Field(description="a metric giving the request rate served in the window")
    tolerance: Number = Field(default=0.1, gt=0, le=1,
                             description="largest relative difference from the baseline's "
                                         "median rate (0.1 = 10%)")


class Measure(Model):
    warmup: Duration = 20.0
    window: Duration = 60.0
    noise_guard: NoiseGuard = Field(default_factory=NoiseGuard)
    load: LoadCheck | None = None
    insight: bool = Field(
        default=True, description="per trial, the scheduling-latency and GC-pause distributions "
                                  "over the window and where the CPU went (/cpu/classes, CFS "
                                  "throttling), for the report's explanation")
    schedtrace: bool | Duration = Field(
        default=False, description="run the service with GODEBUG=schedtrace=<period> (true: "
                                   "100ms) and keep the run queues per trial; local targets")
    overflow_threshold: Count | None = Field(
        default=None, ge=1, description="run-queue overflow: total runnable goroutines p99.9 "
                                        "held this high for >= 2.5 s (default 128 x GOMAXPROCS)")
    capture: tuple[Literal["trace", "cpu"], ...] = Field(
        default=(), description="after confirmation, a runtime trace and/or CPU profile of the "
                                "baseline and the recommendation under stress (local targets)")

    @property
    def schedtrace_period(self) -> float | None:
        """Seconds between schedtrace lines, or None when off."""
        if self.schedtrace is False:
            return None
        if self.schedtrace is True:
            return 0.1
        return float(self.schedtrace)

    @property
    def schedtrace_ms(self) -> int | None:
        """The GODEBUG=schedtrace=<ms> value, or None when off."""
        period = self.schedtrace_period
        return None if period is None else max(1, round(period * 1000))


SCHEDTRACE_METRICS = ("runq_global_p999", "runq_global_max", "runq_local_max",
                      "runq_total_p999", "idle_procs_mean", "threads_max", "spinning_mean",
                      "overflow_count", "overflow_longest")
"""What ``measure.schedtrace`` yields per trial (autotune/insight/schedtrace.py, overflow.py)."""


class Metric(Model):
    query: str = Field(default="", description="PromQL; {{selector}} and {{window}} filled in")
    schedtrace: Literal[SCHEDTRACE_METRICS] | None = Field(  # type: ignore[valid-type]
        default=None, description="instead of a query: a figure of the window's schedtrace "
                                  "(needs measure.schedtrace)")
    description: str = ""
    unit: str = ""

    @model_validator(mode="after")
    def _one_source(self) -> Metric:
        if bool(self.query) == (self.schedtrace is not None):
            raise ValueError("give exactly one of query (PromQL) and schedtrace")
        return self


class Goal(Model):
    """Minimize or maximize one metric, or a weighted sum of metrics."""

    minimize: str | dict[str, float] | None = None
    maximize: str | dict[str, float] | None = None

    @property
    def direction(self) -> Literal["minimize", "maximize"]:
        return "minimize" if self.minimize is not None else "maximize"

    @property
    def terms(self) -> dict[str, float]:
        spec = self.minimize if self.minimize is not None else self.maximize
        if isinstance(spec, str):
            return {spec: 1.0}
        return dict(spec or {})

    @property
    def label(self) -> str:
        terms = self.terms
        if len(terms) == 1 and next(iter(terms.values())) == 1.0:
            return next(iter(terms))
        return " + ".join(f"{w:g}*{m}" for m, w in terms.items())


class Design(Model):
    """What the study measures before the sampler takes over (see autotune/study/design.py)."""

    prior: bool = Field(
        default=True,
        description="start with the Go-aware points: GOMAXPROCS at the CPU limit (and the "
                    "runtime's own default), GOGC raised, no forced GC",
    )
    points: Count | Literal["auto"] = Field(
        default="auto",
        description="space-filling (farthest-point) configurations after the prior; auto: "
                    "a quarter of study.trials, at least 2",
    )


class Study(Model):
    trials: Count = Field(default=30, ge=1, le=100000, description="COMPLETE search trials")
    deadline: Duration | None = Field(default=None, description="no trial starts past this")
    sampler: Literal["auto", "gp", "tpe", "random", "grid"] = "auto"
    seed: Count | None = None
    design: Design = Field(default_factory=Design)
    enqueue: tuple[dict[str, Scalar], ...] = Field(
        default=(), description="your own candidates, measured first (origin: enqueued)"
    )
    storage: str | None = Field(
        default=None, description="SQLAlchemy URL (default sqlite:///results/<name>/study.db)"
    )
    heartbeat: Duration = Field(default=10.0, gt=0)
    stop_after_failures: Count = Field(
        default=5, ge=1, description="stop the study after this many failed trials in a row"
    )
    early_stop: Count | None = Field(
        default=None, ge=1, le=1000,
        description="stop the search once this many sampler-chosen trials in a row have not "
                    "improved the best by more than the baseline repeats' relative range "
                    "(autotune/study/night/early_stop.py); a resumed study that already meets it "
                    "searches no further",
    )


class Experiment(Model):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    target: Target
    parameters: tuple[Parameter, ...] = Field(min_length=1)
    baseline: Baseline = Field(default_factory=Baseline)
    chaos: Chaos
    prometheus: Prometheus = Field(default_factory=Prometheus)
    measure: Measure = Field(default_factory=Measure)
    metrics: dict[str, str | Metric] = Field(min_length=1)
    objective: Goal | tuple[Goal, ...]
    constraints: tuple[str, ...] = ()
    study: Study = Field(default_factory=Study)

    @property
    def goals(self) -> tuple[Goal, ...]:
        return self.objective if isinstance(self.objective, tuple) else (self.objective,)

    @property
    def parsed_constraints(self) -> tuple[Constraint, ...]:
        return tuple(parse_constraint(c) for c in self.constraints)

    def metric(self, name: str) -> Metric:
        spec = self.metrics[name]
        return spec if isinstance(spec, Metric) else Metric(query=spec)

    @property
    def required_metrics(self) -> frozenset[str]:
        """Metrics the objective or a constraint needs; a trial fails without them."""
        names = {m for goal in self.goals for m in goal.terms}
        names.update(c.metric for c in self.parsed_constraints)
        if self.measure.load is not None:
            names.add(self.measure.load.metric)
        return frozenset(names)

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    def baseline_settings(self) -> dict[str, Setting]:
        return {p.name: self.baseline.params.get(p.name) for p in self.parameters}

    @property
    def max_trial_seconds(self) -> float:
        """A generous bound on one trial, used to fail trials left RUNNING by a dead process."""
        apply = 60.0
        if self.target.local is not None:
            apply = self.target.local.ready_timeout
        elif self.target.kubernetes is not None:
            apply = self.target.kubernetes.rollout_timeout
        elif self.target.simulated is not None:
            apply = self.target.simulated.apply_seconds
        one = apply + self.measure.warmup + self.measure.window + 120.0
        return one * (1 + self.measure.noise_guard.retries)
