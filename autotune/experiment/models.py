"""The experiment file as frozen, typed models.

Pydantic checks structure (types, unknown keys, ranges of single fields); the cross-field rules
(a baseline value inside its parameter's range, objectives naming known metrics, ...) live in
``checks.py`` so that every problem is reported with its path in the file.

Its size (~820 lines) is the whole schema of an experiment file, kept in one place so that a
reader (and ``autotune schema``) sees every field and its description together.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
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

from autotune import redaction
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

    name: str = Field(
        pattern=IDENT_PATTERN,
        description="the parameter's name: the key in baseline.params, study.enqueue and "
                    "target.simulated, and its name in reports; unique",
    )
    env: str | None = Field(
        default=None, pattern=IDENT_PATTERN,
        description="the environment variable it sets (default: name); unique. GOMAXPROCS, "
                    "GOGC and GOMEMLIMIT are checked against the values Go accepts; Go's "
                    "variables in another case (gogc) are refused: Go reads only upper case",
    )
    type: Literal["int", "float", "categorical"] = Field(
        description="int and float: a range (low, high) or a list of values; categorical: a "
                    "list of values, which needs values",
    )
    values: tuple[Scalar, ...] | None = Field(
        default=None,
        description="the allowed values, tried as they are (numbers for int and float); "
                    "instead of low/high/step/log",
    )
    low: Number | None = Field(
        default=None,
        description="the smallest value of a range (inclusive; an integer for int, > 0 with "
                    "log); required without values",
    )
    high: Number | None = Field(
        default=None,
        description="the largest value of a range (inclusive, > low; an integer for int); "
                    "required without values",
    )
    step: Number | None = Field(
        default=None, gt=0,
        description="spacing of the values from low (an integer for int; not with log); "
                    "default: any integer for int, any number for float. The grid sampler "
                    "needs it for a float range",
    )
    log: bool = Field(
        default=False,
        description="sample the range on a logarithmic scale (for ranges spanning orders of "
                    "magnitude, e.g. GOGC 25..1600); needs low > 0 and no step",
    )
    description: str = Field(default="", description="a note for readers of the file; "
                                                     "autotune does not use it")

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

    repeats: Count = Field(
        default=3, ge=1, le=50,
        description="how many times the baseline is measured at the start of a study; their "
                    "spread is the noise study.early_stop compares improvements with",
    )
    params: dict[str, Setting] = Field(
        default_factory=dict,
        description="the value of each parameter in production today, by parameter name; a "
                    "parameter left out or null is measured with its variable unset",
    )


DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
"""A namespace's or a container's name (apimachinery's IsDNS1123Label, used by the API server's
ValidateNamespaceName and ValidateContainers): checked here so that a name the API server would
refuse (or ``../..``, which would name a file outside results/) never gets that far."""
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Deployment's name (IsDNS1123Subdomain, at most 253 characters)."""


WINDOW_MARGIN = 120.0
"""Seconds per stressed window besides its warm-up and length: injecting, verifying and removing
its stress, reading its metrics."""
LOAD_URL_PATTERN = r"^http://[^/@\s]+(/\S*)?$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]{1,253}$"
"""A key of a Secret's data (apimachinery's IsConfigMapKey)."""
REQUEST_MOUNT = "/etc/autotune-request"
"""Where the generator pod finds ``target.kubernetes.load.request_secret``'s file."""


def _no_query_secret(value: object) -> object:
    """A load URL is written into the generator pod's spec: whoever may read pods in the
    namespace reads it (``kubectl get pod -o yaml``), so a credential in its query is refused
    (the same names ``redaction`` masks in a URL), and ``request_secret`` named instead."""
    if isinstance(value, str) and redaction.secrets_of(value):
        raise ValueError(
            "its query holds a credential (a parameter named like a key, token or password; "
            "the value is not shown): the URL is written into the load generator pod's spec, "
            "readable by whoever may read pods in the namespace; put the path and its query "
            "in a Secret and name it in request_secret")
    return value


def _unquoted(pattern: str, rule: str) -> Callable[[object], object]:
    """A ``pattern`` check whose error states ``rule`` and not the value: pydantic's own quotes
    the value, and these may hold a password or a token (a load URL, a path's query)."""
    compiled = re.compile(pattern)

    def check(value: object) -> object:
        if isinstance(value, str) and compiled.search(value) is None:
            raise ValueError(f"{rule} (the value is not shown: it may hold a secret)")
        return value
    return check


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
    path: Annotated[str, BeforeValidator(_unquoted(r"^/", "must start with /")),
                    WithJsonSchema({"type": "string", "pattern": "^/"})] = Field(
        default="/", description="the path (and query) every request asks for on the service")
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = Field(
        default="GET", description="the HTTP method of every request")
    body: str = Field(
        default="", description="the body of every request; passed to the generator in memory, "
                                "never on its command line, and never shown in records")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="extra headers of every request (name: value); values are never shown in "
                    "records or logs")
    connections: Count = Field(
        default=64, ge=1, le=10000,
        description="the most requests in flight at once (and kept-alive connections); "
                    "requests due beyond it wait, and their waiting counts in their latency")
    timeout: Duration = Field(
        default=5.0, gt=0,
        description="per request: one without a complete answer by then counts as an error "
                    "(reason timeout); must be > 0 (the generator refuses 0)")


