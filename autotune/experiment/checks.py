"""Cross-field rules of the experiment file. Each problem names its path in the file.

Its size (~415 lines) is one rule per function, each with the platform fact it rests on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import sqlalchemy as sa

from autotune import redaction
from autotune.experiment.expressions import parse_constraint, split_scenario
from autotune.experiment.models import (
    MAX_ENUMERATED,
    TARGET_KINDS,
    Burst,
    Experiment,
    Parameter,
    Scalar,
    _is_number,
)
from autotune.experiment.templates import KNOWN_PLACEHOLDERS, placeholders
from autotune.insight.overflow import STEP as OVERFLOW_STEP

# --- what the platform can do ------------------------------------------------------------------

MIN_BURST = 1.0
"""The shortest stress burst (seconds). Both platforms count a stress's duration in whole seconds
(stress-ng's ``--timeout``, a StressChaos's ``spec.duration``: the dead-man switch each burst
carries), and each burst costs an injection, a verification and a removal: tens of milliseconds
locally (stress-ng started in the service's cgroup, its workers seen burning CPU), seconds on a
cluster (a StressChaos created, reported Injected by chaos-daemon, deleted and gone)."""

MIN_PAUSE = 1.0
"""The shortest unstressed part of a burst cycle (``every - burst``), for the same reasons: the
previous burst must be removed and verified gone before the next one is injected."""

SCHEDTRACE_MIN = 0.1
"""The finest ``measure.schedtrace`` period (seconds), also what ``true`` means. The runtime's
sysmon prints a line per period (~150 bytes, longer with every P) while holding the scheduler's
lock. Near 1 ms that is up to a thousand lock-holding prints a second in the service measured,
and on a cluster ~150 KB/s of log: the 8 MiB the kubelet returns fill within a minute and the
trace is incomplete. 100 ms gives the overflow detector five samples per 0.5 s step."""

SCHEDTRACE_MAX = OVERFLOW_STEP
"""The coarsest period: the overflow detector cuts the run queues into 0.5 s steps, and a step
without a sample ends an overflow burst, so a coarser trace can never show an overflow."""

MAX_RANGE_BOUND = float(2**53)
"""Parameter bounds are floats, exact integers only up to 2^53; a far wider range overflows the
sampler's arithmetic (Optuna's sampling of -1e308..1e308 raises OverflowError)."""

# --- what the Go runtime takes -----------------------------------------------------------------
# What Go (1.26: runtime/proc.go schedinit; mgcpacer.go readGOGC, readGOMEMLIMIT; string.go
# parseByteCount) does with the text of each variable. A value it ignores leaves the variable as
# good as unset: candidates that differ only there are the same configuration, and an export
# would recommend the ignored value. A GOMEMLIMIT it cannot parse stops the service at start.

GOMAXPROCS_MAX = 1024
"""Four times the largest CPU limit of a local target (``target.local.cpus`` <= 256). Ps beyond
the CPUs the service may use add only idle Ps and GC mark workers (a quarter of GOMAXPROCS run
as dedicated workers during a cycle)."""
GOGC_MAX = 2**31 - 1  # Go parses GOGC with strconv.ParseInt(s, 10, 32); larger is ignored
GOMEMLIMIT_MIN = 1 << 20
"""A limit below 1 MiB is below what the Go runtime itself needs (the GC would run without
pause), and almost always a number meant in MiB written without its unit (a bare number is
bytes)."""
GOMEMLIMIT_MAX = 2**63 - 1  # larger overflows Go's int64: a malformed GOMEMLIMIT

GO_DOMAINS = {
    "GOMAXPROCS": f"an integer from 1 to {GOMAXPROCS_MAX} (Go ignores 0, negative and "
                  "non-integer values: the variable would be as good as unset)",
    "GOGC": f"an integer from 0 to {GOGC_MAX}, or off (Go reads every negative value as off: "
            "write off; it ignores anything else)",
    "GOMEMLIMIT": "a byte count from 1MiB to 2^63-1 bytes: digits with an optional B, KiB, MiB, "
                  "GiB or TiB suffix (e.g. 512MiB; a bare number is bytes), or off (Go stops "
                  "the service at start on anything else)",
}
"""The Go runtime variables autotune knows the values of, and those values in words."""

_GO_INT = re.compile(r"-?[0-9]+")  # runtime atoi: no "+" (Go ignores "+4")
_GO_BYTES = re.compile(r"([0-9]+)(?:([KMGT])iB|B)?")  # ^[0-9]+(([KMGT]i)?B)?$ in Go
_BYTE_UNIT = {None: 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


# The variables Go's runtime reads at start (runtime/proc.go, runtime/extern.go).
GO_RUNTIME_ENV = frozenset({"GOMAXPROCS", "GOGC", "GOMEMLIMIT", "GODEBUG", "GOTRACEBACK"})


def go_value_fits(env: str, text: str) -> bool:
    """Whether Go takes ``text`` as the value of ``env`` as it is meant (always True for a
    variable not in ``GO_DOMAINS``)."""
    if env == "GOMAXPROCS":
        return _GO_INT.fullmatch(text) is not None and 1 <= int(text) <= GOMAXPROCS_MAX
    if env == "GOGC":
        return text == "off" or (_GO_INT.fullmatch(text) is not None
                                 and 0 <= int(text) <= GOGC_MAX)
    if env == "GOMEMLIMIT":
        if text == "off":
            return True
        match = _GO_BYTES.fullmatch(text)
        return match is not None and \
            GOMEMLIMIT_MIN <= int(match[1]) * _BYTE_UNIT[match[2]] <= GOMEMLIMIT_MAX
    return True


def check(exp: Experiment) -> list[str]:
    problems: list[str] = []
    problems += _check_parameters(exp.parameters)
    problems += _check_baseline(exp)
    problems += _check_target(exp)
    problems += _check_metrics(exp)
    problems += _check_measure(exp)
    problems += _check_study(exp)
    problems += _check_prometheus(exp)
    return problems


_HTTP_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _check_headers(field: str, headers: Mapping[str, str]) -> list[str]:
    """Headers that requests (or the load generator) would refuse at the first request (the
    value is not repeated: it may be a credential)."""
    problems = []
    for name, value in headers.items():
        if not _HTTP_TOKEN.match(name):
            problems.append(f"{field}: {name!r} is not a valid HTTP header name")
        elif value != value.strip() or not value.isprintable():
            problems.append(f"{field}.{name}: the value has a line break, a control "
                            "character or leading/trailing whitespace")
    return problems


def _check_prometheus(exp: Experiment) -> list[str]:
    problems = _check_headers("prometheus.headers", exp.prometheus.headers)
    config = exp.prometheus
    if config.url is not None and redaction.split_userinfo(config.url)[1] is not None and (
            config.token_env or config.token_file
            or any(k.lower() == "authorization" for k in config.headers)):
        # What the first query would refuse (metrics.prometheus: each sets Authorization).
        problems.append("prometheus.url has a user and password (HTTP basic auth), and "
                        "prometheus.token_env, token_file or an Authorization header is set "
                        "too: each sets the Authorization header; keep one")
    local = exp.target.local
    if local is not None and local.load is not None:
        problems += _check_headers("target.local.load.headers", local.load.headers)
    return problems


def _check_parameters(params: tuple[Parameter, ...]) -> list[str]:
    problems: list[str] = []
    names: dict[str, int] = {}
    envs: dict[str, int] = {}
    for i, p in enumerate(params):
        at = f"parameters[{i}]"
        if p.name in names:
            problems.append(f"{at}.name: duplicate parameter name {p.name!r} "
                            f"(also parameters[{names[p.name]}])")
        names.setdefault(p.name, i)
        if p.env_var in envs:
            problems.append(f"{at}.env: environment variable {p.env_var} is already set by "
                            f"parameters[{envs[p.env_var]}]")
        envs.setdefault(p.env_var, i)
        for j, v in enumerate(p.values or ()):
            # An exported env file is one VAR=value a line: a line break would add a variable.
            if isinstance(v, str) and not v.isprintable():
                problems.append(f"{at}.values[{j}]: {v!r} has a line break or a control "
                                "character (an exported env file would carry another line)")
        problems += _check_domain(p, at)
        problems += _check_go(p, at)
    return problems


def _check_go(p: Parameter, at: str) -> list[str]:
    """Every value of a GOMAXPROCS, GOGC or GOMEMLIMIT parameter is one Go takes as meant.
    Ranges are intervals and so are Go's domains: their bounds decide."""
    env = p.env_var
    if env != env.upper() and env.upper() in GO_RUNTIME_ENV:
        # Environment variables are case-sensitive and Go reads only the upper-case name: every
        # candidate would run with Go's default, a whole study measuring nothing.
        field = "env" if p.env else "name"
        return [f"{at}.{field}: Go reads {env.upper()}, not {env} (environment variables are "
                f"case-sensitive): write {field}: {env.upper()}"]
    if env not in GO_DOMAINS:
        return []
    if p.type == "float":
        memory = env == "GOMEMLIMIT"
        use = "use type int (bytes) or categorical (e.g. 512MiB)" if memory else "use type int"
        return [f"{at}.type: {env} takes integers: {use} (a float reaches Go as text such as "
                f"'2.5' or '100000000.0', which it {'refuses' if memory else 'ignores'})"]
    problems = []
    if p.values is not None:
        for j, v in enumerate(p.values):
            if p.type == "int" and (isinstance(v, bool) or not isinstance(v, int)):
                continue  # reported as not an integer
            if not go_value_fits(env, p.format(v)):
                problems.append(f"{at}.values[{j}]: {v!r} is not a value Go takes for {env}: "
                                f"allowed: {GO_DOMAINS[env]}")
        return problems
    for field in ("low", "high"):
        bound = getattr(p, field)
        if bound is None or not float(bound).is_integer() or abs(bound) > MAX_RANGE_BOUND:
            continue  # reported on the parameter
        if not go_value_fits(env, p.format(bound)):
            problems.append(f"{at}.{field}: {p.format(bound)} is not a value Go takes for {env}: "
                            f"allowed: {GO_DOMAINS[env]}")
    return problems


