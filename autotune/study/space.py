"""The experiment's parameters as Optuna distributions, and settings as environment variables."""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Mapping
from typing import Any

import optuna

from autotune.experiment.models import MAX_ENUMERATED, Experiment, Parameter, Scalar, Setting


def suggest(trial: optuna.Trial, exp: Experiment) -> dict[str, Setting]:
    return {p.name: _suggest_one(trial, p) for p in exp.parameters}


def _suggest_one(trial: optuna.Trial, p: Parameter) -> Scalar:
    if p.values is not None:
        choice = trial.suggest_categorical(p.name, list(p.values))
        assert choice is not None  # values never hold null (checked when loading)
        return choice
    assert p.low is not None and p.high is not None
    if p.type == "int":
        return int(trial.suggest_int(p.name, int(p.low), int(p.high), step=int(p.step or 1),
                                     log=p.log))
    return float(trial.suggest_float(p.name, p.low, p.high, step=p.step, log=p.log))


def describe_space(exp: Experiment) -> dict[str, Any]:
    """A JSON-able fingerprint of the search space, compared on resume."""
    out: dict[str, Any] = {}
    for p in exp.parameters:
        out[p.name] = {"env": p.env_var, "type": p.type}
        if p.values is not None:
            out[p.name]["values"] = list(p.values)
        else:
            out[p.name].update(low=p.low, high=p.high, step=p.step, log=p.log)
    return out


def grid(exp: Experiment) -> dict[str, list[Any]]:
    """Every value of every parameter, for the grid sampler (checks guarantee it is finite)."""
    space: dict[str, list[Any]] = {}
    for p in exp.parameters:
        values = domain(p)
        assert values is not None, f"{p.name} is continuous"
        space[p.name] = values
    return space


def to_env(exp: Experiment, settings: dict[str, Setting]) -> dict[str, str | None]:
    """Parameter values to environment variables; ``None`` means "leave unset"."""
    env: dict[str, str | None] = {}
    for p in exp.parameters:
        value = settings.get(p.name)
        env[p.env_var] = None if value is None else p.format(value)
    return env


# --- the space as a set of cells, for the initial design and for not measuring a cell twice ----

def settings_key(settings: Mapping[str, Any]) -> str:
    """One configuration's identity (trials with equal settings measured the same thing)."""
    return json.dumps(dict(settings), sort_keys=True)


def domain(p: Parameter) -> list[Scalar] | None:
    """Every value ``p`` can take, ordered (numbers ascending), or None for a continuous range."""
    if p.values is not None:
        values = list(p.values)
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            values.sort(key=float)
        return values
    assert p.low is not None and p.high is not None
    if p.type == "float" and p.step is None:
        return None
    step = p.step or 1.0
    n = math.floor((p.high - p.low) / step + 1e-9) + 1
    if n > MAX_ENUMERATED:
        return None
    values_f = [p.low + i * step for i in range(n)]
    return [int(v) for v in values_f] if p.type == "int" else list(values_f)


def size(exp: Experiment) -> int | None:
    """How many distinct configurations the space holds, or None if it is continuous."""
    total = 1
    for p in exp.parameters:
        values = domain(p)
        if values is None:
            return None
        total *= len(values)
    return total


def candidates(exp: Experiment, limit: int, rng: random.Random) -> list[dict[str, Scalar]]:
    """Every configuration when there are at most ``limit``; else ``limit`` drawn at random."""
    domains = {p.name: domain(p) for p in exp.parameters}
    n = size(exp)
    if n is not None and n <= limit:
        names = list(domains)
        return [dict(zip(names, combo, strict=True))
                for combo in itertools.product(*(domains[k] or [] for k in names))]
    return [{p.name: _draw(p, domains[p.name], rng) for p in exp.parameters}
            for _ in range(limit)]


def _draw(p: Parameter, values: list[Scalar] | None, rng: random.Random) -> Scalar:
    if values is not None:
        return rng.choice(values)
    assert p.low is not None and p.high is not None
    if p.log:
        x = math.exp(rng.uniform(math.log(p.low), math.log(p.high)))
    else:
        x = rng.uniform(p.low, p.high)
    if p.type == "int":
        return min(int(p.high), max(int(p.low), round(x)))
    if p.step is not None:
        return p.low + round((x - p.low) / p.step) * p.step
    return x


def coordinates(exp: Experiment, settings: Mapping[str, Any]) -> tuple[float, ...]:
    """A configuration in [0, 1]^n: a listed value by its rank, a range value by its position
    (log scale for ``log`` ranges), so that distances compare across parameters."""
    out = []
    for p in exp.parameters:
        value = settings[p.name]
        values = domain(p) if p.values is not None else None
        if values is not None:
            rank = next((i for i, v in enumerate(values)
                         if v == value and type(v) is type(value)), None)
            if rank is None:
                rank = values.index(value)
            out.append(rank / (len(values) - 1) if len(values) > 1 else 0.5)
            continue
        assert p.low is not None and p.high is not None
        x, lo, hi = float(value), p.low, p.high
        if p.log:
            x, lo, hi = math.log(x), math.log(lo), math.log(hi)
        out.append((x - lo) / (hi - lo) if hi > lo else 0.5)
    return tuple(out)


def distance(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return math.dist(a, b)


def nearest_unmeasured(
    exp: Experiment, proposal: Mapping[str, Any], taken: set[str]
) -> dict[str, Scalar] | None:
    """The configuration closest to ``proposal`` whose key is not in ``taken`` (None when every
    configuration is taken). Only for a finite space."""
    here = coordinates(exp, proposal)
    free = [c for c in candidates(exp, MAX_ENUMERATED, random.Random(0))
            if settings_key(c) not in taken]
    if not free:
        return None
    return min(free, key=lambda c: (distance(here, coordinates(exp, c)), settings_key(c)))