class LocalTarget(Model):
    """Run the service on this machine in a CPU-limited cgroup, restarting it for each trial."""

    workload: Literal["demo"] | None = Field(
        default=None,
        description="a workload shipped with autotune, built with the Go toolchain (default: "
                    "demo, when there is no command); not with command",
    )
    command: tuple[str, ...] | None = Field(
        default=None, min_length=1,
        description="argv of your own service, instead of workload; '{port}' in an argument is "
                    "replaced by the port it must listen on (127.0.0.1)",
    )
    cwd: str | None = Field(
        default=None,
        description="the working directory of command (default: the one autotune runs in)")
    port: Count | None = Field(
        default=None, ge=1, le=65535,
        description="a fixed port for the service; default: a free port for every start. "
                    "Required when command has no '{port}'. Nothing else may listen on it when "
                    "the service starts (the trial fails, naming the port)")
    health: str = Field(
        default="/healthz", pattern=r"^/",
        description="the path polled on the service after each start: it is ready when this "
                    "answers 200")
    metrics_path: str | None = Field(
        default="/metrics", pattern=r"^/",
        description="the path of the service's Prometheus metrics, scraped during every "
                    "trial; null if it has none (measure.capture then cannot reach the service "
                    "either: it uses the same endpoint)",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="more environment variables of the service, the same for every candidate "
                    "(not a parameter's variable). The service also gets autotune's own "
                    "environment, less AUTOTUNE_* and the variable prometheus.token_env names")
    cpus: Number = Field(default=1.0, gt=0, le=256,
                         description="the service's CPU limit (CFS quota), in CPUs; the stress "
                                     "runs inside it")
    isolation: Literal["auto", "cpuset", "cgroup", "affinity"] = Field(
        default="auto",
        description="cpuset: the service (and its stress) get their own CPU(s) and quota, the "
                    "load generator and Prometheus the others; cgroup: quota only; affinity: "
                    "CPU pinning where no cgroup can be written; auto: the best this host allows",
    )
    ready_timeout: Duration = Field(
        default=30.0,
        description="how long the service has, after each start, to answer health with 200 "
                    "before the trial fails")
    load: LoadSpec = Field(default_factory=LoadSpec,
                           description="the load autotune's generator sends to the service "
                                       "during every trial")


# A Kubernetes resource quantity (apimachinery resource.Quantity), e.g. 250m, 1, 1.5, 64Mi, 1G.
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"


class LoadResources(Model):
    """Requests and limits of the load generator's container (Kubernetes quantities)."""

    cpu_request: str = Field(default="250m", pattern=_QUANTITY,
                             description="CPU request, e.g. 250m (a quarter of a CPU)")
    cpu_limit: str = Field(default="1", pattern=_QUANTITY,
                           description="CPU limit; too low a limit throttles the generator and "
                                       "the rate it sends falls short")
    memory_request: str = Field(default="64Mi", pattern=_QUANTITY,
                                description="memory request, e.g. 64Mi")
    memory_limit: str = Field(default="256Mi", pattern=_QUANTITY, description="memory limit")


class RequestSecret(Model):
    """One key of a Secret in the target's namespace, mounted into the load generator pod."""

    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253,
                      description="the Secret's name, in the Deployment's namespace")
    key: str = Field(default="request.json", pattern=SECRET_KEY_PATTERN,
                     description="the key of the Secret's data that holds the request's JSON")