def _check_domain(p: Parameter, at: str) -> list[str]:
    ranged = p.low is not None or p.high is not None
    if p.values is not None and (ranged or p.step is not None or p.log):
        return [f"{at}: give either values or low/high[/step], not both"]
    if p.values is None:
        if p.type == "categorical":
            return [f"{at}.values: required for a categorical parameter"]
        if p.low is None or p.high is None:
            missing = "low" if p.low is None else "high"
            return [f"{at}.{missing}: required (or give values)"]
        problems = [f"{at}.{field}: must be within ±2^53 ({MAX_RANGE_BOUND:.0f}): bounds "
                    "beyond are not exact and overflow the sampler's arithmetic"
                    for field in ("low", "high") if abs(getattr(p, field)) > MAX_RANGE_BOUND]
        if p.high <= p.low:
            problems.append(f"{at}.high: must be > low ({p.low:g})")
        if p.type == "int":
            for field in ("low", "high", "step"):
                v = getattr(p, field)
                if v is not None and not float(v).is_integer():
                    problems.append(f"{at}.{field}: must be an integer for an int parameter")
        if p.log and p.low <= 0:
            problems.append(f"{at}.low: must be > 0 when log is true")
        if p.log and p.step is not None:
            problems.append(f"{at}.step: cannot be combined with log")
        return problems
    if not p.values:
        return [f"{at}.values: must not be empty"]
    problems = []
    seen: list[Scalar] = []
    wrong = [v for v in p.values
             if (p.type == "int" and (isinstance(v, bool) or not isinstance(v, int)))
             or (p.type == "float" and not _is_number(v))]
    if wrong:
        # One line for the list: values quoted by habit ("1", "2", ...) are one mistake.
        what = "an integer" if p.type == "int" else "a number"
        quoted = all(isinstance(v, str) for v in wrong)
        problems.append(f"{at}.values: every value of an {p.type} parameter must be {what}; not "
                        f"{', '.join(repr(v) for v in wrong[:6])}"
                        f"{', ...' if len(wrong) > 6 else ''}"
                        + (" (numbers are written unquoted)" if quoted else ""))
    for j, v in enumerate(p.values):
        where = f"{at}.values[{j}]"
        if any(v == s and type(v) is type(s) for s in seen):
            problems.append(f"{where}: duplicate value {v!r}")
        seen.append(v)
    return problems


