"""Cross-field rules of the experiment file. Each problem names its path in the file."""

from __future__ import annotations

import re

from autotune.experiment.expressions import parse_constraint
from autotune.experiment.models import (
    MAX_ENUMERATED,
    Experiment,
    Parameter,
    Scalar,
    _is_number,
)
from autotune.metrics.promql import KNOWN_PLACEHOLDERS, placeholders


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


def _check_prometheus(exp: Experiment) -> list[str]:
    """Headers that requests would refuse at the first query (the value is not repeated: it
    may be a credential)."""
    problems = []
    for name, value in exp.prometheus.headers.items():
        if not _HTTP_TOKEN.match(name):
            problems.append(f"prometheus.headers: {name!r} is not a valid HTTP header name")
        elif value != value.strip() or not value.isprintable():
            problems.append(f"prometheus.headers.{name}: the value has a line break, a control "
                            "character or leading/trailing whitespace")
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
        problems += _check_domain(p, at)
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
        problems = []
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
    for j, v in enumerate(p.values):
        where = f"{at}.values[{j}]"
        if p.type == "int" and (isinstance(v, bool) or not isinstance(v, int)):
            problems.append(f"{where}: {v!r} is not an integer")
        elif p.type == "float" and not _is_number(v):
            problems.append(f"{where}: {v!r} is not a number")
        elif p.type == "int" and p.env_var == "GOMAXPROCS" and isinstance(v, int) and v < 1:
            problems.append(f"{where}: GOMAXPROCS must be >= 1")
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
    kinds = [k for k in ("local", "kubernetes", "simulated") if getattr(t, k) is not None]
    if len(kinds) != 1:
        return ["target: must have exactly one of local, kubernetes, simulated"
                + (f" (found {', '.join(kinds)})" if kinds else "")]
    problems = []
    if t.local is not None:
        if t.local.workload is not None and t.local.command is not None:
            problems.append("target.local: give either workload or command, not both")
        if t.local.command is not None and t.local.port is None and not any(
            "{port}" in a for a in t.local.command
        ):
            problems.append("target.local.port: required when command does not contain '{port}'")
        for key in t.local.env:
            if key in {p.env_var for p in exp.parameters}:
                problems.append(f"target.local.env.{key}: is set by a parameter; remove it here")
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
            if metric not in exp.metrics:
                problems.append(f"{at}.{goal.direction}: unknown metric {metric!r} "
                                f"(known: {', '.join(exp.metrics)})")
    for i, text in enumerate(exp.constraints):
        try:
            c = parse_constraint(text)
        except ValueError as e:
            problems.append(f"constraints[{i}]: {e}")
            continue
        if c.metric not in exp.metrics:
            problems.append(f"constraints[{i}]: unknown metric {c.metric!r} "
                            f"(known: {', '.join(exp.metrics)})")
    return problems


def _check_measure(exp: Experiment) -> list[str]:
    problems = []
    if exp.measure.window <= 0:
        problems.append("measure.window: must be > 0")
    if exp.measure.capture and exp.target.simulated is not None:
        problems.append("measure.capture: a simulated target runs no Go service to capture")
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
    if exp.target.kind != "simulated":
        needed = 4 * exp.prometheus.scrape_interval
        if exp.measure.window < needed:
            problems.append(f"measure.window: must be >= 4 scrape intervals ({needed:g}s) so "
                            "rates over the window are defined")
    pattern = exp.chaos.pattern
    if not isinstance(pattern, str):
        if pattern.burst <= 0:
            problems.append("chaos.pattern.burst: must be > 0")
        if pattern.burst >= pattern.every:
            problems.append("chaos.pattern.burst: must be shorter than every")
        if pattern.every > exp.measure.window:
            problems.append("chaos.pattern.every: must not be longer than measure.window, "
                            "or the window may see no stress")
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
    return problems