class ClusterLoad(Model):
    """autotune's open-loop load generator as a pod in the target's namespace, sending to a
    Service: every trial gets the same load, and its client-side histogram
    (``loadgen_request_duration_seconds``, selected by ``{{load_selector}}``) can be the
    objective."""

    url: Annotated[str, BeforeValidator(_no_query_secret), BeforeValidator(_unquoted(
            LOAD_URL_PATTERN, "must be a plain http:// URL without a user or password and "
                              "without spaces, e.g. http://api.shop.svc:8080/")),
                   WithJsonSchema({"type": "string", "pattern": LOAD_URL_PATTERN})] = Field(
        description="the URL every request asks for, usually the Service in front of the "
                    "Deployment, e.g. http://api.shop.svc:8080/ (plain http, no user or "
                    "password)")
    rate: Number = Field(gt=0, le=1e6, description="requests per second, open loop: sent on "
                                                   "schedule whether or not answers come back")
    connections: Count = Field(default=64, ge=1, le=10000,
                               description="the most requests in flight at once (and kept-alive "
                                           "connections)")
    image: str = Field(min_length=1, description="an image with /usr/local/bin/autotune-loadgen "
                                                 "(deploy/Dockerfile builds one)")
    metrics_port: Count = Field(
        default=9100, ge=1, le=65535,
        description="the generator pod's port for /metrics and /healthz, announced to "
                    "Prometheus by prometheus.io/scrape annotations (or select the pods with a "
                    "PodMonitor)")
    ready_timeout: Duration = Field(
        default=120.0,
        description="how long the generator pod has to become ready (image pulled, serving "
                    "/healthz) before the trial fails")
    resources: LoadResources = Field(
        default_factory=lambda: LoadResources(),
        description="the generator container's requests and limits (a namespace with a "
                    "ResourceQuota rejects a pod without them)")
    image_pull_secrets: tuple[str, ...] = Field(
        default=(), description="names of Secrets in the namespace to pull the image with")
    request_secret: RequestSecret | None = Field(
        default=None,
        description="a Secret in the namespace holding what a request must not show: its path "
                    "and query, headers and body, as JSON {\"path\": \"/v1/items?api_key=...\", "
                    "\"headers\": {\"Authorization\": \"Bearer ...\"}, \"body\": \"...\"} (each "
                    "optional; the path replaces url's). Mounted read-only into the generator "
                    "pod: never in its spec, its arguments, autotune's records or logs; autotune "
                    "needs no right to read Secrets (the kubelet mounts it)")


class PoolMember(Model):
    """One more copy of the tuned Deployment that measures trials of the same study."""

    namespace: str = Field(
        pattern=DNS_LABEL, max_length=63,
        description="the copy's namespace (each member needs its own: the StressChaos "
                    "objects, the run's Lease and the load generator live there)")
    deployment: str | None = Field(
        default=None, pattern=DNS_SUBDOMAIN, max_length=253,
        description="the copy's Deployment (default: target.kubernetes."
                                  "deployment); its container has the target's container name")


class KubernetesTarget(Model):
    """Patch the env of one container of one Deployment and wait for the rollout."""

    namespace: str = Field(
        pattern=DNS_LABEL, max_length=63,
        description="the Deployment's namespace; the StressChaos objects, the run's Lease and "
                    "the load generator's pods are created there too")
    deployment: str = Field(pattern=DNS_SUBDOMAIN, max_length=253,
                            description="the name of the Deployment to tune")
    container: str = Field(
        pattern=DNS_LABEL, max_length=63,
        description="the container whose env gets the candidate's variables; the stress runs "
                    "in it")
    context: str | None = Field(
        default=None,
        description="the kubeconfig context to use (default: its current context); --context "
                    "on the command line wins")
    kubeconfig: str | None = Field(
        default=None,
        description="the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the "
                    "pod's service account when autotune runs in the cluster)")
    rollout_timeout: Duration = Field(
        default=300.0,
        description="how long each candidate's rollout has to complete (every new pod ready) "
                    "before the trial fails and the Deployment is rolled back")
    on_finish: Literal["restore", "best", "leave"] = Field(
        default="restore",
        description="what the Deployment runs when the run ends: restore: its original env; "
                    "best: the study's best feasible candidate (the original when there is "
                    "none); leave: the last candidate (the original env is kept in "
                    "results/<name>/original-env.<namespace>.<deployment>.json)")
    pprof_port: Count | None = Field(
        default=None, ge=1, le=65535,
        description="the container port serving net/http/pprof; required with measure.capture. "
                    "Reached through the API server's pod proxy, which needs get pods/proxy "
                    "(deploy/rbac-capture.yaml)")
    load: ClusterLoad | None = Field(
        default=None,
        description="run autotune's load generator as a pod in the namespace for every "
                    "measured candidate (needs deploy/rbac-load.yaml); without it, "
                    "measure.load is required")
    pool: list[PoolMember] = Field(
        default_factory=list,
        description="equivalent copies of the Deployment (e.g. the service in other namespaces, "
                    "each under its own load) that measure trials in parallel: one worker per "
                    "member, one study. The target itself is the first member; it also runs "
                    "the confirmation. Every member measures the baseline")
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

    optimum: dict[str, Scalar] = Field(
        description="the best settings, by parameter name (every parameter): where the surface "
                    "is lowest")
    unset: dict[str, Scalar] = Field(
        default_factory=dict,
        description="by parameter name, the value the simulated runtime uses when the "
                    "variable is unset (a candidate or baseline leaving a parameter unset "
                    "needs it)")
    floor: Number = Field(default=0.002, gt=0,
                          description="the surface's value at the optimum, unstressed")
    sensitivity: Number = Field(
        default=4.0, ge=0,
        description="how steeply the surface rises away from the optimum: floor x (1 + "
                    "sensitivity x d^2), d^2 the mean squared distance, each parameter's "
                    "domain scaled to 0..1")
    noise: Number = Field(default=0.03, ge=0, le=1,
                          description="relative standard deviation of every reading (0.03 = 3%)")
    stress_factor: Number = Field(
        default=3.0, ge=1,
        description="the surface is multiplied by this when stress covers the whole window "
                    "(proportionally less when it covers part of it)")
    apply_seconds: Duration = Field(
        default=0.0, description="how long applying a candidate takes (the run waits it out)")
    scenarios: dict[str, dict[str, Scalar]] = Field(
        default_factory=dict,
        description="by chaos scenario name, the optimum of the surface in that scenario's "
                    "windows (every parameter; default: optimum); a window without stress or "
                    "held Ps reads the surface of optimum")
    state_file: str | None = Field(
        default=None,
        description="the JSON file where the simulated world keeps its state (default: "
                    "results/<name>/simulated-world.json); one run at a time per file; an "
                    "existing file that is not a world's state is refused, never replaced",
    )