def _check_baseline(exp: Experiment) -> list[str]:
    known = {p.name: p for p in exp.parameters}
    problems = []
    for name, value in exp.baseline.params.items():
        at = f"baseline.params.{name}"
        if name not in known:
            problems.append(f"{at}: unknown parameter (known: {', '.join(known)})")
            continue
        if value is None:
            continue
        domain = _outside(known[name], value)
        if domain:
            problems.append(f"{at}: {value!r} is not a value of the parameter (must be {domain}, "
                            "or null for 'unset')")
    return problems


def _outside(p: Parameter, value: Scalar) -> str | None:
    """The parameter's domain in words if ``value`` is outside it, else None."""
    if p.values is None and (p.low is None or p.high is None):
        return None  # already reported on the parameter
    if p.contains(value):
        return None
    if p.values is not None:
        return f"one of {list(p.values)}"
    return f"in [{p.low:g}, {p.high:g}]" + (f" with step {p.step:g}" if p.step else "")


def _check_target(exp: Experiment) -> list[str]:
    t = exp.target
    kinds = [k for k in TARGET_KINDS if getattr(t, k) is not None]
    if len(kinds) != 1:
        return [f"target: must have exactly one of {', '.join(TARGET_KINDS)}"
                + (f" (found {', '.join(kinds)})" if kinds else "")]
    problems = []
    if t.local is not None:
        if t.local.workload is not None and t.local.command is not None:
            problems.append("target.local: give either workload or command, not both")
        if t.local.command is not None and t.local.port is None and not any(
            "{port}" in a for a in t.local.command
        ):
            problems.append("target.local.port: required when command does not contain '{port}'")
        for key, value in t.local.env.items():
            if key in {p.env_var for p in exp.parameters}:
                problems.append(f"target.local.env.{key}: is set by a parameter; remove it here")
            elif not go_value_fits(key, value):
                problems.append(f"target.local.env.{key}: {value!r} is not a value Go takes for "
                                f"{key}: allowed: {GO_DOMAINS[key]}")
    if t.kubernetes is not None and t.kubernetes.pool:
        seen = {t.kubernetes.namespace: "target.kubernetes.namespace"}
        for i, member in enumerate(t.kubernetes.pool):
            if member.namespace in seen:
                # One namespace per member: a member's cleanup removes its study's StressChaos
                # in its namespace, which would end another member's live stress.
                problems.append(f"target.kubernetes.pool[{i}].namespace: {member.namespace!r} "
                                f"is already {seen[member.namespace]}'s: each member needs a "
                                "namespace of its own")
            seen.setdefault(member.namespace, f"target.kubernetes.pool[{i}]")
    if t.kubernetes is not None and exp.prometheus.url is None:
        problems.append("prometheus.url: required for a kubernetes target "
                        "(autotune only starts its own Prometheus for local targets)")
    if t.simulated is not None:
        known = {p.name: p for p in exp.parameters}
        for field in ("optimum", "unset"):
            for name, _value in getattr(t.simulated, field).items():
                if name not in known:
                    problems.append(f"target.simulated.{field}.{name}: unknown parameter")
        for name in known:
            if name not in t.simulated.optimum:
                problems.append(f"target.simulated.optimum.{name}: missing")
        scenarios = {s.name for s in exp.chaos.scenarios}
        for scenario, optimum in t.simulated.scenarios.items():
            at = f"target.simulated.scenarios.{scenario}"
            if scenario not in scenarios:
                problems.append(f"{at}: no such chaos scenario (chaos.scenarios: "
                                f"{', '.join(sorted(scenarios)) or 'none'})")
            elif scenario in {s.name for s in exp.chaos.scenarios if s.quiet}:
                problems.append(f"{at}: a quiet scenario injects nothing that could tell its "
                                "window apart: it reads the surface of optimum")
            problems += [f"{at}.{name}: unknown parameter" for name in optimum
                         if name not in known]
            problems += [f"{at}.{name}: missing" for name in known if name not in optimum]
    return problems