TARGET_KINDS = ("local", "kubernetes", "simulated", "replay")


class ReplayTarget(Model):
    """A recorded grid played back (``benchmarks/grid_local.py`` records one): each trial of a
    configuration answers with one of its recorded repeats, drawn at random, and costs the
    repeat's recorded overhead (restart, readiness) plus the experiment's warm-up and window, on
    a simulated clock. A whole ``autotune run`` then takes seconds and says how long it would
    have taken on the stack that recorded the grid.
    """

    grid: str = Field(
        min_length=1,
        description="the recorded grid (CSV: one row per trial, the configuration as "
                    "NAME=value ... with unset for a variable left unset, one column per "
                    "metric), relative to the working directory")
    cpus: Number | None = Field(
        default=None, gt=0,
        description="the CPU limit of the service the grid was recorded on (the initial "
                    "design's Go-aware prior starts from it); unknown when absent")
    window: Duration | None = Field(
        default=None, gt=0,
        description="the measurement window the grid was recorded with, when it is longer than "
                    "measure.window: each window of the replay then answers from the grid's "
                    "<metric>_first_<measure.window>s columns (grid_local.py --early), the "
                    "same trials read over their first seconds. Absent: the grid was recorded "
                    "with measure.window")


class Target(Model):
    """The service to tune and where it runs: exactly one of local, kubernetes, simulated,
    replay."""

    local: LocalTarget | None = Field(
        default=None, description="a service run on this machine, restarted for every trial")
    kubernetes: KubernetesTarget | None = Field(
        default=None, description="a Deployment in a cluster, patched for every trial")
    simulated: SimulatedTarget | None = Field(
        default=None, description="a simulated service, to try autotune without one")
    replay: ReplayTarget | None = Field(
        default=None, description="a recorded grid played back on a simulated clock, to "
                                  "measure how a whole run would go in seconds")

    @property
    def kind(self) -> str:
        for kind in TARGET_KINDS:
            if getattr(self, kind) is not None:
                return kind
        return "none"


MEMORY_SIZE_PATTERN = r"^([1-9][0-9]{0,8}(B|KB|KiB|MB|MiB|GB|GiB)|([1-9][0-9]?|100)%)$"


class MemoryStress(Model):
    """Memory stress as Chaos Mesh's StressChaos ``stressors.memory`` (memStress) / stress-ng
    ``--vm --vm-hang 0``: ``size`` of memory written once and held, split over the workers."""

    workers: Count = Field(ge=1, le=8192, description="workers that share size between them")
    size: str = Field(
        pattern=MEMORY_SIZE_PATTERN,
        description="memory all workers hold together: a number with B, KB, KiB, MB, MiB, GB "
                    "or GiB, or 1%..100% (of the node's memory with Chaos Mesh, of the host's "
                    "locally), e.g. 256MB; locally nothing limits the service's memory, and a size "
                    "above 75% of the host's available memory is refused before the run")


class Stress(Model):
    """CPU stress as Chaos Mesh's StressChaos ``stressors.cpu`` / stress-ng ``--cpu/--cpu-load``,
    and optionally memory stress (``stressors.memory`` / ``--vm``)."""

    workers: Count = Field(
        ge=0, le=8192,
        description="CPU-burning workers, run inside the service's CPU limit (locally: in its "
                    "cgroup; on a cluster: in the tuned container of every candidate pod); 0: "
                    "none (then give memory)")
    load: Count = Field(default=100, ge=1, le=100,
                        description="percent of a CPU each worker tries to burn")
    memory: MemoryStress | None = Field(
        default=None, description="memory stress next to the CPU's: {workers, size}")

    @model_validator(mode="after")
    def _something(self) -> Stress:
        if self.workers == 0 and self.memory is None:
            raise ValueError("workers is 0 and there is no memory stress: nothing to inject "
                             "(for a scenario without stress, leave out stress)")
        return self


class Burst(Model):
    """Stress in bursts: one starts every ``every`` and lasts ``burst``, through the window."""

    every: Duration = Field(
        description="from the start of one burst to the next; at most measure.window, at least "
                    "1s longer than burst")
    burst: Duration = Field(
        description="how long each burst lasts: at least 1s (stress is delivered in whole "
                    "seconds), shorter than every")


class BlockedP(Model):
    """Goroutines of the service that hold their P without running Go code (the Go scheduler
    design's "long blocking G": a system call the scheduler is not told about, so sysmon never
    hands its P to another thread). Injected through the demo service's loopback endpoint
    ``/debug/chaos/blocked-p`` (``autotune/workloads/cmd/demo``); a local target only."""

    goroutines: Count = Field(ge=1, le=64, description="goroutines that each hold a P")
    hold: Duration = Field(gt=0, le=60,
                           description="how long each holds its P at a time, e.g. 50ms; at "
                                       "most 1m")
    gap: Duration = Field(default=0.05, le=60,
                          description="how long each lets go between two holds, e.g. 50ms; "
                                      "at most 1m")


class Scenario(Model):
    """One storm a candidate is measured under: its own window in every trial."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,30}$",
                      description="the scenario's name: metrics under it are <metric>@<name>")
    stress: Stress | None = Field(
        default=None, description="the CPU (and memory) stress of the window; none: no stress")
    pattern: Literal["continuous"] | Burst = Field(
        default="continuous",
        description="continuous: stressed through the whole window; or bursts {every, burst}")
    blocked_p: BlockedP | None = Field(
        default=None, description="goroutines holding their Ps through the window (local "
                                  "demo service only)")
    weight: float = Field(
        default=1.0, gt=0, le=1e6,
        description="with combine: weighted, how often production sees this scenario "
                    "(relative to the others')")

    @property
    def quiet(self) -> bool:
        return self.stress is None and self.blocked_p is None


SINGLE_SCENARIO = "stress"
"""The name the one scenario of ``chaos.stress`` goes by in records."""


class Chaos(Model):
    """The stress every trial is measured under: one (``stress``), or several scenarios, each
    measured in its own window of every trial and combined into the objective."""

    stress: Stress | None = Field(
        default=None,
        description="the CPU stress injected during the window (one scenario; or give "
                    "scenarios)")
    pattern: Literal["continuous"] | Burst = Field(
        default="continuous",
        description="continuous: stressed through the whole window; or bursts {every, burst}")
    scenarios: tuple[Scenario, ...] = Field(
        default=(),
        description="instead of stress: several named storms; every trial measures each in "
                    "its own window, in an order that rotates from trial to trial")
    combine: Literal["worst", "weighted"] = Field(
        default="worst",
        description="how scenarios make one value of a metric: worst (the objective's and the "
                    "constraints' worst scenario; other metrics: the mean) or weighted (the "
                    "scenarios' weighted mean); <metric>@<scenario> names one scenario's value")

    @model_validator(mode="after")
    def _one_way(self) -> Chaos:
        if (self.stress is None) == (not self.scenarios):
            raise ValueError("give exactly one of stress (one stress) and scenarios")
        if self.scenarios and self.pattern != "continuous":
            raise ValueError("pattern goes inside each scenario when scenarios are given")
        names = [s.name for s in self.scenarios]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"scenario names must differ: {', '.join(twice)} twice")
        return self

    def runs(self) -> tuple[Scenario, ...]:
        """Every scenario a trial measures; ``stress`` alone is one, named ``stress``."""
        if self.scenarios:
            return self.scenarios
        return (Scenario(name=SINGLE_SCENARIO, stress=self.stress, pattern=self.pattern),)

    @property
    def several(self) -> bool:
        return len(self.scenarios) > 1

    def canonical(self) -> dict[str, object]:
        """As JSON, leaving out what scenarios added while it has its default: one
        ``chaos.stress`` dumps exactly as before them, so the nightly environment fingerprint
        of an existing study does not change with the upgrade."""
        out = self.model_dump(mode="json")
        if not self.scenarios:
            del out["scenarios"], out["combine"]
            stress = out.get("stress")
            if isinstance(stress, dict) and stress.get("memory") is None:
                del stress["memory"]
        return out

    @property
    def stresses(self) -> tuple[Stress, ...]:
        """The stress of every scenario that has one, in the file's order."""
        return tuple(s.stress for s in self.runs() if s.stress is not None)


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
    """Where the metrics are read: an existing Prometheus, or (local targets) a private one."""

    url: Annotated[
        str | None,
        BeforeValidator(_prometheus_url),
        WithJsonSchema({"anyOf": [{"type": "string", "pattern": PROMETHEUS_URL_PATTERN},
                                  {"type": "null"}]}),
    ] = Field(
        default=None,
        description="an existing Prometheus (http:// or https://; a user and password in it are "
                    "sent as HTTP basic auth); required for a kubernetes target; omit for local "
                    "targets to start a private one",
    )
    scrape_interval: Duration = Field(
        default=1.0, gt=0,
        description="how often Prometheus scrapes the service; autotune's private one scrapes at "
                    "this (default 1s). For an existing server (url) what it reports wins "
                    "(/api/v1/targets, /api/v1/status/config); where it reports neither (a query "
                    "front end) a value set here is used, else the spacing of the service's up "
                    "samples, else autotune refuses to start. The default is never assumed for "
                    "an existing server",
    )
    token_env: str | None = Field(
        default=None,
        description="the name of an environment variable holding a bearer token, sent as "
                    "Authorization: Bearer; wins over token_file; a local service does not "
                    "inherit the variable")
    token_file: str | None = Field(
        default=None,
        description="a file holding a bearer token (surrounding whitespace removed), e.g. a "
                    "mounted service account token")
    verify_tls: bool = Field(
        default=True,
        description="check the https server's certificate; false accepts any (ignored when "
                    "ca_file is set)")
    ca_file: str | None = Field(
        default=None,
        description="a PEM file of the CA certificate(s) to check the https server's "
                    "certificate with (default: the system's)")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="extra headers of every request to Prometheus (e.g. X-Scope-OrgID for a "
                    "multi-tenant front end); values are never shown in messages")
    timeout: Duration = Field(
        default=10.0, gt=0,
        description="the most one request to Prometheus may take, the whole answer included")