def _check_metrics(exp: Experiment) -> list[str]:
    problems = []
    for name in exp.metrics:
        if exp.metric(name).schedtrace is not None:
            if exp.measure.schedtrace_period is None:
                problems.append(f"metrics.{name}.schedtrace: needs measure.schedtrace: true")
            continue
        used = placeholders(exp.metric(name).query)
        unknown = used - KNOWN_PLACEHOLDERS
        if unknown:
            problems.append(f"metrics.{name}: unknown placeholder(s) "
                            f"{', '.join(sorted('{{' + u + '}}' for u in unknown))} "
                            "(known: {{selector}}, {{load_selector}}, {{window}})")
        cluster = exp.target.kubernetes
        if "load_selector" in used and cluster is not None and cluster.load is None:
            problems.append(f"metrics.{name}: {{{{load_selector}}}} selects the load generator's "
                            "series: it needs target.kubernetes.load")
    goals = exp.goals
    for i, goal in enumerate(goals):
        at = "objective" if len(goals) == 1 else f"objective[{i}]"
        if (goal.minimize is None) == (goal.maximize is None):
            problems.append(f"{at}: give exactly one of minimize, maximize")
            continue
        terms = goal.terms
        if not terms:
            problems.append(f"{at}.{goal.direction}: names no metric")
        for metric in terms:
            why = _unknown_metric(exp, metric)
            if why:
                problems.append(f"{at}.{goal.direction}: {why}")
    for i, text in enumerate(exp.constraints):
        try:
            c = parse_constraint(text)
        except ValueError as e:
            problems.append(f"constraints[{i}]: {e}")
            continue
        why = _unknown_metric(exp, c.metric)
        if why:
            problems.append(f"constraints[{i}]: {why}")
    return problems