class NoiseGuard(Model):
    """Re-measure a trial when other processes on the host used too much CPU during it."""

    enabled: bool = Field(
        default=True,
        description="watch the host's other processes during every window (local targets "
                    "only: a cluster node's other tenants are not observable)")
    max_foreign_cores: Number = Field(
        default=0.3, ge=0,
        description="the most CPU, in cores averaged over the window, that processes other "
                    "than autotune's may use before the window is measured again")
    retries: Count = Field(
        default=2, ge=0, le=10,
        description="how many times a noisy window is measured again before the trial fails")


class LoadCheck(Model):
    """Trials compare only under the same load: a window whose served request rate differs from
    the baseline's by more than ``tolerance`` is not a measurement (the trial fails with the
    figures). Required for a kubernetes target without ``target.kubernetes.load``, where autotune
    does not generate the load."""

    metric: str = Field(description="a metric giving the request rate served in the window")
    tolerance: Number = Field(default=0.1, gt=0, le=1,
                             description="largest relative difference from the baseline's "
                                         "median rate (0.1 = 10%)")


class Measure(Model):
    """How each candidate is measured: warm-up, then a stressed window the metrics cover."""

    warmup: Duration = Field(
        default=20.0,
        description="unstressed time after a candidate is up (healthy, or rolled out) and "
                    "before the stress and the window start")
    window: Duration = Field(
        default=60.0,
        description="the stressed measurement window the metrics are read over ({{window}}); "
                    "> 0 and, except for simulated targets, at least 4 scrape "
                    "intervals")
    noise_guard: NoiseGuard = Field(
        default_factory=NoiseGuard,
        description="measure a window again when other processes on the host were busy")
    load: LoadCheck | None = Field(
        default=None,
        description="compare trials only under the same served load; required for a "
                    "kubernetes target without target.kubernetes.load")
    insight: bool = Field(
        default=True, description="per trial, the scheduling-latency and GC-pause distributions "
                                  "over the window, where the CPU went (/cpu/classes, CFS "
                                  "throttling) and the run queues where Go >= 1.26 exports "
                                  "them, for the report's explanation; read from Prometheus "
                                  "(not for simulated targets), never failing a trial")
    schedtrace: bool | Duration = Field(
        default=False,
        description="run the service with GODEBUG=schedtrace=<period> (true: 100ms; from 100ms "
                    "to 500ms) and keep the run queues per trial, for the schedtrace metrics "
                    "and the overflow detector. Local: read from the service's output. "
                    "Kubernetes: merged into the container's GODEBUG (which must be a plain "
                    "value, not from a ConfigMap or Secret) and read from the pods' logs, which "
                    "needs get pods/log (deploy/rbac-schedtrace.yaml)")
    overflow_threshold: Count | None = Field(
        default=None, ge=1,
        description="run-queue overflow: the p99.9 of runnable goroutines held at least this "
                    "high for >= 2.5 s, in the schedtrace or in Go >= 1.26's runnable gauge "
                    "(default 128 x GOMAXPROCS)")
    capture: tuple[Literal["trace", "cpu"], ...] = Field(
        default=(),
        description="after a confirmation, a runtime trace and/or CPU profile of the baseline "
                    "and the recommendation, each under stress for min(5s, window), written to "
                    "results/<name>/captures/ for go tool trace / go tool pprof. The service "
                    "must serve net/http/pprof. Local: on its own port (the demo does with "
                    "DEBUG_PPROF=1, which autotune sets). Kubernetes: on "
                    "target.kubernetes.pprof_port, through the API server's pod proxy, which "
                    "needs get pods/proxy (deploy/rbac-capture.yaml). Not for simulated targets")

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
    """A named figure of each trial's window: a PromQL query or a schedtrace figure."""

    query: str = Field(
        default="",
        description="PromQL evaluated at the window's end; {{selector}} becomes the label "
                    "matchers of the candidate's series, {{load_selector}} those of the load "
                    "generator's, {{window}} the window's length (e.g. 60s). A simulated target "
                    "answers only surface and stress")
    schedtrace: Literal[SCHEDTRACE_METRICS] | None = Field(  # type: ignore[valid-type]
        default=None, description="instead of a query: a figure of the window's schedtrace "
                                  "(needs measure.schedtrace)")
    description: str = Field(default="", description="a note for readers of the file; "
                                                     "autotune does not use it")
    unit: str = Field(default="", description="the unit shown next to the metric's values in "
                                              "reports and plots, e.g. s or req/s")

    @model_validator(mode="after")
    def _one_source(self) -> Metric:
        if bool(self.query) == (self.schedtrace is not None):
            raise ValueError("give exactly one of query (PromQL) and schedtrace")
        return self


class Goal(Model):
    """Minimize or maximize one metric, or a weighted sum of metrics."""

    minimize: str | dict[str, float] | None = Field(
        default=None,
        description="a metric's name, or {metric: weight, ...} for a weighted sum; exactly one "
                    "of minimize and maximize")
    maximize: str | dict[str, float] | None = Field(
        default=None,
        description="a metric's name, or {metric: weight, ...} for a weighted sum; exactly one "
                    "of minimize and maximize")

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
        description="start with the Go-aware points: GOMAXPROCS at the CPU limit (and at the "
                    "runtime's own default, and at twice that), GOGC raised, no forced GC",
    )
    points: Count | Literal["auto"] = Field(
        default="auto",
        description="space-filling (farthest-point) configurations after the prior; auto: "
                    "a quarter of study.trials, at least 2",
    )


class Screening(Model):
    """Ending a hopeless search trial part-way through its window (autotune/study/screening.py)."""

    after: Duration = Field(
        gt=0,
        description="read the objective over the window's first this many seconds, while the "
                    "stress runs; shorter than measure.window and at least 4 scrape intervals")
    factor: float = Field(
        default=3.0, ge=1.5, le=1000,
        description="screen the candidate out when that reading is worse than this many times "
                    "the best value measured so far (raised to 1 + 2 x the baseline repeats' "
                    "relative range when that is larger)")


class Study(Model):
    """The search: how many trials, which sampler, where the study is stored."""

    trials: Count = Field(
        default=30, ge=1, le=100000,
        description="how many search trials to complete, over all runs of the study (baseline "
                    "repeats and confirmation runs not counted); --trials overrides it")
    deadline: Duration | None = Field(
        default=None,
        description="the time a run may take, from its start: a search trial starts only if it "
                    "and the trials kept for the confirmation still fit, and a confirmation or "
                    "drift run only if it still fits (else the night ends there, with a verdict "
                    "on the runs done); at least one trial (warmup + window)")
    sampler: Literal["auto", "gp", "tpe", "random", "grid"] = Field(
        default="auto",
        description="the Optuna sampler after the initial design: gp (Gaussian process, needs "
                    "autotune[gp]), tpe, random, or grid (every parameter needs values or a "
                    "step, at most 10000 values each); auto: tpe, whatever is installed (the "
                    "sampler the replayed figures are measured with)")
    seed: Count | None = Field(
        default=None,
        description="seed of the sampler, the initial design and the confirmation's order, for "
                    "repeatable runs (default: none, random)")
    design: Design = Field(default_factory=Design,
                           description="the configurations measured before the sampler's own")
    enqueue: tuple[dict[str, Scalar], ...] = Field(
        default=(),
        description="your own candidates, measured first (origin: enqueued); each gives every "
                    "parameter a value",
    )
    storage: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the study's database (default "
                    "sqlite:///results/<name>/study.db; SQLite waits up to 60 s for another "
                    "process's lock, ?timeout=SECONDS on the URL changes that); --storage and "
                    "$AUTOTUNE_STORAGE win",
    )
    heartbeat: Duration = Field(
        default=10.0, gt=0,
        description="how often a running trial tells the storage it is alive (whole seconds, "
                    "at least 1); a trial silent for 6 heartbeats is taken for one whose process "
                    "died, and failed")
    stop_after_failures: Count = Field(
        default=5, ge=1, description="stop the study after this many failed trials in a row"
    )
    early_stop: Count | None = Field(
        default=3, ge=1, le=1000,
        description="the search's stop rule: stop once this many sampler-chosen trials in a "
                    "row have not improved the best by more than the baseline repeats' "
                    "relative range, so study.trials is a ceiling "
                    "(autotune/study/night/early_stop.py; null: search until study.trials); "
                    "only with one objective and at least 2 baseline repeats. A resumed study "
                    "that already meets it searches no further",
    )
    screening: Screening | None = Field(
        default=None,
        description="end a search trial early when its first seconds show it is hopeless (its "
                    "stress removed; recorded as screened, with the reading); null: every "
                    "trial is measured in full. One objective, one chaos stress only",
    )