def _unknown_metric(exp: Experiment, name: str) -> str | None:
    """Why ``name`` (a metric, or ``<metric>@<scenario>``) names nothing measured."""
    metric, scenario = split_scenario(name)
    if metric not in exp.metrics:
        return f"unknown metric {metric!r} (known: {', '.join(exp.metrics)})"
    if scenario is not None and scenario not in {s.name for s in exp.chaos.scenarios}:
        known = ", ".join(s.name for s in exp.chaos.scenarios) or "none: chaos has no scenarios"
        return f"unknown scenario {scenario!r} in {name!r} (chaos.scenarios: {known})"
    return None


def _check_chaos(exp: Experiment) -> list[str]:
    problems = []
    for i, scenario in enumerate(exp.chaos.runs()):
        at = f"chaos.scenarios[{i}]" if exp.chaos.scenarios else "chaos"
        pattern = scenario.pattern
        if not isinstance(pattern, str):
            problems += _check_burst(exp, at, pattern)
            if scenario.stress is None:
                problems.append(f"{at}.pattern: bursts of what? The scenario has no stress")
        if scenario.blocked_p is not None:
            if exp.target.kind not in ("local", "simulated", "replay"):
                problems.append(
                    f"{at}.blocked_p: needs a local target (it is injected through the demo "
                    "service's loopback endpoint; Chaos Mesh has no stressor that holds a Go "
                    f"P), not {exp.target.kind}")
            elif exp.target.local is not None and exp.target.local.command is not None:
                problems.append(f"{at}.blocked_p: needs the demo service (target.local without "
                                "command): it is injected through the demo's endpoint "
                                "/debug/chaos/blocked-p")
    quiet = [s.name for s in exp.chaos.scenarios if s.quiet]
    if exp.target.kind == "replay" and len(quiet) > 1:
        # The replay tells a window's scenario by the stress in it; quiet ones have none.
        problems.append(f"chaos.scenarios: a replay target tells quiet scenarios apart by "
                        f"nothing; keep one of {', '.join(quiet)}")
    return problems


def _check_burst(exp: Experiment, at: str, pattern: Burst) -> list[str]:
    problems = []
    if pattern.burst < MIN_BURST:
        problems.append(f"{at}.pattern.burst: {_ms(pattern.burst)} is shorter than 1s, the "
                        "shortest burst the platforms deliver (stress-ng's --timeout and a "
                        "StressChaos's duration are whole seconds; each burst is injected, "
                        "verified and removed: tens of ms locally, seconds on a cluster)")
    if pattern.burst >= pattern.every:
        problems.append(f"{at}.pattern.burst: must be shorter than every")
    elif pattern.every - pattern.burst < MIN_PAUSE:
        problems.append(f"{at}.pattern.every: must be at least 1s longer than burst (got "
                        f"{_ms(pattern.every)} and {_ms(pattern.burst)}): each burst is "
                        "removed and verified gone before the next is injected")
    if pattern.every > exp.measure.window:
        problems.append(f"{at}.pattern.every: must not be longer than measure.window, "
                        "or the window may see no stress")
    return problems