class Experiment(Model):
    """An experiment file: what to tune, under which stress, measured how, towards which goal."""

    name: str = Field(
        pattern=NAME_PATTERN,
        description="the study's name: results go to results/<name>/, and it labels what "
                    "autotune creates in a cluster")
    description: str = Field(default="", description="free text, shown at the top of the report")
    target: Target = Field(description="the service to tune")
    parameters: tuple[Parameter, ...] = Field(
        min_length=1, description="the runtime settings to tune, each an environment variable")
    baseline: Baseline = Field(
        default_factory=Baseline,
        description="the settings in production today, measured for comparison")
    chaos: Chaos = Field(description="the stress every measurement is made under")
    prometheus: Prometheus = Field(default_factory=Prometheus,
                                   description="where the metrics are read")
    measure: Measure = Field(default_factory=Measure,
                             description="how each candidate is measured")
    metrics: dict[str, str | Metric] = Field(
        min_length=1,
        description="named figures of each window: a PromQL query (text), or {query, unit, ...}")
    objective: Goal | tuple[Goal, ...] = Field(
        description="what to optimize: one goal, or a list of goals (several objectives: the "
                    "result is a Pareto front)")
    constraints: tuple[str, ...] = Field(
        default=(),
        description="conditions a candidate must meet to be recommended, each '<metric> <op> "
                    "<number>' with op one of <=, <, >=, > (e.g. 'error_rate <= 0.01')")
    study: Study = Field(default_factory=Study, description="the search")

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

    def pool_members(self) -> tuple[Experiment, ...]:
        """A kubernetes target with ``pool``: the experiment aimed at each member, the target
        itself first (each member's copy has no pool). Otherwise: this experiment alone."""
        spec = self.target.kubernetes
        if spec is None or not spec.pool:
            return (self,)
        aims = [(spec.namespace, spec.deployment)] + [
            (m.namespace, m.deployment or spec.deployment) for m in spec.pool]
        return tuple(
            self.model_copy(update={"target": self.target.model_copy(update={
                "kubernetes": spec.model_copy(update={
                    "namespace": namespace, "deployment": deployment, "pool": []})})})
            for namespace, deployment in aims)

    @property
    def member(self) -> str | None:
        """``namespace/deployment`` of a kubernetes target (a pool's member is named so)."""
        spec = self.target.kubernetes
        return None if spec is None else f"{spec.namespace}/{spec.deployment}"

    @property
    def measured_seconds(self) -> float:
        """The warm-ups and windows of one trial: one of each per chaos scenario."""
        return len(self.chaos.runs()) * (self.measure.warmup + self.measure.window)

    @property
    def max_trial_seconds(self) -> float:
        """A generous bound on one trial, used to fail trials left RUNNING by a dead process."""
        apply = 60.0
        if self.target.local is not None:
            apply = self.target.local.ready_timeout
        elif self.target.kubernetes is not None:
            apply = self.target.kubernetes.rollout_timeout
            if self.target.kubernetes.load is not None:  # its pod starts within the trial
                apply += self.target.kubernetes.load.ready_timeout
        elif self.target.simulated is not None:
            apply = self.target.simulated.apply_seconds
        elif self.target.replay is not None:
            apply = 0.0  # its recorded overhead runs on a simulated clock
        return self._bound(apply)

    def _bound(self, apply: float) -> float:
        # Generous on purpose: the run Lease must outlive the longest trial (renewed once per
        # trial; a Lease that expires mid-window lets a second run take the target over), and
        # on a cluster a trial also waits for Prometheus (discovery, scrapes) and for its stress
        # to go, which the per-window margin does not itemise. The noise guard's factor pads it
        # there, where no window is re-measured (review finding: without it, 560 s for
        # experiments/api.yaml fell short of a slow trial's waits).
        one = apply + self.measured_seconds + WINDOW_MARGIN * len(self.chaos.runs())
        return one * (1 + self.measure.noise_guard.retries)

    @property
    def load_seconds(self) -> float:
        """How long ``target.kubernetes.load``'s generator pod may live: it starts once the
        candidate is rolled out, so the trial's bound without the rollout (review finding: the
        whole bound, 1860 s with experiments/api.yaml's values and the default readiness
        timeout, kept a killed run's load on production for 31 minutes; now 960 s)."""
        ready = 0.0
        if self.target.kubernetes is not None and self.target.kubernetes.load is not None:
            ready = self.target.kubernetes.load.ready_timeout
        return self._bound(ready)