def _check_measure(exp: Experiment) -> list[str]:
    problems = []
    if exp.measure.window <= 0:
        problems.append("measure.window: must be > 0")
    if exp.measure.capture and exp.target.kind in ("simulated", "replay"):
        problems.append(f"measure.capture: a {exp.target.kind} target runs no Go service to "
                        "capture")
    cluster = exp.target.kubernetes
    if exp.measure.capture and cluster is not None and cluster.pprof_port is None:
        problems.append("target.kubernetes.pprof_port: required with measure.capture (the "
                        "container port where the service serves net/http/pprof)")
    load = exp.measure.load
    if load is not None and load.metric not in exp.metrics:
        problems.append(f"measure.load.metric: unknown metric {load.metric!r} "
                        f"(known: {', '.join(exp.metrics)})")
    cluster = exp.target.kubernetes
    if load is None and cluster is not None and cluster.load is None:
        problems.append("measure.load: required for a kubernetes target without "
                        "target.kubernetes.load: trials compare only under the same load; "
                        "name the metric of the served request rate, e.g. "
                        "{metric: request_rate, tolerance: 0.1}, or let autotune generate the "
                        "load (target.kubernetes.load)")
    if exp.target.kind not in ("simulated", "replay"):
        needed = 4 * exp.prometheus.scrape_interval
        if exp.measure.window < needed:
            problems.append(f"measure.window: must be >= 4 scrape intervals ({needed:g}s) so "
                            "rates over the window are defined")
    problems += _check_chaos(exp)
    period = exp.measure.schedtrace_period
    if period is not None and not SCHEDTRACE_MIN <= period <= SCHEDTRACE_MAX:
        problems.append(f"measure.schedtrace: {_ms(period)} is outside 100ms..500ms (true: "
                        "100ms): a finer period floods the service's log (a line per period, "
                        "written under the scheduler's lock; on a cluster the kubelet returns "
                        "at most 8 MiB, then the trace is incomplete), a coarser one leaves the "
                        "overflow detector's 0.5s steps without samples")
    if exp.study.sampler == "grid":
        for i, p in enumerate(exp.parameters):
            if p.values is None and p.type == "float" and p.step is None:
                problems.append(f"parameters[{i}]: the grid sampler needs values or a step")
            elif p.values is None and p.low is not None and p.high is not None and (
                    (p.high - p.low) / (p.step or 1.0) + 1 > MAX_ENUMERATED):
                problems.append(f"parameters[{i}]: more than {MAX_ENUMERATED} values is too many "
                                "for the grid sampler; give values or a larger step")
    one_trial = exp.measure.warmup + exp.measure.window
    if exp.study.deadline is not None and exp.study.deadline < one_trial:
        problems.append("study.deadline: shorter than one trial (warmup + window)")
    return problems


def _check_study(exp: Experiment) -> list[str]:
    problems = []
    if exp.study.storage is not None:
        try:
            sa.engine.make_url(exp.study.storage)
        except (sa.exc.ArgumentError, ValueError):
            # Not the value, nor the parser's words (they may quote it): it may hold a password.
            problems.append("study.storage: not a database URL (dialect+driver://user:password@"
                            "host:port/database, the port a number; the value is not shown: it "
                            "may hold a password)")
    points = exp.study.design.points
    if isinstance(points, int) and points < 0:
        problems.append("study.design.points: must be >= 0")
    known = {p.name: p for p in exp.parameters}
    for i, candidate in enumerate(exp.study.enqueue):
        at = f"study.enqueue[{i}]"
        for name, value in candidate.items():
            if name not in known:
                problems.append(f"{at}.{name}: unknown parameter (known: {', '.join(known)})")
                continue
            domain = _outside(known[name], value)
            if domain:
                problems.append(f"{at}.{name}: {value!r} is not a value of the parameter "
                                f"(must be {domain})")
        # A candidate is a full configuration: nothing is left for the sampler to fill in.
        missing = [name for name in known if name not in candidate]
        if missing:
            problems.append(f"{at}: missing {', '.join(missing)}")
    return problems + _check_screening(exp)


def _check_screening(exp: Experiment) -> list[str]:
    """Screening judges one number, read from Prometheus part-way through one window."""
    screening = exp.study.screening
    if screening is None:
        return []
    at, problems = "study.screening", []
    if screening.after >= exp.measure.window:
        problems.append(f"{at}.after: must be shorter than measure.window "
                        f"({exp.measure.window:g}s): the read is part-way through the window")
    needed = 4 * exp.prometheus.scrape_interval
    if exp.target.kind not in ("simulated", "replay") and screening.after < needed:
        problems.append(f"{at}.after: must be >= 4 scrape intervals ({needed:g}s) so rates "
                        "over it are defined")
    if len(exp.goals) != 1:
        problems.append(f"{at}: needs one objective (a screened trial has one value to judge)")
    if exp.chaos.scenarios:
        problems.append(f"{at}: not with chaos.scenarios (a candidate is judged under every "
                        "storm; one storm's first seconds do not say it is hopeless)")
    for goal in exp.goals:
        for name in goal.terms:
            if name in exp.metrics and not exp.metric(name).query:
                problems.append(f"{at}: the objective's {name} is not a Prometheus query "
                                "(screening reads the window's first seconds from Prometheus)")
    return problems


def _ms(seconds: float) -> str:
    """A period as a message shows it: 0.1ms, 1500ms, 2s."""
    return f"{seconds:g}s" if seconds >= 2 and seconds.is_integer() else f"{seconds * 1000:g}ms"
